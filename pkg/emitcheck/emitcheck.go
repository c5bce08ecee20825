// Package emitcheck checks what the renderer emits, not only what the user
// wrote. Items check their input with good messages (items.Texter,
// items.Ranger); this package is the guarantee that nothing an item builds
// from it escapes the same rules: a regex made from a list of hosts, a
// header an item adds on its own, a log file path. It walks every typed
// message of a patch value (Any-packed typed configs included) and checks
// each value of a kind with a rule, for the Envoy release of the proxies
// the patch goes to:
//
//   - every envoy.type.matcher.v3.RegexMatcher regex through internal/re2
//     (program size within Envoy's limit, in the release's RE2 dialect);
//   - every substitution format string (access log text and JSON formats,
//     local reply bodies) and every header value an Envoy reads as one
//     (headers to add) through internal/envoyformat, for the release;
//   - every header name and value added (HeaderValue) or removed (headers
//     to remove) through items' header rules;
//   - every file the proxy writes (a file access log's path) through
//     items.CheckProxyFile.
//
// A Checker collects a message's values once however many releases check
// them, and checks each distinct value once per rule and release class.
package emitcheck

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
)

// Kind is what an emitted value is, as Envoy reads it.
type Kind uint8

// The kinds with a rule.
const (
	// Regex is a RegexMatcher's regex.
	Regex Kind = iota + 1
	// Format is a substitution format string Envoy parses as written.
	Format
	// HeaderName is a header the proxy adds or removes.
	HeaderName
	// HeaderValue is the value of a header the proxy adds, which Envoy
	// also parses as a format string.
	HeaderValue
	// PlainHeaderValue is a header value Envoy sends as it is (gRPC
	// initial metadata).
	PlainHeaderValue
	// ProxyFile is a file the proxy opens for writing.
	ProxyFile
)

// Value is one emitted value with a rule.
type Value struct {
	Kind Kind
	Text string
}

// The message types whose fields carry values with a rule.
const (
	regexMatcher     = "envoy.type.matcher.v3.RegexMatcher"
	formatString     = "envoy.config.core.v3.SubstitutionFormatString"
	headerValue      = "envoy.config.core.v3.HeaderValue"
	fileAccessLog    = "envoy.extensions.access_loggers.file.v3.FileAccessLog"
	anyMessage       = "google.protobuf.Any"
	initialMetadata  = "initial_metadata"
	headersToRemove  = "headers_to_remove"
	requestToRemove  = "request_headers_to_remove"
	responseToRemove = "response_headers_to_remove"
)

// Collect returns the values with a rule in m, in the order the walk meets
// them (fields in number order), repeats included.
func Collect(m proto.Message) []Value {
	var out []Value
	if m != nil {
		walk(m.ProtoReflect(), "", &out)
	}
	return out
}

// walk appends the values with a rule of m, reached through the field
// named via.
func walk(m protoreflect.Message, via protoreflect.Name, out *[]Value) {
	d := m.Descriptor()
	switch d.FullName() {
	case regexMatcher:
		*out = append(*out, Value{Regex, m.Get(d.Fields().ByName("regex")).String()})
		return
	case formatString:
		collectFormat(m, out)
		return
	case headerValue:
		kind := HeaderValue
		if via == initialMetadata {
			kind = PlainHeaderValue
		}
		*out = append(*out, Value{HeaderName, m.Get(d.Fields().ByName("key")).String()})
		if f := d.Fields().ByName("value"); m.Has(f) {
			*out = append(*out, Value{kind, m.Get(f).String()})
		}
		return
	case fileAccessLog:
		*out = append(*out, Value{ProxyFile, m.Get(d.Fields().ByName("path")).String()})
	case anyMessage:
		*out = append(*out, anyValues(m, via)...)
		return
	}
	if !mayHold(d) {
		return
	}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case f.IsList() && f.Kind() == protoreflect.StringKind:
			switch f.Name() {
			case headersToRemove, requestToRemove, responseToRemove:
				l := v.List()
				for i := range l.Len() {
					*out = append(*out, Value{HeaderName, l.Get(i).String()})
				}
			}
		case f.IsList() && isMessage(f):
			l := v.List()
			for i := range l.Len() {
				walk(l.Get(i).Message(), f.Name(), out)
			}
		case f.IsMap() && isMessage(f.MapValue()):
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(mv.Message(), f.Name(), out)
				return true
			})
		case !f.IsList() && !f.IsMap() && isMessage(f):
			walk(v.Message(), f.Name(), out)
		}
		return true
	})
}

func isMessage(f protoreflect.FieldDescriptor) bool {
	return f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind
}

