package preflight

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Proxy is the proxy a prediction is for, as istiod knows it.
type Proxy struct {
	Name         string            `json:"name"` // POD.NAMESPACE
	Namespace    string            `json:"namespace"`
	Labels       map[string]string `json:"labels,omitempty"`
	IstioVersion string            `json:"istioVersion,omitempty"`
	Type         string            `json:"type"` // router (a gateway) or sidecar
	// Ports is a gateway's PortMap, from its Gateways and Services; nil
	// when none remaps a port.
	Ports PortMap `json:"gatewayPorts,omitempty"`
}

// Filter is one EnvoyFilter that may reach the proxy.
type Filter struct {
	Namespace, Name string
	// Item is the globalconfig item it was rendered from; "" for an
	// EnvoyFilter globalconfig does not own.
	Item string
	Spec *networking.EnvoyFilter
}

func (f Filter) key() string { return f.Namespace + "/" + f.Name }

// FromObjects are the filters of a rendered set.
func FromObjects(objs []*envoyfilter.Object) []Filter {
	out := make([]Filter, 0, len(objs))
	for _, o := range objs {
		out = append(out, Filter{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Item: o.Item(), Spec: o.Spec})
	}
	return out
}

// Select returns the patches of fs that istiod gives px, in the order it
// applies them: by priority, the root namespace's first, then by name
// (istiod orders equal priorities by creation time, which a set not yet
// applied does not have). Patches with a proxy metadata match are not
// predicted and are returned as notes.
func Select(px Proxy, root string, fs []Filter) ([]Patch, []string, error) {
	var chosen []Filter
	for _, f := range fs {
		if f.Namespace != root && f.Namespace != px.Namespace {
			continue
		}
		sel := f.Spec.GetWorkloadSelector().GetLabels()
		if len(f.Spec.GetTargetRefs()) > 0 {
			continue // Gateway API targets: not gateways of the Istio API
		}
		match := true
		for k, v := range sel {
			if got, ok := px.Labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			chosen = append(chosen, f)
		}
	}
	slices.SortStableFunc(chosen, func(a, b Filter) int {
		if pa, pb := a.Spec.GetPriority(), b.Spec.GetPriority(); pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		if a.Namespace != b.Namespace && (a.Namespace == root || b.Namespace == root) {
			if a.Namespace == root {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name+"."+a.Namespace, b.Name+"."+b.Namespace)
	})
	var out []Patch
	var notes []string
	for _, f := range chosen {
		for i, cp := range f.Spec.GetConfigPatches() {
			if pm := cp.GetMatch().GetProxy(); pm != nil {
				if len(pm.GetMetadata()) > 0 {
					notes = append(notes, fmt.Sprintf("EnvoyFilter %s patch %d matches proxy metadata, which is not predicted: left out", f.key(), i))
					continue
				}
				if pv := pm.GetProxyVersion(); pv != "" && !versionMatches(pv, px.IstioVersion) {
					continue
				}
			}
			value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
			if err != nil {
				value, err = fromStructOpaque(cp.GetApplyTo(), cp.GetPatch().GetValue(), err)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("EnvoyFilter %s patch %d: %w", f.key(), i, err)
			}
			item := f.Item
			if item == "" {
				item = f.key()
			}
			if insertAsAdd(cp) {
				cp = proto.Clone(cp).(*networking.EnvoyFilter_EnvoyConfigObjectPatch)
				cp.Patch.Operation = networking.EnvoyFilter_Patch_ADD
			}
			out = append(out, Patch{Item: item, Filter: f.key(), Priority: f.Spec.GetPriority(), CP: cp, Value: value})
		}
	}
	return out, notes, nil
}

// maxProxyVersionLen is istiod's bound on a proxyVersion pattern: a longer
// one matches no proxy.
const maxProxyVersionLen = 1024

// versionMatches is istiod's proxyVersion match: a proxy without a version
// never matches; a pattern that does not compile matches every proxy
// (istiod ignores the error; its validation refuses such EnvoyFilters).
func versionMatches(pattern, version string) bool {
	if version == "" || len(pattern) > maxProxyVersionLen {
		return false
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return true
	}
	return re.MatchString(version)
}

// insertAsAdd tells an INSERT_* that istiod applies as ADD: inserts place
// filters and routes only.
func insertAsAdd(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	switch cp.GetPatch().GetOperation() {
	case networking.EnvoyFilter_Patch_INSERT_FIRST, networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER:
	default:
		return false
	}
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_ROUTE, networking.EnvoyFilter_LISTENER_FILTER:
		return false
	}
	return true
}

// Input is what a prediction starts from.
type Input struct {
	Current *Config
	Proxy   Proxy
	// RootNamespace is the mesh's root namespace (istio-system).
	RootNamespace string
	// Live are globalconfig's EnvoyFilters in the cluster, whose patches
	// the current config carries; Desired is the new set.
	Live, Desired []Filter
	// Others are the other EnvoyFilters in the root and the proxy's
	// namespace; their patches are in the current config too.
	Others []Filter
	// Notes are carried to the prediction's.
	Notes []string
}

// Prediction is a proxy's configuration now and under the new set.
type Prediction struct {
	Proxy  Proxy
	Kind   Kind
	Before *Config
	After  *Config
	// Changed are the items whose EnvoyFilter the new set changes, adds
	// or removes, and that reach the proxy before or after.
	Changed []string
	// Inexact lists the parts of After that can't be predicted exactly;
	// everything else is what istiod will send.
	Inexact []string
	// Notes are facts about the prediction that do not make it inexact.
	Notes []string
}

