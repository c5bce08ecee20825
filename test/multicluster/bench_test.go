package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// benchEdits bounds the benchmark: edits per path.
const benchEdits = 20

// The gzip filter globalconfig names, and the name the direct copy's
// filter takes so that both can stand in one gateway.
const (
	gzipFilter   = "envoy.filters.http.compressor.gzip"
	directFilter = "envoy.filters.http.compressor.direct"
)

// gzipMin is a one-item document whose edits the benchmark times.
func gzipMin(v int) string {
	return fmt.Sprintf("gzip:\n  minContentLength: %d\n  contentType: [application/json]\n", v)
}

// BenchmarkEditAcrossClusters measures, at the real Envoy gateways of both
// clusters, the time from a ConfigMap edit in cluster a to the later of
// the two gateways loading the change (each one's LDS update_time, read
// once its config dump carries the new value), through the controller in
// a with b a member; beside the same EnvoyFilter written directly to both
// clusters at once (two server-side applies in parallel). And the
// controller's CPU time over the edits and its RSS after them, with b a
// member against home only (a fresh controller each). It prints a
// Markdown table, and writes it to $GLOBALCONFIG_BENCH_REPORT when set.
func BenchmarkEditAcrossClusters(b *testing.B) {
	ctx := harness.TestContext(b, "multicluster", setupErr)
	b.Cleanup(func() { cleanUp(b) })
	v := 1000
	if err := siteA.PutConfig(ctx, gzipMin(v)); err != nil {
		b.Fatal(err)
	}

	// Home only: the controller changes a's gateway.
	ctl := startBenchController(ctx, b)
	waitLoaded(ctx, b, []*site{siteA}, gzipFilter, v)
	homeCPU, homeRSS, _ := editLoop(ctx, b, ctl, []*site{siteA}, &v)
	ctl.Kill()

	// b a member: the controller changes both gateways.
	sec, err := memberSecret(siteB, harness.ControllerUser)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := siteA.Admin.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ctl = startBenchController(ctx, b)
	waitLoaded(ctx, b, sites, gzipFilter, v)
	bothCPU, bothRSS, viaConfigMap := editLoop(ctx, b, ctl, sites, &v)
	ctl.Kill()

	// The same EnvoyFilter written directly to both clusters.
	var direct []time.Duration
	for range benchEdits {
		v++
		body := directGzip(b, v)
		start := time.Now()
		errs := make([]error, len(sites))
		var wg sync.WaitGroup
		for i, s := range sites {
			wg.Add(1)
			go func() {
				defer wg.Done()
				force := true
				_, errs[i] = s.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Patch(ctx, "direct-gzip", types.ApplyPatchType, body,
					metav1.PatchOptions{FieldManager: "bench", Force: &force})
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		direct = append(direct, waitLoaded(ctx, b, sites, directFilter, v).Sub(start))
	}

	r50, r95 := harness.Percentile(viaConfigMap, 50), harness.Percentile(viaConfigMap, 95)
	d50, d95 := harness.Percentile(direct, 50), harness.Percentile(direct, 95)
	b.ReportMetric(harness.Ms(r50), "configmap-last-ack-p50-ms")
	b.ReportMetric(harness.Ms(d50), "direct-last-ack-p50-ms")
	table := fmt.Sprintf(`| measure (Envoy %s in a, %s in b; each gateway's own admin) | p50 | p95 |
|---|---|---|
| ConfigMap edit in a → the later of both gateways loads it, through globalconfig, b a member (%d edits) | %.1f ms | %.1f ms |
| the same EnvoyFilter written to both clusters at once → the later gateway loads it (%d writes) | %.1f ms | %.1f ms |
| ratio, ConfigMap path / direct path | %.3f | %.3f |

| the controller over %d edits | home only | b a member | b adds |
|---|---|---|---|
| CPU time | %.2f s | %.2f s | %.2f s |
| RSS after the edits | %.1f MiB | %.1f MiB | %.1f MiB |
`, siteA.Gateway.Binary.Version, siteB.Gateway.Binary.Version, benchEdits, harness.Ms(r50), harness.Ms(r95),
		benchEdits, harness.Ms(d50), harness.Ms(d95), float64(r50)/float64(d50), float64(r95)/float64(d95),
		benchEdits, homeCPU, bothCPU, bothCPU-homeCPU, homeRSS, bothRSS, bothRSS-homeRSS)
	fmt.Println()
	fmt.Print(table)
	if out := os.Getenv("GLOBALCONFIG_BENCH_REPORT"); out != "" {
		body := "## One edit, two clusters\n\nBenchmarkEditAcrossClusters (test/multicluster): one etcd, two kube-apiservers, an istiod and a real Envoy gateway in each; " +
			"the controller in cluster a with a member Secret for b. Each sample is timed from one API call through client-go (a ConfigMap update, " +
			"or two server-side applies of the same EnvoyFilter under another name, one per cluster, at once) until both gateways have loaded the change " +
			"(the later `listener_manager.lds.update_time`, read once each config dump carries the new `min_content_length`).\n\n" +
			"- " + harness.RunStamp() + "\n\n" + table
		if err := harness.WriteReportSection(out, harness.BenchReportTitle, "multicluster", body); err != nil {
			b.Fatal(err)
		}
	}
}

// startBenchController starts the controller in a (home, member Secrets
// watched) and waits until it is ready.
func startBenchController(ctx context.Context, b *testing.B) *harness.Controller {
	b.Helper()
	ctl, err := siteA.StartController(controllerBin, "controller-bench", "--leader-elect=false",
		"--cluster-name="+siteA.Name, "--member-secrets", "--istiod-debug-url="+siteA.Istiod.DebugURL())
	if err != nil {
		b.Fatal(err)
	}
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return ctl.Ready(ctx) }) {
		ctl.Kill()
		b.Fatalf("the controller is not ready:\n%s", ctl.Log(4000))
	}
	return ctl
}

