package render_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// members is a member list that changes while a Renderer holds it, as
// the controller's does when a member Secret comes or goes.
type members struct {
	mu    sync.Mutex
	names []string
}

func (m *members) set(names ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names = names
}

func (m *members) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.names)
}

const clustersDoc = `target:
  clusters: [eu-west-1]
gzip:
  chunkSize: 8192
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
  target:
    clusters: [Kubernetes, us-east-1]
`

// A name that is not a config cluster is refused at its element, with
// its line and the known names; the verdict follows the member list from
// render to render, with no edit of the document.
func TestClustersAreCheckedAgainstTheMembers(t *testing.T) {
	var m members
	m.set("Kubernetes", "eu-west-1")
	r := render.New()
	r.SetClusters(m.list)
	data := map[string]string{document.DataKey: clustersDoc}

	res := r.FromConfigMap(data)
	if res.Valid() || len(res.Problems) != 1 {
		t.Fatalf("a member that is not there: valid %v, problems %v", res.Valid(), res.Problems)
	}
	p := res.Problems[0]
	if p.Path != "tracing.target.clusters[1]" || p.Line != 9 || p.Msg != `unknown cluster "us-east-1": the members are Kubernetes, eu-west-1` {
		t.Errorf("problem %q at %s line %d", p.Msg, p.Path, p.Line)
	}

	m.set("us-east-1", "eu-west-1", "Kubernetes")
	res = r.FromConfigMap(data)
	if !res.Valid() || len(res.Warnings) != 0 {
		t.Fatalf("after us-east-1 joined: problems %v, warnings %v", res.Problems, res.Warnings)
	}
	if len(res.Objects) != 2 {
		t.Fatalf("%d objects, want gzip and tracing", len(res.Objects))
	}

	m.set("us-east-1", "Kubernetes")
	res = r.FromConfigMap(data)
	if res.Valid() || len(res.Problems) != 1 || res.Problems[0].Path != "target.clusters[0]" ||
		res.Problems[0].Msg != `unknown cluster "eu-west-1": the members are Kubernetes, us-east-1` {
		t.Errorf("after eu-west-1 left: problems %v", res.Problems)
	}
}

// With no cluster known (the offline `globalconfig validate`) the names
// are not checked, and a warning says so at each list.
func TestUncheckedClustersWarn(t *testing.T) {
	for _, known := range []func() []string{nil, func() []string { return nil }} {
		r := render.New()
		r.SetClusters(known)
		res := r.FromConfigMap(map[string]string{document.DataKey: clustersDoc})
		if !res.Valid() {
			t.Fatalf("problems %v", res.Problems)
		}
		var paths []string
		for _, w := range res.Warnings {
			paths = append(paths, w.Path)
			if !strings.Contains(w.Msg, "not checked") || w.Line == 0 {
				t.Errorf("warning %q at line %d", w.Msg, w.Line)
			}
		}
		if !slices.Equal(paths, []string{"target.clusters", "tracing.target.clusters"}) {
			t.Errorf("warnings at %v, want the document's list and tracing's", paths)
		}
	}
	res := render.New().FromConfigMap(map[string]string{document.DataKey: base})
	if !res.Valid() || len(res.Warnings) != 0 {
		t.Errorf("a document that names no cluster: problems %v, warnings %v", res.Problems, res.Warnings)
	}
}

// Each item's EnvoyFilter carries its own cluster list (inherited from
// the document's target, its own, or none when it lists none), and
// differs from the same item's without clusters in that annotation only.
func TestClustersRenderToTheirObjects(t *testing.T) {
	src := `target:
  clusters: [us-east-1, eu-west-1]
gzip:
  chunkSize: 8192
brotli:
  target:
    clusters: []
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
  target:
    clusters: [Kubernetes]
`
	objs, err := render.Desired(parse(t, src))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range objs {
		got[o.Item()] = strings.Join(envoyfilter.ClustersOf(o), " ")
	}
	want := map[string]string{"brotli": "", "gzip": "eu-west-1 us-east-1", "tracing": "Kubernetes"}
	if len(got) != len(want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	for item, w := range want {
		if got[item] != w {
			t.Errorf("%s goes to %q, want %q", item, got[item], w)
		}
	}
	for member, items := range map[string][]string{
		"Kubernetes": {"brotli", "tracing"},
		"eu-west-1":  {"brotli", "gzip"},
		"elsewhere":  {"brotli"},
	} {
		var names []string
		for _, o := range envoyfilter.ForCluster(objs, member) {
			names = append(names, o.Item())
		}
		if !slices.Equal(names, items) {
			t.Errorf("%s gets %v, want %v", member, names, items)
		}
	}

	plain, err := render.Desired(parse(t, strings.NewReplacer(
		"  clusters: [us-east-1, eu-west-1]\n", "  namespace: istio-system\n",
		"    clusters: [Kubernetes]\n", "    namespace: istio-system\n").Replace(src)))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		stripped := *o
		stripped.Metadata.Annotations = map[string]string{}
		for k, v := range o.Metadata.Annotations {
			if k != envoyfilter.AnnotationClusters {
				stripped.Metadata.Annotations[k] = v
			}
		}
		a, _ := stripped.YAML()
		b, _ := plain[i].YAML()
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from its render without clusters beyond %s:\n%s\n%s", o.Item(), envoyfilter.AnnotationClusters, a, b)
		}
	}
}

