// Package anchors finds the EnvoyFilters of others that anchor on a filter
// globalconfig inserts: a patch whose match names one of globalconfig's
// filters (an HTTP filter by listener.filterChain.filter.subFilter.name,
// a network filter by listener.filterChain.filter.name, a listener filter
// by listener.listenerFilter) on proxies where that filter may be. Such an
// EnvoyFilter is a dependent of the item that inserts the filter: removing
// or moving that item changes or breaks it, because istiod skips an
// INSERT_BEFORE, INSERT_AFTER, REPLACE or MERGE whose anchor is absent
// (pilot/pkg/networking/core/envoyfilter: the insert finds no filter of
// that name, and the chain is left as it was).
//
// The controller lists the dependents in its status, and the webhook and
// `globalconfig validate` warn when an edit removes or moves a filter one
// anchors on (Compare). Where two EnvoyFilters meet on a proxy is judged
// from their namespaces, workload selectors and patch contexts alone, and
// conservatively: a dependent is one that may meet the filter on some
// proxy.
package anchors

import (
	"fmt"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Kind is the kind of filter an anchor names.
type Kind string

// The kinds of filter globalconfig inserts.
const (
	HTTPFilter     Kind = "HTTP filter"
	NetworkFilter  Kind = "network filter"
	ListenerFilter Kind = "listener filter"
)

// Insert is one filter a globalconfig EnvoyFilter inserts.
type Insert struct {
	// Filter is the inserted filter's name, Kind its kind.
	Filter string
	Kind   Kind
	// Item is the document item whose EnvoyFilter inserts it.
	Item string
	// Namespace, Name, Selector and Priority are the EnvoyFilter's.
	Namespace, Name string
	Selector        map[string]string
	Priority        int32
	// Context is the patch's context.
	Context networking.EnvoyFilter_PatchContext
	// Position is where the patch puts the filter: the operation and
	// its anchor ("INSERT_FIRST", "INSERT_BEFORE envoy.filters.http.router").
	Position string
}

// alwaysPresent says whether every HTTP connection manager istiod builds
// has a filter of this name anyway: an anchor on it does not depend on
// any item (the router, the cors and fault filters istiod puts in every
// HTTP connection manager, Istio's own istio.* filters).
func alwaysPresent(name string) bool {
	switch name {
	case envoyfilter.Router, envoyfilter.HTTPConnectionManager, "envoy.filters.http.cors", "envoy.filters.http.fault":
		return true
	}
	return strings.HasPrefix(name, "istio.") || strings.HasPrefix(name, "istio_")
}

// Inserts lists the filters the set's EnvoyFilters insert (INSERT_FIRST,
// INSERT_BEFORE, INSERT_AFTER, ADD or REPLACE of a filter of another
// name), except those every connection manager has anyway.
func Inserts(set []*envoyfilter.Object) []Insert {
	var out []Insert
	for _, o := range set {
		if o == nil || o.Spec == nil {
			continue
		}
		for _, cp := range o.Spec.GetConfigPatches() {
			kind, ok := kindOf(cp.GetApplyTo())
			if !ok {
				continue
			}
			op := cp.GetPatch().GetOperation()
			switch op {
			case networking.EnvoyFilter_Patch_INSERT_FIRST, networking.EnvoyFilter_Patch_INSERT_BEFORE,
				networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_ADD, networking.EnvoyFilter_Patch_REPLACE:
			default:
				continue
			}
			name := cp.GetPatch().GetValue().GetFields()["name"].GetStringValue()
			if name == "" || alwaysPresent(name) {
				continue
			}
			anchor, _ := anchorOf(cp)
			if op == networking.EnvoyFilter_Patch_REPLACE && anchor == name {
				continue // replaces a filter by itself: inserts nothing new
			}
			pos := op.String()
			if anchor != "" && op != networking.EnvoyFilter_Patch_INSERT_FIRST && op != networking.EnvoyFilter_Patch_ADD {
				pos += " " + anchor
			}
			out = append(out, Insert{
				Filter: name, Kind: kind, Item: o.Item(),
				Namespace: o.Metadata.Namespace, Name: o.Metadata.Name,
				Selector: o.Spec.GetWorkloadSelector().GetLabels(), Priority: o.Spec.GetPriority(),
				Context: cp.GetMatch().GetContext(), Position: pos,
			})
		}
	}
	return out
}

// kindOf is the kind of filter a patch to applyTo is about.
func kindOf(applyTo networking.EnvoyFilter_ApplyTo) (Kind, bool) {
	switch applyTo {
	case networking.EnvoyFilter_HTTP_FILTER:
		return HTTPFilter, true
	case networking.EnvoyFilter_NETWORK_FILTER:
		return NetworkFilter, true
	case networking.EnvoyFilter_LISTENER_FILTER:
		return ListenerFilter, true
	}
	return "", false
}

// anchorOf is the filter a patch's match names as the one it applies at:
// for an HTTP filter the subFilter (under the HTTP connection manager),
// for a network filter the filter, for a listener filter the listener
// filter. ok is false when the match names none.
func anchorOf(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) (string, bool) {
	l := cp.GetMatch().GetListener()
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_HTTP_FILTER:
		f := l.GetFilterChain().GetFilter()
		// Istio applies an HTTP filter patch only inside the network
		// filter its match names: the HTTP connection manager.
		if f.GetName() != envoyfilter.HTTPConnectionManager || f.GetSubFilter().GetName() == "" {
			return "", false
		}
		return f.GetSubFilter().GetName(), true
	case networking.EnvoyFilter_NETWORK_FILTER:
		if n := l.GetFilterChain().GetFilter().GetName(); n != "" {
			return n, true
		}
	case networking.EnvoyFilter_LISTENER_FILTER:
		if n := l.GetListenerFilter(); n != "" {
			return n, true
		}
	}
	return "", false
}

