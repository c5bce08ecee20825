package canary

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Label values of the canary label.
const (
	ValueCanary = "true"
	ValueStable = "false"
)

// LabelTrack marks the EnvoyFilters of a paired set: "canary" on an item's
// canary copy, "stable" on its stable copy.
const LabelTrack = "globalconfig.io/track"

// The values of LabelTrack.
const (
	TrackCanary = "canary"
	TrackStable = "stable"
)

// NameSuffix ends the name of an item's canary copy; the item registry
// refuses item names that end in it.
const NameSuffix = envoyfilter.CanarySuffix

// MarkerKey begins the listener metadata key (filter_metadata) an item's
// canary copy sets on every listener it reaches, MarkerKey + "/" + item,
// to {"content": HASH}: HASH is the content hash of the item's version the
// copy carries (MarkerRemoved when the copy takes the item away). istiod's
// configuration for a proxy (/debug/config_dump) then shows which canary
// copies it holds: an ACK of that configuration is proof that the canary
// received the change, not just that it answered a push. Listener
// metadata changes nothing in how Envoy serves.
const MarkerKey = "globalconfig.io/canary"

// MarkerRemoved is the marker of a canary copy that takes its item away.
const MarkerRemoved = "removed"

// Changed lists the items whose EnvoyFilter differs between the sets
// stable and candidate (added, changed or removed), sorted.
func Changed(stable, candidate []*envoyfilter.Object) []string {
	before, after := byItem(stable), byItem(candidate)
	var out []string
	for item, o := range after {
		if b, ok := before[item]; !ok || b.Hash() != o.Hash() {
			out = append(out, item)
		}
	}
	for item := range before {
		if _, ok := after[item]; !ok {
			out = append(out, item)
		}
	}
	slices.Sort(out)
	return out
}

