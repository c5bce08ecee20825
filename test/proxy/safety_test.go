package proxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// The failures of issue 33 that involve proxies, at the real Envoy
// gateways of the suite (the 1.39 one the canary, the 1.40 one not): each
// test is named after its scenario, and each fails on the controller
// before the fix. The traffic gate's tests send real requests through both
// gateways and let the controller read each Envoy's own statistics.

// freshStart removes every trace of an earlier rollout: the generated
// EnvoyFilters, the last good copy and the status. A status that names a
// set the proxies no longer have, with nothing left to rebuild it from,
// holds every canary change (nothing is known to roll back to).
func freshStart(ctx context.Context, t testing.TB) {
	t.Helper()
	prune(ctx, t, nil)
	for _, name := range []string{controller.LastGoodName(harness.ConfigMapName), status.ConfigMapName(harness.ConfigMapName)} {
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// canaryBase is a canary policy of bake time bake, with extra rollout
// keys, and a downstream section every gateway takes.
func canaryBase(bake time.Duration, extra string) string {
	return fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n%sdownstream:\n  idleTimeout: 180\n", bake, extra)
}

// startFirst applies doc with a new controller and waits until both
// gateways ACKed it (the first set goes out directly): only then may a
// test edit the document, or the controller's first sync may see the
// edit, and take it for the first set.
func startFirst(ctx context.Context, t testing.TB, doc string, args ...string) *harness.Controller {
	t.Helper()
	putConfig(ctx, t, doc)
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--istiod-debug-url=") }) {
		args = append(args, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	}
	ctl := startController(ctx, t, append([]string{"--rollout-timeout=15s"}, args...)...)
	waitStatus(ctx, t, "the first set applied directly", canaryBound, func(s *status.Status) bool {
		return s.State == status.Applied && s.Canary == nil && s.Rollout != nil && s.Rollout.Synced >= 2 && s.Rollout.Pending == 0
	})
	return ctl
}

// stopped stops g (SIGSTOP) until the test ends: it stays connected and
// answers nothing.
func stopped(t *testing.T, g *gw) func() {
	t.Helper()
	if err := g.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = g.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}

// Scenario 1: "no stable set means promote". The last good copy deleted
// and the leader restarted mid-phase, with a canary that never answers:
// the other gateway never gets the change, and the phase ends rolled
// back at the bake time, judged from the stable set rebuilt from the live
// EnvoyFilters.
func TestNoStableSetNeverPromotes(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	cn, st := oldest, newest
	const bake = 5 * time.Second
	base := canaryBase(bake, "")
	ctl := startFirst(ctx, t, base+gzipAbove(100))
	resume := stopped(t, cn)
	doc := base + gzipAbove(200)
	putConfig(ctx, t, doc)
	waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
	if err := cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Stop(5 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr, "--rollout-timeout=15s")
	var leaked bool
	s := waitStatus(ctx, t, "the silent canary's change rolled back", bake+canaryBound, func(s *status.Status) bool {
		leaked = leaked || !compresses(ctx, t, st, 150)
		return phase(doc, canary.RolledBack, status.RolledBack)(s)
	})
	if leaked {
		t.Error("the other gateway got the change without the canary's ACK")
	}
	t.Logf("rolled back: %s", s.Canary.Message)
	resume()
	if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, cn, 150) && compresses(ctx, t, st, 150) }) {
		t.Error("the gateways are not both on the set before the change")
	}
}

// Scenario 2: "canaries that can't be seen don't count". One of the two
// istiod instances asked does not answer: its proxies' answers are
// missing, so the change is never promoted; the phase does not even
// start, and ends rolled back at its timeout.
func TestInvisibleCanariesCount(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	st := newest
	const bake = 3 * time.Second
	base := canaryBase(bake, "")
	startFirst(ctx, t, base+gzipAbove(100), "--istiod-debug-url=http://"+istiod.HTTPAddr+",http://127.0.0.1:1")
	if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, st, 150) }) {
		t.Fatal("the first set never reached the gateway")
	}
	doc := base + gzipAbove(200)
	putConfig(ctx, t, doc)
	var leaked bool
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("$ globalconfig status\n%s", statusText(t))
		}
	})
	s := waitStatus(ctx, t, "the roll back at the phase timeout", 3*bake+canaryBound, func(s *status.Status) bool {
		if !leaked && !compresses(ctx, t, st, 150) {
			leaked = true
			t.Logf("the other gateway stopped compressing at %v: state %s, canary %+v", time.Now().Format(time.RFC3339Nano), s.State, s.Canary)
		}
		return phase(doc, canary.RolledBack, status.RolledBack)(s)
	})
	if leaked {
		t.Error("the other gateway got the change while an istiod did not answer")
	}
	if !strings.Contains(s.Canary.Message, "phase timeout") || !strings.Contains(s.Canary.Message, "127.0.0.1:1") {
		t.Errorf("the record does not say why: %q", s.Canary.Message)
	}
	t.Logf("rolled back: %s", s.Canary.Message)
}

