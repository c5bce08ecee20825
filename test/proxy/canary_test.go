package proxy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The canary rollout, judged at two real Envoy gateways: the oldest is
// labelled globalconfig.io/canary=true, the newest =false (gw.labels).
// Each change is checked by traffic or by the gateways' own config dumps,
// at both gateways, while the status says where the rollout stands.

// canaryBound is how long a phase may take beyond its bake time: istiod's
// debounce, the tracker's 1 s poll and a status write, several times over.
const canaryBound = 30 * time.Second

// gzipAbove is a gzip section compressing text/plain bodies of at least n
// bytes.
func gzipAbove(n int) string {
	return fmt.Sprintf("gzip:\n  minContentLength: %d\n  contentType: [text/plain]\n", n)
}

// compresses tells whether g gzips a text body of n bytes.
func compresses(ctx context.Context, t *testing.T, g *gw, n int) bool {
	t.Helper()
	r := mustGet(ctx, t, g.url(fmt.Sprintf("/text?n=%d", n)), map[string]string{"Accept-Encoding": "gzip"})
	if r.status != 200 {
		t.Fatalf("%s: status %d", g.name, r.status)
	}
	return r.header.Get("Content-Encoding") == "gzip"
}

// hasHTTPFilter tells whether g's active listeners carry the HTTP filter
// name, by its own config dump.
func hasHTTPFilter(ctx context.Context, t *testing.T, g *gw, name string) bool {
	t.Helper()
	body, err := g.Get(ctx, "/config_dump?resource=dynamic_listeners")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(body, []byte(`"name": "`+name+`"`)) || bytes.Contains(body, []byte(`"name":"`+name+`"`))
}

// waitStatus waits until the status satisfies cond (for tests and
// benchmarks).
func waitStatus(ctx context.Context, t testing.TB, what string, bound time.Duration, cond func(*status.Status) bool) *status.Status {
	t.Helper()
	var last *status.Status
	var lastErr error
	if !harness.Eventually(ctx, bound, func() bool {
		last, lastErr = cluster.Status(ctx)
		return lastErr == nil && cond(last)
	}) {
		if last != nil {
			t.Fatalf("%s: not within %v; state %s, message %q, canary %+v, rollout %s (%v)", what, bound, last.State, last.Message, last.Canary, last.RolloutSummary, lastErr)
		}
		t.Fatalf("%s: not within %v: %v", what, bound, lastErr)
	}
	return last
}

// phase is a status condition: the canary record of the document doc is
// in phase p, and the status's state is state.
func phase(doc string, p canary.Phase, state status.State) func(*status.Status) bool {
	hash := decide.DocumentHash(map[string]string{document.DataKey: doc})
	return func(st *status.Status) bool {
		return st.Canary != nil && st.Canary.Document == hash && st.Canary.Phase == p && st.State == state
	}
}

// hasEventOf reports whether the global ConfigMap has an Event of type and
// reason whose message contains part.
func hasEventOf(ctx context.Context, eventType, reason, part string) bool {
	list, err := cluster.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Reason == reason && e.Type == eventType && e.InvolvedObject.Name == harness.ConfigMapName && strings.Contains(e.Message, part) {
			return true
		}
	}
	return false
}

