package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The behaviour of each item, proven by live traffic through both real
// Envoy gateways to the loopback backend. Each test makes its document the
// whole configuration, waits until both gateways have loaded it, and
// sends requests.

// use makes doc the whole of globalconfig's configuration at the gateways.
func use(ctx context.Context, t *testing.T, doc string) {
	t.Helper()
	mustACK(ctx, t, rendered(t, doc))
}

// each runs f against each gateway as a subtest named by its Envoy.
func each(t *testing.T, f func(t *testing.T, g *gw)) {
	for _, g := range gateways {
		t.Run("envoy-"+g.Binary.Version, func(t *testing.T) { f(t, g) })
	}
}

func mustGet(ctx context.Context, t *testing.T, url string, headers map[string]string) *response {
	t.Helper()
	r, err := get(ctx, url, headers)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// echoed is what the backend saw of a request that reached it.
func echoed(t *testing.T, r *response) harness.Seen {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var s harness.Seen
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("not the backend's echo: %v: %s", err, r.body)
	}
	return s
}

// brotli and zstd: the body comes back in the encoding the client asked
// for, smaller.
func TestBrotliAndZstdCompress(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "brotli:\n  enable: true\n  contentType: [text/plain]\nzstd:\n  enable: true\n  contentType: [text/plain]\n")
	each(t, func(t *testing.T, g *gw) {
		for _, enc := range []string{"br", "zstd"} {
			r := mustGet(ctx, t, g.url("/text?n=20000"), map[string]string{"Accept-Encoding": enc})
			if r.header.Get("Content-Encoding") != enc || len(r.body) >= 20000/4 {
				t.Errorf("Accept-Encoding %s: content-encoding %q, %d bytes", enc, r.header.Get("Content-Encoding"), len(r.body))
			}
		}
		if enc := mustGet(ctx, t, g.url("/text?n=20000"), map[string]string{"Accept-Encoding": "zstd"}).body[:4]; !bytes.Equal(enc, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("zstd body does not start with zstd's magic number: % x", enc)
		}
	})
}

// The local rate limit answers 429 once the bucket is empty, with the
// configured header; the bucket does not refill within the test.
func TestLocalRateLimit(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "localRateLimit:\n  maxTokens: 3\n  tokensPerFill: 3\n  fillInterval: 1h\n  responseHeaders:\n    x-local-rate-limit: \"true\"\n")
	each(t, func(t *testing.T, g *gw) {
		var codes []int
		for range 5 {
			r := mustGet(ctx, t, g.url("/echo"), nil)
			codes = append(codes, r.status)
			if r.status == 429 && r.header.Get("x-local-rate-limit") != "true" {
				t.Errorf("429 without x-local-rate-limit: %v", r.header)
			}
		}
		if fmt.Sprint(codes) != "[200 200 200 429 429]" {
			t.Errorf("statuses %v, want three 200 then 429", codes)
		}
	})
}

// ipAccess refuses a denied client address with 403, and closes a
// connection from a denied range before any HTTP.
func TestIPAccess(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "ipAccess:\n  deny: [127.0.0.1/32]\n")
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), nil); r.status != 403 {
			t.Errorf("denied client: status %d, want 403", r.status)
		}
	})
	use(ctx, t, "ipAccess:\n  allow: [10.0.0.0/8]\n")
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), nil); r.status != 403 {
			t.Errorf("client outside the allow list: status %d, want 403", r.status)
		}
	})
	use(ctx, t, "ipAccess:\n  denyConnections: [127.0.0.0/24]\n")
	each(t, func(t *testing.T, g *gw) {
		if r, err := get(ctx, g.url("/echo"), nil); err == nil {
			t.Errorf("a denied connection got an HTTP answer: %d", r.status)
		}
	})
	use(ctx, t, "ipAccess:\n  allow: [127.0.0.0/8]\n  deny: [127.0.0.2/32]\n")
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), nil); r.status != 200 {
			t.Errorf("allowed client: status %d", r.status)
		}
	})
	// block-user-agents' meaning: a plain entry is the whole value,
	// ignoring case; ~* a regular expression anywhere, ignoring case; ~
	// one that keeps it.
	use(ctx, t, "ipAccess:\n  denyUserAgents: [\"BadBot/2.0\", \"~*sqlmap\", \"~^nikto\"]\n")
	each(t, func(t *testing.T, g *gw) {
		for ua, want := range map[string]int{
			"badbot/2.0": 403, "BadBot/2.0 (compatible)": 200, "sqlmap/1.7.2#stable": 403, "Mozilla/5.0 SQLMap": 403,
			"nikto/2.5": 403, "Nikto/2.5": 200, "Mozilla/5.0 (X11; Linux x86_64)": 200,
		} {
			if r := mustGet(ctx, t, g.url("/echo"), map[string]string{"User-Agent": ua}); r.status != want {
				t.Errorf("User-Agent %q: status %d, want %d", ua, r.status, want)
			}
		}
	})
}