// Other is an EnvoyFilter globalconfig does not manage.
type Other struct {
	Namespace, Name string
	// Labels are the object's labels: one labelled as globalconfig's
	// (envoyfilter.LabelManagedBy) is not an other, and is skipped.
	Labels map[string]string
	Spec   *networking.EnvoyFilter
}

// Key is the object's namespace/name.
func (o Other) Key() string { return o.Namespace + "/" + o.Name }

// managed reports whether o is one of globalconfig's own.
func (o Other) managed() bool {
	return o.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue
}

// Dependent is one patch of another EnvoyFilter that anchors on a filter
// an item inserts.
type Dependent struct {
	// Namespace and Name are the other EnvoyFilter's.
	Namespace, Name string
	// Patch is the index of its configPatches entry, Operation that
	// patch's operation (INSERT_BEFORE, INSERT_AFTER, REPLACE, MERGE).
	Patch     int
	Operation networking.EnvoyFilter_Patch_Operation
	// Filter is the filter the patch anchors on, Kind its kind, and Item
	// the item that inserts it.
	Filter string
	Kind   Kind
	Item   string
	// Priority is the other EnvoyFilter's.
	Priority int32
	// Order says whether the patch depends on being applied after the
	// item's EnvoyFilter: its priority is equal to the item's, and the
	// order between the two is then istiod's (creation time, then name),
	// so it may find the filter or not. Empty when it is applied after.
	Order string

	// meet is where the two can meet (for Compare).
	meet reach
}

// Key is the other EnvoyFilter's namespace/name.
func (d Dependent) Key() string { return d.Namespace + "/" + d.Name }

// String says what the dependent is, for people.
func (d Dependent) String() string {
	s := fmt.Sprintf("%s anchors on %s (%s): configPatches[%d] %s", d.Key(), d.Filter, d.Item, d.Patch, d.Operation)
	if d.Order != "" {
		s += "; " + d.Order
	}
	return s
}

// Effect says what happens to the dependent's patch where the filter it
// anchors on is absent, as istiod does it.
func (d Dependent) Effect() string {
	switch d.Operation {
	case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER:
		return "istiod skips an insert whose anchor is absent, so its filter silently disappears from those proxies"
	case networking.EnvoyFilter_Patch_REPLACE:
		return "istiod skips a REPLACE whose filter is absent, so its replacement silently disappears from those proxies"
	default:
		return "istiod skips a MERGE whose filter is absent, so its settings silently stop applying there"
	}
}

// DefaultRoot is the root namespace when none is given.
const DefaultRoot = envoyfilter.DefaultNamespace

