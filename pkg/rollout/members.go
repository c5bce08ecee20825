package rollout

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Many clusters are one fleet: a proxy's config cluster is the cluster
// of the istiod that reports it, and each config cluster (a member) has
// its own istiods. The tracker asks every istiod of every member, tags
// each istiod and each proxy with its member, and judges each member's
// proxies against the set that member holds (Generation.Clusters). With
// one member nothing says "cluster": the status reads as it always did.

// ClusterEndpoint is one istiod of one member cluster: its member's name
// and the base URL of its HTTP debug port.
type ClusterEndpoint struct {
	Cluster, URL string
}

// ClusterSource is a Source that knows each istiod's member. The tracker
// asks it instead of Endpoints when the Source has it.
type ClusterSource interface {
	Source
	// ClusterEndpoints returns every istiod of every member it could list,
	// sorted by member then URL. A member whose istiods could not be
	// listed (or that has none) is in the error, a MemberErrors: it is an
	// unreachable istiod of that member, and nothing is promoted on its
	// proxies' missing answers.
	ClusterEndpoints() ([]ClusterEndpoint, error)
}

// MemberErrors says, per member, why its istiods could not be listed.
type MemberErrors map[string]error

func (e MemberErrors) Error() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(e)) {
		parts = append(parts, e[name].Error())
	}
	return strings.Join(parts, "; ")
}

// Members is the member clusters, each with the Source of its istiods;
// members come and go at runtime (Set, Remove). It is a ClusterSource,
// and its zero value has no member. It is safe for concurrent use.
type Members struct {
	mu      sync.Mutex
	members map[string]Source
}

var _ ClusterSource = (*Members)(nil)

// Set adds the member name, or replaces its Source.
func (m *Members) Set(name string, src Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.members == nil {
		m.members = map[string]Source{}
	}
	m.members[name] = src
}

// Remove stops asking the member name's istiods: its istiods and proxies
// leave the status at the next poll.
func (m *Members) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.members, name)
}

// Names are the members, sorted.
func (m *Members) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.members))
}

// ClusterEndpoints lists every member's istiods (see ClusterSource). Each
// error names its member.
func (m *Members) ClusterEndpoints() ([]ClusterEndpoint, error) {
	m.mu.Lock()
	members := maps.Clone(m.members)
	m.mu.Unlock()
	var out []ClusterEndpoint
	errs := MemberErrors{}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		urls, err := members[name].Endpoints()
		switch {
		case err != nil:
			errs[name] = fmt.Errorf("member %s: %w", name, err)
			continue
		case len(urls) == 0:
			errs[name] = fmt.Errorf("member %s: no istiod found", name)
			continue
		}
		for _, u := range slices.Sorted(slices.Values(urls)) {
			out = append(out, ClusterEndpoint{Cluster: name, URL: u})
		}
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// Endpoints is every member's istiods, without their members; the error
// names every member whose istiods could not be listed.
func (m *Members) Endpoints() ([]string, error) {
	eps, err := m.ClusterEndpoints()
	var out []string
	for _, ep := range eps {
		if !slices.Contains(out, ep.URL) {
			out = append(out, ep.URL)
		}
	}
	return out, err
}

// target is one istiod to ask: its member ("" for a Source that names
// none) and URL, or why its member's istiods could not be listed.
type target struct {
	cluster, url string
	err          error
}

// discovery is the address of an istiod entry that stands for a failed
// listing of istiods.
const discovery = "(discovery)"

// targets are the istiods to ask, and whether they span more than one
// member (then istiods and proxies carry their member in the status).
func (t *Tracker) targets() (out []target, multi bool) {
	cs, ok := t.Source.(ClusterSource)
	if !ok {
		eps, err := t.Source.Endpoints()
		if err != nil {
			return []target{{url: discovery, err: err}}, false
		}
		for _, ep := range eps {
			out = append(out, target{url: ep})
		}
		return out, false
	}
	eps, err := cs.ClusterEndpoints()
	for _, ep := range eps {
		out = append(out, target{cluster: ep.Cluster, url: ep.URL})
	}
	var per MemberErrors
	switch {
	case errors.As(err, &per):
		for name, e := range per {
			out = append(out, target{cluster: name, url: discovery, err: e})
		}
	case err != nil:
		out = append(out, target{url: discovery, err: err})
	}
	slices.SortStableFunc(out, func(a, b target) int { return cmp.Compare(a.cluster, b.cluster) })
	clusters := map[string]bool{}
	for _, tg := range out {
		clusters[tg.cluster] = true
	}
	return out, len(clusters) > 1
}

// epKey is the key of one istiod's state: its URL, with its member when
// it has one (two members may have istiods at the same address).
func epKey(cluster, url string) string {
	if cluster == "" {
		return url
	}
	return cluster + "\x00" + url
}

// clusterOfKey is the member of an epKey or proxyKey.
func clusterOfKey(key string) string {
	c, _, ok := strings.Cut(key, "\x00")
	if !ok {
		return ""
	}
	return c
}

// proxyKey is the key of one proxy's state: its name (or ID), with its
// member when it has one (two members may both run
// istio-ingressgateway-0.istio-system).
func proxyKey(cluster, name string) string { return epKey(cluster, name) }

// nameOfKey is the name of a proxyKey.
func nameOfKey(key string) string {
	_, n, ok := strings.Cut(key, "\x00")
	if !ok {
		return key
	}
	return n
}
