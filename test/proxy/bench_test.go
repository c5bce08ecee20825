package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/globalconfig/globalconfig/test/harness"
)

// benchACKEdits bounds the propagation benchmark: edits per path.
const benchACKEdits = 20

// gzipMin is a one-item document whose edits the benchmark times.
func gzipMin(v int) string {
	return fmt.Sprintf("gzip:\n  minContentLength: %d\n  contentType: [application/json]\n", v)
}

// BenchmarkEnvoyACK measures, at the newest real Envoy gateway, the time
// from a ConfigMap edit to the gateway's ACK of the change (the LDS
// update_time Envoy itself records, once its config dump carries the new
// value), beside a direct write of the same EnvoyFilter; and the Envoy's
// RSS with every item of the everything document against none. It prints
// a Markdown table and writes it to $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func BenchmarkEnvoyACK(b *testing.B) {
	ctx := setup(b)
	g := newest
	prune(ctx, b, nil)

	// RSS first, without the controller: none, then everything.
	mustACK(ctx, b, nil)
	none := settledRSS(b, g)
	mustACK(ctx, b, rendered(b, everythingDocument(b)))
	all := settledRSS(b, g)
	prune(ctx, b, nil)

	putConfig(ctx, b, gzipMin(1000))
	startController(ctx, b, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", 1000)
	cms := cluster.Admin.CoreV1().ConfigMaps(ns)
	efs := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns)
	force := true
	var viaConfigMap, direct []time.Duration
	for i := 1; i <= benchACKEdits; i++ {
		v := 1000 + i
		cm, err := cms.Get(ctx, "global-config", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cm.Data["config.yaml"] = gzipMin(v)
		start := time.Now()
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		viaConfigMap = append(viaConfigMap, waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", v).Sub(start))

		body := directGzip(b, v)
		start = time.Now()
		if _, err := efs.Patch(ctx, "direct-gzip", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "bench", Force: &force}); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, waitMin(ctx, b, g, directFilter, v).Sub(start))
	}
	_ = efs.Delete(context.Background(), "direct-gzip", metav1.DeleteOptions{})

	r50, r95 := harness.Percentile(viaConfigMap, 50), harness.Percentile(viaConfigMap, 95)
	d50, d95 := harness.Percentile(direct, 50), harness.Percentile(direct, 95)
	b.ReportMetric(harness.Ms(r50), "configmap-ack-p50-ms")
	b.ReportMetric(harness.Ms(d50), "direct-ack-p50-ms")
	table := fmt.Sprintf(`| measure (Envoy %s, its own admin) | p50 | p95 |
|---|---|---|
| ConfigMap edit → the gateway's Envoy ACKs it, through globalconfig (%d edits) | %.1f ms | %.1f ms |
| the same EnvoyFilter written directly → the Envoy ACKs it (%d writes) | %.1f ms | %.1f ms |
| ratio, ConfigMap path / direct path | %.3f | %.3f |

| measure | value |
|---|---|
| Envoy RSS, none of globalconfig's EnvoyFilters | %.1f MiB |
| Envoy RSS, every option of every item (the everything document) | %.1f MiB |
`, g.Binary.Version, benchACKEdits, harness.Ms(r50), harness.Ms(r95), benchACKEdits, harness.Ms(d50), harness.Ms(d95),
		float64(r50)/float64(d50), float64(r95)/float64(d95), none, all)
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "ack", "## ConfigMap edit → Envoy ACK, and Envoy's memory\n\nBenchmarkEnvoyACK. "+
		"Each sample is timed from one API call through client-go (a ConfigMap update, or a server-side apply of the same EnvoyFilter under another name) "+
		"until the gateway's Envoy has loaded the change: its `listener_manager.lds.update_time`, which Envoy records when it accepts an LDS update, "+
		"read once its config dump carries the new `min_content_length`. istiod's 100 ms debounce is most of both paths. "+
		"RSS is the Envoy's VmRSS after each set was loaded and the process settled (2 s).\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}

// writeEnvoyReport writes one section of $GLOBALCONFIG_BENCH_ENVOY_REPORT.
func writeEnvoyReport(b *testing.B, name, body string) {
	b.Helper()
	out := os.Getenv("GLOBALCONFIG_BENCH_ENVOY_REPORT")
	if out == "" {
		return
	}
	const title = "# Benchmarks at a real Envoy\n\nWritten by `make bench` (test/proxy), each section by the benchmark it names.\n"
	if err := harness.WriteReportSection(out, title, name, body); err != nil {
		b.Fatal(err)
	}
}

