package multicluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// bound is how long a scenario waits for one step: the controller's
// delivery, istiod's debounce and push, each gateway's ACK and the
// tracker's next poll take well under it on a loaded machine.
const bound = 60 * time.Second

// rateLimitFilter is the HTTP filter localRateLimit inserts.
const rateLimitFilter = "envoy.filters.http.local_ratelimit"

// limitOf3 allows 3 requests a minute at each gateway: the 4th of a
// quick burst is answered 429 by the gateway itself.
const limitOf3 = "localRateLimit:\n  maxTokens: 3\n  tokensPerFill: 3\n  fillInterval: 60s\n"

func putConfig(ctx context.Context, t *testing.T, doc string) {
	t.Helper()
	if err := siteA.PutConfig(ctx, doc); err != nil {
		t.Fatal(err)
	}
}

// waitStatus waits until the status in cluster a satisfies cond, and
// returns it; it fails t naming what, with the last status seen.
func waitStatus(ctx context.Context, t *testing.T, what string, cond func(*status.Status) bool) *status.Status {
	t.Helper()
	var last *status.Status
	if !harness.Eventually(ctx, bound, func() bool {
		st, err := siteA.Status(ctx)
		if err != nil {
			return false
		}
		last = st
		return cond(st)
	}) {
		t.Fatalf("%s: not within %s; last status:\n%s", what, bound, describe(last))
	}
	return last
}

// describe is a status as a failing test shows it.
func describe(st *status.Status) string {
	if st == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "state %s: %s\n", st.State, st.Message)
	for _, c := range st.Clusters {
		fmt.Fprintf(&b, "cluster %s home=%v reachable=%v set=%s objects=%d error=%q\n", c.Name, c.Home, c.Reachable, c.Set, c.Objects, c.Error)
	}
	if st.Rollout != nil {
		fmt.Fprintf(&b, "rollout %s: %s\n", st.Rollout.Version, st.Rollout.Summary())
		for _, m := range st.Rollout.Clusters {
			fmt.Fprintf(&b, "  member %+v\n", m)
		}
		for _, p := range st.Rollout.Proxies {
			fmt.Fprintf(&b, "  proxy %s/%s %s %s\n", p.Cluster, p.Name, p.State, p.Message)
		}
	}
	if r := st.ClusterRollout; r != nil {
		fmt.Fprintf(&b, "clusterRollout %s stage %d of %v: %s; failed %+v\n", r.Phase, r.Stage, r.Stages, r.Why, r.Failed)
	}
	return b.String()
}

// entry is cluster name's entry in st.
func entry(st *status.Status, name string) (status.Cluster, bool) {
	for _, c := range st.Clusters {
		if c.Name == name {
			return c, true
		}
	}
	return status.Cluster{}, false
}

// holds says every cluster of names is reached and holds the applied set.
func holds(st *status.Status, names ...string) bool {
	if st.Applied == nil {
		return false
	}
	for _, n := range names {
		if c, ok := entry(st, n); !ok || !c.Reachable || c.Set != st.Applied.Hash {
			return false
		}
	}
	return true
}

// syncedIn says the rollout counts every proxy of each cluster of names
// Synced (one gateway each).
func syncedIn(st *status.Status, names ...string) bool {
	r := st.Rollout
	if r == nil || st.Applied == nil || r.Version != st.Applied.Hash {
		return false
	}
	for _, n := range names {
		m, ok := r.Member(n)
		if !ok || m.Selected == 0 || m.Synced != m.Selected {
			return false
		}
	}
	return true
}

// managed are the names of the EnvoyFilters globalconfig manages in s.
func managed(ctx context.Context, t *testing.T, s *site) []string {
	t.Helper()
	list, err := s.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil {
		t.Fatalf("list the managed EnvoyFilters of cluster %s: %v", s.Name, err)
	}
	var out []string
	for _, ef := range list.Items {
		out = append(out, ef.Name)
	}
	slices.Sort(out)
	return out
}