// poisonAfterRateLimit is a hand-written EnvoyFilter that puts, right
// after the local rate limit filter, a health check Envoy refuses at load
// (healthCheckPatch). It matches nothing until a document adds the rate
// limit filter: then every gateway that gets the filter NACKs.
func poisonAfterRateLimit(t testing.TB) *envoyfilter.Object {
	t.Helper()
	o, err := harness.PoisonAfterRateLimit()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestCanaryRollout(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	cn, st := oldest, newest // the canary and the other gateway
	canaryName := "gw-" + cn.name + "." + ns
	const bake = 3 * time.Second
	policy := fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n", bake)
	base := policy + "downstream:\n  idleTimeout: 180\n"
	putConfig(ctx, t, base)
	debug := "--istiod-debug-url=http://" + istiod.HTTPAddr
	ctl := startController(ctx, t, debug, "--rollout-timeout=15s")
	// Nothing was applied before: the first set goes out directly.
	waitStatus(ctx, t, "the first set applied directly", canaryBound, func(s *status.Status) bool {
		return s.State == status.Applied && s.Canary == nil && s.Rollout != nil && s.Rollout.Synced == 2
	})

	t.Run("a change the canary took is promoted after the bake time", func(t *testing.T) {
		doc := base + gzipAbove(100)
		edited := time.Now()
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
		if r := s.Canary; r.Phase != canary.InCanary || strings.Join(r.Items, ",") != "gzip" || r.BakeTime != bake.String() || r.Label != canary.DefaultLabel {
			t.Errorf("canary record %+v", r)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, cn, 20000) }) {
			t.Fatal("the canary never compressed")
		}
		stableCompressed := compresses(ctx, t, st, 20000)
		if now, err := cluster.Status(ctx); err != nil || now.State != status.Canary {
			t.Fatalf("the phase ended before the other gateway was checked: %v %v", now, err)
		}
		if stableCompressed {
			t.Fatal("the other gateway compressed during the canary phase")
		}
		s = waitStatus(ctx, t, "the promotion", bake+canaryBound, phase(doc, canary.Promoted, status.Applied))
		promoted := time.Since(edited)
		if s.State != status.Applied || s.Canary.By != "" || !strings.Contains(s.Canary.Message, "1 of 1 canaries ACKed the canary copy") {
			t.Errorf("after the bake time: state %s, canary %+v", s.State, s.Canary)
		}
		// The canary's ACK counted because istiod's configuration for it
		// held the canary copy (its marker).
		if len(s.Canary.Canaries) != 1 || s.Canary.Canaries[0].Name != canaryName || !s.Canary.Canaries[0].ACKed() {
			t.Errorf("canaries %+v, want %s Synced with the canary copy", s.Canary.Canaries, canaryName)
		}
		if promoted < bake {
			t.Errorf("promoted %v after the edit, before the bake time %v", promoted, bake)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, st, 20000) }) {
			t.Fatal("the other gateway never compressed after the promotion")
		}
		t.Logf("promoted %v after the edit (bake time %v); the other gateway compressed %v after the edit", promoted.Round(time.Millisecond), bake, time.Since(edited).Round(time.Millisecond))
		if !hasEventOf(ctx, corev1.EventTypeNormal, "CanaryStarted", "gzip") || !hasEventOf(ctx, corev1.EventTypeNormal, "Promoted", "gzip") {
			t.Error("no CanaryStarted and Promoted Events")
		}
	})

	t.Run("a change the canary NACKs never reaches the other gateway", func(t *testing.T) {
		poison := poisonAfterRateLimit(t)
		if err := cluster.Apply(ctx, poison); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteObject(context.Background(), t, poison) })
		doc := base + gzipAbove(100) + "localRateLimit:\n  maxTokens: 1000\n  tokensPerFill: 1000\n  fillInterval: 1s\n"
		putConfig(ctx, t, doc)
		var leaked bool
		rolledBack := phase(doc, canary.RolledBack, status.RolledBack)
		s := waitStatus(ctx, t, "the roll back", canaryBound, func(s *status.Status) bool {
			leaked = leaked || hasHTTPFilter(ctx, t, st, envoyfilter.LocalRateLimit)
			return rolledBack(s)
		})
		if leaked {
			t.Error("the other gateway got the rate limit filter")
		}
		r := s.Canary
		if r.Phase != canary.RolledBack || !strings.Contains(r.Message, "canary "+canaryName+" rejected the change") || !strings.Contains(r.Message, "cache_time_ms must not be set") {
			t.Errorf("canary record %+v", r)
		}
		if len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Message, "rolled back: canary "+canaryName) {
			t.Errorf("errors %+v: the document should read as rejected", s.Errors)
		}
		t.Logf("rolled back: %s", r.Message)
		// Both gateways end on the set before the change: no rate limit,
		// gzip still on; the canary ACKs it.
		if !harness.Eventually(ctx, canaryBound, func() bool { return !hasHTTPFilter(ctx, t, cn, envoyfilter.LocalRateLimit) }) {
			t.Fatal("the canary kept the rejected change")
		}
		for _, g := range gateways {
			if hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) || !compresses(ctx, t, g, 20000) {
				t.Errorf("%s is not on the previous set", g.name)
			}
		}
		if !hasEventOf(ctx, corev1.EventTypeWarning, "RolledBack", "cache_time_ms must not be set") {
			t.Error("no RolledBack Event quoting Envoy")
		}
		m, err := ctl.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m[`globalconfig_canary_rollouts_total{phase="RolledBack"}`] != 1 || m[`globalconfig_canary_rollouts_total{phase="Promoted"}`] != 1 {
			t.Errorf("rollout metrics: %v rolled back, %v promoted", m[`globalconfig_canary_rollouts_total{phase="RolledBack"}`], m[`globalconfig_canary_rollouts_total{phase="Promoted"}`])
		}
		// The document stays rejected: later syncs don't try it again.
		time.Sleep(2 * bake)
		if s, err := cluster.Status(ctx); err != nil || s.State != status.RolledBack || hasHTTPFilter(ctx, t, st, envoyfilter.LocalRateLimit) {
			t.Errorf("after the roll back: %v %v", s, err)
		}
		var out, errs bytes.Buffer
		if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, cli.Env{Stdout: &out, Stderr: &errs}); code == cli.ExitOK {
			t.Logf("$ globalconfig status\n%s", out.String())
		}
		for _, want := range []string{"RolledBack", canaryName, "cache_time_ms must not be set"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("globalconfig status lacks %q", want)
			}
		}
	})

	t.Run("a canary that never answers rolls back after the bake time", func(t *testing.T) {
		resume := stopped(t, cn)
		edited := time.Now()
		doc := base + gzipAbove(200)
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the roll back", bake+canaryBound, phase(doc, canary.RolledBack, status.RolledBack))
		if took := time.Since(edited); took < bake {
			t.Errorf("rolled back %v after the edit, before the bake time", took)
		}
		want := fmt.Sprintf("0 of 1 canaries ACKed the canary copy within the bake time %s, 1 needed; not ACKed: %s", bake, canaryName)
		if s.Canary.Message != want {
			t.Errorf("message %q, want %q", s.Canary.Message, want)
		}
		resume()
		// Woken up, the canary takes what istiod sent meanwhile and ends on
		// the set before the change, as the other gateway.
		if !harness.Eventually(ctx, canaryBound, func() bool {
			return compresses(ctx, t, cn, 150) && compresses(ctx, t, st, 150)
		}) {
			t.Error("the gateways are not both on the previous set (minContentLength 100)")
		}
	})

	t.Run("an operator promotes or aborts; the controller's ServiceAccount can't", func(t *testing.T) {
		longPolicy := "rollout:\n  strategy: Canary\n  bakeTime: 10m\n"
		rollout := func(kubeconfig, action string) (int, string) {
			var out, errs bytes.Buffer
			code := cli.Main([]string{"rollout", action, "--kubeconfig", kubeconfig}, cli.Env{Stdout: &out, Stderr: &errs})
			return code, out.String() + errs.String()
		}
		doc := longPolicy + "downstream:\n  idleTimeout: 180\n" + gzipAbove(300)
		putConfig(ctx, t, doc)
		waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
		if code, out := rollout(cluster.ControllerKubeconfig, "promote"); code != cli.ExitAPI || !strings.Contains(out, "forbidden") {
			t.Errorf("the controller's ServiceAccount promoted: exit %d: %s", code, out)
		}
		if code, out := rollout(cluster.OperatorKubeconfig, "promote"); code != cli.ExitOK {
			t.Fatalf("the operator could not promote: exit %d: %s", code, out)
		}
		s := waitStatus(ctx, t, "the operator's promotion", canaryBound, phase(doc, canary.Promoted, status.Applied))
		if s.Canary.By != "operator" {
			t.Errorf("promoted by %q", s.Canary.By)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, st, 250) == false && compresses(ctx, t, st, 350) }) {
			t.Error("the other gateway never took the promoted change")
		}
		doc = longPolicy + "downstream:\n  idleTimeout: 180\n" + gzipAbove(400)
		putConfig(ctx, t, doc)
		waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
		if code, out := rollout(cluster.OperatorKubeconfig, "abort"); code != cli.ExitOK {
			t.Fatalf("the operator could not abort: exit %d: %s", code, out)
		}
		s = waitStatus(ctx, t, "the operator's abort", canaryBound, phase(doc, canary.RolledBack, status.RolledBack))
		if s.Canary.By != "operator" || !strings.Contains(s.Canary.Message, "aborted by an operator") {
			t.Errorf("canary record %+v", s.Canary)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, cn, 350) && compresses(ctx, t, st, 350) }) {
			t.Error("the gateways are not both on the previous set (minContentLength 300)")
		}
		if code, out := rollout(cluster.OperatorKubeconfig, "promote"); code != cli.ExitNoRollout {
			t.Errorf("promote after the abort: exit %d: %s", code, out)
		}
	})

	t.Run("a label no proxy carries holds the change, never delivered", func(t *testing.T) {
		doc := "rollout:\n  strategy: Canary\n  canaryLabel: example.com/nobody\n  bakeTime: 10m\ndownstream:\n  idleTimeout: 180\n" + gzipAbove(500)
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the change held", canaryBound, phase(doc, canary.Held, status.Held))
		want := fmt.Sprintf("proxies gw-%s.%s, gw-%s.%s carry no example.com/nobody label", oldest.name, ns, newest.name, ns)
		if !strings.Contains(s.Canary.Waiting, want) {
			t.Errorf("waiting %q, want %q", s.Canary.Waiting, want)
		}
		list, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).List(ctx, metav1.ListOptions{LabelSelector: "example.com/nobody"})
		if err != nil || len(list.Items) != 0 {
			t.Errorf("EnvoyFilters paired by the label nobody carries exist: %v %v", list, err)
		}
		for _, g := range gateways {
			if !compresses(ctx, t, g, 350) {
				t.Errorf("%s is not on the previous set (minContentLength 300)", g.name)
			}
		}
	})

	t.Run("a controller restart in the middle of a canary phase resumes it", func(t *testing.T) {
		const longBake = 8 * time.Second
		doc := fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\ndownstream:\n  idleTimeout: 180\n", longBake) + gzipAbove(1000)
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
		started := s.Canary.Started
		if !harness.Eventually(ctx, canaryBound, func() bool { return !compresses(ctx, t, cn, 500) }) {
			t.Fatal("the canary never took minContentLength 1000")
		}
		if err := ctl.Stop(5 * time.Second); err != nil {
			t.Logf("stop: %v", err)
		}
		restarted := time.Now()
		ctl = startController(ctx, t, debug, "--rollout-timeout=15s")
		var leaked bool
		promoted := phase(doc, canary.Promoted, status.Applied)
		s = waitStatus(ctx, t, "the promotion after the restart", longBake+canaryBound, func(s *status.Status) bool {
			leaked = leaked || !compresses(ctx, t, st, 500) && s.State == status.Canary
			return promoted(s)
		})
		if leaked {
			t.Error("the other gateway got the change before the promotion")
		}
		if !s.Canary.Started.Equal(started) {
			t.Errorf("the phase started at %v, then at %v: it was started again, not resumed", started, s.Canary.Started)
		}
		// The bake time counts from the canaries' delivery, across terms:
		// a restart neither shortens nor restarts it.
		if s.Canary.Delivered == nil || s.Canary.Ended.Sub(*s.Canary.Delivered) < longBake {
			t.Errorf("promoted at %v, delivered at %v: before the bake time %v", s.Canary.Ended, s.Canary.Delivered, longBake)
		}
		t.Logf("promoted %v after the restart, %v after the canaries got it", time.Since(restarted).Round(time.Millisecond), s.Canary.Ended.Sub(*s.Canary.Delivered).Round(time.Millisecond))
		if !harness.Eventually(ctx, canaryBound, func() bool { return !compresses(ctx, t, st, 500) }) {
			t.Error("the other gateway never took the promoted change")
		}
	})
}

