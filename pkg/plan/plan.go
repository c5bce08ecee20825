// Package plan says what applying a document would change, the way
// `kubectl diff` does: the item diff (the words of the controller's
// Applied Event and of the admission webhook's warning) and the managed
// EnvoyFilters that would be created, updated or deleted, each with a
// unified diff. The controller converges with the same Writes (and so the
// same Equal), and words what it wrote with the same Action.
package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Action is what happens to one managed EnvoyFilter.
type Action string

// The actions, as `globalconfig diff` words its plan lines.
const (
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
)

// Past is the action done, as the controller's Applied Event words its
// writes: "created", "updated", "deleted".
func (a Action) Past() string {
	switch a {
	case Create:
		return "created"
	case Update:
		return "updated"
	case Delete:
		return "deleted"
	}
	return string(a)
}

// Equal reports whether the live object already is d: the labels, the
// content hash, Istio versions and clusters annotations are there, and the spec
// itself hashes to d's hash (so an edit that kept the annotation is still
// seen as drift). The controller writes exactly the objects this says are
// not equal.
func Equal(l *clientnetworking.EnvoyFilter, d *envoyfilter.Object) bool {
	if l.Labels[envoyfilter.LabelManagedBy] != envoyfilter.ManagedByValue ||
		l.Labels[envoyfilter.LabelItem] != d.Item() ||
		l.Annotations[envoyfilter.AnnotationContentHash] != d.Hash() ||
		l.Annotations[envoyfilter.AnnotationIstioVersions] != d.Metadata.Annotations[envoyfilter.AnnotationIstioVersions] ||
		l.Annotations[envoyfilter.AnnotationClusters] != d.Metadata.Annotations[envoyfilter.AnnotationClusters] {
		return false
	}
	h, err := envoyfilter.SpecHash(&l.Spec)
	return err == nil && h == d.Hash()
}

// Change is one EnvoyFilter the plan writes.
type Change struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Item is the document item the EnvoyFilter is built from.
	Item   string `json:"item,omitempty"`
	Action Action `json:"action"`
	// Diff is the unified diff from the live object to the file's, over
	// its spec and the labels and annotations globalconfig sets.
	Diff string `json:"diff"`
}

// Key is namespace/name.
func (c Change) Key() string { return c.Namespace + "/" + c.Name }

// Plan is what applying a document would change.
type Plan struct {
	// Items is the item diff; its JSON lists what is added, changed and
	// removed.
	Items render.Diff `json:"items"`
	// EnvoyFilters are the writes, in the order the controller makes
	// them: the desired objects by name, then the deletes by key.
	EnvoyFilters []Change `json:"envoyFilters"`
}

// New plans the change from the live state to the file's: before and
// after are the section keys of the live and the file's documents
// (render.KeysOf, render.SectionKeys; before is nil when there is no
// live document), desired the file's EnvoyFilters and live the managed
// EnvoyFilters in the cluster.
func New(before, after map[string]string, desired []*envoyfilter.Object, live []*clientnetworking.EnvoyFilter) (*Plan, error) {
	p := &Plan{Items: render.Compare(before, after), EnvoyFilters: []Change{}}
	byKey := map[string]*clientnetworking.EnvoyFilter{}
	for _, l := range live {
		if l.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue {
			byKey[l.Namespace+"/"+l.Name] = l
		}
	}
	for _, w := range Writes(desired, byKey) {
		c := Change{Name: w.Name(), Namespace: w.Namespace(), Action: w.Action}
		var from, to []byte
		var err error
		if w.Live != nil {
			c.Item = w.Live.Labels[envoyfilter.LabelItem]
			if from, err = LiveYAML(w.Live); err != nil {
				return nil, err
			}
		}
		if w.Desired != nil {
			c.Item = w.Desired.Item()
			if to, err = desiredYAML(w.Desired); err != nil {
				return nil, err
			}
		}
		c.Diff = Unified("live/"+w.Key, "file/"+w.Key, string(from), string(to))
		p.EnvoyFilters = append(p.EnvoyFilters, c)
	}
	return p, nil
}

// Write is one write that converging the live EnvoyFilters to the desired
// ones takes.
type Write struct {
	Action Action
	// Key is namespace/name.
	Key string
	// Desired is the object to apply (Create, Update); Live the object
	// there now (Update, Delete).
	Desired *envoyfilter.Object
	Live    *clientnetworking.EnvoyFilter
}

// Namespace is the namespace of the EnvoyFilter written.
func (w Write) Namespace() string { ns, _, _ := strings.Cut(w.Key, "/"); return ns }

