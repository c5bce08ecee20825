package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// Bounds of the benchmark: edits per path, and the unrelated ConfigMaps of
// the memory comparison.
const (
	benchEdits      = 40
	benchNoOps      = 10
	benchConfigMaps = 10000
	handwrittenName = "envoy.filters.http.compressor.handwritten"
)

func gzipDoc(minContentLength int) string {
	return fmt.Sprintf("gzip:\n  minContentLength: %d\n  contentType: [application/json]\n", minContentLength)
}

// minContentLength returns the min_content_length of the compressor filter
// name at the gateway, or -1.
func minContentLength(s xds.Snapshot, name string) int {
	hcm, err := s.GatewayHCM(listenerName)
	if err != nil {
		return -1
	}
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() != name {
			continue
		}
		c := &compressorv3.Compressor{}
		if f.GetTypedConfig().UnmarshalTo(c) != nil {
			return -1
		}
		return int(c.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue())
	}
	return -1
}

// handwritten is the equivalent EnvoyFilter a user would write by hand.
func handwritten(minContentLength int) ([]byte, error) {
	lib, err := anypb.New(&gzipv3.Gzip{ChunkSize: wrapperspb.UInt32(4096)})
	if err != nil {
		return nil, err
	}
	p, err := envoyfilter.InsertHTTPFilter(handwrittenName, &compressorv3.Compressor{
		ResponseDirectionConfig: &compressorv3.Compressor_ResponseDirectionConfig{CommonConfig: &compressorv3.Compressor_CommonDirectionConfig{
			MinContentLength: wrapperspb.UInt32(uint32(minContentLength)), ContentType: []string{"application/json"},
		}},
		CompressorLibrary: &corev3.TypedExtensionConfig{Name: "gzip", TypedConfig: lib},
	})
	if err != nil {
		return nil, err
	}
	obj, err := envoyfilter.NewObject("handwritten", envoyfilter.Placement{Insert: envoyfilter.StageCompression.Insert}, envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		return nil, err
	}
	obj.Metadata.Name = "handwritten-gzip"
	obj.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "handwritten"}
	return json.Marshal(obj)
}

