package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/test/fakekube"
)

// memberFixture is a controller with member clusters whose API servers
// are fake clientsets; their informers really run (on the fakes), so each
// test waits for the member's cache to list before it syncs.
type memberFixture struct {
	*fixture
	clients map[string]*istiofake.Clientset
	version int
}

func newMemberFixture(t *testing.T, names ...string) *memberFixture {
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	m := &memberFixture{clients: map[string]*istiofake.Clientset{}}
	for _, n := range names {
		c := istiofake.NewSimpleClientset()
		fakekube.ServerSideApply(c, &m.version)
		m.clients[n] = c
	}
	m.fixture = newFixture(t, Config{ClusterName: "a", MemberClient: func(mb members.Member) (istioclient.Interface, error) {
		return m.clients[mb.Name], nil
	}})
	return m
}

// setMembers makes names the members and waits until their caches listed.
func (m *memberFixture) setMembers(ctx context.Context, names ...string) {
	m.t.Helper()
	var ms []members.Member
	for _, n := range names {
		ms = append(ms, members.Member{Name: n, Secret: "istio-system/member-" + n, Fingerprint: n})
	}
	m.ctrl.SetMembers(ctx, ms, nil)
	targets, _, _ := m.ctrl.members.snapshot()
	deadline := time.Now().Add(10 * time.Second)
	for _, t := range targets {
		for !t.synced() {
			if time.Now().After(deadline) {
				m.t.Fatalf("member %s never listed its EnvoyFilters", t.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (m *memberFixture) memberLive(name string) map[string]string {
	m.t.Helper()
	list, err := m.clients[name].NetworkingV1alpha3().EnvoyFilters("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		m.t.Fatal(err)
	}
	out := map[string]string{}
	for _, ef := range list.Items {
		out[ef.Namespace+"/"+ef.Name] = ef.ResourceVersion
	}
	return out
}

func TestMembersGetTheSetAndTheStatusSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newMemberFixture(t, "b")
	f.putConfig(docV1)
	f.setMembers(ctx, "b")
	f.mustSync()
	home, b := f.live(), f.memberLive("b")
	if len(home) == 0 || len(b) != len(home) {
		t.Fatalf("home holds %d EnvoyFilters and member b %d, want the same non-zero number", len(home), len(b))
	}
	st := f.status()
	if len(st.Clusters) != 2 || st.Clusters[0].Name != "a" || !st.Clusters[0].Home || st.Clusters[1].Name != "b" {
		t.Fatalf("status clusters = %+v, want the home a then member b", st.Clusters)
	}
	for _, c := range st.Clusters {
		if !c.Reachable || c.Set != st.Applied.Hash || c.Objects != len(home) || c.Since == nil || c.Error != "" {
			t.Errorf("cluster %s = %+v, want reachable, holding set %s with %d objects", c.Name, c, st.Applied.Hash, len(home))
		}
	}
	if st.Clusters[1].Secret != "istio-system/member-b" {
		t.Errorf("member b's Secret = %q", st.Clusters[1].Secret)
	}

	// Nothing changed: no write anywhere, once the member's cache shows
	// what was written.
	before := f.memberLive("b")
	f.deliver()
	time.Sleep(200 * time.Millisecond) // the member's informer is real: let it see its objects
	f.mustSync()
	if got := f.memberLive("b"); len(got) != len(before) || !sameVersions(got, before) {
		t.Errorf("a sync with nothing changed wrote to member b: %v → %v", before, got)
	}

	// Drift in the member is repaired.
	for key := range before {
		ns, name, _ := strings.Cut(key, "/")
		if err := f.clients["b"].NetworkingV1alpha3().EnvoyFilters(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		break
	}
	time.Sleep(200 * time.Millisecond)
	f.mustSync()
	if got := f.memberLive("b"); len(got) != len(home) {
		t.Errorf("member b holds %d EnvoyFilters after a deletion and a sync, want %d again", len(got), len(home))
	}

	// The member's Secret removed: no longer managed, its EnvoyFilters stay.
	kept := f.memberLive("b")
	f.setMembers(ctx)
	f.putConfig(strings.Replace(docV1, "8192", "4096", 1))
	f.mustSync()
	if got := f.memberLive("b"); !sameVersions(got, kept) {
		t.Errorf("member b's EnvoyFilters after its Secret went and an edit = %v, want them kept as they were: %v", got, kept)
	}
	if got := f.live(); sameVersions(got, home) {
		t.Error("the edit did not reach the home cluster")
	}
	if st := f.status(); len(st.Clusters) != 1 || st.Clusters[0].Name != "a" {
		t.Errorf("status clusters after the member went = %+v, want only the home cluster", st.Clusters)
	}
}

func sameVersions(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

func TestAMemberThatRefusesIsNamedAndRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newMemberFixture(t, "b", "c")
	refuse := true
	f.clients["c"].PrependReactor("patch", "envoyfilters", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !refuse {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.istio.io", Resource: "envoyfilters"}, a.(k8stesting.PatchAction).GetName(),
			errFake(`User "reader" cannot patch resource "envoyfilters" in API group "networking.istio.io" in the namespace "istio-system"`))
	})
	f.putConfig(docV1)
	f.setMembers(ctx, "b", "c")
	err := f.sync()
	if err == nil || !strings.Contains(err.Error(), "cluster c") {
		t.Fatalf("sync = %v, want an error naming cluster c, so that it is retried", err)
	}
	if len(f.live()) == 0 || len(f.memberLive("b")) == 0 {
		t.Fatal("a member that refuses held back the home cluster or another member")
	}
	st := f.status()
	c := st.Clusters[2]
	if c.Name != "c" || c.Reachable || !strings.Contains(c.Error, "patch") || !strings.Contains(c.Error, "envoyfilters") {
		t.Errorf("member c = %+v, want unreachable with an error naming the verb and the resource", c)
	}
	if !strings.Contains(st.Message, "cluster c") {
		t.Errorf("status message %q does not name cluster c", st.Message)
	}
	if !strings.Contains(strings.Join(f.events(), "\n"), "MemberNotReached") {
		t.Errorf("no MemberNotReached Event: %v", f.events())
	}
	// Its credentials fixed: the retry converges without an edit.
	refuse = false
	f.mustSync()
	if st := f.status(); !st.Clusters[2].Reachable || len(f.memberLive("c")) == 0 {
		t.Errorf("member c after the retry = %+v, want it reached", st.Clusters[2])
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

func TestNoMembersNoClustersInTheStatus(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	if st := f.status(); st.Clusters != nil {
		t.Errorf("a single-cluster status lists clusters: %+v", st.Clusters)
	}
}
