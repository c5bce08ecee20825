package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// BenchmarkExtAuthLatency measures, at the newest real Envoy gateway, what
// the extAuth check adds to a request: sequential requests over one
// kept-alive connection, timed at the client, with no extAuth, with every
// request checked by oauth2-proxy (basic auth from an htpasswd file) or by
// Istio's sample ext_authz server over gRPC, and with extAuth on but the
// request opted out. It prints a Markdown table and writes it to
// $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkExtAuthLatency(b *testing.B) {
	ctx := setup(b)
	authMesh(ctx, b)
	g := newest
	measure := func(path string, headers map[string]string) []time.Duration {
		b.Helper()
		h := map[string]string{"Host": appHost}
		for k, v := range headers {
			h[k] = v
		}
		return requestTimes(ctx, b, g, http.MethodGet, path, h, 200)
	}
	creds := map[string]string{"Authorization": basic(), "x-ext-authz": "allow"}
	apply := func(doc string) {
		b.Helper()
		mustACK(ctx, b, rendered(b, doc))
		waitRouted(ctx, b, g)
	}
	apply("")
	none := measure("/echo", creds)
	apply(oauth2Doc(""))
	http1 := measure("/echo", creds)
	skipped := measure("/.well-known/acme-challenge/bench", creds)
	apply(fmt.Sprintf("extAuth:\n  service: %s\n  port: %d\n  protocol: grpc\n  skip:\n    paths: [/.well-known/acme-challenge, /oauth2]\n", extAuthzHost, extAuthzPort))
	grpc := measure("/echo", creds)
	prune(ctx, b, nil)

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	row := func(what string, d []time.Duration) string {
		return fmt.Sprintf("| %s | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms |\n", what, p(d, 50), p(d, 99), p(d, 50)-p(none, 50), p(d, 99)-p(none, 99))
	}
	table := fmt.Sprintf("| request through the gateway (Envoy %s, %d requests each) | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n", g.Binary.Version, benchRequests) +
		row("no extAuth", none) +
		row("extAuth, checked by oauth2-proxy over HTTP (basic auth)", http1) +
		row("extAuth, checked by Istio's sample ext_authz over gRPC", grpc) +
		row("extAuth, opted out (skip.paths): no call", skipped)
	b.ReportMetric(p(http1, 50)-p(none, 50), "added-http-p50-ms")
	b.ReportMetric(p(http1, 99)-p(none, 99), "added-http-p99-ms")
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "extauth", "## What the extAuth check adds to a request\n\nBenchmarkExtAuthLatency. "+
		"Each request is a GET of the loopback backend through the gateway (its /echo, or /.well-known/acme-challenge/bench for the opted-out row), one after the other over one kept-alive connection, timed at the client "+
		"from the request's start to the end of the response body; the first "+fmt.Sprint(benchWarmup)+" of each row are not timed. "+
		"The auth services run on the same machine as the gateway and the backend: the figures are the proxy's and the services' own work, not a network's. "+
		"oauth2-proxy checks the basic auth against an htpasswd entry ({SHA}); a bcrypt entry, or a cookie session, costs it more.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
