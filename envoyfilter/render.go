package envoyfilter

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// APIVersion and Kind of the generated objects.
const (
	APIVersion = "networking.istio.io/v1alpha3"
	Kind       = "EnvoyFilter"
)

// Object is one generated EnvoyFilter manifest, in the shape `kubectl apply`
// and `istioctl validate` read.
type Object struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Metadata   Metadata                `json:"metadata"`
	Spec       *networking.EnvoyFilter `json:"spec"`
}

// Metadata is the part of ObjectMeta a generated EnvoyFilter sets.
type Metadata struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// Item returns the item the object was built from.
func (o *Object) Item() string { return o.Metadata.Labels[LabelItem] }

// ServiceConfig returns the config the object carries for a service its
// patches call (AnnotationServiceConfig), nil when it carries none.
func (o *Object) ServiceConfig() (proto.Message, error) {
	v, ok := o.Metadata.Annotations[AnnotationServiceConfig]
	if !ok {
		return nil, nil
	}
	a := &anypb.Any{}
	if err := protojson.Unmarshal([]byte(v), a); err != nil {
		return nil, fmt.Errorf("%s: annotation %s: %w", o.Metadata.Name, AnnotationServiceConfig, err)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("%s: annotation %s: %w", o.Metadata.Name, AnnotationServiceConfig, err)
	}
	return m, nil
}

// SetServiceConfig makes the object carry m for a service its patches
// call (AnnotationServiceConfig).
func (o *Object) SetServiceConfig(m proto.Message) error {
	a, err := anypb.New(m)
	if err != nil {
		return err
	}
	b, err := protojson.Marshal(a)
	if err != nil {
		return err
	}
	// protojson varies its whitespace from build to build: compacted, the
	// annotation is the same for the same config.
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return err
	}
	b = compact.Bytes()
	if o.Metadata.Annotations == nil {
		o.Metadata.Annotations = map[string]string{}
	}
	o.Metadata.Annotations[AnnotationServiceConfig] = string(b)
	return nil
}

// Hash returns the content hash of the object's spec.
func (o *Object) Hash() string { return o.Metadata.Annotations[AnnotationContentHash] }

// YAML returns the manifest as YAML with sorted keys, so equal objects give
// byte-identical output.
func (o *Object) YAML() ([]byte, error) { return yaml.Marshal(o) }

// Placement is where an item's EnvoyFilter sits among the others: its
// priority, and the position of the HTTP filters it inserts. The item
// registry derives both from the item's stage.
type Placement struct {
	Priority int32
	Insert   Position
}

// NewObject builds the EnvoyFilter of item from patches that every proxy
// of the target gets, whatever its version.
func NewObject(item string, at Placement, t Target, patches []Patch) (*Object, error) {
	return NewVersionedObject(item, at, t, func(Release) ([]Patch, error) { return patches, nil })
}

