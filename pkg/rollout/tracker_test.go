package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

var since = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// nonce is an istiod nonce of push n: its push version "TIME/n" and a
// UUID. The time is istiod's, and deliberately far from since: no clock
// decides anything.
func nonce(n int) string {
	return fmt.Sprintf("2026-11-23T09:13:00Z/%d0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", n)
}

// proxy is a proxy that got listeners, clusters and routes in push n and
// ACKed them all.
func proxy(id string, n int) ProxySync {
	p := ProxySync{ProxyID: id, IstioVersion: "1.31.0", Resources: map[string]ResourceSync{}}
	for _, w := range watchedTypes {
		p.Resources[w.url] = ResourceSync{Sent: nonce(n), Acked: nonce(n), SentTime: since.Add(-time.Hour)}
	}
	return p
}

// withNack is p having rejected the listeners of push n.
func withNack(p ProxySync, n int, msg string) ProxySync {
	p.Resources[ListenerType] = ResourceSync{Sent: nonce(n), Acked: p.Resources[ListenerType].Acked, LastError: msg}
	return p
}

// withUnacked is p not having answered the clusters of push n.
func withUnacked(p ProxySync, n int) ProxySync {
	p.Resources[ClusterType] = ResourceSync{Sent: nonce(n), Acked: p.Resources[ClusterType].Acked}
	return p
}

// fakeIstiod serves /debug/syncz (proxies) and /debug/configz (held, as
// globalconfig's EnvoyFilters in its store) as istiod does, and records
// the Authorization header.
type fakeIstiod struct {
	*httptest.Server
	mu      sync.Mutex
	proxies []ProxySync
	held    map[string]string
	auth    string
	syncz   []string // the query of every /debug/syncz request
	// configz counts /debug/configz requests; onConfigz, when set, is
	// called (locked) before each is answered, with its count: istiod's
	// state changing between two reads.
	configz   int
	onConfigz func(n int)
	// labels are, by POD.NAMESPACE, the labels a connected proxy
	// connected with (/debug/adsz, connection ID POD.NAMESPACE-1), and
	// dumps, by connection ID, its configuration (/debug/config_dump).
	labels map[string]map[string]string
	dumps  map[string]string
}

func newIstiod(t testing.TB) *fakeIstiod {
	t.Helper()
	f := &fakeIstiod{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.auth = r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/debug/syncz":
			// istiod answers for the proxies of one namespace when asked.
			f.syncz = append(f.syncz, r.URL.RawQuery)
			out := []ProxySync{}
			for _, p := range f.proxies {
				if ns := r.URL.Query().Get("namespace"); ns == "" || p.Namespace() == ns {
					out = append(out, p)
				}
			}
			_ = json.NewEncoder(w).Encode(out)
		case "/debug/configz":
			f.configz++
			if f.onConfigz != nil {
				f.onConfigz(f.configz)
			}
			var out []map[string]any
			out = append(out, map[string]any{"kind": "VirtualService", "metadata": map[string]any{"name": "other", "namespace": "istio-system"}})
			for key, hash := range f.held {
				ns, name, _ := strings.Cut(key, "/")
				out = append(out, map[string]any{"kind": "EnvoyFilter", "metadata": map[string]any{
					"name": name, "namespace": ns,
					"labels":      map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue},
					"annotations": map[string]string{envoyfilter.AnnotationContentHash: hash},
				}, "spec": map[string]any{"priority": 10}})
			}
			_ = json.NewEncoder(w).Encode(out)
		case "/debug/adsz":
			clients := []map[string]any{}
			for _, p := range f.proxies {
				clients = append(clients, map[string]any{"connectionId": p.Name() + "-1", "metadata": map[string]any{"LABELS": f.labels[p.Name()]}})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"clients": clients})
		case "/debug/config_dump":
			dump, ok := f.dumps[r.URL.Query().Get("proxyID")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(dump))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeIstiod) set(held map[string]string, proxies ...ProxySync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.proxies = held, proxies
}

