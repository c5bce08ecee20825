package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/test/xds"
)

// higressConfig is a higress-config as Higress users write it, using every
// Higress item, with some keys left to Higress's defaults.
const higressConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: higress-config
  namespace: higress-system
data:
  higress: |
    addXRealIpHeader: true
    disableXEnvoyHeaders: true
    downstream:
      idleTimeout: 90
      routeTimeout: 30
      http2:
        maxConcurrentStreams: 200
    upstream:
      connectionBufferLimits: 1048576
    gzip:
      minContentLength: 2048
      chunkSize: 8192
    tracing:
      enable: true
      sampling: 50
      timeout: 800
      skywalking:
        service: skywalking-oap-server.op-system.svc.cluster.local
        port: "11800"
        access_token: e2e-token
    mcpServer:
      enable: false
  mesh: |
    accessLogFile: /dev/stdout
`

// A Higress document, converted by the binary and applied through the
// controller, puts into effect at the gateway what Higress did: each
// converted key is checked in what istiod sends the gateway.
func TestHigressConversionEffects(t *testing.T) {
	ctx := setup(t)
	objs, report := applyHigress(ctx, t, higressConfig)
	if strings.Contains(report, "e2e-token") {
		t.Error("the report shows the access token")
	}
	if len(objs) != 5 {
		t.Fatalf("%d EnvoyFilters, want downstream, upstream, headers, gzip and tracing", len(objs))
	}
	for _, o := range objs {
		waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, objs, s) })
	}

	// Field by field, the values Higress's code emits for this document.
	s := gateway.Snapshot()
	hcm, err := s.GatewayHCM(listenerName)
	if err != nil {
		t.Fatal(err)
	}
	check := checker(t)
	check("idle_timeout", hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(), 90*time.Second)
	check("stream_idle_timeout (Higress: = idleTimeout)", hcm.GetStreamIdleTimeout().AsDuration(), 90*time.Second)
	check("max_request_headers_kb (default)", hcm.GetMaxRequestHeadersKb().GetValue(), 60)
	check("http2 max_concurrent_streams", hcm.GetHttp2ProtocolOptions().GetMaxConcurrentStreams().GetValue(), 200)
	check("http2 initial_connection_window_size (default)", hcm.GetHttp2ProtocolOptions().GetInitialConnectionWindowSize().GetValue(), 1048576)
	check("listener per_connection_buffer_limit_bytes (default)", s.Listeners[listenerName].GetPerConnectionBufferLimitBytes().GetValue(), 32768)
	check("tracing sampling", hcm.GetTracing().GetRandomSampling().GetValue(), 50)
	sky := &tracev3.SkyWalkingConfig{}
	if err := hcm.GetTracing().GetProvider().GetTypedConfig().UnmarshalTo(sky); err != nil {
		t.Fatal(err)
	}
	check("skywalking service_name", sky.GetClientConfig().GetServiceName(), "higress-gateway.higress-system")
	check("skywalking timeout", sky.GetGrpcService().GetTimeout().AsDuration(), 800*time.Millisecond)
	for _, r := range s.Routes[gatewayRoute].GetVirtualHosts()[0].GetRoutes() {
		check("route timeout", r.GetRoute().GetTimeout().AsDuration(), 30*time.Second)
	}
	var realIP string
	for _, h := range s.Routes[gatewayRoute].GetRequestHeadersToAdd() {
		if h.GetHeader().GetKey() == "x-real-ip" {
			realIP = h.GetHeader().GetValue()
		}
	}
	check("x-real-ip (a documented difference in value)", realIP, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%")
	var gz *gzipv3.Gzip
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.compressor.gzip" {
			c := &compressorv3.Compressor{}
			if err := f.GetTypedConfig().UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			check("gzip min_content_length", c.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue(), 2048)
			gz = &gzipv3.Gzip{}
			if err := c.GetCompressorLibrary().GetTypedConfig().UnmarshalTo(gz); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gz == nil {
		t.Fatal("no gzip filter")
	}
	check("gzip chunk_size (Higress's check_size typo fixed)", gz.GetChunkSize().GetValue(), 8192)
	check("gzip memory_level (default)", gz.GetMemoryLevel().GetValue(), 5)
	cl := s.Clusters["outbound|11800||skywalking-oap-server.op-system.svc.cluster.local"]
	check("cluster per_connection_buffer_limit_bytes", cl.GetPerConnectionBufferLimitBytes().GetValue(), 1048576)
}

// An empty higress document still had Higress's defaults in effect; its
// conversion puts them into effect at the gateway.
func TestHigressEmptyDocumentDefaults(t *testing.T) {
	ctx := setup(t)
	objs, _ := applyHigress(ctx, t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: higress-config, namespace: higress-system}\ndata:\n  higress: \"\"\n")
	for _, o := range objs {
		waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, objs, s) })
	}
	s := gateway.Snapshot()
	hcm, err := s.GatewayHCM(listenerName)
	if err != nil {
		t.Fatal(err)
	}
	h2 := hcm.GetHttp2ProtocolOptions()
	got := fmt.Sprint(hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(), hcm.GetStreamIdleTimeout().AsDuration(),
		hcm.GetMaxRequestHeadersKb().GetValue(), s.Listeners[listenerName].GetPerConnectionBufferLimitBytes().GetValue(),
		h2.GetMaxConcurrentStreams().GetValue(), h2.GetInitialStreamWindowSize().GetValue(), h2.GetInitialConnectionWindowSize().GetValue())
	if want := "3m0s 3m0s 60 32768 100 65535 1048576"; got != want {
		t.Errorf("downstream at the gateway: %s, want %s", got, want)
	}
	// Upstream on every outbound cluster: buffer 10485760, idle 10 s.
	eachOutboundCluster(t, s, func(name string, c *clusterv3.Cluster, opts *httpv3.HttpProtocolOptions) {
		if c.GetPerConnectionBufferLimitBytes().GetValue() != 10485760 || opts.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration() != 10*time.Second {
			t.Errorf("%s: buffer %d, idle %v", name, c.GetPerConnectionBufferLimitBytes().GetValue(), opts.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration())
		}
	})
	gzipOn := false
	for _, f := range hcm.GetHttpFilters() {
		gzipOn = gzipOn || f.GetName() == "envoy.filters.http.compressor.gzip"
	}
	if !gzipOn {
		t.Error("gzip is off; Higress's default is on")
	}
}

// applyHigress converts a higress-config with the binary, for the test
// gateway, applies the result and starts the controller. It returns the
// EnvoyFilters the converted document asks for, and the report.
func applyHigress(ctx context.Context, t *testing.T, higressConfig string) ([]*envoyfilter.Object, string) {
	t.Helper()
	return applyConverted(ctx, t, higressConfig, "--from", "higress")
}

// applyConverted runs `globalconfig convert` on input with args, for the
// test gateway, applies the manifest and starts the controller. It
// returns the EnvoyFilters the converted document asks for, and the
// report. Exit 5 (keys not converted) still writes the manifest.
func applyConverted(ctx context.Context, t *testing.T, input string, args ...string) ([]*envoyfilter.Object, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, controlBin, append([]string{"convert", "-f", "-", "--gateway-selector", "istio=ingressgateway"}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	manifest, err := cmd.Output()
	if err != nil && cmd.ProcessState.ExitCode() != 5 {
		t.Fatalf("convert: %v\n%s", err, stderr.String())
	}
	if _, err := cluster.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	startController(ctx, t)
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yamlUnmarshal(manifest, &cm); err != nil {
		t.Fatal(err)
	}
	return desiredObjects(t, cm.Data[document.DataKey]), stderr.String()
}
