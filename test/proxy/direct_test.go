package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// directBound is how long a Direct rollout may take to reach a phase:
// istiod's debounce, the tracker's 1 s poll and a status write for each
// of the change, its roll back and the answer to the restored set.
const directBound = 45 * time.Second

// directPhase is a status condition: the Direct record of the document
// doc is in phase p, and the status's state is state.
func directPhase(doc string, p canary.Phase, state status.State) func(*status.Status) bool {
	hash := decide.DocumentHash(map[string]string{document.DataKey: doc})
	return func(st *status.Status) bool {
		return st.Canary != nil && st.Canary.Direct() && st.Canary.Document == hash && st.Canary.Phase == p && st.State == state
	}
}

// ldsStats are a gateway's LDS update counters, from its own admin.
func ldsStats(ctx context.Context, t *testing.T, g *gw) (success, rejected int64) {
	t.Helper()
	st, err := g.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st["listener_manager.lds.update_success"], st["listener_manager.lds.update_rejected"]
}

// applyPoison applies poisonAfterRateLimit, deleted when t ends. The
// test's edit may follow at once: a push of it in the same instant as the
// edit's is not taken for the edit's (TestDirectCoincidentPush).
//
// It returns once ist (the suite's istiod when nil) has the EnvoyFilter in
// its store: until then, a change that adds the rate limit filter could be
// pushed without the health check, and ACKed.
func applyPoison(ctx context.Context, t *testing.T, ist *harness.Istiod) {
	t.Helper()
	poison := poisonAfterRateLimit(t)
	if err := cluster.Apply(ctx, poison); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(context.Background(), t, poison) })
	if ist == nil {
		ist = istiod
	}
	name := poison.Metadata.Name
	client := &http.Client{Timeout: 2 * time.Second}
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		resp, err := client.Get(ist.DebugURL() + "/debug/configz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && bytes.Contains(body, []byte(`"`+name+`"`))
	}) {
		t.Fatalf("istiod %s does not list the EnvoyFilter %s in /debug/configz after 30 s", ist.DebugURL(), name)
	}
}

// listenerErrors are the error_state details of g's dynamic listeners in
// its own config dump: set when its last listener update failed, cleared
// by the next one it accepts.
func listenerErrors(ctx context.Context, t *testing.T, g *gw) []string {
	t.Helper()
	doc, err := listenerDump(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	walk(doc, func(k string, v any) {
		if m, ok := v.(map[string]any); ok && k == "error_state" {
			out = append(out, fmt.Sprint(m["details"]))
		}
	})
	return out
}

// statusText is `globalconfig status` as an operator reads it.
func statusText(t *testing.T) string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, cli.Env{Stdout: &out, Stderr: &errs}); code != cli.ExitOK {
		t.Fatalf("globalconfig status: exit %d: %s", code, errs.String())
	}
	return out.String()
}

