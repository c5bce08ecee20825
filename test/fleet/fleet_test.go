package fleet_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/fleet"
	"github.com/globalconfig/globalconfig/test/harness"
)

// size reads an integer from the environment, or def.
func size(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// exampleWith is the full example document with the headers item's server
// name set to marker: a string every gateway's listeners carry once the
// set reached it.
func exampleWith(t testing.TB, marker string) string {
	t.Helper()
	doc, err := harness.ExampleDocument()
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(doc, "    name: edge\n", "    name: "+marker+"\n", 1)
	if out == doc {
		t.Fatal("the example sets no headers.server.name: edge")
	}
	// The gateways' own namespace, not the root one: an EnvoyFilter in
	// the root namespace makes istiod push every sidecar too.
	moved := strings.Replace(out, "  namespace: istio-system\n", "  namespace: "+gatewayNamespace+"\n", 1)
	if moved == out {
		t.Fatal("the example's target names no namespace: istio-system")
	}
	return moved
}

// startFleet connects gateways and sidecars to the suite's istiod and
// waits until each has its first listeners.
func startFleet(ctx context.Context, t testing.TB, gateways, sidecars int, canaryShare float64) *fleet.Fleet {
	t.Helper()
	f, err := fleet.Start(ctx, fleet.Options{Addr: istiod.GRPCAddr, Gateways: gateways, Sidecars: sidecars, Namespaces: 5,
		CanaryShare: canaryShare, Versions: []string{"1.31.0", "1.30.2"}, GatewayRoutes: gatewayRoutes, SidecarRoutes: sidecarRoutes, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if !harness.Eventually(ctx, 2*time.Minute, func() bool {
		for _, p := range f.Proxies {
			if f.Pushes(fleet.ListenerType, func(q *fleet.Proxy) bool { return q == p }) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every proxy got its listeners: %v", f.Err())
	}
	return f
}

// A fleet of gateways and sidecars: every gateway ACKs a set carrying the
// change, the tracker counts every one Synced, a change for gateways only
// pushes no sidecar, and the status stays small.
func TestFleet(t *testing.T) {
	ctx := setup(t)
	gws, scs := size("GLOBALCONFIG_FLEET_GATEWAYS", 60), size("GLOBALCONFIG_FLEET_SIDECARS", 60)
	f := startFleet(ctx, t, gws, scs, 0)
	arrived := runController(ctx, t, f, exampleWith(t, "edge-fleet-1"), "edge-fleet-1")
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	t.Logf("%d gateways took the example in %s (p50 %s)", len(arrived), arrived.Quantile(1), arrived.Quantile(0.5))

	// The tracker sees every gateway the set reaches Synced.
	st, err := cluster.WaitRollout(ctx, 2*time.Minute, func(r *rollout.Status) bool { return r.Synced == gws })
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	if st.NACKed != 0 || st.Pending != 0 {
		t.Errorf("rollout %+v", st)
	}

	// A change for gateways only: every gateway takes it, no sidecar is
	// pushed a listener.
	sidecarsBefore := f.Pushes(fleet.ListenerType, fleet.Sidecars)
	f.Watch("edge-fleet-2", fleet.Gateways)
	start := time.Now()
	must(t, cluster.PutConfig(ctx, exampleWith(t, "edge-fleet-2")))
	if _, err := f.Wait(wctx, "edge-fleet-2", start); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // istiod's debounce, and a push that would follow
	if after := f.Pushes(fleet.ListenerType, fleet.Sidecars); after != sidecarsBefore {
		t.Errorf("a gateway-only change pushed listeners to sidecars: %d → %d", sidecarsBefore, after)
	}

	// The status stays small.
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, status.ConfigMapName(harness.ConfigMapName), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range cm.Data {
		n += len(v)
	}
	if n > maxStatusBytes {
		t.Errorf("the status is %d bytes for %d proxies, over %d", n, gws+scs, maxStatusBytes)
	}
	if err := f.Err(); err != nil {
		t.Error(err)
	}
	fmt.Fprintf(os.Stderr, "fleet: status %d bytes for %d gateways and %d sidecars\n", n, gws, scs)
}

// runController puts doc, which carries marker, starts a controller
// tracking the fleet until the test ends (then leaves the cluster as it
// found it), and returns when every gateway took doc.
func runController(ctx context.Context, t *testing.T, f *fleet.Fleet, doc, marker string) fleet.Arrivals {
	t.Helper()
	must(t, cluster.PutConfig(ctx, doc))
	f.Watch(marker, fleet.Gateways)
	start := time.Now()
	// Cleanups run last first: the reset after the controller stopped.
	t.Cleanup(func() { must(t, resetCluster(context.Background())) })
	cluster.RunController(t, controlBin, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	arrived, err := f.Wait(wctx, marker, start)
	if err != nil {
		t.Fatal(err)
	}
	return arrived
}

// The route configurations the proxies subscribe to: the gateway's port 80
// server, the sidecars' outbound HTTP ports (createMesh's services).
var (
	gatewayRoutes = []string{"http.80"}
	sidecarRoutes = []string{"8080", "9411", "8081"}
)

// gatewayNamespace is where the fleet's gateways run.
const gatewayNamespace = "istio-ingress"

// maxStatusBytes is the status' bound: the target at 10,000
// proxies, 64 KiB.
const maxStatusBytes = 64 << 10

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
