package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/webhook"
	"github.com/globalconfig/globalconfig/test/harness"
)

// Edits per benchmark run; the closing figures need at least 30.
const (
	benchEdits   = 40
	benchNoOps   = 10
	benchTimeout = 10 * time.Second
)

func benchDoc(minContentLength int) string {
	return fmt.Sprintf(`
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
gzip:
  minContentLength: %d
brotli: {}
`, minContentLength)
}

// BenchmarkConfigMapToEnvoyFilter measures the controller's own share of
// propagation: from a ConfigMap update until the API server has the
// updated EnvoyFilter (seen by a watch), and the API writes per edit.
func BenchmarkConfigMapToEnvoyFilter(b *testing.B) {
	f := setup(b)
	f.put(benchDoc(1000))
	ctl := f.start("controller")
	f.waitLive(f.desired(benchDoc(1000)), 30*time.Second)
	f.waitReconciledPast(ctl, 0)

	w, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Watch(f.ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + envoyfilter.ObjectName("gzip"),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	before := f.metrics(ctl)
	var latencies []time.Duration
	for i := 1; i <= benchEdits; i++ {
		doc := benchDoc(1000 + i)
		want := f.desired(doc)["istio-system/globalconfig-gzip"]
		n := f.reconciles(ctl)
		start := time.Now()
		f.put(doc)
		if err := waitHash(f.ctx, w, want); err != nil {
			b.Fatalf("edit %d: %v", i, err)
		}
		latencies = append(latencies, time.Since(start))
		// Let the sync finish its status write before the next edit, so
		// every write is counted against the edit that caused it.
		f.waitReconciledPast(ctl, n)
	}
	after := f.metrics(ctl)
	efWrites := harness.Sum(after, `globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`) -
		harness.Sum(before, `globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`)
	allWrites := writes(after) - writes(before)

	// No-op edits: the same document, reformatted.
	base := benchDoc(1000 + benchEdits)
	for i := range benchNoOps {
		n := f.reconciles(ctl)
		f.put(fmt.Sprintf("# no-op edit %d\n%s", i, base))
		f.waitReconciledPast(ctl, n)
	}
	noop := writes(f.metrics(ctl)) - writes(after)

	p50, p95 := harness.Percentile(latencies, 50), harness.Percentile(latencies, 95)
	b.ReportMetric(harness.Ms(p50), "p50-ms")
	b.ReportMetric(harness.Ms(p95), "p95-ms")
	b.ReportMetric(efWrites/benchEdits, "envoyfilter-writes/edit")
	b.ReportMetric(noop/benchNoOps, "writes/no-op-edit")
	fmt.Printf(`
| controller share (ConfigMap update → EnvoyFilter updated in the API server) | value |
|---|---|
| edits | %d |
| p50 | %.1f ms |
| p95 | %.1f ms |
| EnvoyFilter writes per one-item edit | %.2f |
| all API writes per one-item edit (EnvoyFilter + status + Event) | %.2f |
| API writes per no-op edit | %.2f (over %d edits) |
`, benchEdits, harness.Ms(p50), harness.Ms(p95), efWrites/benchEdits, allWrites/benchEdits, noop/benchNoOps, benchNoOps)
}

// waitHash waits for a watch event carrying the content hash want.
func waitHash(ctx context.Context, w watch.Interface, want string) error {
	timeout := time.After(benchTimeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if ef, isEF := ev.Object.(*clientnetworking.EnvoyFilter); isEF && ef.Annotations[envoyfilter.AnnotationContentHash] == want {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("no EnvoyFilter with hash %s within %v", want, benchTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Reviews per phase of BenchmarkWebhookAdmission: enough for a p95 that
// is not the slowest sample.
const benchReviews = 100

// BenchmarkWebhookAdmission measures what the admission webhook adds to a
// ConfigMap update, without and with --envoy (the Envoy `make tools`
// installs): updates of the global ConfigMap (sent to the webhook) beside
// the same updates of another ConfigMap (never sent: the webhook
// configuration's match condition names the global one), interleaved in
// one run, timed at the client. Every edit changes the rendered set, so
// with --envoy every one is loaded into Envoy.
func BenchmarkWebhookAdmission(b *testing.B) {
	f := setup(b)
	real, err := harness.EnvoyBinary(f.ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		b.Fatal(err)
	}
	port, err := harness.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	createWebhookConfig(f, fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path))
	cms := cluster.Admin.CoreV1().ConfigMaps(ns)
	b.Cleanup(func() { _ = cms.Delete(f.ctx, "unwatched", metav1.DeleteOptions{}) })

	// phase serves the webhook from a controller started with args and
	// times benchReviews updates of each ConfigMap.
	phase := func(name string, args ...string) (with, without []time.Duration, ctl *harness.Controller) {
		ctl = f.start(name, append([]string{fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1"}, args...)...)
		if !harness.Eventually(f.ctx, 30*time.Second, func() bool { return ctl.Ready(f.ctx) }) {
			b.Fatalf("%s with webhook never ready", name)
		}
		if !harness.Eventually(f.ctx, 30*time.Second, func() bool {
			_, err := applyManifest(f, cmName, "gizp: {}\n")
			return err != nil
		}) {
			b.Fatal("the webhook never refused a bad document")
		}
		// The warm-up may have saved one before the webhook answered.
		_ = cms.Delete(f.ctx, cmName, metav1.DeleteOptions{})
		_ = cms.Delete(f.ctx, "unwatched", metav1.DeleteOptions{})
		global, err := cms.Create(f.ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: ns},
			Data:       map[string]string{document.DataKey: benchDoc(1000)},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		plain, err := cms.Create(f.ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "unwatched", Namespace: ns},
			Data:       map[string]string{document.DataKey: benchDoc(1000)},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 1; i <= benchReviews; i++ {
			global.Data[document.DataKey] = benchDoc(1000 + i)
			start := time.Now()
			if global, err = cms.Update(f.ctx, global, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			with = append(with, time.Since(start))
			plain.Data[document.DataKey] = benchDoc(1000 + i)
			start = time.Now()
			if plain, err = cms.Update(f.ctx, plain, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			without = append(without, time.Since(start))
		}
		return with, without, ctl
	}
	with, without, ctl := phase("controller")
	ctl.Kill()
	envoyWith, envoyWithout, ctl := phase("controller-envoy", "--envoy="+real.Path)
	m := f.metrics(ctl)
	// Every edit of the phase, and the CREATE before them, was loaded.
	if runs := m["globalconfig_webhook_envoy_check_duration_seconds_count"]; runs != benchReviews+1 || m[`globalconfig_webhook_envoy_checks_total{result="failed"}`] != 0 {
		b.Fatalf("%v Envoy checks (%v without a verdict) for %d edits", runs, m[`globalconfig_webhook_envoy_checks_total{result="failed"}`], benchReviews+1)
	}
	envoyCheck := m["globalconfig_webhook_envoy_check_duration_seconds_sum"] / m["globalconfig_webhook_envoy_check_duration_seconds_count"]

	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	w50, w95, o50, o95 := p(with, 50), p(with, 95), p(without, 50), p(without, 95)
	e50, e95, eo50, eo95 := p(envoyWith, 50), p(envoyWith, 95), p(envoyWithout, 50), p(envoyWithout, 95)
	b.ReportMetric(w50-o50, "added-p50-ms")
	b.ReportMetric(e50-eo50, "added-envoy-p50-ms")
	writeReport(b, "webhook", fmt.Sprintf(`## Admission webhook

Written by BenchmarkWebhookAdmission in test/integration: the controller binary serving its webhook to a real kube-apiserver on loopback, first without, then with `+"`--envoy`"+` (Envoy %s, the upstream build `+"`make tools`"+` installs; every edit changes the rendered set, so each is loaded into it); %s.

| ConfigMap update, timed at the client (%d each, interleaved) | p50 | p95 |
|---|---|---|
| global ConfigMap, through the admission webhook | %.1f ms | %.1f ms |
| another ConfigMap, not sent to the webhook | %.1f ms | %.1f ms |
| added by the webhook | %.1f ms | %.1f ms |
| global ConfigMap, through the webhook with `+"`--envoy`"+` | %.1f ms | %.1f ms |
| another ConfigMap, not sent to the webhook (same run) | %.1f ms | %.1f ms |
| added by the webhook with `+"`--envoy`"+` | %.1f ms | %.1f ms |

The Envoy check itself (the controller's `+"`globalconfig_webhook_envoy_check_duration_seconds`"+`, %d checks) averaged %.1f ms. A no-op edit, or a set Envoy judged before, runs no check.
`, real.Version, harness.RunStamp(), benchReviews, w50, w95, o50, o95, w50-o50, w95-o95, e50, e95, eo50, eo95, e50-eo50, e95-eo95,
		benchReviews+1, envoyCheck*1000))
}

// writeReport prints a benchmark's section and, when
// $GLOBALCONFIG_BENCH_REPORT names docs/benchmarks.md, writes it there.
func writeReport(b *testing.B, name, body string) {
	fmt.Print("\n" + body)
	if out := os.Getenv("GLOBALCONFIG_BENCH_REPORT"); out != "" {
		if err := harness.WriteReportSection(out, harness.BenchReportTitle, name, body); err != nil {
			b.Fatal(err)
		}
	}
}

// Outages in BenchmarkOutageRecovery, and how long each lasts.
const (
	benchOutages      = 5
	benchOutageLength = 20 * time.Second
)

// BenchmarkOutageRecovery stops the API server for 20 s, five times. Each
// time, as soon as it answers again, the ConfigMap is edited; recovery is
// the time until the EnvoyFilters match the edit.
func BenchmarkOutageRecovery(b *testing.B) {
	f := setup(b)
	f.put(docV1)
	ctl := f.start("controller")
	f.waitLive(f.desired(docV1), 30*time.Second)
	var recovery []time.Duration
	for i := range benchOutages {
		cluster.StopAPIServer()
		time.Sleep(benchOutageLength)
		if err := cluster.StartAPIServer(f.ctx); err != nil {
			b.Fatal(err)
		}
		doc := []string{docV2, docV1}[i%2]
		back := time.Now()
		f.put(doc)
		f.waitLive(f.desired(doc), 90*time.Second)
		recovery = append(recovery, time.Since(back))
		if ctl.Exited() {
			b.Fatalf("the controller exited:\n%s", ctl.Log(4000))
		}
	}
	p50, worst := harness.Percentile(recovery, 50), slices.Max(recovery)
	b.ReportMetric(p50.Seconds(), "recovery-p50-s")
	b.ReportMetric(worst.Seconds(), "recovery-max-s")
	writeReport(b, "outage", fmt.Sprintf(`## API server outages

Written by BenchmarkOutageRecovery in test/integration; %s.

| outage recovery (API server stopped %v, then an edit; until the EnvoyFilters match) | value |
|---|---|
| outages | %d |
| p50 | %.2f s |
| max | %.2f s |
| each | %v |
`, harness.RunStamp(), benchOutageLength, benchOutages, p50.Seconds(), worst.Seconds(), recovery))
}
