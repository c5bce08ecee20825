package document_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/items/gzip"
	"github.com/globalconfig/globalconfig/items/headers"
	"github.com/globalconfig/globalconfig/items/tracing"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// problems parses src and returns its problems as "line: path: msg".
func problems(t *testing.T, src string) []string {
	t.Helper()
	_, err := document.Parse([]byte(src))
	if err == nil {
		return nil
	}
	var de *document.Error
	if !errors.As(err, &de) {
		t.Fatalf("Parse returned %T, want *document.Error: %v", err, err)
	}
	var out []string
	for _, p := range de.Problems {
		out = append(out, fmt.Sprintf("%02d: %s", p.Line, p.Error()))
	}
	return out
}

func TestValidationMessages(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "misspelled item",
			src:  "gizp:\n  enable: true\n",
			want: []string{`01: gizp: unknown item; did you mean "gzip"?`},
		},
		{
			name: "unknown item far from any",
			src:  "compression: {}\n",
			want: []string{`01: compression: unknown item; expected one of: ` + strings.Join(topLevelKeys(), ", ")},
		},
		{
			name: "misspelled key",
			src:  "gzip:\n  chunksize: 8192\n",
			want: []string{`02: gzip.chunksize: unknown key; did you mean "chunkSize"?`},
		},
		{
			name: "out of range",
			src:  "gzip:\n  chunkSize: 100\n",
			want: []string{`02: gzip.chunkSize: must be between 4096 and 65536, got 100`},
		},
		{
			name: "wrong type",
			src:  "gzip:\n  memoryLevel: high\n",
			want: []string{`02: gzip.memoryLevel: expected an integer, got a string`},
		},
		{
			name: "float for an integer",
			src:  "gzip:\n  windowBits: 12.5\n",
			want: []string{`02: gzip.windowBits: expected an integer, got a number`},
		},
		{
			name: "overflow",
			src:  "gzip:\n  chunkSize: 99999999999\n",
			want: []string{`02: gzip.chunkSize: must be at most 4294967295, got 99999999999`},
		},
		{
			name: "enum with suggestion",
			src:  "gzip:\n  compressionStrategy: FILTER\n",
			want: []string{`02: gzip.compressionStrategy: unknown value "FILTER"; did you mean "FILTERED"?`},
		},
		{
			name: "section of the wrong kind",
			src:  "gzip: true\n",
			want: []string{`01: gzip: expected a mapping, got a boolean`},
		},
		{
			name: "document of the wrong kind",
			src:  "- gzip\n",
			want: []string{`01: the document must be a mapping of item names, got a list`},
		},
		{
			name: "duplicate key",
			src:  "gzip:\n  chunkSize: 8192\n  chunkSize: 4096\n",
			want: []string{`03: gzip.chunkSize: duplicate key`},
		},
		{
			name: "alias",
			src:  "gzip:\n  contentType: &types [text/html]\nbrotli:\n  contentType: *types\n",
			want: []string{`04: brotli.contentType: YAML aliases are not supported; write the value out`},
		},
		{
			name: "every problem at once, in line order",
			src:  "gzip:\n  chunkSize: 1\n  memoryLevel: x\ntracing:\n  sampling: 101\ngizp: {}\n",
			want: []string{
				`02: gzip.chunkSize: must be between 4096 and 65536, got 1`,
				`03: gzip.memoryLevel: expected an integer, got a string`,
				`05: tracing.sampling: must be between 0 and 100, got 101`,
				`06: gizp: unknown item; did you mean "gzip"?`,
			},
		},
		{
			name: "bad port is reported once",
			src:  "tracing:\n  enable: true\n  zipkin:\n    service: z.ns.svc.cluster.local\n    port: \"http\"\n",
			want: []string{`05: tracing.zipkin.port: must be a port number from 1 to 65535, got "http"`},
		},
		{
			name: "enabled tracing without backend",
			src:  "tracing:\n  enable: true\n",
			want: []string{`01: tracing: enabled tracing needs one backend: zipkin, skywalking, opentelemetry or datadog`},
		},
		{
			name: "bad duration",
			src:  "tracing:\n  timeout: soon\n",
			want: []string{`02: tracing.timeout: must be a duration such as "90s" or "500ms", got "soon"`},
		},
		{
			name: "target problems",
			src:  "target:\n  context: gateway\n  namespace: Istio_System\n  proxyVersion: '(['\n",
			want: []string{
				`02: target.context: unknown value "gateway"; did you mean "GATEWAY"?`,
				`03: target.namespace: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
				"04: target.proxyVersion: invalid regular expression: error parsing regexp: missing closing ]: `[`",
			},
		},
		{
			name: "item target problems carry the item path",
			src:  "gzip:\n  target:\n    contxt: ANY\n",
			want: []string{`03: gzip.target.contxt: unknown key; did you mean "context"?`},
		},
		{
			name: "syntax error",
			src:  "gzip:\n  chunkSize: [\n",
			want: []string{`02: invalid YAML: did not find expected node content`},
		},
		{
			name: "secret values are never echoed",
			src:  "tracing:\n  skywalking:\n    access_token: [s3cr3t]\n",
			want: []string{`03: tracing.skywalking.access_token: expected a string, got a list`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := problems(t, c.src)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("problems:\n got: %q\nwant: %q", got, c.want)
			}
		})
	}
}

func TestHigressDocumentValidatesUnchanged(t *testing.T) {
	// The tracing and gzip sections of a Higress higress-config, verbatim in
	// the shapes Higress accepts: ports as strings, timeout in ms, float
	// sampling, access_token in snake case.
	src := `
tracing:
  enable: true
  sampling: 100
  timeout: 500
  skywalking:
    service: skywalking-oap-server.op-system.svc.cluster.local
    port: "11800"
    access_token: ""
gzip:
  enable: true
  minContentLength: 1024
  contentType:
    - "text/html"
    - "text/css"
    - "text/plain"
    - "text/xml"
    - "application/json"
    - "application/javascript"
    - "application/xhtml+xml"
    - "image/svg+xml"
  disableOnEtagHeader: true
  memoryLevel: 5
  windowBits: 12
  chunkSize: 4096
  compressionLevel: "BEST_COMPRESSION"
  compressionStrategy: "DEFAULT_STRATEGY"
disableXEnvoyHeaders: false
addXRealIpHeader: false
`
	doc, err := document.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Higress document rejected:\n%v", err)
	}
	tr := section(t, doc, "tracing").Item.(*tracing.Tracing)
	if tr.Timeout.Milliseconds() != 500 || tr.Skywalking.Port != 11800 {
		t.Errorf("timeout %v, port %d: want 500ms and 11800", tr.Timeout, tr.Skywalking.Port)
	}
	if g := section(t, doc, "gzip").Item.(*gzip.Gzip); len(g.ContentType) != 8 || g.ChunkSize != 4096 {
		t.Errorf("gzip decoded as %+v", g)
	}
}

func section(t *testing.T, doc *document.Document, name string) document.Section {
	t.Helper()
	for _, s := range doc.Sections {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no section %q in %+v", name, doc.Sections)
	return document.Section{}
}

func TestDefaultsAndPresence(t *testing.T) {
	doc, err := document.Parse([]byte("gzip: {}\ntracing:\nzstd:\n  enable: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Sections) != 2 {
		t.Fatalf("sections %v: want gzip and zstd (a null tracing is absent)", doc.Sections)
	}
	g := section(t, doc, "gzip").Item.(*gzip.Gzip)
	if !g.Enabled() || g.ChunkSize != 4096 || g.CompressionLevel != "BEST_COMPRESSION" || g.MinContentLength != 1024 {
		t.Errorf("gzip defaults: %+v", g)
	}
	if section(t, doc, "zstd").Item.Enabled() {
		t.Error("zstd with enable: false is enabled")
	}
	// A null field keeps its default.
	doc, err = document.Parse([]byte("gzip:\n  chunkSize:\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := section(t, doc, "gzip").Item.(*gzip.Gzip); g.ChunkSize != 4096 {
		t.Errorf("null chunkSize gave %d, want the default", g.ChunkSize)
	}
}

func TestHigressTopLevelKeys(t *testing.T) {
	doc, err := document.Parse([]byte("disableXEnvoyHeaders: true\naddXRealIpHeader: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := section(t, doc, "headers").Item.(*headers.Headers)
	if !h.DisableXEnvoyHeaders || h.AddXRealIPHeader {
		t.Errorf("top-level keys decoded as %+v", h)
	}
	// Higress's reference document writes both as false: nothing to do.
	doc, err = document.Parse([]byte("disableXEnvoyHeaders: false\naddXRealIpHeader: false\n"))
	if err != nil || len(doc.Sections) != 0 {
		t.Errorf("false top-level keys: sections %v, err %v", doc, err)
	}
	got := problems(t, "disableXEnvoyHeaders: yes\n")
	if len(got) != 1 || got[0] != "01: disableXEnvoyHeaders: expected true or false, got a string" {
		t.Errorf("problems %q", got)
	}
}

func TestEmptyDocumentIsValid(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "---\n"} {
		doc, err := document.Parse([]byte(src))
		if err != nil || len(doc.Sections) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want an empty valid document", src, doc, err)
		}
	}
}

func TestTargetOverride(t *testing.T) {
	doc, err := document.Parse([]byte(`
target:
  selector: {istio: ingressgateway}
  namespace: gateways
gzip:
  target:
    context: ANY
    proxyVersion: '^1\.31'
brotli:
  target:
    selector: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := section(t, doc, "gzip").Target
	want := envoyfilter.Target{Context: envoyfilter.ContextAny, Selector: map[string]string{"istio": "ingressgateway"}, Namespace: "gateways", ProxyVersion: `^1\.31`}
	if g.Context != want.Context || g.Namespace != want.Namespace || g.ProxyVersion != want.ProxyVersion || g.Selector["istio"] != "ingressgateway" {
		t.Errorf("gzip target %+v, want %+v", g, want)
	}
	if b := section(t, doc, "brotli").Target; len(b.Selector) != 0 || b.Context != envoyfilter.ContextGateway {
		t.Errorf("brotli target %+v: an empty selector must clear the document's, context stays GATEWAY", b)
	}
}

func TestParseFileManifestLines(t *testing.T) {
	src := `apiVersion: v1
kind: ConfigMap
metadata:
  name: global-config
  namespace: istio-system
data:
  config.yaml: |
    gzip:
      chunkSize: 10
`
	_, err := document.ParseFile([]byte(src))
	var de *document.Error
	if !errors.As(err, &de) || len(de.Problems) != 1 {
		t.Fatalf("got %v, want one problem", err)
	}
	if p := de.Problems[0]; p.Line != 9 || p.Path != "gzip.chunkSize" {
		t.Errorf("problem at line %d path %q, want line 9 of the manifest, gzip.chunkSize", p.Line, p.Path)
	}
	_, err = document.ParseFile([]byte("apiVersion: v1\nkind: ConfigMap\ndata:\n  other: x\n"))
	if err == nil || !strings.Contains(err.Error(), `no data key "config.yaml"`) {
		t.Errorf("ConfigMap without config.yaml: %v", err)
	}
	doc, err := document.ParseFile([]byte("gzip: {}\n"))
	if err != nil || len(doc.Sections) != 1 {
		t.Errorf("bare document through ParseFile: %v, %v", doc, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "gzip: {}", "tracing:\n  enable: true\n  zipkin: {service: a.b, port: '1'}",
		"target: {selector: {a: b}}", "gzip: &a {x: *a}", "a: [1, {b: c}]", "gzip:\n  contentType: [1, 2]",
		"kind: ConfigMap\ndata:\n  config.yaml: |\n    gzip: {}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := document.ParseFile(data)
		if (doc == nil) == (err == nil) {
			t.Fatalf("ParseFile returned doc %v and err %v: exactly one must be set", doc, err)
		}
		var de *document.Error
		if err != nil && (!errors.As(err, &de) || len(de.Problems) == 0) {
			t.Fatalf("error is not a *document.Error with problems: %v", err)
		}
		if doc != nil {
			// A valid document must render, or fail with problems; never panic.
			if _, err := render.Desired(doc); err != nil && !errors.As(err, &de) {
				t.Fatalf("render error is not a *document.Error: %v", err)
			}
		}
	})
}

// topLevelKeys is every key the document knows at its top, sorted: the
// items, their Higress top-level keys and target.
func topLevelKeys() []string {
	keys := []string{document.TargetKey, canary.Key}
	for _, r := range items.All() {
		keys = append(keys, r.Name)
		for top := range r.TopLevel {
			keys = append(keys, top)
		}
	}
	slices.Sort(keys)
	return keys
}

func TestIstioVersions(t *testing.T) {
	doc, err := document.Parse([]byte(`
target:
  istioVersions: [1.30, "1.28", 1.31.2]
gzip:
  target:
    istioVersions: ["1.27"]
brotli: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	v := func(minor int) envoyfilter.Version { return envoyfilter.Version{Major: 1, Minor: minor} }
	// An unquoted 1.30 is 1.30, not the number 1.3.
	if got := doc.Target.Fleet(); len(got) != 3 || got[0] != v(28) || got[1] != v(30) || got[2] != v(31) {
		t.Errorf("document fleet %v, want [1.28 1.30 1.31]", got)
	}
	if got := section(t, doc, "gzip").Target.Fleet(); len(got) != 1 || got[0] != v(27) {
		t.Errorf("gzip's own istioVersions: %v", got)
	}
	if got := section(t, doc, "brotli").Target.Fleet(); len(got) != 3 {
		t.Errorf("brotli inherits the document's: %v", got)
	}
	// The CLI's --istio-versions replaces both.
	doc, err = document.NewParserFor([]envoyfilter.Version{v(29)}).Parse([]byte("target:\n  istioVersions: [1.30]\ngzip:\n  target:\n    istioVersions: [1.27]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := section(t, doc, "gzip").Target.Fleet(); len(got) != 1 || got[0] != v(29) {
		t.Errorf("with NewParserFor(1.29), gzip's fleet is %v", got)
	}

	got := problems(t, "target:\n  istioVersions: [1.24, latest, true]\n")
	for _, want := range []string{
		"02: target.istioVersions[0]: Istio 1.24 is older than every release globalconfig knows (1.25 to 1.31)",
		"02: target.istioVersions[1]: must be a version such as \"1.28\", got \"latest\"",
		"02: target.istioVersions[2]: must be a version such as \"1.28\", got bool \"true\"",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
}

// Two items valid alone can be invalid together: Envoy refuses original IP
// detection beside use_remote_address or xff_num_trusted_hops on one
// connection manager, and rejects the listener. The items declare it
// (items.Sharer); the document refuses both keys, with their lines, when
// their targets may reach one proxy, and not otherwise.
func TestItemsValidAloneInvalidTogether(t *testing.T) {
	const together = `target:
  context: SIDECAR_INBOUND
clientIP:
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  xff:
    trustedHops: 1
`
	got := problems(t, together)
	if len(got) != 2 || !strings.HasPrefix(got[0], "04: clientIP.trustedCIDRs: can't be beside headers.xff.trustedHops on one connection manager (both reach SIDECAR_INBOUND)") ||
		!strings.HasPrefix(got[1], "07: headers.xff.trustedHops: can't be beside clientIP.trustedCIDRs") || !strings.Contains(got[0], "xff_num_trusted_hops") {
		t.Errorf("problems:\n%s", strings.Join(got, "\n"))
	}
	for _, apart := range []string{
		// Different contexts: no connection manager has both.
		"clientIP:\n  target: {context: SIDECAR_INBOUND}\n  trustedCIDRs: [\"10.0.0.0/8\"]\nheaders:\n  target: {context: GATEWAY}\n  xff: {trustedHops: 1}\n",
		// Selectors that can't match one workload.
		"target: {context: SIDECAR_INBOUND}\nclientIP:\n  target: {selector: {app: a}}\n  header: cf-connecting-ip\nheaders:\n  target: {selector: {app: b}}\n  xff: {useRemoteAddress: true}\n",
		// useRemoteAddress: false sets nothing Envoy minds.
		"target: {context: SIDECAR_INBOUND}\nclientIP:\n  header: cf-connecting-ip\nheaders:\n  xff: {useRemoteAddress: false}\n",
	} {
		if got := problems(t, apart); got != nil {
			t.Errorf("%s\nrefused: %s", apart, strings.Join(got, "\n"))
		}
	}
	if got := problems(t, "target: {context: ANY}\nclientIP:\n  target: {context: SIDECAR_INBOUND}\n  header: cf-connecting-ip\nheaders:\n  xff: {useRemoteAddress: true}\n"); len(got) != 2 {
		t.Errorf("ANY beside SIDECAR_INBOUND: %s", strings.Join(got, "\n"))
	}
}

// downstream.http1's trailers and header case set every cluster's HTTP
// protocol options, as upstream's idleTimeout does, and Istio replaces
// that entry whole: one of the two would silently undo the other, so the
// document refuses the pair once, at both keys, and not when their
// targets can't meet.
func TestClusterProtocolOptionsClaimedOnce(t *testing.T) {
	got := problems(t, "downstream:\n  http1:\n    enableTrailers: true\nupstream:\n  idleTimeout: 60s\n")
	if len(got) != 2 || !strings.HasPrefix(got[0], "03: downstream.http1.enableTrailers: can't be beside upstream.idleTimeout on one cluster") ||
		!strings.HasPrefix(got[1], "05: upstream.idleTimeout: can't be beside downstream.http1.enableTrailers on one cluster") {
		t.Errorf("problems:\n%s", strings.Join(got, "\n"))
	}
	for _, apart := range []string{
		"downstream:\n  http1:\n    acceptHttp10: true\n    defaultHost: www.example.com\nupstream:\n  idleTimeout: 60s\n",
		"downstream:\n  target: {context: SIDECAR_INBOUND}\n  http1:\n    preserveHeaderCase: true\nupstream:\n  maxRequestsPerConnection: 10\n",
	} {
		if got := problems(t, apart); got != nil {
			t.Errorf("%s\nrefused: %s", apart, strings.Join(got, "\n"))
		}
	}
}

// A collector named by a Service's short name gets no cluster on any
// proxy (istiod names clusters after full host names), and Envoy refuses
// every listener that sends to it: the document refuses it with its path.
func TestCollectorShortNameRefused(t *testing.T) {
	for host, want := range map[string]string{
		"zipkin":                                  `06: tracing.zipkin.service: "zipkin" is a short Service name; istiod names clusters after full host names`,
		"zipkin.istio-system.svc":                 `06: tracing.zipkin.service: "zipkin.istio-system.svc" lacks the cluster domain`,
		"zipkin.istio-system.svc.cluster.local":   "",
		"otel-collector.observability.example.io": "",
	} {
		src := "tracing:\n  enable: true\n  sampling: 10\n  timeout: 500\n  zipkin:\n    service: " + host + "\n    port: 9411\n"
		got := problems(t, src)
		if want == "" && got != nil || want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], want)) {
			t.Errorf("%s: problems %q, want %q", host, got, want)
		}
	}
}

// fakeFacts says what a cluster would of the services an item names.
type fakeFacts map[string]items.ServiceFact

func (f fakeFacts) Service(ref items.ServiceRef) items.ServiceFact { return f[ref.Host] }

// With the cluster's facts, a service istiod will never resolve as written
// is refused, and a missing one warned of, each at its path; the facts are
// asked again on every parse, though the section is unchanged.
func TestServiceFacts(t *testing.T) {
	p := document.NewParser()
	src := []byte("tracing:\n  enable: true\n  zipkin:\n    service: zipkin.istio-system\n    port: 9411\n")
	p.SetFacts(fakeFacts{"zipkin.istio-system": {Refuse: true, Msg: "istiod names this Service zipkin.istio-system.svc.cluster.local"}})
	_, err := p.Parse(src)
	if err == nil || !strings.Contains(err.Error(), "tracing.zipkin.service: istiod names this Service zipkin.istio-system.svc.cluster.local") {
		t.Fatalf("refused reference: %v", err)
	}
	p.SetFacts(fakeFacts{"zipkin.istio-system": {Warn: true, Msg: "no Service or ServiceEntry has this host yet"}})
	doc, err := p.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if w := doc.Warnings(); len(w) != 1 || w[0].Path != "tracing.zipkin.service" {
		t.Errorf("warnings %v", w)
	}
	p.SetFacts(fakeFacts{})
	if doc, err := p.Parse(src); err != nil || len(doc.Warnings()) != 0 {
		t.Errorf("a Service that now exists: %v %v", err, doc.Warnings())
	}
}

// Each class of document that validation once admitted and Envoy refused
// at load, as users write them: each is refused, at its path. And what
// Envoy takes that validation once refused is admitted.
func TestWhatEnvoyRefusesIsRefused(t *testing.T) {
	render := func(src string) []string {
		res := render.New().FromConfigMap(map[string]string{document.DataKey: src})
		var out []string
		for _, p := range res.Problems {
			out = append(out, p.Error())
		}
		return out
	}
	for _, c := range []struct{ name, src, want string }{
		{"a literal percent sign in an access log line",
			"accessLog:\n  format: \"[%START_TIME%] %REQ(:PATH)% took %DURATION% ms, 100% done\\n\"\n",
			`accessLog.format: "% done\n": a lone "%" must be written "%%"`},
		{"an operator's argument Envoy's parser refuses",
			"accessLog:\n  json: {path: \"%PATH(WQ:FULL):20%\", grpc: \"%GRPC_STATUS(PASCAL)%\"}\n",
			"accessLog.json.grpc:"},
		{"a header value that is a format string: a discount in a rate-limit reply header",
			"localRateLimit:\n  maxTokens: 100\n  responseHeaders: {x-promo: \"10% off for waiting\"}\n",
			"localRateLimit.responseHeaders.x-promo:"},
		{"an escape Envoy 1.39's RE2 (Latin-1) refuses",
			"target: {istioVersions: [\"1.31\"]}\nipAccess:\n  denyUserAgents: [\"~\\\\x{4e00}bot\"]\n",
			`ipAccess.denyUserAgents[0]: Envoy's RE2 refuses it: invalid escape sequence: \x{4e0`},
		{"a regex over Envoy's RE2 program size that is no alternation",
			"ipAccess:\n  denyUserAgents: [\"~^Mozilla/5\\\\.0 \\\\(compatible; [A-Za-z]{3,30}bot/[0-9]+\\\\.[0-9]+; \\\\+https?://[a-z.]+/[a-z/]*\\\\)$\"]\n",
			"ipAccess.denyUserAgents[0]: its RE2 program size is"},
		{"an access log an Istio proxy can't write",
			"accessLog:\n  path: /var/log/envoy/access.log\n",
			"accessLog.path: /var/log/envoy/access.log can't be written by an Istio proxy"},
		{"TLS settings on the standard gateway's plaintext port",
			"tls:\n  ports: [443, 8080]\n  minVersion: TLSv1_2\n",
			"tls.ports[1]: 8080 is the standard gateway's plaintext HTTP port"},
		{"a collector named by its Service's short name",
			"tracing:\n  enable: true\n  zipkin: {service: zipkin, port: 9411}\n",
			`tracing.zipkin.service: "zipkin" is a short Service name`},
	} {
		got := render(c.src)
		if !slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, c.want) }) {
			t.Errorf("%s: problems %q, want one starting %q", c.name, got, c.want)
		}
	}
	for _, src := range []string{
		// :authority as a rate-limit key and a span tag: Envoy reads it.
		"localRateLimit:\n  perHeader: [{header: \":authority\", maxTokens: 10}]\n",
		"tracing:\n  enable: true\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\n  customTags: {host: {header: \":authority\"}}\n",
		// A length on DYNAMIC_METADATA, which Envoy 1.37 and newer take.
		"target: {istioVersions: [\"1.30\", \"1.31\"]}\naccessLog:\n  format: \"%DYNAMIC_METADATA(envoy.lb:canary):10%\\n\"\n",
		// A bot list as one alternation: split into regexes that fit.
		"ipAccess:\n  denyUserAgents: [\"~*(AhrefsBot|SemrushBot|MJ12bot|DotBot|PetalBot|Bytespider|GPTBot|CCBot|ClaudeBot|Amazonbot|BLEXBot|YandexBot)\"]\n",
	} {
		if got := render(src); got != nil {
			t.Errorf("%s: refused: %q", src, got)
		}
	}
}

// A problem a rule finds in a list element, after decoding, is at the
// element's own line, however the list is written.
func TestListElementProblemLines(t *testing.T) {
	src := "gzip:\n  contentType:\n  - text/html\n\n  - text/*\n  minContentLength: 10\nbrotli:\n  contentType: [text/html,\n    text/*]\n"
	_, err := document.Parse([]byte(src))
	var de *document.Error
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want problems", err)
	}
	want := map[string]int{"gzip.contentType[1]": 5, "brotli.contentType[1]": 9}
	for _, p := range de.Problems {
		if line, ok := want[p.Path]; ok {
			if p.Line != line {
				t.Errorf("%s at line %d, want %d", p.Path, p.Line, line)
			}
			delete(want, p.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("no problem at %v: %v", want, de.Problems)
	}
}
