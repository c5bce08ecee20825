package plan_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/plan"
)

// A change of where an item goes (target.clusters) alone is a write: the
// live EnvoyFilter's clusters annotation is kept true, and a plan shows
// it. Objects for every cluster compare as before.
func TestClustersAnnotationIsCompared(t *testing.T) {
	_, every := renderDoc(t, docV1)
	_, some := renderDoc(t, "target: {clusters: [eu-west-1]}\n"+docV1)
	_, more := renderDoc(t, "target: {clusters: [eu-west-1, us-east-1]}\n"+docV1)
	live := applied(t, some)
	if !plan.Equal(live[0], some[0]) {
		t.Fatal("an applied object with clusters is not equal to what it was applied from")
	}
	if got := live[0].Annotations[envoyfilter.AnnotationClusters]; got != "eu-west-1" {
		t.Errorf("applied clusters annotation %q", got)
	}
	if plan.Equal(live[0], more[0]) {
		t.Error("a live object for eu-west-1 equals one for eu-west-1 and us-east-1")
	}
	if plan.Equal(live[0], every[0]) || plan.Equal(applied(t, every)[0], some[0]) {
		t.Error("an object for some clusters equals the same spec for every cluster")
	}
	if !plan.Equal(applied(t, every)[0], every[0]) {
		t.Error("an object for every cluster is not equal to itself applied")
	}
	y, err := plan.LiveYAML(live[0])
	if err != nil || !strings.Contains(string(y), envoyfilter.AnnotationClusters+": eu-west-1") {
		t.Errorf("the live object as a diff shows it lacks its clusters: %v\n%s", err, y)
	}
}
