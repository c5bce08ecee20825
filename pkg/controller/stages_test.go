package controller

import (
	"context"
	"maps"
	"strings"
	"testing"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/test/fakekube"
)

// stagedCanaryDoc is doc under a rollout across clusters a (the home
// cluster) then b, canaries first inside each.
func stagedCanaryDoc(doc string) string {
	return "rollout:\n  strategy: Canary\n  clusters: [[a], [b]]\n  bakeTime: 1s\n" + doc
}

// contents are the EnvoyFilters a cluster's API server holds: name →
// content hash of the spec.
func contents(t *testing.T, c *istiofake.Clientset) map[string]string {
	t.Helper()
	return fakekube.LiveIn(t, c, "")
}

// TestStagedCanaryGivesTheFirstStagesCanariesOnly: under strategy Canary
// with rollout.clusters, every cluster's set is paired by the canary
// label, and an edit first changes only the canary copies in the first
// stage's cluster: the stable copies there, and everything in the next
// stage's cluster, stay as they were.
func TestStagedCanaryGivesTheFirstStagesCanariesOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newMemberFixture(t, "b")
	f.setMembers(ctx, "b")
	f.putConfig(stagedCanaryDoc(docV1))
	f.mustSync()
	f.deliver()
	homeV1, bV1 := contents(t, f.istio), contents(t, f.clients["b"])
	// The first set goes to every cluster at once, paired.
	for _, name := range []string{"globalconfig-gzip", "globalconfig-gzip-canary", "globalconfig-headers", "globalconfig-headers-canary"} {
		if homeV1[name] == "" || bV1[name] == "" {
			t.Fatalf("%s missing: home holds %v, b %v", name, keys(homeV1), keys(bV1))
		}
	}
	if !maps.Equal(homeV1, bV1) {
		t.Fatalf("the first set differs between the clusters: %v, %v", homeV1, bV1)
	}
	if st := f.status(); st.ClusterRollout != nil {
		t.Errorf("the first set went at once, yet a rollout is recorded: %+v", st.ClusterRollout)
	}

	f.putConfig(stagedCanaryDoc(strings.Replace(docV1, "8192", "4096", 1)))
	f.mustSync()
	f.deliver()
	home, b := contents(t, f.istio), contents(t, f.clients["b"])
	if home["globalconfig-gzip-canary"] == homeV1["globalconfig-gzip-canary"] {
		t.Error("a's canary copy of gzip was not given the change")
	}
	for _, name := range []string{"globalconfig-gzip", "globalconfig-headers", "globalconfig-headers-canary"} {
		if home[name] != homeV1[name] {
			t.Errorf("a's %s changed in the canary part: only the changed item's canary copy may", name)
		}
	}
	if !maps.Equal(b, bV1) {
		t.Errorf("b, the next stage, was written while a's canaries are judged: %v → %v", bV1, b)
	}
	r := f.status().ClusterRollout
	if r == nil || r.Phase != canary.Progressing || r.Stage != 0 || r.StagePhase != canary.StageCanaries || r.Label != canary.DefaultLabel || r.BakeTime != "1s" {
		t.Fatalf("clusterRollout = %+v", r)
	}
	// A resync writes nothing new anywhere. No tracker here: a's
	// canaries are never heard from, and the stage holds (fail closed).
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a resync wrote %v", w)
	}
	if msg := f.status().Message; !strings.Contains(msg, "stage 1 of 2 (a), its proxies labelled globalconfig.io/canary=true only, waits for a: its istiods have not answered for the change yet") {
		t.Errorf("message %q", msg)
	}
	if got := contents(t, f.clients["b"]); !maps.Equal(got, bV1) {
		t.Errorf("b written on a resync: %v", got)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
