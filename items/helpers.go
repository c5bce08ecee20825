package items

import (
	"reflect"
	"strings"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// CheckHeader is the one rule for a header an item sets, appends or
// removes: it records a problem at path unless name is a valid lower-case
// HTTP header name (not a pseudo-header, not host) and value a valid
// header value. Envoy rejects upper-case names in its header lists (HTTP/2
// requires lower case) and refuses to change :-prefixed headers and host
// through them. Values are never echoed: they may be secrets. Pass an empty
// value for a header that is only named (removed).
func CheckHeader(p *Problems, path, name, value string) {
	switch {
	case !httpguts.ValidHeaderFieldName(name):
		p.Addf(path, "must be a valid HTTP header name")
	case strings.ToLower(name) != name:
		p.Addf(path, "must be lower case (%q)", strings.ToLower(name))
	case name == "host":
		p.Addf(path, "host can't be changed by a header list (Envoy refuses it); rewrite the authority in a VirtualService instead")
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		p.Addf(path, "must be a valid header value (no control characters)")
	}
}

// RequireSomething records a problem when the enabled item it sets no key
// besides `enable`: a section that would generate an empty EnvoyFilter is
// a mistake, not a request for defaults.
func RequireSomething(p *Problems, it Item) {
	if !it.Enabled() {
		return
	}
	v := reflect.ValueOf(it)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).Type == reflect.TypeFor[Toggle]() {
			continue
		}
		if !v.Field(i).IsZero() {
			return
		}
	}
	p.Addf("", "sets nothing; give at least one key, or remove the section")
}

// OptionalBool is the wrapper of an optional key: nil when it is not set.
func OptionalBool(b *bool) *wrapperspb.BoolValue {
	if b == nil {
		return nil
	}
	return wrapperspb.Bool(*b)
}

// OptionalUInt32 is the wrapper of an optional key: nil when it is not set.
func OptionalUInt32(v *uint32) *wrapperspb.UInt32Value {
	if v == nil {
		return nil
	}
	return wrapperspb.UInt32(*v)
}

// OptionalDuration is the Duration of an optional key: nil when it is not
// set.
func OptionalDuration(s *Seconds) *durationpb.Duration {
	if s == nil {
		return nil
	}
	return durationpb.New(s.Duration)
}
