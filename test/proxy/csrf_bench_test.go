package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// BenchmarkCSRF measures, at the newest real Envoy gateway, what csrf adds
// to a state-changing request: the same same-origin POSTs with no csrf,
// checked by csrf alone, checked with opt-outs (the RBAC mark and the
// wrapped filter), and opted out. It prints a Markdown table and writes it
// to $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkCSRF(b *testing.B) {
	ctx := setup(b)
	g := newest
	apply := func(doc string) {
		b.Helper()
		mustACK(ctx, b, rendered(b, doc))
	}
	origin := map[string]string{"Origin": "http://" + benchHost}
	apply("")
	none := requestTimes(ctx, b, g, http.MethodPost, "/echo", hosted(origin), 200)
	apply("csrf:\n  additionalOrigins:\n  - suffix: .example.com\n")
	plain := requestTimes(ctx, b, g, http.MethodPost, "/echo", hosted(origin), 200)
	apply("csrf:\n  additionalOrigins:\n  - suffix: .example.com\n  skip:\n    paths: [/webhooks]\n")
	scoped := requestTimes(ctx, b, g, http.MethodPost, "/echo", hosted(origin), 200)
	skipped := requestTimes(ctx, b, g, http.MethodPost, "/webhooks/bench", hosted(origin), 200)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	table := filterTable(g, none, []string{
		"no csrf", "csrf, a same-origin POST, no opt-outs (csrf alone)",
		"csrf, a same-origin POST, with opt-outs (RBAC mark, wrapped csrf)",
		"csrf, opted out (skip.paths)",
	}, [][]time.Duration{none, plain, scoped, skipped})
	b.ReportMetric(p(plain, 50)-p(none, 50), "added-p50-ms")
	b.ReportMetric(p(plain, 99)-p(none, 99), "added-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "csrf", "## What csrf adds to a request\n\nBenchmarkCSRF. "+
		"Each request is a POST without a body to the loopback backend's /echo through the gateway (or /webhooks/bench for the opted-out row), with an Origin of the request's own host, one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchWarmup)+" of each row are not timed.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