// customErrors: Envoy's own replies (a 413 here) and a backend's error
// responses get the configured bodies and statuses.
func TestCustomErrors(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, `requestBody:
  maxSize: 1Ki
customErrors:
  localReplies:
  - statuses: [413]
    json:
      error: too_large
      status: "%RESPONSE_CODE%"
  upstream:
  - statuses: [502]
    rewriteStatus: 503
    contentType: text/html; charset=utf-8
    text: "<h1>Back soon</h1>"
`)
	each(t, func(t *testing.T, g *gw) {
		r, err := do(ctx, "POST", g.url("/echo"), nil, strings.Repeat("x", 2048))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error  string `json:"error"`
			Status int    `json:"status"`
		}
		if r.status != 413 || json.Unmarshal(r.body, &body) != nil || body.Error != "too_large" || body.Status != 413 {
			t.Errorf("local reply: status %d, body %s", r.status, r.body)
		}
		r = mustGet(ctx, t, g.url("/status?code=502"), nil)
		if r.status != 503 || string(r.body) != "<h1>Back soon</h1>" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("backend's 502: status %d, %q, body %q", r.status, r.header.Get("Content-Type"), r.body)
		}
		if r := mustGet(ctx, t, g.url("/status?code=500"), nil); r.status != 500 || !strings.Contains(string(r.body), "the backend answered 500") {
			t.Errorf("a status not listed changed: %d %q", r.status, r.body)
		}
	})
}

// headers: what the backend receives and what the client gets back.
func TestHeaders(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, `headers:
  disableXEnvoyHeaders: true
  addXRealIpHeader: true
  server:
    mode: overwrite
    name: edge
  requestId:
    generate: true
  xff:
    useRemoteAddress: true
    trustedHops: 1
  responseHeaders:
    x-frame-options: SAMEORIGIN
  request:
    set:
      x-request-start: "t=%START_TIME(%s)%"
    remove: [x-debug]
  response:
    remove: [x-powered-by]
`)
	each(t, func(t *testing.T, g *gw) {
		r := mustGet(ctx, t, g.url("/echo?rh=x-powered-by:php&rh=server:backend"), map[string]string{
			"x-debug": "1", "X-Forwarded-For": "198.51.100.9",
		})
		s := echoed(t, r)
		if s.Has("x-debug") {
			t.Error("x-debug reached the backend")
		}
		if v := s.Header("x-request-start"); !strings.HasPrefix(v, "t=1") {
			t.Errorf("x-request-start %q", v)
		}
		if s.Header("x-request-id") == "" {
			t.Error("no x-request-id at the backend")
		}
		// One trusted hop: the client is the address the one proxy in
		// front (here the test client) put in X-Forwarded-For.
		if v := s.Header("x-real-ip"); v != "198.51.100.9" {
			t.Errorf("x-real-ip %q, want 198.51.100.9", v)
		}
		if v := r.header.Get("x-frame-options"); v != "SAMEORIGIN" {
			t.Errorf("x-frame-options %q", v)
		}
		if v := r.header.Get("server"); v != "edge" {
			t.Errorf("server %q, want edge", v)
		}
		if r.header.Get("x-powered-by") != "" {
			t.Error("x-powered-by reached the client")
		}
		for k := range r.header {
			if strings.HasPrefix(strings.ToLower(k), "x-envoy-") {
				t.Errorf("%s reached the client", k)
			}
		}
	})
}