// benchCanaryEdits bounds the canary benchmark: edits per strategy.
const benchCanaryEdits = 5

// BenchmarkCanaryOverhead measures what a canary phase adds to an edit's
// way to a gateway that is not a canary: ConfigMap edit → that gateway's
// Envoy ACKs the change, with rollout.strategy Canary (the oldest gateway
// the canary, a bake time of benchBake) against Direct. The overhead is
// the difference of the medians less the bake time.
func BenchmarkCanaryOverhead(b *testing.B) {
	ctx := setup(b)
	g := newest // labelled globalconfig.io/canary=false
	freshStart(ctx, b)
	const benchBake = 2 * time.Second
	canaryDoc := func(v int) string {
		return fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n", benchBake) + gzipMin(v)
	}
	putConfig(ctx, b, canaryDoc(1000))
	startController(ctx, b, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", 1000)
	edit := func(doc string, v int) time.Duration {
		start := time.Now()
		putConfig(ctx, b, doc)
		return waitMin(ctx, b, g, "envoy.filters.http.compressor.gzip", v).Sub(start)
	}
	var canaried, direct []time.Duration
	for i := 1; i <= benchCanaryEdits; i++ {
		canaried = append(canaried, edit(canaryDoc(1000+i), 1000+i))
	}
	for i := 1; i <= benchCanaryEdits; i++ {
		direct = append(direct, edit(gzipMin(2000+i), 2000+i))
	}
	c50, d50 := harness.Percentile(canaried, 50), harness.Percentile(direct, 50)
	over := c50 - d50 - benchBake
	b.ReportMetric(harness.Ms(over), "canary-overhead-ms")
	table := fmt.Sprintf(`| measure (Envoy %s, not a canary; %d edits each) | p50 | max |
|---|---|---|
| ConfigMap edit → the Envoy ACKs it, rollout.strategy Canary, bake time %s | %.1f ms | %.1f ms |
| ConfigMap edit → the Envoy ACKs it, rollout.strategy Direct | %.1f ms | %.1f ms |
| what the canary phase adds beyond its bake time (difference of the medians less %s) | %.1f ms | |
`, g.Binary.Version, benchCanaryEdits, benchBake, harness.Ms(c50), harness.Ms(slices.Max(canaried)), harness.Ms(d50), harness.Ms(slices.Max(direct)), benchBake, harness.Ms(over))
	fmt.Println()
	fmt.Print(table)
	writeEnvoyReport(b, "canary", "## What a canary phase adds\n\nBenchmarkCanaryOverhead. "+
		"The same kind of edit as above, timed at the gateway that is not a canary, until its Envoy loaded the change: "+
		"with a canary policy that is the canary's ACK (the controller's tracker polls istiod every second while a canary is pending), the bake time, "+
		"the promotion's write, and istiod's push to this gateway.\n\n"+
		fmt.Sprintf("- Date: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))+table)
}

// directFilter is the HTTP filter name of the directly written EnvoyFilter.
const directFilter = "envoy.filters.http.compressor.direct"

// directGzip is globalconfig's gzip EnvoyFilter for gzipMin(v), as JSON
// for a server-side apply under another name, with its filter renamed so
// that both can stand.
func directGzip(b *testing.B, v int) []byte {
	b.Helper()
	js, err := harness.DirectCopy(rendered(b, gzipMin(v)), "gzip", "direct-gzip", directFilter)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// waitMin waits until g's active listeners carry filter with
// min_content_length v, and returns when Envoy accepted that LDS update.
func waitMin(ctx context.Context, b *testing.B, g *gw, filter string, v int) time.Time {
	b.Helper()
	var at time.Time
	ok := harness.Eventually(ctx, ackTimeout, func() bool {
		doc, err := listenerDump(ctx, g)
		if err != nil {
			return false
		}
		found := false
		for _, l := range activeListeners(doc) {
			walk(l, func(k string, x any) {
				fs, ok := x.([]any)
				if !ok || k != "http_filters" {
					return
				}
				for _, f := range fs {
					if m, ok := f.(map[string]any); ok && m["name"] == filter {
						js, _ := json.Marshal(m)
						found = found || strings.Contains(string(js), fmt.Sprintf(`"min_content_length":%d`, v))
					}
				}
			})
		}
		if !found {
			return false
		}
		st, err := g.Stats(ctx)
		if err != nil {
			return false
		}
		at = time.UnixMilli(st["listener_manager.lds.update_time"])
		return true
	})
	if !ok {
		b.Fatalf("gateway %s did not load %s with min_content_length %d", g.name, filter, v)
	}
	return at
}

// settledRSS is g's Envoy RSS after the process settled.
func settledRSS(b *testing.B, g *gw) float64 {
	b.Helper()
	time.Sleep(2 * time.Second)
	v, err := harness.RSSMiB(g.Cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// benchPreflightRuns bounds the preflight benchmark: runs per case.
const benchPreflightRuns = 10

// BenchmarkPreflight times `globalconfig diff --proxy` on the newest
// gateway, in-process, from the API calls to the printed diff: with the
// example document over a gateway without globalconfig's EnvoyFilters,
// and with an edit of it over a gateway that has the example; each
// without --envoy and with it (the difference is the real Envoy's
// validate runs). It writes the figures to $GLOBALCONFIG_BENCH_REPORT.
func BenchmarkPreflight(b *testing.B) {
	ctx := setup(b)
	example := harness.RepoRoot() + "/deploy/examples/global-config.yaml"
	data, err := os.ReadFile(example)
	if err != nil {
		b.Fatal(err)
	}
	edited := strings.Replace(string(data), "minContentLength: 1024", "minContentLength: 8192", 1)
	editFile := b.TempDir() + "/edit.yaml"
	if err := os.WriteFile(editFile, []byte(edited), 0o600); err != nil {
		b.Fatal(err)
	}
	base := []string{"diff", "--proxy", newest.proxyName(), "--istiod-debug-url", istiodURL()}
	time1 := func(args ...string) []time.Duration {
		var out []time.Duration
		for range benchPreflightRuns {
			start := time.Now()
			code, stdout, errs := runCLI(append(slices.Clone(base), args...)...)
			out = append(out, time.Since(start))
			if code != 1 {
				b.Fatalf("diff --proxy %v: exit %d\n%s\n%s", args, code, stdout, errs)
			}
		}
		return out
	}
	mustACK(ctx, b, nil)
	emptyPlain := time1("-f", example)
	emptyEnvoy := time1("-f", example, "--envoy", newest.Binary.Path)
	mustACK(ctx, b, rendered(b, string(data)))
	editPlain := time1("-f", editFile)
	editEnvoy := time1("-f", editFile, "--envoy", newest.Binary.Path)
	mustACK(ctx, b, nil)
	p50 := func(d []time.Duration) float64 { return harness.Ms(harness.Percentile(d, 50)) }
	p95 := func(d []time.Duration) float64 { return harness.Ms(harness.Percentile(d, 95)) }
	b.ReportMetric(p50(editPlain), "preflight-p50-ms")
	table := fmt.Sprintf(`| diff --proxy on the gateway (Envoy %s), %d runs each | p50 | p95 |
|---|---|---|
| the example over no globalconfig EnvoyFilter | %.1f ms | %.1f ms |
| the same with --envoy (adds the real Envoy's validate run) | %.1f ms | %.1f ms |
| an edit of the example (gzip) over the example: live patches taken off first | %.1f ms | %.1f ms |
| the same with --envoy | %.1f ms | %.1f ms |
`, newest.Binary.Version, benchPreflightRuns, p50(emptyPlain), p95(emptyPlain), p50(emptyEnvoy), p95(emptyEnvoy),
		p50(editPlain), p95(editPlain), p50(editEnvoy), p95(editEnvoy))
	fmt.Println()
	fmt.Print(table)
	out := os.Getenv("GLOBALCONFIG_BENCH_REPORT")
	if out == "" {
		return
	}
	body := "## Preflight (`diff --proxy`)\n\nBenchmarkPreflight (test/proxy). Each run is the whole command in-process: the EnvoyFilters, Gateways and Services from the API server, " +
		"istiod's adsz, syncz and config dump of the gateway, the prediction, the unified diff and its printing; the rows without `--envoy` are the preflight excluding Envoy's own start. " +
		"With `--envoy`, the real Envoy loads the predicted configuration in validate mode once (an accepted change runs it once).\n\n- " + harness.RunStamp() + "\n\n" + table
	if err := harness.WriteReportSection(out, harness.BenchReportTitle, "preflight", body); err != nil {
		b.Fatal(err)
	}
}
