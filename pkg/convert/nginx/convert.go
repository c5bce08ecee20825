// Package nginx converts ingress-nginx's global ConfigMap into a
// globalconfig document, key by key, with a report giving every key's
// verdict: what it became, or why it didn't.
package nginx

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/internal/suggest"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// Options say where the converted document applies and what it carries.
type Options struct {
	// Selector selects the gateway pods; empty means istio=ingressgateway.
	Selector map[string]string
	// ConfigMap is NAMESPACE/NAME of the output ConfigMap.
	ConfigMap string
	// NoDefaults leaves out the defaults ingress-nginx applied to keys
	// the ConfigMap doesn't set.
	NoDefaults bool
	// TrustedHops, when set, is how many proxies stand in front of the
	// gateway: it lets X-Forwarded-For trust, which ingress-nginx gives by
	// address range, become Envoy's hop count.
	TrustedHops *uint32
}

func (o Options) selector() map[string]string {
	if len(o.Selector) > 0 {
		return o.Selector
	}
	return map[string]string{"istio": "ingressgateway"}
}

// Result is a conversion: the document, the manifest carrying it, and the
// report.
type Result struct {
	Document []byte
	Manifest []byte
	Report   Report
}

// Convert turns ingress-nginx's global configuration into a globalconfig
// document. A value ingress-nginx would not read is an error naming the
// key; everything else gets a verdict in the report.
func Convert(in Input, opts Options) (*Result, error) {
	c := &converter{in: in, opts: opts, used: map[string]bool{}, root: out.Mapping()}
	c.convert()
	if err := c.probs.Err(); err != nil {
		return nil, out.Bound(err)
	}
	sel := out.Mapping()
	for _, k := range slices.Sorted(maps.Keys(opts.selector())) {
		sel.Content = append(sel.Content, out.Str(k), out.Str(opts.selector()[k]))
	}
	target := out.Mapping(out.Pair("context", out.Str("GATEWAY")), out.Pair("selector", sel))
	c.root.Content = append([]*yaml.Node{out.Str("target"), target}, c.sorted()...)
	c.root.Content[0].HeadComment = fmt.Sprintf("Converted from ingress-nginx's ConfigMap %s/%s: the gateway that takes over from the controller.", in.Namespace, in.Name)
	var manifest []byte
	var manifestErr error
	doc, err := out.Document(c.root, func(doc []byte) {
		manifest, manifestErr = out.Manifest(doc, opts.ConfigMap, "Converted from ingress-nginx's global ConfigMap by `globalconfig convert --from ingress-nginx`.")
	})
	if err != nil {
		return nil, err
	}
	if manifestErr != nil {
		return nil, manifestErr
	}
	return &Result{Document: doc, Manifest: manifest, Report: c.report}, nil
}

// sectionOrder is the order of the document's sections.
var sectionOrder = []string{"clientIP", "downstream", "hardening", "tls", "upstream", "headers", "accessLog", "tracing", "requestBody", "ipAccess", "extAuth", "gzip", "brotli"}

// sorted returns the sections in sectionOrder.
func (c *converter) sorted() []*yaml.Node {
	var nodes []*yaml.Node
	for _, name := range sectionOrder {
		for i := 0; i+1 < len(c.root.Content); i += 2 {
			if c.root.Content[i].Value == name {
				nodes = append(nodes, c.root.Content[i], c.root.Content[i+1])
			}
		}
	}
	return nodes
}

// converter builds the document and the report.
type converter struct {
	in     Input
	opts   Options
	root   *yaml.Node
	report Report
	probs  fielderr.List
	used   map[string]bool
	// ciphersDropped is set when ssl-ciphers named suites nginx offered
	// and the document does not carry them (an OpenSSL expression):
	// Envoy's default suites, none of them CBC, apply instead.
	ciphersDropped bool
}

// value is one key of the ConfigMap: what it holds, or ingress-nginx's
// default when the ConfigMap leaves it out.
type value struct {
	key, raw string
	set      bool
}