// rejects counts the answers 429 of a burst of n requests through s's
// gateway.
func rejects(ctx context.Context, t *testing.T, s *site, n int) int {
	t.Helper()
	got := 0
	for range n {
		r, err := get(ctx, s.URL("/echo"))
		if err != nil {
			t.Fatalf("a request through the gateway of cluster %s: %v", s.Name, err)
		}
		if r.status == http.StatusTooManyRequests {
			got++
		}
	}
	return got
}

// waitFilter waits until s's gateway's active listeners have (or lack)
// filter, by its own config dump.
func waitFilter(ctx context.Context, t *testing.T, s *site, filter string, want bool) {
	t.Helper()
	var err error
	if !harness.Eventually(ctx, bound, func() bool {
		var has bool
		has, err = s.hasHTTPFilter(ctx, filter)
		return err == nil && has == want
	}) {
		t.Fatalf("the gateway of cluster %s (Envoy %s): %s present is not %v within %s (%v)", s.Name, s.Gateway.Binary.Version, filter, want, bound, err)
	}
}

// applyMemberRBAC applies deploy/member in s: the least RBAC a member
// gives the controller (what create-member-secret creates).
func applyMemberRBAC(ctx context.Context, t *testing.T, s *site) {
	t.Helper()
	if out, err := s.Kubectl(ctx, nil, "apply", "--server-side", "-k", filepath.Join(harness.RepoRoot(), "deploy", "member")); err != nil {
		t.Fatalf("apply deploy/member in cluster %s: %v\n%s", s.Name, err, out)
	}
}

