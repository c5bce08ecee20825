package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// syntheticIstiod answers the tracker as an istiod with n connected
// proxies would: /debug/syncz and /debug/configz (no other endpoint).
// Before hold, its store lacks the set and every proxy ACKed push 100;
// after hold, the store holds it, and after push, push 101 went out: most proxies ACKed it,
// some NACKed it, some did not answer yet.
type syntheticIstiod struct {
	*httptest.Server
	mu      sync.Mutex
	proxies []rollout.ProxySync
	held    map[string]string
}

// Mix of a synthetic fleet: of every 1,000 proxies, nackPer NACK and
// pendingPer have not answered yet.
const (
	nackPer    = 3
	pendingPer = 5
)

func newSyntheticIstiod(n int) *syntheticIstiod {
	s := &syntheticIstiod{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/debug/syncz":
			_ = json.NewEncoder(w).Encode(s.proxies)
		case "/debug/configz":
			out := []map[string]any{}
			for key, hash := range s.held {
				ns, name, _ := strings.Cut(key, "/")
				out = append(out, map[string]any{"kind": "EnvoyFilter", "metadata": map[string]any{
					"name": name, "namespace": ns,
					"labels":      map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue},
					"annotations": map[string]string{envoyfilter.AnnotationContentHash: hash},
				}})
			}
			_ = json.NewEncoder(w).Encode(out)
		default:
			http.NotFound(w, r)
		}
	}))
	s.proxies = syntheticProxies(n, false)
	return s
}

// hold makes the store hold set, before any push carries it: istiod
// pushes a change no sooner than its quiet period after it reached the
// store.
func (s *syntheticIstiod) hold(set map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = set
}

// push sends push 101, which carries what the store holds.
func (s *syntheticIstiod) push(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proxies = syntheticProxies(n, true)
}

func nonce(push int) string {
	return fmt.Sprintf("2026-11-26T10:00:00Z/%d%s", push, "0a1b2c3d-0000-4000-8000-00000000000a")
}

// syntheticProxies is a fleet of n, a fifth gateways in istio-ingress.
func syntheticProxies(n int, loaded bool) []rollout.ProxySync {
	out := make([]rollout.ProxySync, n)
	sent := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for i := range out {
		kind, name, ns := "sidecar", fmt.Sprintf("app-%d-7d9f8c6b5-x%04d", i%50, i), fmt.Sprintf("team-%d", i%5)
		if i%gatewayShare == 0 {
			kind, name, ns = "router", fmt.Sprintf("istio-ingressgateway-6c8d9f7b4-%05d", i), gatewayNamespace
		}
		acked, pushed, lastErr := nonce(100), nonce(100), ""
		if loaded {
			pushed, acked = nonce(101), nonce(101)
			switch k := i % 1000; {
			case k < nackPer*gatewayShare && i%gatewayShare == 0:
				acked, lastErr = nonce(100), "Error adding/updating listener(s) 0.0.0.0_80: envoy.filters.http.lua: failed to load script: [string \"...\"]:3: unexpected symbol near 'x'"
			case k >= 500 && k < 500+pendingPer*gatewayShare && i%gatewayShare == 0:
				acked = nonce(100)
			}
		}
		res := map[string]rollout.ResourceSync{}
		for _, t := range []string{rollout.ListenerType, rollout.ClusterType, rollout.RouteType} {
			res[t] = rollout.ResourceSync{Sent: pushed, Acked: acked, SentTime: sent, LastError: lastErr}
		}
		out[i] = rollout.ProxySync{ProxyID: fmt.Sprintf("%s~10.%d.%d.%d~%s.%s~%s.svc.cluster.local", kind, 20+i/62500, i/250%250, i%250+1, name, ns, ns),
			ProxyType: kind, IstioVersion: "1.31.0", Resources: res}
	}
	return out
}

// syntheticSet is a set of 15 gateway EnvoyFilters: its contents (what
// istiod's store holds once it loaded it) and its objects.
func syntheticSet() (map[string]string, []*envoyfilter.Object) {
	set := map[string]string{}
	var objs []*envoyfilter.Object
	for i := range 15 {
		name := fmt.Sprintf("globalconfig-item-%d", i)
		set[gatewayNamespace+"/"+name] = fmt.Sprintf("hash-%d", i)
		objs = append(objs, &envoyfilter.Object{Metadata: envoyfilter.Metadata{Namespace: gatewayNamespace, Name: name},
			Spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
				Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: networking.EnvoyFilter_GATEWAY}}}}})
	}
	return set, objs
}

