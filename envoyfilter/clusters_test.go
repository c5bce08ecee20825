package envoyfilter_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Each problem of a target.clusters list is reported at its element,
// every one at once; Istio cluster IDs pass.
func TestTargetClustersValidation(t *testing.T) {
	long := strings.Repeat("a", envoyfilter.MaxClusterNameLength)
	ok := envoyfilter.Target{Clusters: []string{"Kubernetes", "eu-west-1", "cluster_2.prod", "a", long}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid cluster names refused: %v", err)
	}
	bad := envoyfilter.Target{Clusters: []string{"", long + "a", "-eu", "eu-", "eu west", "eu-west-1", "eu-west-1", "eü"}}
	got := map[string]string{}
	for _, fe := range fielderr.Flatten(bad.Validate()) {
		got[fe.Path] = fe.Msg
	}
	for path, want := range map[string]string{
		"clusters[0]": "must not be empty",
		"clusters[1]": "is 64 bytes; at most 63 are allowed",
		"clusters[2]": `"-eu" must be letters, digits, '.', '_' and '-', starting and ending with a letter or digit`,
		"clusters[3]": `"eu-" must be letters`,
		"clusters[4]": `"eu west" must be letters`,
		"clusters[6]": `cluster "eu-west-1" is listed twice (also at clusters[5]); name each cluster once`,
		"clusters[7]": `"eü" must be letters`,
	} {
		if !strings.Contains(got[path], want) {
			t.Errorf("%s: %q, want it to say %q", path, got[path], want)
		}
		delete(got, path)
	}
	if len(got) > 0 {
		t.Errorf("unexpected problems: %v", got)
	}
}

// An item's clusters replace the document's when given, even as an empty
// list (every cluster); left out, the document's stay.
func TestTargetClustersOverride(t *testing.T) {
	doc := envoyfilter.Target{Clusters: []string{"a"}}
	if got := doc.Override(envoyfilter.Target{Namespace: "gateways"}).Clusters; !slices.Equal(got, []string{"a"}) {
		t.Errorf("left out: %v, want the document's [a]", got)
	}
	if got := doc.Override(envoyfilter.Target{Clusters: []string{"b", "c"}}).Clusters; !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("given: %v, want [b c]", got)
	}
	if got := doc.Override(envoyfilter.Target{Clusters: []string{}}); got.Clusters == nil || len(got.Clusters) != 0 {
		t.Errorf("an empty list: %v, want it to clear the document's", got.Clusters)
	}
}

// A target limited to clusters gives an EnvoyFilter that says so in its
// annotation (sorted, comma-joined) and nothing else: name, spec and
// content hash are those of the same target without clusters.
func TestObjectCarriesItsClusters(t *testing.T) {
	all, err := envoyfilter.NewObject("gzip", compression, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all.Metadata.Annotations[envoyfilter.AnnotationClusters]; ok || envoyfilter.ClustersOf(all) != nil {
		t.Errorf("an object for every cluster carries %s: %v", envoyfilter.AnnotationClusters, all.Metadata.Annotations)
	}
	tg := envoyfilter.DefaultTarget()
	tg.Clusters = []string{"us-east-1", "eu-west-1"}
	some, err := envoyfilter.NewObject("gzip", compression, tg, []envoyfilter.Patch{gzipFilter(t, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	if got := some.Metadata.Annotations[envoyfilter.AnnotationClusters]; got != "eu-west-1,us-east-1" {
		t.Errorf("annotation %q, want eu-west-1,us-east-1", got)
	}
	if got := envoyfilter.ClustersOf(some); !slices.Equal(got, []string{"eu-west-1", "us-east-1"}) {
		t.Errorf("ClustersOf = %v", got)
	}
	if !slices.Equal(tg.Clusters, []string{"us-east-1", "eu-west-1"}) {
		t.Errorf("rendering reordered the target's own list: %v", tg.Clusters)
	}
	if some.Metadata.Name != all.Metadata.Name || some.Hash() != all.Hash() {
		t.Errorf("clusters changed the name or content hash: %s %s, want %s %s", some.Metadata.Name, some.Hash(), all.Metadata.Name, all.Hash())
	}
}

// ForCluster keeps, in the set's order, the objects for every cluster and
// those that name the one asked for.
func TestForCluster(t *testing.T) {
	obj := func(item string, clusters ...string) *envoyfilter.Object {
		tg := envoyfilter.DefaultTarget()
		tg.Clusters = clusters
		o, err := envoyfilter.NewObject(item, compression, tg, []envoyfilter.Patch{gzipFilter(t, 4096)})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	set := []*envoyfilter.Object{obj("brotli", "b", "c"), obj("gzip"), obj("tracing", "a"), obj("zstd", "c")}
	names := func(objs []*envoyfilter.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Item())
		}
		return out
	}
	for cluster, want := range map[string][]string{
		"a":     {"gzip", "tracing"},
		"b":     {"brotli", "gzip"},
		"c":     {"brotli", "gzip", "zstd"},
		"other": {"gzip"},
		// A name that is a prefix of a listed one is not that one.
		"b,c": {"gzip"},
	} {
		if got := names(envoyfilter.ForCluster(set, cluster)); !slices.Equal(got, want) {
			t.Errorf("ForCluster(%q) = %v, want %v", cluster, got, want)
		}
	}
	if len(set) != 4 || set[0].Item() != "brotli" {
		t.Error("ForCluster changed the set it was given")
	}
}
