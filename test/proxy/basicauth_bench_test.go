package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The users of the basicAuth and csrf benchmarks' documents: alice, whose
// password is wonderland.
const (
	benchUsers = "alice:{SHA}tiY7sUhYKUwI5L3866kDY+ENcrQ="
	benchAlice = "Basic YWxpY2U6d29uZGVybGFuZA=="
	// benchHost is the requests' host: the test gateways route every host
	// to the backend.
	benchHost = "shop.test"
)

// hosted is headers with benchHost as the request's host.
func hosted(headers map[string]string) map[string]string {
	out := map[string]string{"Host": benchHost}
	for k, v := range headers {
		out[k] = v
	}
	return out
}

// filterTable is the Markdown table of what rows add to none, at g.
func filterTable(g *gw, none []time.Duration, rows []string, times [][]time.Duration) string {
	table := fmt.Sprintf("| request through the gateway (Envoy %s, %d requests each) | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n", g.Binary.Version, benchRequests)
	for i, what := range rows {
		table += latencyRow(what, times[i], none)
	}
	return table
}

// BenchmarkBasicAuth measures, at the newest real Envoy gateway, what
// basicAuth adds to a request: the same GETs with no basicAuth, with a
// valid user checked (without opt-outs: the filter alone; with the
// default opt-out: the RBAC mark and the wrapped filter), and opted out.
// It prints a Markdown table and writes it to
// $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkBasicAuth(b *testing.B) {
	ctx := setup(b)
	g := newest
	apply := func(doc string) {
		b.Helper()
		mustACK(ctx, b, rendered(b, doc))
	}
	creds := map[string]string{"Authorization": benchAlice}
	apply("")
	none := requestTimes(ctx, b, g, http.MethodGet, "/echo", hosted(creds), 200)
	apply(fmt.Sprintf("basicAuth:\n  users: %q\n  skip:\n    paths: []\n", benchUsers))
	plain := requestTimes(ctx, b, g, http.MethodGet, "/echo", hosted(creds), 200)
	apply(fmt.Sprintf("basicAuth:\n  users: %q\n  forwardUsername: x-user\n", benchUsers))
	scoped := requestTimes(ctx, b, g, http.MethodGet, "/echo", hosted(creds), 200)
	skipped := requestTimes(ctx, b, g, http.MethodGet, "/.well-known/acme-challenge/bench", hosted(nil), 200)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	table := filterTable(g, none, []string{
		"no basicAuth", "basicAuth, a valid user, no opt-outs (basic_auth alone)",
		"basicAuth, a valid user, with opt-outs and forwardUsername (strip, RBAC mark, wrapped basic_auth)",
		"basicAuth, opted out (skip.paths), no credentials",
	}, [][]time.Duration{none, plain, scoped, skipped})
	b.ReportMetric(p(scoped, 50)-p(none, 50), "added-p50-ms")
	b.ReportMetric(p(scoped, 99)-p(none, 99), "added-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "basicauth", "## What basicAuth adds to a request\n\nBenchmarkBasicAuth. "+
		"Each request is a GET of the loopback backend's /echo through the gateway (or /.well-known/acme-challenge/bench for the opted-out row), one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchWarmup)+" of each row are not timed. "+
		"The checked rows carry a valid user's Authorization ({SHA}: one SHA-1 of the password per request).\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
