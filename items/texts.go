package items

import (
	"fmt"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Free-form string keys are declared once and read twice, as Ranges are:
// an item says what each one holds as Envoy reads it (Texts), validation
// checks every declared key with the one rule of its kind (CheckTexts,
// called by the document for every section), and the differential check
// (test/agreement) generates values of the same kind to put through
// validation and a real Envoy.

// TextKind is what a free-form string key holds, as Envoy reads it.
type TextKind string

// The kinds of text.
const (
	// TextFormat is an Envoy substitution format string: access log
	// lines, local reply bodies (command operators %NAME(args):N%, a
	// literal percent sign written %%).
	TextFormat TextKind = "format"
	// TextHeaderValue is a header value the proxy sends: a valid header
	// value that Envoy also reads as a format string.
	TextHeaderValue TextKind = "headerValue"
	// TextHeaderName is a header the item sets or removes: a valid,
	// lower-case header name, not a pseudo-header or host.
	TextHeaderName TextKind = "headerName"
	// TextHeaderRead is a request header the item reads (a span tag, a
	// rate-limit key): a header name Envoy accepts, pseudo-headers such
	// as :authority included; case does not matter.
	TextHeaderRead TextKind = "headerRead"
	// TextURLPath is a URL path the proxy requests.
	TextURLPath TextKind = "urlPath"
	// TextFilePath is a file the proxy writes.
	TextFilePath TextKind = "filePath"
	// TextPattern is a value matched as nginx's map matches it: a string
	// matched whole, ignoring case, or a regular expression after ~
	// (case-sensitive) or ~* (ignoring case), run by Envoy's RE2.
	TextPattern TextKind = "pattern"
	// TextServiceHost is the host of a service the proxy sends to
	// (checked through items.ServiceUser).
	TextServiceHost TextKind = "serviceHost"
	// TextCIDR is an address range and TextMediaType a media type; their
	// items check them (they read them), the kinds say what to generate.
	TextCIDR      TextKind = "cidr"
	TextMediaType TextKind = "mediaType"
	// TextHostName is a host name a request's :authority is compared
	// with, and TextMethod an HTTP method; their items check them and
	// build matchers from whole lists of them (test/agreement generates
	// realistic lists, long ones too).
	TextHostName TextKind = "hostName"
	TextMethod   TextKind = "method"
	// TextPlain is text Envoy uses as it is (a tag value, a name).
	TextPlain TextKind = "plain"
)

// Text declares one free-form string key.
type Text struct {
	// Path is the key as a Range's path: "[]" stands for every element of
	// a list, "*" for every value of a map ("json.*").
	Path string
	// Kind is what the key holds; for a map, what its values hold ("" for
	// a map whose values are not strings: only its keys are declared).
	Kind TextKind
	// Key, for a map ("responseHeaders.*"), is what its keys hold.
	Key TextKind
}

// Texter is implemented by items with free-form string keys.
type Texter interface {
	Texts() []Text
}

// textRules are the checks of the kinds with one rule of their own here;
// the others are checked elsewhere (see each kind).
var textRules = map[TextKind]func(p *Problems, at, s string){
	TextFormat: func(p *Problems, at, s string) { envoyformat.CheckIn(p, at, s, envoyformat.Text) },
	TextHeaderValue: func(p *Problems, at, s string) {
		if !httpguts.ValidHeaderFieldValue(s) {
			p.Addf(at, "must be a valid header value (no control characters)")
			return
		}
		envoyformat.CheckIn(p, at, s, envoyformat.Header)
	},
	TextHeaderName: func(p *Problems, at, s string) { CheckHeader(p, at, s, "") },
	TextHeaderRead: CheckHeaderRead,
	TextURLPath:    CheckURLPath,
	TextFilePath:   CheckProxyFile,
}

// CheckTexts records a problem at every declared key of it whose value
// breaks its kind's rule. A path that names no string key is a programming
// error and panics.
func CheckTexts(p *Problems, it Texter) {
	v := reflect.ValueOf(it)
	for _, t := range it.Texts() {
		r := Range{Path: t.Path}
		checked := pathKey{v.Type(), "text:" + t.Path}
		keys := r.Keys()
		if _, ok := pathsChecked.Load(checked); !ok {
			if err := checkText(v.Type(), t, keys); err != nil {
				panic(fmt.Sprintf("items: %T: Text %q: %v", it, t.Path, err))
			}
			pathsChecked.Store(checked, true)
		}
		if t.Key != "" {
			// The map itself: its keys, then its values.
			eachValue(v, keys[:len(keys)-1], "", func(at string, m reflect.Value) {
				rule := textRules[t.Key]
				for _, k := range sortedKeys(m) {
					if rule != nil { // "" is a key given, and checked
						rule(p, fielderr.Key(at, k), k)
					}
				}
			})
		}
		rule := textRules[t.Kind]
		if rule == nil {
			continue
		}
		eachValue(v, keys, "", func(at string, s reflect.Value) {
			// An empty key is a key not given; an empty entry of a list
			// is a value ("" in remove: [""]), and is checked.
			if s.String() != "" || strings.HasSuffix(at, "]") {
				rule(p, at, s.String())
			}
		})
	}
}

// formatPlaces are the kinds Envoy reads as format strings, and where.
var formatPlaces = map[TextKind]envoyformat.Place{TextFormat: envoyformat.Text, TextHeaderValue: envoyformat.Header}

// TextsFor returns a problem at every format string and header value of it
// that the proxies of Envoy release envoy refuse though a newer Envoy takes
// it (an operator added since): the renderer asks it for every Istio
// release of the target's fleet, and says which releases refuse. What no
// Envoy takes is CheckTexts' problem.
func TextsFor(it Texter, envoy envoyfilter.Version) error {
	var p Problems
	v := reflect.ValueOf(it)
	for _, t := range it.Texts() {
		place, ok := formatPlaces[t.Kind]
		if !ok {
			continue
		}
		eachValue(v, Range{Path: t.Path}.Keys(), "", func(at string, s reflect.Value) {
			for _, pr := range envoyformat.Analyze(s.String(), place).For(envoy) {
				if pr.Since != (envoyfilter.Version{}) {
					p.Addf(at, "%s", pr.Message)
				}
			}
		})
	}
	return p.Err()
}

// sortedKeys are the string keys of map m, sorted.
func sortedKeys(m reflect.Value) []string {
	var out []string
	for _, k := range m.MapKeys() {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// checkText reports why t declares no key of the section type st: a Key
// kind needs a path ending in a map's "*", a Kind a string there.
func checkText(st reflect.Type, t Text, keys []string) error {
	if t.Key != "" && keys[len(keys)-1] != "*" {
		return fmt.Errorf("a Key kind needs a path ending in a map's \"*\"")
	}
	if t.Kind == "" {
		if t.Key == "" {
			return fmt.Errorf("declares no kind")
		}
		return checkTextPath(st, keys[:len(keys)-1], true)
	}
	return checkTextPath(st, keys, false)
}

// checkTextPath reports why keys name no string key of t, or no map with
// string keys when mapKeys.
func checkTextPath(t reflect.Type, keys []string, mapKeys bool) error {
	t, err := typeAt(t, keys)
	switch {
	case err != nil:
		return err
	case mapKeys && (t.Kind() != reflect.Map || t.Key().Kind() != reflect.String):
		return fmt.Errorf("names a %s, not a map", t)
	case !mapKeys && t.Kind() != reflect.String:
		return fmt.Errorf("names a %s, not a string", t)
	}
	return nil
}

// CheckHeaderRead is the rule for a request header an item reads: a
// header name as Envoy's HTTP_HEADER_NAME rule takes it, a pseudo-header
// (":authority", ":path") included. Envoy compares names ignoring case.
func CheckHeaderRead(p *Problems, at, name string) {
	if !httpguts.ValidHeaderFieldName(strings.TrimPrefix(name, ":")) {
		p.Addf(at, "must be a valid HTTP header name, got %q", name)
	}
}

// CheckURLPath is the rule for a URL path the proxy requests: absolute,
// without a query or fragment, in the characters a request path may
// hold (percent-encoded escapes included).
func CheckURLPath(p *Problems, at, v string) {
	u, err := url.Parse(v)
	if err != nil || !strings.HasPrefix(v, "/") || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(v, "?# \t") || u.Host != "" {
		p.Addf(at, "must be a URL path starting with \"/\", without a query, got %q", v)
		return
	}
	for _, r := range v {
		if r < 0x21 || r > 0x7e {
			p.Addf(at, "must be a URL path of printable ASCII (percent-encode the rest), got %q", v)
			return
		}
	}
}

// ProxyWritable are the folders an Istio proxy can write a file in: its
// container's root filesystem is read-only, and Istio's sidecar and
// gateway injection templates mount emptyDirs here (istio-data and
// istio-envoy), with nothing in them that Envoy could create a folder in
// before it opens its logs.
var ProxyWritable = []string{"/var/lib/istio/data/", "/etc/istio/proxy/"}

// proxyStreams are the files a proxy can always write.
var proxyStreams = []string{"/dev/stdout", "/dev/stderr", "/dev/null"}

// NameMax is the longest file or folder name Linux takes (NAME_MAX), in
// bytes: Envoy can't open a file with a longer path part.
const NameMax = 255

// CheckProxyFile is the rule for a file the proxy writes: Envoy opens it
// when it loads the listener, and refuses the listener when it can't, so
// it must be the proxy's standard output or error, or a file directly in
// a folder Istio makes writable (ProxyWritable): Envoy creates no folder,
// and the proxy has no other. Every part of the path must be a name
// Linux takes (at most NameMax bytes).
func CheckProxyFile(p *Problems, at, file string) {
	if slices.Contains(proxyStreams, file) {
		return
	}
	clean := path.Clean(file)
	if !strings.HasPrefix(file, "/") || clean != file {
		p.Addf(at, "must be an absolute, clean file path, got %q", file)
		return
	}
	for _, part := range strings.Split(file[1:], "/") {
		if len(part) > NameMax {
			p.Addf(at, "has a part of %d bytes (%.20q…); Linux takes names of at most %d bytes, so Envoy could not open the file and would refuse every listener that logs to it", len(part), part, NameMax)
			return
		}
	}
	dir, name := path.Split(file)
	if slices.Contains(ProxyWritable, dir) && name != "" {
		return
	}
	for _, d := range ProxyWritable {
		if strings.HasPrefix(file, d) && len(file) > len(d) {
			p.Addf(at, "%s is in a folder an Istio proxy doesn't have (%s): Envoy creates no folders, so it would refuse every listener that logs to it; write the file directly in %s, or use /dev/stdout (what kubectl logs shows)", file, strings.TrimSuffix(dir, "/"), strings.Join(ProxyWritable, " or "))
			return
		}
	}
	p.Addf(at, "%s can't be written by an Istio proxy, whose root filesystem is read-only, so Envoy would refuse every listener that logs to it; use /dev/stdout (what kubectl logs shows), /dev/stderr, or a file directly in %s (to keep logs on a volume of your own, mount it there)", file, strings.Join(ProxyWritable, " or "))
}

// EachText calls f with every non-empty value of every declared text key of
// it, and with every key of a map whose keys are declared, with its path
// and kind. The renderer uses it to name the key an emitted value came
// from.
func EachText(it Texter, f func(at string, kind TextKind, value string)) {
	v := reflect.ValueOf(it)
	for _, t := range it.Texts() {
		keys := Range{Path: t.Path}.Keys()
		if t.Key != "" {
			eachValue(v, keys[:len(keys)-1], "", func(at string, m reflect.Value) {
				if m.Kind() != reflect.Map {
					return
				}
				for _, k := range sortedKeys(m) {
					if k != "" {
						f(fielderr.Key(at, k), t.Key, k)
					}
				}
			})
		}
		if t.Kind == "" {
			continue
		}
		eachValue(v, keys, "", func(at string, s reflect.Value) {
			if s.Kind() == reflect.String && s.String() != "" {
				f(at, t.Kind, s.String())
			}
		})
	}
}
