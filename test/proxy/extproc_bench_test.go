package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// BenchmarkExtProc measures, at the newest real Envoy gateway, what the
// extProc item adds to a request processed by the real gRPC ext_proc
// server of test/harness (in the test process, on loopback): the
// request's headers sent to it (it answers with a header to add), and
// the response's headers too, against the same GET without the item. It
// prints a Markdown table and writes it to
// $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkExtProc(b *testing.B) {
	ctx := setup(b)
	extProcMesh(ctx, b)
	g := newest
	mustACK(ctx, b, rendered(b, ""))
	none := requestTimes(ctx, b, g, http.MethodGet, "/echo", nil, 200)
	mustACK(ctx, b, rendered(b, extProcDoc("  responseHeaders: SKIP\n")))
	reqOnly := requestTimes(ctx, b, g, http.MethodGet, "/echo", nil, 200)
	mustACK(ctx, b, rendered(b, extProcDoc("")))
	both := requestTimes(ctx, b, g, http.MethodGet, "/echo", nil, 200)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	table := fmt.Sprintf("| request through the gateway (Envoy %s, %d requests each) | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n", g.Binary.Version, benchRequests) +
		latencyRow("no extProc", none, none) +
		latencyRow("extProc, the request's headers sent to the ext_proc server", reqOnly, none) +
		latencyRow("extProc, the request's and the response's headers", both, none)
	b.ReportMetric(p(reqOnly, 50)-p(none, 50), "added-request-headers-p50-ms")
	b.ReportMetric(p(reqOnly, 99)-p(none, 99), "added-request-headers-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "extproc", "## What the extProc service adds to a request\n\nBenchmarkExtProc. "+
		"Each request is a GET of the loopback backend's /echo through the gateway, one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchWarmup)+" of each row are not timed. "+
		"The ext_proc server is test/harness's, in Go on go-control-plane's ext_proc v3 API, on the same machine: it answers each request's headers with a header to add, "+
		"and each response's with another; a real WAF's inspection costs more. Each request opens a gRPC stream on the HTTP/2 connection Envoy keeps to the server.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
