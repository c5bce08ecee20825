package anchors_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// set renders doc as the controller does.
func set(t *testing.T, doc string) []*envoyfilter.Object {
	t.Helper()
	res := render.New().FromConfigMap(map[string]string{"config.yaml": doc})
	if !res.Valid() {
		t.Fatalf("document refused: %s", render.Describe(res.Problems, "; "))
	}
	return res.Objects
}

// other reads an EnvoyFilter manifest as the informer gives it.
func other(t *testing.T, manifest string) anchors.Other {
	t.Helper()
	var obj struct {
		Metadata struct {
			Name, Namespace string
			Labels          map[string]string
		}
		Spec *networking.EnvoyFilter
	}
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	return anchors.Other{Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name, Labels: obj.Metadata.Labels, Spec: obj.Spec}
}

// priorityOf is item's EnvoyFilter's priority in objs.
func priorityOf(objs []*envoyfilter.Object, item string) int32 {
	for _, o := range objs {
		if o.Item() == item {
			return o.Spec.Priority
		}
	}
	return -1
}

func TestFind(t *testing.T) {
	ours := set(t, anchorstest.LocalRateLimit)
	ourPriority := fmt.Sprintf("priority: %d", priorityOf(ours, "localRateLimit"))
	for _, c := range []struct {
		name   string
		ours   []*envoyfilter.Object
		other  string
		want   string // the dependent's String, "" for none
		root   string
		itemOf string
	}{
		{name: "INSERT_AFTER via subFilter", ours: ours, other: anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""),
			want: "istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "INSERT_BEFORE via subFilter", ours: ours, other: anchorstest.HealthCheck("INSERT_BEFORE", "istio-system", ""),
			want: "istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_BEFORE"},
		{name: "a MERGE into our filter's typed config, at any priority", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("MERGE", "istio-system", ""), "priority: 100", "priority: -5", 1),
			want:  "istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] MERGE"},
		{name: "an insert applied before ours never finds the filter: not a dependent", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "priority: 100", "priority: 5", 1)},
		{name: "equal priority from another namespace: istio-system's first, a dependent", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "team-a", ""), "priority: 100", ourPriority, 1),
			want:  "team-a/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "equal priority from the root namespace, ours from another: theirs applies first, not a dependent",
			ours:  set(t, "target: {namespace: team-b}\n"+anchorstest.LocalRateLimit),
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "priority: 100", ourPriority, 1)},
		{name: "disjoint selectors", ours: set(t, "target: {selector: {istio: ingressgateway}}\n"+anchorstest.LocalRateLimit),
			other: anchorstest.HealthCheck("INSERT_AFTER", "istio-system", "  workloadSelector: {labels: {istio: eastwestgateway}}")},
		{name: "overlapping selectors may meet", ours: set(t, "target: {selector: {istio: ingressgateway}}\n"+anchorstest.LocalRateLimit),
			other: anchorstest.HealthCheck("INSERT_AFTER", "istio-system", "  workloadSelector: {labels: {app: edge}}"),
			want:  "istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "another namespace's EnvoyFilter with a workload selector meets ours from the root namespace", ours: ours,
			other: anchorstest.HealthCheck("INSERT_AFTER", "team-a", "  workloadSelector: {labels: {app: web}}"),
			want:  "team-a/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "two namespaces, neither the root, never meet", ours: set(t, "target: {namespace: team-b}\n"+anchorstest.LocalRateLimit),
			other: anchorstest.HealthCheck("INSERT_AFTER", "team-a", "  workloadSelector: {labels: {app: web}}")},
		{name: "a root namespace other than istio-system", ours: set(t, "target: {namespace: team-b}\n"+anchorstest.LocalRateLimit), root: "mesh-root",
			other: anchorstest.HealthCheck("INSERT_AFTER", "mesh-root", ""),
			want:  "mesh-root/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "a sidecar context never meets the gateways'", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "context: GATEWAY", "context: SIDECAR_INBOUND", 1)},
		{name: "context ANY meets the gateways'", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "context: GATEWAY", "context: ANY", 1),
			want:  "istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): configPatches[0] INSERT_AFTER"},
		{name: "the router is every connection manager's, not an item's", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_BEFORE", "istio-system", ""), "envoy.filters.http.local_ratelimit", envoyfilter.Router, 1)},
		{name: "a filter no item inserts", ours: set(t, "gzip: {}\n"),
			other: anchorstest.HealthCheck("INSERT_AFTER", "istio-system", "")},
		{name: "globalconfig's own EnvoyFilters are not dependents", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "namespace: istio-system", "namespace: istio-system\n  labels: {app.kubernetes.io/managed-by: globalconfig}", 1)},
		{name: "a subFilter under another network filter is never applied", ours: ours,
			other: strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "name: envoy.filters.network.http_connection_manager", "name: envoy.filters.network.tcp_proxy", 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			deps := anchors.Find(c.ours, []anchors.Other{other(t, c.other)}, c.root)
			switch {
			case c.want == "" && len(deps) != 0:
				t.Errorf("found %v, want no dependent", deps)
			case c.want != "" && (len(deps) != 1 || deps[0].String() != c.want):
				t.Errorf("found %v, want [%s]", deps, c.want)
			}
		})
	}
}