// The tracker's Fleet reads the proxies' labels from the real istiod's
// /debug/adsz: the labels the gateways connected with.
func TestFleetFromIstiod(t *testing.T) {
	ctx := setup(t)
	tr := rollout.NewTracker(rollout.Static{"http://" + istiod.HTTPAddr}, &rollout.Client{}, 0)
	gateway := rollout.ScopeOf(rendered(t, "gzip: {}\n"), ns)
	f, err := tr.Fleet(ctx, canary.DefaultLabel, gateway)
	if err != nil {
		t.Fatal(err)
	}
	if want := "gw-" + oldest.name + "." + ns; strings.Join(f.Canaries, ",") != want || len(f.Unlabelled) != 0 {
		t.Errorf("fleet %+v, want the canary %s and nothing unlabelled", f, want)
	}
	if f, err = tr.Fleet(ctx, "example.com/nobody", gateway); err != nil || len(f.Canaries) != 0 || len(f.Unlabelled) != 2 {
		t.Errorf("a label nobody carries: %+v %v", f, err)
	}
	sidecars := rollout.ScopeOf(rendered(t, "target:\n  context: SIDECAR_INBOUND\ngzip: {}\n"), ns)
	if f, err = tr.Fleet(ctx, "example.com/nobody", sidecars); err != nil || len(f.Canaries)+len(f.Unlabelled) != 0 {
		t.Errorf("a set for sidecars counts the gateways: %+v %v", f, err)
	}
}

