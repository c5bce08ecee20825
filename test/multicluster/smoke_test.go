package multicluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientnetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalconfig/globalconfig/test/fleet"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// TestTwoClustersServeTheirGateways: each cluster's gateway took the
// listener its own cluster's config gives it (moved to its own loopback
// address by an EnvoyFilter of that cluster), serves traffic to the
// backend through it by its own cluster's route (the response header the
// cluster's VirtualService sets), and its cluster's istiod knows it as a
// proxy of that cluster.
func TestTwoClustersServeTheirGateways(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	for _, s := range sites {
		t.Run(s.Name, func(t *testing.T) {
			addrs, err := listenerAddresses(ctx, s.Gateway)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s:%d", s.IP, httpPort)
			if !slices.Contains(addrs, want) {
				t.Errorf("gateway of cluster %s (Envoy %s) has listeners at %v, want one at %s", s.Name, s.Gateway.Binary.Version, addrs, want)
			}
			r, err := get(ctx, s.URL("/echo"))
			if err != nil {
				t.Fatalf("GET through the gateway of cluster %s: %v", s.Name, err)
			}
			if r.status != http.StatusOK || r.header.Get(harness.BackendHeader) != harness.BackendName {
				t.Errorf("GET %s: status %d, %s %q, want 200 from the backend: %s", s.URL("/echo"), r.status, harness.BackendHeader, r.header.Get(harness.BackendHeader), r.body)
			}
			if got := r.header.Get(clusterHeader); got != s.Name {
				t.Errorf("GET %s: %s %q, want %q: the gateway serves another cluster's routes", s.URL("/echo"), clusterHeader, got, s.Name)
			}
			proxies, err := syncz(ctx, s.Istiod)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := proxies["gw-"+s.GatewayName+"."+ns]
			if !ok {
				t.Fatalf("istiod of cluster %s does not list its gateway gw-%s.%s: %v", s.Name, s.GatewayName, ns, proxies)
			}
			if got.ClusterID != s.Name {
				t.Errorf("istiod of cluster %s lists its gateway in cluster %q, want %q", s.Name, got.ClusterID, s.Name)
			}
		})
	}
}

// TestIstiodNamesEachProxysCluster checks what istiod says of a proxy of
// another cluster that connects to it (a remote's proxy on its primary):
// /debug/syncz gives it that cluster_id, /debug/adsz the label
// topology.istio.io/cluster, and /debug/clusterz lists the other cluster,
// known from its remote secret, as synced.
func TestIstiodNamesEachProxysCluster(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	node := xds.InCluster(xds.GatewayNodeIn(ns, "10.1.22.9", "1.31.0"), siteB.Name)
	c, err := xds.Dial(ctx, siteA.Istiod.GRPCAddr, node)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const id = "gw-10-1-22-9." + ns
	var proxies map[string]syncEntry
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		proxies, err = syncz(ctx, siteA.Istiod)
		_, ok := proxies[id]
		return err == nil && ok
	}) {
		t.Fatalf("istiod of cluster %s does not list %s: %v %v", siteA.Name, id, proxies, err)
	}
	if got := proxies[id].ClusterID; got != siteB.Name {
		t.Errorf("istiod of cluster %s: syncz gives %s cluster_id %q, want %q", siteA.Name, id, got, siteB.Name)
	}
	var adsz struct {
		Clients []struct {
			ConnectionID string            `json:"connectionId"`
			Labels       map[string]string `json:"labels"`
		} `json:"clients"`
	}
	if err := getJSON(ctx, siteA.Istiod.DebugURL()+"/debug/adsz", &adsz); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cl := range adsz.Clients {
		if len(cl.ConnectionID) > len(id) && cl.ConnectionID[:len(id)+1] == id+"-" {
			found = true
			if got := cl.Labels["topology.istio.io/cluster"]; got != siteB.Name {
				t.Errorf("istiod of cluster %s: adsz labels %s with topology.istio.io/cluster %q, want %q", siteA.Name, cl.ConnectionID, got, siteB.Name)
			}
		}
	}
	if !found {
		t.Errorf("istiod of cluster %s: adsz has no connection of %s", siteA.Name, id)
	}
	var clusterz []struct {
		ID         string `json:"id"`
		SecretName string `json:"secretName"`
		SyncStatus string `json:"syncStatus"`
	}
	if err := getJSON(ctx, siteA.Istiod.DebugURL()+"/debug/clusterz", &clusterz); err != nil {
		t.Fatal(err)
	}
	synced := map[string]string{}
	for _, cl := range clusterz {
		synced[cl.ID] = cl.SyncStatus
	}
	if synced[siteA.Name] != "synced" || synced[siteB.Name] != "synced" {
		t.Errorf("istiod of cluster %s: clusterz %+v, want clusters %s and %s synced", siteA.Name, clusterz, siteA.Name, siteB.Name)
	}
}