// An equal priority in the same namespace is ordered by creation time:
// the dependent is listed, and says it may not find the filter.
func TestFindEqualPriority(t *testing.T) {
	ours := set(t, anchorstest.LocalRateLimit)
	o := other(t, anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""))
	o.Spec.Priority = priorityOf(ours, "localRateLimit")
	deps := anchors.Find(ours, []anchors.Other{o}, "")
	if len(deps) != 1 || !strings.Contains(deps[0].Order, "creation time") {
		t.Fatalf("found %v, want one that says the order is creation time's", deps)
	}
}

// A network filter an item inserts is anchored on by filter.name.
func TestFindNetworkFilter(t *testing.T) {
	ours := set(t, "hardening:\n  maxConnections: 1000\n")
	var name string
	for _, in := range anchors.Inserts(ours) {
		if in.Kind == anchors.NetworkFilter {
			name = in.Filter
		}
	}
	if name == "" {
		t.Fatalf("hardening inserts no network filter: %+v", anchors.Inserts(ours))
	}
	o := other(t, `
metadata: {name: after-limit, namespace: istio-system}
spec:
  priority: 100
  configPatches:
  - applyTo: NETWORK_FILTER
    match:
      listener:
        filterChain:
          filter:
            name: `+name+`
    patch:
      operation: INSERT_AFTER
      value:
        name: envoy.filters.network.local_ratelimit
`)
	deps := anchors.Find(ours, []anchors.Other{o}, "")
	if len(deps) != 1 || deps[0].Item != "hardening" || deps[0].Kind != anchors.NetworkFilter {
		t.Fatalf("found %v, want the network filter's dependent of hardening", deps)
	}
}

func TestCompare(t *testing.T) {
	before := set(t, anchorstest.LocalRateLimit)
	user := []anchors.Other{other(t, anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""))}
	for _, c := range []struct {
		name  string
		after string
		deps  []anchors.Other
		want  string // a part of the one warning, "" for none
	}{
		{name: "removing the item", after: "gzip: {}\n", deps: user,
			want: "this edit removes localRateLimit's HTTP filter envoy.filters.http.local_ratelimit, which istio-system/user-anchored-healthcheck (configPatches[0] INSERT_AFTER) anchors on: istiod skips an insert whose anchor is absent, so its filter silently disappears from those proxies"},
		{name: "disabling the item", after: "localRateLimit: {enable: false, maxTokens: 100, tokensPerFill: 100, fillInterval: 1s}\ngzip: {}\n", deps: user,
			want: "this edit removes localRateLimit's"},
		{name: "narrowing its selector", after: "target: {selector: {istio: ingressgateway}}\n" + anchorstest.LocalRateLimit, deps: user,
			want: "this edit narrows localRateLimit's HTTP filter envoy.filters.http.local_ratelimit"},
		{name: "narrowing to the selector the dependent has anyway",
			after: "target: {selector: {istio: ingressgateway}}\n" + anchorstest.LocalRateLimit,
			deps:  []anchors.Other{other(t, anchorstest.HealthCheck("INSERT_AFTER", "istio-system", "  workloadSelector: {labels: {istio: ingressgateway}}"))}},
		{name: "moving it to a namespace the dependent's proxies don't read", after: "target: {namespace: team-b}\n" + anchorstest.LocalRateLimit,
			deps: []anchors.Other{other(t, anchorstest.HealthCheck("INSERT_AFTER", "team-a", ""))},
			want: "this edit narrows localRateLimit's"},
		{name: "changing its settings only", after: strings.Replace(anchorstest.LocalRateLimit, "maxTokens: 100", "maxTokens: 200", 1), deps: user},
		{name: "no change", after: anchorstest.LocalRateLimit, deps: user},
		{name: "no dependent", after: "gzip: {}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := anchors.Compare(before, set(t, c.after), c.deps, "")
			switch {
			case c.want == "" && len(ws) != 0:
				t.Errorf("warned %v, want no warning", ws)
			case c.want != "" && (len(ws) != 1 || !strings.Contains(ws[0].String(), c.want)):
				t.Errorf("warned %v, want one with %q", ws, c.want)
			}
		})
	}
}

