package fleet_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/fleet"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The fleet benchmark's shape: a fifth of the proxies are gateways (in
// istio-ingress, the document's target), the rest sidecars in five
// namespaces; 1% of the fleet are canary gateways.
const (
	gatewayShare = 5 // one proxy in five is a gateway
	benchEdits   = 7 // edits per path at the largest fleet
	growthEdits  = 3 // edits per path at the smaller ones
	pushes       = 4 // forced full pushes per layout and round
	pushRounds   = 2 // rounds of the three layouts, alternated
	idleWindow   = 20 * time.Second
)

// kubeRun is what one fleet size measured through the API server.
type kubeRun struct {
	n, gateways, sidecars int
	connect               time.Duration
	viaConfigMap          []time.Duration // edit → last gateway ACK, per edit
	direct                []time.Duration // the same change written as EnvoyFilters
	perProxy              []time.Duration // every gateway's arrival, every ConfigMap edit
	sidecarPushes         int             // listener responses to sidecars over the ConfigMap edits
	rootSidecarPushes     int             // the same, for one edit of the set in the root namespace
	trackerSynced         []time.Duration // edit → status counting every gateway Synced
	pushCPU               map[string][]float64
	listenerBytes         map[string]int // gw-0's listeners under each layout
	handObjects           int
	ctlCPUPerEdit         float64 // controller CPU seconds per edit, tracking included
	ctlIdleCPU            float64 // share of one core while tracking an idle fleet
	ctlRSS                float64 // MiB
	pollBytes             float64 // bytes read from istiod per tracker poll
	// editReads are the tracker's requests to istiod per ConfigMap edit,
	// by endpoint, and editBytes the bytes it read per edit: from the
	// edit to every gateway Synced, the baseline read before delivery
	// and the watch of istiod's store included.
	editReads             map[string]float64
	editBytes             float64
	polls                 float64 // tracker polls in the idle window
	statusBytes           int
	status                *status.Status
	objects, patches      int
	canaries              int         // canary gateways (the largest fleet)
	canaryGood, canaryBad phaseResult // a promoted and a rolled back phase
}