// trackedStatus is the status a controller tracking a fleet of n proxies
// writes, its rollout read from a synthetic istiod by the real tracker;
// base gives the rest (what the controller wrote for the real fleet).
func trackedStatus(ctx context.Context, base *status.Status, n int) (*status.Status, error) {
	ist := newSyntheticIstiod(n)
	defer ist.Close()
	set, objs := syntheticSet()
	tr := rollout.NewTracker(rollout.Static{ist.URL}, &rollout.Client{}, time.Hour)
	tr.Track(rollout.Generation{Version: "synthetic", Since: time.Date(2026, 11, 26, 9, 59, 0, 0, time.UTC),
		Scope: rollout.ScopeOf(objs, "istio-system"), Contents: set})
	tr.Poll(ctx)
	ist.hold(set)
	tr.Poll(ctx) // the store holds the set, and push 100 was sent before
	ist.push(n)
	tr.Poll(ctx)
	st := tr.Status()
	if st == nil {
		return nil, fmt.Errorf("the tracker has no status for %d proxies", n)
	}
	out := *base
	out.Rollout = st.Written(func(m string) string { return m })
	out.Canary = canaryRecord(n)
	return &out, nil
}

// canaryRecord is the record of a canary phase over n proxies, one in a
// hundred a canary (every one of them is in the record), one NACKed.
func canaryRecord(n int) *canary.Record {
	rec := &canary.Record{Document: "5c7c56257774ce87", Strategy: canary.Canary, Phase: canary.InCanary,
		From: "0123456789abcdef", To: "fedcba9876543210", Items: []string{"gzip"}, Label: "globalconfig.io/canary",
		Needed: "100%", BakeTime: "5m", Started: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	for i := range n / 100 {
		a := canary.Answer{Name: fmt.Sprintf("istio-ingressgateway-6c8d9f7b4-%05d.%s", i*gatewayShare, gatewayNamespace), State: canary.StateSynced, Received: true}
		if i == 0 {
			a.State, a.Received, a.Message = canary.StateNACKed, false, "Error adding/updating listener(s) 0.0.0.0_80: envoy.filters.http.lua: failed to load script"
		}
		rec.Canaries = append(rec.Canaries, a)
	}
	return rec
}

// The status stays small at fleet size: at 10,000 proxies (a fifth of them
// gateways the set reaches, some NACKed, some not answering) it counts
// every one and lists those that need attention, in at most 64 KiB, with
// the record of a canary phase over 1% of them.
func TestStatusAtFleetSize(t *testing.T) {
	ctx := context.Background()
	base := status.New(status.Applied)
	for _, n := range []int{1_000, 10_000} {
		st, err := trackedStatus(ctx, base, n)
		if err != nil {
			t.Fatal(err)
		}
		r := st.Rollout
		gws := n / gatewayShare
		nacked := n / 1000 * nackPer
		pending := n / 1000 * pendingPer
		if r.Selected != gws || r.NACKed != nacked || r.Pending != pending || r.Synced != gws-nacked-pending {
			t.Errorf("%d proxies: selected %d synced %d pending %d NACKed %d; want %d, %d, %d, %d",
				n, r.Selected, r.Synced, r.Pending, r.NACKed, gws, gws-nacked-pending, pending, nacked)
		}
		listedNACKs := 0
		for _, p := range r.Proxies {
			switch p.State {
			case rollout.NACKed:
				listedNACKs++
			case rollout.Stale:
			default:
				t.Errorf("%d proxies: %s is listed, %s: past %d proxies only those that need attention are", n, p.Name, p.State, rollout.ListAll)
			}
		}
		if listedNACKs != nacked || r.Unlisted != r.Selected-len(r.Proxies) {
			t.Errorf("%d proxies: %d of %d NACKed proxies listed, %d listed and %d unlisted of %d", n, listedNACKs, nacked, len(r.Proxies), r.Unlisted, r.Selected)
		}
		text, err := st.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if len(text) > maxStatusBytes {
			t.Errorf("%d proxies: the status is %d bytes, over %d", n, len(text), maxStatusBytes)
		}
		t.Logf("%d proxies: status %d bytes", n, len(text))
	}
}

// statusAt is the size of the status at n proxies, the rest of it as the
// real fleet's controller wrote it.
func statusAt(b *testing.B, base *status.Status, n int) int {
	st, err := trackedStatus(context.Background(), base, n)
	must(b, err)
	text, err := st.Marshal()
	must(b, err)
	return len(text)
}

// The status stays small across 10 member clusters: 10,000 proxies over
// ten clusters' istiods (1,000 each, the same mix), one tracker asking
// them all, every cluster's entry (three of them unreachable with the API
// server's words) and a rollout across clusters in stages: it counts
// every proxy per cluster and overall, names each NACKed proxy's
// cluster, and stays within 64 KiB.
func TestStatusAtFleetSizeTenMembers(t *testing.T) {
	ctx := context.Background()
	const members, per = 10, 1_000
	var names []string
	src := &rollout.Members{}
	clusters := map[string]rollout.ClusterSet{}
	set, objs := syntheticSet()
	var istiods []*syntheticIstiod
	for i := range members {
		name := fmt.Sprintf("eu-west-%d-production-cluster", i)
		names = append(names, name)
		ist := newSyntheticIstiod(per)
		defer ist.Close()
		istiods = append(istiods, ist)
		src.Set(name, rollout.Static{ist.URL})
		clusters[name] = rollout.ClusterSet{Contents: set, Scope: rollout.ScopeOf(objs, "istio-system")}
	}
	tr := rollout.NewTracker(src, &rollout.Client{}, time.Hour)
	tr.Track(rollout.Generation{Version: "synthetic", Since: time.Date(2026, 11, 26, 9, 59, 0, 0, time.UTC),
		Scope: rollout.ScopeOf(objs, "istio-system"), Contents: set, Clusters: clusters})
	tr.Poll(ctx)
	for _, ist := range istiods {
		ist.hold(set)
	}
	tr.Poll(ctx)
	for _, ist := range istiods {
		ist.push(per)
	}
	tr.Poll(ctx)
	r := tr.Status()
	if r == nil {
		t.Fatal("no status across 10 members")
	}
	st := status.New(status.Applied)
	st.Rollout = r.Written(func(m string) string { return m })
	since := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for i, name := range names {
		c := status.Cluster{Name: name, Home: i == 0, Secret: "istio-system/globalconfig-member-" + name, Reachable: true, Set: "fedcba9876543210", Objects: 15, Since: &since}
		if i >= 7 {
			c.Reachable, c.Set, c.Since = false, "0123456789abcdef", nil
			c.Error = `apply envoyfilter istio-system/globalconfig-item-3: Patch "https://10.0.` + fmt.Sprint(i) + `.1:6443/apis/networking.istio.io/v1alpha3/namespaces/istio-system/envoyfilters/globalconfig-item-3?fieldManager=globalconfig&force=true": dial tcp 10.0.7.1:6443: connect: connection refused`
		}
		st.Clusters = append(st.Clusters, c)
	}
	st.ClusterRollout = &canary.ClusterRecord{Phase: canary.Progressing, Document: "5c7c56257774ce87", From: "0123456789abcdef", To: "fedcba9876543210",
		Stages: [][]string{names[:1], names[1:4], names[4:]}, Stage: 2, Started: since, StageStarted: since, MinSuccessTime: "1m", ProgressDeadline: "10m",
		Why: "stage 3 of 3 waits for " + strings.Join(names[7:], ", ") + ": unreachable"}

	gws := members * per / gatewayShare
	nacked, pending := members*nackPer, members*pendingPer
	if r.Selected != gws || r.NACKed != nacked || r.Pending != pending || len(r.Clusters) != members {
		t.Errorf("selected %d NACKed %d pending %d over %d clusters; want %d, %d, %d over %d", r.Selected, r.NACKed, r.Pending, len(r.Clusters), gws, nacked, pending, members)
	}
	sum := 0
	for _, c := range r.Clusters {
		sum += c.Selected
		if c.Selected != per/gatewayShare || c.NACKed != nackPer {
			t.Errorf("cluster %s: %+v, want %d proxies, %d NACKed", c.Name, c, per/gatewayShare, nackPer)
		}
	}
	if sum != r.Selected {
		t.Errorf("the clusters count %d proxies, the whole %d", sum, r.Selected)
	}
	listed := 0
	for _, p := range r.Proxies {
		if p.State == rollout.NACKed {
			listed++
			if p.Cluster == "" {
				t.Errorf("NACKed %s is listed without its cluster", p.Name)
			}
		}
	}
	if listed != nacked {
		t.Errorf("%d of %d NACKed proxies listed", listed, nacked)
	}
	text, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(text) > maxStatusBytes {
		t.Errorf("the status across 10 members is %d bytes, over %d", len(text), maxStatusBytes)
	}
	t.Logf("10 members, %d proxies: status %d bytes", members*per, len(text))
}
