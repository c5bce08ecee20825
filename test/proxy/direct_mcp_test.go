package proxy

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

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The Direct roll back in sidecar mode: the controller serves an istiod of
// its own over MCP, and two more real Envoy gateways (1.39.3 and 1.40.0)
// connect to that istiod. A document both refuse is rolled back: the
// elected controller writes the record, the MCP server serves the last
// good set as the record says, both gateways take it (their own admin),
// and no EnvoyFilter object is written.
func TestDirectRollbackOverMCP(t *testing.T) {
	ctx := setup(t)
	prune(ctx, t, nil)
	_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.DeleteOptions{})
	mcpPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	debugPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", mcpPort)
	base := gzipAbove(100)
	putConfig(ctx, t, base)
	startController(ctx, t, "--sink=mcp", "--mcp-addr="+addr, fmt.Sprintf("--istiod-debug-url=http://127.0.0.1:%d", debugPort), "--rollout-timeout=15s")
	// istiod refuses to start while nothing listens at its MCP address.
	waitMCPListening(ctx, t, addr)

	opts := harness.UpstreamEnvoyIstiod("istiod-mcp-direct")
	opts.MeshConfig += fmt.Sprintf("configSources:\n- address: xds://%s\n- address: k8s://\n", addr)
	opts.HTTPPort = debugPort
	ist, err := cluster.StartIstiodWith(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ist.Kill()
		if t.Failed() {
			t.Logf("istiod-mcp-direct log:\n%s", ist.Log(3000))
		}
	})
	gws := []*gw{{name: "mcp-direct-old", ip: loopback(16)}, {name: "mcp-direct-new", ip: loopback(17)}}
	var names []string
	for i, g := range gws {
		if err := gatewayMesh(ctx, g); err != nil {
			t.Fatal(err)
		}
		names = append(names, ns+"/"+g.name)
		g.EnvoyGateway, err = cluster.StartEnvoyGateway(ctx, ist, harness.GatewayOptions{
			Name: g.name, Binary: []*gw{oldest, newest}[i].Binary, IP: fmt.Sprintf("10.1.6.%d", i+1),
			Labels:   map[string]string{"gateway": g.name, "istio": "ingressgateway", canary.DefaultLabel: "false"},
			Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Kill)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend-mcp-direct", Namespace: ns},
		Spec: networkingv1.VirtualService{Hosts: []string{"*"}, Gateways: names, Http: []*networkingv1.HTTPRoute{{
			Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
				Host: backendHost, Port: &networkingv1.PortSelector{Number: backendPort}}}},
		}}},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cluster.Istio.NetworkingV1().VirtualServices(ns).Delete(bg, vs.Name, metav1.DeleteOptions{})
		for _, g := range gws {
			_ = cluster.Istio.NetworkingV1().Gateways(ns).Delete(bg, g.name, metav1.DeleteOptions{})
			_ = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(bg, "loopback-"+g.name, metav1.DeleteOptions{})
		}
	})
	for _, g := range gws {
		if err := waitServing(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// Taken: the last good copy holds the document (a status of an earlier
	// test may already say Applied over MCP with 2 proxies Synced).
	waitStatus(ctx, t, "the first set taken over MCP", canaryBound, func(s *status.Status) bool {
		if s.State != status.Applied || s.Sink != "mcp" || s.Rollout == nil || s.Rollout.Synced != 2 {
			return false
		}
		cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.GetOptions{})
		return err == nil && cm.Data[document.DataKey] == base
	})

	applyPoison(ctx, t, ist)
	before := map[*gw]int64{}
	for _, g := range gws {
		_, before[g] = ldsStats(ctx, t, g)
	}
	bad := base + "localRateLimit:\n  maxTokens: 1000\n  tokensPerFill: 1000\n  fillInterval: 1s\n"
	putConfig(ctx, t, bad)
	s := waitStatus(ctx, t, "the roll back", directBound, func(s *status.Status) bool {
		return directPhase(bad, canary.RolledBack, status.RolledBack)(s) && s.Canary.Restored == canary.RestoredTaken
	})
	if !strings.Contains(s.Canary.Message, " rejected the change: LDS: ") || !strings.Contains(s.Canary.Message, "cache_time_ms must not be set") || len(s.Canary.NACKs) != 2 {
		t.Errorf("record %+v", s.Canary)
	}
	t.Logf("rolled back over MCP: %s", s.Canary.Message)
	for _, g := range gws {
		if _, rejected := ldsStats(ctx, t, g); rejected <= before[g] {
			t.Errorf("gateway %s (Envoy %s) never refused the change", g.name, g.Binary.Version)
		}
		if !harness.Eventually(ctx, canaryBound, func() bool { return len(listenerErrors(ctx, t, g)) == 0 }) {
			t.Errorf("gateway %s (Envoy %s): listeners still in error: %q", g.name, g.Binary.Version, listenerErrors(ctx, t, g))
		}
		if hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) || !compresses(ctx, t, g, 20000) {
			t.Errorf("gateway %s (Envoy %s) is not on the last good set", g.name, g.Binary.Version)
		}
	}
	// The document stays rejected: the MCP server keeps serving the last
	// good set.
	time.Sleep(2 * time.Second)
	if s, err := cluster.Status(ctx); err != nil || !directPhase(bad, canary.RolledBack, status.RolledBack)(s) {
		t.Errorf("later: %+v %v", s, err)
	}
	for _, g := range gws {
		if hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) {
			t.Errorf("gateway %s got the rejected change later", g.name)
		}
	}
	efs, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil || len(efs.Items) != 0 {
		t.Errorf("the MCP sink wrote EnvoyFilter objects: %d, %v", len(efs.Items), err)
	}
}