// KindOf is the Kind of a proxy of istiod's node type typ: router (a
// gateway) or sidecar; waypoints and ztunnels take no EnvoyFilter.
func KindOf(typ string) (Kind, error) {
	switch typ {
	case "router":
		return Kind{}, nil
	case "sidecar":
		return Kind{Sidecar: true}, nil
	default:
		return Kind{}, fmt.Errorf("the proxy is of type %q: diff --proxy predicts gateways and sidecars", typ)
	}
}

// Predict takes globalconfig's live patches off the proxy's current
// config and applies the desired ones.
func Predict(in Input) (*Prediction, error) {
	kind, err := KindOf(in.Proxy.Type)
	if err != nil {
		return nil, err
	}
	live, notesL, err := Select(in.Proxy, in.RootNamespace, in.Live)
	if err != nil {
		return nil, fmt.Errorf("current set: %w", err)
	}
	desired, notesD, err := Select(in.Proxy, in.RootNamespace, in.Desired)
	if err != nil {
		return nil, fmt.Errorf("new set: %w", err)
	}
	others, notesO, err := Select(in.Proxy, in.RootNamespace, in.Others)
	if err != nil {
		return nil, fmt.Errorf("other EnvoyFilters: %w", err)
	}
	p := &Prediction{Proxy: in.Proxy, Kind: kind, Before: in.Current}
	p.Notes = append(append(append(append(p.Notes, in.Notes...), notesL...), notesD...), notesO...)
	p.Changed = changed(live, desired)

	base := in.Current.clone()
	p.Inexact = undo(base, kind, in.Proxy.Ports, live, desired, others)
	p.Inexact = append(p.Inexact, insertOrder(p.Changed, live, desired, others)...)
	// The new set applied on the base, which keeps the other
	// EnvoyFilters' patches; undo reported where they and globalconfig's
	// set the same fields.
	after, err := Apply(base, kind, in.Proxy.Ports, desired)
	if err != nil {
		return nil, err
	}
	p.After = after
	p.Inexact = append(p.Inexact, after.aborted...)
	return p, nil
}

// insertOrder names the other EnvoyFilters whose inserted filters istiod
// would place after a changed item's: their filters are in the base, so
// the prediction places the item's after them, which is istiod's order
// only when the item's priority is the higher.
func insertOrder(changed []string, live, desired, others []Patch) []string {
	inserts := func(p Patch) bool {
		switch p.CP.GetApplyTo() {
		case networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_LISTENER_FILTER:
			return p.op() == networking.EnvoyFilter_Patch_ADD || p.op() == networking.EnvoyFilter_Patch_INSERT_FIRST ||
				p.op() == networking.EnvoyFilter_Patch_INSERT_BEFORE || p.op() == networking.EnvoyFilter_Patch_INSERT_AFTER
		}
		return false
	}
	var out []string
	for _, ours := range append(slices.Clone(live), desired...) {
		if !inserts(ours) || !slices.Contains(changed, ours.Item) {
			continue
		}
		for _, o := range others {
			if inserts(o) && o.CP.GetApplyTo() == ours.CP.GetApplyTo() && o.Priority >= ours.Priority {
				s := fmt.Sprintf("%s: where its %s goes against those EnvoyFilter %s inserts (priority %d, not below %d) is not predicted", ours.Item, ours.CP.GetApplyTo(), o.Filter, o.Priority, ours.Priority)
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// changed are the items whose patches reaching the proxy differ between
// the two sets, in the order of the new set and then of the removed ones.
func changed(live, desired []Patch) []string {
	by := func(ps []Patch) map[string][]*networking.EnvoyFilter_EnvoyConfigObjectPatch {
		out := map[string][]*networking.EnvoyFilter_EnvoyConfigObjectPatch{}
		for _, p := range ps {
			out[p.Item] = append(out[p.Item], p.CP)
		}
		return out
	}
	l, d := by(live), by(desired)
	var out []string
	add := func(item string) {
		if !slices.Contains(out, item) && !slices.EqualFunc(l[item], d[item], func(a, b *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool { return proto.Equal(a, b) }) {
			out = append(out, item)
		}
	}
	for _, p := range desired {
		add(p.Item)
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		add(k)
	}
	return out
}

// fromStructOpaque decodes a patch value whose typed configs name a type
// this build does not link (a health check filter in a user's
// EnvoyFilter: the controller's binary links only what items emit) with
// stand-ins that keep their JSON, as a config dump's are (resolver), so
// Envoy gets them as written. Any other error is failed, as it was.
func fromStructOpaque(applyTo networking.EnvoyFilter_ApplyTo, s *structpb.Struct, failed error) (proto.Message, error) {
	m, err := envoyfilter.ValueType(applyTo)
	if err != nil {
		return nil, failed
	}
	js, err := protojson.Marshal(s)
	if err != nil {
		return nil, failed
	}
	r := newResolver()
	if js, err = r.wrap(js); err != nil || len(r.opaque) == 0 {
		return nil, failed
	}
	if err := (protojson.UnmarshalOptions{Resolver: r}).Unmarshal(js, m); err != nil {
		return nil, failed
	}
	return m, nil
}
