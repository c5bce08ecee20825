package canary

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// FleetProxy is one proxy of the mesh, as istiod and the pods say: what a
// phase's pre-check and judgement need to know of it.
type FleetProxy struct {
	// Name is POD.NAMESPACE.
	Name string
	// Kind is "gateway" or "sidecar".
	Kind string
	// IstioVersion is the Istio version it reports ("" when only its pod
	// is known).
	IstioVersion string
	// Labels are its pod's current labels when the pod is known, else the
	// labels it connected to istiod with: istiod matches workload
	// selectors against the pod's current labels.
	Labels map[string]string
	// Istiod is the istiod it is connected to, "" when no istiod asked
	// reports it (a pod connected to another revision's istiod, or not
	// connected yet).
	Istiod string
}

// Namespace is the proxy's namespace.
func (p FleetProxy) Namespace() string {
	_, ns, _ := strings.Cut(p.Name, ".")
	return ns
}

// Fleet is every proxy of the mesh, asked of every istiod (and the pods)
// before a phase starts. Known is false when that could not be asked
// completely: Why says why, and no phase starts on half a fleet.
type Fleet struct {
	Known   bool
	Why     string
	Proxies []FleetProxy
}

// MaxCanaries bounds the canaries one phase judges: every one of them is
// listed in the status (a ConfigMap holds at most 1 MiB), and none is
// ever left out of the judgement.
const MaxCanaries = 1000

