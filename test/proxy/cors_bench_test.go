package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

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
	noneGet := requestTimes(ctx, b, g, http.MethodGet, "/echo", origin, 200)
	nonePre := requestTimes(ctx, b, g, http.MethodOptions, "/echo", pre, 200)
	mustACK(ctx, b, rendered(b, "cors:\n  allowOrigins: [https://app.example.com, \"*.example.org\"]\n  exposeHeaders: [x-request-id]\n  maxAge: 1h\n"))
	get := requestTimes(ctx, b, g, http.MethodGet, "/echo", origin, 200)
	preflight := requestTimes(ctx, b, g, http.MethodOptions, "/echo", pre, 200)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	table := fmt.Sprintf("| request through the gateway (Envoy %s, %d requests each) | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n", g.Binary.Version, benchRequests) +
		latencyRow("cross-origin GET, no cors", noneGet, noneGet) +
		latencyRow("cross-origin GET, cors allows the origin (answer from the backend, with the CORS headers)", get, noneGet) +
		latencyRow("preflight, no cors (forwarded to the backend)", nonePre, nonePre) +
		latencyRow("preflight, cors allows the origin (answered by the gateway)", preflight, nonePre)
	b.ReportMetric(p(get, 50)-p(noneGet, 50), "added-get-p50-ms")
	b.ReportMetric(p(get, 99)-p(noneGet, 99), "added-get-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "cors", "## What the cors policy adds to a request\n\nBenchmarkCORS. "+
		"Each request goes through the gateway to the loopback backend's /echo, one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchWarmup)+" of each row are not timed. "+
		"The cors filter is in every connection manager istiod builds; the item gives it a policy on the route configuration, with two origins. "+
		"A preflight the gateway answers itself never reaches the backend, so its row can be faster than the one without the item.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