// BenchmarkFleet is make bench-fleet: fleets of lightweight proxies on a
// real istiod, at growing sizes (GLOBALCONFIG_FLEET_SIZES, default
// 250,500,1000), then the largest through MCP; figures to docs/benchmarks.md.
func BenchmarkFleet(b *testing.B) {
	if setupErr != nil {
		b.Fatalf("fleet setup: %v", setupErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	var sizes []int
	for _, s := range strings.Split(envOr("GLOBALCONFIG_FLEET_SIZES", "250,500,1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < gatewayShare {
			b.Fatalf("GLOBALCONFIG_FLEET_SIZES: %q is no fleet size", s)
		}
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	var runs []*kubeRun
	for i, n := range sizes {
		runs = append(runs, measureKube(ctx, b, n, i == len(sizes)-1))
		b.Logf("fleet %d: %s", n, runs[i].summary())
	}
	largest := runs[len(runs)-1]
	viaMCP := measureMCP(ctx, b, largest.n)
	at10k := statusAt(b, largest.status, 10_000)
	report := fleetReport(runs, viaMCP, at10k)
	fmt.Fprintln(os.Stderr, report)
	if path := os.Getenv("GLOBALCONFIG_BENCH_REPORT"); path != "" {
		if err := harness.WriteReportSection(path, harness.BenchReportTitle, "BenchmarkFleet", report); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(harness.Ms(harness.Percentile(largest.viaConfigMap, 99)), "last-ack-p99-ms")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (r *kubeRun) summary() string {
	return fmt.Sprintf("connect %s, ConfigMap p50 %s, direct p50 %s, push CPU ours %.3fs hand %.3fs none %.3fs",
		r.connect.Round(time.Millisecond), harness.Percentile(r.viaConfigMap, 50), harness.Percentile(r.direct, 50),
		mean(r.pushCPU["ours"]), mean(r.pushCPU["hand"]), mean(r.pushCPU["none"]))
}

// measureKube measures one fleet of n proxies through the API server:
// ConfigMap edits with the controller tracking the fleet, then the same
// changes written as EnvoyFilters, then istiod's CPU per forced full push
// under our layout, the hand-written one and none.
func measureKube(ctx context.Context, b *testing.B, n int, full bool) *kubeRun {
	r := &kubeRun{n: n, gateways: n / gatewayShare, pushCPU: map[string][]float64{}, listenerBytes: map[string]int{}}
	r.sidecars = n - r.gateways
	edits := growthEdits
	if full {
		edits = benchEdits
	}
	start := time.Now()
	f := startFleet(ctx, b, r.gateways, r.sidecars, float64(n)/100/float64(r.gateways))
	r.connect = time.Since(start)
	defer f.Close()
	defer func() {
		if err := cluster.PruneManaged(ctx); err != nil {
			b.Error(err)
		}
		deleteHandWritten(ctx, b)
	}()

	// The controller, tracking the fleet.
	prefix := fmt.Sprintf("edge-%d-", n)
	ctl, stop := startTracking(ctx, b, f, fmt.Sprintf("bench-fleet-%d", n), exampleWith(b, prefix+"0"), prefix+"0", r.gateways)
	defer stop()
	objs := currentSet(ctx, b)
	r.objects = len(objs)
	for _, o := range objs {
		r.patches += len(o.Spec.GetConfigPatches())
	}

	// Edits through the ConfigMap: each timed to the last gateway's ACK,
	// then to the status counting every gateway Synced.
	pid := ctl.Cmd.Process.Pid
	cpu0 := cpuOf(b, pid)
	sidecars0 := f.Pushes(fleet.ListenerType, fleet.Sidecars)
	e0, err := ctl.Metrics(ctx)
	must(b, err)
	for i := 1; i <= edits; i++ {
		marker := prefix + strconv.Itoa(i)
		f.Watch(marker, fleet.Gateways)
		doc := exampleWith(b, marker)
		start := time.Now()
		must(b, cluster.PutConfig(ctx, doc))
		arrived, err := waitFor(ctx, f, marker, start)
		if err != nil {
			b.Fatal(err)
		}
		r.viaConfigMap = append(r.viaConfigMap, arrived.Quantile(1))
		r.perProxy = append(r.perProxy, arrived...)
		hash := setHash(b, doc)
		if _, err := cluster.WaitRollout(ctx, time.Minute, func(s *rollout.Status) bool {
			return s.Version == hash && s.Synced == r.gateways
		}); err != nil {
			b.Fatal(err)
		}
		r.trackerSynced = append(r.trackerSynced, time.Since(start))
		must(b, f.Quiet(ctx, 500*time.Millisecond))
	}
	r.sidecarPushes = f.Pushes(fleet.ListenerType, fleet.Sidecars) - sidecars0
	r.ctlCPUPerEdit = (cpuOf(b, pid) - cpu0) / float64(edits)
	e1, err := ctl.Metrics(ctx)
	must(b, err)
	r.editReads = map[string]float64{}
	for _, ep := range []string{"/debug/syncz", "/debug/configz", "/debug/adsz"} {
		key := `globalconfig_rollout_requests_total{endpoint="` + ep + `"}`
		r.editReads[ep] = (e1[key] - e0[key]) / float64(edits)
	}
	r.editBytes = (harness.Sum(e1, "globalconfig_rollout_response_bytes_total") - harness.Sum(e0, "globalconfig_rollout_response_bytes_total")) / float64(edits)

	// The controller while the fleet is quiet: its CPU, memory, and what
	// each tracker poll reads.
	m0, err := ctl.Metrics(ctx)
	must(b, err)
	cpu0 = cpuOf(b, pid)
	time.Sleep(idleWindow)
	r.ctlIdleCPU = (cpuOf(b, pid) - cpu0) / idleWindow.Seconds()
	m1, err := ctl.Metrics(ctx)
	must(b, err)
	// A poll reads /debug/syncz once from each istiod, and more only
	// while a set is new: bytes of every endpoint per syncz request.
	syncz := `globalconfig_rollout_requests_total{endpoint="/debug/syncz"}`
	if polls := m1[syncz] - m0[syncz]; polls > 0 {
		r.pollBytes = (harness.Sum(m1, "globalconfig_rollout_response_bytes_total") - harness.Sum(m0, "globalconfig_rollout_response_bytes_total")) / polls
		r.polls = polls
	}
	if r.ctlRSS, err = harness.RSSMiB(pid); err != nil {
		b.Fatal(err)
	}
	r.statusBytes = statusBytes(ctx, b)
	if r.status, err = cluster.Status(ctx); err != nil {
		b.Fatal(err)
	}

	// The same changes written directly as EnvoyFilters, the controller
	// stopped: the objects it would write, applied by one call each.
	stop()
	for i := 1; i <= edits; i++ {
		marker := prefix + "direct-" + strconv.Itoa(i)
		changed := changedObjects(b, objs, exampleWith(b, marker))
		f.Watch(marker, fleet.Gateways)
		start := time.Now()
		for _, o := range changed {
			applyDirect(ctx, b, o)
		}
		arrived, err := waitFor(ctx, f, marker, start)
		if err != nil {
			b.Fatal(err)
		}
		r.direct = append(r.direct, arrived.Quantile(1))
		objs = replaceObjects(objs, changed)
		must(b, f.Quiet(ctx, 500*time.Millisecond))
	}

	// A gateway-only change with the set in the root namespace: how many
	// sidecars istiod pushes for it (the largest fleet only).
	if full {
		// The gateways' namespace's copy would override the root one's.
		must(b, cluster.PruneManaged(ctx))
		root := retarget(objs, ns)
		for _, o := range root {
			applyDirect(ctx, b, o)
		}
		must(b, f.Quiet(ctx, time.Second))
		before := f.Pushes(fleet.ListenerType, fleet.Sidecars)
		marker := prefix + "root"
		changed := changedObjects(b, root, strings.Replace(exampleWith(b, marker), "  namespace: "+gatewayNamespace+"\n", "  namespace: "+ns+"\n", 1))
		f.Watch(marker, fleet.Gateways)
		start := time.Now()
		for _, o := range changed {
			applyDirect(ctx, b, o)
		}
		if _, err := waitFor(ctx, f, marker, start); err != nil {
			b.Fatal(err)
		}
		must(b, f.Quiet(ctx, time.Second))
		r.rootSidecarPushes = f.Pushes(fleet.ListenerType, fleet.Sidecars) - before
		for _, o := range root {
			must(b, cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(ctx, o.Metadata.Name, metav1.DeleteOptions{}))
		}
	}

	// istiod's CPU per forced full push, for each layout in turn.
	hand := handWritten(objs)
	r.handObjects = len(hand)
	for range pushRounds {
		for _, layout := range []string{"ours", "hand", "none"} {
			must(b, cluster.PruneManaged(ctx))
			deleteHandWritten(ctx, b)
			switch layout {
			case "ours":
				for _, o := range objs {
					applyDirect(ctx, b, o)
				}
			case "hand":
				for _, o := range hand {
					applyDirect(ctx, b, o)
				}
			}
			must(b, f.Quiet(ctx, 2*time.Second))
			for range pushes {
				r.pushCPU[layout] = append(r.pushCPU[layout], fullPush(ctx, b, f))
			}
			r.listenerBytes[layout] = f.Proxies[0].LastBytes(fleet.ListenerType)
		}
	}
	if r.listenerBytes["ours"] != r.listenerBytes["hand"] {
		b.Fatalf("the hand-written layout gives gateways other listeners: %d bytes against %d", r.listenerBytes["hand"], r.listenerBytes["ours"])
	}
	if r.listenerBytes["none"] == r.listenerBytes["ours"] {
		b.Fatalf("the set changed nothing in a gateway's listeners (%d bytes)", r.listenerBytes["ours"])
	}
	if full {
		measureCanary(ctx, b, f, r)
	}
	if err := f.Err(); err != nil {
		b.Fatal(err)
	}
	return r
}

// canaryBake is the bake time of the fleet's canary phases.
const canaryBake = 5 * time.Second

// measureCanary runs two canary phases over the fleet, the controller
// tracking it: a change every canary takes (promoted), then one every
// canary refuses (rolled back), each judged over every canary.
func measureCanary(ctx context.Context, b *testing.B, f *fleet.Fleet, r *kubeRun) {
	must(b, cluster.PruneManaged(ctx))
	deleteHandWritten(ctx, b)
	for _, p := range f.Proxies {
		if canaries(p) {
			r.canaries++
		}
	}
	policy := canaryPolicy(canaryBake)
	prefix := fmt.Sprintf("edge-%d-canary-", r.n)
	_, stop := startTracking(ctx, b, f, fmt.Sprintf("bench-fleet-canary-%d", r.n), policy+exampleWith(b, prefix+"0"), prefix+"0", r.gateways)
	defer stop()
	var err error
	if r.canaryGood, err = runPhase(ctx, f, policy+exampleWith(b, prefix+"1"), prefix+"1", false, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	acked := 0
	for _, a := range r.canaryGood.record.Canaries {
		if a.ACKed() {
			acked++
		}
	}
	if acked != r.canaries || len(r.canaryGood.record.Canaries) != r.canaries {
		b.Fatalf("the promoted phase judged %d canaries, %d ACKed with the canary copy; the fleet has %d", len(r.canaryGood.record.Canaries), acked, r.canaries)
	}
	if r.canaryGood.stableFirst < r.canaryGood.canaryLast+canaryBake/2 {
		b.Fatalf("a gateway that is no canary took the change at %s, before the bake time after the last canary (%s)", r.canaryGood.stableFirst, r.canaryGood.canaryLast)
	}
	must(b, f.Quiet(ctx, time.Second))
	if r.canaryBad, err = runPhase(ctx, f, policy+exampleWith(b, prefix+"2"), prefix+"2", true, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	if r.canaryBad.stableFirst != 0 {
		b.Fatalf("a gateway that is no canary took the refused change at %s", r.canaryBad.stableFirst)
	}
}

// measureMCP times ConfigMap edits to the last gateway's ACK through a
// controller serving a second istiod over MCP (the first one holds no
// proxy then, and reads no MCP), at n proxies.
func measureMCP(ctx context.Context, b *testing.B, n int) []time.Duration {
	port, err := harness.FreePort()
	must(b, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	prefix := fmt.Sprintf("edge-mcp-%d-", n)
	must(b, cluster.PutConfig(ctx, exampleWith(b, prefix+"0")))
	_, stop := startController(b, "bench-fleet-mcp", "--sink=mcp", "--mcp-addr="+addr)
	defer stop()
	ist, err := cluster.StartIstiodWith(ctx, harness.IstiodOptions{Name: "istiod-mcp",
		MeshConfig: fmt.Sprintf("configSources:\n- address: xds://%s\n- address: k8s://\n", addr),
		Env:        []string{"PILOT_MAX_REQUESTS_PER_SECOND=1000"}})
	must(b, err)
	defer ist.Kill()
	gws := n / gatewayShare
	f, err := fleet.Start(ctx, fleet.Options{Addr: ist.GRPCAddr, Gateways: gws, Sidecars: n - gws, Namespaces: 5,
		Versions: []string{"1.31.0", "1.30.2"}, GatewayRoutes: gatewayRoutes, SidecarRoutes: sidecarRoutes, Seed: 2})
	must(b, err)
	defer f.Close()
	// The first listeners carry the set already (istiod is ready once it
	// synced its MCP source); each edit proves it is served.
	must(b, f.Quiet(ctx, time.Second))
	var out []time.Duration
	for i := 1; i <= benchEdits; i++ {
		marker := prefix + strconv.Itoa(i)
		f.Watch(marker, fleet.Gateways)
		start := time.Now()
		must(b, cluster.PutConfig(ctx, exampleWith(b, marker)))
		arrived, err := waitFor(ctx, f, marker, start)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, arrived.Quantile(1))
		must(b, f.Quiet(ctx, 500*time.Millisecond))
	}
	return out
}

// startController runs the controller; stop kills it and removes the
// global ConfigMap, its status and last good copy (not the EnvoyFilters).
// startTracking puts doc, which carries marker, and starts a controller
// tracking the fleet; it returns once every gateway took doc and the
// status counts each of them Synced.
func startTracking(ctx context.Context, b *testing.B, f *fleet.Fleet, name, doc, marker string, gateways int) (*harness.Controller, func()) {
	must(b, cluster.PutConfig(ctx, doc))
	f.Watch(marker, fleet.Gateways)
	t0 := time.Now()
	ctl, stop := startController(b, name, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	if _, err := waitFor(ctx, f, marker, t0); err != nil {
		stop()
		b.Fatal(err)
	}
	if _, err := cluster.WaitRollout(ctx, 2*time.Minute, func(s *rollout.Status) bool { return s.Synced == gateways }); err != nil {
		stop()
		b.Fatal(err)
	}
	must(b, f.Quiet(ctx, time.Second))
	return ctl, stop
}

func startController(b *testing.B, name string, args ...string) (*harness.Controller, func()) {
	ctl, err := cluster.StartController(controlBin, name, append([]string{"--leader-elect=false"}, args...)...)
	must(b, err)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctl.Kill()
		if b.Failed() {
			b.Logf("%s log:\n%s", name, ctl.Log(4000))
		}
		bg := context.Background()
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(bg, harness.ConfigMapName, metav1.DeleteOptions{})
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(bg, status.ConfigMapName(harness.ConfigMapName), metav1.DeleteOptions{})
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(bg, controller.LastGoodName(harness.ConfigMapName), metav1.DeleteOptions{})
	}
	return ctl, stop
}

func cpuOf(b *testing.B, pid int) float64 {
	s, err := harness.CPUSeconds(pid)
	must(b, err)
	return s
}

// fullPush has istiod push every connected proxy at once (its debug
// trigger: a forced full push of its current state) and returns the CPU
// seconds istiod spent until the fleet was quiet again.
func fullPush(ctx context.Context, b *testing.B, f *fleet.Fleet) float64 {
	pid := istiod.Cmd.Process.Pid
	before := f.Counts(fleet.ListenerType)
	cpu0 := cpuOf(b, pid)
	resp, err := http.Get("http://" + istiod.HTTPAddr + "/debug/adsz?push=true")
	must(b, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := f.WaitPushed(ctx, fleet.ListenerType, fleet.All, before); err != nil {
		b.Fatal(err)
	}
	must(b, f.Quiet(ctx, 300*time.Millisecond))
	return cpuOf(b, pid) - cpu0
}

// currentSet is the EnvoyFilters the controller keeps, as it renders
// them.
func currentSet(ctx context.Context, b *testing.B) []*envoyfilter.Object {
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, harness.ConfigMapName, metav1.GetOptions{})
	must(b, err)
	res := render.New().FromConfigMap(cm.Data)
	if !res.Valid() {
		b.Fatal(render.Describe(res.Problems, "; "))
	}
	return res.Objects
}

func setHash(b *testing.B, doc string) string {
	res := render.New().FromConfigMap(map[string]string{document.DataKey: doc})
	if !res.Valid() {
		b.Fatal(render.Describe(res.Problems, "; "))
	}
	return render.SetHash(res.Objects)
}

// changedObjects renders doc and returns its objects that differ from
// current.
func changedObjects(b *testing.B, current []*envoyfilter.Object, doc string) []*envoyfilter.Object {
	res := render.New().FromConfigMap(map[string]string{document.DataKey: doc})
	if !res.Valid() {
		b.Fatal(render.Describe(res.Problems, "; "))
	}
	had := map[string]string{}
	for _, o := range current {
		had[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Hash()
	}
	var out []*envoyfilter.Object
	for _, o := range res.Objects {
		if had[o.Metadata.Namespace+"/"+o.Metadata.Name] != o.Hash() {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		b.Fatal("the edit changes no EnvoyFilter")
	}
	return out
}

func replaceObjects(objs, changed []*envoyfilter.Object) []*envoyfilter.Object {
	out := slices.Clone(objs)
	for i, o := range out {
		for _, c := range changed {
			if c.Metadata.Name == o.Metadata.Name && c.Metadata.Namespace == o.Metadata.Namespace {
				out[i] = c
			}
		}
	}
	return out
}

// retarget is objs in namespace.
func retarget(objs []*envoyfilter.Object, namespace string) []*envoyfilter.Object {
	out := make([]*envoyfilter.Object, len(objs))
	for i, o := range objs {
		c := *o
		c.Metadata.Namespace = namespace
		out[i] = &c
	}
	return out
}

// applyDirect writes o with one server-side apply, as a user writing
// EnvoyFilters by hand (or a GitOps tool) would.
func applyDirect(ctx context.Context, b *testing.B, o *envoyfilter.Object) {
	y, err := o.YAML()
	must(b, err)
	j, err := yaml.YAMLToJSON(y)
	must(b, err)
	force := true
	_, err = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(o.Metadata.Namespace).Patch(ctx, o.Metadata.Name, types.ApplyPatchType, j,
		metav1.PatchOptions{FieldManager: "bench-direct", Force: &force})
	must(b, err)
}

// handLabel marks the hand-written layout's objects.
const handLabel = "bench.globalconfig.io/hand-written"

// handWritten is objs as few EnvoyFilters as hold the same patches: one
// per workload selector, every patch in the order istiod applies ours
// (priority, then name), without our labels and annotations.
func handWritten(objs []*envoyfilter.Object) []*envoyfilter.Object {
	sorted := slices.Clone(objs)
	slices.SortStableFunc(sorted, func(a, c *envoyfilter.Object) int {
		if d := a.Spec.GetPriority() - c.Spec.GetPriority(); d != 0 {
			return int(d)
		}
		return strings.Compare(a.Metadata.Name, c.Metadata.Name)
	})
	bySelector := map[string]*envoyfilter.Object{}
	var out []*envoyfilter.Object
	for _, o := range sorted {
		key := o.Metadata.Namespace + "/" + fmt.Sprint(sortedLabels(o.Spec.GetWorkloadSelector().GetLabels()))
		h, ok := bySelector[key]
		if !ok {
			h = &envoyfilter.Object{APIVersion: o.APIVersion, Kind: o.Kind,
				Metadata: envoyfilter.Metadata{Name: fmt.Sprintf("hand-written-%d", len(out)), Namespace: o.Metadata.Namespace,
					Labels: map[string]string{handLabel: "true"}},
				Spec: &networking.EnvoyFilter{WorkloadSelector: o.Spec.GetWorkloadSelector()}}
			bySelector[key] = h
			out = append(out, h)
		}
		h.Spec.ConfigPatches = append(h.Spec.ConfigPatches, o.Spec.GetConfigPatches()...)
	}
	return out
}

func sortedLabels(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

func deleteHandWritten(ctx context.Context, b *testing.B) {
	err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: handLabel + "=true"})
	if err != nil {
		// DeleteCollection is per namespace.
		for _, n := range []string{gatewayNamespace, ns} {
			must(b, cluster.Istio.NetworkingV1alpha3().EnvoyFilters(n).DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: handLabel + "=true"}))
		}
	}
}

func statusBytes(ctx context.Context, b testing.TB) int {
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, status.ConfigMapName(harness.ConfigMapName), metav1.GetOptions{})
	must(b, err)
	n := 0
	for _, v := range cm.Data {
		n += len(v)
	}
	return n
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// fit is the least-squares line through (x, y): y = a + b·x.
func fit(x, y []float64) (a, b float64) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	if d := n*sxx - sx*sx; d != 0 {
		b = (n*sxy - sx*sy) / d
	}
	return (sy - b*sx) / n, b
}

// project fits f over runs and gives its value at n.
func project(runs []*kubeRun, f func(*kubeRun) float64, n float64) float64 {
	var x, y []float64
	for _, r := range runs {
		x, y = append(x, float64(r.n)), append(y, f(r))
	}
	a, b := fit(x, y)
	return a + b*n
}

func fleetReport(runs []*kubeRun, viaMCP []time.Duration, at10k int) string {
	r := runs[len(runs)-1]
	var sb strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	p("## Fleet scale\n\n%s. Written by BenchmarkFleet (`make bench-fleet`).\n\n", harness.RunStamp())
	p("Method: one process holds N lightweight proxies (test/fleet): a fifth are gateways in `istio-ingress`, the rest sidecars spread over five namespaces with twenty Services; each opens an ADS stream to a real istiod on loopback as Istio %s or %s, subscribes to clusters, listeners and its route configurations, and ACKs every response at once. The API server, etcd, istiod, the controller and the fleet share the machine's 2 cores. The document is the full example with `target.namespace: istio-ingress` (%d EnvoyFilters, %d patches); each edit changes `headers.server.name`, which every gateway's listeners carry, and is timed from the write call until the last gateway ACKed a response carrying it.\n\n",
		"1.31.0", "1.30.2", r.objects, r.patches)
	direct := harness.Percentile(r.direct, 50)
	row := func(name string, d []time.Duration) {
		p("| %s | %d | %.0f ms | %.0f ms | %.2f |\n", name, len(d), harness.Ms(harness.Percentile(d, 50)), harness.Ms(harness.Percentile(d, 99)),
			float64(harness.Percentile(d, 50))/float64(direct))
	}
	p("### Edit to last ACK, %d proxies (%d gateways)\n\n| path | edits | p50 | p99 | p50 / direct |\n|---|---|---|---|---|\n", r.n, r.gateways)
	row("ConfigMap → controller → EnvoyFilters → istiod", r.viaConfigMap)
	row("ConfigMap → controller → MCP → istiod", viaMCP)
	row("the same EnvoyFilters written directly (one server-side apply each)", r.direct)
	p("\nPer gateway, over every ConfigMap edit: p50 %.0f ms, p99 %.0f ms. The status counted every gateway Synced %.0f ms (p50) after the edit; the tracker polls istiod every %s while a proxy is Pending.\n\n",
		harness.Ms(harness.Percentile(r.perProxy, 50)), harness.Ms(harness.Percentile(r.perProxy, 99)),
		harness.Ms(harness.Percentile(r.trackerSynced, 50)), rollout.FastPoll)
	p("### istiod's CPU per full push\n\nA forced full push of istiod's current state to every connected proxy (its `/debug/adsz?push=true`: every proxy's clusters, listeners and routes generated and sent, EnvoyFilter patches applied on the way), %d pushes per layout in each of %d alternating rounds; istiod's user and system CPU from `/proc` until the fleet is quiet. *Hand-written* is the same patches in as few EnvoyFilters as hold them (%d: one per workload selector, in the order istiod applies ours); a gateway's listeners are byte-for-byte the same size under both.\n\n",
		pushes, pushRounds, r.handObjects)
	p("| proxies | no set | globalconfig's set | hand-written | ours / hand-written | ours / none |\n|---|---|---|---|---|---|\n")
	for _, k := range runs {
		ours, hand, none := mean(k.pushCPU["ours"]), mean(k.pushCPU["hand"]), mean(k.pushCPU["none"])
		p("| %d | %.3f s | %.3f s | %.3f s | %.3f | %.3f |\n", k.n, none, ours, hand, ours/hand, ours/none)
	}
	p("\n### Push scope\n\nOver %d gateway-only edits with the set in the gateways' namespace, the %d sidecars got %d listener responses. The same kind of edit with the set in the root namespace (`istio-system`) pushed %d listener responses to them: istiod pushes every sidecar for a root-namespace EnvoyFilter, whatever its selector.\n\n",
		len(r.viaConfigMap), r.sidecars, r.sidecarPushes, r.rootSidecarPushes)
	if g, bad := r.canaryGood, r.canaryBad; g.record != nil && bad.record != nil {
		viaCM := harness.Percentile(r.viaConfigMap, 50)
		p("### A canary phase, %d proxies\n\n`rollout.strategy: Canary`, bake time %s, the %d canary gateways (1%% of the fleet, labelled `globalconfig.io/canary: \"true\"`, the other %d `\"false\"`); each time from the ConfigMap edit.\n\n", r.n, canaryBake, r.canaries, r.gateways-r.canaries)
		p("| measure | time |\n|---|---|\n")
		p("| a change the canaries take: the last canary ACKed it | %.0f ms |\n", harness.Ms(g.canaryLast))
		p("| … the status says Promoted (every canary judged, %d of %d ACKed with the canary copy) | %.0f ms |\n", r.canaries, r.canaries, harness.Ms(g.ended))
		p("| … the first and the last other gateway ACKed it | %.0f ms, %.0f ms |\n", harness.Ms(g.stableFirst), harness.Ms(g.stableLast))
		p("| what the phase adds beyond its bake time: last ACK − bake time − a Direct edit's last ACK (p50 %.0f ms) | %.0f ms |\n", harness.Ms(viaCM), harness.Ms(g.stableLast-canaryBake-viaCM))
		p("| a change every canary NACKs: the status says RolledBack (%q) | %.0f ms |\n", truncateText(bad.record.Message, 90), harness.Ms(bad.ended))
		p("| … other gateways that ever took it | none |\n\n")
	}
	p("### The controller and its status\n\n| proxies | controller CPU per edit | CPU while the fleet is idle | RSS | bytes read per tracker poll | status ConfigMap |\n|---|---|---|---|---|---|\n")
	for _, k := range runs {
		p("| %d | %.3f s | %.2f%% of a core | %.1f MiB | %.0f | %d bytes |\n", k.n, k.ctlCPUPerEdit, 100*k.ctlIdleCPU, k.ctlRSS, k.pollBytes, k.statusBytes)
	}
	p("| 10000 (the status only, built from a synthetic tracker answer) | | | | | %d bytes |\n\n", at10k)
	p("What the rollout tracker reads from istiod per ConfigMap edit, from the edit until the status counts every gateway Synced: the store read just before delivery (2 to 5 ms at 1,000 proxies, timed in the controller; the one read delivery waits for), the store read every 10 ms until it holds the set, the sync status read then, and the polls while a gateway is pending.\n\n| proxies | /debug/syncz | /debug/configz | /debug/adsz | bytes read per edit |\n|---|---|---|---|---|\n")
	for _, k := range runs {
		p("| %d | %.1f | %.1f | %.1f | %.0f KiB |\n", k.n, k.editReads["/debug/syncz"], k.editReads["/debug/configz"], k.editReads["/debug/adsz"], k.editBytes/1024)
	}
	p("\n")
	p("### Growth and a projection\n\n| proxies | connect | edit → last ACK p50 | istiod CPU per full push (ours) |\n|---|---|---|---|\n")
	for _, k := range runs {
		p("| %d | %.1f s | %.0f ms | %.3f s |\n", k.n, k.connect.Seconds(), harness.Ms(harness.Percentile(k.viaConfigMap, 50)), mean(k.pushCPU["ours"]))
	}
	lastACK := func(k *kubeRun) float64 { return harness.Ms(harness.Percentile(k.viaConfigMap, 50)) }
	cpu := func(k *kubeRun) float64 { return mean(k.pushCPU["ours"]) }
	poll := func(k *kubeRun) float64 { return k.pollBytes }
	rss := func(k *kubeRun) float64 { return k.ctlRSS }
	p("\nA least-squares line through the sizes above, extended (assumptions: cost grows linearly with the proxies one istiod serves, as it did here; istiod keeps 2 cores to itself; replicas split the fleet evenly and push in parallel; the tracker reads every replica's sync status for the set's namespaces, one entry per proxy there: here the gateways'):\n\n")
	p("| fleet | istiod replicas | edit → last ACK p50 | istiod CPU per full push, per replica | bytes per tracker poll, all replicas | controller RSS |\n|---|---|---|---|---|---|\n")
	for _, c := range []struct{ n, replicas float64 }{{10_000, 1}, {10_000, 3}, {10_000, 5}} {
		per := c.n / c.replicas
		p("| %.0f | %.0f | %.1f s | %.2f s | %.1f MiB | %.0f MiB |\n", c.n, c.replicas, project(runs, lastACK, per)/1000, project(runs, cpu, per),
			project(runs, poll, c.n)/(1<<20), project(runs, rss, c.n))
	}
	return sb.String()
}

// waitFor is Fleet.Wait bounded to two minutes.
func waitFor(ctx context.Context, f *fleet.Fleet, marker string, start time.Time) (fleet.Arrivals, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return f.Wait(ctx, marker, start)
}

// truncateText cuts s to n characters.
func truncateText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