// TestReaderCredentialsOnlyRead: the reader's kubeconfig for cluster b,
// which a member Secret can hold, lists EnvoyFilters there and is
// refused when it creates one.
func TestReaderCredentialsOnlyRead(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	_, kubeconfig, err := siteB.Kubeconfig(harness.ReaderUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := istioclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	efs := reader.NetworkingV1alpha3().EnvoyFilters(ns)
	if _, err := efs.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the reader lists EnvoyFilters in cluster %s: %v", siteB.Name, err)
	}
	ef := &clientnetworkingv1alpha3.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: "reader-may-not", Namespace: ns}}
	_, err = efs.Create(ctx, ef, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the reader creates an EnvoyFilter in cluster %s: error %v, want Forbidden", siteB.Name, err)
	}
}

// TestAPIServerRestartKeepsItsCluster: cluster b's API server killed,
// cluster a's still answers (they share one etcd) and b's gateway still
// serves what its istiod last sent; b's restarted on its own address
// holds b's objects and not a's, and b's istiod takes an edit made there
// to b's gateway.
func TestAPIServerRestartKeepsItsCluster(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	siteB.KillAPIServer()
	restarted := false
	defer func() {
		if !restarted {
			if err := siteB.StartAPIServer(context.Background()); err != nil {
				t.Errorf("restart the API server of cluster %s: %v", siteB.Name, err)
			}
		}
	}()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := siteB.Admin.CoreV1().Namespaces().Get(short, ns, metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatalf("the API server of cluster %s answers after it stopped", siteB.Name)
	}
	if _, err := siteA.Istio.NetworkingV1().Gateways(ns).Get(ctx, siteA.GatewayName, metav1.GetOptions{}); err != nil {
		t.Errorf("cluster %s while %s is down: %v", siteA.Name, siteB.Name, err)
	}
	if r, err := get(ctx, siteB.URL("/echo")); err != nil || r.status != http.StatusOK {
		t.Errorf("the gateway of cluster %s while its API server is down: %+v %v", siteB.Name, r, err)
	}
	restarted = true
	if err := siteB.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := siteB.Istio.NetworkingV1().Gateways(ns).Get(ctx, siteB.GatewayName, metav1.GetOptions{}); err != nil {
		t.Errorf("cluster %s after its restart: its Gateway: %v", siteB.Name, err)
	}
	_, err = siteB.Istio.NetworkingV1().Gateways(ns).Get(ctx, siteA.GatewayName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("cluster %s after its restart: cluster %s's Gateway: error %v, want NotFound", siteB.Name, siteA.Name, err)
	}
	// b's istiod follows b's API server again: an edit there reaches b's
	// gateway.
	vsAPI := siteB.Istio.NetworkingV1().VirtualServices(ns)
	setMark := func(mark string) {
		t.Helper()
		vs, err := vsAPI.Get(ctx, "to-backend", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs.Spec.Http[0].Headers.Response.Set[clusterHeader] = mark
		if _, err := vsAPI.Update(ctx, vs, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := siteB.waitServingMarked(ctx, mark); err != nil {
			t.Errorf("after the restart of cluster %s's API server: %v", siteB.Name, err)
		}
	}
	setMark(siteB.Name + "-restarted")
	setMark(siteB.Name)
}

// syncEntry is the part of istiod's /debug/syncz entry these tests read.
type syncEntry struct {
	ClusterID string `json:"cluster_id"`
	Proxy     string `json:"proxy"`
}

// syncz is istiod's /debug/syncz by proxy (POD.NAMESPACE).
func syncz(ctx context.Context, ist *harness.Istiod) (map[string]syncEntry, error) {
	var list []syncEntry
	if err := getJSON(ctx, ist.DebugURL()+"/debug/syncz", &list); err != nil {
		return nil, err
	}
	out := map[string]syncEntry{}
	for _, e := range list {
		out[e.Proxy] = e
	}
	return out, nil
}

// getJSON decodes the JSON answer of a GET of url into v.
func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// listenerAddresses are the addresses (IP:port) of g's active dynamic
// listeners, from its own config dump.
func listenerAddresses(ctx context.Context, g *harness.EnvoyGateway) ([]string, error) {
	body, err := g.Get(ctx, "/config_dump?resource=dynamic_listeners")
	if err != nil {
		return nil, err
	}
	var dump struct {
		Configs []struct {
			ActiveState struct {
				Listener struct {
					Address struct {
						SocketAddress struct {
							Address   string `json:"address"`
							PortValue int    `json:"port_value"`
						} `json:"socket_address"`
					} `json:"address"`
				} `json:"listener"`
			} `json:"active_state"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(body, &dump); err != nil {
		return nil, fmt.Errorf("config dump of %s: %w", g.Name, err)
	}
	var out []string
	for _, c := range dump.Configs {
		a := c.ActiveState.Listener.Address.SocketAddress
		if a.Address != "" {
			out = append(out, fmt.Sprintf("%s:%d", a.Address, a.PortValue))
		}
	}
	return out, nil
}

// TestSiblingClusterStopsAlone: a third cluster started at runtime on the
// suite's etcd keeps its own objects (not a's), and stopping it leaves
// the etcd, and so clusters a and b, serving.
func TestSiblingClusterStopsAlone(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	c, err := siteA.StartSibling(ctx, filepath.Join(suiteDir, "c"), "c")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	if c.Name != "c" || c.APIServerURL == siteA.APIServerURL || c.APIServerURL == siteB.APIServerURL {
		t.Errorf("sibling: name %q at %s, want c at an address of its own (a at %s, b at %s)", c.Name, c.APIServerURL, siteA.APIServerURL, siteB.APIServerURL)
	}
	if _, err := c.Istio.NetworkingV1().Gateways(ns).Get(ctx, siteA.GatewayName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster c: cluster a's Gateway: error %v, want NotFound", err)
	}
	if _, err := c.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("cluster c is not prepared: %v", err)
	}
	c.Stop()
	stopped = true
	if siteA.Etcd().Exited() {
		t.Fatalf("the etcd of clusters a and b stopped with cluster c:\n%s", siteA.Etcd().Log(2000))
	}
	for _, s := range sites {
		if _, err := s.Istio.NetworkingV1().Gateways(ns).Get(ctx, s.GatewayName, metav1.GetOptions{}); err != nil {
			t.Errorf("cluster %s after cluster c stopped: %v", s.Name, err)
		}
	}
}

// TestFleetInEitherCluster: the fleet's lightweight proxies report the
// cluster they are started in, and each cluster's istiod lists its own
// fleet in that cluster.
func TestFleetInEitherCluster(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	const n = 3
	for _, s := range sites {
		f, err := fleet.Start(ctx, fleet.Options{Addr: s.Istiod.GRPCAddr, Gateways: n, ClusterID: s.Name, Connect: 30 * time.Second})
		if err != nil {
			t.Fatalf("fleet in cluster %s: %v", s.Name, err)
		}
		defer f.Close()
	}
	for _, s := range sites {
		var proxies map[string]syncEntry
		var err error
		ok := harness.Eventually(ctx, 30*time.Second, func() bool {
			proxies, err = syncz(ctx, s.Istiod)
			count := 0
			for id, e := range proxies {
				if strings.HasSuffix(id, ".istio-ingress") && e.ClusterID == s.Name {
					count++
				}
			}
			return err == nil && count == n
		})
		if !ok {
			t.Errorf("istiod of cluster %s does not list %d fleet gateways in cluster %s: %v %v", s.Name, n, s.Name, proxies, err)
		}
	}
}

// TestLoadThroughBothGateways: the load helper's GETs and POSTs are
// answered 200 by both gateways, and each gateway's own statistics, which
// statsArgs gives the controller for rollout.analysis, count them.
func TestLoadThroughBothGateways(t *testing.T) {
	ctx := harness.TestContext(t, "multicluster", setupErr)
	before := map[*site]int64{}
	for _, s := range sites {
		before[s] = downstream2xx(ctx, t, s)
	}
	l := startLoad(ctx, t, sites...)
	time.Sleep(time.Second)
	l.Halt()
	for _, s := range sites {
		ok := l.Count(s.Name, http.StatusOK)
		if ok < 10 {
			t.Errorf("cluster %s: %d answers 200 in a second of load, want at least 10: %v", s.Name, ok, l.Answers(s.Name))
		}
		if len(l.Answers(s.Name)) != 1 {
			t.Errorf("cluster %s: answers other than 200: %v", s.Name, l.Answers(s.Name))
		}
		if got := downstream2xx(ctx, t, s) - before[s]; got < int64(ok) {
			t.Errorf("cluster %s: the gateway's statistics count %d 2xx answers, the load %d", s.Name, got, ok)
		}
	}
	if arg := statsArgs(sites...); !strings.Contains(arg, siteB.proxyName()+"=http://"+siteB.Gateway.AdminAddr) {
		t.Errorf("statsArgs %s names no statistics of %s", arg, siteB.proxyName())
	}
}

// downstream2xx is the 2xx answers s's gateway counted on its HTTP
// listener (its own admin).
func downstream2xx(ctx context.Context, t *testing.T, s *site) int64 {
	t.Helper()
	st, err := s.Gateway.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for name, v := range st {
		if strings.HasPrefix(name, "http.") && strings.HasSuffix(name, ".downstream_rq_2xx") && !strings.HasPrefix(name, "http.admin.") {
			n += v
		}
	}
	return n
}
