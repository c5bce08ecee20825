package canary

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Label values of the canary label.
const (
	ValueCanary = "true"
	ValueStable = "false"
)

// LabelTrack marks the EnvoyFilters of a canary phase: "canary" on a
// changed item's new version, "stable" on its previous one.
const LabelTrack = "globalconfig.io/track"

// NameSuffix ends the name of a changed item's new version during a
// canary phase; the item registry refuses item names that end in it.
const NameSuffix = envoyfilter.CanarySuffix

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

// Split is the set of a canary phase from stable to candidate, with label
// as the canary label: every unchanged item as it is; every changed item's
// stable EnvoyFilter for the proxies labelled false and its candidate
// EnvoyFilter for those labelled true. The result is sorted by name, as
// sets are. An item whose target already selects on label can't be split
// and is an error.
func Split(stable, candidate []*envoyfilter.Object, label string) ([]*envoyfilter.Object, error) {
	changed := Changed(stable, candidate)
	var out []*envoyfilter.Object
	for _, o := range candidate {
		if !slices.Contains(changed, o.Item()) {
			out = append(out, o)
			continue
		}
		c, err := scoped(o, label, ValueCanary)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	for _, o := range stable {
		if !slices.Contains(changed, o.Item()) {
			continue
		}
		s, err := scoped(o, label, ValueStable)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *envoyfilter.Object) int {
		return strings.Compare(a.Metadata.Namespace+"/"+a.Metadata.Name, b.Metadata.Namespace+"/"+b.Metadata.Name)
	})
	return out, nil
}

// scoped is a copy of o for the proxies whose label is value.
func scoped(o *envoyfilter.Object, label, value string) (*envoyfilter.Object, error) {
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
	hash, err := envoyfilter.SpecHash(spec)
	if err != nil {
		return nil, err
	}
	out := &envoyfilter.Object{APIVersion: o.APIVersion, Kind: o.Kind, Metadata: o.Metadata, Spec: spec}
	out.Metadata.Labels = maps.Clone(o.Metadata.Labels)
	out.Metadata.Annotations = maps.Clone(o.Metadata.Annotations)
	out.Metadata.Annotations[envoyfilter.AnnotationContentHash] = hash
	if value == ValueCanary {
		out.Metadata.Name += NameSuffix
		out.Metadata.Labels[LabelTrack] = "canary"
	} else {
		out.Metadata.Labels[LabelTrack] = "stable"
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