// NewVersionedObject builds the EnvoyFilter of item for the Istio releases
// of the target's fleet: build returns the item's patches for the proxies
// of one release. Every patch value passes Check; every failing patch is
// reported under "patches[i]".
//
// Where releases get different patches, each patch is scoped to the
// releases that get it with match.proxy.proxyVersion. The ranges cover
// every version: the oldest release's patches also go to older proxies,
// and the newest's to newer ones, so a proxy outside the fleet still gets
// exactly one variant. A patch every release gets is emitted once,
// unscoped.
func NewVersionedObject(item string, at Placement, t Target, build func(Release) ([]Patch, error)) (*Object, error) {
	spec := &networking.EnvoyFilter{Priority: at.Priority}
	if len(t.Selector) > 0 {
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: t.Selector}
	}
	fleet := t.Fleet()
	var (
		errs     fielderr.List
		variants [][]*networking.EnvoyFilter_EnvoyConfigObjectPatch
		firsts   []Version // the oldest release of each variant
		// lastPatches are what build returned for the newest variant.
		lastPatches []Patch
	)
	failed := map[string][]string{} // build problem → the releases it hits
	var failedOrder []string
	for _, istio := range fleet {
		envoy, err := EnvoyOf(istio)
		if err != nil {
			errs.Addf("", "%v", err)
			continue
		}
		patches, err := build(Release{Istio: istio, Envoy: envoy})
		if err != nil {
			for _, fe := range fielderr.Flatten(err) {
				key := fe.Path + "\x00" + fe.Msg
				if failed[key] == nil {
					failedOrder = append(failedOrder, key)
				}
				failed[key] = append(failed[key], istio.String())
			}
			continue
		}
		// The same patches as the last release's are that release's
		// variant: checked once.
		if len(variants) > 0 && SamePatches(patches, lastPatches) {
			continue
		}
		lastPatches = patches
		cps, err := configPatches(at, t, patches)
		if err != nil {
			errs.Add("", err)
			return nil, errs.Err()
		}
		if n := len(variants); n > 0 && equalPatches(variants[n-1], cps) {
			continue
		}
		variants = append(variants, cps)
		firsts = append(firsts, istio)
	}
	for _, key := range failedOrder {
		path, msg, _ := strings.Cut(key, "\x00")
		errs.Addf(path, "%s; the targeted Istio releases include %s", msg, strings.Join(failed[key], ", "))
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if len(variants) == 0 || len(variants[0]) == 0 {
		errs.Addf("", "item produced no patches")
		return nil, errs.Err()
	}
	if len(variants) > 1 && t.ProxyVersion != "" {
		errs.Addf("", "needs a different configuration for Istio %s than for older proxies, which one target.proxyVersion can't express; narrow target.istioVersions instead of setting proxyVersion", firsts[1])
		return nil, errs.Err()
	}
	spec.ConfigPatches = scope(variants, firsts)
	hash, err := SpecHash(spec)
	if err != nil {
		return nil, err
	}
	ns := t.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	versions := make([]string, len(fleet))
	for i, v := range fleet {
		versions[i] = v.String()
	}
	o := &Object{
		APIVersion: APIVersion,
		Kind:       Kind,
		Metadata: Metadata{
			Name:      ObjectName(item),
			Namespace: ns,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue, LabelItem: item},
			Annotations: map[string]string{
				AnnotationContentHash:   hash,
				AnnotationIstioVersions: strings.Join(versions, ","),
			},
		},
		Spec: spec,
	}
	if c := clustersAnnotation(t.Clusters); c != "" {
		o.Metadata.Annotations[AnnotationClusters] = c
	}
	return o, nil
}