// A filter that moves to a priority after the dependent's is out of its
// reach: the same warning as a removal's effect, saying it moved.
func TestCompareMoved(t *testing.T) {
	before := set(t, anchorstest.LocalRateLimit)
	after := set(t, anchorstest.LocalRateLimit)
	for i, o := range after {
		if o.Item() == "localRateLimit" {
			moved := *o
			moved.Spec = &networking.EnvoyFilter{Priority: 150, ConfigPatches: o.Spec.ConfigPatches}
			after[i] = &moved
		}
	}
	ws := anchors.Compare(before, after, []anchors.Other{other(t, anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""))}, "")
	if len(ws) != 1 || ws[0].Change != "moves" || !strings.Contains(ws[0].Detail, "silently disappears") {
		t.Fatalf("warned %v, want a move that puts the filter out of reach", ws)
	}
}

// A filter istiod puts in every HTTP connection manager anyway (fault,
// cors) is not an item's, even when an item inserts one of that name:
// an anchor on it finds istiod's without the item.
func TestFindIstiodsOwnFilter(t *testing.T) {
	p, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.fault", &faultv3.HTTPFault{})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := envoyfilter.NewObject("someItem", envoyfilter.StageTrafficPolicy.At(3), envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	o := other(t, strings.Replace(anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""), "envoy.filters.http.local_ratelimit", "envoy.filters.http.fault", 1))
	if deps := anchors.Find([]*envoyfilter.Object{obj}, []anchors.Other{o}, ""); len(deps) != 0 {
		t.Errorf("found %v, want none: every connection manager has a fault filter", deps)
	}
	if ins := anchors.Inserts([]*envoyfilter.Object{obj}); len(ins) != 0 {
		t.Errorf("inserts %v, want none", ins)
	}
}

// BenchmarkCompareFullExample is what the webhook adds to the review of
// an edit of the full example, with three EnvoyFilters of others: the
// old document's render and the comparison.
func BenchmarkCompareFullExample(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "global-config.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	var cm struct{ Data map[string]string }
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		b.Fatal(err)
	}
	after := render.New().FromConfigMap(cm.Data).Objects
	var others []anchors.Other
	for _, m := range []string{
		anchorstest.HealthCheck("INSERT_AFTER", "istio-system", ""),
		strings.Replace(anchorstest.HealthCheck("INSERT_BEFORE", "team-a", "  workloadSelector: {labels: {app: web}}"), "user-anchored-healthcheck", "team-a-filter", 1),
		strings.Replace(anchorstest.HealthCheck("MERGE", "istio-system", ""), "envoy.filters.http.local_ratelimit", envoyfilter.Buffer, 1),
	} {
		var obj struct {
			Metadata struct{ Name, Namespace string }
			Spec     *networking.EnvoyFilter
		}
		if err := yaml.Unmarshal([]byte(m), &obj); err != nil {
			b.Fatal(err)
		}
		others = append(others, anchors.Other{Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name, Spec: obj.Spec})
	}
	b.Run("render+compare", func(b *testing.B) {
		for range b.N {
			before := render.New().FromConfigMap(cm.Data)
			if ws := anchors.Compare(before.Objects, after, others, ""); len(ws) != 0 {
				b.Fatalf("warned %v", ws)
			}
		}
	})
	b.Run("compare", func(b *testing.B) {
		for range b.N {
			if ws := anchors.Compare(after, after, others, ""); len(ws) != 0 {
				b.Fatalf("warned %v", ws)
			}
		}
	})
	if n := len(anchors.Find(after, others, "")); n != 3 {
		b.Fatalf("%d dependents, want 3", n)
	}
}

// A listener filter an item inserts is anchored on by listenerFilter; the
// same patch in a sidecar context never meets the gateways'.
func TestFindListenerFilter(t *testing.T) {
	ours := set(t, "clientIP:\n  proxyProtocol: true\n")
	manifest := `
metadata: {name: after-proxy-protocol, namespace: istio-system}
spec:
  priority: 100
  configPatches:
  - applyTo: LISTENER_FILTER
    match:
      context: GATEWAY
      listener:
        listenerFilter: envoy.filters.listener.proxy_protocol
    patch:
      operation: INSERT_AFTER
      value:
        name: envoy.filters.listener.original_src
`
	deps := anchors.Find(ours, []anchors.Other{other(t, manifest)}, "")
	if len(deps) != 1 || deps[0].Item != "clientIP" || deps[0].Kind != anchors.ListenerFilter || deps[0].Filter != "envoy.filters.listener.proxy_protocol" {
		t.Fatalf("found %v, want the listener filter's dependent of clientIP", deps)
	}
	sidecar := strings.Replace(manifest, "context: GATEWAY", "context: SIDECAR_OUTBOUND", 1)
	if deps := anchors.Find(ours, []anchors.Other{other(t, sidecar)}, ""); len(deps) != 0 {
		t.Errorf("a sidecar's patch: found %v, want none", deps)
	}
}
