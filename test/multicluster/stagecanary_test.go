package multicluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// canaryTwin starts, in s's cluster, a second gateway of the same Envoy
// labelled globalconfig.io/canary=true, with its own Gateway object,
// VirtualService and loopback address (ip): the canary beside s's main
// gateway (labelled false). It is stopped and its objects removed when t
// ends.
func canaryTwin(ctx context.Context, t *testing.T, s *site, nodeIP, ip string) *site {
	t.Helper()
	name := s.GatewayName + "-canary"
	twin := &site{Cluster: s.Cluster, Istiod: s.Istiod, GatewayName: name, IP: ip}
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"gateway": name},
			Servers:  []*networkingv1.Server{{Port: &networkingv1.Port{Number: httpPort, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}},
		},
	}
	if _, err := s.Istio.NetworkingV1().Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster %s: create gateway %s: %v", s.Name, name, err)
	}
	vs := twin.virtualService(s.Name)
	vs.Name = "to-backend-canary"
	if _, err := s.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster %s: create virtual service: %v", s.Name, err)
	}
	lo, err := harness.LoopbackListeners("loopback-"+name, map[string]string{"gateway": name}, ip, httpPort)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, lo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if twin.Gateway != nil {
			twin.Gateway.Kill()
		}
		_ = s.Istio.NetworkingV1().Gateways(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = s.Istio.NetworkingV1().VirtualServices(ns).Delete(ctx, vs.Name, metav1.DeleteOptions{})
		_ = s.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(ctx, lo.Metadata.Name, metav1.DeleteOptions{})
	})
	labels := map[string]string{"istio": "ingressgateway", "gateway": name, canary.DefaultLabel: "true"}
	twin.Gateway, err = s.StartEnvoyGateway(ctx, s.Istiod, harness.GatewayOptions{
		Name: name, Binary: s.Gateway.Binary, IP: nodeIP, Labels: labels, ClusterID: s.Name,
		Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
	})
	if err != nil {
		t.Fatalf("canary gateway of cluster %s: %v", s.Name, err)
	}
	if err := twin.waitServing(ctx); err != nil {
		t.Fatal(err)
	}
	return twin
}