// editLoop edits the document benchEdits times (*v counts up), waiting
// each time until every site's gateway loaded the change; it returns the
// controller's CPU time over the edits, its RSS after them, and each
// edit's time to the later gateway.
func editLoop(ctx context.Context, b *testing.B, ctl *harness.Controller, to []*site, v *int) (cpu, rss float64, took []time.Duration) {
	b.Helper()
	pid := ctl.Cmd.Process.Pid
	cpu0, err := harness.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	for range benchEdits {
		*v++
		start := time.Now()
		if err := siteA.PutConfig(ctx, gzipMin(*v)); err != nil {
			b.Fatal(err)
		}
		took = append(took, waitLoaded(ctx, b, to, gzipFilter, *v).Sub(start))
	}
	cpu1, err := harness.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	if rss, err = harness.RSSMiB(pid); err != nil {
		b.Fatal(err)
	}
	return cpu1 - cpu0, rss, took
}

// waitLoaded waits until the gateway of every site in to carries filter
// with min_content_length v, and returns the latest time one of them
// accepted that LDS update (Envoy's own record, in milliseconds).
func waitLoaded(ctx context.Context, b *testing.B, to []*site, filter string, v int) time.Time {
	b.Helper()
	var last time.Time
	for _, s := range to {
		var at time.Time
		ok := harness.Eventually(ctx, 30*time.Second, func() bool {
			body, err := s.Gateway.Get(ctx, "/config_dump?resource=dynamic_listeners")
			if err != nil || !carries(body, filter, v) {
				return false
			}
			st, err := s.Gateway.Stats(ctx)
			if err != nil {
				return false
			}
			at = time.UnixMilli(st["listener_manager.lds.update_time"])
			return true
		})
		if !ok {
			b.Fatalf("the gateway of cluster %s did not load %s with min_content_length %d", s.Name, filter, v)
		}
		if at.After(last) {
			last = at
		}
	}
	return last
}

// carries tells whether a listener config dump has the HTTP filter name
// with min_content_length v.
func carries(dump []byte, name string, v int) bool {
	var doc any
	if json.Unmarshal(dump, &doc) != nil {
		return false
	}
	found := false
	var walk func(x any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if x["name"] == name {
				js, _ := json.Marshal(x)
				found = found || strings.Contains(string(js), fmt.Sprintf(`"min_content_length":%d`, v))
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(doc)
	return found
}

// directGzip is globalconfig's gzip EnvoyFilter for gzipMin(v), as JSON
// for a server-side apply under another name, its filter renamed.
func directGzip(b *testing.B, v int) []byte {
	b.Helper()
	d, err := document.ParseFile([]byte(gzipMin(v)))
	if err != nil {
		b.Fatal(err)
	}
	objs, err := render.Desired(d)
	if err != nil {
		b.Fatal(err)
	}
	js, err := harness.DirectCopy(objs, "gzip", "direct-gzip", directFilter)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// cleanUp removes what the benchmark made: the direct EnvoyFilters, the
// member Secret, the document, its status and last good copy, and the
// controller's EnvoyFilters in both clusters.
func cleanUp(tb testing.TB) {
	bg := context.Background()
	_ = siteA.Admin.CoreV1().Secrets(ns).Delete(bg, harness.SecretNameFor("globalconfig-member-", siteB.Name), metav1.DeleteOptions{})
	for _, name := range []string{harness.ConfigMapName, status.ConfigMapName(harness.ConfigMapName), controller.LastGoodName(harness.ConfigMapName)} {
		_ = siteA.Admin.CoreV1().ConfigMaps(ns).Delete(bg, name, metav1.DeleteOptions{})
	}
	for _, s := range sites {
		_ = s.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(bg, "direct-gzip", metav1.DeleteOptions{})
		if err := s.PruneManaged(bg); err != nil {
			tb.Errorf("cluster %s: %v", s.Name, err)
		}
	}
}
