// Package agreement holds validation to a real Envoy, both ways: what
// `globalconfig validate` (and so the admission webhook) admits, Envoy
// loads; what it refuses, Envoy refuses too, but for a short list of
// deliberate refusals, each with its reason. Documents come from a
// generator built on the registry's own declarations (generate_test.go);
// each is judged by validation and loaded by each real Envoy in validate
// mode, as `validate --envoy` loads it (pkg/envoycheck). `make test` runs
// it against Envoy 1.40 and 1.39; `make fuzz` runs FuzzEnvoyAgreement.
package agreement

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// deliberate are the refusals stricter than Envoy on purpose: Envoy loads
// such a document, but it would not do at the proxy what its author
// meant, or would fail on a real proxy where Envoy here does not. A
// refused document Envoy accepts is a disagreement unless every one of
// its problems matches an entry.
var deliberate = []struct {
	path, msg *regexp.Regexp
	why       string
}{
	rule(`.*`, `^applies to target\.context .* only`,
		"a key an item declares for some contexts only (items.ContextLimit): elsewhere it does nothing, or breaks the proxy in a way the representative configuration does not show (istiod's own settings there)"),
	rule(`.*`, `only applies (to|with) `, "a key that does nothing without another: the author meant something it would not do"),
	rule(`.*`, `(is also|repeats|is listed twice|listed twice)`, "an entry given twice: one of the two is a mistake"),
	rule(`.*`, `sets nothing|needs a body|needs exactly one|needs one backend|is required`, "a section that would do nothing, or less than it says"),
	rule(`.*`, `give either .* not both|give at most one of`, "two ways of saying one thing: one would be dropped"),
	rule(`accessLog\.path`, `can't be written by an Istio proxy`, "an Istio proxy's root filesystem is read-only: Envoy there refuses the listener, as an Envoy here does not"),
	rule(`accessLog\.path`, `has a part of \d+ bytes`, "Linux takes names of at most 255 bytes: a proxy can't open the file and refuses the listener, where Envoy's validate mode may not open it"),
	rule(`accessLog\.path`, `is in a folder an Istio proxy doesn't have`, "Envoy creates no folders, and an Istio proxy has none under its writable emptyDirs: Envoy there refuses the listener, as an Envoy here, with folders of its own, may not"),
	rule(`tls\.ports\[\d+\]`, `plaintext HTTP port`, "the standard gateway's plaintext HTTP port has no TLS: Envoy there refuses TLS settings without certificates; the representative configuration has TLS on every port but 8080"),
	rule(`(gzip|brotli|zstd)\.contentType\[\d+\]`, `bare lower-case media type|must be a media type|a wildcard`, "Envoy compares a response's media type without its parameters, ignoring case: an entry with parameters, upper case, a wildcard or two types in one never matches"),
	rule(`customErrors\.(localReplies|upstream)\[\d+\]\.contentType`, `must be a media type`, "the content-type of a page must be one media type for the client to read the body"),
	rule(`hardening\.normalizePath`, `only true can be set`, "an EnvoyFilter MERGE can't turn normalization off (false is the default a merge leaves alone): the author's false would do nothing"),
	rule(`(hardening|upstream)\.maxRequestsPerConnection`, `must be at least 1`, "0 means no limit to Envoy: the key would do nothing"),
	rule(`accessLog\.minStatusCode`, `must be between 100 and 599`, "no response has a status outside 100-599: the log would be empty"),
	rule(`customErrors\.(localReplies|upstream)\[\d+\]\.statuses\[\d+\]`, `must be an error status`, "a page for a status no error response has would never be used"),
	rule(`ipAccess\.(deny|denyConnections)\[\d+\]`, `would (refuse|close) every`, "a /0 deny refuses a whole address family: the gateway would serve no one of it"),
	rule(`accessLog\.path`, `must be an absolute, clean file path`, "a relative path is relative to the proxy's working directory, /, which an Istio proxy can't write"),
	rule(`headers\.(responseHeaders|request\.set|request\.append).*|headers\.(request|response)\.remove\[\d+\]|localRateLimit\.responseHeaders.*`, `must be a valid HTTP header name|must be lower case`,
		"Envoy loads a header name that is no HTTP token (a space, a non-ASCII letter) or has upper case, but HTTP/2 peers refuse such a header and HTTP/1 ones misread it"),
	rule(`(localRateLimit\.perHeader\[\d+\]\.header|clientIP\.header|tracing\.customTags\.\S+\.header|(globalRateLimit|localRateLimit)\.limits\.[^.]+\.(perHeader|match\.headers\[\d+\]\.name))`, `must be a valid HTTP header name`, "no request carries a header whose name is no HTTP token: the key would never match"),
	rule(`localRateLimit\.(filterEnabled|filterEnforced)`, `must be between 0 and 100`, "a percentage: Envoy reads more than 100% as 100%"),
	rule(`localRateLimit\.(maxTokens|perClient\.maxTokens|perHeader\[\d+\]\.maxTokens|limits\.[^.]+\.maxTokens)`, `must be at least 1`, "a bucket of no tokens: Envoy 1.36 to 1.38 refuse it, and in newer ones it limits nothing the author meant"),
	rule(`tls\.(cipherSuites|ecdhCurves)\[\d+\]`, `.`, "Envoy checks TLS names when it builds a TLS context with its certificate, which validate mode, with certificates from SDS, never does"),
	rule(`tls\.(minVersion|maxVersion)`, `below`, "Envoy checks TLS versions when it builds a TLS context with its certificate, which validate mode, with certificates from SDS, never does; a gateway refuses the listener"),
	rule(`tls\.hsts\.preload`, `needs`, "the browsers' preload list (hstspreload.org) takes only what its rules allow: a header it refuses would not do what the author meant"),
	rule(`tracing\.(zipkin|skywalking|opentelemetry|datadog)\.service|globalRateLimit\.service`, `short Service name|lacks the cluster domain|must be a service host name`,
		"istiod builds no cluster of that name, so the item is never in effect at a real proxy (zipkin and datadog: it refuses every listener that sends to it; globalRateLimit: no limit is enforced, or every request denied; opentelemetry and skywalking: traces dropped; test/proxy TestServiceFailure); the representative configuration has a cluster for every name a patch gives"),
	rule(`tracing\.(zipkin|opentelemetry)\.path`, `must be a URL path`, "a collector path that is not a URL path would be sent as the request's :path, which the collector refuses"),
	rule(`localRateLimit\.perHeader\[\d+\]\.header|(localRateLimit|globalRateLimit)\.limits\.[^.]+\.perHeader|clientIP\.header`, `x-forwarded-for is a list|host is not a request header`, "a header that never holds what the author meant: x-forwarded-for is a list any client writes, host is :authority inside Envoy"),
	rule(`ipAccess\.(allow|deny|denyConnections)\[\d+\]`, `is inside|could never allow`, "a range that can never take effect: the wider range, or deny, decides first"),
	rule(`localRateLimit\.maxKeys`, `must be between`, "each key keeps a bucket in every proxy's memory: globalconfig bounds them"),
	rule(`ipAccess\.denyUserAgents(\[\d+\])?`, `bytes; at most|user agents; at most`, "every entry is tried on every request: globalconfig bounds them"),
	rule(`zstd\.compressionLevel`, `must be between 1 and 22`, "zstd's levels are 1 to 22: Envoy passes another number to the library, which takes its default or clamps it"),
	rule(`tracing\.timeout`, `must be greater than 0`, "0 turns the collector call's timeout off: a collector that hangs would hold the proxy's spans"),
	rule(`localRateLimit\.(fillInterval|perClient\.fillInterval|perHeader\[\d+\]\.fillInterval|limits\.[^.]+\.fillInterval)`, `must be at least 50ms`, "Envoy's floor: it refuses a bucket that refills faster (a keyed bucket, when it has tokens)"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.pathPrefix`, `must be a URL path`, "a request's path arrives percent-encoded: a prefix with a space or a non-ASCII letter never matches"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.pathPrefix`, `has an empty segment|matches everything`, "a prefix with an empty segment (//) is matched as written, which the author of /api//v1 did not mean; the prefix / matches every request, which leaving pathPrefix out says plainly"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.methods\[\d+\]`, `must be an HTTP method`, "methods are compared exactly: a method that is no upper-case token never matches a request"),
	rule(`loadShedding\.admissionControl\.samplingWindow`, `must be at least 1s`, "Envoy keeps the window's whole seconds: a shorter one is 0 s, a window that holds no request"),
	rule(`loadShedding\.admissionControl\.aggression`, `must be at least 1`, "Envoy reads an aggression under 1 as 1: the author's value would do nothing"),
	rule(`loadShedding\.admissionControl\.httpSuccess\[\d+\](\.to)?`, `range holds no status|must be between 100 and 599`, "a success range that ends before it starts: Envoy loads it as an empty range, which counts no status a success"),
	rule(`globalRateLimit\.limits\.[^.]+\.perClientSubnet\.ipv[46]`, `must be between 1 and`, "a prefix length of 0 puts every client in one count: leave perClientSubnet out for that"),
	rule(`globalRateLimit\.domain|(globalRateLimit|localRateLimit)\.limits(\.\S+|\[""\])`, `must be 1 to 63 letters|a limit's name must be`, "the domain and a limit's name are parts of the rate-limit service's counter keys: kept to letters, digits and a few marks"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.requests`, `must be at least 1`, "0 requests a unit refuses every request the limit counts: a block, not a limit (ipAccess or a route says that plainly)"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.hosts\[\d+\]`, `must be a host name`, "a request's :authority is a host name (and port): an entry that is none never matches"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.(hosts|methods)`, `hosts; at most|methods; at most`, "a list too long for one regex becomes several, each tried on every request: globalconfig bounds them"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.headers\[\d+\]\.name`, `is the request's host|has a key of its own`, "host is :authority inside Envoy, and the path and method have keys of their own whose matching (whole segments, a port, case) a header matcher would not do"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.(headers|queryParams)\[\d+\]\.(name|values(\[\d+\])?)`, `must be a header value|must be a query parameter|values; at most`, "a value no request carries as it arrives (empty, a control character, an unescaped & or # in a query), or more values than one regex should hold: the match would never apply as meant"),
	rule(`(globalRateLimit|localRateLimit)\.limits\.[^.]+\.match\.clients\.cidrs\[\d+\]`, `has host bits set`, "an address with host bits set beside a prefix length is usually a typo for the network: the author meant the range"),
	rule(`globalRateLimit\.timeout`, `must be between 1ms and 10s`, "every counted request waits for the service that long: globalconfig bounds it"),
	rule(`hardening\.mergeSlashes`, `only true can be set`, "an EnvoyFilter MERGE can't turn it off (false is the default a merge leaves alone): the author's false would do nothing"),
	rule(`downstream\.http1\.(acceptHttp10|preserveHeaderCase|enableTrailers)|hardening\.stripTrailingHostDot`, `only true can be set`, "an EnvoyFilter MERGE can't set false (the default a merge leaves alone): the author's false would do nothing"),
	rule(`downstream\.http1\.defaultHost`, `must be a host name`, "Envoy takes any string, but the default host is routed as a request's :authority: a wildcard, a trailing dot, a bad port or no host name at all routes to no virtual host but a catch-all"),
	rule(`.*`, `can't be beside .* on one cluster`, "Istio replaces a cluster's HTTP protocol options whole: Envoy loads both, but the EnvoyFilter applied last silently undoes the other's settings"),
	rule(`extAuth\.service`, `short Service name|lacks the cluster domain|must be a service host name`,
		"istiod builds no cluster of that name, so every check would fail and every request be refused (failureMode deny) or pass unchecked (allow)"),
	rule(`extAuth\.(path|pathPrefix)`, `must be a URL path|must not end in /`, "the check's :path: one that is no URL path, or that makes a double slash, is one the auth service refuses or misroutes, so every check would fail"),
	rule(`(extAuth|basicAuth|csrf|extProc)\.skip\.(paths|hosts)(\[\d+\])?`, `.`, "an opt-out that would never apply (no request has that path or :authority; a path with an escape or a dot segment is always checked) or would skip every request: the author meant something it would not do"),
	rule(`basicAuth\.forwardUsername`, `must be a valid HTTP header name|routes the request|authorization carries`, "a header HTTP/2 peers refuse, one that routes the request (the user's name would send it elsewhere) or the credentials basic_auth reads"),
	rule(`csrf\.enforcedPercent`, `must be between 0 and 100`, "a percentage: Envoy reads more than 100% as 100%"),
	rule(`extAuth\.(requestHeaders|upstreamHeaders|clientHeaders|clientHeadersOnSuccess)(\[\d+\])?`, `must be a valid HTTP header name|is never copied|a lone \*|may only end|headers; at most`,
		"a header no request or answer carries, or one Envoy never copies (pseudo-headers, host): the key would not do what it says; a lone * would copy the answer's :status and content-length"),
	rule(`extAuth\.addHeaders\..*`, `must be a valid HTTP header name|must be lower case|content-length is Envoy's`, "Envoy loads such a header into the check, but HTTP/2 peers refuse upper case and non-token names, and Envoy sets the check's content-length itself"),
	rule(`extAuth\.failureStatus`, `must be one of`, "a failed check answered with a status below 400 would tell the client its request went through or moved"),
	rule(`extAuth\.timeout`, `must be between`, "every request waits for the check: more than a minute is an outage, not a timeout"),
	rule(`customErrors\.(localReplies|upstream)\[\d+\]\.statuses\[\d+\]`, `is already in`, "a status in two entries: Envoy uses the first mapper that matches, so the second entry's page for it is never sent"),
	rule(`cors\.allowOrigins(\[\d+\])?`, `must be an origin as browsers send it|an origin has no path|a suffix after \*|after ~ is empty|a lone \* already allows|origins; at most`,
		"browsers send Origin as scheme://host[:port] and nothing else: an entry of another shape never matches, and a lone * beside others makes them say nothing"),
	rule(`cors\.(allowMethods|allowHeaders|exposeHeaders)(\[\d+\])?`, `must be an HTTP method|must be a valid HTTP header name|is empty|; at most`,
		"the lists go into one response header, which browsers split at commas into tokens: an entry that is no token (a space, a comma) is one no browser reads as meant"),
	rule(`extProc\.service`, `short Service name|lacks the cluster domain|must be a service host name`,
		"istiod builds no cluster of that name, so every request's processing would fail: answered with the failure status (deny) or passed unprocessed (allow)"),
	rule(`extProc\.messageTimeout`, `must be between 1ms and`, "Envoy takes 0, which times out every message at once: every request would fail"),
	rule(`extProc\.failureStatus`, `must be one of`, "a failed processing answered with a status below 400 would tell the client its request went through or moved"),
	rule(`(accessLog\.json|customErrors\.(localReplies|upstream)\[\d+\]\.json).*`, `has an empty key`, "a field with no name: a log line or error body whose reader can't look the value up by it"),
	rule(`extAuth\.signIn\.(url|redirectParam)`, `must be an absolute|must not hold|must be a query parameter name`, "browsers follow only an http(s) URL or a path, and the original URL is added to it unescaped: a fragment, a space or a parameter name with other characters breaks the redirect"),
	rule(`downstream\.tcpKeepalive\.(probes|idleTime|interval)`, `must be between`,
		"Linux's setsockopt refuses (EINVAL) TCP keepalive times outside 1 to 32767 seconds and more than 127 probes, which validate mode, binding no socket, never asks it"),
}

func rule(path, msg, why string) struct {
	path, msg *regexp.Regexp
	why       string
} {
	return struct {
		path, msg *regexp.Regexp
		why       string
	}{regexp.MustCompile(`^(?:` + path + `)$`), regexp.MustCompile(msg), why}
}

// deliberateWhy is the reason of the entry matching problem p, "" when
// none does.
func deliberateWhy(p *fielderr.Error) string {
	for _, d := range deliberate {
		if d.path.MatchString(p.Path) && d.msg.MatchString(p.Msg) {
			return d.why
		}
	}
	return ""
}

// verdict is validation's word on one document, and what Envoy gets.
type verdict struct {
	valid    bool
	problems []*fielderr.Error
	// objs is the document's set: the valid one, or, for a refused
	// document, what it renders to without validation (nil when even
	// that fails: the document does not decode, or Envoy's own proto
	// rules refuse it; see skipped).
	objs    []*envoyfilter.Object
	skipped string
	// doc is the document as decoded without validation, for reached.
	doc *document.Document
}

// judge is what validation says of src, as `globalconfig validate` says it.
func judge(src []byte) verdict {
	res := render.New().FromConfigMap(map[string]string{document.DataKey: string(src)})
	if res.Valid() {
		return verdict{valid: true, objs: res.Objects}
	}
	v := verdict{problems: res.Problems}
	doc, err := document.Unvalidated().Parse(src)
	if err != nil {
		v.skipped = "does not decode"
		return v
	}
	v.doc = doc
	func() {
		defer func() {
			if r := recover(); r != nil {
				v.skipped = fmt.Sprintf("an item's Build panics on what its Validate refuses: %v", r)
			}
		}()
		objs, err := render.Desired(doc)
		if err != nil {
			v.skipped = "its patches break Envoy's proto rules, or an item can't build it"
			return
		}
		v.objs = objs
	}()
	return v
}

// envoys are the real Envoys of `make test`, or a skip.
func envoys(t testing.TB) []*envoybin.Binary {
	t.Helper()
	var out []*envoybin.Binary
	for _, env := range []string{"GLOBALCONFIG_ENVOY", "GLOBALCONFIG_ENVOY_OLD"} {
		path := os.Getenv(env)
		if path == "" {
			t.Skip(toolcache.Unset("the real Envoys", env))
		}
		b, err := envoybin.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		out = append(out, b)
	}
	return out
}

// disagreement is one document judged differently.
type disagreement struct {
	gen   generated
	envoy string
	what  string
}

// outcome tallies a run.
type outcome struct {
	mu                          sync.Mutex
	docs, admitted, refused     int
	skipped                     map[string]int
	deliberate                  map[string]int
	envoyRuns, bothRefuse, both int
	// unreached counts problems with a string that never reached Envoy:
	// an item builds nothing from a value its Validate refuses.
	unreached     int
	disagreements []disagreement
}

// check judges gen with validation and every Envoy, and records the
// outcome.
func (o *outcome) check(ctx context.Context, bins []*envoybin.Binary, gen generated) error {
	v := judge(gen.src)
	o.mu.Lock()
	o.docs++
	if v.valid {
		o.admitted++
	} else {
		o.refused++
	}
	if v.objs == nil {
		o.skipped[v.skipped]++
		o.mu.Unlock()
		return nil
	}
	o.mu.Unlock()
	for _, b := range bins {
		msg, err := envoycheck.Verdict(ctx, b, v.objs)
		if err != nil {
			return fmt.Errorf("envoy %s on\n%s\n%s: %w", b.Version, gen.src, strings.Join(gen.how, "; "), err)
		}
		o.mu.Lock()
		o.envoyRuns++
		switch {
		case v.valid && msg != "":
			o.disagreements = append(o.disagreements, disagreement{gen, b.Version, "admitted, but Envoy refuses it: " + msg})
		case v.valid:
			o.both++
		case msg != "":
			o.bothRefuse++
		default:
			var unmatched []string
			var why string
			for _, p := range v.problems {
				if w := deliberateWhy(p); w != "" {
					why = w
					continue
				}
				if !reached(v, p) {
					o.unreached++
					continue
				}
				unmatched = append(unmatched, p.Error())
			}
			if len(unmatched) > 0 {
				o.disagreements = append(o.disagreements, disagreement{gen, b.Version, "refused, but Envoy loads it: " + strings.Join(unmatched, "; ")})
			} else {
				o.deliberate[why]++
			}
		}
		o.mu.Unlock()
	}
	return nil
}

// workers run Envoy at once: a validate run spends most of its time
// waiting, not on a core.
const workers = 8

// TestEnvoyAgreement generates documents from the registry and fails on
// every one validation and a real Envoy judge differently.
func TestEnvoyAgreement(t *testing.T) {
	bins := envoys(t)
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	n := 500
	if s := os.Getenv("GLOBALCONFIG_AGREEMENT_DOCS"); s != "" {
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(1)
	if s := os.Getenv("GLOBALCONFIG_AGREEMENT_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	g := newGenerator(seed, seeds)
	docs := make([]generated, n)
	for i := range docs {
		docs[i] = g.document()
	}
	o := &outcome{skipped: map[string]int{}, deliberate: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	work := make(chan generated)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := range work {
				if err := o.check(ctx, bins, gen); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, d := range docs {
		work <- d
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d documents (seed %d) in %s: %d admitted, %d refused; %d Envoy runs; admitted and loaded %d, refused by both %d; deliberate refusals %v; refused strings that never reached Envoy %d; not put to Envoy %v",
		o.docs, seed, time.Since(start).Round(time.Millisecond), o.admitted, o.refused, o.envoyRuns, o.both, o.bothRefuse, o.deliberate, o.unreached, o.skipped)
	slices.SortFunc(o.disagreements, func(a, b disagreement) int { return strings.Compare(a.what, b.what) })
	for i, d := range o.disagreements {
		if i == 25 {
			t.Errorf("… and %d more disagreements", len(o.disagreements)-i)
			break
		}
		t.Errorf("envoy %s: %s\n  made by: %s\n%s", d.envoy, d.what, strings.Join(d.gen.how, "; "), indent(string(d.gen.src)))
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// reached reports whether problem p's value reached Envoy: its string (a
// map's key or value, a list's element) is in the set Envoy loaded. A
// value an item's Build leaves out, because Validate refuses it, tells
// nothing of Envoy's verdict on it. Numbers and other values are taken to
// reach it.
func reached(v verdict, p *fielderr.Error) bool {
	if v.doc != nil {
		// A disabled item is validated, so that enabling it holds no
		// surprise, but it builds nothing.
		for _, s := range v.doc.Sections {
			if !s.Item.Enabled() && (p.Path == s.Name || strings.HasPrefix(p.Path, s.Name+".") || strings.HasPrefix(p.Path, s.Name+"[")) {
				return false
			}
		}
	}
	strs := stringsAt(v.doc, p.Path)
	if strs == nil {
		return true
	}
	var all strings.Builder
	for _, o := range v.objs {
		b, err := json.Marshal(o)
		if err != nil {
			return true
		}
		all.Write(b)
	}
	for _, s := range strs {
		if s == "" {
			continue
		}
		q, _ := json.Marshal(s)
		if strings.Contains(all.String(), strings.Trim(string(q), `"`)) {
			return true
		}
	}
	return false
}

// pathSegment is one step of a problem's path: a key, ["quoted key"] or
// [index].
var pathSegment = regexp.MustCompile(`^(?:\.?([^.\[]+)|\[("(?:[^"\\]|\\.)*")\]|\[(\d+)\])`)

// stringsAt returns the strings at path in doc's sections: the string
// there, or the key that names it in a map; nil when path names no string.
func stringsAt(doc *document.Document, path string) []string {
	if doc == nil {
		return nil
	}
	var v reflect.Value
	var key string
	for path != "" {
		m := pathSegment.FindStringSubmatch(path)
		if m == nil {
			return nil
		}
		path = path[len(m[0]):]
		seg := m[1]
		if m[2] != "" {
			seg, _ = strconv.Unquote(m[2])
		}
		if !v.IsValid() {
			for _, s := range doc.Sections {
				if s.Name == seg {
					v = reflect.ValueOf(s.Item)
				}
			}
			if !v.IsValid() {
				return nil
			}
			continue
		}
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		switch {
		case m[3] != "":
			i, _ := strconv.Atoi(m[3])
			if v.Kind() != reflect.Slice || i >= v.Len() {
				return nil
			}
			v = v.Index(i)
		case v.Kind() == reflect.Map:
			key = seg
			v = v.MapIndex(reflect.ValueOf(seg))
			if !v.IsValid() {
				return []string{seg}
			}
		case v.Kind() == reflect.Struct:
			f, ok := fieldByKey(v.Type(), seg)
			if !ok {
				return nil
			}
			v = v.FieldByIndex(f)
		default:
			return nil
		}
	}
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.String {
		if key != "" {
			return []string{key}
		}
		return nil
	}
	if key != "" && v.String() == "" {
		return []string{key}
	}
	return []string{v.String()}
}

func fieldByKey(t reflect.Type, name string) ([]int, bool) {
	for _, f := range items.Fields(t) {
		if f.Name == name {
			return f.Index, true
		}
	}
	return nil, false
}