// rollout.clusters [[a], [b]] with strategy Canary: an edit reaches a's
// canary gateway first, then a's main gateway (after a's canary baked),
// then b's canary (after a's stage passed), then b's main gateway; asserted
// at the four gateways' own config dumps, the status saying each part.
func TestStagesWithCanaries(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	twinA := canaryTwin(ctx, t, siteA, "10.1.21.2", "127.0.0.23")
	twinB := canaryTwin(ctx, t, siteB, "10.1.22.2", "127.0.0.24")
	addMember(ctx, t, siteB, harness.ControllerUser)
	const bake = 10 * time.Second
	base := fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n  clusters: [[a], [b]]\n  minSuccessTime: 5s\n  progressDeadline: 2m\ngzip:\n  minContentLength: 100\n", bake)
	putConfig(ctx, t, base)
	runController(t, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set, paired, in both clusters", func(st *status.Status) bool {
		r := st.ClusterRollout
		return st.State == status.Applied && onlyGzip(st) && holds(st, "a", "b") && syncedIn(st, "a", "b") && st.Rollout.Selected == 4 && (r == nil || r.Phase == canary.Complete)
	})
	gateways := []*site{twinA, siteA, twinB, siteB}
	names := []string{"a's canary", "a's main gateway", "b's canary", "b's main gateway"}
	for i, g := range gateways {
		if has, err := g.hasHTTPFilter(ctx, rateLimitFilter); err != nil || has {
			t.Fatalf("%s has the rate limit filter before the edit (%v)", names[i], err)
		}
	}

	putConfig(ctx, t, base+limitOf3)
	// Every 200 ms, bounded: when each gateway first runs the change, and
	// what the status said then.
	start := time.Now()
	got := make([]time.Duration, len(gateways))
	var parts []string
	seen := map[string]bool{} // the parts the status showed: "0 Canaries", …
	deadline := start.Add(4 * time.Minute)
	for time.Now().Before(deadline) && got[len(got)-1] == 0 {
		if st, err := siteA.Status(ctx); err == nil && st.ClusterRollout != nil && st.ClusterRollout.Phase == canary.Progressing {
			seen[fmt.Sprintf("%d %s", st.ClusterRollout.Stage, st.ClusterRollout.StagePhase)] = true
		}
		for i, g := range gateways {
			if got[i] != 0 {
				continue
			}
			has, err := g.hasHTTPFilter(ctx, rateLimitFilter)
			if err != nil {
				t.Fatal(err)
			}
			if has {
				got[i] = time.Since(start)
				// Those after it in the order must not have it yet.
				for j := i + 1; j < len(gateways); j++ {
					if later, _ := gateways[j].hasHTTPFilter(ctx, rateLimitFilter); later {
						t.Errorf("%s runs the change when %s first does: the order is %v", names[j], names[i], names)
					}
				}
				if st, err := siteA.Status(ctx); err == nil && st.ClusterRollout != nil {
					parts = append(parts, fmt.Sprintf("%s at %s: stage %d %s", names[i], got[i].Round(100*time.Millisecond), st.ClusterRollout.Stage, st.ClusterRollout.StagePhase))
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%v", parts)
	for i := range gateways {
		if got[i] == 0 {
			st, _ := siteA.Status(ctx)
			t.Fatalf("%s never ran the change within 4 min; status:\n%s", names[i], describe(st))
		}
		if i > 0 && got[i] < got[i-1] {
			t.Errorf("%s ran the change at %s, before %s at %s", names[i], got[i], names[i-1], got[i-1])
		}
	}
	for _, part := range []string{"0 Canaries", "0 Whole", "1 Canaries"} {
		if !seen[part] {
			t.Errorf("the status never showed stage and part %q (saw %v)", part, seen)
		}
	}
	// Each stage's main gateway waits for its canary's bake.
	for _, i := range []int{1, 3} {
		if d := got[i] - got[i-1]; d < bake-time.Second {
			t.Errorf("%s ran the change %s after %s, less than bakeTime %s", names[i], d, names[i-1], bake)
		}
	}
	st := waitStatus(ctx, t, "the rollout complete", func(st *status.Status) bool {
		r := st.ClusterRollout
		return r != nil && r.Phase == canary.Complete && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	if r := st.ClusterRollout; r.Label != canary.DefaultLabel || len(r.Failed) != 0 {
		t.Errorf("clusterRollout %+v", r)
	}
	for _, s := range []*site{siteA, siteB} {
		if n := rejects(ctx, t, s, 6); n < 3 {
			t.Errorf("the main gateway of cluster %s answered 429 to %d of 6 requests, want at least 3 past its limit of 3", s.Name, n)
		}
	}
}

// rollout.clusters [[a], [b]] with strategy Canary: a change a's canary
// gateway NACKs (a hand-written EnvoyFilter that only breaks beside the
// rate limit filter) is rolled back at a's canary; a's main gateway never
// runs it, and b is never written to.
func TestStageCanaryNACKStopsTheRollout(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	twinA := canaryTwin(ctx, t, siteA, "10.1.21.2", "127.0.0.23")
	canaryTwin(ctx, t, siteB, "10.1.22.2", "127.0.0.24")
	addMember(ctx, t, siteB, harness.ControllerUser)
	base := "rollout:\n  strategy: Canary\n  bakeTime: 10s\n  clusters: [[a], [b]]\n  progressDeadline: 2m\ngzip:\n  minContentLength: 200\n"
	putConfig(ctx, t, base)
	runController(t, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set, paired, in both clusters", func(st *status.Status) bool {
		r := st.ClusterRollout
		return st.State == status.Applied && onlyGzip(st) && holds(st, "a", "b") && syncedIn(st, "a", "b") && st.Rollout.Selected == 4 && (r == nil || r.Phase == canary.Complete)
	})
	poisonA(ctx, t)
	stop := watchManaged(ctx, t, siteB)
	putConfig(ctx, t, base+limitOf3)
	var st *status.Status
	mainRan := false
	if !harness.Eventually(ctx, 2*time.Minute, func() bool {
		if has, err := siteA.hasHTTPFilter(ctx, rateLimitFilter); err == nil && has {
			mainRan = true
		}
		var err error
		st, err = siteA.Status(ctx)
		return err == nil && st.State == status.RolledBack && st.ClusterRollout != nil && st.ClusterRollout.Phase == canary.ClustersRolledBack
	}) {
		t.Fatalf("not rolled back within 2 min; last status:\n%s", describe(st))
	}
	if mainRan {
		t.Error("a's main gateway ran the change its canary refused")
	}
	r := st.ClusterRollout
	if len(r.Failed) != 1 || r.Failed[0].Cluster != "a" || !strings.Contains(r.Failed[0].Reason, "canary gw-"+twinA.GatewayName) || !strings.Contains(r.Failed[0].Reason, "cache_time") {
		t.Errorf("failed clusters %+v, want a, its canary named with Envoy's words", r.Failed)
	}
	if !strings.Contains(r.Why, "never given the change: b") {
		t.Errorf("why %q", r.Why)
	}
	waitStatus(ctx, t, "a holds the previous set again", func(st *status.Status) bool {
		a, _ := entry(st, "a")
		return a.Reachable && a.Set == r.From
	})
	waitFilter(ctx, t, twinA, rateLimitFilter, false)
	if seen := stop(); len(seen) > 0 {
		t.Errorf("cluster b received EnvoyFilters of the change: %v", seen)
	}
	for _, s := range sites {
		if has, err := s.hasHTTPFilter(ctx, rateLimitFilter); err != nil || has {
			t.Errorf("the main gateway of cluster %s has the rate limit filter: %v %v", s.Name, has, err)
		}
	}
}

// onlyGzip says the applied set is the scenarios' first document's: gzip
// alone.
func onlyGzip(st *status.Status) bool {
	return st.Applied != nil && len(st.Applied.EnvoyFilters) == 1 && st.Applied.EnvoyFilters[0].Item == "gzip"
}
