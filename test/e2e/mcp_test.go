package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// mcpMesh is istiod's mesh config for reading globalconfig over MCP beside
// the Kubernetes API.
func mcpMesh(addr string) string {
	return fmt.Sprintf("configSources:\n- address: xds://%s\n- address: k8s://\n", addr)
}

// startMCPController runs the controller as istiod's sidecar would: MCP
// sink only, on addr.
func startMCPController(ctx context.Context, t testing.TB, name, addr string, extra ...string) *harness.Controller {
	t.Helper()
	ctl, err := cluster.StartController(controlBin, name, append([]string{"--leader-elect=false", "--sink=mcp", "--mcp-addr=" + addr}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctl.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, ctl.Log(4000))
		}
	})
	if !harness.Eventually(ctx, 30*time.Second, func() bool { return ctl.Ready(ctx) }) {
		t.Fatalf("%s not ready:\n%s", name, ctl.Log(3000))
	}
	return ctl
}

func startMCPIstiod(ctx context.Context, t testing.TB, name, addr string, httpPort int) (*harness.Istiod, *xds.Client) {
	t.Helper()
	ist, err := cluster.StartIstiodAt(ctx, name, mcpMesh(addr), httpPort)
	if err != nil {
		t.Fatal(err)
	}
	client, err := xds.Dial(ctx, ist.GRPCAddr, xds.GatewayNode())
	if err != nil {
		ist.Kill()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		ist.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, ist.Log(3000))
		}
	})
	return ist, client
}

func waitOn(ctx context.Context, t testing.TB, client *xds.Client, what string, check func(xds.Snapshot) error) {
	t.Helper()
	var last error
	if _, err := client.WaitFor(ctx, effectTimeout, func(s xds.Snapshot) bool {
		last = check(s)
		return last == nil
	}); err != nil {
		t.Fatalf("%s: %v (last check: %v)", what, err, last)
	}
}

// Sidecar mode: istiod reads the EnvoyFilters from globalconfig over MCP;
// no EnvoyFilter object exists, yet the gateway gets every item's effect,
// edits reach it, and restarting either side converges by itself.
func TestMCPSidecar(t *testing.T) {
	ctx := setup(t)
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	doc := exampleDocument(t)
	putConfig(ctx, t, doc)
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(context.Background(), "global-config", metav1.DeleteOptions{})
	})
	// The sidecar asks its own istiod for the rollout, on localhost.
	debugPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rolloutArgs := []string{fmt.Sprintf("--istiod-debug-url=http://127.0.0.1:%d", debugPort)}
	ctl := startMCPController(ctx, t, "mcp-controller", addr, rolloutArgs...)
	first, client := startMCPIstiod(ctx, t, "istiod-mcp", addr, debugPort)

	set := desiredObjects(t, doc)
	for _, o := range set {
		waitOn(ctx, t, client, o.Metadata.Name+" over MCP", func(s xds.Snapshot) error { return inEffectAmong(o, set, s) })
	}
	efs, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil || len(efs.Items) != 0 {
		t.Errorf("the MCP sink wrote EnvoyFilter objects: %d, %v", len(efs.Items), err)
	}
	m, err := ctl.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acks := m[`globalconfig_mcp_responses_total{result="ack",type="networking.istio.io/v1alpha3/EnvoyFilter"}`]
	nacks := m[`globalconfig_mcp_responses_total{result="nack",type="networking.istio.io/v1alpha3/EnvoyFilter"}`]
	if m["globalconfig_mcp_connections"] != 1 || acks < 1 || nacks != 0 {
		t.Errorf("mcp metrics: %v connections, %v ACKs, %v NACKs of EnvoyFilters; want 1, at least 1, 0", m["globalconfig_mcp_connections"], acks, nacks)
	}
	// The rollout works the same over MCP: the gateway ACKed the set.
	waitRollout(ctx, t, "the gateway takes the set served over MCP", func(st *rollout.Status) bool {
		return st.Selected == 1 && st.Proxy("gw-10-1-1-1."+ns).State == rollout.Synced && len(st.Unreachable()) == 0
	})

	gzipWith := func(doc string) *envoyfilter.Object {
		for _, o := range desiredObjects(t, doc) {
			if o.Item() == "gzip" {
				return o
			}
		}
		t.Fatal("no gzip")
		return nil
	}
	edited := strings.Replace(doc, "chunkSize: 4096", "chunkSize: 8192", 1)
	putConfig(ctx, t, edited)
	waitOn(ctx, t, client, "edit over MCP", func(s xds.Snapshot) error { return inEffect(gzipWith(edited), s) })

	// The controller restarts once the proxy took the edit (the last good
	// copy holds a change only once the proxies took it): istiod
	// reconnects and gets the current set.
	waitLastGood(ctx, t, "chunkSize: 8192")
	ctl.Kill()
	ctl = startMCPController(ctx, t, "mcp-controller-2", addr, rolloutArgs...)
	again := strings.Replace(edited, "chunkSize: 8192", "chunkSize: 16384", 1)
	putConfig(ctx, t, again)
	waitOn(ctx, t, client, "edit after a controller restart", func(s xds.Snapshot) error { return inEffect(gzipWith(again), s) })
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		m, err := ctl.Metrics(ctx)
		return err == nil && m["globalconfig_mcp_connections"] == 1
	}) {
		t.Error("istiod did not reconnect to the restarted controller")
	}

	// istiod restarts: the old one dies, the new one starts, reads the set
	// and serves it.
	client.Close()
	first.Kill()
	second, client2 := startMCPIstiod(ctx, t, "istiod-mcp-2", addr, debugPort)
	againSet := desiredObjects(t, again)
	for _, o := range againSet {
		waitOn(ctx, t, client2, o.Metadata.Name+" after an istiod restart", func(s xds.Snapshot) error { return inEffectAmong(o, againSet, s) })
	}

	// Both restart while the document is invalid. The controller serves
	// the stored last good document's set from its first answer, so the
	// new istiod starts (it waits for every config type) and the gateway
	// keeps the previous effect: the last change, once the proxy took it.
	waitLastGood(ctx, t, "chunkSize: 16384")
	ctl.Kill()
	putConfig(ctx, t, "gizp: {}\n"+again)
	client2.Close()
	second.Kill()
	startMCPController(ctx, t, "mcp-controller-3", addr, rolloutArgs...)
	_, client3 := startMCPIstiod(ctx, t, "istiod-mcp-3", addr, debugPort)
	for _, o := range againSet {
		waitOn(ctx, t, client3, o.Metadata.Name+" after both restart with an invalid document", func(s xds.Snapshot) error { return inEffectAmong(o, againSet, s) })
	}
}

// waitLastGood waits until the stored last good document holds want: a
// Direct change is stored once the proxies took it.
func waitLastGood(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	var got string
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "global-config-last-good", metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = cm.Data["config.yaml"]
		return strings.Contains(got, want)
	}) {
		t.Fatalf("the last good document never held %q:\n%s", want, got)
	}
}