// clientIP: behind a load balancer that speaks PROXY protocol, the client
// address is the one in the PROXY header; a plain connection is still
// served (proxyProtocolOptional).
func TestClientIPFromProxyProtocol(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "clientIP:\n  proxyProtocol: true\n  proxyProtocolOptional: true\nheaders:\n  addXRealIpHeader: true\n")
	each(t, func(t *testing.T, g *gw) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(g.ip, strconv.Itoa(httpPort)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "PROXY TCP4 203.0.113.7 %s 40000 %d\r\nGET /echo HTTP/1.1\r\nHost: proxy.test\r\nConnection: close\r\n\r\n", g.ip, httpPort)
		resp, err := readResponse(conn)
		if err != nil {
			t.Fatal(err)
		}
		s := echoed(t, resp)
		if v := s.Header("x-real-ip"); v != "203.0.113.7" {
			t.Errorf("x-real-ip %q, want the PROXY header's 203.0.113.7", v)
		}
		if v := s.Header("x-forwarded-for"); v != "203.0.113.7" {
			t.Errorf("x-forwarded-for %q, want 203.0.113.7", v)
		}
		if s := echoed(t, mustGet(ctx, t, g.url("/echo"), nil)); s.Header("x-real-ip") != "127.0.0.1" {
			t.Errorf("plain connection: x-real-ip %q", s.Header("x-real-ip"))
		}
	})
}

// readResponse reads one HTTP/1.1 response from conn.
func readResponse(conn net.Conn) (*response, error) {
	return read(http.ReadResponse(bufio.NewReader(conn), nil))
}

// downstream: the request header size limit (431); the request headers
// timeout answers 408 to headers that never finish; the idle timeout
// closes a connection that sends nothing. Each timeout is tested with the
// other one long, so that neither can pass for the other.
func TestDownstreamLimits(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "downstream:\n  maxRequestHeadersKb: 2\n  requestHeadersTimeout: 1s\n  idleTimeout: 30s\n")
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), map[string]string{"x-big": strings.Repeat("a", 3000)}); r.status != 431 {
			t.Errorf("3 KB header over a 2 KiB limit: status %d, want 431", r.status)
		}
		if r := mustGet(ctx, t, g.url("/echo"), map[string]string{"x-big": strings.Repeat("a", 1000)}); r.status != 200 {
			t.Errorf("1 KB header: status %d", r.status)
		}
		// Headers never finished: Envoy answers 408 and closes. (It fires
		// about 2 s after a 1 s setting: its timers are coarse.)
		got, took := closedAfter(t, g, "GET /echo HTTP/1.1\r\nHost: proxy.test\r\n", 1*time.Second, 5*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, "request header timeout") {
			t.Errorf("unfinished headers got %q, want Envoy's 408", got)
		}
		t.Logf("unfinished headers: 408 after %v", took.Round(10*time.Millisecond))
	})
	use(ctx, t, "downstream:\n  idleTimeout: 2s\n")
	each(t, func(t *testing.T, g *gw) {
		// A connection that sends nothing is closed, with no answer.
		got, took := closedAfter(t, g, "", 2*time.Second, 6*time.Second)
		if got != "" {
			t.Errorf("an idle connection got %q", got)
		}
		t.Logf("idle connection: closed after %v", took.Round(10*time.Millisecond))
	})
}