// BenchmarkPropagation measures, in one run, a ConfigMap edit through the
// controller and a direct write of an equivalent hand-written EnvoyFilter,
// each until the gateway's xDS client sees the change; the controller's own
// share; API writes per edit; controller RSS beside a namespace-wide
// informer; and render time. It prints a Markdown table and, when
// $GLOBALCONFIG_BENCH_REPORT names a file, writes the report there.
func BenchmarkPropagation(b *testing.B) {
	ctx := setup(b)
	efs := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns)

	putConfig(ctx, b, gzipDoc(1000))
	ctl := startController(ctx, b)
	b.Cleanup(func() { _ = efs.Delete(context.Background(), "handwritten-gzip", metav1.DeleteOptions{}) })
	body, err := handwritten(1000)
	if err != nil {
		b.Fatal(err)
	}
	force := true
	if _, err := efs.Patch(ctx, "handwritten-gzip", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "bench", Force: &force}); err != nil {
		b.Fatal(err)
	}
	waitEffect(ctx, b, "both filters", func(s xds.Snapshot) error {
		if minContentLength(s, "envoy.filters.http.compressor.gzip") != 1000 || minContentLength(s, handwrittenName) != 1000 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	w, err := efs.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + envoyfilter.ObjectName("gzip")})
	if err != nil {
		b.Fatal(err)
	}
	before, err := ctl.Metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "global-config", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var viaConfigMap, direct, share []time.Duration
	for i := 1; i <= benchEdits; i++ {
		// Through the controller: both paths are timed from one write call.
		v := 1000 + i
		cm.Data[document.DataKey] = gzipDoc(v)
		start := time.Now()
		if cm, err = cluster.Admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		stored, err := waitWatch(ctx, w, desiredHash(b, gzipDoc(v)))
		if err != nil {
			b.Fatal(err)
		}
		seen := waitEffect(ctx, b, "configmap edit", func(s xds.Snapshot) error {
			if minContentLength(s, "envoy.filters.http.compressor.gzip") != v {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		viaConfigMap = append(viaConfigMap, seen.Sub(start))
		share = append(share, stored.Sub(start))

		// The same change written directly.
		body, err := handwritten(v)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if _, err := efs.Patch(ctx, "handwritten-gzip", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "bench", Force: &force}); err != nil {
			b.Fatal(err)
		}
		seen = waitEffect(ctx, b, "direct write", func(s xds.Snapshot) error {
			if minContentLength(s, handwrittenName) != v {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		direct = append(direct, seen.Sub(start))
	}
	// Let the last sync finish its status write.
	time.Sleep(200 * time.Millisecond)
	after, err := ctl.Metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	efWrites := harness.Sum(after, `globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`) - harness.Sum(before, `globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`)
	base := gzipDoc(1000 + benchEdits)
	for i := range benchNoOps {
		n := harness.Sum(mustMetrics(ctx, b, ctl), "globalconfig_reconcile_total")
		putConfig(ctx, b, fmt.Sprintf("# no-op edit %d\n%s", i, base))
		if !harness.Eventually(ctx, 10*time.Second, func() bool {
			return harness.Sum(mustMetrics(ctx, b, ctl), "globalconfig_reconcile_total") > n
		}) {
			b.Fatal("no reconcile after a no-op edit")
		}
	}
	noop := harness.Sum(mustMetrics(ctx, b, ctl), "globalconfig_api_writes_total") - harness.Sum(after, "globalconfig_api_writes_total")

	// The MCP path, in the same run: the kube-sink controller and its
	// EnvoyFilters make way for a controller serving an istiod of its own
	// over MCP, and the same kind of edit is timed to that istiod's gateway.
	ctl.Kill()
	if err := efs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue}); err != nil {
		b.Fatal(err)
	}
	port, err := harness.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	mcpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	startMCPController(ctx, b, "bench-mcp-controller", mcpAddr)
	_, mcpGateway := startMCPIstiod(ctx, b, "bench-istiod-mcp", mcpAddr, 0)
	if cm, err = cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "global-config", metav1.GetOptions{}); err != nil {
		b.Fatal(err)
	}
	var viaMCP []time.Duration
	for i := 1; i <= benchEdits; i++ {
		v := 2000 + i
		cm.Data[document.DataKey] = gzipDoc(v)
		start := time.Now()
		if cm, err = cluster.Admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		seen, err := mcpGateway.WaitFor(ctx, effectTimeout, func(s xds.Snapshot) bool {
			return minContentLength(s, "envoy.filters.http.compressor.gzip") == v
		})
		if err != nil {
			b.Fatalf("mcp edit %d: %v", i, err)
		}
		viaMCP = append(viaMCP, seen.Sub(start))
	}

	rss := measureRSS(ctx, b)
	renderTime, renderAllocs := measureRender(b)

	r50, r95 := harness.Percentile(viaConfigMap, 50), harness.Percentile(viaConfigMap, 95)
	d50, d95 := harness.Percentile(direct, 50), harness.Percentile(direct, 95)
	s50, s95 := harness.Percentile(share, 50), harness.Percentile(share, 95)
	m50, m95 := harness.Percentile(viaMCP, 50), harness.Percentile(viaMCP, 95)
	b.ReportMetric(harness.Ms(m50), "mcp-p50-ms")
	b.ReportMetric(harness.Ms(r50), "configmap-p50-ms")
	b.ReportMetric(harness.Ms(d50), "direct-p50-ms")
	b.ReportMetric(float64(r50)/float64(d50), "p50-ratio")
	table := fmt.Sprintf(`| measure | p50 | p95 |
|---|---|---|
| ConfigMap edit → gateway xDS, through globalconfig (%d edits) | %.1f ms | %.1f ms |
| hand-written EnvoyFilter write → gateway xDS (%d writes) | %.1f ms | %.1f ms |
| ratio, ConfigMap path / direct path | %.3f | %.3f |
| ConfigMap edit → gateway xDS, through globalconfig serving istiod over MCP (%d edits) | %.1f ms | %.1f ms |
| ratio, MCP path / EnvoyFilter (CRD) path | %.3f | %.3f |
| controller share: ConfigMap update → EnvoyFilter updated in the API server | %.1f ms | %.1f ms |

| measure | value |
|---|---|
| EnvoyFilter writes per one-item edit | %.2f |
| API writes per no-op edit | %.2f (over %d edits) |
| controller RSS, 0 unrelated ConfigMaps in its namespace | %.1f MiB |
| controller RSS, %d unrelated ConfigMaps | %.1f MiB |
| namespace-wide ConfigMap informer RSS, 0 ConfigMaps | %.1f MiB |
| namespace-wide ConfigMap informer RSS, %d ConfigMaps | %.1f MiB |
| render of deploy/examples/global-config.yaml (parse, validate, build, strict check; mean of 200) | %.2f ms, %d allocs |
| render of a one-item edit of it (gzip's chunkSize; the other items reused; mean of 2000) | %.3f ms |
`, benchEdits, harness.Ms(r50), harness.Ms(r95), benchEdits, harness.Ms(d50), harness.Ms(d95), float64(r50)/float64(d50), float64(r95)/float64(d95),
		benchEdits, harness.Ms(m50), harness.Ms(m95), float64(m50)/float64(r50), float64(m95)/float64(r95), harness.Ms(s50), harness.Ms(s95),
		efWrites/benchEdits, noop/benchNoOps, benchNoOps,
		rss.controller0, benchConfigMaps, rss.controller10k, rss.informer0, benchConfigMaps, rss.informer10k,
		harness.Ms(renderTime), int(renderAllocs), harness.Ms(measureOneItemRender(b)))
	fmt.Println()
	fmt.Print(table)
	if out := os.Getenv("GLOBALCONFIG_BENCH_REPORT"); out != "" {
		if err := harness.WriteReportSection(out, harness.BenchReportTitle, "propagation", report(table)); err != nil {
			b.Fatal(err)
		}
	}
}

// measureRender times the full render of the example document: its mean
// over renderRuns runs, and its allocations.
func measureRender(b *testing.B) (time.Duration, float64) {
	const renderRuns = 200
	data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	renderOnce := func() {
		doc, err := document.ParseFile(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := render.Desired(doc); err != nil {
			b.Fatal(err)
		}
	}
	renderOnce() // warm up
	start := time.Now()
	for range renderRuns {
		renderOnce()
	}
	return time.Since(start) / renderRuns, testing.AllocsPerRun(20, renderOnce)
}

// measureOneItemRender times what the controller spends rendering an edit
// of one item of the example: the mean over 2000 renders alternating
// gzip's chunkSize, each rebuilding gzip alone.
func measureOneItemRender(b *testing.B) time.Duration {
	const runs = 2000
	doc, err := harness.ExampleDocument()
	if err != nil {
		b.Fatal(err)
	}
	edited := strings.Replace(doc, "chunkSize: 4096", "chunkSize: 8192", 1)
	if edited == doc {
		b.Fatal("the example has no gzip chunkSize: 4096 to edit")
	}
	r := render.New()
	versions := []map[string]string{{document.DataKey: doc}, {document.DataKey: edited}}
	r.FromConfigMap(versions[0]) // warm up
	start := time.Now()
	for i := range runs {
		if res := r.FromConfigMap(versions[(i+1)%2]); !res.Valid() || !slices.Equal(res.Rebuilt, []string{"gzip"}) {
			b.Fatalf("render %d: rebuilt %v, problems %v", i, res.Rebuilt, res.Problems)
		}
	}
	return time.Since(start) / runs
}

func mustMetrics(ctx context.Context, b *testing.B, ctl *harness.Controller) map[string]float64 {
	m, err := ctl.Metrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func desiredHash(b *testing.B, doc string) string {
	for _, o := range desiredObjects(b, doc) {
		if o.Item() == "gzip" {
			return o.Hash()
		}
	}
	b.Fatal("no gzip object")
	return ""
}

// waitWatch returns when a watch event carries the content hash want.
func waitWatch(ctx context.Context, w watch.Interface, want string) (time.Time, error) {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("watch closed")
			}
			if ef, isEF := ev.Object.(*clientnetworking.EnvoyFilter); isEF && ef.Annotations[envoyfilter.AnnotationContentHash] == want {
				return time.Now(), nil
			}
		case <-timeout:
			return time.Time{}, fmt.Errorf("no EnvoyFilter with hash %s", want)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

type rssFigures struct{ controller0, controller10k, informer0, informer10k float64 }

// measureRSS starts the controller and a namespace-wide informer fresh,
// with no and then with benchConfigMaps unrelated ConfigMaps in istio-system,
// and reads their resident memory once their caches are synced.
func measureRSS(ctx context.Context, b *testing.B) rssFigures {
	informerBin := filepath.Join(cluster.Dir, "nsinformer")
	build := exec.Command("go", "build", "-o", informerBin, "./test/nsinformer")
	build.Dir = harness.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nsinformer: %v: %s", err, out)
	}
	measure := func(label string) (float64, float64) {
		ctl, err := cluster.StartController(controlBin, "rss-controller-"+label, "--leader-elect=false")
		if err != nil {
			b.Fatal(err)
		}
		defer ctl.Kill()
		inf, err := harness.Start(cluster.Dir, "rss-informer-"+label, informerBin, []string{"--kubeconfig=" + cluster.AdminKubeconfig, "--namespace=" + ns}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer inf.Kill()
		if !harness.Eventually(ctx, 60*time.Second, func() bool { return ctl.Ready(ctx) && strings.Contains(inf.Log(200), "synced") }) {
			b.Fatalf("not synced: %s %s", ctl.Log(2000), inf.Log(2000))
		}
		time.Sleep(2 * time.Second) // let start-up garbage settle
		runtime.GC()
		return mustRSS(b, ctl.Cmd.Process.Pid), mustRSS(b, inf.Cmd.Process.Pid)
	}
	var r rssFigures
	r.controller0, r.informer0 = measure("0")
	createConfigMaps(ctx, b)
	b.Cleanup(func() {
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=unrelated"})
	})
	r.controller10k, r.informer10k = measure("10k")
	return r
}

// createConfigMaps creates benchConfigMaps unrelated ConfigMaps of about
// 1 KiB each, eight at a time.
func createConfigMaps(ctx context.Context, b *testing.B) {
	payload := strings.Repeat("x", 1024)
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				_, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: map[string]string{"bench": "unrelated"}},
					Data:       map[string]string{"payload": payload},
				}, metav1.CreateOptions{})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := range benchConfigMaps {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("create configmaps: %v", err)
	default:
	}
}

