package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/test/xds"
)

// nginxConfig is an ingress-nginx controller ConfigMap as an edge team
// writes it, with the ConfigMaps its add-headers and proxy-set-headers
// name.
const nginxConfig = `apiVersion: v1
kind: ConfigMap
metadata:
  name: ingress-nginx-controller
  namespace: ingress-nginx
data:
  proxy-body-size: "16m"
  large-client-header-buffers: "4 16k"
  use-forwarded-headers: "true"
  use-proxy-protocol: "true"
  ssl-ciphers: "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES256-GCM-SHA384"
  ssl-ecdh-curve: "X25519:secp384r1"
  hsts-max-age: "600"
  server-tokens: "false"
  hide-headers: "X-Powered-By"
  add-headers: ingress-nginx/response-headers
  proxy-set-headers: ingress-nginx/request-headers
  proxy-connect-timeout: "3"
  proxy-read-timeout: "120"
  client-header-timeout: "20"
  keep-alive: "30"
  upstream-keepalive-timeout: "45"
  upstream-keepalive-requests: "500"
  http2-max-concurrent-streams: "64"
  use-gzip: "true"
  gzip-level: "6"
  log-format-upstream: '{"status": $status, "client": "$remote_addr", "path": "$request_uri"}'
  denylist-source-range: "203.0.113.0/24"
  enable-underscores-in-headers: "false"
  worker-processes: "4"
  server-snippet: "return 403;"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: response-headers, namespace: ingress-nginx}
data:
  X-Frame-Options: DENY
---
apiVersion: v1
kind: ConfigMap
metadata: {name: request-headers, namespace: ingress-nginx}
data:
  X-Client-Port: $remote_port
`