// closedAfter opens a connection to g's HTTP listener, writes send, and
// requires the gateway to close it no sooner than min and no later than
// max; it returns what the gateway sent and when it closed.
func closedAfter(t *testing.T, g *gw, send string, min, max time.Duration) (string, time.Duration) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(g.ip, strconv.Itoa(httpPort)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if send != "" {
		if _, err := io.WriteString(conn, send); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(start.Add(max + time.Second))
	got, _ := io.ReadAll(conn) // until the gateway closes, or the deadline
	took := time.Since(start)
	if took < min-100*time.Millisecond || took > max {
		t.Errorf("connection closed after %v, want between %v and %v", took.Round(10*time.Millisecond), min, max)
	}
	return string(got), took
}

// upstream: maxRequestsPerConnection 1 makes the gateway open a new
// connection to the backend for every request; without it, it reuses one.
func TestUpstreamMaxRequestsPerConnection(t *testing.T) {
	ctx := setup(t)
	remotes := func(t *testing.T, g *gw) map[string]bool {
		out := map[string]bool{}
		for range 4 {
			out[echoed(t, mustGet(ctx, t, g.url("/echo"), nil)).Remote] = true
		}
		return out
	}
	use(ctx, t, "upstream:\n  idleTimeout: 60s\n")
	each(t, func(t *testing.T, g *gw) {
		if n := len(remotes(t, g)); n != 1 {
			t.Errorf("without a limit, 4 requests came over %d upstream connections, want 1", n)
		}
	})
	use(ctx, t, "upstream:\n  maxRequestsPerConnection: 1\n")
	each(t, func(t *testing.T, g *gw) {
		if n := len(remotes(t, g)); n != 4 {
			t.Errorf("maxRequestsPerConnection 1: 4 requests came over %d upstream connections, want 4", n)
		}
	})
}

// hardening: merged slashes, escaped slashes redirected, headers with
// underscores dropped.
func TestHardening(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "hardening:\n  mergeSlashes: true\n  escapedSlashes: UNESCAPE_AND_REDIRECT\n  headersWithUnderscores: DROP_HEADER\n")
	each(t, func(t *testing.T, g *gw) {
		s := echoed(t, mustGet(ctx, t, g.url("//echo//twice"), map[string]string{"x_user": "admin", "x-user": "guest"}))
		if s.Path != "/echo/twice" {
			t.Errorf("path %q, want /echo/twice", s.Path)
		}
		if s.Has("x_user") || s.Header("x-user") != "guest" {
			t.Errorf("headers at the backend: %v", s.Headers)
		}
		r := mustGet(ctx, t, g.url("/a%2Fb"), nil)
		if r.status < 300 || r.status > 399 || r.header.Get("Location") != "/a/b" {
			t.Errorf("/a%%2Fb: status %d, location %q; want a redirect to /a/b", r.status, r.header.Get("Location"))
		}
	})
}

// tls: a TLS 1.3 minimum refuses a TLS 1.2 client; HSTS is sent on TLS
// responses only.
func TestTLSPolicyAndHSTS(t *testing.T) {
	ctx := setup(t)
	dial := func(g *gw, maxVersion uint16) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", g.httpsAddr(),
			&tls.Config{InsecureSkipVerify: true, MaxVersion: maxVersion, ServerName: "gateway.proxy.test"}) //nolint:gosec // self-signed test certificate
		if err == nil {
			conn.Close()
		}
		return err
	}
	use(ctx, t, "tls:\n  ports: [8443]\n  minVersion: TLSv1_2\n")
	each(t, func(t *testing.T, g *gw) {
		if err := dial(g, tls.VersionTLS12); err != nil {
			t.Fatalf("TLS 1.2 client under a TLS 1.2 minimum: %v", err)
		}
	})
	use(ctx, t, "tls:\n  ports: [8443]\n  minVersion: TLSv1_3\n  hsts:\n    maxAge: 1h\n")
	each(t, func(t *testing.T, g *gw) {
		if err := dial(g, tls.VersionTLS12); err == nil {
			t.Error("a TLS 1.2 client was served under a TLS 1.3 minimum")
		}
		if err := dial(g, tls.VersionTLS13); err != nil {
			t.Errorf("TLS 1.3 client: %v", err)
		}
		r := mustGet(ctx, t, "https://"+g.httpsAddr()+"/echo", nil)
		if v := r.header.Get("Strict-Transport-Security"); v != "max-age=3600; includeSubDomains" {
			t.Errorf("HTTPS: strict-transport-security %q, want max-age=3600; includeSubDomains", v)
		}
		if v := mustGet(ctx, t, g.url("/echo"), nil).header.Get("Strict-Transport-Security"); v != "" {
			t.Errorf("plain HTTP got strict-transport-security %q", v)
		}
	})
}