// An edit reaches both clusters' gateways, with the member's least RBAC;
// the status shows both clusters holding the set and their proxies
// Synced; target.clusters then limits the item to one cluster.
func TestEditReachesEveryCluster(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	applyMemberRBAC(ctx, t, siteB)
	addMember(ctx, t, siteB, harness.MemberUser)
	putConfig(ctx, t, limitOf3)
	runController(t)
	st := waitStatus(ctx, t, "both clusters hold the set and their gateways ACKed it", func(st *status.Status) bool {
		return st.State == status.Applied && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	if home, _ := entry(st, "a"); !home.Home || home.Objects == 0 {
		t.Errorf("home entry %+v", home)
	}
	if b, _ := entry(st, "b"); b.Secret != ns+"/"+harness.SecretNameFor("globalconfig-member-", "b") || b.Since == nil {
		t.Errorf("member entry %+v", b)
	}
	for _, s := range sites {
		waitFilter(ctx, t, s, rateLimitFilter, true)
		if n := rejects(ctx, t, s, 6); n < 3 {
			t.Errorf("the gateway of cluster %s answered 429 to %d of 6 requests, want at least 3 past its limit of 3", s.Name, n)
		}
	}
	if got, want := managed(ctx, t, siteB), managed(ctx, t, siteA); !slices.Equal(got, want) {
		t.Errorf("cluster b holds %v, cluster a %v", got, want)
	}

	t.Run("target.clusters limits an item to one member", func(t *testing.T) {
		putConfig(ctx, t, limitOf3+"  target:\n    clusters: [a]\n")
		st := waitStatus(ctx, t, "the item in a only", func(st *status.Status) bool {
			b, _ := entry(st, "b")
			return holds(st, "a", "b") && b.Objects == 0 && syncedIn(st, "a")
		})
		if a, _ := entry(st, "a"); a.Objects != 1 {
			t.Errorf("cluster a holds %d EnvoyFilters of the set, want 1", a.Objects)
		}
		waitFilter(ctx, t, siteB, rateLimitFilter, false)
		if got := managed(ctx, t, siteB); len(got) != 0 {
			t.Errorf("cluster b still holds %v", got)
		}
		if n := rejects(ctx, t, siteB, 6); n != 0 {
			t.Errorf("the gateway of cluster b answered 429 to %d of 6 requests, with no limit there", n)
		}
		waitFilter(ctx, t, siteA, rateLimitFilter, true)
		if n := rejects(ctx, t, siteA, 6); n < 3 {
			t.Errorf("the gateway of cluster a answered 429 to %d of 6 requests, want at least 3 past its limit of 3", n)
		}
		// A name that is no cluster is refused, naming the known ones.
		putConfig(ctx, t, limitOf3+"  target:\n    clusters: [c]\n")
		st = waitStatus(ctx, t, "an unknown cluster refused", func(st *status.Status) bool { return st.State == status.Invalid })
		if len(st.Errors) != 1 || st.Errors[0].Path != "localRateLimit.target.clusters[0]" || !strings.Contains(st.Errors[0].Message, `unknown cluster "c": the members are a, b`) {
			t.Errorf("errors %+v", st.Errors)
		}
	})
}

// A member Secret added at runtime brings that cluster to the current
// set without an edit; one whose credentials may only read gives an
// error naming the member, the verb and the resource.
func TestMemberAddedAtRuntime(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	doc := limitOf3
	putConfig(ctx, t, doc)
	runController(t)
	waitStatus(ctx, t, "the home cluster holds the set", func(st *status.Status) bool {
		r := st.Rollout
		return st.State == status.Applied && st.Applied != nil && r != nil && r.Version == st.Applied.Hash && r.Selected == 1 && r.Synced == 1
	})
	if got := managed(ctx, t, siteB); len(got) != 0 {
		t.Fatalf("cluster b holds %v before it is a member", got)
	}
	sec := addMember(ctx, t, siteB, harness.ControllerUser)
	waitStatus(ctx, t, "member b brought to the set without an edit", func(st *status.Status) bool {
		return holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	waitFilter(ctx, t, siteB, rateLimitFilter, true)

	t.Run("read-only credentials", func(t *testing.T) {
		reader, err := memberSecret(siteB, harness.ReaderUser)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := siteA.Admin.CoreV1().Secrets(ns).Get(ctx, sec.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Data = reader.Data
		if _, err := siteA.Admin.CoreV1().Secrets(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The next change needs a write in b.
		putConfig(ctx, t, strings.Replace(doc, "maxTokens: 3", "maxTokens: 4", 1))
		// (Until the new credentials listed b's EnvoyFilters, b's entry
		// says they could not be listed yet.)
		st := waitStatus(ctx, t, "b's refusal named", func(st *status.Status) bool {
			b, ok := entry(st, "b")
			return ok && !b.Reachable && strings.Contains(b.Error, "forbidden")
		})
		b, _ := entry(st, "b")
		for _, want := range []string{`User "reader" cannot patch resource "envoyfilters"`, "globalconfig-local-rate-limit"} {
			if !strings.Contains(b.Error, want) && !strings.Contains(b.Error, strings.Split(want, " ")[0]) {
				t.Errorf("b's error %q does not say %q", b.Error, want)
			}
		}
		if !strings.Contains(b.Error, "patch") || !strings.Contains(b.Error, "envoyfilters") {
			t.Errorf("b's error %q does not name the verb and the resource", b.Error)
		}
		if !strings.Contains(st.Message, "cluster b") {
			t.Errorf("the status message %q does not name cluster b", st.Message)
		}
		if !holds(st, "a") {
			t.Errorf("a member that refuses held the home cluster back:\n%s", describe(st))
		}
	})
}

// rollout.clusters [[a], [b]]: a change the first stage's gateway NACKs
// is rolled back in a, and b never receives it.
func TestStagesStopAtANACK(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	addMember(ctx, t, siteB, harness.ControllerUser)
	base := "rollout:\n  clusters: [[a], [b]]\n  progressDeadline: 2m\ngzip:\n  minContentLength: 100\n"
	putConfig(ctx, t, base)
	runController(t, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set in both clusters", func(st *status.Status) bool {
		return st.State == status.Applied && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	// A hand-written EnvoyFilter in a that Envoy refuses once the rate
	// limit filter is there: only a's gateway NACKs the change.
	poisonA(ctx, t)
	before := managed(ctx, t, siteB)
	stop := watchManaged(ctx, t, siteB)
	putConfig(ctx, t, base+limitOf3)
	st := waitStatus(ctx, t, "rolled back after a's NACK", func(st *status.Status) bool {
		return st.State == status.RolledBack && st.ClusterRollout != nil && st.ClusterRollout.Phase == canary.ClustersRolledBack
	})
	r := st.ClusterRollout
	if len(r.Failed) != 1 || r.Failed[0].Cluster != "a" || !strings.Contains(r.Failed[0].Reason, "cache_time") {
		t.Errorf("failed clusters %+v, want a with Envoy's words", r.Failed)
	}
	if !strings.Contains(st.Message, "b") {
		t.Errorf("message %q does not say b never got the change", st.Message)
	}
	waitStatus(ctx, t, "a holds the previous set again", func(st *status.Status) bool {
		a, _ := entry(st, "a")
		return a.Reachable && a.Set == r.From
	})
	if seen := stop(); len(seen) > 0 {
		t.Errorf("cluster b received EnvoyFilters of the change: %v", seen)
	}
	if got := managed(ctx, t, siteB); !slices.Equal(got, before) {
		t.Errorf("cluster b holds %v, had %v", got, before)
	}
	for _, s := range sites {
		if has, err := s.hasHTTPFilter(ctx, rateLimitFilter); err != nil || has {
			t.Errorf("the gateway of cluster %s has the rate limit filter: %v %v", s.Name, has, err)
		}
		if n := rejects(ctx, t, s, 5); n != 0 {
			t.Errorf("the gateway of cluster %s answered 429 %d times", s.Name, n)
		}
	}
}

// watchManaged records every managed EnvoyFilter created in s from now
// on, until the returned function is called: it returns their names.
func watchManaged(ctx context.Context, t *testing.T, s *site) func() []string {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue}
	list, err := s.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	sel.ResourceVersion = list.ResourceVersion
	w, err := s.Istio.NetworkingV1alpha3().EnvoyFilters("").Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 1)
	go func() {
		var names []string
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(metav1.Object); ok && (ev.Type == "ADDED" || ev.Type == "MODIFIED") {
				names = append(names, string(ev.Type)+" "+obj.GetName())
			}
		}
		seen <- names
	}()
	return func() []string { w.Stop(); return <-seen }
}

// B's API server stopped during an edit: a is updated, b's stage holds
// and the status names b and the error; b's API server back, b converges
// without an edit.
func TestMemberDownHoldsItsStage(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	addMember(ctx, t, siteB, harness.ControllerUser)
	base := "rollout:\n  clusters: [[a], [b]]\n  progressDeadline: 3m\ngzip:\n  minContentLength: 100\n"
	putConfig(ctx, t, base)
	ctl := runController(t, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set in both clusters", func(st *status.Status) bool {
		return st.State == status.Applied && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	siteB.KillAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = siteB.StartAPIServer(context.Background())
		}
	})
	putConfig(ctx, t, base+limitOf3)
	st := waitStatus(ctx, t, "a updated, b's stage held and named", func(st *status.Status) bool {
		b, _ := entry(st, "b")
		r := st.ClusterRollout
		return r != nil && r.Phase == canary.Progressing && r.Stage == 1 && holds(st, "a") && syncedIn(st, "a") && !b.Reachable && b.Error != ""
	})
	if !strings.Contains(st.Message, "b") || !strings.Contains(st.ClusterRollout.Why, "b") {
		t.Errorf("the status does not name b: message %q, why %q", st.Message, st.ClusterRollout.Why)
	}
	waitFilter(ctx, t, siteA, rateLimitFilter, true)
	if has, _ := siteB.hasHTTPFilter(ctx, rateLimitFilter); has {
		t.Error("b's gateway has the change while its API server is down")
	}
	// The record is in the status: a controller that restarts mid-stage
	// goes on where the last one was, and never starts the rollout over.
	started := st.ClusterRollout.Started
	ctl.Kill()
	runController(t, "--rollout-timeout=15s")
	st = waitStatus(ctx, t, "a new controller holds b's stage too", func(st *status.Status) bool {
		b, _ := entry(st, "b")
		r := st.ClusterRollout
		return r != nil && r.Phase == canary.Progressing && r.Stage == 1 && holds(st, "a") && !b.Reachable && b.Error != ""
	})
	if !st.ClusterRollout.Started.Equal(started) {
		t.Errorf("the restarted controller started the rollout over: started %s, was %s", st.ClusterRollout.Started, started)
	}
	if err := siteB.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitStatus(ctx, t, "b converged without an edit", func(st *status.Status) bool {
		r := st.ClusterRollout
		return r != nil && r.Phase == canary.Complete && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	waitFilter(ctx, t, siteB, rateLimitFilter, true)
}

// rollout.clusters [[a], [b]] with rollout.analysis: a change that breaks
// a's traffic (a body limit that refuses half the requests, which a
// answers itself with 413) is rolled back on a's own statistics against
// b's, and b never receives it.
func TestStagesStopAtBrokenTraffic(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	ctx := context.Background()
	addMember(ctx, t, siteB, harness.ControllerUser)
	base := "rollout:\n  clusters: [[a], [b]]\n  minSuccessTime: 8s\n  progressDeadline: 2m\n" +
		"  analysis:\n    localReplies: true\n    minRequests: 20\n    insufficientTraffic: RollBack\n" +
		"gzip:\n  minContentLength: 100\n"
	putConfig(ctx, t, base)
	runController(t, "--rollout-timeout=15s", statsArgs(siteA, siteB))
	waitStatus(ctx, t, "the first set in both clusters", func(st *status.Status) bool {
		return st.State == status.Applied && holds(st, "a", "b") && syncedIn(st, "a", "b")
	})
	l := startLoad(ctx, t, siteA, siteB)
	stop := watchManaged(ctx, t, siteB)
	putConfig(ctx, t, base+"requestBody:\n  maxSize: 100\n")
	st := waitStatus(ctx, t, "rolled back on a's traffic", func(st *status.Status) bool {
		return st.State == status.RolledBack && st.ClusterRollout != nil && st.ClusterRollout.Phase == canary.ClustersRolledBack
	})
	r := st.ClusterRollout
	if len(r.Failed) != 1 || r.Failed[0].Cluster != "a" || !strings.Contains(r.Failed[0].Reason, "local") {
		t.Errorf("failed clusters %+v, want a, on its local replies", r.Failed)
	}
	if l.Count(siteA.Name, http.StatusRequestEntityTooLarge) == 0 {
		t.Error("a's gateway never refused a body: the change did not reach it")
	}
	if n := l.Count(siteB.Name, http.StatusRequestEntityTooLarge); n != 0 {
		t.Errorf("b's gateway refused %d bodies: it got the change", n)
	}
	waitStatus(ctx, t, "a holds the previous set again", func(st *status.Status) bool {
		a, _ := entry(st, "a")
		return a.Reachable && a.Set == r.From && syncedIn(st, "a")
	})
	if seen := stop(); len(seen) > 0 {
		t.Errorf("cluster b received EnvoyFilters of the change: %v", seen)
	}
	// Back on the previous set, a passes bodies again.
	time.Sleep(2 * time.Second)
	l.Reset()
	time.Sleep(2 * time.Second)
	if n, ok := l.Count(siteA.Name, http.StatusRequestEntityTooLarge), l.Count(siteA.Name, http.StatusOK); n != 0 || ok == 0 {
		t.Errorf("after the roll back a's gateway answered %d × 413 and %d × 200", n, ok)
	}
}

// poisonA applies, in cluster a only, a hand-written EnvoyFilter that
// Envoy refuses once the rate limit filter is in the chain, removed when
// the test ends: a's gateways NACK a change that adds localRateLimit.
func poisonA(ctx context.Context, t *testing.T) {
	t.Helper()
	poison, err := harness.PoisonAfterRateLimit()
	if err != nil {
		t.Fatal(err)
	}
	if err := siteA.Apply(ctx, poison); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = siteA.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(context.Background(), poison.Metadata.Name, metav1.DeleteOptions{})
	})
}