// collectFormat appends a SubstitutionFormatString's format strings: its
// text format (inline or as a data source) and every string of its JSON
// format, however deep.
func collectFormat(m protoreflect.Message, out *[]Value) {
	fields := m.Descriptor().Fields()
	if f := fields.ByName("text_format"); m.Has(f) {
		*out = append(*out, Value{Format, m.Get(f).String()})
	}
	if f := fields.ByName("text_format_source"); m.Has(f) {
		src := m.Get(f).Message()
		if g := src.Descriptor().Fields().ByName("inline_string"); src.Has(g) {
			*out = append(*out, Value{Format, src.Get(g).String()})
		}
	}
	if f := fields.ByName("json_format"); m.Has(f) {
		var s structpb.Struct
		proto.Merge(&s, m.Get(f).Message().Interface())
		structStrings(structpb.NewStructValue(&s), out)
	}
}

// structStrings appends every string of a JSON value as a format string.
func structStrings(v *structpb.Value, out *[]Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		*out = append(*out, Value{Format, k.StringValue})
	case *structpb.Value_StructValue:
		for _, f := range k.StructValue.GetFields() {
			structStrings(f, out)
		}
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			structStrings(e, out)
		}
	}
}

// anyCache holds the values of the typed configs walked lately, by type
// and bytes: a render that rebuilds an item whose typed configs didn't
// change (a fleet's releases, a document's other items, the next render
// of the same document) walks each once per process. It is bounded by
// the bytes of its keys, and emptied when full.
var anyCache struct {
	sync.Mutex
	values map[anyKind]map[string][]Value // by the Any's bytes
	bytes  int
}

// anyKind is what an Any's values depend on besides its bytes.
type anyKind struct {
	via     protoreflect.Name
	typeURL string
}

// maxAnyCache bounds anyCache's keys: typed configs are small (a filter's
// configuration), so this holds several documents' worth.
const maxAnyCache = 1 << 20

// anyValues are the values with a rule of the message an Any holds,
// reached through the field named via.
func anyValues(m protoreflect.Message, via protoreflect.Name) []Value {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		a = &anypb.Any{}
		proto.Merge(a, m.Interface())
	}
	kind := anyKind{via, a.GetTypeUrl()}
	anyCache.Lock()
	vs, ok := anyCache.values[kind][string(a.GetValue())]
	anyCache.Unlock()
	if ok {
		return vs
	}
	inner, err := unpack(a)
	if err == nil && inner != nil {
		walk(inner.ProtoReflect(), via, &vs)
	}
	anyCache.Lock()
	defer anyCache.Unlock()
	size := len(a.GetValue()) + len(kind.typeURL)
	if anyCache.values == nil || anyCache.bytes+size > maxAnyCache {
		anyCache.values, anyCache.bytes = map[anyKind]map[string][]Value{}, 0
	}
	if size <= maxAnyCache/8 {
		byBytes := anyCache.values[kind]
		if byBytes == nil {
			byBytes = map[string][]Value{}
			anyCache.values[kind] = byBytes
		}
		byBytes[string(a.GetValue())] = slices.Clip(vs)
		anyCache.bytes += size
	}
	return vs
}

// unpack is the message an Any holds; nil for a type this binary doesn't
// link.
func unpack(a *anypb.Any) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl())
	if err != nil {
		return nil, nil //nolint:nilerr // unknown types hold nothing we check
	}
	inner := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), inner); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err)
	}
	return inner, nil
}

// holds caches mayHold by message type.
var holds sync.Map // protoreflect.FullName → bool

// mayHold reports whether a message of type d can hold, at any depth, a
// value with a rule: one of the types above, an Any, or a list of headers
// to remove. Types that can't (durations, addresses, most of a cluster)
// are not walked.
func mayHold(d protoreflect.MessageDescriptor) bool {
	if v, ok := holds.Load(d.FullName()); ok {
		return v.(bool)
	}
	seen := map[protoreflect.FullName]bool{}
	var reach func(d protoreflect.MessageDescriptor) bool
	reach = func(d protoreflect.MessageDescriptor) bool {
		switch d.FullName() {
		case regexMatcher, formatString, headerValue, fileAccessLog, anyMessage:
			return true
		}
		if seen[d.FullName()] {
			return false
		}
		seen[d.FullName()] = true
		fields := d.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			switch {
			case f.IsList() && f.Kind() == protoreflect.StringKind && isRemoval(f.Name()):
				return true
			case f.IsMap() && isMessage(f.MapValue()):
				if reach(f.MapValue().Message()) {
					return true
				}
			case isMessage(f):
				if reach(f.Message()) {
					return true
				}
			}
		}
		return false
	}
	v := reach(d)
	holds.Store(d.FullName(), v)
	return v
}

func isRemoval(n protoreflect.Name) bool {
	return n == headersToRemove || n == requestToRemove || n == responseToRemove
}

// dialectOf is the RE2 of the proxies of Envoy release envoy: 1.39 and
// newer compile regexes in Latin-1 (see internal/re2).
func dialectOf(envoy envoyfilter.Version) re2.Dialect {
	if envoy.AtLeast(envoyfilter.Version{Major: 1, Minor: 39}) {
		return re2.Envoy139
	}
	return re2.Envoy136
}

// Refusal is a value the proxies of a release refuse, and why, worded as
// the end of a sentence about the key it came from ("builds the regex …,
// which …").
type Refusal struct {
	Value Value
	Msg   string
}

