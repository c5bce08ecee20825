package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// benchEdgeRequests is how many requests each row of the cors and
// extProc benchmarks times, after benchEdgeWarmup untimed ones.
const (
	benchEdgeRequests = 1000
	benchEdgeWarmup   = 100
)

// edgeTimes sends benchEdgeWarmup+benchEdgeRequests requests of method to
// path at g one after the other over one kept-alive connection, and
// returns the times of the last benchEdgeRequests, each from the
// request's start to the end of its response body. Every answer must have
// status want.
func edgeTimes(ctx context.Context, b *testing.B, g *gw, method, path string, headers map[string]string, want int) []time.Duration {
	b.Helper()
	keepAlive := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1}}
	defer keepAlive.CloseIdleConnections()
	// The first answer may still come from the configuration before the
	// last one (a listener drained by its update): wait for one as wanted.
	var last string
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		r, err := do(ctx, method, g.url(path), headers, "")
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("status %d: %.200s", r.status, r.body)
		return r.status == want
	}) {
		b.Fatalf("%s %s: %s, want %d", method, path, last, want)
	}
	var out []time.Duration
	for i := range benchEdgeWarmup + benchEdgeRequests {
		req, err := http.NewRequestWithContext(ctx, method, g.url(path), nil)
		if err != nil {
			b.Fatal(err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := keepAlive.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != want {
			b.Fatalf("%s %s (request %d): status %d, want %d: %.200s", method, path, i+1, resp.StatusCode, want, body)
		}
		if i >= benchEdgeWarmup {
			out = append(out, took)
		}
	}
	return out
}

// edgeRow is one row of a latency table: p50 and p99, and what they add
// to the row none.
func edgeRow(what string, d, none []time.Duration) string {
	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	return fmt.Sprintf("| %s | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms |\n", what, p(d, 50), p(d, 99), p(d, 50)-p(none, 50), p(d, 99)-p(none, 99))
}

// BenchmarkCORS measures, at the newest real Envoy gateway, what the cors
// item adds to a request: a simple cross-origin GET from an allowed
// origin, which reaches the backend and comes back with the CORS headers,
// against the same GET without the item; and a preflight from an allowed
// origin, which the gateway answers itself, against the same preflight
// forwarded to the backend without the item. It prints a Markdown table
// and writes it to $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkCORS(b *testing.B) {
	ctx := setup(b)
	g := newest
	origin := map[string]string{"Origin": "https://app.example.com"}
	pre := map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT"}
	mustACK(ctx, b, rendered(b, ""))
	noneGet := edgeTimes(ctx, b, g, http.MethodGet, "/echo", origin, 200)
	nonePre := edgeTimes(ctx, b, g, http.MethodOptions, "/echo", pre, 200)
	mustACK(ctx, b, rendered(b, "cors:\n  allowOrigins: [https://app.example.com, \"*.example.org\"]\n  exposeHeaders: [x-request-id]\n  maxAge: 1h\n"))
	get := edgeTimes(ctx, b, g, http.MethodGet, "/echo", origin, 200)
	preflight := edgeTimes(ctx, b, g, http.MethodOptions, "/echo", pre, 200)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	table := fmt.Sprintf("| request through the gateway (Envoy %s, %d requests each) | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n", g.Binary.Version, benchEdgeRequests) +
		edgeRow("cross-origin GET, no cors", noneGet, noneGet) +
		edgeRow("cross-origin GET, cors allows the origin (answer from the backend, with the CORS headers)", get, noneGet) +
		edgeRow("preflight, no cors (forwarded to the backend)", nonePre, nonePre) +
		edgeRow("preflight, cors allows the origin (answered by the gateway)", preflight, nonePre)
	b.ReportMetric(p(get, 50)-p(noneGet, 50), "added-get-p50-ms")
	b.ReportMetric(p(get, 99)-p(noneGet, 99), "added-get-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "cors", "## What the cors policy adds to a request\n\nBenchmarkCORS. "+
		"Each request goes through the gateway to the loopback backend's /echo, one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchEdgeWarmup)+" of each row are not timed. "+
		"The cors filter is in every connection manager istiod builds; the item gives it a policy on the route configuration, with two origins. "+
		"A preflight the gateway answers itself never reaches the backend, so its row can be faster than the one without the item.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