// Scenario 3: "an ACK is not proof of receipt". A change whose target
// selects only the gateway that is no canary: the canary ACKs every push
// and gets nothing of it. The phase does not start, and the other gateway
// never gets the untested change.
func TestACKWithoutTheCanaryCopyDoesNotCount(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	st := newest
	const bake = 3 * time.Second
	base := canaryBase(bake, "")
	startFirst(ctx, t, base)
	doc := base + fmt.Sprintf("gzip:\n  contentType: [text/plain]\n  target:\n    selector: {gateway: %s}\n", st.name)
	putConfig(ctx, t, doc)
	var leaked bool
	s := waitStatus(ctx, t, "the change held", canaryBound, func(s *status.Status) bool {
		leaked = leaked || compresses(ctx, t, st, 20000)
		return phase(doc, canary.Held, status.Held)(s)
	})
	if want := "gzip reaches no proxy labelled globalconfig.io/canary=true"; !strings.Contains(s.Canary.Waiting, want) {
		t.Errorf("waiting %q, want %q", s.Canary.Waiting, want)
	}
	if !harness.Eventually(ctx, 2*bake, func() bool { leaked = leaked || compresses(ctx, t, st, 20000); return false }) && leaked {
		t.Error("the other gateway got the change no canary received")
	}
	if !hasEventOf(ctx, corev1.EventTypeWarning, "CanaryHeld", "promoted untested") {
		t.Error("no CanaryHeld Event")
	}
	t.Logf("held: %s", s.Canary.Waiting)
}