// Checker checks emitted values for several releases, collecting each
// message's values once and checking each distinct value once per rule and
// release class. It is for one build (one item): not safe for concurrent
// use.
type Checker struct {
	collected map[proto.Message][]Value
	regexes   map[regexKey]string // refusal message, "" when accepted
	formats   map[formatKey]envoyformat.Analysis
	plain     map[Value]string // rules that don't depend on the release
}

type regexKey struct {
	expr    string
	dialect re2.Dialect
}

type formatKey struct {
	text  string
	place envoyformat.Place
}

// NewChecker returns a Checker with nothing checked yet.
func NewChecker() *Checker { return &Checker{} }

// Values returns the values with a rule of msgs, collected once per
// message.
func (c *Checker) Values(msgs []proto.Message) []Value {
	if c.collected == nil {
		c.collected = map[proto.Message][]Value{}
	}
	var out []Value
	for _, m := range msgs {
		vs, ok := c.collected[m]
		if !ok {
			vs = Collect(m)
			c.collected[m] = vs
		}
		out = append(out, vs...)
	}
	return out
}

// Check returns the values that the proxies of Envoy release envoy would
// refuse, each once, in the order given.
func (c *Checker) Check(values []Value, envoy envoyfilter.Version) []Refusal {
	var out []Refusal
	var seen map[Value]bool
	for _, v := range values {
		msg := c.check(v, envoy)
		if msg == "" {
			continue
		}
		if seen == nil {
			seen = map[Value]bool{}
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, Refusal{Value: v, Msg: msg})
		}
	}
	return out
}

func (c *Checker) check(v Value, envoy envoyfilter.Version) string {
	switch v.Kind {
	case Regex:
		key := regexKey{v.Text, dialectOf(envoy)}
		if c.regexes == nil {
			c.regexes = map[regexKey]string{}
		}
		msg, ok := c.regexes[key]
		if !ok {
			msg = regexRefusal(v.Text, key.dialect)
			c.regexes[key] = msg
		}
		return msg
	case Format, HeaderValue:
		place := envoyformat.Text
		if v.Kind == HeaderValue {
			if msg := c.plainRule(v); msg != "" {
				return msg
			}
			place = envoyformat.Header
		}
		key := formatKey{v.Text, place}
		if c.formats == nil {
			c.formats = map[formatKey]envoyformat.Analysis{}
		}
		a, ok := c.formats[key]
		if !ok {
			a = envoyformat.Analyze(v.Text, place)
			c.formats[key] = a
		}
		var msgs []string
		for _, p := range a.For(envoy) {
			if !p.Deliberate || a.Refused() {
				msgs = append(msgs, p.Message)
			}
		}
		if len(msgs) == 0 {
			return ""
		}
		what := "format string"
		if v.Kind == HeaderValue {
			what = "header value"
		}
		return fmt.Sprintf("builds the %s %q, which Envoy refuses: %s", what, v.Text, strings.Join(msgs, "; "))
	default:
		return c.plainRule(v)
	}
}

// plainRule checks the rules that don't depend on the release, once per
// value.
func (c *Checker) plainRule(v Value) string {
	if c.plain == nil {
		c.plain = map[Value]string{}
	}
	if msg, ok := c.plain[v]; ok {
		return msg
	}
	var p items.Problems
	switch v.Kind {
	case HeaderName:
		items.CheckHeader(&p, "", v.Text, "")
	case HeaderValue, PlainHeaderValue:
		items.CheckHeader(&p, "", "x", v.Text)
	case ProxyFile:
		items.CheckProxyFile(&p, "", v.Text)
	}
	msg := ""
	if err := p.Err(); err != nil {
		var parts []string
		for _, e := range fielderr.Flatten(err) {
			parts = append(parts, e.Msg)
		}
		msg = fmt.Sprintf("builds the %s %q, which %s", kindName(v.Kind), v.Text, strings.Join(parts, "; "))
		if v.Kind == ProxyFile {
			// CheckProxyFile's message names the file itself.
			msg = strings.Join(parts, "; ")
		}
	}
	c.plain[v] = msg
	return msg
}

func kindName(k Kind) string {
	switch k {
	case HeaderName:
		return "header name"
	case HeaderValue, PlainHeaderValue:
		return "header value"
	case ProxyFile:
		return "file path"
	case Regex:
		return "regex"
	}
	return "format string"
}

// regexRefusal is why Envoy's RE2 of dialect d refuses expr, or "".
func regexRefusal(expr string, d re2.Dialect) string {
	if expr == "" {
		return "builds an empty regex, which Envoy refuses"
	}
	size, err := re2.CheckDialect(expr, d)
	switch {
	case err != nil:
		return fmt.Sprintf("builds the regex %q, which Envoy's RE2 refuses: %v", expr, err)
	case size > re2.MaxProgramSize:
		return fmt.Sprintf("builds a regex whose RE2 program size is %d, over Envoy's limit of %d (re2.max_program_size), so Envoy would refuse the whole listener: %q", size, re2.MaxProgramSize, expr)
	}
	return ""
}