// loadsAt makes the store hold held, with proxies, from the n-th
// /debug/configz read on (n counted from now).
func (f *fakeIstiod) loadsAt(n int, held map[string]string, proxies ...ProxySync) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n += f.configz
	f.onConfigz = func(i int) {
		if i == n {
			f.held, f.proxies = held, proxies
		}
	}
}

func gatewayFilter(ns string, ctx networking.EnvoyFilter_PatchContext) *envoyfilter.Object {
	return &envoyfilter.Object{
		Metadata: envoyfilter.Metadata{Namespace: ns, Name: "globalconfig-x"},
		Spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: ctx},
		}}},
	}
}

// setV1 is the tracked set: one gateway EnvoyFilter.
var setV1 = map[string]string{"istio-system/globalconfig-x": "hash-v1"}

func generation(version string, contents map[string]string) Generation {
	return Generation{Version: version, Since: since, Contents: contents,
		Scope: ScopeOf([]*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}, "istio-system")}
}

func gw(n string) string {
	return "router~10.1.1." + n + "~gw-" + n + ".istio-system~istio-system.svc.cluster.local"
}

// A proxy's state is decided by istiod's push counter: a push after the
// istiod's store held the set carries it. The tracker's clock is minutes
// off istiod's (and the proxies' send times), and nothing changes.
func TestStatesAcrossTwoIstiods(t *testing.T) {
	a, b := newIstiod(t), newIstiod(t)
	// a holds the set; the highest push it had sent then is 5.
	a.set(setV1, proxy(gw("1"), 5), proxy(gw("2"), 5), proxy(gw("5"), 4),
		proxy("sidecar~10.1.1.9~web-0.shop~shop.svc.cluster.local", 5)) // not reached: a GATEWAY patch
	// b still holds the previous set.
	b.set(map[string]string{"istio-system/globalconfig-x": "hash-v0"}, proxy(gw("3"), 40))
	tr := NewTracker(Static{a.URL, b.URL, "http://127.0.0.1:1"}, &Client{}, time.Minute)
	tr.slice = 50 * time.Millisecond
	clock := since.Add(7 * time.Minute)
	tr.now = func() time.Time { return clock }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Selected != 4 || st.Pending != 4 {
		t.Fatalf("before any push carrying the set: %+v", st)
	}

	// Push 6 carries the set: gw-1 ACKs it, gw-2 rejects it, gw-4 (new)
	// has not answered its clusters, gw-5 still only has its old answer
	// to a rejected push 4.
	a.set(setV1, proxy(gw("1"), 6),
		withNack(proxy(gw("2"), 5), 6, "Error adding/updating listener(s) 0.0.0.0_80: bad"),
		withUnacked(proxy(gw("4"), 6), 7),
		withNack(proxy(gw("5"), 3), 4, "an old rejection"))
	clock = clock.Add(10 * time.Second)
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 5 || st.Synced != 1 || st.NACKed != 1 || st.Pending != 3 || st.Stale != 0 {
		t.Fatalf("counts: %+v", st)
	}
	if st.Proxies[0].Name != "gw-2.istio-system" || st.Proxies[0].State != NACKed ||
		st.Proxies[0].Message != "LDS: Error adding/updating listener(s) 0.0.0.0_80: bad" || st.Proxies[0].Istiod != a.URL {
		t.Errorf("first listed should be the NACKed proxy with its message: %+v", st.Proxies[0])
	}
	if u := st.Unreachable(); len(u) != 1 || !strings.Contains(u[0].Error, "connection refused") {
		t.Errorf("the third istiod should be reported unreachable: %+v", st.Istiod)
	}
	if got, want := st.Summary(), "5 proxies: 1 NACKed, 3 Pending, 1 Synced; 1 of 3 istiod unreachable"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	// After the timeout, on the tracker's own clock, the pending ones are
	// stale, each saying why.
	clock = clock.Add(2 * time.Minute)
	tr.Poll(context.Background())
	st = tr.Status()
	if st.Stale != 3 || st.Pending != 0 {
		t.Fatalf("after the timeout: %+v", st)
	}
	msgs := map[string]string{}
	for _, p := range st.Proxies {
		msgs[p.Name] = p.Message
	}
	for name, want := range map[string]string{
		"gw-3.istio-system": "istiod " + b.URL + " has not loaded the set (istio-system/globalconfig-x has other content); after 1m0s",
		"gw-4.istio-system": "not ACKed: CDS; after 1m0s",
		"gw-5.istio-system": "no listeners sent since istiod loaded the set; after 1m0s",
	} {
		if msgs[name] != want {
			t.Errorf("%s: %q, want %q", name, msgs[name], want)
		}
	}

	// b loads the set while the tracker watches its store: it had sent up
	// to 40 then, so 41 carries the set.
	b.loadsAt(2, setV1, proxy(gw("3"), 40))
	tr.Poll(context.Background())
	b.set(setV1, proxy(gw("3"), 41))
	tr.Poll(context.Background())
	if p := tr.Status().Proxy("gw-3.istio-system"); p.State != Synced {
		t.Errorf("gw-3 after b's push 41: %+v", p)
	}

	// a restarts: its counter starts again, and the mark is found anew.
	a.set(setV1, proxy(gw("1"), 1))
	tr.Poll(context.Background())
	a.set(setV1, proxy(gw("1"), 2))
	tr.Poll(context.Background())
	if p := tr.Status().Proxy("gw-1.istio-system"); p.State != Synced {
		t.Errorf("gw-1 after a's restart and push 2: %+v", p)
	}
}