// Scenario 4: "the canaries may not represent the change". A change that
// reaches the sidecars too (target context ANY), with only a gateway for
// a canary: a sidecar connected to istiod (a plain xDS client) is of a
// kind no canary represents, so the phase does not start, and the other
// gateway never gets the change.
func TestCanariesMustRepresentTheChange(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	st := newest
	sidecar, err := xds.Dial(ctx, istiod.GRPCAddr, xds.SidecarNode(ns, "10.1.6.1", map[string]string{"app": "shop", canary.DefaultLabel: "false"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sidecar.Close)
	const bake = 3 * time.Second
	base := canaryBase(bake, "") + "target:\n  context: ANY\n"
	startFirst(ctx, t, base+gzipAbove(100))
	doc := base + gzipAbove(200)
	putConfig(ctx, t, doc)
	var leaked bool
	s := waitStatus(ctx, t, "the change held", canaryBound, func(s *status.Status) bool {
		leaked = leaked || !compresses(ctx, t, st, 150)
		return phase(doc, canary.Held, status.Held)(s)
	})
	if want := "gzip reaches sidecars, and no canary is one (rollout.coverage Variants)"; !strings.Contains(s.Canary.Waiting, want) {
		t.Errorf("waiting %q, want %q", s.Canary.Waiting, want)
	}
	harness.Eventually(ctx, 2*bake, func() bool { leaked = leaked || !compresses(ctx, t, st, 150); return false })
	if leaked {
		t.Error("the other gateway got a change its kinds of proxy were not tested on")
	}
	t.Logf("held: %s", s.Canary.Waiting)
}

// startLoad sends real requests through gws until t ends (harness.Load),
// counted by gateway name.
func startLoad(ctx context.Context, t testing.TB, gws ...*gw) *harness.Load {
	urls := map[string]string{}
	for _, g := range gws {
		urls[g.name] = g.url("/echo")
	}
	return harness.StartLoad(ctx, t, urls)
}

// statsArgs point the controller at each gateway's own statistics (its
// admin's /stats/prometheus): in a cluster, istio-agent serves the same
// counters on the pod's port 15020, which the controller reads by default.
func statsArgs(gws ...*gw) string {
	var kv []string
	for _, g := range gws {
		kv = append(kv, g.proxyName()+"=http://"+g.AdminAddr+"/stats/prometheus")
	}
	return "--rollout-stats-url=" + strings.Join(kv, ",")
}

// The traffic gate at two real Envoys, both serving real requests: a
// change every Envoy loads but that answers every POST with 413 (a body
// limit of one byte) is rolled back on the canary's traffic, with the
// figures in the status and the Event, and the other gateway never has
// it; a harmless change under the same traffic is promoted.
func TestTrafficGate(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	cn, st := oldest, newest
	const bake = 8 * time.Second
	base := canaryBase(bake, "  analysis:\n    localReplies: true\n    minRequests: 40\n")
	startFirst(ctx, t, base, statsArgs(cn, st))
	l := startLoad(ctx, t, cn, st)
	time.Sleep(time.Second)

	t.Run("a change that answers every POST 413 is rolled back on its traffic", func(t *testing.T) {
		l.Reset()
		doc := base + "requestBody:\n  maxSize: 1\n"
		edited := time.Now()
		putConfig(ctx, t, doc)
		var leaked bool
		s := waitStatus(ctx, t, "the roll back on traffic", bake+canaryBound, func(s *status.Status) bool {
			leaked = leaked || hasHTTPFilter(ctx, t, st, envoyfilter.Buffer)
			return phase(doc, canary.RolledBack, status.RolledBack)(s)
		})
		took := time.Since(edited)
		r := s.Canary
		if leaked || l.Count(st.name, 413) > 0 {
			t.Errorf("the other gateway had the change: filter seen %v, %d answers 413", leaked, l.Count(st.name, 413))
		}
		if !strings.Contains(r.Message, "the canaries broke traffic: local replies") {
			t.Errorf("message %q", r.Message)
		}
		// A request in flight when a baseline is read can count as one
		// local reply: the stable side's answers are counted exactly by
		// the load (no 413, above).
		if tr := r.Traffic; tr == nil || !tr.Failed || tr.Canary.LocalReplies < tr.Canary.Requests/3 || tr.Stable.LocalReplies > 2 || tr.Stable.Requests == 0 {
			t.Errorf("traffic figures %+v", r.Traffic)
		}
		if l.Count(cn.name, 413) == 0 {
			t.Error("the canary never answered 413: the change never reached it")
		}
		if !hasEventOf(ctx, corev1.EventTypeWarning, "RolledBack", "local replies") {
			t.Error("no RolledBack Event with the figures")
		}
		if took > bake+canaryBound {
			t.Errorf("took %v", took)
		}
		t.Logf("rolled back %v after the edit (bake time %v): %s", took.Round(time.Millisecond), bake, r.Message)
		t.Logf("$ globalconfig status\n%s", statusText(t))
		t.Logf("answers: canary %d×200 %d×413, other %d×200 %d×413", l.Count(cn.name, 200), l.Count(cn.name, 413), l.Count(st.name, 200), l.Count(st.name, 413))
		if !harness.Eventually(ctx, canaryBound, func() bool { return !hasHTTPFilter(ctx, t, cn, envoyfilter.Buffer) }) {
			t.Error("the canary kept the change")
		}
	})

	t.Run("a harmless change under the same traffic is promoted", func(t *testing.T) {
		l.Reset()
		doc := base + "requestBody:\n  maxSize: 1Mi\n"
		edited := time.Now()
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the promotion", bake+canaryBound, phase(doc, canary.Promoted, status.Applied))
		r := s.Canary
		if tr := r.Traffic; tr == nil || tr.Failed || tr.Insufficient || tr.Canary.Requests < 40 {
			t.Errorf("traffic figures %+v", r.Traffic)
		}
		if !strings.Contains(r.Message, "traffic: 5xx responses") {
			t.Errorf("message %q", r.Message)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return hasHTTPFilter(ctx, t, st, envoyfilter.Buffer) }) {
			t.Error("the other gateway never got the promoted change")
		}
		if n := l.Count(st.name, 413) + l.Count(cn.name, 413); n > 0 {
			t.Errorf("%d answers 413", n)
		}
		t.Logf("promoted %v after the edit (bake time %v): %s", time.Since(edited).Round(time.Millisecond), bake, r.Message)
	})
}
