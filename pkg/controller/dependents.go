package controller

import (
	"fmt"
	"slices"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioinformers "istio.io/client-go/pkg/informers/externalversions/networking/v1alpha3"
	istiolisters "istio.io/client-go/pkg/listers/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// OthersSelector selects the EnvoyFilters globalconfig does not manage:
// the informer of WatchDependents lists only those, so the controller's
// own informer stays limited to its objects, and no object is cached
// twice.
const OthersSelector = envoyfilter.LabelManagedBy + "!=" + envoyfilter.ManagedByValue

// MaxDependents bounds the dependents the status lists: each is a line
// of `globalconfig status`, and the status ConfigMap is at most 1 MiB.
const MaxDependents = 100

// WatchDependents makes the controller list, in its status, the
// EnvoyFilters of others that anchor on a filter an item of the applied
// set inserts (pkg/anchors), and sync again whenever one of them changes.
// inf is an informer of the EnvoyFilters in every namespace that
// OthersSelector selects; call this before the informers start.
func (c *Controller) WatchDependents(inf istioinformers.EnvoyFilterInformer) error {
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Enqueue() },
		UpdateFunc: func(any, any) { c.Enqueue() },
		DeleteFunc: func(any) { c.Enqueue() },
	}); err != nil {
		return fmt.Errorf("watch dependents: %w", err)
	}
	c.others = inf.Lister()
	c.synced = append(c.synced, inf.Informer().HasSynced)
	return nil
}

// OthersOf turns listed EnvoyFilters into what pkg/anchors reads.
func OthersOf(list []*clientnetworking.EnvoyFilter) []anchors.Other {
	out := make([]anchors.Other, 0, len(list))
	for _, l := range list {
		out = append(out, anchors.Other{Namespace: l.Namespace, Name: l.Name, Labels: l.Labels, Spec: &l.Spec})
	}
	return out
}

// dependentsOf lists the dependents of set among the EnvoyFilters lister
// holds, for the status.
func dependentsOf(lister istiolisters.EnvoyFilterLister, set []*envoyfilter.Object, root string) ([]status.Dependent, error) {
	list, err := lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list envoyfilters: %w", err)
	}
	// The lister's order is the cache's: sorted, the status is the same
	// from sync to sync.
	slices.SortFunc(list, func(a, b *clientnetworking.EnvoyFilter) int {
		return cmpStrings(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	deps := anchors.Find(set, OthersOf(list), root)
	out := make([]status.Dependent, 0, len(deps))
	for _, d := range deps {
		if len(out) == MaxDependents {
			break
		}
		out = append(out, status.Dependent{
			Namespace: d.Namespace, Name: d.Name, Patch: d.Patch, Operation: d.Operation.String(),
			Filter: d.Filter, Item: d.Item, Note: d.Order,
		})
	}
	return out, nil
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reportDependents puts the dependents of the applied set in st. The
// EnvoyFilters are the home cluster's: a member's own are not watched.
func (c *Controller) reportDependents(st *status.Status) {
	if c.others == nil || c.st.applied == nil {
		return
	}
	deps, err := dependentsOf(c.others, c.st.applied.Set, c.cfg.RootNamespace)
	if err != nil {
		c.log.Warn("dependents not listed", "err", err)
		return
	}
	if len(deps) > 0 {
		st.Dependents = deps
	}
}