func mustRSS(b *testing.B, pid int) float64 {
	v, err := harness.RSSMiB(pid)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// report is docs/benchmarks.md: the table and the machine it ran on.
func report(table string) string {
	cpu := "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mem := "unknown"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			mem = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return fmt.Sprintf(`## Propagation

Written by BenchmarkPropagation in test/e2e.

- Date: %s
- Machine: %d cores (%s), %s memory; %s
- Components: kube-apiserver v1.36.3, etcd v3.6.7 and istiod (istio.io/istio v0.0.0-20260827124520-eed52ebb66ad), all on loopback, started by the test harness; the controller binary without the race detector.
- Method: in one run, the ConfigMap path (through EnvoyFilter objects) and the hand-written EnvoyFilter path alternate against the same istiod; then the MCP path runs against a second istiod of the same build that reads globalconfig over MCP (one istiod reading both sources would see every filter twice). Each sample is timed from one write call (ConfigMap update, or server-side apply of the hand-written EnvoyFilter) until the xDS client, connected as the gateway, receives a listener whose compressor filter carries the new min_content_length. istiod debounces pushes by 100 ms (PILOT_DEBOUNCE_AFTER), which is most of every path. RSS is VmRSS of a freshly started process once its caches are synced.

%s`, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpu, mem, runtime.Version(), table)
}