// get reads a key, or its default.
func (c *converter) get(key, def string) value {
	raw, ok := c.in.Data[key]
	c.used[key] = true
	if !ok {
		return value{key: key, raw: def}
	}
	return value{key: key, raw: strings.TrimSpace(raw), set: true}
}

// boolean reads a value as ingress-nginx does (strconv.ParseBool).
func (c *converter) boolean(v value) bool {
	b, err := strconv.ParseBool(v.raw)
	if err != nil {
		c.probs.Addf(v.key, "must be true or false, got %q", v.raw)
	}
	return b
}

// integer reads a whole number of at least lo. A whole number in float
// notation (3.14496e+07, as Helm renders a large number from values) is
// read as the number it is, as nginx and ingress-nginx take the text.
func (c *converter) integer(v value, lo int) int {
	n, err := strconv.Atoi(v.raw)
	if err != nil {
		if f, ferr := strconv.ParseFloat(v.raw, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) <= math.MaxInt32 {
			n, err = int(f), nil
		}
	}
	if err != nil || n < lo {
		c.probs.Addf(v.key, "must be a whole number of at least %d, got %q", lo, out.Cut(v.raw, 100))
	}
	return n
}

// list reads a comma-separated list, as ingress-nginx splits its slices.
func list(v value) []string {
	var out []string
	for _, s := range strings.Split(v.raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// size reads an nginx size: bytes, or k, m or g (binary multiples).
func (c *converter) size(v value) uint64 {
	s := v.raw
	mult := uint64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > 1<<40/mult {
		c.probs.Addf(v.key, "must be an nginx size such as 8k, 1m or 1048576, got %q", v.raw)
		return 0
	}
	return n * mult
}

// byteSize writes bytes the way globalconfig reads them: Gi, Mi or Ki when
// exact (nginx's m is a mebibyte: 1Mi, not 1M).
func byteSize(n uint64) *yaml.Node {
	for _, u := range []struct {
		suffix string
		factor uint64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.factor && n%u.factor == 0 {
			return out.Str(fmt.Sprintf("%d%s", n/u.factor, u.suffix))
		}
	}
	return out.Int(n)
}

func seconds(n int) *yaml.Node { return out.Str(fmt.Sprintf("%ds", n)) }

// put writes one document key for an ingress-nginx key: converted when
// the ConfigMap set it, ingress-nginx's default otherwise (or nothing,
// with --no-nginx-defaults; without says what the gateway does then).
func (c *converter) put(v value, path string, n *yaml.Node, detail, without string) {
	to := "→ " + path + ": " + out.Shown(n) + suffix(detail)
	shown := v.key + ": " + v.raw
	if len(v.raw) > 40 {
		shown = v.key
	}
	switch {
	case v.set:
		c.write(path, n, shown)
		c.report.AddValue(v.key, v.raw, Converted, to)
	case c.opts.NoDefaults:
		c.report.AddValue(v.key, v.raw, DefaultSkipped, "not written; "+without)
	default:
		c.write(path, n, "ingress-nginx default ("+shown+")")
		c.report.AddValue(v.key, v.raw, DefaultWritten, to)
	}
}

// carry reports whether a default should be written: the key is set, or
// defaults are carried.
func (c *converter) carry(v value) bool { return v.set || !c.opts.NoDefaults }

// verdict records a key's verdict when the ConfigMap sets it.
func (c *converter) verdict(v value, verdict Verdict, detail string) {
	if v.set {
		c.report.AddValue(v.key, v.raw, verdict, detail)
	}
}

// notCarried gives each key of vs the ConfigMap sets the verdict
// NotCarried: it depends on a key that was not converted, which why names,
// with the reason.
func (c *converter) notCarried(why string, vs ...value) {
	for _, v := range vs {
		if v.set {
			c.report.AddValue(v.key, shownRaw(v.raw), NotCarried, why)
		}
	}
}

// amend changes the verdict and detail of key's line with verdict from,
// when a later rule learns the first was not the whole story; it reports
// whether there was such a line.
func (c *converter) amend(key string, from, to Verdict, detail string) bool {
	for i, e := range c.report.Entries {
		if e.Key == key && e.Verdict == from {
			c.report.Entries[i].Verdict, c.report.Entries[i].Detail = to, detail
			return true
		}
	}
	return false
}

// shownRaw is how a value of a key that holds no secret reads in the
// report: cut to maxShownValue, and "" when empty.
func shownRaw(raw string) string {
	if raw == "" {
		return `""`
	}
	return out.Cut(raw, maxShownValue)
}

// write sets path (a.b.c) in the document, with a comment.
func (c *converter) write(path string, n *yaml.Node, comment string) {
	parts := strings.Split(path, ".")
	m := c.root
	for _, p := range parts[:len(parts)-1] {
		var next *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == p {
				next = m.Content[i+1]
			}
		}
		if next == nil {
			next = out.Mapping()
			m.Content = append(m.Content, out.Str(p), next)
		}
		m = next
	}
	key := out.Str(parts[len(parts)-1])
	if comment != "" {
		if n.Kind == yaml.ScalarNode {
			n.LineComment = comment
		} else {
			key.HeadComment = comment
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key.Value {
			m.Content[i], m.Content[i+1] = key, n
			return
		}
	}
	m.Content = append(m.Content, key, n)
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return "; " + detail
}

// convert runs every key's conversion, then gives the keys it didn't read
// their fixed verdict, or reports them unknown.
func (c *converter) convert() {
	c.bodySize()
	c.headerSize()
	c.clientIP()
	c.tls()
	c.responseHeaders()
	c.requestHeaders()
	c.timeouts()
	c.compression()
	c.accessLog()
	c.tracing()
	c.ipAccess()
	c.extAuth()
	c.paths()
	c.edge()
	c.statusCodes()
	for _, k := range slices.Sorted(maps.Keys(c.in.Data)) {
		if c.used[k] {
			if len(c.report.Find(k)) == 0 && strings.TrimSpace(c.in.Data[k]) == "" {
				c.report.AddValue(k, `""`, DefaultAlready, "empty: nothing set")
			}
			continue
		}
		raw := strings.TrimSpace(c.in.Data[k])
		switch f, ok := fixedKeys[k]; {
		case isSnippet(k):
			// The value is raw nginx configuration: not shown.
			c.report.Add(k, Insecure, snippet)
		case ok && strings.Contains(k, "ticket-key"):
			c.report.Add(k, f.verdict, f.text())
		case raw == "":
			c.report.AddValue(k, `""`, DefaultAlready, "empty: nothing set")
		case ok && f.off != "" && isOff(raw):
			c.report.AddValue(k, raw, DefaultAlready, f.off)
		case ok:
			c.report.AddValue(k, raw, f.verdict, f.text())
		case looksLikeSnippet(k):
			// Misspelt or differently cased, ingress-nginx ignores it; its
			// value may still be raw configuration, secrets included.
			c.report.Add(k, Unknown, "ingress-nginx does not read this key, so neither does the conversion"+hint(k)+"; its value is not shown: it may be raw nginx configuration")
		default:
			c.report.AddValue(k, out.Cut(raw, maxShownValue), Unknown, "ingress-nginx does not read this key, so neither does the conversion"+hint(k))
		}
	}
}

// isOff reports whether a value turns a feature off.
func isOff(raw string) bool {
	b, err := strconv.ParseBool(raw)
	return err == nil && !b || raw == "0" || raw == "off"
}

// directives are nginx directive names people write as ConfigMap keys,
// with the key that sets them.
var directives = map[string]string{
	"client-max-body-size": "proxy-body-size", "underscores-in-headers": "enable-underscores-in-headers",
	"keepalive-timeout": "keep-alive", "keepalive-requests": "keep-alive-requests", "gzip": "use-gzip", "gzip-comp-level": "gzip-level",
	"brotli": "enable-brotli", "brotli-comp-level": "brotli-level", "real-ip-header": "forwarded-for-header",
	"set-real-ip-from": "proxy-real-ip-cidr", "add-header": "add-headers", "proxy-set-header": "proxy-set-headers",
	"proxy-hide-header": "hide-headers", "log-format": "log-format-upstream", "access-log": "access-log-path",
	"enable-hsts": "hsts", "hsts-include-subdomain": "hsts-include-subdomains",
}

// hint suggests the known key closest to an unknown one.
// maxShownValue bounds a value the report echoes.
const maxShownValue = 200

// looksLikeSnippet reports whether key, whatever its case or spelling,
// looks like one of ingress-nginx's snippet keys.
func looksLikeSnippet(key string) bool {
	k := strings.ToLower(key)
	if strings.Contains(k, "snip") || strings.Contains(k, "snpp") {
		return true
	}
	// One of them is close enough exactly when the closest one is.
	return snippetKeySet().Closest(key) != ""
}

// snippetKeySet holds the snippet keys among convertedKeys.
var snippetKeySet = sync.OnceValue(func() *suggest.Set {
	var keys []string
	for _, k := range convertedKeys {
		if isSnippet(k) {
			keys = append(keys, k)
		}
	}
	return suggest.NewSet(keys)
})

func hint(key string) string {
	if k, ok := directives[key]; ok {
		return fmt.Sprintf(" (the nginx directive is set by %q)", k)
	}
	if s := knownKeySet().Closest(key); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// knownKeySet is KnownKeys ready for suggestions: a ConfigMap may hold
// tens of thousands of unknown keys.
var knownKeySet = sync.OnceValue(func() *suggest.Set { return suggest.NewSet(KnownKeys()) })

// KnownKeys returns the keys of ingress-nginx's ConfigMap the converter
// knows, sorted: those it converts by value and those whose verdict is
// fixed. Any other key is reported unknown.
func KnownKeys() []string {
	known := slices.Collect(maps.Keys(fixedKeys))
	for _, k := range convertedKeys {
		if !slices.Contains(known, k) {
			known = append(known, k)
		}
	}
	slices.Sort(known)
	return known
}

// convertedKeys are the keys the converter reads by value.
var convertedKeys = []string{
	"proxy-body-size", "proxy-request-buffering", "large-client-header-buffers",
	"use-forwarded-headers", "enable-real-ip", "forwarded-for-header", "proxy-real-ip-cidr", "compute-full-forwarded-for", "use-proxy-protocol",
	"ssl-protocols", "ssl-ciphers", "ssl-ecdh-curve", "hsts", "hsts-max-age", "hsts-include-subdomains", "hsts-preload",
	"server-tokens", "hide-headers", "add-headers", "proxy-set-headers", "allow-backend-server-header",
	"proxy-connect-timeout", "proxy-read-timeout", "proxy-send-timeout", "client-header-timeout", "client-body-timeout",
	"keep-alive", "keep-alive-requests", "upstream-keepalive-timeout", "upstream-keepalive-requests", "upstream-keepalive-connections", "http2-max-concurrent-streams",
	"use-gzip", "gzip-level", "gzip-min-length", "gzip-types", "enable-brotli", "brotli-level", "brotli-min-length", "brotli-types",
	"log-format-upstream", "log-format-escape-json", "disable-access-log", "disable-http-access-log", "access-log-path", "http-access-log-path",
	"enable-opentelemetry", "otlp-collector-host", "otlp-collector-port", "otel-service-name", "otel-sampler", "otel-sampler-ratio",
	"otel-sampler-parent-based", "opentelemetry-trust-incoming-span",
	"custom-http-errors", "disable-proxy-intercept-errors", "limit-req-status-code", "limit-conn-status-code",
	"whitelist-source-range", "denylist-source-range", "block-cidrs", "block-user-agents", "block-referers",
	"generate-request-id", "enable-underscores-in-headers", "ignore-invalid-headers", "allow-snippet-annotations",
	"main-snippet", "http-snippet", "server-snippet", "location-snippet", "stream-snippet", "modsecurity-snippet", "global-auth-snippet",
	"global-auth-url", "global-auth-method", "global-auth-signin", "global-auth-signin-redirect-param", "global-auth-response-headers",
	"global-auth-request-redirect", "global-auth-cache-key", "global-auth-cache-duration", "global-auth-always-set-cookie", "no-auth-locations",
}