// Name is the name of the EnvoyFilter written.
func (w Write) Name() string { _, name, _ := strings.Cut(w.Key, "/"); return name }

// Writes are the writes that make live (managed EnvoyFilters by
// namespace/name) equal to desired, in the order the controller makes
// them: the desired objects not Equal to their live one, in desired's
// order, then the live ones not desired, by key. Both the controller and
// `globalconfig diff` decide with it.
func Writes(desired []*envoyfilter.Object, live map[string]*clientnetworking.EnvoyFilter) []Write {
	var out []Write
	seen := map[string]bool{}
	for _, d := range desired {
		key := d.Metadata.Namespace + "/" + d.Metadata.Name
		seen[key] = true
		l, exists := live[key]
		switch {
		case !exists:
			out = append(out, Write{Action: Create, Key: key, Desired: d})
		case !Equal(l, d):
			out = append(out, Write{Action: Update, Key: key, Desired: d, Live: l})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(live)) {
		if !seen[key] {
			out = append(out, Write{Action: Delete, Key: key, Live: live[key]})
		}
	}
	return out
}

// Empty reports whether applying changes nothing: no item and no
// EnvoyFilter.
func (p *Plan) Empty() bool { return p.Items.Empty() && len(p.EnvoyFilters) == 0 }

// NoEnvoyFilterChanges is the plan line when no EnvoyFilter is written.
const NoEnvoyFilterChanges = "no changes to the EnvoyFilters"

// String is the plan for people: the item line, one line per EnvoyFilter
// written ("update istio-system/globalconfig-gzip"), then their unified
// diffs.
func (p *Plan) String() string {
	var b strings.Builder
	b.WriteString(p.Items.String())
	b.WriteByte('\n')
	if len(p.EnvoyFilters) == 0 {
		b.WriteString(NoEnvoyFilterChanges + "\n")
		return b.String()
	}
	for _, c := range p.EnvoyFilters {
		fmt.Fprintf(&b, "%s %s\n", c.Action, c.Key())
	}
	for _, c := range p.EnvoyFilters {
		b.WriteByte('\n')
		if c.Diff == "" {
			// Equal content but not equal to the controller: the spec no
			// longer hashes to its annotation in a way YAML does not show.
			fmt.Fprintf(&b, "%s: the spec differs from its content hash; no change in the YAML\n", c.Key())
			continue
		}
		b.WriteString(c.Diff)
	}
	return b.String()
}

// The labels and annotations globalconfig sets on an EnvoyFilter: the
// part of the metadata a diff shows.
var (
	ownLabels      = []string{envoyfilter.LabelManagedBy, envoyfilter.LabelItem}
	ownAnnotations = []string{envoyfilter.AnnotationContentHash, envoyfilter.AnnotationIstioVersions, envoyfilter.AnnotationClusters}
)

// LiveYAML is a live EnvoyFilter as a diff shows it: in the shape of a
// rendered one (envoyfilter.Object), with only the labels and annotations
// globalconfig sets.
func LiveYAML(l *clientnetworking.EnvoyFilter) ([]byte, error) {
	o := &envoyfilter.Object{
		APIVersion: envoyfilter.APIVersion,
		Kind:       envoyfilter.Kind,
		Metadata: envoyfilter.Metadata{
			Name: l.Name, Namespace: l.Namespace,
			Labels: only(l.Labels, ownLabels), Annotations: only(l.Annotations, ownAnnotations),
		},
		Spec: &l.Spec,
	}
	y, err := o.YAML()
	if err != nil {
		return nil, fmt.Errorf("encode envoyfilter %s/%s: %w", l.Namespace, l.Name, err)
	}
	return y, nil
}

// desiredYAML is a rendered EnvoyFilter as a diff shows it.
func desiredYAML(d *envoyfilter.Object) ([]byte, error) {
	o := *d
	o.Metadata.Labels = only(d.Metadata.Labels, ownLabels)
	o.Metadata.Annotations = only(d.Metadata.Annotations, ownAnnotations)
	y, err := o.YAML()
	if err != nil {
		return nil, fmt.Errorf("encode envoyfilter %s/%s: %w", d.Metadata.Namespace, d.Metadata.Name, err)
	}
	return y, nil
}

// only is the entries of m under keys.
func only(m map[string]string, keys []string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Applied is o as the API server stores it after a server-side apply
// (the controller sends o as JSON): the live object a fake clientset
// should hold.
func Applied(o *envoyfilter.Object) (*clientnetworking.EnvoyFilter, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	ef := &clientnetworking.EnvoyFilter{}
	if err := json.Unmarshal(b, ef); err != nil {
		return nil, err
	}
	return ef, nil
}