// startServingGateway starts one more Envoy gateway of binary like's, with
// its own Gateway object, loopback address and route to the backend,
// removed when the test ends.
func startServingGateway(ctx context.Context, t *testing.T, name, ip, nodeIP string, like *gw) *gw {
	t.Helper()
	g := &gw{name: name, ip: ip}
	if err := gatewayMesh(ctx, g); err != nil {
		t.Fatal(err)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend-" + name, Namespace: ns},
		Spec: networkingv1.VirtualService{Hosts: []string{"*"}, Gateways: []string{ns + "/" + name}, Http: []*networkingv1.HTTPRoute{{
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
		_ = cluster.Istio.NetworkingV1().Gateways(ns).Delete(bg, name, metav1.DeleteOptions{})
		_ = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(bg, "loopback-"+name, metav1.DeleteOptions{})
	})
	var err error
	g.EnvoyGateway, err = cluster.StartEnvoyGateway(ctx, istiod, harness.GatewayOptions{
		Name: name, Binary: like.Binary, IP: nodeIP,
		Labels:   map[string]string{"gateway": name, "istio": "ingressgateway", canary.DefaultLabel: "false"},
		Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
	})
	if err != nil {
		t.Fatalf("the new gateway got no configuration: %v", err)
	}
	t.Cleanup(g.Kill)
	return g
}

// The default Direct rollout at two real Envoy gateways (1.40.0 and
// 1.39.3): a document that passes every check of ours but that both
// Envoys refuse (a hand-written EnvoyFilter beside ours puts a health
// check Envoy refuses after the rate limit filter the document adds) is
// rolled back to the last good set. Both gateways end on it, by their own
// admin and by traffic; the status says RolledBack naming a proxy and
// quoting Envoy, with the Event and the metric; and a gateway that starts
// after the edit gets listeners and serves traffic, where it would have
// got none with the refused set in force. Then a hand-written EnvoyFilter
// that every Envoy refuses whatever we send: the change is rolled back,
// the restored set is refused as well, and the document is kept.
func TestDirectRollbackOnNACK(t *testing.T) {
	ctx := setup(t)
	prune(ctx, t, nil)
	_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.DeleteOptions{})
	base := "downstream:\n  idleTimeout: 180\n" + gzipAbove(100)
	putConfig(ctx, t, base)
	ctl := startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set applied and taken", canaryBound, func(s *status.Status) bool {
		return s.State == status.Applied && s.Canary == nil && s.Rollout != nil && s.Rollout.Synced == 2
	})
	lastGood := func() string {
		cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[document.DataKey]
	}
	if lastGood() != base {
		t.Fatal("the first set is not the last good document")
	}

	t.Run("every gateway NACKs the change: rolled back; a new gateway serves", func(t *testing.T) {
		applyPoison(ctx, t, nil)
		before := map[*gw][2]int64{}
		for _, g := range gateways {
			s, r := ldsStats(ctx, t, g)
			before[g] = [2]int64{s, r}
		}
		doc := base + "localRateLimit:\n  maxTokens: 1000\n  tokensPerFill: 1000\n  fillInterval: 1s\n"
		edited := time.Now()
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the roll back", directBound, directPhase(doc, canary.RolledBack, status.RolledBack))
		t.Logf("rolled back %v after the edit: %s", time.Since(edited).Round(time.Millisecond), s.Canary.Message)
		r := s.Canary
		names := []string{"gw-" + newest.name + "." + ns, "gw-" + oldest.name + "." + ns}
		if !strings.HasPrefix(r.Message, "proxy gw-") || !strings.Contains(r.Message, " rejected the change: LDS: ") ||
			!strings.Contains(r.Message, "cache_time_ms must not be set") || !strings.Contains(r.Message, "every proxy that answered NACKed, 2 of 2 (rollbackOn AllNACK)") {
			t.Errorf("record message %q", r.Message)
		}
		var nacked []string
		for _, a := range r.NACKs {
			nacked = append(nacked, a.Name)
		}
		slices.Sort(nacked)
		slices.Sort(names)
		if !slices.Equal(nacked, names) || !slices.Equal(r.Items, []string{"localRateLimit"}) || r.RollbackOn != canary.AllNACK {
			t.Errorf("record %+v: want both gateways refusing localRateLimit", r)
		}
		if len(s.Errors) != 1 || !strings.HasPrefix(s.Errors[0].Message, "rolled back: proxy gw-") {
			t.Errorf("errors %+v: the document should read as rejected", s.Errors)
		}

		// The gateways, by their own admin: each refused an update, then
		// accepted the restored set (no listener in error, an update taken
		// after the refusal), and serves the last good set: no rate limit
		// filter, gzip above 100 bytes.
		s = waitStatus(ctx, t, "the restored set taken", directBound, func(s *status.Status) bool {
			return directPhase(doc, canary.RolledBack, status.RolledBack)(s) && s.Canary.Restored == canary.RestoredTaken
		})
		for _, g := range gateways {
			var success, rejected int64
			var errs []string
			if !harness.Eventually(ctx, canaryBound, func() bool {
				success, rejected = ldsStats(ctx, t, g)
				errs = listenerErrors(ctx, t, g)
				return rejected > before[g][1] && success > before[g][0] && len(errs) == 0
			}) {
				t.Errorf("gateway %s (Envoy %s): LDS updates %d → %d taken, %d → %d refused; listeners in error: %q",
					g.name, g.Binary.Version, before[g][0], success, before[g][1], rejected, errs)
			}
			if hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) || !compresses(ctx, t, g, 20000) || compresses(ctx, t, g, 50) {
				t.Errorf("gateway %s (Envoy %s) is not on the last good set", g.name, g.Binary.Version)
			}
		}
		if lastGood() != base {
			t.Error("the refused document replaced the last good one")
		}
		if !hasEventOf(ctx, corev1.EventTypeWarning, "RolledBack", "cache_time_ms must not be set") {
			t.Error("no RolledBack Event quoting Envoy")
		}
		m, err := ctl.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := m[`globalconfig_direct_rollouts_total{phase="RolledBack"}`]; n != 1 {
			t.Errorf("globalconfig_direct_rollouts_total{phase=\"RolledBack\"} %v, want 1", n)
		}
		out := statusText(t)
		t.Logf("$ globalconfig status\n%s", out)
		for _, want := range []string{"ConfigMap istio-system/global-config: RolledBack\n", "direct rollout: RolledBack", "cache_time_ms must not be set", "the proxies took the restored last good set"} {
			if !strings.Contains(out, want) {
				t.Errorf("globalconfig status lacks %q", want)
			}
		}

		// A gateway that starts now gets listeners and serves traffic
		// through the backend: istiod serves the last good set, which it
		// loads (with the refused set in force it would get no listener).
		started := time.Now()
		g := startServingGateway(ctx, t, "direct-new", loopback(15), "10.1.5.1", newest)
		if err := waitServing(ctx, g); err != nil {
			t.Fatal(err)
		}
		t.Logf("the new gateway served %v after it started", time.Since(started).Round(time.Millisecond))
		if len(activeListeners(mustDump(ctx, t, g))) == 0 || hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) || !compresses(ctx, t, g, 20000) {
			t.Error("the new gateway is not on the last good set")
		}
		if _, rejected := ldsStats(ctx, t, g); rejected != 0 {
			t.Errorf("the new gateway refused %d listener updates", rejected)
		}
		// The document stays rejected.
		if s, err := cluster.Status(ctx); err != nil || !directPhase(doc, canary.RolledBack, status.RolledBack)(s) {
			t.Errorf("after the new gateway: %+v %v", s, err)
		}
	})

	t.Run("the restored set is refused too: the document is kept", func(t *testing.T) {
		broken := handWritten(t, "hand-written-broken", "", healthCheckPatch(t))
		if err := cluster.Apply(ctx, broken); err != nil {
			t.Fatal(err)
		}
		removed := false
		remove := func() {
			if !removed {
				removed = true
				deleteObject(context.Background(), t, broken)
			}
		}
		t.Cleanup(remove)
		doc := "downstream:\n  idleTimeout: 180\n" + gzipAbove(1000)
		putConfig(ctx, t, doc)
		s := waitStatus(ctx, t, "the document kept", directBound, directPhase(doc, canary.Kept, status.NACKed))
		r := s.Canary
		if r.Restored != canary.RestoredRefused || !strings.Contains(r.Message, "refused the restored last good set as well: LDS: ") ||
			!strings.Contains(r.Message, "the refusal is not this change's") || !strings.Contains(r.Message, "cache_time_ms must not be set") {
			t.Errorf("record %+v", r)
		}
		if !strings.Contains(s.Message, "the refusal is not this change's") || len(s.Errors) != 0 {
			t.Errorf("status message %q, errors %+v", s.Message, s.Errors)
		}
		t.Logf("kept: %s", s.Message)
		if !hasEventOf(ctx, corev1.EventTypeWarning, "KeptDespiteNACK", "the refusal is not this change's") {
			t.Error("no KeptDespiteNACK Event")
		}
		// It stays kept: no roll back again while every gateway refuses it.
		time.Sleep(3 * time.Second)
		if s, err := cluster.Status(ctx); err != nil || !directPhase(doc, canary.Kept, status.NACKed)(s) {
			t.Errorf("a few polls later: %+v %v", s, err)
		}
		// The cause removed, the gateways take the kept document.
		remove()
		waitStatus(ctx, t, "the kept document taken", directBound, func(s *status.Status) bool {
			return s.State == status.Applied && s.Rollout != nil && s.Rollout.Synced == 2 && s.Canary != nil && s.Canary.Phase == canary.Kept
		})
		for _, g := range gateways {
			if !harness.Eventually(ctx, canaryBound, func() bool { return !compresses(ctx, t, g, 500) && compresses(ctx, t, g, 5000) }) {
				t.Errorf("gateway %s (Envoy %s) is not on the kept document (gzip above 1000 bytes)", g.name, g.Binary.Version)
			}
		}
		if lastGood() != doc {
			t.Error("the kept document is not the last good one")
		}
	})
}

// mustDump is g's dynamic listeners, from its admin.
func mustDump(ctx context.Context, t *testing.T, g *gw) any {
	t.Helper()
	doc, err := listenerDump(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