// Pair is the set a canary policy delivers, with label as the canary
// label: every item of stable as its stable copy (its name, LABEL=false
// added to its selector), and every item of canary as its canary copy
// (name + NameSuffix, LABEL=true, with its marker); an item of stable
// that canary lacks gets a canary copy holding only its marker, so that
// the canaries' configuration shows it was taken away. Outside a phase
// stable and canary are the same set; in a phase, stable is the set
// before the change and canary the change's.
//
// Every proxy labelled true or false gets exactly one version of every
// item, and every transition of a phase rewrites one object per item and
// proxy: starting, the canary copies of the changed items; promoting,
// their stable copies; rolling back, their canary copies again. No proxy
// ever holds neither version of an item or both, whatever the order of
// the writes or an istiod push between them. The price: a proxy without
// the label gets none of the items, which is why the controller lists
// such proxies and no phase starts while one exists.
//
// The result is sorted by name, as sets are. An item whose target already
// selects on label can't be paired and is an error (validation refuses
// such a document).
func Pair(stable, canary []*envoyfilter.Object, label string) ([]*envoyfilter.Object, error) {
	before, after := byItem(stable), byItem(canary)
	var out []*envoyfilter.Object
	for _, item := range slices.Sorted(maps.Keys(mergeKeys(before, after))) {
		s, c := before[item], after[item]
		if s != nil {
			o, err := scoped(s, label, ValueStable, "")
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		switch {
		case c != nil:
			o, err := scoped(c, label, ValueCanary, c.Hash())
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		case s != nil:
			o, err := removal(s, label)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	sortSet(out)
	return out, nil
}

// Split is the set of a canary phase from stable to candidate: Pair.
func Split(stable, candidate []*envoyfilter.Object, label string) ([]*envoyfilter.Object, error) {
	return Pair(stable, candidate, label)
}

// Unpair takes a delivered set apart: the set its stable copies hold and
// the set its canary copies hold, each as the document rendered it (no
// label, no marker, the item's own name). A set that is not paired (no
// LabelTrack) is both. An object Unpair can't take apart is an error. The
// caller checks the result against the hash it expects: only a match is
// exact.
//
// An empty label is read from the set: the selector key whose value is
// false on the stable copies.
func Unpair(objs []*envoyfilter.Object, label string) (stable, canary []*envoyfilter.Object, paired bool, err error) {
	if label == "" {
		label = labelOf(objs)
	}
	for _, o := range objs {
		switch o.Metadata.Labels[LabelTrack] {
		case "":
			stable, canary = append(stable, o), append(canary, o)
		case TrackStable:
			paired = true
			u, err := unscoped(o, label, false)
			if err != nil {
				return nil, nil, true, err
			}
			stable = append(stable, u)
		case TrackCanary:
			paired = true
			u, err := unscoped(o, label, true)
			if err != nil {
				return nil, nil, true, err
			}
			if u != nil { // nil: the item is taken away
				canary = append(canary, u)
			}
		default:
			return nil, nil, true, fmt.Errorf("%s: unknown %s %q", o.Metadata.Name, LabelTrack, o.Metadata.Labels[LabelTrack])
		}
	}
	sortSet(stable)
	sortSet(canary)
	return stable, canary, paired, nil
}

// scoped is a copy of o for the proxies whose label is value; a canary
// copy (marker set) carries the marker of content marker and its name
// ends in NameSuffix.
func scoped(o *envoyfilter.Object, label, value, marker string) (*envoyfilter.Object, error) {
	sel := o.Spec.GetWorkloadSelector().GetLabels()
	if _, ok := sel[label]; ok {
		return nil, fmt.Errorf("%s: its target selects on the canary label %s already", o.Item(), label)
	}
	spec := proto.Clone(o.Spec).(*networking.EnvoyFilter)
	labels := maps.Clone(sel)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[label] = value
	spec.WorkloadSelector = &networking.WorkloadSelector{Labels: labels}
	out := &envoyfilter.Object{APIVersion: o.APIVersion, Kind: o.Kind, Metadata: o.Metadata, Spec: spec}
	out.Metadata.Labels = maps.Clone(o.Metadata.Labels)
	out.Metadata.Annotations = maps.Clone(o.Metadata.Annotations)
	if value == ValueCanary {
		patches, err := markers(o, marker)
		if err != nil {
			return nil, err
		}
		spec.ConfigPatches = append(spec.ConfigPatches, patches...)
		out.Metadata.Name += NameSuffix
		out.Metadata.Labels[LabelTrack] = TrackCanary
	} else {
		out.Metadata.Labels[LabelTrack] = TrackStable
	}
	hash, err := envoyfilter.SpecHash(spec)
	if err != nil {
		return nil, err
	}
	out.Metadata.Annotations[envoyfilter.AnnotationContentHash] = hash
	return out, nil
}

// removal is the canary copy that takes s's item away from the canaries:
// its marker alone, on the listeners s reaches.
func removal(s *envoyfilter.Object, label string) (*envoyfilter.Object, error) {
	bare := &envoyfilter.Object{APIVersion: s.APIVersion, Kind: s.Kind, Metadata: s.Metadata, Spec: proto.Clone(s.Spec).(*networking.EnvoyFilter)}
	patches, err := markers(s, MarkerRemoved)
	if err != nil {
		return nil, err
	}
	bare.Spec.ConfigPatches = nil
	out, err := scoped(bare, label, ValueCanary, "")
	if err != nil {
		return nil, err
	}
	out.Spec.ConfigPatches = patches
	delete(out.Metadata.Annotations, envoyfilter.AnnotationServiceConfig)
	hash, err := envoyfilter.SpecHash(out.Spec)
	if err != nil {
		return nil, err
	}
	out.Metadata.Annotations[envoyfilter.AnnotationContentHash] = hash
	return out, nil
}

// markers are the patches that put o's marker, content, on every listener
// of every context o's patches use.
func markers(o *envoyfilter.Object, content string) ([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	value, err := structpb.NewStruct(map[string]any{"metadata": map[string]any{"filter_metadata": map[string]any{
		MarkerKey + "/" + o.Item(): map[string]any{"content": content}}}})
	if err != nil {
		return nil, err
	}
	var out []*networking.EnvoyFilter_EnvoyConfigObjectPatch
	var seen []networking.EnvoyFilter_PatchContext
	for _, cp := range o.Spec.GetConfigPatches() {
		ctx := cp.GetMatch().GetContext()
		if slices.Contains(seen, ctx) {
			continue
		}
		seen = append(seen, ctx)
		out = append(out, &networking.EnvoyFilter_EnvoyConfigObjectPatch{
			ApplyTo: networking.EnvoyFilter_LISTENER,
			Match:   &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: ctx},
			Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: proto.Clone(value).(*structpb.Struct)},
		})
	}
	return out, nil
}

// isMarker reports whether cp is a marker patch.
func isMarker(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	if cp.GetApplyTo() != networking.EnvoyFilter_LISTENER || cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_MERGE {
		return false
	}
	md := cp.GetPatch().GetValue().GetFields()["metadata"].GetStructValue().GetFields()["filter_metadata"].GetStructValue()
	for k := range md.GetFields() {
		if strings.HasPrefix(k, MarkerKey+"/") {
			return true
		}
	}
	return false
}

// unscoped is the object o is a copy of: without label in its selector,
// its track label, its markers and (for a canary copy) its name suffix.
// A canary copy holding only markers is nil: it takes its item away.
func unscoped(o *envoyfilter.Object, label string, canary bool) (*envoyfilter.Object, error) {
	spec := proto.Clone(o.Spec).(*networking.EnvoyFilter)
	if canary {
		spec.ConfigPatches = slices.DeleteFunc(spec.ConfigPatches, isMarker)
		if len(spec.ConfigPatches) == 0 {
			return nil, nil
		}
	}
	labels := maps.Clone(spec.GetWorkloadSelector().GetLabels())
	delete(labels, label)
	spec.WorkloadSelector = nil
	if len(labels) > 0 {
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: labels}
	}
	hash, err := envoyfilter.SpecHash(spec)
	if err != nil {
		return nil, err
	}
	out := &envoyfilter.Object{APIVersion: o.APIVersion, Kind: o.Kind, Metadata: o.Metadata, Spec: spec}
	out.Metadata.Labels = maps.Clone(o.Metadata.Labels)
	delete(out.Metadata.Labels, LabelTrack)
	out.Metadata.Annotations = maps.Clone(o.Metadata.Annotations)
	out.Metadata.Annotations[envoyfilter.AnnotationContentHash] = hash
	if canary {
		name, ok := strings.CutSuffix(o.Metadata.Name, NameSuffix)
		if !ok {
			return nil, fmt.Errorf("%s: a canary copy whose name does not end in %s", o.Metadata.Name, NameSuffix)
		}
		out.Metadata.Name = name
	}
	return out, nil
}

func byItem(objs []*envoyfilter.Object) map[string]*envoyfilter.Object {
	out := make(map[string]*envoyfilter.Object, len(objs))
	for _, o := range objs {
		out[o.Item()] = o
	}
	return out
}

func mergeKeys(a, b map[string]*envoyfilter.Object) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func sortSet(objs []*envoyfilter.Object) {
	slices.SortFunc(objs, func(a, b *envoyfilter.Object) int {
		return strings.Compare(a.Metadata.Namespace+"/"+a.Metadata.Name, b.Metadata.Namespace+"/"+b.Metadata.Name)
	})
}

// SetHash names a set by its EnvoyFilters' names and content hashes, and
// the cluster list of each one limited to some config clusters
// (envoyfilter.AnnotationClusters; a set without any hashes as it did
// before there were lists). render.SetHash is this function.
func SetHash(objs []*envoyfilter.Object) string {
	h := sha256.New()
	for _, o := range objs {
		fmt.Fprintf(h, "%s/%s=%s\n", o.Metadata.Namespace, o.Metadata.Name, o.Hash())
		if c := o.Metadata.Annotations[envoyfilter.AnnotationClusters]; c != "" {
			fmt.Fprintf(h, "clusters=%s\n", c)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func setHash(objs []*envoyfilter.Object) string { return SetHash(objs) }

// labelOf is the canary label of a paired set: the selector key that is
// false on every stable copy and true on every canary copy.
func labelOf(objs []*envoyfilter.Object) string {
	count := map[string]int{}
	copies := 0
	for _, o := range objs {
		want := map[string]string{TrackStable: ValueStable, TrackCanary: ValueCanary}[o.Metadata.Labels[LabelTrack]]
		if want == "" {
			continue
		}
		copies++
		for k, v := range o.Spec.GetWorkloadSelector().GetLabels() {
			if v == want {
				count[k]++
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(count)) {
		if count[k] == copies {
			return k
		}
	}
	return DefaultLabel
}