func TestPushCounter(t *testing.T) {
	for nonce, want := range map[string]int64{
		"2026-11-23T09:13:00Z/1230f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0": 123,
		"2026-11-23T09:13:00Z/70f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0":   7,
		"2026-11-23T09:13:00Z/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0":    -1, // no counter
		"n1": -1,
		"":   -1,
	} {
		n, ok := PushCounter(nonce)
		if (want < 0 && ok) || (want >= 0 && (!ok || int64(n) != want)) {
			t.Errorf("%q: %d, %v; want %d", nonce, n, ok, want)
		}
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

// A set whose EnvoyFilters are all in one namespace is tracked from
// istiod's answer for that namespace alone; a set in the root namespace
// from its whole answer.
func TestSynczAsksForTheScopesNamespaces(t *testing.T) {
	ist := newIstiod(t)
	edge := map[string]string{"edge/globalconfig-x": "hash-v1"}
	ist.set(edge, proxy("router~10.1.1.1~gw-1.edge~edge.svc.cluster.local", 6), proxy(gw("2"), 6),
		proxy("sidecar~10.1.1.9~web-0.shop~shop.svc.cluster.local", 6))
	tr := NewTracker(Static{ist.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Minute) }
	tr.Track(Generation{Version: "v1", Since: since, Contents: edge,
		Scope: ScopeOf([]*envoyfilter.Object{gatewayFilter("edge", networking.EnvoyFilter_GATEWAY)}, "istio-system")})
	tr.Poll(context.Background())
	if st := tr.Status(); st == nil || st.Selected != 1 || len(st.Proxies) != 1 || st.Proxies[0].Name != "gw-1.edge" {
		t.Fatalf("a set in edge: %+v", st)
	}
	ist.mu.Lock()
	queries := slices.Clone(ist.syncz)
	ist.syncz = nil
	ist.mu.Unlock()
	if len(queries) == 0 || slices.ContainsFunc(queries, func(q string) bool { return q != "namespace=edge" }) {
		t.Errorf("a set in edge: syncz asked with %q, want namespace=edge each time", queries)
	}

	tr.Track(generation("v2", setV1))
	ist.set(setV1, ist.proxies...)
	tr.Poll(context.Background())
	ist.mu.Lock()
	defer ist.mu.Unlock()
	if len(ist.syncz) == 0 || slices.ContainsFunc(ist.syncz, func(q string) bool { return q != "" }) {
		t.Errorf("a set in the root namespace: syncz asked with %q, want no namespace", ist.syncz)
	}
}

func TestTokenIsSentAndUnreachableIsReported(t *testing.T) {
	srv := newIstiod(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Client{TokenFile: tok}
	for _, ask := range []func() error{
		func() error { _, err := c.Syncz(context.Background(), srv.URL); return err },
		func() error { _, err := c.Configz(context.Background(), srv.URL); return err },
	} {
		if err := ask(); err != nil {
			t.Fatal(err)
		}
		if srv.auth != "Bearer s3cret-token" {
			t.Errorf("Authorization %q", srv.auth)
		}
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
	srv := newIstiod(t)
	srv.set(setV1, proxy("router~1~gw-0.istio-system~x", 3))
	tr := NewTracker(Static{srv.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(2 * time.Second) }
	changes := 0
	tr.OnChange = func() { changes++ }
	g := generation("v1", setV1)
	tr.Track(g)
	tr.Poll(context.Background()) // the mark: push 3
	srv.set(setV1, proxy("router~1~gw-0.istio-system~x", 4))
	if next := tr.Poll(context.Background()); next != SlowPoll {
		t.Errorf("all synced: next poll in %v, want %v", next, SlowPoll)
	}
	tr.Poll(context.Background())
	if changes != 2 {
		t.Errorf("OnChange called %d times for two changes", changes)
	}
	tr.Track(g)
	if tr.Status() == nil {
		t.Error("tracking the same version again dropped its status")
	}
	setV2 := map[string]string{"istio-system/globalconfig-x": "hash-v2"}
	tr.Track(generation("v2", setV2))
	if tr.Status() != nil {
		t.Error("a new version should start without a status")
	}
	srv.set(setV2, proxy("router~1~gw-0.istio-system~x", 4))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Pending != 1 {
		t.Errorf("listeners sent before istiod held v2 should be pending: %+v", st)
	}
}

// The controller's clock minutes off istiod's: the set was written at
// since by the controller's clock, istiod's clock is five minutes behind
// (its send times are before since), and the tracker's own clock is ten
// minutes ahead. Synced and NACKed are decided as without skew.
func TestClockSkew(t *testing.T) {
	behind := since.Add(-5 * time.Minute)
	skewed := func(p ProxySync) ProxySync {
		for url, r := range p.Resources {
			r.SentTime = behind
			p.Resources[url] = r
		}
		return p
	}
	a := newIstiod(t)
	a.set(map[string]string{}, skewed(proxy(gw("1"), 7)), skewed(proxy(gw("2"), 7))) // the store lacks the set
	tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(10 * time.Minute) }
	tr.Track(generation("v1", setV1))
	tr.slice = 50 * time.Millisecond
	tr.Poll(context.Background())
	if st := tr.Status(); st.Pending != 2 {
		t.Fatalf("before istiod loaded the set: %+v", st)
	}
	a.loadsAt(1, setV1, skewed(proxy(gw("1"), 7)), skewed(proxy(gw("2"), 7)))
	tr.Poll(context.Background())
	a.set(setV1, skewed(proxy(gw("1"), 8)), skewed(withNack(proxy(gw("2"), 7), 8, "bad listener")))
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Synced != 1 || st.NACKed != 1 || st.Proxy("gw-1.istio-system").State != Synced || st.Proxy("gw-2.istio-system").Message != "LDS: bad listener" {
		t.Errorf("with skewed clocks: %+v", st)
	}
}

// A proxy that was connected and no istiod reports any more is listed
// silent, with when it was last seen; not while an istiod doesn't answer
// (its proxies can't be told apart), not once it is back, and not after
// SilentMemory.
func TestSilentProxies(t *testing.T) {
	a := newIstiod(t)
	a.set(setV1, proxy(gw("1"), 7), proxy(gw("2"), 7))
	tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
	clock := since
	tr.now = func() time.Time { return clock }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Silent) != 0 || st.Selected != 2 {
		t.Fatalf("both connected: %+v", st)
	}
	clock = clock.Add(time.Minute)
	a.set(setV1, proxy(gw("1"), 8))
	tr.Poll(context.Background())
	st := tr.Status()
	if len(st.Silent) != 1 || st.Silent[0].Name != "gw-2.istio-system" || st.Silent[0].Type != "gateway" || !st.Silent[0].LastSeen.Equal(since) {
		t.Fatalf("gw-2 gone: %+v", st.Silent)
	}
	if !strings.HasSuffix(st.Summary(), "; 1 silent") {
		t.Errorf("summary %q", st.Summary())
	}
	// A second istiod that doesn't answer: nothing can be called silent.
	tr.Source = Static{a.URL, "http://127.0.0.1:1"}
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Silent) != 0 {
		t.Errorf("with an istiod down: %+v", st.Silent)
	}
	tr.Source = Static{a.URL}
	// A new generation still remembers it.
	tr.Track(generation("v2", setV1))
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Silent) != 1 {
		t.Errorf("after a new set: %+v", st.Silent)
	}
	// Back: no longer silent.
	a.set(setV1, proxy(gw("1"), 9), proxy(gw("2"), 9))
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Silent) != 0 {
		t.Errorf("back: %+v", st.Silent)
	}
	// Gone for longer than SilentMemory: forgotten.
	a.set(setV1, proxy(gw("1"), 10))
	clock = clock.Add(SilentMemory + time.Minute)
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Silent) != 0 {
		t.Errorf("after %v: %+v", SilentMemory, st.Silent)
	}
}

