package proxy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// benchTrafficEdits bounds the traffic gate benchmark: edits per policy.
const benchTrafficEdits = 5

// BenchmarkTrafficGate measures what the traffic gate (rollout.analysis)
// adds to a canary phase: ConfigMap edit → the gateway that is no canary
// ACKs the change, with real requests flowing through both gateways, a
// canary policy with the gate (reading both Envoys' statistics every 2 s)
// against the same policy without it. It prints a Markdown table and
// writes it to $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkTrafficGate(b *testing.B) {
	ctx := setup(b)
	freshStart(ctx, b)
	cn, g := oldest, newest
	const benchBake = 3 * time.Second
	doc := func(analysis bool, v int) string {
		gate := ""
		if analysis {
			gate = "  analysis:\n    localReplies: true\n    connectFailures: true\n    minRequests: 20\n"
		}
		return canaryBase(benchBake, gate) + gzipMin(v)
	}
	putConfig(ctx, b, doc(false, 1000))
	startController(ctx, b, "--istiod-debug-url=http://"+istiod.HTTPAddr, statsArgs(cn, g))
	waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", 1000)
	l := startLoad(ctx, b, cn, g)
	defer l.Halt()
	b.Cleanup(func() {
		if b.Failed() {
			if s, err := cluster.Status(ctx); err == nil && s.Canary != nil {
				b.Logf("status %s: canary %+v; traffic %+v", s.State, s.Canary, s.Canary.Traffic)
			}
		}
	})
	edit := func(d string, v int) time.Duration {
		start := time.Now()
		putConfig(ctx, b, d)
		return waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", v).Sub(start)
	}
	var gated, plain []time.Duration
	// The first edit of each policy only switches the policy (a rollout
	// section edit changes no EnvoyFilter): not timed.
	for i := 1; i <= benchTrafficEdits; i++ {
		plain = append(plain, edit(doc(false, 1000+i), 1000+i))
	}
	putConfig(ctx, b, doc(true, 1000+benchTrafficEdits))
	for i := 1; i <= benchTrafficEdits; i++ {
		gated = append(gated, edit(doc(true, 2000+i), 2000+i))
	}
	g50, p50 := harness.Percentile(gated, 50), harness.Percentile(plain, 50)
	b.ReportMetric(harness.Ms(g50-p50), "traffic-gate-ms")
	requests := l.Count(cn.name, 200) + l.Count(g.name, 200)
	table := fmt.Sprintf(`| measure (Envoy %s, not a canary; %d edits each; real requests through both gateways) | p50 | max |
|---|---|---|
| ConfigMap edit → the Envoy ACKs it, canary policy, bake time %s, no traffic gate | %.1f ms | %.1f ms |
| the same with rollout.analysis (both Envoys' statistics read every 2 s) | %.1f ms | %.1f ms |
| what the traffic gate adds to a phase (difference of the medians) | %.1f ms | |
`, g.Binary.Version, benchTrafficEdits, benchBake, harness.Ms(p50), harness.Ms(slices.Max(plain)), harness.Ms(g50), harness.Ms(slices.Max(gated)), harness.Ms(g50-p50))
	fmt.Println()
	fmt.Print(table)
	b.Logf("%d requests answered 200 during the benchmark", requests)
	writeEnvoyReport(b, "traffic", "## What the traffic gate adds to a canary phase\n\nBenchmarkTrafficGate. "+
		"The same kind of edit as above, timed at the gateway that is not a canary until its Envoy loaded the change, while a GET and a POST "+
		"go through each gateway every 20 ms: a canary policy without `rollout.analysis`, then the same with it (local replies and connection failures judged, "+
		"20 requests needed). The gate reads each canary's and each sampled stable proxy's statistics every 2 s on its own goroutine and judges with the "+
		"figures of its last read, so a phase with enough traffic is promoted when the bake time ends, as without it; reading and parsing one Envoy's "+
		"statistics costs what `BenchmarkParseStats` (pkg/rollout) says per read.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}
