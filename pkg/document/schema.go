package document

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/canary"
)

// Schema is a JSON Schema (draft 2020-12) node.
type Schema struct {
	Schema               string             `json:"$schema,omitempty"`
	Title                string             `json:"title,omitempty"`
	Description          string             `json:"description,omitempty"`
	Type                 []string           `json:"type,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	AdditionalProperties any                `json:"additionalProperties,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Enum                 []any              `json:"enum,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	Pattern              string             `json:"pattern,omitempty"`
	Default              json.RawMessage    `json:"default,omitempty"`
}

// JSONSchema describes the document for editors (yaml-language-server):
// every registered item with its keys, types, enums, defaults and limits,
// and no unknown keys anywhere. The limits are the ones validation
// enforces, from the same declarations: each value type's items.Limits
// and each item's items.Range list.
func JSONSchema() *Schema {
	root := &Schema{
		Schema:               "https://json-schema.org/draft/2020-12/schema",
		Title:                "globalconfig document",
		Description:          "The config.yaml key of the global ConfigMap.",
		Type:                 []string{"object"},
		Properties:           map[string]*Schema{},
		AdditionalProperties: false,
	}
	target := schemaOf(reflect.TypeFor[envoyfilter.Target](), reflect.Value{})
	target.Description = "Where the generated EnvoyFilters apply; an item's own target overrides it field by field."
	target.Properties["clusters"].Items.Pattern = envoyfilter.ClusterNamePattern
	root.Properties[TargetKey] = target
	policy := schemaOf(reflect.TypeFor[canary.Policy](), reflect.Value{})
	for _, rng := range (canary.Policy{}).Ranges() {
		setRange(policy, rng, reflect.TypeFor[canary.Policy](), canary.Key)
	}
	policy.Description = "How a change reaches the fleet: at once (Direct), or canary proxies first (Canary). See docs/rollout.md."
	root.Properties[canary.Key] = policy
	for _, r := range items.All() {
		def := r.NewItem()
		s := schemaOf(reflect.TypeOf(def).Elem(), reflect.ValueOf(def).Elem())
		if rg, ok := def.(items.Ranger); ok {
			for _, rng := range rg.Ranges() {
				setRange(s, rng, reflect.TypeOf(def), r.Name)
			}
		}
		s.Description = r.Summary
		s.Type = append(s.Type, "null")
		s.Properties[TargetKey] = target
		root.Properties[r.Name] = s
		for top, key := range r.TopLevel {
			alias := *s.Properties[key]
			alias.Description = fmt.Sprintf("Same as %s.%s (Higress writes it at the top level).", r.Name, key)
			root.Properties[top] = &alias
		}
	}
	return root
}

// setRange puts the range r of the item named item, of type t, on the node
// its path names in the item's schema s. A path that names no node is a
// programming error, as it is for items.CheckRanges.
func setRange(s *Schema, r items.Range, t reflect.Type, item string) {
	n := s
	for _, k := range r.Keys() {
		switch k {
		case "[]":
			n = n.Items
		case "*":
			n, _ = n.AdditionalProperties.(*Schema)
		default:
			n = n.Properties[k]
		}
		if n == nil {
			panic(fmt.Sprintf("document: %s: Range %q names no key of the schema", item, r.Path))
		}
	}
	if r.Duration {
		kt, err := r.KeyType(t)
		if err != nil {
			panic(fmt.Sprintf("document: %s: Range %q: %v", item, r.Path, err))
		}
		unit, ok := items.DurationUnit(kt)
		if !ok {
			panic(fmt.Sprintf("document: %s: Range %q: %s has no unit", item, r.Path, kt))
		}
		l := items.DurationLimits(r, unit)
		n.Minimum, n.Pattern = l.Minimum, l.Pattern
		if l.Maximum != nil {
			n.Maximum = l.Maximum
		}
		return
	}
	lo := r.Min
	n.Minimum = &lo
	n.Maximum = nil
	if !math.IsInf(r.Max, 1) {
		hi := r.Max
		n.Maximum = &hi
	}
	n.Enum = nil
	for _, v := range r.OneOf {
		n.Enum = append(n.Enum, v)
	}
}

// schemaOf describes type t; def, when valid, is its default value.
func schemaOf(t reflect.Type, def reflect.Value) *Schema {
	s := &Schema{}
	if l, ok := items.LimitsOf(t); ok {
		s.Minimum, s.Maximum, s.Pattern = clone(l.Minimum), clone(l.Maximum), l.Pattern
	}
	if types, ok := items.SchemaTypes(t); ok {
		s.Type = types
		s.Default = defaultOf(def)
		return s
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), reflect.Value{})
	case reflect.Struct:
		s.Type = []string{"object"}
		s.AdditionalProperties = false
		s.Properties = map[string]*Schema{}
		for _, f := range items.Fields(t) {
			var fv reflect.Value
			if def.IsValid() {
				fv = def.FieldByIndex(f.Index)
			}
			fs := schemaOf(t.FieldByIndex(f.Index).Type, fv)
			fs.Description = f.Doc
			s.Properties[f.Name] = fs
		}
	case reflect.Map:
		s.Type = []string{"object"}
		s.AdditionalProperties = schemaOf(t.Elem(), reflect.Value{})
	case reflect.Slice:
		s.Type = []string{"array"}
		s.Items = schemaOf(t.Elem(), reflect.Value{})
		s.Default = defaultOf(def)
	case reflect.String:
		s.Type = []string{"string"}
		values, _ := items.EnumValues(t)
		for _, v := range values {
			s.Enum = append(s.Enum, v)
		}
		s.Default = defaultOf(def)
	case reflect.Bool:
		s.Type = []string{"boolean"}
		s.Default = defaultOf(def)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s.Type = []string{"integer"}
		s.Default = defaultOf(def)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s.Type = []string{"integer"}
		if s.Minimum == nil {
			zero := 0.0
			s.Minimum = &zero
		}
		s.Default = defaultOf(def)
	case reflect.Float32, reflect.Float64:
		s.Type = []string{"number"}
		s.Default = defaultOf(def)
	}
	return s
}

// clone copies a bound, so no two nodes share one.
func clone(f *float64) *float64 {
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

func defaultOf(v reflect.Value) json.RawMessage {
	if !v.IsValid() || v.IsZero() {
		return nil
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return nil
	}
	return b
}
