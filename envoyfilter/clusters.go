package envoyfilter

import (
	"slices"
	"strings"
)

// clustersAnnotation is the value of AnnotationClusters for the cluster
// names of a target: sorted, without duplicates, comma-joined; "" for
// none (every cluster).
func clustersAnnotation(names []string) string {
	if len(names) == 0 {
		return ""
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	return strings.Join(slices.Compact(sorted), ",")
}

// ClustersOf returns the config clusters o goes to, as its
// AnnotationClusters lists them (sorted); nil means every cluster.
func ClustersOf(o *Object) []string {
	v := o.Metadata.Annotations[AnnotationClusters]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// GoesTo reports whether o goes to the config cluster name: it names no
// cluster, or names that one.
func (o *Object) GoesTo(name string) bool {
	v, ok := o.Metadata.Annotations[AnnotationClusters]
	if !ok || v == "" {
		return true
	}
	for c := range strings.SplitSeq(v, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// ForCluster returns the objects of set that go to the config cluster
// name (GoesTo), in the set's order: what that cluster's istiods get.
// The result is a new slice; the objects are set's own.
func ForCluster(set []*Object, name string) []*Object {
	out := make([]*Object, 0, len(set))
	for _, o := range set {
		if o.GoesTo(name) {
			out = append(out, o)
		}
	}
	return out
}