type expectedList []Expected

func (e expectedList) Expected() ([]Expected, bool) { return e, e != nil }

// A running pod with an Istio proxy that no istiod reports is listed
// unconnected once ConnectGrace has passed on the tracker's clock (with
// when its pod started), not before, not when the set doesn't reach it,
// not when it connects, and not while the pod list is unknown.
func TestUnconnectedProxies(t *testing.T) {
	a := newIstiod(t)
	a.set(setV1, proxy(gw("1"), 7))
	tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
	clock := since
	tr.now = func() time.Time { return clock }
	podStart := since.Add(-time.Hour)
	tr.Expected = expectedList{
		{Name: "gw-1.istio-system", Kind: "gateway", Since: podStart},
		{Name: "gw-9.istio-system", Kind: "gateway", Since: podStart},
		{Name: "app-0.default", Kind: "sidecar", Since: podStart}, // a gateway set does not reach it
	}
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Unconnected) != 0 {
		t.Fatalf("within the grace: %+v", st.Unconnected)
	}
	clock = clock.Add(ConnectGrace)
	tr.Poll(context.Background())
	st := tr.Status()
	if len(st.Unconnected) != 1 || st.Unconnected[0] != (Unconnected{Name: "gw-9.istio-system", Type: "gateway", Since: podStart}) {
		t.Fatalf("after the grace: %+v", st.Unconnected)
	}
	if !strings.HasSuffix(st.Summary(), "; 1 never connected") {
		t.Errorf("summary %q", st.Summary())
	}
	tr.Expected = expectedList(nil)
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Unconnected) != 0 {
		t.Errorf("with the pod list unknown: %+v", st.Unconnected)
	}
	tr.Expected = expectedList{{Name: "gw-9.istio-system", Kind: "gateway", Since: podStart}}
	a.set(setV1, proxy(gw("1"), 8), proxy(gw("9"), 8))
	tr.Poll(context.Background())
	if st := tr.Status(); len(st.Unconnected) != 0 {
		t.Errorf("connected: %+v", st.Unconnected)
	}
}

