package envoycheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// The documents of the grouping tests. The first two are valid: their
// clientIP and headers.xff can never reach one proxy, by selector or by
// namespace; gzip, on every sidecar, reaches the proxies of both.
const (
	disjointSelectors = `target: {context: SIDECAR_INBOUND}
gzip: {}
clientIP:
  target: {selector: {app: storefront}}
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  target: {selector: {app: billing}}
  xff: {trustedHops: 1}
`
	disjointNamespaces = `target: {context: SIDECAR_INBOUND}
gzip: {}
clientIP:
  target: {namespace: shop}
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  target: {namespace: billing}
  xff: {trustedHops: 1}
`
	// disjointClusters has them in config clusters of their own
	// (target.clusters): no proxy is in both.
	disjointClusters = `target: {context: SIDECAR_INBOUND}
gzip: {}
clientIP:
  target: {clusters: [eu-west-1]}
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  target: {clusters: [us-east-1, ap-south-1]}
  xff: {trustedHops: 1}
`
)

func renderDoc(t *testing.T, doc string) []*envoyfilter.Object {
	t.Helper()
	res := render.New().FromConfigMap(map[string]string{"config.yaml": doc})
	if !res.Valid() {
		t.Fatalf("%s\n%s", doc, render.Describe(res.Problems, "\n"))
	}
	// The renderer's objects share their patch values with its caches
	// (envoyfilter.Check's memo): tests that change them get copies.
	out := make([]*envoyfilter.Object, len(res.Objects))
	for i, o := range res.Objects {
		c := *o
		c.Spec = proto.Clone(o.Spec).(*networking.EnvoyFilter)
		out[i] = &c
	}
	return out
}

// groupItems lists each group as "PROXIES: item,item".
func groupItems(t *testing.T, objs []*envoyfilter.Object) []string {
	t.Helper()
	gs, err := groupsOf(objs, "1.32.0")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gs {
		var names []string
		for _, p := range g.patches {
			if !slices.Contains(names, p.item) {
				names = append(names, p.item)
			}
		}
		slices.Sort(names)
		r := Result{Context: g.context.String(), Namespace: g.namespace, Selector: g.selector, Clusters: g.clusters}
		out = append(out, r.Proxies()+": "+strings.Join(names, ","))
	}
	return out
}

// Patches whose targets can never reach one proxy are loaded apart, each
// beside every patch that reaches its proxies too; a document of one
// target is one load per context, as before.
func TestGroupsFollowTheTargets(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      []string
	}{
		{"one target", "gzip: {}\nbrotli: {}\n", []string{"GATEWAY: brotli,gzip"}},
		{"disjoint selectors", disjointSelectors, []string{
			"SIDECAR_INBOUND proxies labelled app=billing: gzip,headers",
			"SIDECAR_INBOUND proxies labelled app=storefront: clientIP,gzip",
		}},
		{"disjoint namespaces", disjointNamespaces, []string{
			"SIDECAR_INBOUND proxies in namespace billing: gzip,headers",
			"SIDECAR_INBOUND proxies in namespace shop: clientIP,gzip",
		}},
		{"disjoint clusters", disjointClusters, []string{
			"SIDECAR_INBOUND proxies of cluster eu-west-1: clientIP,gzip",
			"SIDECAR_INBOUND proxies of clusters ap-south-1, us-east-1: gzip,headers",
		}},
		{"clusters that meet", "target: {context: SIDECAR_INBOUND}\ngzip:\n  target: {clusters: [a, b]}\nbrotli:\n  target: {clusters: [b, c]}\nzstd: {}\n",
			[]string{"SIDECAR_INBOUND proxies of cluster b: brotli,gzip,zstd"}},
		{"selectors that meet", "target: {context: SIDECAR_INBOUND}\ngzip:\n  target: {selector: {app: storefront}}\nbrotli:\n  target: {selector: {tier: web}}\n",
			[]string{"SIDECAR_INBOUND proxies labelled app=storefront,tier=web: brotli,gzip"}},
		{"a namespace and the root", "target: {context: SIDECAR_INBOUND}\ngzip:\n  target: {namespace: shop}\nbrotli: {}\n",
			[]string{"SIDECAR_INBOUND proxies in namespace shop: brotli,gzip"}},
		{"ANY reaches every context", "gzip:\n  target: {context: ANY, selector: {app: a}}\nbrotli: {}\n", []string{
			"GATEWAY proxies labelled app=a: brotli,gzip",
			"SIDECAR_INBOUND proxies labelled app=a: gzip",
			"SIDECAR_OUTBOUND proxies labelled app=a: gzip",
		}},
	} {
		got := groupItems(t, renderDoc(t, c.doc))
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: groups\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// The groups are exactly the largest sets of targets that can reach one
// proxy: generated targets over a few namespaces and labels, checked
// against the definition (every pair in a group overlaps by the rule
// validation uses, every overlapping pair and triple is in some group, no
// group holds another) rather than against a second implementation.
func TestGroupsAreTheLargestSetsThatMeet(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 1))
	namespaces := []string{"", envoyfilter.DefaultNamespace, "shop", "billing"}
	for round := range 300 {
		n := 1 + rng.IntN(9)
		ps := make([]patch, n)
		for i := range ps {
			sel := map[string]string{}
			for _, k := range []string{"app", "tier", "version"} {
				if rng.IntN(3) == 0 {
					sel[k] = fmt.Sprint(rng.IntN(2))
				}
			}
			var clusters []string
			for _, c := range []string{"a", "b", "c"} {
				if rng.IntN(3) == 0 {
					clusters = append(clusters, c)
				}
			}
			ps[i] = patch{item: fmt.Sprint(i), target: envoyfilter.Target{Namespace: namespaces[rng.IntN(len(namespaces))], Selector: sel, Clusters: clusters}}
		}
		gs, err := groupsIn(networking.EnvoyFilter_GATEWAY, ps, maxGroups)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		meet := func(a, b patch) bool {
			return itemsOverlap(a.target, b.target)
		}
		sets := make([][]string, len(gs))
		for gi, g := range gs {
			for _, a := range g.patches {
				sets[gi] = append(sets[gi], a.item)
				for _, b := range g.patches {
					if !meet(a, b) {
						t.Errorf("round %d: %v and %v can't reach one proxy, and are loaded together", round, a.target, b.target)
					}
				}
			}
		}
		together := func(members ...string) bool {
			return slices.ContainsFunc(sets, func(s []string) bool {
				return !slices.ContainsFunc(members, func(m string) bool { return !slices.Contains(s, m) })
			})
		}
		for i := range ps {
			for j := range ps {
				if meet(ps[i], ps[j]) && !together(ps[i].item, ps[j].item) {
					t.Errorf("round %d: %v and %v can reach one proxy, and are never loaded together", round, ps[i].target, ps[j].target)
				}
				for k := range ps {
					if meet(ps[i], ps[j]) && meet(ps[j], ps[k]) && meet(ps[i], ps[k]) && !together(ps[i].item, ps[j].item, ps[k].item) {
						t.Errorf("round %d: %v, %v and %v can reach one proxy, and are never loaded together", round, ps[i].target, ps[j].target, ps[k].target)
					}
				}
			}
		}
		for a := range sets {
			for b := range sets {
				if a != b && !slices.ContainsFunc(sets[a], func(m string) bool { return !slices.Contains(sets[b], m) }) {
					t.Errorf("round %d: group %v is inside group %v: one Envoy run too many", round, sets[a], sets[b])
				}
			}
		}
	}
}

