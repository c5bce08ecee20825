package envoyfilter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"
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

// NewObject builds the EnvoyFilter of item from its patches. Every patch
// value passes Check; every failing patch is reported, each under
// "patches[i]".
func NewObject(item string, at Placement, t Target, patches []Patch) (*Object, error) {
	spec := &networking.EnvoyFilter{Priority: at.Priority}
	if len(t.Selector) > 0 {
		spec.WorkloadSelector = &networking.WorkloadSelector{Labels: t.Selector}
	}
	var errs fielderr.List
	if len(patches) == 0 {
		errs.Addf("", "item produced no patches")
	}
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
		spec.ConfigPatches = append(spec.ConfigPatches, &networking.EnvoyFilter_EnvoyConfigObjectPatch{
			ApplyTo: p.ApplyTo,
			Match:   match,
			Patch:   &networking.EnvoyFilter_Patch{Operation: p.Operation, Value: value},
		})
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	hash, err := SpecHash(spec)
	if err != nil {
		return nil, err
	}
	ns := t.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	return &Object{
		APIVersion: APIVersion,
		Kind:       Kind,
		Metadata: Metadata{
			Name:        ObjectName(item),
			Namespace:   ns,
			Labels:      map[string]string{LabelManagedBy: ManagedByValue, LabelItem: item},
			Annotations: map[string]string{AnnotationContentHash: hash},
		},
		Spec: spec,
	}, nil
}

// SpecHash is a short, stable hash of an EnvoyFilter spec.
func SpecHash(spec *networking.EnvoyFilter) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hash spec: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}