func TestExpectedFromPods(t *testing.T) {
	started := metav1.NewTime(since)
	pod := func(name string, labels, annotations map[string]string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels, Annotations: annotations},
			Status: corev1.PodStatus{Phase: phase, StartTime: &started}}
	}
	injected := map[string]string{LabelCanonicalName: "x"}
	got := ExpectedFromPods([]*corev1.Pod{
		pod("app", injected, nil, corev1.PodRunning),
		pod("gw", injected, map[string]string{AnnotationTemplates: "gateway"}, corev1.PodRunning),
		pod("kgw", map[string]string{LabelCanonicalName: "x", LabelGatewayName: "g", LabelGatewayClass: "istio"}, nil, corev1.PodRunning),
		pod("waypoint", map[string]string{LabelCanonicalName: "x", LabelGatewayName: "w", LabelGatewayClass: "istio-waypoint"}, nil, corev1.PodRunning),
		pod("done", injected, nil, corev1.PodSucceeded),
		pod("plain", nil, nil, corev1.PodRunning),
	})
	want := []Expected{{Name: "app.ns", Kind: "sidecar", Since: since, Labels: injected},
		{Name: "gw.ns", Kind: "gateway", Since: since, Labels: injected},
		{Name: "kgw.ns", Kind: "gateway", Since: since, Labels: map[string]string{LabelCanonicalName: "x", LabelGatewayName: "g", LabelGatewayClass: "istio"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// An unrelated push (another EnvoyFilter's) that istiod sends in the same
// instant as the set reaches its store is not the set's: the gateways'
// ACK of it does not count, and their NACK of the set's own push does.
// The tracker's first look finds the store without the set (lo 5); the
// unrelated push 6 is sent and ACKed, then the store holds the set, then
// push 7 (the set's) is NACKed by every gateway.
func TestCoincidentPushIsNotTheSets(t *testing.T) {
	a := newIstiod(t)
	a.set(map[string]string{}, proxy(gw("1"), 5), proxy(gw("2"), 5))
	tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
	tr.slice = 2 * time.Second
	tr.now = func() time.Time { return since }
	tr.Track(generation("v1", setV1))
	// The second read of the store holds the set, and push 6 (sent just
	// before it loaded the set) is ACKed by then.
	a.loadsAt(2, setV1, proxy(gw("1"), 6), proxy(gw("2"), 6))
	tr.Poll(context.Background())
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 0 || st.Pending != 2 {
		t.Fatalf("an ACK of the unrelated push 6 was counted: %+v", st.Proxies)
	}
	a.set(setV1, withNack(proxy(gw("1"), 6), 7, "bad listener"), withNack(proxy(gw("2"), 6), 7, "bad listener"))
	tr.Poll(context.Background())
	if st := tr.Status(); st.NACKed != 2 {
		t.Fatalf("the set's own push 7, NACKed by both gateways: %+v", st.Proxies)
	}
}

// Delivering reads every istiod just before delivery, and watches its
// store while delivery goes on: Track of the set takes what it found. A
// push sent between the baseline and the set reaching the store (the
// unrelated 6) does not count; the set's own push (7) does. Delivering
// the set again reads nothing.
func TestDeliveringBaseline(t *testing.T) {
	a := newIstiod(t)
	a.set(map[string]string{"istio-system/globalconfig-x": "hash-v0"}, proxy(gw("1"), 5))
	var reads sync.Map
	tr := NewTracker(Static{a.URL}, &Client{Read: func(endpoint string, _ int) {
		n, _ := reads.LoadOrStore(endpoint, new(int))
		*n.(*int)++
	}}, time.Minute)
	tr.now = func() time.Time { return since }
	set := []*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}
	contents := ContentsOf(set)
	// The store holds the set from the third read on (two during the
	// watch), with the unrelated push 6 ACKed by then.
	a.loadsAt(3, contents, proxy(gw("1"), 6))
	tr.Delivering(context.Background(), set, ScopeOf(set, "istio-system"))
	tr.Delivering(context.Background(), set, ScopeOf(set, "istio-system"))
	g := generation("v1", contents)
	tr.Track(g)
	if !harnessEventually(5*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.marks[a.URL].hiKnown
	}) {
		t.Fatal("the watch never found the set in istiod's store")
	}
	tr.Poll(context.Background())
	tr.mu.Lock()
	m := tr.marks[a.URL]
	tr.mu.Unlock()
	if !m.loKnown || m.hi != 6 || !m.proven {
		t.Errorf("marks lo known %v, hi %d, proven %v; want true, 6, true", m.loKnown, m.hi, m.proven)
	}
	if st := tr.Status(); st.Pending != 1 {
		t.Fatalf("the unrelated push 6 was counted: %+v", st.Proxies)
	}
	a.set(contents, proxy(gw("1"), 7))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 1 {
		t.Fatalf("the set's push 7: %+v", st.Proxies)
	}
	configz, _ := reads.Load("/debug/configz")
	if n := *configz.(*int); n != 3 {
		t.Errorf("%d reads of the store, want 3 (baseline, two while watching; none for the second Delivering or the polls)", n)
	}
	syncz, _ := reads.Load("/debug/syncz")
	if n := *syncz.(*int); n != 3 {
		t.Errorf("%d reads of the sync status, want 3 (once the store held the set, and one per poll)", n)
	}
}

// When istiod answers slower than its quiet period, the set's own push may
// have been sent before the tracker saw the store hold the set, and in a
// quiet mesh no later push comes: such a push counts when it was sent
// after the set's time, as pushes do when the store held the set at the
// first look (waiting for another would leave the proxy Pending, then
// Stale, while it holds the set); one sent before it never does.
func TestUnprovenPushesCountBySendTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		sent time.Time
		want State
	}{
		{"sent after the set's time", since.Add(time.Second), Synced},
		{"sent before it", since.Add(-time.Second), Pending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newIstiod(t)
			a.set(map[string]string{}, proxy(gw("1"), 5))
			tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
			tr.slice = 2 * time.Second
			tr.now = func() time.Time { return since }
			var mu sync.Mutex
			mono := time.Now()
			tr.mono = func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				mono = mono.Add(50 * time.Millisecond) // every look at the clock: 50ms later
				return mono
			}
			tr.Track(generation("v1", setV1))
			p6 := proxy(gw("1"), 6)
			for u, r := range p6.Resources {
				r.SentTime = tc.sent
				p6.Resources[u] = r
			}
			a.loadsAt(2, setV1, p6)
			tr.Poll(context.Background())
			if p := tr.Status().Proxy("gw-1.istio-system"); p.State != tc.want {
				t.Fatalf("push 6, unproven, %s: %+v, want %s", tc.name, p, tc.want)
			}
			a.set(setV1, proxy(gw("1"), 7))
			tr.Poll(context.Background())
			if p := tr.Status().Proxy("gw-1.istio-system"); p.State != Synced {
				t.Fatalf("push 7: %+v", p)
			}
		})
	}
}