// itemsOverlap is the rule validation uses, for targets of one context.
func itemsOverlap(a, b envoyfilter.Target) bool {
	a.Context, b.Context = envoyfilter.ContextGateway, envoyfilter.ContextGateway
	return items.Overlap(a, b)
}

// The number of Envoy runs is the number of groups: one for a document of
// one target (as before grouping), one per group of proxies otherwise.
// A stand-in Envoy counts its runs and accepts everything.
func TestOneRunPerGroup(t *testing.T) {
	dir := t.TempDir()
	path, runs := filepath.Join(dir, "envoy"), filepath.Join(dir, "runs")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL'; exit 0; fi\n" +
		"echo run >> '" + runs + "'\nexit 0\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := envoybin.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]int{
		"gzip: {}\nbrotli: {}\n": 1,
		disjointSelectors:        2,
		disjointNamespaces:       2,
		disjointClusters:         2,
	} {
		if err := os.Remove(runs); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		rep, err := Check(context.Background(), bin, renderDoc(t, doc))
		if err != nil || !rep.OK() || len(rep.Results) != want {
			t.Fatalf("%s: %+v, %v; want %d accepted groups", doc, rep, err, want)
		}
		data, _ := os.ReadFile(runs)
		if got := strings.Count(string(data), "run"); got != want {
			t.Errorf("%s: %d Envoy runs, want %d", doc, got, want)
		}
	}
}

// Targets that split the proxies into more groups than the check runs
// Envoy for are an error that says so, not a partial check.
func TestTooManyGroups(t *testing.T) {
	var ps []patch
	for i := range 6 { // six keys of two values: 64 kinds of proxy
		for v := range 2 {
			ps = append(ps, patch{item: fmt.Sprint(i, v), target: envoyfilter.Target{Selector: map[string]string{fmt.Sprint("k", i): fmt.Sprint(v)}}})
		}
	}
	_, err := groupsIn(networking.EnvoyFilter_GATEWAY, ps, maxGroups)
	if err == nil || !strings.Contains(err.Error(), "more than 32 groups that never meet") {
		t.Errorf("64 groups: %v", err)
	}
	if gs, err := groupsIn(networking.EnvoyFilter_GATEWAY, ps[:10], maxGroups); err != nil || len(gs) != 32 {
		t.Errorf("32 groups: %d, %v", len(gs), err)
	}
}

// What grouping adds to a check of the example (one target: one group),
// beside sorting by context alone; an Envoy run is about 80 ms.
func BenchmarkGroups(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "global-config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	res := render.New().FromConfigMap(map[string]string{"config.yaml": configYAML(b, raw)})
	if !res.Valid() {
		b.Fatal(render.Describe(res.Problems, "\n"))
	}
	b.Run("byContext", func(b *testing.B) {
		for b.Loop() {
			if _, err := byContext(res.Objects, "1.32.0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("groupsOf", func(b *testing.B) {
		for b.Loop() {
			if gs, err := groupsOf(res.Objects, "1.32.0"); err != nil || len(gs) != 1 {
				b.Fatal(len(gs), err)
			}
		}
	})
}

// configYAML is the document of a ConfigMap manifest.
func configYAML(tb testing.TB, manifest []byte) string {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(manifest, &cm); err != nil {
		tb.Fatal(err)
	}
	return cm.Data["config.yaml"]
}