// accessLog: each request is a JSON line with the configured fields on the
// proxy's standard output (what kubectl logs shows: an Istio proxy can
// write nothing else but its emptyDirs); requests under minStatusCode are
// not logged.
func TestAccessLog(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, `accessLog:
  path: /dev/stdout
  json:
    method: "%REQ(:METHOD)%"
    path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
    status: "%RESPONSE_CODE%"
  minStatusCode: 400
`)
	each(t, func(t *testing.T, g *gw) {
		mustGet(ctx, t, g.url("/echo?logged=no-"+g.name), nil)
		mustGet(ctx, t, g.url("/status?code=404&logged=yes-"+g.name), nil)
		want := "/status?code=404&logged=yes-" + g.name
		// The gateway's output holds Envoy's own log lines too: the
		// access log's are the JSON objects.
		var lines []string
		ok := harness.Eventually(ctx, 15*time.Second, func() bool {
			data, _ := os.ReadFile(g.LogPath)
			lines = lines[:0]
			for _, l := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(l, "{") {
					lines = append(lines, l)
				}
			}
			return strings.Contains(string(data), want)
		})
		if !ok {
			t.Fatalf("no line for %s in %s: %q", want, g.LogPath, lines)
		}
		for _, l := range lines {
			if strings.Contains(l, "logged=no-"+g.name) {
				t.Errorf("a 200 was logged under minStatusCode 400: %s", l)
			}
			if !strings.Contains(l, want) {
				continue
			}
			var entry map[string]any
			if err := json.Unmarshal([]byte(l), &entry); err != nil {
				t.Fatalf("not a JSON line: %q", l)
			}
			if entry["method"] != "GET" || entry["path"] != want || fmt.Sprint(entry["status"]) != "404" || len(entry) != 3 {
				t.Errorf("log entry %v", entry)
			}
		}
	})
}

// tracing: every request sampled, spans reach the zipkin collector with
// the custom tags. Zipkin names the service after the proxy's service
// cluster (istio-ingressgateway.istio-system here, as istio-agent sets it);
// tracing.serviceName is for the other providers and does not apply.
func TestTracingToZipkin(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, `tracing:
  enable: true
  sampling: 100
  customTags:
    environment:
      literal: e2e
  zipkin:
    service: `+zipkinHost+`
    port: 9411
`)
	each(t, func(t *testing.T, g *gw) {
		path := "/echo?traced=" + g.name
		s := echoed(t, mustGet(ctx, t, g.url(path), nil))
		traceID := s.Header("x-b3-traceid")
		if traceID == "" {
			t.Fatalf("no x-b3-traceid at the backend: %v", s.Headers)
		}
		var found *harness.ZipkinSpan
		ok := harness.Eventually(ctx, 20*time.Second, func() bool {
			for _, sp := range zipkin.Spans() {
				if sp.TraceID == traceID {
					found = &sp
					return true
				}
			}
			return false
		})
		if !ok {
			t.Fatalf("no span of trace %s reached the collector (%d spans)", traceID, len(zipkin.Spans()))
		}
		if found.LocalEndpoint.ServiceName != "istio-ingressgateway.istio-system" || found.Tags["environment"] != "e2e" {
			t.Errorf("span %+v", *found)
		}
	})
}