// A change of an item's clusters alone is a change of that item: the
// diff says so and the item is rebuilt.
func TestClustersChangeIsAnItemChange(t *testing.T) {
	d := diff(t, base, strings.Replace(base, "gzip:\n", "gzip:\n  target: {clusters: [eu-west-1]}\n", 1))
	if !slices.Equal(d.Changed, []string{"gzip"}) || !slices.Equal(d.Unchanged, []string{"tracing"}) {
		t.Errorf("diff %+v, want gzip changed and tracing unchanged", d)
	}
}

// A set's hash is what it was before cluster lists existed when no object
// has one (the status's lastAppliedHash and stored records stay valid),
// and a change of where an item goes alone is a new set.
func TestSetHashCountsClusters(t *testing.T) {
	objs, err := render.Desired(parse(t, base))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, o := range objs {
		fmt.Fprintf(h, "%s/%s=%s\n", o.Metadata.Namespace, o.Metadata.Name, o.Hash())
	}
	if got, want := render.SetHash(objs), hex.EncodeToString(h.Sum(nil))[:16]; got != want {
		t.Errorf("a set without clusters hashes to %s, want %s as before", got, want)
	}
	hashOf := func(clusters string) string {
		objs, err := render.Desired(parse(t, "target: {clusters: ["+clusters+"]}\n"+base))
		if err != nil {
			t.Fatal(err)
		}
		return render.SetHash(objs)
	}
	a, ab, ba := hashOf("a"), hashOf("a, b"), hashOf("b, a")
	if a == render.SetHash(objs) || a == ab {
		t.Errorf("sets that differ only in their clusters share a hash: %s %s %s", render.SetHash(objs), a, ab)
	}
	if ab != ba {
		t.Errorf("the same clusters in another order give another set: %s %s", ab, ba)
	}
}

// Items that Envoy refuses beside each other on one proxy are refused
// when their cluster lists meet, and admitted when no cluster gets both.
func TestClustersSeparateConflictingItems(t *testing.T) {
	doc := func(a, b string) string {
		return "target: {context: SIDECAR_INBOUND}\nclientIP:\n  target: {clusters: [" + a + "]}\n  trustedCIDRs: [\"10.0.0.0/8\"]\nheaders:\n  target: {clusters: [" + b + "]}\n  xff: {trustedHops: 1}\n"
	}
	if res := render.New().FromConfigMap(map[string]string{document.DataKey: doc("eu-west-1", "us-east-1, ap-south-1")}); !res.Valid() {
		t.Errorf("items in clusters of their own: %v", res.Problems)
	}
	res := render.New().FromConfigMap(map[string]string{document.DataKey: doc("eu-west-1", "us-east-1, eu-west-1")})
	if res.Valid() || !strings.Contains(render.Describe(res.Problems, "\n"), "can't be beside headers.xff.trustedHops") {
		t.Errorf("items that meet in eu-west-1: %v", res.Problems)
	}
}

// A disabled item goes nowhere: the clusters it names are checked for
// their form, not against the members.
func TestDisabledItemClustersAreNotMembersChecked(t *testing.T) {
	r := render.New()
	r.SetClusters(func() []string { return []string{"Kubernetes"} })
	src := "tracing:\n  enable: false\n  target: {clusters: [gone]}\n"
	if res := r.FromConfigMap(map[string]string{document.DataKey: src}); !res.Valid() || len(res.Warnings) != 0 {
		t.Errorf("a disabled item naming a member that left: problems %v, warnings %v", res.Problems, res.Warnings)
	}
	if res := r.FromConfigMap(map[string]string{document.DataKey: strings.Replace(src, "false", "true\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}", 1)}); res.Valid() {
		t.Error("the same item enabled was admitted")
	}
	if res := r.FromConfigMap(map[string]string{document.DataKey: strings.Replace(src, "gone", "-gone", 1)}); res.Valid() {
		t.Error("a disabled item's malformed cluster name was admitted")
	}
}