// configPatches checks patches and turns them into Istio's shape, with the
// target's context and proxy version.
func configPatches(at Placement, t Target, patches []Patch) ([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	var errs fielderr.List
	var out []*networking.EnvoyFilter_EnvoyConfigObjectPatch
	for i, p := range patches {
		p = p.place(at.Insert)
		value, err := Check(p)
		if err != nil {
			errs.Addf(fmt.Sprintf("patches[%d]", i), "%s %s: %v", p.Operation, p.ApplyTo, err)
			continue
		}
		match := &networking.EnvoyFilter_EnvoyConfigObjectMatch{}
		if p.Match != nil {
			match = proto.Clone(p.Match).(*networking.EnvoyFilter_EnvoyConfigObjectMatch)
		}
		match.Context = t.Context.istio()
		if t.ProxyVersion != "" {
			match.Proxy = &networking.EnvoyFilter_ProxyMatch{ProxyVersion: t.ProxyVersion}
		}
		out = append(out, &networking.EnvoyFilter_EnvoyConfigObjectPatch{
			ApplyTo: p.ApplyTo,
			Match:   match,
			Patch:   &networking.EnvoyFilter_Patch{Operation: p.Operation, Value: value},
		})
	}
	return out, errs.Err()
}

// SamePatches reports whether a and b are the same patches, in order.
func SamePatches(a, b []Patch) bool { return slices.EqualFunc(a, b, Patch.equal) }

// equal reports whether p and q are the same patch.
// The same messages (a build that returns what it returned for the last
// release) are equal without a walk.
func (p Patch) equal(q Patch) bool {
	return p.ApplyTo == q.ApplyTo && p.Operation == q.Operation && p.atStage == q.atStage &&
		(p.Match == q.Match || proto.Equal(p.Match, q.Match)) && (p.Value == q.Value || proto.Equal(p.Value, q.Value))
}

func equalPatches(a, b []*networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	return slices.EqualFunc(a, b, func(x, y *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool { return proto.Equal(x, y) })
}

// scope joins the variants, the first of each variant's releases given in
// firsts: patch i common to all (same count of patches) is emitted once;
// the others get a proxyVersion match for their variant's range. Patches
// keep their order within each variant, which is what a proxy sees.
func scope(variants [][]*networking.EnvoyFilter_EnvoyConfigObjectPatch, firsts []Version) []*networking.EnvoyFilter_EnvoyConfigObjectPatch {
	if len(variants) == 1 {
		return variants[0]
	}
	ranged := func(k int, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) *networking.EnvoyFilter_EnvoyConfigObjectPatch {
		var from, until Version
		if k > 0 {
			from = firsts[k]
		}
		if k+1 < len(firsts) {
			until = firsts[k+1]
		}
		cp = proto.Clone(cp).(*networking.EnvoyFilter_EnvoyConfigObjectPatch)
		cp.Match.Proxy = &networking.EnvoyFilter_ProxyMatch{ProxyVersion: VersionRange(from, until)}
		return cp
	}
	sameCount := true
	for _, v := range variants[1:] {
		sameCount = sameCount && len(v) == len(variants[0])
	}
	var out []*networking.EnvoyFilter_EnvoyConfigObjectPatch
	if !sameCount {
		for k, v := range variants {
			for _, cp := range v {
				out = append(out, ranged(k, cp))
			}
		}
		return out
	}
	for i := range variants[0] {
		common := true
		for _, v := range variants[1:] {
			common = common && proto.Equal(v[i], variants[0][i])
		}
		if common {
			out = append(out, variants[0][i])
			continue
		}
		for k, v := range variants {
			out = append(out, ranged(k, v[i]))
		}
	}
	return out
}

// SpecHash is a short, stable hash of an EnvoyFilter spec: of its
// deterministic wire encoding.
func SpecHash(spec *networking.EnvoyFilter) (string, error) {
	b, err := specWire(spec)
	if err != nil {
		return "", fmt.Errorf("hash spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// specWire is the deterministic wire encoding of spec. Most of it is the
// patch values, Structs whose keys a deterministic encoding sorts; the
// values Check handed out were encoded once already (wires). Those are
// written as they are: each patch is copied without its value, which goes
// in as the Patch message's unknown field 2 instead. A message's unknown
// fields follow its known ones, and value (2) is the last field a Patch
// sets unless filter_class (3) is set, so the bytes are exactly those of
// the whole spec's encoding; otherwise the spec is encoded whole.
func specWire(spec *networking.EnvoyFilter) ([]byte, error) {
	whole := func() ([]byte, error) { return deterministic.Marshal(spec) }
	if len(spec.GetConfigPatches()) == 0 {
		return whole()
	}
	cps := make([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, len(spec.ConfigPatches))
	found := false
	for i, cp := range spec.ConfigPatches {
		cps[i] = cp
		v := cp.GetPatch().GetValue()
		if v == nil || cp.Patch.FilterClass != networking.EnvoyFilter_Patch_UNSPECIFIED ||
			len(cp.Patch.ProtoReflect().GetUnknown()) > 0 || len(cp.ProtoReflect().GetUnknown()) > 0 {
			continue
		}
		wire, ok := wires.Get(v)
		if !ok {
			continue
		}
		patch := shallowCopy(cp.Patch, "value").(*networking.EnvoyFilter_Patch)
		raw := protowire.AppendTag(nil, valueField, protowire.BytesType)
		raw = protowire.AppendBytes(raw, wire)
		patch.ProtoReflect().SetUnknown(raw)
		c := shallowCopy(cp, "patch").(*networking.EnvoyFilter_EnvoyConfigObjectPatch)
		c.Patch = patch
		cps[i] = c
		found = true
	}
	if !found || len(spec.ProtoReflect().GetUnknown()) > 0 {
		return whole()
	}
	out := shallowCopy(spec, "config_patches").(*networking.EnvoyFilter)
	out.ConfigPatches = cps
	return deterministic.Marshal(out)
}

// valueField is the number of EnvoyFilter.Patch's value.
const valueField = 2

// shallowCopy is a new message of m's type holding m's fields but the one
// named skip; message fields are shared, not copied.
func shallowCopy(m proto.Message, skip protoreflect.Name) proto.Message {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != skip {
			dst.Set(fd, v)
		}
		return true
	})
	return dst.Interface()
}
