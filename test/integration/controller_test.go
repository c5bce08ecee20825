package integration

import (
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

const docV1 = `
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
gzip: {}
brotli: {}
`

// docV1 with one item changed.
const docV2 = `
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
gzip:
  chunkSize: 8192
brotli: {}
`

// docV2 again, reformatted: comments, key order, a default spelled out.
const docV2Reformatted = `
# reformatted; means the same
brotli: {}
gzip: {chunkSize: 8192}
tracing:
  zipkin: {port: "9411", service: zipkin.istio-system.svc.cluster.local}
  timeout: 500ms
  enable: true
`

const docInvalid = `
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
gzip:
  chunkSize: 100
brotli: {}
gizp: {}
`

func TestLifecycle(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	ctl := f.start("controller")

	t.Run("first apply creates one EnvoyFilter per item", func(t *testing.T) {
		f.waitLive(f.desired(docV1), 30*time.Second)
		m := f.metrics(ctl)
		if got := m[`globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`]; got != 3 {
			t.Errorf("%v EnvoyFilter applies for the first apply, want 3", got)
		}
		// The status is written right after the EnvoyFilters.
		f.waitStatus(func(st *status.Status) bool {
			return st.State == status.Applied && len(st.Errors) == 0 && st.Applied != nil && st.Applied.Hash != "" &&
				slices.Contains(st.Applied.EnvoyFilters, status.EnvoyFilter{Namespace: "istio-system", Name: "globalconfig-gzip", Item: "gzip"})
		})
		// The metrics are set before the status is written.
		m = f.metrics(ctl)
		if m["globalconfig_config_valid"] != 1 || m["globalconfig_managed_envoyfilters"] != 3 {
			t.Errorf("metrics: valid %v managed %v", m["globalconfig_config_valid"], m["globalconfig_managed_envoyfilters"])
		}
	})

	t.Run("a one-item change writes exactly that EnvoyFilter", func(t *testing.T) {
		_, before := f.live()
		applies := f.metrics(ctl)[`globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`]
		f.put(docV2)
		f.waitLive(f.desired(docV2), 10*time.Second)
		_, after := f.live()
		for name, rv := range after {
			changed := before[name] != rv
			if changed != (name == "istio-system/globalconfig-gzip") {
				t.Errorf("%s: resourceVersion %s → %s", name, before[name], rv)
			}
		}
		if got := f.metrics(ctl)[`globalconfig_api_writes_total{resource="envoyfilters",verb="apply"}`] - applies; got != 1 {
			t.Errorf("%v EnvoyFilter applies for a one-item change, want 1", got)
		}
	})

	t.Run("a no-op edit writes nothing", func(t *testing.T) {
		_, before := f.live()
		statusRV := f.statusVersion()
		m := f.metrics(ctl)
		n, w := harness.Sum(m, "globalconfig_reconcile_total"), writes(m)
		f.put(docV2Reformatted)
		f.waitReconciledPast(ctl, n)
		_, after := f.live()
		if !maps.Equal(before, after) {
			t.Errorf("resourceVersions changed on a no-op edit:\n%v\n%v", before, after)
		}
		if got := writes(f.metrics(ctl)) - w; got != 0 {
			t.Errorf("%v API writes on a no-op edit, want 0", got)
		}
		if f.statusVersion() != statusRV {
			t.Error("the status ConfigMap was rewritten on a no-op edit")
		}
	})

	t.Run("an invalid edit keeps the EnvoyFilters and says why", func(t *testing.T) {
		hashes, before := f.live()
		f.put(docInvalid)
		var events []string
		if !eventually(f, 10*time.Second, func() bool {
			events = nil
			for _, e := range f.events("InvalidConfig") {
				events = append(events, e.Message)
			}
			return len(events) > 0
		}) {
			t.Fatal("no InvalidConfig Warning Event")
		}
		for _, want := range []string{"gzip.chunkSize: must be between 4096 and 65536, got 100", `gizp: unknown item; did you mean "gzip"?`} {
			if !contains(events[0], want) {
				t.Errorf("event %q lacks %q", events[0], want)
			}
		}
		f.waitStatus(func(st *status.Status) bool {
			return st.State == status.Invalid && contains(problems(st), "gzip.chunkSize") && contains(problems(st), "gizp")
		})
		if m := f.metrics(ctl); m["globalconfig_config_valid"] != 0 {
			t.Error("config_valid gauge is not 0")
		}
		h2, after := f.live()
		if !maps.Equal(before, after) || !maps.Equal(hashes, h2) {
			t.Errorf("EnvoyFilters changed on an invalid edit")
		}
	})

	t.Run("a removed item's EnvoyFilter is deleted", func(t *testing.T) {
		doc := strings.Replace(docV2, "brotli: {}\n", "", 1)
		f.put(doc)
		f.waitLive(f.desired(doc), 10*time.Second)
		f.waitStatus(func(st *status.Status) bool { return st.State == status.Applied && len(st.Errors) == 0 })
	})
}

func eventually(f *fixture, timeout time.Duration, cond func() bool) bool {
	return harness.Eventually(f.ctx, timeout, cond)
}

func TestDriftIsRestored(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	f.start("controller")
	want := f.desired(docV1)
	f.waitLive(want, 30*time.Second)
	// A filter deleted before the controller's cache showed its creation
	// is covered, deterministically, by pkg/controller's unit tests.
	efs := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns)
	start := time.Now()
	if err := efs.Delete(f.ctx, "globalconfig-gzip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitLive(want, 10*time.Second)
	t.Logf("deleted EnvoyFilter restored in %v", time.Since(start))

	start = time.Now()
	if _, err := efs.Patch(f.ctx, "globalconfig-tracing", types.MergePatchType, []byte(`{"spec":{"priority":99}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitLive(want, 10*time.Second)
	t.Logf("edited EnvoyFilter restored in %v", time.Since(start))
	ef, err := efs.Get(f.ctx, "globalconfig-tracing", metav1.GetOptions{})
	if err != nil || ef.Spec.GetPriority() == 99 {
		t.Errorf("edit not reverted: %v %v", ef.Spec.GetPriority(), err)
	}
}

func TestRestartWritesNothing(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	first := f.start("first")
	f.waitLive(f.desired(docV1), 30*time.Second)
	// Let the first controller settle its status write, then stop it.
	f.waitReconciledPast(first, 0)
	if err := first.Stop(10 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	_, before := f.live()
	statusRV := f.statusVersion()

	second := f.start("second")
	f.waitLeader(second, 30*time.Second)
	f.waitReconciledPast(second, 0)
	m := f.metrics(second)
	if w := writes(m); w != 0 {
		t.Errorf("%v API writes after a restart, want 0", w)
	}
	_, after := f.live()
	if !maps.Equal(before, after) || f.statusVersion() != statusRV {
		t.Error("objects were rewritten after a restart")
	}
}

func TestInvalidDocumentAtStartupDeletesNothing(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	first := f.start("first")
	f.waitLive(f.desired(docV1), 30*time.Second)
	if err := first.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, before := f.live()

	f.put(docInvalid)
	second := f.start("second")
	f.waitLeader(second, 30*time.Second)
	f.waitReconciledPast(second, 0)
	_, after := f.live()
	if !maps.Equal(before, after) {
		t.Errorf("EnvoyFilters changed when starting on an invalid document:\n%v\n%v", before, after)
	}
	if st := f.status(); st.State != status.Invalid || !contains(problems(st), "gzip.chunkSize") {
		t.Errorf("status: %+v", st)
	}
}

func TestDeletedConfigMap(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	ctl := f.start("keep")
	want := f.desired(docV1)
	f.waitLive(want, 30*time.Second)

	n := f.reconciles(ctl)
	if err := cluster.Admin.CoreV1().ConfigMaps(ns).Delete(f.ctx, cmName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitReconciledPast(ctl, n)
	if got, _ := f.live(); !maps.Equal(got, want) {
		t.Errorf("EnvoyFilters changed when the ConfigMap was deleted (default keeps them): %v", got)
	}
	if st := f.status(); st.State != status.ConfigMapDeleted || st.Applied == nil || st.Applied.Hash == "" {
		t.Errorf("status: %+v", st)
	}
	ctl.Kill()
	_ = cluster.Admin.CoordinationV1().Leases(ns).Delete(f.ctx, leaseName, metav1.DeleteOptions{})

	f.start("prune", "--prune-on-delete")
	f.waitLive(map[string]string{}, 30*time.Second)
}

func TestLeaderElectionFailover(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	a := f.start("replica-a")
	b := f.start("replica-b")
	f.waitLive(f.desired(docV1), 30*time.Second)

	var leader, follower = a, b
	if !eventually(f, 30*time.Second, func() bool {
		ma, errA := a.Metrics(f.ctx)
		mb, errB := b.Metrics(f.ctx)
		if errA != nil || errB != nil {
			return false
		}
		if ma["globalconfig_leader"]+mb["globalconfig_leader"] != 1 {
			return false
		}
		if mb["globalconfig_leader"] == 1 {
			leader, follower = b, a
		}
		return true
	}) {
		t.Fatal("not exactly one leader among two replicas")
	}
	if w := writes(f.metrics(follower)); w != 0 {
		t.Errorf("the follower wrote %v times", w)
	}
	if !follower.Ready(f.ctx) {
		t.Error("the follower is not ready (its caches should be warm)")
	}

	start := time.Now()
	_ = leader.Cmd.Process.Signal(syscall.SIGKILL)
	f.waitLeader(follower, 30*time.Second)
	t.Logf("failover after SIGKILL of the leader took %v", time.Since(start))
	f.put(docV2)
	f.waitLive(f.desired(docV2), 10*time.Second)
}

func TestAPIServerOutage(t *testing.T) {
	f := setup(t)
	f.put(docV1)
	ctl := f.start("controller")
	f.waitLive(f.desired(docV1), 30*time.Second)

	cluster.StopAPIServer()
	time.Sleep(20 * time.Second)
	if ctl.Exited() {
		t.Fatalf("the controller exited during the outage:\n%s", ctl.Log(4000))
	}
	if err := cluster.StartAPIServer(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.put(docV2)
	restarted := time.Now()
	// The informers wait out the outage instead of backing off, and the
	// lease is retaken on the next retry; make bench measures the time.
	f.waitLive(f.desired(docV2), 30*time.Second)
	t.Logf("converged %v after the API server came back", time.Since(restarted))
	if ctl.Exited() {
		t.Fatal("the controller exited")
	}
}
