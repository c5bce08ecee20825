package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// members is a Members of name → istiod base URLs, in pairs.
func members(pairs ...string) *Members {
	m := &Members{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m.Set(pairs[i], Static{pairs[i+1]})
	}
	return m
}

// failing is a Source whose istiods can't be listed (a member's API
// server down).
type failing struct{ err error }

func (f failing) Endpoints() ([]string, error) { return nil, f.err }

// twoMembers tracks a set in members a and b, each with a gateway of the
// same name (as two clusters both run istio-ingressgateway-0): both
// stores hold the set at the first look, with push 5 sent.
func twoMembers(t *testing.T) (*Tracker, *fakeIstiod, *fakeIstiod) {
	t.Helper()
	a, b := newIstiod(t), newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	b.set(setV1, proxy(gw("1"), 5))
	tr := NewTracker(members("a", a.URL, "b", b.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	return tr, a, b
}

// Two members' gateways of the same name are two proxies, each with its
// member; the status counts them per member and overall, and reads by
// name or by member/name.
func TestTwoMembersSynced(t *testing.T) {
	tr, a, b := twoMembers(t)
	if st := tr.Status(); st.Selected != 2 || st.Pending != 2 {
		t.Fatalf("before the push carrying the set: %+v", st)
	}
	a.set(setV1, proxy(gw("1"), 6))
	b.set(setV1, proxy(gw("1"), 6))
	if next := tr.Poll(context.Background()); next != SlowPoll {
		t.Errorf("both members synced: next poll in %v, want %v", next, SlowPoll)
	}
	st := tr.Status()
	if st.Selected != 2 || st.Synced != 2 {
		t.Fatalf("counts: %+v", st)
	}
	want := []ClusterCount{{Name: "a", Istiod: 1, Selected: 1, Synced: 1}, {Name: "b", Istiod: 1, Selected: 1, Synced: 1}}
	if fmt.Sprint(st.Clusters) != fmt.Sprint(want) {
		t.Errorf("per member: %+v, want %+v", st.Clusters, want)
	}
	if len(st.Proxies) != 2 || st.Proxies[0].Cluster != "a" || st.Proxies[1].Cluster != "b" ||
		st.Proxies[0].Istiod != a.URL || st.Proxies[1].Istiod != b.URL {
		t.Errorf("each proxy with its member and istiod: %+v", st.Proxies)
	}
	if len(st.Istiod) != 2 || st.Istiod[0].Cluster != "a" || st.Istiod[1].Cluster != "b" {
		t.Errorf("each istiod with its member: %+v", st.Istiod)
	}
	if p, ok := st.Lookup("b/gw-1.istio-system"); !ok || p.Cluster != "b" || p.State != Synced {
		t.Errorf("Lookup by member/name: %+v, %v", p, ok)
	}
	if p, ok := st.Lookup("gw-1.istio-system"); !ok || p.State != Synced {
		t.Errorf("Lookup by name: %+v, %v", p, ok)
	}
	if got, want := st.Summary(), "2 proxies: 2 Synced"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// With one member (the home cluster alone) the status reads as a single
// cluster's always did: no cluster anywhere.
func TestOneMemberShowsNoCluster(t *testing.T) {
	a := newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	tr := NewTracker(members("Kubernetes", a.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	a.set(setV1, proxy(gw("1"), 6), withNack(proxy(gw("2"), 5), 6, "bad listener"))
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Synced != 1 || st.NACKed != 1 {
		t.Fatalf("counts: %+v", st)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"cluster`) {
		t.Errorf("one member's status names a cluster: %s", b)
	}
	if got, want := st.Summary(), "2 proxies: 1 NACKed, 1 Synced"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if p, ok := st.Lookup("gw-2.istio-system"); !ok || p.State != NACKed {
		t.Errorf("Lookup: %+v, %v", p, ok)
	}
}

// A NACK in member b: b's proxy is NACKed with its member, the overall
// count says NACKed, the summary names b, and the name alone (which a's
// Synced proxy shares) finds the NACKed one: an ACK in a never answers
// for b.
func TestNACKInOneMember(t *testing.T) {
	tr, a, b := twoMembers(t)
	a.set(setV1, proxy(gw("1"), 6))
	b.set(setV1, withNack(proxy(gw("1"), 5), 6, "Error adding/updating listener(s) 0.0.0.0_80: bad"))
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 2 || st.Synced != 1 || st.NACKed != 1 {
		t.Fatalf("counts: %+v", st)
	}
	if p := st.Proxies[0]; p.State != NACKed || p.Cluster != "b" || p.Name != "gw-1.istio-system" ||
		p.Message != "LDS: Error adding/updating listener(s) 0.0.0.0_80: bad" {
		t.Errorf("first listed should be b's NACKed gateway: %+v", p)
	}
	if p := st.Proxy("a/gw-1.istio-system"); p.State != Synced {
		t.Errorf("a's gateway: %+v", p)
	}
	if p, _ := st.Lookup("gw-1.istio-system"); p.State != NACKed || p.Cluster != "b" {
		t.Errorf("by name alone, the worse of the two: %+v", p)
	}
	if c := st.Clusters[1]; c.Name != "b" || c.NACKed != 1 || c.Synced != 0 {
		t.Errorf("b's counts: %+v", c)
	}
	if got, want := st.Summary(), "2 proxies: 1 NACKed, 1 Synced; held up in b (1 NACKed)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// Member b's istiod down, then b's istiods not even listable: b is an
// unreachable istiod of member b, none of its proxies is Synced or
// silent, a is judged as before, and polls stay fast. b back converges.
func TestMemberUnreachable(t *testing.T) {
	tr, a, b := twoMembers(t)
	a.set(setV1, proxy(gw("1"), 6))
	b.set(setV1, proxy(gw("1"), 6), proxy(gw("2"), 6))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 3 {
		t.Fatalf("all up: %+v", st)
	}
	src := tr.Source.(*Members)
	clock := since.Add(time.Second)
	tr.now = func() time.Time { return clock }
	for _, c := range []struct {
		name string
		src  Source
		addr string
		err  string
	}{
		{"its istiod down", Static{"http://127.0.0.1:1"}, "http://127.0.0.1:1", "connection refused"},
		{"its API server down", failing{errors.New("list EndpointSlices of Service istio-system/istiod: connection refused")}, "(discovery)",
			"member b: list EndpointSlices of Service istio-system/istiod: connection refused"},
		{"no istiod", Static{}, "(discovery)", "member b: no istiod found"},
	} {
		src.Set("b", c.src)
		clock = clock.Add(time.Minute) // b's proxies were last seen a minute ago
		if next := tr.Poll(context.Background()); next != FastPoll {
			t.Errorf("%s: next poll in %v, want %v", c.name, next, FastPoll)
		}
		st := tr.Status()
		u := st.Unreachable()
		if len(u) != 1 || u[0].Cluster != "b" || u[0].Address != c.addr || !strings.Contains(u[0].Error, c.err) {
			t.Errorf("%s: unreachable %+v, want b's %s with %q", c.name, u, c.addr, c.err)
		}
		if st.Synced != 1 || st.Selected != 1 || len(st.Silent) != 0 {
			t.Errorf("%s: only a's proxy counts, none of b's is silent: %+v", c.name, st)
		}
		if _, ok := st.Lookup("b/gw-2.istio-system"); ok {
			t.Errorf("%s: b's proxy is in the status", c.name)
		}
		if !strings.HasSuffix(st.Summary(), "; 1 of 2 istiod unreachable; held up in b (1 of 1 istiod unreachable)") {
			t.Errorf("%s: summary %q", c.name, st.Summary())
		}
	}
	src.Set("b", Static{b.URL})
	tr.Poll(context.Background())
	if st := tr.Status(); st.Synced != 3 || len(st.Unreachable()) != 0 {
		t.Errorf("b back: %+v", st)
	}
}

// A member that holds a smaller set (an object limited to a by
// target.clusters) is judged against its own contents: b's istiod holds
// only the shared object and b's gateway is Synced; a member absent from
// Generation.Clusters holds nothing of the set, and its proxies are not
// reached.
func TestMemberJudgedAgainstItsOwnSet(t *testing.T) {
	shared := map[string]string{"istio-system/globalconfig-x": "hash-v1"}
	whole := maps.Clone(shared)
	whole["istio-system/globalconfig-only-a"] = "hash-a"
	scope := ScopeOf([]*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}, "istio-system")
	a, b, c := newIstiod(t), newIstiod(t), newIstiod(t)
	a.set(whole, proxy(gw("1"), 5))
	b.set(shared, proxy(gw("2"), 5))
	c.set(map[string]string{}, proxy(gw("3"), 5))
	tr := NewTracker(members("a", a.URL, "b", b.URL, "c", c.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.slice = 50 * time.Millisecond
	tr.Track(Generation{Version: "v1", Since: since, Contents: whole, Scope: scope, Clusters: map[string]ClusterSet{
		"a": {Contents: whole, Scope: scope},
		"b": {Contents: shared, Scope: scope},
	}})
	tr.Poll(context.Background())
	a.set(whole, proxy(gw("1"), 6))
	b.set(shared, proxy(gw("2"), 6))
	c.set(map[string]string{}, proxy(gw("3"), 6))
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 2 || st.Synced != 2 {
		t.Fatalf("a and b synced, c not reached: %+v", st.Proxies)
	}
	if p, ok := st.Lookup("b/gw-2.istio-system"); !ok || p.State != Synced {
		t.Errorf("b against its own contents: %+v", p)
	}
	if cc := st.Clusters[2]; cc.Name != "c" || cc.Selected != 0 || cc.Istiod != 1 {
		t.Errorf("c: %+v", cc)
	}
	// Judged against the whole set, b would lack an object: b's proxy is
	// Pending then, saying so.
	tr.Track(Generation{Version: "v2", Since: since, Contents: whole, Scope: scope, Clusters: map[string]ClusterSet{
		"a": {Contents: whole, Scope: scope}, "b": {Contents: whole, Scope: scope},
	}})
	tr.Poll(context.Background())
	if p := tr.Status().Proxy("b/gw-2.istio-system"); p.State != Pending ||
		!strings.Contains(p.Message, "(member b) has not loaded the set (istio-system/globalconfig-only-a is missing)") {
		t.Errorf("b against the whole set: %+v", p)
	}
}

// A member removed at runtime leaves the status at the next poll: its
// istiod, its proxies (not listed silent), its counts; with one member
// left, the status names no cluster.
func TestMemberRemovedAtRuntime(t *testing.T) {
	a, b := newIstiod(t), newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	b.set(setV1, proxy(gw("2"), 5))
	src := members("a", a.URL, "b", b.URL)
	tr := NewTracker(src, &Client{}, time.Minute)
	clock := since.Add(time.Second)
	tr.now = func() time.Time { return clock }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	if st := tr.Status(); st.Selected != 2 || len(st.Clusters) != 2 {
		t.Fatalf("two members: %+v", st)
	}
	src.Remove("b")
	clock = clock.Add(time.Minute)
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 1 || len(st.Istiod) != 1 || st.Istiod[0].Address != a.URL || st.Clusters != nil || len(st.Silent) != 0 {
		t.Errorf("after b's removal: %+v", st)
	}
	if _, ok := st.Lookup("gw-2.istio-system"); ok {
		t.Error("b's proxy is still in the status")
	}
	if got := src.Names(); fmt.Sprint(got) != "[a]" {
		t.Errorf("members %v", got)
	}
}

// Two members whose istiods have the same address (overlapping pod
// address ranges) are two istiods, each asked and counted for its member.
func TestSameAddressInTwoMembers(t *testing.T) {
	a := newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	tr := NewTracker(members("a", a.URL, "b", a.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	a.set(setV1, proxy(gw("1"), 6))
	tr.Poll(context.Background())
	st := tr.Status()
	if len(st.Istiod) != 2 || st.Selected != 2 || st.Synced != 2 {
		t.Errorf("one address in two members: %+v", st)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.marks) != 2 || !tr.marks[epKey("a", a.URL)].hiKnown || !tr.marks[epKey("b", a.URL)].hiKnown {
		t.Errorf("marks per member and address: %+v", tr.marks)
	}
}

// DeliveringTo reads only the member it delivers to, just before its
// delivery, and watches that member's store: Track of a generation whose
// Clusters give that member the same contents takes what it found. The
// push sent before b's store held the set (6) does not count; b's own
// push (7) does.
func TestDeliveringToOneMember(t *testing.T) {
	a, b := newIstiod(t), newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	b.set(map[string]string{"istio-system/globalconfig-x": "hash-v0"}, proxy(gw("2"), 5))
	var mu sync.Mutex
	reads := map[string]int{}
	a.mu.Lock()
	a.onConfigz = func(int) { mu.Lock(); reads["a"]++; mu.Unlock() }
	a.mu.Unlock()
	tr := NewTracker(members("a", a.URL, "b", b.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since }
	set := []*envoyfilter.Object{gatewayFilter("istio-system", networking.EnvoyFilter_GATEWAY)}
	contents, scope := ContentsOf(set), ScopeOf(set, "istio-system")
	b.loadsAt(3, contents, proxy(gw("2"), 6))
	tr.DeliveringTo(context.Background(), "b", set, scope)
	mu.Lock()
	if reads["a"] != 0 {
		t.Errorf("a's store was read %d times for b's delivery", reads["a"])
	}
	mu.Unlock()
	tr.Track(Generation{Version: "v1", Since: since, Contents: contents, Scope: scope, Clusters: map[string]ClusterSet{
		"a": {Contents: setV1, Scope: scope}, "b": {Contents: contents, Scope: scope},
	}})
	if !harnessEventually(5*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.marks[epKey("b", b.URL)].hiKnown
	}) {
		t.Fatal("the watch never found the set in b's store")
	}
	tr.Poll(context.Background())
	tr.mu.Lock()
	m := tr.marks[epKey("b", b.URL)]
	tr.mu.Unlock()
	if !m.loKnown || m.hi != 6 {
		t.Errorf("b's mark: lo known %v, hi %d; want true, 6", m.loKnown, m.hi)
	}
	if p := tr.Status().Proxy("b/gw-2.istio-system"); p.State != Pending {
		t.Fatalf("the push sent before b's store held the set was counted: %+v", p)
	}
	b.set(contents, proxy(gw("2"), 7))
	tr.Poll(context.Background())
	if p := tr.Status().Proxy("b/gw-2.istio-system"); p.State != Synced {
		t.Errorf("b's push 7: %+v", p)
	}
}

// With 10 members of 300 gateways each, every one NACKing with a long
// message, the written status stays within MaxBytes: the counts per
// member and overall stay whole.
func TestFitTenMembers(t *testing.T) {
	src := &Members{}
	long := strings.Repeat("listener 0.0.0.0_80 refused: lua script does not load ", 20)
	var servers []*fakeIstiod
	for m := range 10 {
		ist := newIstiod(t)
		var ps []ProxySync
		for i := range 300 {
			ps = append(ps, proxy(fmt.Sprintf("router~10.1.%d.%d~istio-ingressgateway-%03d.istio-system~istio-system.svc.cluster.local", m, i%250, i), 5))
		}
		ist.set(setV1, ps...)
		servers = append(servers, ist)
		src.Set(fmt.Sprintf("eu-west-%d", m), Static{ist.URL})
	}
	tr := NewTracker(src, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.Track(generation("v1", setV1))
	tr.Poll(context.Background())
	for _, ist := range servers {
		ist.mu.Lock()
		for i, p := range ist.proxies {
			ist.proxies[i] = withNack(p, 6, long)
		}
		ist.mu.Unlock()
	}
	tr.Poll(context.Background())
	st := tr.Status()
	if st.Selected != 3000 || st.NACKed != 3000 || len(st.Clusters) != 10 {
		t.Fatalf("counts: %d selected, %d NACKed, %d members", st.Selected, st.NACKed, len(st.Clusters))
	}
	w := st.Written(func(s string) string { return s })
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxBytes {
		t.Errorf("10 members: %d bytes, over %d", len(b), MaxBytes)
	}
	if len(w.Clusters) != 10 || w.Selected != 3000 || w.NACKed != 3000 || w.Unlisted != 3000-len(w.Proxies) {
		t.Errorf("the counts were cut: %d members, %d selected, %d NACKed, %d listed, %d unlisted", len(w.Clusters), w.Selected, w.NACKed, len(w.Proxies), w.Unlisted)
	}
	for _, c := range w.Clusters {
		if c.Selected != 300 || c.NACKed != 300 {
			t.Errorf("member %s: %+v", c.Name, c)
		}
	}
	if len(w.Proxies) == 0 || w.Proxies[0].Cluster == "" || w.Proxies[0].Message != truncate("LDS: "+long, MaxMessage) {
		t.Errorf("the first NACKed proxy, whole, with its member: %+v", w.Proxies[:min(1, len(w.Proxies))])
	}
	if !strings.Contains(w.Summary(), "held up in eu-west-0 (300 NACKed), eu-west-1 (300 NACKed)") {
		t.Errorf("summary %q", w.Summary())
	}
}

// A canary phase across members: each member's canary is a canary with
// its member, a proxy without the label is unlabelled by member/name,
// and istiod's configuration is read per member: b's canary, which
// shares a's canary's name and connection ID but lacks the canary copy,
// never gets a's markers, poll after poll. Fleet names proxies by
// member/name.
func TestCanariesAcrossMembers(t *testing.T) {
	a, b := newIstiod(t), newIstiod(t)
	canary := map[string]string{"globalconfig.io/canary": "true"}
	marked := `{"configs":[{"dynamic_listeners":[{"active_state":{"listener":{"metadata":{"filter_metadata":{"globalconfig.io/canary/gzip":{"content":"abc"}}}}}}]}]}`
	for _, ist := range []*fakeIstiod{a, b} {
		ist.set(setV1, proxy(gw("1"), 5), proxy(gw("2"), 5))
		ist.labels = map[string]map[string]string{"gw-1.istio-system": canary}
	}
	b.labels["gw-2.istio-system"] = map[string]string{"globalconfig.io/canary": "false"}
	a.dumps = map[string]string{"gw-1.istio-system-1": marked}
	b.dumps = map[string]string{"gw-1.istio-system-1": `{"configs":[]}`}
	tr := NewTracker(members("a", a.URL, "b", b.URL), &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	g := generation("v1", setV1)
	g.Label, g.Markers = "globalconfig.io/canary", true
	tr.Track(g)
	tr.Poll(context.Background())
	a.set(setV1, proxy(gw("1"), 6), proxy(gw("2"), 6))
	b.set(setV1, proxy(gw("1"), 6), proxy(gw("2"), 6))
	for range 2 {
		tr.Poll(context.Background())
		st := tr.Status()
		if len(st.Canaries) != 2 || st.Canaries[0].Cluster != "a" || st.Canaries[1].Cluster != "b" {
			t.Fatalf("canaries: %+v", st.Canaries)
		}
		if m := st.Canaries[0].Markers; m["gzip"] != "abc" {
			t.Errorf("a's canary holds the canary copy: %v", m)
		}
		if m := st.Canaries[1].Markers; len(m) != 0 {
			t.Errorf("b's canary got markers it does not hold: %v", m)
		}
		if fmt.Sprint(st.Unlabelled) != "[a/gw-2.istio-system]" {
			t.Errorf("unlabelled %v", st.Unlabelled)
		}
		if fmt.Sprint(st.Stable()) != "[b/gw-2.istio-system]" {
			t.Errorf("stable %v", st.Stable())
		}
	}
	f, err := tr.Fleet(context.Background(), "globalconfig.io/canary", g.Scope)
	if err != nil || fmt.Sprint(f.Canaries) != "[a/gw-1.istio-system b/gw-1.istio-system]" || fmt.Sprint(f.Unlabelled) != "[a/gw-2.istio-system]" {
		t.Errorf("fleet %+v, %v", f, err)
	}
	tr.Source.(*Members).Set("b", Static{"http://127.0.0.1:1"})
	all, err := tr.Proxies(context.Background())
	if err == nil || !strings.Contains(err.Error(), "istiod http://127.0.0.1:1 (member b)") || len(all) != 2 || all[0].Cluster != "a" {
		t.Errorf("b down: %+v, %v", all, err)
	}
}

// Many istiods, each with a long error, are cut too: Fit never leaves a
// status over MaxBytes for want of a list to halve.
func TestFitCutsIstiodErrors(t *testing.T) {
	st := &Status{Version: "v"}
	for m := range 10 {
		for i := range 10 {
			st.Istiod = append(st.Istiod, Istiod{Address: fmt.Sprintf("http://10.%d.0.%d:8080", m, i), Cluster: fmt.Sprintf("member-%d", m),
				Error: strings.Repeat("dial tcp: lookup istiod: no such host; ", 30)})
		}
	}
	if !st.Fit(MaxBytes) {
		t.Fatal("Fit cut nothing")
	}
	b, _ := json.Marshal(st)
	if len(b) > MaxBytes || len(st.Istiod) != 100 {
		t.Errorf("%d bytes, %d istiods", len(b), len(st.Istiod))
	}
}

// The pods the controller watches are the home member's (Tracker.Home):
// their labels decide the track of the home member's proxies only (b's
// gateway of the same name keeps the labels it connected with), and a
// home pod no istiod reports is listed unconnected with its member.
func TestHomePodsAcrossMembers(t *testing.T) {
	a, b := newIstiod(t), newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	b.set(setV1, proxy(gw("1"), 5))
	tr := NewTracker(members("a", a.URL, "b", b.URL), &Client{}, time.Minute)
	clock := since
	tr.now = func() time.Time { return clock }
	tr.Home = "a"
	canary := map[string]string{"globalconfig.io/canary": "true"}
	tr.Expected = expectedList{
		{Name: "gw-1.istio-system", Kind: "gateway", Since: since, Labels: canary},
		{Name: "gw-9.istio-system", Kind: "gateway", Since: since, Labels: canary},
	}
	g := generation("v1", setV1)
	g.Label = "globalconfig.io/canary"
	tr.Track(g)
	tr.Poll(context.Background())
	clock = clock.Add(ConnectGrace)
	tr.Poll(context.Background())
	st := tr.Status()
	if len(st.Canaries) != 1 || st.Canaries[0].Cluster != "a" || fmt.Sprint(st.Unlabelled) != "[b/gw-1.istio-system]" {
		t.Errorf("the home pod's labels decide a's gateway only: canaries %+v, unlabelled %v", st.Canaries, st.Unlabelled)
	}
	if len(st.Unconnected) != 1 || st.Unconnected[0].Name != "gw-9.istio-system" || st.Unconnected[0].Cluster != "a" {
		t.Errorf("unconnected %+v", st.Unconnected)
	}
	all, err := tr.Proxies(context.Background())
	if err != nil || len(all) != 3 || all[0].Key() != "a/gw-1.istio-system" || all[0].Labels["globalconfig.io/canary"] != "true" ||
		all[1].Key() != "b/gw-1.istio-system" || all[1].Labels["globalconfig.io/canary"] != "" || all[2].Key() != "a/gw-9.istio-system" || all[2].Istiod != "" {
		t.Errorf("proxies %+v, %v", all, err)
	}
}

// A rollout across clusters moves member b on to the set later, under
// the same Version: that is a new generation (b judged against the new
// contents), in which a, whose part did not change, stays Synced (its
// istiod pushes nothing for b's change). Member gives each member's
// counts, with one member too; a member whose credentials are refused is
// named.
func TestStageMovesMemberOn(t *testing.T) {
	old := map[string]string{"istio-system/globalconfig-x": "hash-v0"}
	scope := generation("", nil).Scope
	a, b := newIstiod(t), newIstiod(t)
	a.set(setV1, proxy(gw("1"), 5))
	b.set(old, proxy(gw("2"), 5))
	src := members("a", a.URL, "b", b.URL)
	tr := NewTracker(src, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.slice = 50 * time.Millisecond
	stage := func(bHolds map[string]string) Generation {
		return Generation{Version: "v1", Since: since, Contents: setV1, Scope: scope, Clusters: map[string]ClusterSet{
			"a": {Contents: setV1, Scope: scope}, "b": {Contents: bHolds, Scope: scope}}}
	}
	tr.Track(stage(old))
	tr.Poll(context.Background())
	a.set(setV1, proxy(gw("1"), 6))
	b.set(old, proxy(gw("2"), 6))
	tr.Poll(context.Background())
	st := tr.Status()
	if ca, _ := st.Member("a"); ca.Synced != 1 || ca.HeldUp() != "" {
		t.Errorf("stage 1, a: %+v", ca)
	}
	if cb, _ := st.Member("b"); cb.Synced != 1 {
		t.Errorf("stage 1, b judged against what it still holds: %+v", cb)
	}
	tr.Track(stage(setV1))
	if tr.Status() != nil {
		t.Fatal("b moved on to the set under the same version kept the old status")
	}
	tr.Poll(context.Background())
	st = tr.Status()
	if cb, ok := st.Member("b"); !ok || cb.Pending != 1 || cb.HeldUp() != "1 Pending" {
		t.Errorf("stage 2, b before it loaded the set: %+v", cb)
	}
	if ca, _ := st.Member("a"); ca.Synced != 1 {
		t.Errorf("stage 2, a's part did not change and its istiod pushes nothing new: it stays Synced: %+v", ca)
	}
	if _, ok := st.Member("c"); ok {
		t.Error("a member never asked has counts")
	}
	src.Set("b", failing{errors.New("the server has asked for the client to provide credentials")})
	tr.Poll(context.Background())
	u := tr.Status().Unreachable()
	if len(u) != 1 || u[0].Name() != "member b" {
		t.Errorf("b's credentials refused: %+v", u)
	}
	if cb, _ := tr.Status().Member("b"); cb.HeldUp() != "1 of 1 istiod unreachable" {
		t.Errorf("b's credentials refused: %+v", cb)
	}
	// One member: Clusters is omitted, Member still counts it.
	src.Remove("b")
	tr.Poll(context.Background())
	if st := tr.Status(); st.Clusters != nil {
		t.Errorf("one member left: %+v", st.Clusters)
	} else if ca, ok := st.Member("a"); !ok || ca.Synced != 1 || ca.Istiod != 1 {
		t.Errorf("one member left, a: %+v", ca)
	}
}

// The traffic gate finds a home proxy's statistics by member/name too,
// and never a proxy of another member by its pod of the same name.
func TestPodStatsByMember(t *testing.T) {
	s := PodStats{Pods: expectedList{{Name: "gw-1.istio-system", IP: "10.0.0.7"}}, Port: DefaultStatsPort, Path: DefaultStatsPath, Home: "a"}
	for name, want := range map[string]bool{"gw-1.istio-system": true, "a/gw-1.istio-system": true, "b/gw-1.istio-system": false} {
		if u, ok := s.StatsURL(name); ok != want || ok && u != "http://10.0.0.7:15020/stats/prometheus" {
			t.Errorf("%s: %q, %v; want found %v", name, u, ok, want)
		}
	}
}

// BenchmarkPollStatic is one poll of 3,000 synced gateways behind one
// istiod of a Static source, as a single cluster is tracked.
func BenchmarkPollStatic(b *testing.B) {
	ist := newIstiod(b)
	var ps []ProxySync
	for i := range 3000 {
		ps = append(ps, proxy(fmt.Sprintf("router~10.1.0.%d~gw-%04d.istio-system~istio-system.svc.cluster.local", i%250, i), 6))
	}
	ist.set(setV1, ps...)
	tr := NewTracker(Static{ist.URL}, &Client{}, time.Minute)
	tr.now = func() time.Time { return since.Add(time.Second) }
	tr.Track(generation("v1", setV1))
	tr.mu.Lock()
	tr.marks[ist.URL] = mark{hi: 5, hiKnown: true}
	tr.mu.Unlock()
	b.ResetTimer()
	for range b.N {
		tr.Poll(context.Background())
	}
	if st := tr.Status(); st.Synced != 3000 {
		b.Fatalf("synced %d", st.Synced)
	}
}

// BenchmarkPoll is one poll of 3,000 synced gateways: behind one istiod,
// and behind ten members' istiods of 300 each.
func BenchmarkPoll(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			src := &Members{}
			for m := range n {
				ist := newIstiod(b)
				var ps []ProxySync
				for i := range 3000 / n {
					ps = append(ps, proxy(fmt.Sprintf("router~10.1.%d.%d~gw-%04d.istio-system~istio-system.svc.cluster.local", m, i%250, i), 6))
				}
				ist.set(setV1, ps...)
				src.Set(fmt.Sprintf("member-%d", m), Static{ist.URL})
			}
			tr := NewTracker(src, &Client{}, time.Minute)
			tr.now = func() time.Time { return since.Add(time.Second) }
			tr.Track(generation("v1", setV1))
			tr.mu.Lock()
			for _, name := range src.Names() {
				eps, _ := src.members[name].Endpoints()
				tr.marks[epKey(name, eps[0])] = mark{hi: 5, hiKnown: true}
			}
			tr.mu.Unlock()
			b.ResetTimer()
			for range b.N {
				tr.Poll(context.Background())
			}
			if st := tr.Status(); st.Synced != 3000 {
				b.Fatalf("synced %d", st.Synced)
			}
		})
	}
}
