package higress_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/convert/higress"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// The values Higress's own code emits (pkg/ingress/kube/configmap,
// read for these tests) are written into each case; each converted
// document is rendered, and the Envoy values compared field by field.

// gateway is what a converted document puts into effect, decoded.
type gateway struct {
	objs     map[string]*envoyfilter.Object
	hcm      *hcmv3.HttpConnectionManager // the downstream item's merge
	listener *listenerv3.Listener
	clusters []*clusterv3.Cluster // upstream merges
	routes   []*routev3.Route
	report   higress.Report
}

func convert(t *testing.T, src string) gateway {
	t.Helper()
	res, err := higress.Convert(higress.Input{Higress: src}, higress.Options{})
	if err != nil {
		t.Fatalf("convert:\n%s\n%v", src, err)
	}
	// The manifest carries the same document, valid as it is.
	doc, err := document.ParseFile(res.Manifest)
	if err != nil {
		t.Fatalf("the manifest does not parse: %v\n%s", err, res.Manifest)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway{objs: map[string]*envoyfilter.Object{}, report: res.Report}
	for _, o := range objs {
		g.objs[o.Item()] = o
		if got := o.Spec.GetWorkloadSelector().GetLabels()["higress"]; got != "higress-system-higress-gateway" {
			t.Errorf("%s selects %v, want Higress's gateway", o.Metadata.Name, o.Spec.GetWorkloadSelector().GetLabels())
		}
	}
	for _, v := range values(t, g.objs["downstream"]) {
		switch v := v.(type) {
		case *listenerv3.Filter:
			g.hcm = &hcmv3.HttpConnectionManager{}
			if err := v.GetTypedConfig().UnmarshalTo(g.hcm); err != nil {
				t.Fatal(err)
			}
		case *listenerv3.Listener:
			g.listener = v
		case *routev3.Route:
			g.routes = append(g.routes, v)
		}
	}
	for _, v := range values(t, g.objs["upstream"]) {
		g.clusters = append(g.clusters, v.(*clusterv3.Cluster))
	}
	return g
}

// values decodes the patch values of o (none when o is nil).
func values(t *testing.T, o *envoyfilter.Object) []proto.Message {
	t.Helper()
	if o == nil {
		return nil
	}
	var out []proto.Message
	for _, cp := range o.Spec.GetConfigPatches() {
		m, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

// Higress's defaults, as its constructDownstream, constructBufferLimit,
// constructUpstream and NewDefaultGzip emit them.
func checkDefaults(t *testing.T, g gateway, idle int) {
	t.Helper()
	if g.hcm == nil || g.listener == nil || len(g.clusters) == 0 {
		t.Fatalf("downstream or upstream missing: %v", g.objs)
	}
	if got := g.hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(); got != seconds(idle) {
		t.Errorf("HCM idle_timeout %v, want %ds", got, idle)
	}
	if got := g.hcm.GetStreamIdleTimeout().AsDuration(); got != seconds(idle) {
		t.Errorf("HCM stream_idle_timeout %v, want %ds (Higress drives it from idleTimeout)", got, idle)
	}
	if got := g.hcm.GetMaxRequestHeadersKb().GetValue(); got != 60 {
		t.Errorf("max_request_headers_kb %d, want 60", got)
	}
	h2 := g.hcm.GetHttp2ProtocolOptions()
	if h2.GetMaxConcurrentStreams().GetValue() != 100 || h2.GetInitialStreamWindowSize().GetValue() != 65535 || h2.GetInitialConnectionWindowSize().GetValue() != 1048576 {
		t.Errorf("http2_protocol_options %v, want 100 / 65535 / 1048576", h2)
	}
	if got := g.listener.GetPerConnectionBufferLimitBytes().GetValue(); got != 32768 {
		t.Errorf("listener per_connection_buffer_limit_bytes %d, want 32768", got)
	}
	var bufferLimit uint32
	var upstreamIdle time.Duration
	for _, c := range g.clusters {
		if v := c.GetPerConnectionBufferLimitBytes(); v != nil {
			bufferLimit = v.GetValue()
		}
		if a := c.GetTypedExtensionProtocolOptions()[envoyfilter.HTTPProtocolOptionsKey]; a != nil {
			opts := &httpv3.HttpProtocolOptions{}
			if err := a.UnmarshalTo(opts); err != nil {
				t.Fatal(err)
			}
			upstreamIdle = opts.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration()
		}
	}
	if bufferLimit != 10485760 {
		t.Errorf("cluster per_connection_buffer_limit_bytes %d, want 10485760", bufferLimit)
	}
	if upstreamIdle != 10*time.Second {
		t.Errorf("upstream idle timeout %v, want 10s", upstreamIdle)
	}
}

func gzipOf(t *testing.T, g gateway) (*compressorv3.Compressor, *gzipv3.Gzip) {
	t.Helper()
	vs := values(t, g.objs["gzip"])
	if len(vs) != 1 {
		t.Fatalf("gzip EnvoyFilter has %d patches", len(vs))
	}
	c := &compressorv3.Compressor{}
	if err := vs[0].(*hcmv3.HttpFilter).GetTypedConfig().UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	lib := &gzipv3.Gzip{}
	if err := c.GetCompressorLibrary().GetTypedConfig().UnmarshalTo(lib); err != nil {
		t.Fatal(err)
	}
	return c, lib
}

// An empty higress document still put Higress's defaults into effect; the
// converted document puts the same into effect.
func TestEmptyDocumentYieldsHigressDefaults(t *testing.T) {
	for _, src := range []string{"", "{}\n", "downstream: null\nupstream: null\ngzip: null\n"} {
		g := convert(t, src)
		checkDefaults(t, g, 180)
		if len(g.routes) != 0 {
			t.Errorf("%q: a route timeout patch, though routeTimeout defaults to 0", src)
		}
		c, lib := gzipOf(t, g)
		rc := c.GetResponseDirectionConfig()
		if rc.GetCommonConfig().GetMinContentLength().GetValue() != 1024 || !rc.GetDisableOnEtagHeader() ||
			strings.Join(rc.GetCommonConfig().GetContentType(), ",") != strings.Join(higress.DefaultGzipContentType, ",") {
			t.Errorf("%q: gzip response config %v", src, rc)
		}
		if lib.GetMemoryLevel().GetValue() != 5 || lib.GetWindowBits().GetValue() != 12 || lib.GetChunkSize().GetValue() != 4096 ||
			lib.GetCompressionLevel() != gzipv3.Gzip_BEST_COMPRESSION || lib.GetCompressionStrategy() != gzipv3.Gzip_DEFAULT_STRATEGY {
			t.Errorf("%q: gzip library %v", src, lib)
		}
		if _, ok := g.objs["tracing"]; ok {
			t.Errorf("%q: tracing, though Higress's default is off", src)
		}
		if _, ok := g.objs["headers"]; ok {
			t.Errorf("%q: headers, though Higress's defaults are off", src)
		}
	}
}

// routeTimeout 0 leaves every route as Istio set it; another value is
// every route's timeout, as Higress's constructRouteTimeout makes it.
func TestRouteTimeout(t *testing.T) {
	if g := convert(t, "downstream:\n  routeTimeout: 0\n"); len(g.routes) != 0 {
		t.Errorf("routeTimeout 0 patched %d routes", len(g.routes))
	}
	g := convert(t, "downstream:\n  routeTimeout: 30\n")
	if len(g.routes) != 1 || g.routes[0].GetRoute().GetTimeout().AsDuration() != 30*time.Second {
		t.Fatalf("routeTimeout 30: routes %v", g.routes)
	}
	// The rest of the section kept Higress's defaults.
	checkDefaults(t, g, 180)
}

// A partial section keeps Higress's defaults for the keys it leaves out
// (Higress decodes onto them), and idleTimeout drives both idle timeouts.
func TestPartialSectionsKeepHigressDefaults(t *testing.T) {
	g := convert(t, "downstream:\n  idleTimeout: 60\n  http2:\n    maxConcurrentStreams: 200\n")
	if got := g.hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(); got != time.Minute {
		t.Errorf("idle_timeout %v", got)
	}
	if got := g.hcm.GetStreamIdleTimeout().AsDuration(); got != time.Minute {
		t.Errorf("stream_idle_timeout %v, want 60s like idleTimeout", got)
	}
	h2 := g.hcm.GetHttp2ProtocolOptions()
	if h2.GetMaxConcurrentStreams().GetValue() != 200 || h2.GetInitialStreamWindowSize().GetValue() != 65535 || h2.GetInitialConnectionWindowSize().GetValue() != 1048576 {
		t.Errorf("http2 %v, want 200 and the defaults", h2)
	}
	if g.hcm.GetMaxRequestHeadersKb().GetValue() != 60 || g.listener.GetPerConnectionBufferLimitBytes().GetValue() != 32768 {
		t.Error("the keys left out lost Higress's defaults")
	}
	if e := g.report.Find("downstream.maxRequestHeadersKb"); len(e) != 1 || e[0].Verdict != higress.DefaultWritten {
		t.Errorf("report for a default: %+v", e)
	}
	if e := g.report.Find("downstream.idleTimeout"); len(e) != 1 || e[0].Verdict != higress.Converted {
		t.Errorf("report for a given key: %+v", e)
	}
}

func TestGzip(t *testing.T) {
	// Absent or null: on, as in Higress.
	for _, src := range []string{"", "gzip: null\n"} {
		if _, ok := convert(t, src).objs["gzip"]; !ok {
			t.Errorf("%q: gzip off", src)
		}
	}
	if _, ok := convert(t, "gzip:\n  enable: false\n").objs["gzip"]; ok {
		t.Error("enable: false left gzip on")
	}
	// Higress emits check_size, which Istio drops: Envoy used 4096. In
	// Envoy's range the user's value now takes effect; below it, 4096.
	for chunk, want := range map[int]uint32{8192: 8192, 100: 4096, 4096: 4096} {
		g := convert(t, fmt.Sprintf("gzip:\n  chunkSize: %d\n", chunk))
		if _, lib := gzipOf(t, g); lib.GetChunkSize().GetValue() != want {
			t.Errorf("chunkSize %d: chunk_size %d, want %d", chunk, lib.GetChunkSize().GetValue(), want)
		}
		// A key is listed once: as a difference when it is one.
		if e := g.report.Find("gzip.chunkSize"); (chunk != 4096) != (len(e) == 1 && e[0].Verdict == higress.Difference) {
			t.Errorf("chunkSize %d: report %+v", chunk, e)
		}
	}
	g := convert(t, "gzip:\n  minContentLength: 2048\n  contentType: [application/json]\n  compressionLevel: BEST_SPEED\n  memoryLevel: 9\n")
	c, lib := gzipOf(t, g)
	if c.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue() != 2048 ||
		strings.Join(c.GetResponseDirectionConfig().GetCommonConfig().GetContentType(), ",") != "application/json" ||
		lib.GetCompressionLevel() != gzipv3.Gzip_BEST_SPEED || lib.GetMemoryLevel().GetValue() != 9 {
		t.Errorf("gzip %v / %v", c.GetResponseDirectionConfig(), lib)
	}
	// Envoy lowercases a response's content type before matching: an
	// upper-case or parameterised entry never matched at Higress's
	// gateway; it is written as the type that does, and said; one that is
	// no media type is dropped, and with none left gzip is not written.
	g = convert(t, "gzip:\n  contentType: [Text/HTML, \"application/json; charset=utf-8\", text/css, \"not a type\"]\n")
	c, _ = gzipOf(t, g)
	if got := strings.Join(c.GetResponseDirectionConfig().GetCommonConfig().GetContentType(), ","); got != "text/html,application/json,text/css" {
		t.Errorf("content types %s", got)
	}
	// One line for the key, naming each entry that changes.
	if e := g.report.Find("gzip.contentType"); len(e) != 1 || e[0].Verdict != higress.Difference ||
		!strings.Contains(e[0].Detail, `never matched: "Text/HTML" (written as text/html), "application/json; charset=utf-8" (written as application/json)`) ||
		!strings.Contains(e[0].Detail, `not carried: "not a type"`) {
		t.Errorf("report %+v", e)
	}
	// With none left, the rest of the section is not carried with it,
	// and each key says why.
	g = convert(t, "gzip:\n  contentType: [\"not a type\"]\n  minContentLength: 2048\n  memoryLevel: null\n")
	if g.objs["gzip"] != nil {
		t.Error("gzip written with no content type Envoy can match")
	}
	for _, key := range []string{"gzip.minContentLength", "gzip.memoryLevel"} {
		if e := g.report.Find(key); len(e) != 1 || e[0].Verdict != higress.NotCarried || !strings.Contains(e[0].Detail, "none of gzip.contentType's entries is a type Envoy can match") {
			t.Errorf("%s: %+v", key, e)
		}
	}
	if e := g.report.Find("gzip.enable"); len(e) != 0 {
		t.Errorf("gzip.enable, not in the document and not written, has a line: %+v", e)
	}
	// Higress's request direction is off; so is ours (unset).
	if c.GetRequestDirectionConfig() != nil {
		t.Errorf("request direction %v", c.GetRequestDirectionConfig())
	}
}

// tracingOf returns the HCM tracing of the tracing item and its provider
// config.
func tracingOf(t *testing.T, g gateway, cfg proto.Message) *hcmv3.HttpConnectionManager_Tracing {
	t.Helper()
	o := g.objs["tracing"]
	if o == nil {
		t.Fatal("no tracing EnvoyFilter")
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := values(t, o)[0].(*listenerv3.Filter).GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.GetTracing().GetProvider().GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	return hcm.GetTracing()
}

func TestTracing(t *testing.T) {
	sky := &tracev3.SkyWalkingConfig{}
	tr := tracingOf(t, convert(t, `
tracing:
  enable: true
  sampling: 25
  timeout: 800
  skywalking: {service: skywalking-oap-server.op-system.svc.cluster.local, port: "11800", access_token: s3cr3t}
`), sky)
	// Higress: service_name higress-gateway.<namespace> in client_config,
	// backend_token, envoy_grpc cluster outbound|port||service, timeout
	// in seconds, random_sampling.
	if sky.GetClientConfig().GetServiceName() != "higress-gateway.higress-system" || sky.GetClientConfig().GetBackendToken() != "s3cr3t" ||
		sky.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|11800||skywalking-oap-server.op-system.svc.cluster.local" ||
		sky.GetGrpcService().GetTimeout().AsDuration() != 800*time.Millisecond || tr.GetRandomSampling().GetValue() != 25 {
		t.Errorf("skywalking %v, sampling %v", sky, tr.GetRandomSampling())
	}
	otel := &tracev3.OpenTelemetryConfig{}
	convertOtel := convert(t, "tracing:\n  enable: true\n  opentelemetry: {service: otel-collector.observability.svc.cluster.local, port: \"4317\"}\n")
	tracingOf(t, convertOtel, otel)
	if otel.GetServiceName() != "higress-gateway.higress-system" || otel.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|4317||otel-collector.observability.svc.cluster.local" ||
		otel.GetGrpcService().GetTimeout().AsDuration() != 500*time.Millisecond {
		t.Errorf("opentelemetry %v", otel)
	}
	zipkin := &tracev3.ZipkinConfig{}
	tr = tracingOf(t, convert(t, "tracing:\n  enable: true\n  sampling: 0.05\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: \"9411\"}\n"), zipkin)
	// Higress: collector_cluster, collector_endpoint /api/v2/spans,
	// HTTP_JSON, Envoy's 5 s request timeout; for the default fleet (Istio
	// 1.28 and newer) the same as collector_service. Higress's sampling is
	// %.1f, ours full precision.
	uri := zipkin.GetCollectorService().GetHttpUri()
	if uri.GetCluster() != "outbound|9411||zipkin.istio-system.svc.cluster.local" || uri.GetUri() != "http://zipkin.istio-system.svc.cluster.local:9411/api/v2/spans" ||
		uri.GetTimeout().AsDuration() != 5*time.Second ||
		zipkin.GetCollectorEndpointVersion() != tracev3.ZipkinConfig_HTTP_JSON || tr.GetRandomSampling().GetValue() != 0.05 {
		t.Errorf("zipkin %v, sampling %v", zipkin, tr.GetRandomSampling())
	}
	// start_child_span / split_spans_for_request's replacement.
	if !tr.GetSpawnUpstreamSpan().GetValue() {
		t.Error("no spawn_upstream_span")
	}
	// Higress reads a port written as a number too (sigs.k8s.io/yaml turns
	// it into the string its struct wants).
	if _, ok := convert(t, "tracing:\n  enable: true\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\n").objs["tracing"]; !ok {
		t.Error("a numeric port was not carried")
	}
	// SkyWalking's too, as Higress's own docs write it (its port is a
	// field of the section itself there, not of an embedded struct).
	sky = &tracev3.SkyWalkingConfig{}
	tracingOf(t, convert(t, "tracing:\n  enable: true\n  skywalking:\n    service: skywalking-oap-server.op-system.svc.cluster.local\n    port: 11800\n"), sky)
	if sky.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "outbound|11800||skywalking-oap-server.op-system.svc.cluster.local" {
		t.Errorf("a numeric skywalking port: %v", sky)
	}
	// Disabled tracing, Higress's default: nothing.
	if _, ok := convert(t, "tracing:\n  enable: false\n  zipkin: {service: zipkin, port: \"9411\"}\n").objs["tracing"]; ok {
		t.Error("disabled tracing generated an EnvoyFilter")
	}
}

func TestTopLevelHeaders(t *testing.T) {
	g := convert(t, "disableXEnvoyHeaders: true\naddXRealIpHeader: true\n")
	var router *routerv3.Router
	var rc *routev3.RouteConfiguration
	for i, v := range values(t, g.objs["headers"]) {
		switch v := v.(type) {
		case *hcmv3.HttpFilter:
			router = &routerv3.Router{}
			if err := v.GetTypedConfig().UnmarshalTo(router); err != nil {
				t.Fatal(err)
			}
			if op := g.objs["headers"].Spec.GetConfigPatches()[i].GetPatch().GetOperation(); op != networking.EnvoyFilter_Patch_MERGE {
				t.Errorf("router patch %v, want MERGE (Higress REPLACEs: a documented difference)", op)
			}
		case *routev3.RouteConfiguration:
			rc = v
		}
	}
	if !router.GetSuppressEnvoyHeaders() {
		t.Error("suppress_envoy_headers not set")
	}
	// Higress: x-real-ip, append false (overwrite). The value differs on
	// purpose, and the report says so.
	h := rc.GetRequestHeadersToAdd()
	if len(h) != 1 || h[0].GetHeader().GetKey() != "x-real-ip" || h[0].GetAppendAction().String() != "OVERWRITE_IF_EXISTS_OR_ADD" {
		t.Errorf("request_headers_to_add %v", h)
	}
	if e := g.report.Find("addXRealIpHeader"); len(e) != 1 || e[0].Verdict != higress.Difference || !strings.Contains(e[0].Detail, "X-ENVOY-EXTERNAL-ADDRESS") {
		t.Errorf("report %+v", e)
	}
}

// What Higress would refuse is refused, with the path.
func TestHigressRejects(t *testing.T) {
	for src, want := range map[string]string{
		"gzip:\n  minContentLength: 0\n":                            "gzip.minContentLength: Higress requires more than 0",
		"gzip:\n  compressionLevel: DEFAULT_COMPRESSION\n":          "gzip.compressionLevel: Higress requires one of",
		"gzip:\n  memoryLevel: 10\n":                                "gzip.memoryLevel: Higress requires 1 to 9",
		"downstream:\n  maxRequestHeadersKb: 9000\n":                "downstream.maxRequestHeadersKb: Higress rejects more than 8192",
		"downstream:\n  http2:\n    initialStreamWindowSize: 100\n": "downstream.http2.initialStreamWindowSize: Higress requires 65535",
		"tracing:\n  enable: true\n":                                "tracing: Higress requires exactly one of",
		"tracing:\n  timeout: 0\n":                                  "tracing.timeout: Higress requires more than 0",
		"tracing:\n  zipkin: {service: zipkin}\n":                   "tracing.zipkin: Higress requires service and port",
		"downstream:\n  idleTimeout: -1\n":                          "Higress would reject the document",
		"tracing:\n  enable: true\n  zipkin: {service: z, port: \"9411\"}\n  skywalking: {service: s, port: \"11800\"}\n": "Higress requires exactly one of",
		"downstream:\n  maxRequestHeadersKb: 0\n": "downstream.maxRequestHeadersKb: 0 passes Higress's check, but its gateway's Envoy refuses",
		// mcpServer is checked as Higress checks it: any section's failure
		// rejects the whole document.
		"mcpServer:\n  enable_user_level_server: true\n":                                        "mcpServer.redis: Higress requires it when enable_user_level_server is true",
		"mcpServer:\n  match_list:\n  - match_rule_path: /mcp\n":                                "mcpServer.match_list[0].match_rule_type: Higress requires one of exact, prefix",
		"mcpServer:\n  match_list:\n  - {match_rule_type: prefix, upstream_type: grpc}\n":       "mcpServer.match_list[0].upstream_type: Higress requires rest, sse or streamable",
		"mcpServer:\n  match_list:\n  - {match_rule_type: prefix, enable_path_rewrite: true}\n": "mcpServer.match_list[0].enable_path_rewrite: Higress allows a path rewrite only with upstream_type sse",
		"mcpServer:\n  redis: {db: first}\n":                                                    "Higress would reject the document",
	} {
		_, err := higress.Convert(higress.Input{Higress: src}, higress.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", src, err, want)
		}
	}
}

// Keys Higress ignores, and mcpServer and mesh, are reported, never lost
// silently; a secret never reaches the report.
func TestReportNotCarried(t *testing.T) {
	in := higress.Input{
		Higress: "gizp: {}\nmcpServer:\n  enable: true\n  redis: {address: r:6379, password: hunter2}\ntracing:\n  enable: true\n  skywalking: {service: s.ns.svc.cluster.local, port: \"11800\", access_token: s3cr3t}\n",
		Mesh:    "accessLogFile: /dev/stdout\nrootNamespace: higress-system\n",
	}
	res, err := higress.Convert(in, higress.Options{Namespace: "gw", Selector: map[string]string{"app": "edge"}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Report.Write(&b)
	out := b.String()
	for _, want := range []string{`gizp: Higress does not know this key and ignores it; so does the converted document (did you mean "gzip"?)`, "mcpServer: a Higress feature", "mesh.accessLogFile: Istio's MeshConfig", "accessLog.path", "mesh.rootNamespace"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"hunter2", "s3cr3t"} {
		if strings.Contains(out, secret) {
			t.Errorf("the report shows a secret:\n%s", out)
		}
	}
	if !strings.Contains(string(res.Document), "serviceName: higress-gateway.gw") || !strings.Contains(string(res.Document), "app: edge") {
		t.Errorf("options not applied:\n%s", res.Document)
	}
}

// A document under higress: (Higress's Helm values) is read as the
// document, not as an unknown key with every default written; a
// ConfigMap's own namespace is Higress's.
func TestReadInputShapes(t *testing.T) {
	for _, src := range []string{
		"higress:\n  gzip:\n    enable: false\n  downstream:\n    idleTimeout: 60\n",
		"higress: |\n  gzip:\n    enable: false\n  downstream:\n    idleTimeout: 60\n",
	} {
		in, err := higress.ReadInput([]byte(src))
		if err != nil || !in.Wrapped {
			t.Fatalf("%q: %+v %v", src, in, err)
		}
		g := convert(t, in.Higress)
		if _, ok := g.objs["gzip"]; ok {
			t.Errorf("%q: gzip is on: the wrapper was read as an unknown key", src)
		}
	}
	in, err := higress.ReadInput([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: higress-config\n  namespace: gateway-system\ndata:\n  higress: |\n    gzip: {enable: false}\n"))
	if err != nil || in.Namespace != "gateway-system" {
		t.Errorf("namespace: %+v %v", in, err)
	}
}

// With tracing off Higress accepts two backends; the one not written is
// said, not dropped in silence.
func TestDisabledTracingWithTwoBackends(t *testing.T) {
	g := convert(t, "tracing:\n  enable: false\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: \"9411\"}\n  skywalking: {service: oap.op-system.svc.cluster.local, port: \"11800\"}\n")
	if e := g.report.Find("tracing.zipkin"); len(e) != 1 || e[0].Verdict != higress.NotCarried || !strings.Contains(e[0].Detail, "skywalking is written, zipkin is not") {
		t.Errorf("report %+v", e)
	}
	// The keys of the backend left out go with it, and say so.
	for key, value := range map[string]string{"tracing.zipkin.service": "zipkin.istio-system.svc.cluster.local", "tracing.zipkin.port": "9411"} {
		if e := g.report.Find(key); len(e) != 1 || e[0].Verdict != higress.NotCarried || e[0].Value != value ||
			!strings.Contains(e[0].Detail, "tracing.zipkin is not written (tracing is off, and globalconfig's tracing takes one backend: skywalking is written)") {
			t.Errorf("%s: %+v", key, e)
		}
	}
	// Three backends: the two left out in a fixed order, their secret
	// never shown.
	src := "tracing:\n  zipkin: {service: z.ns.svc.cluster.local, port: \"9411\"}\n  opentelemetry: {service: o.ns.svc.cluster.local, port: \"4317\"}\n  skywalking: {service: s.ns.svc.cluster.local, port: \"11800\", access_token: s3cr3t}\n"
	first := convert(t, src).report
	for i := 0; i < 10; i++ {
		if again := convert(t, src).report; fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("the report's order changes from run to run:\n%v\n%v", first, again)
		}
	}
	if strings.Contains(fmt.Sprint(first), "s3cr3t") {
		t.Errorf("the access token is shown: %v", first)
	}
}

// Every key of the input has one line: keys written null, sections
// written null or empty, an empty access token, an empty mesh, a data key
// Higress does not read.
func TestEveryKeyHasALine(t *testing.T) {
	in, err := higress.ReadInput([]byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: higress-config, namespace: higress-system}
data:
  higress: |
    downstream: {}
    upstream: {idleTimeout: null}
    disableXEnvoyHeaders: null
    tracing:
      enable: true
      zipkin: null
      skywalking: {service: s.ns.svc.cluster.local, port: "11800", access_token: ""}
  mesh: "{}"
  meshNetworks: ""
  higres: "x-secret-value"
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := higress.Convert(in, higress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, w := range map[string]struct {
		verdict higress.Verdict
		value   string
		detail  string
	}{
		"downstream":                      {higress.DefaultWritten, "", "empty: Higress applied the section's defaults"},
		"upstream.idleTimeout":            {higress.Difference, "10", "Higress's default, written out → upstream.idleTimeout; Higress merges the deprecated"},
		"disableXEnvoyHeaders":            {higress.Converted, "", "null is Higress's default, false"},
		"tracing.zipkin":                  {higress.Converted, "", "null sets no backend"},
		"tracing.skywalking.access_token": {higress.Converted, "", "empty, so no token is sent"},
		"mesh":                            {higress.NotCarried, "", "with no setting in it"},
		"meshNetworks":                    {higress.NotCarried, "", "multi-network"},
		"data.higres":                     {higress.NotCarried, "", `Higress reads no such data key of higress-config (only higress, mesh and meshNetworks), so neither does the conversion (did you mean "higress"?)`},
	} {
		if e := res.Report.Find(key); len(e) != 1 || e[0].Verdict != w.verdict || e[0].Value != w.value || !strings.Contains(e[0].Detail, w.detail) {
			t.Errorf("%s: %+v, want one line %q = %q with %q", key, e, w.verdict, w.value, w.detail)
		}
	}
	keys, _, err := higress.InputKeys(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n := len(res.Report.Find(k)); n != 1 {
			t.Errorf("%s: %d lines", k, n)
		}
	}
	if want := "data.higres"; !slices.Contains(keys, want) || slices.Contains(keys, "downstream.idleTimeout") {
		t.Errorf("InputKeys: %v", keys)
	}
	if strings.Contains(fmt.Sprint(res.Report), "x-secret-value") {
		t.Error("a data key's value is shown")
	}
}

// A Higress Helm values file as teams keep it converts as Higress reads
// it: unwrapped, the numeric port taken, mixed-case content types written
// as the types that match, the MCP server checked and reported without
// its password.
func TestHelmValuesFile(t *testing.T) {
	src, err := os.ReadFile("testdata/helm-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in, err := higress.ReadInput(src)
	if err != nil || !in.Wrapped {
		t.Fatalf("%+v %v", in, err)
	}
	res, err := higress.Convert(in, higress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	res.Report.Write(&report)
	text := string(res.Manifest) + report.String()
	for _, want := range []string{"port: 11800", "- text/html", "- application/json", "maxRequestHeadersKb: 96", "mcpServer: a Higress feature"} {
		if !strings.Contains(text, want) {
			t.Errorf("lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "r3d1s-s3cret") || !strings.Contains(report.String(), `"Text/HTML" (written as text/html)`) {
		t.Errorf("the password shown, or Text/HTML not explained:\n%s", text)
	}
	g := convert(t, in.Higress)
	if _, ok := g.objs["tracing"]; !ok {
		t.Error("no tracing")
	}
}