// A gateway that stops is reported silent, with when it was last seen,
// and a running gateway pod whose proxy never connects is reported as
// such, with when its pod started: in the status and by `globalconfig
// status`. A real Envoy, killed; a Pod object no Envoy stands behind.
func TestSilentAndUnconnectedGateways(t *testing.T) {
	ctx := setup(t)
	prune(ctx, t, nil)
	putConfig(ctx, t, "downstream:\n  idleTimeout: 180\n")
	name := "gw-short-lived." + ns
	g, err := cluster.StartEnvoyGateway(ctx, istiod, harness.GatewayOptions{
		Name: "short-lived", Binary: newest.Binary, IP: "10.1.3.9",
		Labels:   map[string]string{"istio": "ingressgateway", canary.DefaultLabel: "false"},
		Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Kill)
	never := neverConnectingPod(ctx, t)
	startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr, "--rollout-connect-grace=1s")
	st := waitRollout(ctx, t, "three gateways synced, one pod never connected", func(st *rollout.Status) bool {
		return st.Proxy(name).State == rollout.Synced && st.Synced == 3 && len(st.Unconnected) == 1
	})
	if u := st.Unconnected[0]; u.Name != never.Name+"."+ns || u.Type != "gateway" || !u.Since.Equal(never.Status.StartTime.UTC()) {
		t.Errorf("unconnected %+v, want the pod %s started %v", u, never.Name, never.Status.StartTime)
	}
	killed := time.Now()
	g.Kill()
	st = waitRollout(ctx, t, "the killed gateway silent", func(st *rollout.Status) bool { return len(st.Silent) == 1 })
	s := st.Silent[0]
	if s.Name != name || s.Type != "gateway" || s.LastSeen.After(killed) || killed.Sub(s.LastSeen) > rolloutBound {
		t.Errorf("silent %+v, killed at %v", s, killed)
	}
	if st.Selected != 2 || st.Proxy(name).Name != "" || len(st.Unconnected) != 1 {
		t.Errorf("the killed gateway is still counted, or the pod no longer listed: %+v", st)
	}
	var out, errs bytes.Buffer
	if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, cli.Env{Stdout: &out, Stderr: &errs}); code != cli.ExitOK {
		t.Fatalf("globalconfig status: exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"silent: gateway " + name + ", no istiod reports it since ", "never connected: gateway " + never.Name + "." + ns + ", its pod running since ",
		"; 1 silent; 1 never connected"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("globalconfig status lacks %q:\n%s", want, out.String())
		}
	}
}

// neverConnectingPod is a running gateway pod, as Istio's gateway
// template injects one, with no Envoy behind it.
func neverConnectingPod(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	pods := cluster.Admin.CoreV1().Pods(ns)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "never-connects", Labels: map[string]string{rollout.LabelCanonicalName: "never-connects", "istio": "ingressgateway"},
			Annotations: map[string]string{rollout.AnnotationTemplates: "gateway"}},
		Spec: corev1.PodSpec{ServiceAccountName: "globalconfig", Containers: []corev1.Container{{Name: "istio-proxy", Image: "auto"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started}
	if pod, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod
}
