package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// scopedBenchLimits is how many scoped limits BenchmarkScopedLocalLimit
// gives localRateLimit.
const scopedBenchLimits = 16

// scopedBenchDoc is a localRateLimit with scopedBenchLimits scoped limits
// of the kind a gateway carries: per-client limits on API paths by method
// and header, one of which (the last) counts every request the benchmark
// sends, with a bucket it never empties; the others are tried and miss.
func scopedBenchDoc() string {
	var b strings.Builder
	b.WriteString("localRateLimit:\n  limits:\n")
	for i := range scopedBenchLimits - 1 {
		fmt.Fprintf(&b, "    api-v%d-%s:\n      match:\n        pathPrefix: /api/v%d\n        methods: [POST, PUT]\n        headers: [{name: x-tier, values: [premium], invert: true}]\n      requests: 100\n      unit: second\n      perClient: true\n", i, runID, i)
	}
	fmt.Fprintf(&b, "    echo-%s:\n      match:\n        pathPrefix: /echo\n        methods: [GET]\n      requests: 1000000\n      unit: second\n      perClient: true\n", runID)
	return b.String()
}

// BenchmarkScopedLocalLimit measures what a localRateLimit with 16 scoped
// limits adds to a request at the gateway (p50, p99), against the same
// requests without the item.
func BenchmarkScopedLocalLimit(b *testing.B) {
	ctx := setup(b)
	const n = 400
	measure := func() []time.Duration { return getTimes(ctx, b, "/echo", 0, n) }
	q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	mustACK(ctx, b, rendered(b, ""))
	without := measure()
	mustACK(ctx, b, rendered(b, scopedBenchDoc()))
	with := measure()
	b.ReportMetric(float64(q(with, 0.5)-q(without, 0.5))/1e6, "added-p50-ms")
	b.ReportMetric(float64(q(with, 0.99)-q(without, 0.99))/1e6, "added-p99-ms")
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	writeEnvoyReport(b, "scopedlocallimit", fmt.Sprintf(`## What 16 scoped local limits add to a request

BenchmarkScopedLocalLimit, %s. Envoy %s gateway, %d sequential GETs of /echo each, one connection a request; localRateLimit with %d limits (each a path prefix, methods and a per-client key, 15 of them an inverted header too): every request runs all %d limits' matches and is counted by the one for /echo, whose bucket it never empties.

| | p50 | p99 |
|---|---|---|
| without localRateLimit | %s | %s |
| with %d scoped limits | %s | %s |
| added | %s | %s |
`, harness.RunStamp(), newest.Binary.Version, n, scopedBenchLimits, scopedBenchLimits,
		r(q(without, 0.5)), r(q(without, 0.99)),
		scopedBenchLimits, r(q(with, 0.5)), r(q(with, 0.99)),
		r(q(with, 0.5)-q(without, 0.5)), r(q(with, 0.99)-q(without, 0.99))))
}