// reaches reports whether o applies to p when p's labels are labels, as
// istiod scopes an EnvoyFilter: its namespace (root reaches every one),
// the kind of proxy its patches' contexts name, and its selector.
func reaches(o *envoyfilter.Object, p FleetProxy, labels map[string]string, root string) bool {
	if ns := o.Metadata.Namespace; ns != root && ns != p.Namespace() {
		return false
	}
	gw, sc := contexts(o)
	if (p.Kind == "gateway" && !gw) || (p.Kind == "sidecar" && !sc) || (p.Kind != "gateway" && p.Kind != "sidecar") {
		return false
	}
	for k, v := range o.Spec.GetWorkloadSelector().GetLabels() {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// contexts says which kinds of proxy o's patches target.
func contexts(o *envoyfilter.Object) (gateway, sidecar bool) {
	for _, cp := range o.Spec.GetConfigPatches() {
		switch cp.GetMatch().GetContext() {
		case networking.EnvoyFilter_GATEWAY:
			gateway = true
		case networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND:
			sidecar = true
		default:
			gateway, sidecar = true, true
		}
	}
	return gateway, sidecar
}

// variant names the patches of o a proxy of istioVersion gets, as istiod
// matches match.proxy.proxyVersion: the indexes of the version-scoped
// patches that match. Proxies of one variant run the same patches.
func variant(o *envoyfilter.Object, istioVersion string) string {
	var idx []string
	for i, cp := range o.Spec.GetConfigPatches() {
		pv := cp.GetMatch().GetProxy().GetProxyVersion()
		if pv == "" {
			continue
		}
		re, err := regexp.Compile(pv)
		if err == nil && re.MatchString(istioVersion) {
			idx = append(idx, fmt.Sprint(i))
		}
	}
	return strings.Join(idx, ",")
}

// versioned reports whether o has version-scoped patches.
func versioned(o *envoyfilter.Object) bool {
	for _, cp := range o.Spec.GetConfigPatches() {
		if cp.GetMatch().GetProxy().GetProxyVersion() != "" {
			return true
		}
	}
	return false
}

// with is labels with label set to value.
func with(labels map[string]string, label, value string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[label] = value
	return out
}

// changedObjects are the objects of the changed items as the canaries are
// to get them: the candidate's, or the stable one for an item taken away
// (it reaches the proxies that lose it).
func changedObjects(stable, candidate []*envoyfilter.Object, items []string) map[string]*envoyfilter.Object {
	before, after := byItem(stable), byItem(candidate)
	out := map[string]*envoyfilter.Object{}
	for _, item := range items {
		if o := after[item]; o != nil {
			out[item] = o
		} else if o := before[item]; o != nil {
			out[item] = o
		}
	}
	return out
}

// precheck is why a phase from stable to candidate can't start on f,
// with the canaries it would judge when it can: every proxy the set
// reaches carries the label; each changed item reaches at least one
// canary (a change no canary receives would be promoted untested); the
// canaries cover the kinds and release variants of proxy each changed
// item reaches (coverage); and there are at most MaxCanaries.
func precheck(f Fleet, label string, cov Coverage, stable, candidate []*envoyfilter.Object, items []string, root string) (canaries []string, why string) {
	if !f.Known {
		return nil, "not every istiod said which proxies the change reaches (" + f.Why + ")"
	}
	if why := unlabelledIn(f, label, append(slices.Clone(stable), candidate...), root); why != "" {
		return nil, why
	}
	objs := changedObjects(stable, candidate, items)
	seen := map[string]bool{}
	var problems []string
	for _, item := range items {
		o := objs[item]
		type class struct{ kind, variant string }
		reached := map[class][]string{} // class → the Istio versions of its proxies
		covered := map[class]bool{}
		n := 0
		for _, p := range f.Proxies {
			canary := p.Labels[label] == ValueCanary
			if !reaches(o, p, p.Labels, root) {
				continue
			}
			if p.Istiod == "" {
				// Known by its pod only (another revision's istiod, not
				// connected yet): judged as a canary, and never counted
				// ACKed while no istiod asked reports it; no class of its
				// own (its version is not known).
				if canary && !seen[p.Name] {
					seen[p.Name] = true
					canaries = append(canaries, p.Name)
				}
				continue
			}
			c := class{kind: p.Kind}
			switch cov {
			case CoverVariants:
				c.variant = variant(o, p.IstioVersion)
			case CoverItems:
				c.kind = ""
			}
			if v := p.IstioVersion; v != "" && !slices.Contains(reached[c], v) {
				reached[c] = append(reached[c], v)
			} else if _, ok := reached[c]; !ok {
				reached[c] = nil
			}
			if canary {
				covered[c] = true
				n++
				if !seen[p.Name] {
					seen[p.Name] = true
					canaries = append(canaries, p.Name)
				}
			}
		}
		if n == 0 {
			problems = append(problems, fmt.Sprintf("%s reaches no proxy labelled %s=true (%s), so the change would be promoted untested", item, label, selectorText(o, label)))
			continue
		}
		var missing []string
		for _, c := range slices.SortedFunc(maps.Keys(reached), func(a, b class) int {
			return strings.Compare(a.kind+"\x00"+a.variant, b.kind+"\x00"+b.variant)
		}) {
			if covered[c] {
				continue
			}
			what := c.kind + "s"
			if c.variant != "" || (cov == CoverVariants && versioned(o)) {
				vs := reached[c]
				slices.Sort(vs)
				what += " of Istio " + strings.Join(vs, ", ")
			}
			missing = append(missing, what)
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("%s reaches %s, and no canary is one (rollout.coverage %s)", item, strings.Join(missing, "; "), cov))
		}
	}
	if len(problems) > 0 {
		return nil, strings.Join(problems, "; ")
	}
	if len(canaries) > MaxCanaries {
		return nil, fmt.Sprintf("%d proxies are canaries, and one phase judges at most %d: label fewer of them %s=true", len(canaries), MaxCanaries, label)
	}
	slices.Sort(canaries)
	return canaries, ""
}

// unlabelledIn says which proxies some object of objs reaches that carry
// label as neither true nor false ("" when none does): paired by label,
// they would get none of globalconfig's EnvoyFilters.
func unlabelledIn(f Fleet, label string, objs []*envoyfilter.Object, root string) string {
	var unlabelled []string
	for _, p := range f.Proxies {
		v := p.Labels[label]
		if v == ValueCanary || v == ValueStable {
			continue
		}
		for _, o := range objs {
			if reaches(o, p, with(p.Labels, label, ValueStable), root) || reaches(o, p, with(p.Labels, label, ValueCanary), root) {
				unlabelled = append(unlabelled, p.Name)
				break
			}
		}
	}
	if len(unlabelled) == 0 {
		return ""
	}
	return fmt.Sprintf("%s no %s label, so %s would get none of globalconfig's EnvoyFilters; label every proxy %s=true or =false",
		proxies(unlabelled), label, them(len(unlabelled)), label)
}

// PairedLabel is the canary label a delivered set is paired by, "" for a
// set that is not paired.
func PairedLabel(objs []*envoyfilter.Object) string {
	for _, o := range objs {
		if o.Metadata.Labels[LabelTrack] != "" {
			return labelOf(objs)
		}
	}
	return ""
}

// selectorText says which proxies o selects, for a message.
func selectorText(o *envoyfilter.Object, label string) string {
	gw, sc := contexts(o)
	kind := "gateways"
	switch {
	case gw && sc:
		kind = "gateways and sidecars"
	case sc:
		kind = "sidecars"
	}
	sel := o.Spec.GetWorkloadSelector().GetLabels()
	if len(sel) == 0 {
		return "it reaches " + kind
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		if k != label {
			kv = append(kv, k+"="+sel[k])
		}
	}
	return "it reaches " + kind + " labelled " + strings.Join(kv, ", ")
}

// required are the changed items whose canary copy reaches canary p (its
// labels, the label taken as true): the markers its configuration must
// hold for its ACK to count.
func required(objs map[string]*envoyfilter.Object, p FleetProxy, label, root string) []string {
	var out []string
	for _, item := range slices.Sorted(maps.Keys(objs)) {
		if reaches(objs[item], p, with(p.Labels, label, ValueCanary), root) {
			out = append(out, item)
		}
	}
	return out
}

// markerOf is the marker a canary copy of item carries for the object o
// the canaries are to get (nil: the item is taken away).
func markerOf(candidate map[string]*envoyfilter.Object, item string) string {
	if o := candidate[item]; o != nil {
		return o.Hash()
	}
	return MarkerRemoved
}