// Find lists the patches of others that anchor on a filter set inserts,
// where the two EnvoyFilters may meet on a proxy (root is Istio's root
// namespace). An other managed by globalconfig is skipped, and so is an
// anchor on a filter every connection manager has anyway (the router,
// Istio's own). The list is sorted by namespace, name, patch and item.
func Find(set []*envoyfilter.Object, others []Other, root string) []Dependent {
	if root == "" {
		root = DefaultRoot
	}
	ins := Inserts(set)
	if len(ins) == 0 {
		return nil
	}
	var out []Dependent
	seen := map[string]bool{}
	for _, o := range others {
		if o.managed() || o.Spec == nil {
			continue
		}
		theirs := reach{namespace: o.Namespace, selector: o.Spec.GetWorkloadSelector().GetLabels(), targeted: len(o.Spec.GetTargetRefs()) > 0}
		for i, cp := range o.Spec.GetConfigPatches() {
			op := cp.GetPatch().GetOperation()
			switch op {
			case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER,
				networking.EnvoyFilter_Patch_REPLACE, networking.EnvoyFilter_Patch_MERGE:
			default:
				// ADD and INSERT_FIRST ignore the anchor; a REMOVE of a
				// filter that is gone loses nothing.
				continue
			}
			kind, ok := kindOf(cp.GetApplyTo())
			if !ok {
				continue
			}
			anchor, ok := anchorOf(cp)
			if !ok || alwaysPresent(anchor) {
				continue
			}
			t := theirs
			t.context = cp.GetMatch().GetContext()
			for _, in := range ins {
				if in.Filter != anchor || in.Kind != kind {
					continue
				}
				ours := reach{namespace: in.Namespace, selector: in.Selector, context: in.Context}
				meet, ok := ours.meet(t, root)
				if !ok {
					continue
				}
				order := ""
				if op != networking.EnvoyFilter_Patch_MERGE {
					// Istio inserts, replaces and removes in priority
					// order, and merges after them all: an insert
					// applied before the item's finds no filter yet.
					p := o.Spec.GetPriority()
					switch {
					case p < in.Priority:
						continue
					case p == in.Priority && in.Namespace == root && o.Namespace != root:
						// Equal priorities: the root namespace's first.
					case p == in.Priority && o.Namespace == root && in.Namespace != root:
						continue
					case p == in.Priority:
						order = fmt.Sprintf("its priority %d equals %s's, so istiod orders the two by creation time: it may not find the filter even now", p, in.Name)
					}
				}
				key := fmt.Sprintf("%s/%s/%d/%s/%s", o.Namespace, o.Name, i, in.Item, in.Filter)
				if seen[key] {
					continue
				}
				seen[key] = true
				out = append(out, Dependent{
					Namespace: o.Namespace, Name: o.Name, Patch: i, Operation: op,
					Filter: anchor, Kind: kind, Item: in.Item, Priority: o.Spec.GetPriority(), Order: order, meet: meet,
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b Dependent) int {
		return cmpAll(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), a.Patch-b.Patch,
			strings.Compare(a.Item, b.Item), strings.Compare(a.Filter, b.Filter))
	})
	return out
}

func cmpAll(cs ...int) int {
	for _, c := range cs {
		if c != 0 {
			return c
		}
	}
	return 0
}

// reach is the proxies an EnvoyFilter's patch may apply to: those of
// namespace (every namespace when it is the root namespace) whose labels
// include selector, in context. targeted is an EnvoyFilter that selects
// by targetRefs, judged as one that may reach any proxy of its namespace.
type reach struct {
	namespace string
	selector  map[string]string
	context   networking.EnvoyFilter_PatchContext
	targeted  bool
}

// meet is where a and b may both apply: ok is false when no proxy can
// get both (different namespaces, neither the root; a label both select
// with different values; contexts that never meet).
func (a reach) meet(b reach, root string) (reach, bool) {
	var m reach
	switch {
	case a.namespace == b.namespace:
		m.namespace = a.namespace
	case a.namespace == root:
		m.namespace = b.namespace
	case b.namespace == root:
		m.namespace = a.namespace
	default:
		return reach{}, false
	}
	switch {
	case a.context == b.context || b.context == networking.EnvoyFilter_ANY:
		m.context = a.context
	case a.context == networking.EnvoyFilter_ANY:
		m.context = b.context
	default:
		return reach{}, false
	}
	m.selector = map[string]string{}
	for _, sel := range []map[string]string{a.selector, b.selector} {
		for k, v := range sel {
			if w, ok := m.selector[k]; ok && w != v {
				return reach{}, false
			}
			m.selector[k] = v
		}
	}
	m.targeted = a.targeted || b.targeted
	return m, true
}

// covers reports whether r applies everywhere m does: its namespace is m's
// or the root, its context m's or ANY, and every label it selects on m
// selects too.
func (r reach) covers(m reach, root string) bool {
	if r.namespace != m.namespace && r.namespace != root {
		return false
	}
	if r.context != m.context && r.context != networking.EnvoyFilter_ANY {
		return false
	}
	for k, v := range r.selector {
		if w, ok := m.selector[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Warning is what an edit does to a dependent: the filter it anchors on is
// removed where it meets it, or moved.
type Warning struct {
	Dependent
	// Change says what the edit does to the filter: "removes", "narrows"
	// or "moves".
	Change string
	// Detail says how, for people.
	Detail string
}

// String is the warning for people: the dependent, the filter, the item
// and what happens.
func (w Warning) String() string {
	s := fmt.Sprintf("this edit %s %s's %s %s, which %s (configPatches[%d] %s) anchors on: %s",
		w.Change, w.Item, w.Kind, w.Filter, w.Key(), w.Patch, w.Operation, w.Detail)
	return s
}

// Compare says which dependents of before (others anchored on a filter
// before inserts) lose the filter, or find it elsewhere, with after: the
// item no longer inserts it where the dependent may meet it (removed, or
// its target's context, namespace or selector narrowed), or inserts it at
// another position (another operation or anchor, another priority), which
// moves what the dependent inserts with it or puts it out of reach.
func Compare(before, after []*envoyfilter.Object, others []Other, root string) []Warning {
	if root == "" {
		root = DefaultRoot
	}
	deps := Find(before, others, root)
	if len(deps) == 0 {
		return nil
	}
	was, now := Inserts(before), Inserts(after)
	var out []Warning
	for _, d := range deps {
		var same, anywhere []Insert
		for _, in := range now {
			if in.Filter != d.Filter || in.Kind != d.Kind {
				continue
			}
			anywhere = append(anywhere, in)
			if (reach{namespace: in.Namespace, selector: in.Selector, context: in.Context}).covers(d.meet, root) {
				same = append(same, in)
			}
		}
		w := Warning{Dependent: d}
		switch {
		case len(anywhere) == 0:
			w.Change, w.Detail = "removes", d.Effect()
		case len(same) == 0:
			w.Change = "narrows"
			w.Detail = "the filter no longer reaches every proxy the two met on (its target's context, namespace or selector is narrower); there " + d.Effect()
		default:
			w.Change, w.Detail = moved(d, was, same)
		}
		if w.Change != "" {
			out = append(out, w)
		}
	}
	return out
}

// moved says how the filter d anchors on moves, or "" when some insert in
// now puts it where it was, at the same priority.
func moved(d Dependent, was, now []Insert) (change, detail string) {
	var old *Insert
	for i, in := range was {
		if in.Filter == d.Filter && in.Kind == d.Kind && in.Item == d.Item {
			old = &was[i]
			break
		}
	}
	if old == nil {
		return "", ""
	}
	for _, in := range now {
		if in.Position == old.Position && in.Priority == old.Priority {
			return "", ""
		}
	}
	if d.Operation == networking.EnvoyFilter_Patch_MERGE {
		return "", "" // a MERGE finds the filter wherever it stands
	}
	in := now[0]
	where := fmt.Sprintf("from %s at priority %d to %s at priority %d", old.Position, old.Priority, in.Position, in.Priority)
	if in.Priority >= d.Priority {
		return "moves", fmt.Sprintf("the filter moves %s, no longer applied before it (priority %d): %s", where, d.Priority, d.Effect())
	}
	return "moves", fmt.Sprintf("the filter moves %s, and what the dependent inserts beside it moves with it", where)
}