func harnessEventually(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if f() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return f()
}

// A push istiod started just before it loaded the set, and sends a few
// milliseconds after the tracker saw the store hold the set, is not the
// set's either: hi is read half istiod's quiet period after the last look
// at a store without the set.
func TestPushInFlightWhenTheSetLands(t *testing.T) {
	a := newIstiod(t)
	a.set(map[string]string{}, proxy(gw("1"), 5))
	tr := NewTracker(Static{a.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since }
	tr.Track(generation("v1", setV1))
	a.mu.Lock()
	a.onConfigz = func(n int) {
		if n == 2 {
			a.held = setV1
			// The unrelated push 6, built before, is sent 5ms later.
			time.AfterFunc(5*time.Millisecond, func() { a.set(setV1, proxy(gw("1"), 6)) })
		}
	}
	a.mu.Unlock()
	tr.Poll(context.Background())
	time.Sleep(20 * time.Millisecond)
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 0 || st.Proxies[0].acked != nonce(6) {
		t.Fatalf("the push in flight, 6, was counted: %+v", st.Proxies)
	}
	a.set(setV1, proxy(gw("1"), 7))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 1 {
		t.Fatalf("the set's push 7: %+v", st.Proxies)
	}
}

// A set no proxy has yet (the gateways still connecting) is asked about
// again within FastPoll: a proxy that connects just after the set is
// counted within a second, not after SlowPoll.
func TestNoProxyYetPollsFast(t *testing.T) {
	srv := newIstiod(t)
	srv.set(setV1)
	tr := NewTracker(Static{srv.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(2 * time.Second) }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	if next := tr.Poll(context.Background()); next != FastPoll {
		t.Errorf("no proxy yet: next poll in %v, want %v", next, FastPoll)
	}
	srv.set(setV1, proxy("router~1~gw-0.istio-system~x", 4))
	tr.Poll(context.Background())
	if next := tr.Poll(context.Background()); next != SlowPoll {
		t.Errorf("the gateway synced: next poll in %v, want %v", next, SlowPoll)
	}
}
