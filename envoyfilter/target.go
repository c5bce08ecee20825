package envoyfilter

import (
	"fmt"
	"regexp"
	"slices"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Context is where in the mesh patches apply.
type Context string

// The contexts a document may name.
const (
	ContextGateway         Context = "GATEWAY"
	ContextSidecarInbound  Context = "SIDECAR_INBOUND"
	ContextSidecarOutbound Context = "SIDECAR_OUTBOUND"
	ContextAny             Context = "ANY"
)

// Values lists the accepted spellings (used by the decoder and the schema).
func (Context) Values() []string {
	return []string{string(ContextGateway), string(ContextSidecarInbound), string(ContextSidecarOutbound), string(ContextAny)}
}

func (c Context) istio() networking.EnvoyFilter_PatchContext {
	switch c {
	case ContextSidecarInbound:
		return networking.EnvoyFilter_SIDECAR_INBOUND
	case ContextSidecarOutbound:
		return networking.EnvoyFilter_SIDECAR_OUTBOUND
	case ContextAny:
		return networking.EnvoyFilter_ANY
	}
	return networking.EnvoyFilter_GATEWAY
}

// DefaultNamespace is Istio's default root namespace: an EnvoyFilter there
// without a selector applies to every proxy of its context in the mesh.
const DefaultNamespace = "istio-system"

// Target says where an item's patches apply. The document has one; an item
// may override any of its fields.
type Target struct {
	Context      Context           `json:"context,omitempty" doc:"GATEWAY (default), SIDECAR_INBOUND, SIDECAR_OUTBOUND or ANY."`
	Selector     map[string]string `json:"selector,omitempty" doc:"Workload labels the patches apply to; empty means every proxy of the context."`
	Namespace    string            `json:"namespace,omitempty" doc:"Namespace of the generated EnvoyFilters (default istio-system, the root namespace)."`
	ProxyVersion string            `json:"proxyVersion,omitempty" doc:"Optional regular expression on the proxy's Istio version: only proxies whose version matches get the patches."`
	// IstioVersions are the Istio releases of the proxies the patches
	// must work on; see Fleet.
	IstioVersions []Version `json:"istioVersions,omitempty" doc:"Istio releases the targeted proxies run, such as [\"1.29\", \"1.30\"]: every generated field is one their Envoy understands, with per-version variants where they differ. Default: the oldest Istio release in upstream support (1.30) and every newer one."`
	// Clusters are the config clusters (the home cluster and the
	// members) the EnvoyFilters go to; see AnnotationClusters.
	Clusters []string `json:"clusters,omitempty" doc:"Names of the config clusters the EnvoyFilters go to, such as [\"eu-west-1\"]: the home cluster (the controller's --cluster-name) and the members, as globalconfig status lists them. Empty means every one."`
}

// DefaultTarget is every gateway of the mesh, from the root namespace.
func DefaultTarget() Target {
	return Target{Context: ContextGateway, Namespace: DefaultNamespace}
}

// Override returns t with every field that o sets replacing t's.
// A selector given as an empty mapping clears t's selector.
func (t Target) Override(o Target) Target {
	if o.Context != "" {
		t.Context = o.Context
	}
	if o.Selector != nil {
		t.Selector = o.Selector
	}
	if o.Namespace != "" {
		t.Namespace = o.Namespace
	}
	if o.ProxyVersion != "" {
		t.ProxyVersion = o.ProxyVersion
	}
	if o.IstioVersions != nil {
		t.IstioVersions = o.IstioVersions
	}
	if o.Clusters != nil {
		t.Clusters = o.Clusters
	}
	return t
}

// Validate returns every problem of t, with paths relative to the target.
func (t Target) Validate() error {
	var errs fielderr.List
	if t.Context != "" && !slices.Contains(t.Context.Values(), string(t.Context)) {
		errs.Addf("context", "must be one of %v, got %q", t.Context.Values(), t.Context)
	}
	if t.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(t.Namespace) {
			errs.Addf("namespace", "%s", msg)
		}
	}
	for _, k := range sortedKeys(t.Selector) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs.Addf("selector."+k, "invalid label key: %s", msg)
		}
		for _, msg := range validation.IsValidLabelValue(t.Selector[k]) {
			errs.Addf("selector."+k, "invalid label value: %s", msg)
		}
	}
	if t.ProxyVersion != "" {
		if _, err := regexp.Compile(t.ProxyVersion); err != nil {
			errs.Addf("proxyVersion", "invalid regular expression: %v", err)
		}
	}
	for i, v := range t.IstioVersions {
		if _, err := EnvoyOf(v); err != nil {
			errs.Addf(fmt.Sprintf("istioVersions[%d]", i), "%v", err)
		}
	}
	seen := make(map[string]int, len(t.Clusters))
	for i, name := range t.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		if err := ValidateClusterName(name); err != nil {
			errs.Addf(path, "%v", err)
			continue
		}
		if j, ok := seen[name]; ok {
			errs.Addf(path, "cluster %q is listed twice (also at clusters[%d]); name each cluster once", name, j)
			continue
		}
		seen[name] = i
	}
	return errs.Err()
}

// MaxClusterNameLength bounds a cluster name: Istio puts a proxy's
// cluster ID in the label topology.istio.io/cluster, and a Kubernetes
// label value takes at most 63 bytes.
const MaxClusterNameLength = 63

// ClusterNamePattern is the form of a cluster name, its length included
// (also the JSON Schema's pattern): Istio cluster IDs such as Kubernetes
// (istiod's default CLUSTER_ID) or eu-west-1.
const ClusterNamePattern = `^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`

var clusterName = regexp.MustCompile(ClusterNamePattern)

// ValidateClusterName says why name can't name a config cluster, or nil.
func ValidateClusterName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a cluster name must not be empty")
	case len(name) > MaxClusterNameLength:
		return fmt.Errorf("cluster name %q is %d bytes; at most %d are allowed", name, len(name), MaxClusterNameLength)
	case !clusterName.MatchString(name):
		return fmt.Errorf("cluster name %q must be letters, digits, '.', '_' and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
