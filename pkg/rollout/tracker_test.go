package rollout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

var since = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// synced is a proxy that got listeners, clusters and routes at sent and
// ACKed them all.
func proxy(id string, sent time.Time) ProxySync {
	p := ProxySync{ProxyID: id, IstioVersion: "1.31.0", Resources: map[string]ResourceSync{}}
	for _, w := range watchedTypes {
		p.Resources[w.url] = ResourceSync{Sent: "n1", Acked: "n1", SentTime: sent}
	}
	return p
}

func withNack(p ProxySync, msg string) ProxySync {
	p.Resources[ListenerType] = ResourceSync{Sent: "n2", Acked: "n1", SentTime: p.Resources[ListenerType].SentTime, LastError: msg}
	return p
}

func withUnacked(p ProxySync) ProxySync {
	p.Resources[ClusterType] = ResourceSync{Sent: "n2", Acked: "n1", SentTime: p.Resources[ClusterType].SentTime}
	return p
}

// syncz serves proxies as istiod's /debug/syncz does, and records the
// Authorization header.
func syncz(t *testing.T, proxies []ProxySync, auth *string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/syncz" {
			http.NotFound(w, r)
			return
		}
		if auth != nil {
			*auth = r.Header.Get("Authorization")
		}
		_ = json.NewEncoder(w).Encode(proxies)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func gatewayFilter(ns string, ctx networking.EnvoyFilter_PatchContext) *envoyfilter.Object {
	return &envoyfilter.Object{
		Metadata: envoyfilter.Metadata{Namespace: ns, Name: "globalconfig-x"},
		Spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: ctx},
		}}},
	}
}

func TestStatesAcrossTwoIstiods(t *testing.T) {
	gw := func(n string) string {
		return "router~10.1.1." + n + "~gw-" + n + ".istio-system~istio-system.svc.cluster.local"
	}
	a := syncz(t, []ProxySync{
		proxy(gw("1"), since.Add(200*time.Millisecond)),                                                                // synced
		withNack(proxy(gw("2"), since.Add(300*time.Millisecond)), "Error adding/updating listener(s) 0.0.0.0_80: bad"), // NACKed
		proxy("sidecar~10.1.1.9~web-0.shop~shop.svc.cluster.local", since.Add(time.Second)),                            // not reached: GATEWAY patch
	}, nil)
	b := syncz(t, []ProxySync{
		proxy(gw("3"), since.Add(-time.Minute)),             // no push since the set
		withUnacked(proxy(gw("4"), since.Add(time.Second))), // sent, CDS not ACKed
	}, nil)
	tr := NewTracker(Static{a.URL, b.URL, "http://127.0.0.1:1"}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(10 * time.Second) }
	tr.Track(Generation{Version: "v1", Since: since, Scope: ScopeOf([]*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}, "istio-system")})
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 4 || st.Synced != 1 || st.NACKed != 1 || st.Pending != 2 || st.Stale != 0 {
		t.Fatalf("counts: %+v", st)
	}
	if st.Proxies[0].Name != "gw-2.istio-system" || st.Proxies[0].State != NACKed ||
		st.Proxies[0].Message != "LDS: Error adding/updating listener(s) 0.0.0.0_80: bad" || st.Proxies[0].Istiod != a.URL {
		t.Errorf("first listed should be the NACKed proxy with its message: %+v", st.Proxies[0])
	}
	if u := st.Unreachable(); len(u) != 1 || !strings.Contains(u[0].Error, "connection refused") {
		t.Errorf("the third istiod should be reported unreachable: %+v", st.Istiod)
	}
	if got, want := st.Summary(), "4 proxies: 1 NACKed, 2 Pending, 1 Synced; 1 of 3 istiod unreachable"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	// After the timeout the two pending ones are stale, each saying why.
	tr.now = func() time.Time { return since.Add(2 * time.Minute) }
	tr.Poll(context.Background())
	st = tr.Status()
	if st.Stale != 2 || st.Pending != 0 {
		t.Fatalf("after the timeout: %+v", st)
	}
	msgs := map[string]string{}
	for _, p := range st.Proxies {
		msgs[p.Name] = p.Message
	}
	if !strings.HasPrefix(msgs["gw-3.istio-system"], "no listeners sent since the set was written") ||
		msgs["gw-4.istio-system"] != "not ACKed after 1m0s: CDS" {
		t.Errorf("stale messages: %q", msgs)
	}

}

func TestScope(t *testing.T) {
	gw := ProxySync{ProxyID: "router~1~gw-0.istio-system~istio-system.svc.cluster.local"}
	gwOther := ProxySync{ProxyID: "router~1~gw-0.edge~edge.svc.cluster.local"}
	sc := ProxySync{ProxyID: "sidecar~1~web-0.shop~shop.svc.cluster.local"}
	for _, c := range []struct {
		name string
		objs []*envoyfilter.Object
		want [3]bool // gw, gwOther, sc
	}{
		{"gateway in root", []*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}, [3]bool{true, true, false}},
		{"gateway in edge", []*envoyfilter.Object{gatewayFilter("edge", networking.EnvoyFilter_GATEWAY)}, [3]bool{false, true, false}},
		{"sidecar in root", []*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_SIDECAR_INBOUND)}, [3]bool{false, false, true}},
		{"any in shop", []*envoyfilter.Object{gatewayFilter("shop", networking.EnvoyFilter_ANY)}, [3]bool{false, false, true}},
		{"nothing", nil, [3]bool{}},
	} {
		s := ScopeOf(c.objs, "istio-system")
		got := [3]bool{s.Reaches(gw), s.Reaches(gwOther), s.Reaches(sc)}
		if got != c.want {
			t.Errorf("%s: reaches %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTokenIsSentAndUnreachableIsReported(t *testing.T) {
	var auth string
	srv := syncz(t, nil, &auth)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Client{TokenFile: tok}
	if _, err := c.Syncz(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if auth != "Bearer s3cret-token" {
		t.Errorf("Authorization %q", auth)
	}
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "authentication failure", http.StatusUnauthorized)
	}))
	defer denied.Close()
	_, err := c.Syncz(context.Background(), denied.URL)
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a refused request should name the status and never the token: %v", err)
	}
}

func TestTrackSameVersionKeepsStatus(t *testing.T) {
	srv := syncz(t, []ProxySync{proxy("router~1~gw-0.istio-system~x", since.Add(time.Second))}, nil)
	tr := NewTracker(Static{srv.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(2 * time.Second) }
	changes := 0
	tr.OnChange = func() { changes++ }
	g := Generation{Version: "v1", Since: since, Scope: ScopeOf([]*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_ANY)}, "istio-system")}
	tr.Track(g)
	if next := tr.Poll(context.Background()); next != SlowPoll {
		t.Errorf("all synced: next poll in %v, want %v", next, SlowPoll)
	}
	tr.Poll(context.Background())
	if changes != 1 {
		t.Errorf("OnChange called %d times for one change", changes)
	}
	tr.Track(g)
	if tr.Status() == nil {
		t.Error("tracking the same version again dropped its status")
	}
	g.Version, g.Since = "v2", since.Add(5*time.Second)
	tr.Track(g)
	if tr.Status() != nil {
		t.Error("a new version should start without a status")
	}
	tr.Poll(context.Background())
	if st := tr.Status(); st.Pending != 1 {
		t.Errorf("listeners sent before v2 should be pending: %+v", st)
	}
}
