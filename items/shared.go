package items

import (
	"maps"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Rules that span items are declared by the items that conflict and checked
// by the document: each item says which fields of a shared Envoy object its
// section sets (Claims), and which fields it can't be beside on that object
// (Exclusions). Two sections whose targets may reach one proxy conflict when
// one sets a field the other excludes.

// EnvoyField names a field of an Envoy object several items may set, as
// "<object>.<field>": "hcm.use_remote_address" is the HTTP connection
// manager's.
type EnvoyField string

// The shared fields items claim.
const (
	HCMOriginalIPDetection EnvoyField = "hcm.original_ip_detection_extensions"
	HCMUseRemoteAddress    EnvoyField = "hcm.use_remote_address"
	HCMXffNumTrustedHops   EnvoyField = "hcm.xff_num_trusted_hops"
	// ClusterHTTPProtocolOptions is a cluster's
	// typed_extension_protocol_options entry for HTTP, which Istio
	// replaces whole on a MERGE.
	ClusterHTTPProtocolOptions EnvoyField = "cluster.http_protocol_options"
)

// Claim is a shared field a section sets, and the key that sets it.
type Claim struct {
	Field EnvoyField
	// Path is the key, relative to the section.
	Path string
}

// Exclusion says that Field, which the declaring item sets, can't be
// beside Other on one object: Envoy refuses the two together.
type Exclusion struct {
	Field, Other EnvoyField
	// Why says what Envoy does with the two together.
	Why string
}

// Sharer is implemented by items that set fields other items may set too.
// Claims is asked of an enabled, valid section; Exclusions of the
// registration's fresh item.
type Sharer interface {
	Claims() []Claim
	Exclusions() []Exclusion
}

// SharedSection is what CheckShared needs of one section of a document.
type SharedSection struct {
	Name   string
	Item   Item
	Target envoyfilter.Target
}

// CheckShared records, at the claiming keys of both sections, every pair
// of claims that an Exclusion forbids on one object, for sections whose
// targets may reach one proxy. Paths are full document paths.
func CheckShared(p *Problems, sections []SharedSection) {
	type claimed struct {
		sec   SharedSection
		claim Claim
	}
	var all []claimed
	var rules []Exclusion
	for _, s := range sections {
		sh, ok := s.Item.(Sharer)
		if !ok || !s.Item.Enabled() {
			continue
		}
		for _, c := range sh.Claims() {
			all = append(all, claimed{s, c})
		}
		rules = append(rules, sh.Exclusions()...)
	}
	for _, r := range rules {
		for _, a := range all {
			if a.claim.Field != r.Field {
				continue
			}
			for _, b := range all {
				if b.claim.Field != r.Other || b.sec.Name == a.sec.Name || !Overlap(a.sec.Target, b.sec.Target) {
					continue
				}
				if r.Field == r.Other && a.sec.Name > b.sec.Name {
					continue // the same pair, seen from the other side
				}
				pa, pb := a.sec.Name+"."+a.claim.Path, b.sec.Name+"."+b.claim.Path
				obj := objectOf(r.Field)
				p.Addf(pa, "can't be beside %s on one %s (both reach %s): %s", pb, obj, where(a.sec.Target, b.sec.Target), r.Why)
				p.Addf(pb, "can't be beside %s on one %s (both reach %s): %s", pa, obj, where(a.sec.Target, b.sec.Target), r.Why)
			}
		}
	}
}

// objectOf names the Envoy object a shared field belongs to.
func objectOf(f EnvoyField) string {
	if strings.HasPrefix(string(f), "cluster.") {
		return "cluster"
	}
	return "connection manager"
}

// Overlap reports whether the targets a and b may reach one proxy: their
// contexts meet, their selectors can both match one workload's labels,
// their namespaces meet (the root namespace reaches every one), and their
// config clusters meet (no list is every cluster). Proxy version patterns
// are assumed to meet.
func Overlap(a, b envoyfilter.Target) bool {
	if a.Context != b.Context && a.Context != envoyfilter.ContextAny && b.Context != envoyfilter.ContextAny {
		return false
	}
	if len(a.Clusters) > 0 && len(b.Clusters) > 0 && !slices.ContainsFunc(a.Clusters, func(c string) bool { return slices.Contains(b.Clusters, c) }) {
		return false
	}
	for _, k := range slices.Sorted(maps.Keys(a.Selector)) {
		if v, ok := b.Selector[k]; ok && v != a.Selector[k] {
			return false
		}
	}
	root := envoyfilter.DefaultNamespace
	return a.Namespace == b.Namespace || a.Namespace == root || b.Namespace == root || a.Namespace == "" || b.Namespace == ""
}

// where names the context two overlapping targets share.
func where(a, b envoyfilter.Target) envoyfilter.Context {
	if a.Context == envoyfilter.ContextAny {
		return b.Context
	}
	return a.Context
}