// An ingress-nginx ConfigMap, converted by the binary and applied
// through the controller: every EnvoyFilter it asks for is in effect at
// the gateway, and each converted key shows as the Envoy value it became.
func TestIngressNginxConversionEffects(t *testing.T) {
	ctx := setup(t)
	objs, report := applyConverted(ctx, t, nginxConfig, "--from", "ingress-nginx", "--trusted-hops", "1")
	if strings.Contains(report, "return 403") {
		t.Error("the report shows a snippet")
	}
	if !strings.Contains(report, "insecure, refused:\n  server-snippet") {
		t.Errorf("the snippet is not refused in the report:\n%s", report)
	}
	for _, o := range objs {
		waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, objs, s) })
	}
	if len(objs) < 10 {
		t.Fatalf("%d EnvoyFilters; want clientIP, downstream, hardening, tls, upstream, headers, accessLog, requestBody, ipAccess and gzip", len(objs))
	}

	s := gateway.Snapshot()
	hcm, err := s.GatewayHCM(listenerName)
	if err != nil {
		t.Fatal(err)
	}
	check := checker(t)
	filters := map[string]*hcmv3.HttpFilter{}
	for _, f := range hcm.GetHttpFilters() {
		filters[f.GetName()] = f
	}
	buffer := &bufferv3.Buffer{}
	if err := filters[envoyfilter.Buffer].GetTypedConfig().UnmarshalTo(buffer); err != nil {
		t.Fatalf("proxy-body-size: no buffer filter: %v", err)
	}
	check("proxy-body-size 16m", buffer.GetMaxRequestBytes().GetValue(), 16<<20)
	check("large-client-header-buffers 4 16k", hcm.GetMaxRequestHeadersKb().GetValue(), 64)
	// use-proxy-protocol wins, as in nginx: --trusted-hops is ignored, and
	// no X-Forwarded-For entry can choose the client address.
	check("use-forwarded-headers and --trusted-hops 1 beside use-proxy-protocol", hcm.GetXffNumTrustedHops(), 0)
	if !strings.Contains(report, "(client address): the gateway takes the client address from the PROXY protocol header") {
		t.Errorf("the report does not say where the client address comes from:\n%s", report)
	}
	proxyProtocol := false
	for _, f := range s.Listeners[listenerName].GetListenerFilters() {
		proxyProtocol = proxyProtocol || f.GetName() == "envoy.filters.listener.proxy_protocol"
	}
	check("use-proxy-protocol", proxyProtocol, true)
	check("server-tokens false", hcm.GetServerHeaderTransformation(), hcmv3.HttpConnectionManager_PASS_THROUGH)
	check("proxy-read-timeout 120", hcm.GetStreamIdleTimeout().AsDuration(), 120*time.Second)
	check("client-header-timeout 20", hcm.GetRequestHeadersTimeout().AsDuration(), 20*time.Second)
	check("keep-alive 30", hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(), 30*time.Second)
	check("http2-max-concurrent-streams 64", hcm.GetHttp2ProtocolOptions().GetMaxConcurrentStreams().GetValue(), 64)
	check("enable-underscores-in-headers false", hcm.GetCommonHttpProtocolOptions().GetHeadersWithUnderscoresAction(), corev3.HttpProtocolOptions_DROP_HEADER)
	check("generate-request-id (x-request-id kept, as by nginx)", hcm.GetPreserveExternalRequestId(), true)
	check("HTTP/1.0 served (ingress-nginx's built-in)", hcm.GetHttpProtocolOptions().GetAcceptHttp_10(), true)
	check("a trailing dot in Host ignored (ingress-nginx's built-in)", hcm.GetStripTrailingHostDot(), true)
	check("log-format-upstream (an access log)", len(hcm.GetAccessLog()) > 0, true)
	_, rbac := filters["globalconfig.ip_access"]
	check("denylist-source-range (an RBAC filter)", rbac, true)

	gz := &compressorv3.Compressor{}
	if err := filters["envoy.filters.http.compressor.gzip"].GetTypedConfig().UnmarshalTo(gz); err != nil {
		t.Fatalf("use-gzip: no gzip compressor: %v", err)
	}
	lib := &gzipv3.Gzip{}
	if err := gz.GetCompressorLibrary().GetTypedConfig().UnmarshalTo(lib); err != nil {
		t.Fatal(err)
	}
	check("gzip-level 6", lib.GetCompressionLevel(), gzipv3.Gzip_COMPRESSION_LEVEL_6)
	check("gzip-min-length (nginx's default)", gz.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue(), 256)

	route := s.Routes[gatewayRoute]
	set := map[string]string{}
	for _, h := range route.GetRequestHeadersToAdd() {
		set[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	check("proxy-set-headers X-Client-Port", set["x-client-port"], "%DOWNSTREAM_REMOTE_PORT%")
	check("compute-full-forwarded-for (nginx's default: the client alone)", set["x-forwarded-for"], "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%")
	check("X-Real-IP (ingress-nginx's built-in)", set["x-real-ip"], "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%")
	resp := map[string]string{}
	for _, h := range route.GetResponseHeadersToAdd() {
		resp[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	check("add-headers X-Frame-Options", resp["x-frame-options"], "DENY")
	check("hide-headers X-Powered-By", strings.Contains(fmt.Sprint(route.GetResponseHeadersToRemove()), "x-powered-by"), true)
	if _, ok := resp["strict-transport-security"]; ok {
		t.Error("hsts on the plain-HTTP route configuration")
	}

	eachOutboundCluster(t, s, func(name string, c *clusterv3.Cluster, opts *httpv3.HttpProtocolOptions) {
		check(name+" proxy-connect-timeout 3", c.GetConnectTimeout().AsDuration(), 3*time.Second)
		check(name+" upstream-keepalive-timeout 45", opts.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(), 45*time.Second)
		check(name+" upstream-keepalive-requests 500", opts.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection().GetValue(), 500)
	})
	// ssl-ciphers, ssl-ecdh-curve and hsts-max-age: the TLS chain and the
	// HTTPS routes on 443, checked by inEffectAmong above; here the values.
	var tlsObj *envoyfilter.Object
	for _, o := range objs {
		if o.Item() == "tls" {
			tlsObj = o
		}
	}
	if tlsObj == nil {
		t.Fatal("no tls EnvoyFilter")
	}
	spec := fmt.Sprint(tlsObj.Spec)
	for _, want := range []string{"ECDHE-ECDSA-AES256-GCM-SHA384", "P-384", "max-age=600"} {
		if !strings.Contains(spec, want) {
			t.Errorf("tls EnvoyFilter lacks %s", want)
		}
	}
	if regexp.MustCompile(`(^|[^C])DHE-RSA`).MatchString(spec) {
		t.Error("a DHE suite reached the tls EnvoyFilter")
	}
}
