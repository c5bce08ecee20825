package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The canary rollout in sidecar mode: the controller serves an istiod of
// its own over MCP (that istiod reads the Kubernetes API too, for the
// Gateways and the rest), and two more real Envoy gateways, one canary,
// connect to that istiod. The same phases as over EnvoyFilter objects: a
// change the canary took is promoted, one it NACKs never reaches the other
// gateway; and no EnvoyFilter object is written.
func TestCanaryOverMCP(t *testing.T) {
	ctx := setup(t)
	freshStart(ctx, t)
	mcpPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	debugPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", mcpPort)
	const bake = 3 * time.Second
	base := fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n", bake) + gzipAbove(100)
	putConfig(ctx, t, base)
	startController(ctx, t, "--sink=mcp", "--mcp-addr="+addr, fmt.Sprintf("--istiod-debug-url=http://127.0.0.1:%d", debugPort), "--rollout-timeout=15s")
	// istiod refuses to start while nothing listens at its MCP address.
	waitMCPListening(ctx, t, addr)

	opts := harness.UpstreamEnvoyIstiod("istiod-mcp")
	opts.MeshConfig += fmt.Sprintf("configSources:\n- address: xds://%s\n- address: k8s://\n", addr)
	opts.HTTPPort = debugPort
	ist, err := cluster.StartIstiodWith(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ist.Kill()
		if t.Failed() {
			t.Logf("istiod-mcp log:\n%s", ist.Log(3000))
		}
	})

	cn := &gw{name: "mcp-canary", ip: loopback(13)}
	st := &gw{name: "mcp-stable", ip: loopback(14)}
	var names []string
	for i, g := range []*gw{cn, st} {
		if err := gatewayMesh(ctx, g); err != nil {
			t.Fatal(err)
		}
		names = append(names, ns+"/"+g.name)
		g.EnvoyGateway, err = cluster.StartEnvoyGateway(ctx, ist, harness.GatewayOptions{
			Name: g.name, Binary: []*gw{oldest, newest}[i].Binary, IP: fmt.Sprintf("10.1.4.%d", i+1),
			Labels:   map[string]string{"gateway": g.name, "istio": "ingressgateway", canary.DefaultLabel: fmt.Sprint(g == cn)},
			Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Kill)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend-mcp", Namespace: ns},
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
		for _, g := range []*gw{cn, st} {
			_ = cluster.Istio.NetworkingV1().Gateways(ns).Delete(bg, g.name, metav1.DeleteOptions{})
			_ = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(bg, "loopback-"+g.name, metav1.DeleteOptions{})
		}
	})
	for _, g := range []*gw{cn, st} {
		if err := waitServing(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// The first set goes out directly.
	if !harness.Eventually(ctx, canaryBound, func() bool { return compresses(ctx, t, cn, 500) && compresses(ctx, t, st, 500) }) {
		t.Fatal("the first set never reached both gateways over MCP")
	}

	// A change: the canary first, then the other after the bake time.
	doc := strings.Replace(base, "minContentLength: 100", "minContentLength: 1000", 1)
	putConfig(ctx, t, doc)
	waitStatus(ctx, t, "the canary phase", canaryBound, phase(doc, canary.InCanary, status.Canary))
	if !harness.Eventually(ctx, canaryBound, func() bool { return !compresses(ctx, t, cn, 500) }) {
		t.Fatal("the canary never took the change over MCP")
	}
	other := compresses(ctx, t, st, 500)
	if s, err := cluster.Status(ctx); err != nil || s.State != status.Canary {
		t.Fatalf("the phase ended before the other gateway was checked: %v %v", s, err)
	}
	if !other {
		t.Fatal("the other gateway took the change during the canary phase")
	}
	s := waitStatus(ctx, t, "the promotion", bake+canaryBound, phase(doc, canary.Promoted, status.Applied))
	if !strings.Contains(s.Canary.Message, "1 of 1 canaries ACKed") || s.Canary.Canaries[0].Name != "gw-"+cn.name+"."+ns {
		t.Errorf("canary record %+v", s.Canary)
	}
	if !harness.Eventually(ctx, canaryBound, func() bool { return !compresses(ctx, t, st, 500) }) {
		t.Fatal("the other gateway never took the promoted change")
	}

	// A change the canary's Envoy NACKs: rolled back, never at the other.
	poison := poisonAfterRateLimit(t)
	if err := cluster.Apply(ctx, poison); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(context.Background(), t, poison) })
	bad := doc + "localRateLimit:\n  maxTokens: 1000\n  tokensPerFill: 1000\n  fillInterval: 1s\n"
	putConfig(ctx, t, bad)
	rolledBack := phase(bad, canary.RolledBack, status.RolledBack)
	var leaked bool
	s = waitStatus(ctx, t, "the roll back", canaryBound, func(s *status.Status) bool {
		leaked = leaked || hasHTTPFilter(ctx, t, st, envoyfilter.LocalRateLimit)
		return rolledBack(s)
	})
	if leaked {
		t.Error("the other gateway got the rate limit filter")
	}
	if !strings.Contains(s.Canary.Message, "canary gw-"+cn.name+"."+ns+" rejected the change") || !strings.Contains(s.Canary.Message, "cache_time_ms must not be set") {
		t.Errorf("canary record %+v", s.Canary)
	}
	if !harness.Eventually(ctx, canaryBound, func() bool { return !hasHTTPFilter(ctx, t, cn, envoyfilter.LocalRateLimit) }) {
		t.Error("the canary kept the rejected change")
	}
	efs, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil || len(efs.Items) != 0 {
		t.Errorf("the MCP sink wrote EnvoyFilter objects: %d, %v", len(efs.Items), err)
	}
}

// waitMCPListening waits until the controller's MCP server listens at
// addr.
func waitMCPListening(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatal("the controller's MCP server does not listen")
	}
}
