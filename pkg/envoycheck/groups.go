package envoycheck

import (
	"fmt"
	"maps"
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// maxGroups bounds the Envoy runs of one check: each group of proxies is
// one run of about 80 ms, and the webhook's check must end within its
// timeout (3 s by default). A document needs more only when its items'
// targets split the mesh into that many kinds of proxy that never meet.
const maxGroups = 32

// group is the patches one representative proxy gets: those whose
// EnvoyFilters' targets are a largest set of targets that can all reach
// one proxy of the context.
type group struct {
	context networking.EnvoyFilter_PatchContext
	// namespace and selector describe the proxies every target of the
	// group reaches: namespace "" is every namespace, selector the union
	// of the targets' selectors.
	namespace string
	selector  map[string]string
	// clusters are the config clusters every target of the group that
	// names some goes to (nil: every cluster).
	clusters []string
	patches  []patch
}

// groupsOf sorts the patches of objs that reach a proxy of Istio release
// istio ("1.32.0") into groups of proxies, by context (in the order
// contexts lists them), then by the groups' first targets in the order
// the patches have (istiod's: by priority).
func groupsOf(objs []*envoyfilter.Object, istio string) ([]group, error) {
	byCtx, err := byContext(objs, istio)
	if err != nil {
		return nil, err
	}
	var out []group
	for _, c := range contexts {
		ps := byCtx[c]
		if len(ps) == 0 {
			continue
		}
		gs, err := groupsIn(c, ps, maxGroups-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, gs...)
	}
	return out, nil
}

// groupsIn splits ps, the patches of context c, into one group per
// largest set of their targets that overlap pairwise (items.Overlap): a
// set of selectors that agree pairwise has one workload all of them
// match, and a set of namespaces that meet pairwise has at most one that
// is not the root, so such a set reaches one proxy together, and no
// larger set does. Cluster lists that meet pairwise may still have no
// cluster in common ([a b], [b c], [a c]): such a group is one no proxy
// holds whole, a stricter check, never a looser one. limit bounds the
// groups.
func groupsIn(c networking.EnvoyFilter_PatchContext, ps []patch, limit int) ([]group, error) {
	ctx := envoyfilter.Context(c.String())
	var targets []envoyfilter.Target
	of := make([]int, len(ps)) // the index of each patch's target
	for i, p := range ps {
		t := envoyfilter.Target{Context: ctx, Namespace: p.target.Namespace, Selector: p.target.Selector, Clusters: p.target.Clusters}
		j := slices.IndexFunc(targets, func(u envoyfilter.Target) bool {
			return u.Namespace == t.Namespace && maps.Equal(u.Selector, t.Selector) && slices.Equal(u.Clusters, t.Clusters)
		})
		if j < 0 {
			j = len(targets)
			targets = append(targets, t)
		}
		of[i] = j
	}
	meets := make([][]bool, len(targets))
	for i := range targets {
		meets[i] = make([]bool, len(targets))
		for j := range targets {
			meets[i][j] = i != j && items.Overlap(targets[i], targets[j])
		}
	}
	cliques, ok := maximalCliques(meets, limit)
	if !ok {
		return nil, fmt.Errorf("the EnvoyFilters' targets (namespaces and workload selectors) split the %s proxies into more than %d groups that never meet, each an Envoy run: the check loads at most %d in all", c, limit, maxGroups)
	}
	out := make([]group, 0, len(cliques))
	for _, members := range cliques {
		g := group{context: c, selector: map[string]string{}}
		for _, m := range members {
			if ns := targets[m].Namespace; ns != "" && ns != envoyfilter.DefaultNamespace {
				g.namespace = ns
			}
			maps.Copy(g.selector, targets[m].Selector)
		}
		if len(g.selector) == 0 {
			g.selector = nil
		}
		g.clusters = commonClusters(targets, members)
		for i, p := range ps {
			if slices.Contains(members, of[i]) {
				g.patches = append(g.patches, p)
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// commonClusters is the config clusters every target of members that
// names some goes to, sorted; nil when none names any. Lists that meet
// pairwise but have no cluster in common give their union: a group no
// one proxy holds whole, named by every cluster it spans.
func commonClusters(targets []envoyfilter.Target, members []int) []string {
	var common, union []string
	named := false
	for _, m := range members {
		cs := targets[m].Clusters
		if len(cs) == 0 {
			continue
		}
		union = append(union, cs...)
		if !named {
			common, named = slices.Clone(cs), true
			continue
		}
		common = slices.DeleteFunc(common, func(c string) bool { return !slices.Contains(cs, c) })
	}
	if !named {
		return nil
	}
	if len(common) == 0 {
		common = union
	}
	slices.Sort(common)
	return slices.Compact(common)
}

// maximalCliques lists the largest sets of vertices of the graph meets
// (an adjacency matrix) that are pairwise adjacent, each sorted, in order
// of their members (Bron–Kerbosch with a pivot). ok is false when there
// are more than limit.
func maximalCliques(meets [][]bool, limit int) (out [][]int, ok bool) {
	var grow func(r, p, x []int) bool
	grow = func(r, p, x []int) bool {
		if len(p) == 0 && len(x) == 0 {
			if len(out) == limit {
				return false
			}
			out = append(out, slices.Sorted(slices.Values(r)))
			return true
		}
		// The pivot: the vertex of p ∪ x adjacent to most of p; only
		// vertices it does not meet need a branch of their own.
		pivot, most := -1, -1
		for _, u := range append(slices.Clone(p), x...) {
			n := 0
			for _, v := range p {
				if meets[u][v] {
					n++
				}
			}
			if n > most {
				pivot, most = u, n
			}
		}
		for _, v := range slices.Clone(p) {
			if meets[pivot][v] {
				continue
			}
			adjacent := func(u int) bool { return meets[v][u] }
			if !grow(append(slices.Clone(r), v), filter(p, adjacent), filter(x, adjacent)) {
				return false
			}
			p = slices.DeleteFunc(p, func(u int) bool { return u == v })
			x = append(x, v)
		}
		return true
	}
	all := make([]int, len(meets))
	for i := range all {
		all[i] = i
	}
	if !grow(nil, all, nil) {
		return nil, false
	}
	slices.SortFunc(out, slices.Compare)
	return out, true
}

func filter(s []int, keep func(int) bool) []int {
	var out []int
	for _, v := range s {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}
