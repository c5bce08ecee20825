package items

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// NodeDecoder reads a whole YAML value itself, whatever its kind (a
// scalar, a mapping or a list): the document decoder hands it the node.
type NodeDecoder interface {
	DecodeNode(n *yaml.Node) error
}

// JSONValue is one value of a JSON object Envoy formats (an access log's
// json_format, a local reply's json body): a string, which Envoy reads as
// a format string; a number or a boolean, which Envoy writes as it is; or
// a nested object or list of those. Envoy's json_format is a
// google.protobuf.Struct, and ECS log lines and RFC 7807 problem bodies
// are written nested.
type JSONValue struct {
	// Kind is "string", "number", "bool", "object" or "list". The fields
	// are no document keys (json:"-"): the value reads its node whole.
	Kind string `json:"-"`
	// Text is a string's text, or a number or boolean as written.
	Text   string               `json:"-"`
	Object map[string]JSONValue `json:"-"`
	List   []JSONValue          `json:"-"`
}

var (
	_ NodeDecoder = (*JSONValue)(nil)
	_ SchemaTyper = JSONValue{}
)

// DecodeNode implements NodeDecoder.
func (v *JSONValue) DecodeNode(n *yaml.Node) error {
	switch n.Kind {
	case yaml.AliasNode:
		return fmt.Errorf("YAML aliases are not supported; write the value out")
	case yaml.MappingNode:
		v.Kind, v.Object = "object", make(map[string]JSONValue, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return fmt.Errorf("a JSON object's keys are strings, got %s", DescribeTag(k.ShortTag()))
			}
			if _, dup := v.Object[k.Value]; dup {
				return fmt.Errorf("%s: duplicate key", k.Value)
			}
			var e JSONValue
			if err := e.DecodeNode(n.Content[i+1]); err != nil {
				return fmt.Errorf("%s: %w", k.Value, err)
			}
			v.Object[k.Value] = e
		}
		return nil
	case yaml.SequenceNode:
		v.Kind, v.List = "list", make([]JSONValue, len(n.Content))
		for i, c := range n.Content {
			if err := v.List[i].DecodeNode(c); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			v.Kind, v.Text = "string", n.Value
			return nil
		case "!!int", "!!float":
			f, err := strconv.ParseFloat(n.Value, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("must be a finite number, got %s", n.Value)
			}
			v.Kind, v.Text = "number", n.Value
			return nil
		case "!!bool":
			v.Kind, v.Text = "bool", n.Value
			return nil
		case "!!null":
			return errNull
		}
	}
	return fmt.Errorf("expected a JSON value, got %s", DescribeTag(n.ShortTag()))
}

// errNull is the problem of a null.
var errNull = fmt.Errorf("is null, which Envoy does not write; give a string, a number, a boolean, an object or a list")

// SchemaTypes implements SchemaTyper: any JSON value but null.
func (JSONValue) SchemaTypes() []string {
	return []string{"string", "number", "boolean", "object", "array"}
}

// MarshalJSON writes the value as the JSON it stands for.
func (v JSONValue) MarshalJSON() ([]byte, error) {
	switch v.Kind {
	case "object":
		if v.Object == nil {
			return []byte("{}"), nil
		}
		return json.Marshal(v.Object)
	case "list":
		if v.List == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(v.List)
	case "number":
		f, _ := strconv.ParseFloat(v.Text, 64)
		return json.Marshal(f)
	case "bool":
		return json.Marshal(v.Text == "true")
	}
	return json.Marshal(v.Text)
}

// Proto is the value as the google.protobuf.Value Envoy reads.
func (v JSONValue) Proto() *structpb.Value {
	switch v.Kind {
	case "object":
		return structpb.NewStructValue(JSONStruct(v.Object))
	case "list":
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(v.List))}
		for i, e := range v.List {
			l.Values[i] = e.Proto()
		}
		return structpb.NewListValue(l)
	case "number":
		f, _ := strconv.ParseFloat(v.Text, 64)
		return structpb.NewNumberValue(f)
	case "bool":
		b, _ := strconv.ParseBool(v.Text)
		return structpb.NewBoolValue(b)
	}
	return structpb.NewStringValue(v.Text)
}

// JSONStruct is the object obj as the google.protobuf.Struct Envoy reads.
func JSONStruct(obj map[string]JSONValue) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(obj))}
	for k, v := range obj {
		s.Fields[k] = v.Proto()
	}
	return s
}

// eachString calls f with the path (under at) and text of every string in
// obj, in key order.
func eachString(at string, obj map[string]JSONValue, f func(path, s string)) {
	var walk func(path string, v JSONValue)
	walk = func(path string, v JSONValue) {
		switch v.Kind {
		case "string":
			f(path, v.Text)
		case "object":
			for _, k := range slices.Sorted(maps.Keys(v.Object)) {
				walk(fielderr.Key(path, k), v.Object[k])
			}
		case "list":
			for i, e := range v.List {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk(at, JSONValue{Kind: "object", Object: obj})
}

// CheckJSON records a problem at every string of the JSON object obj (at
// at, "json") that is no format string Envoy takes, with its own path
// ("json.error.code"): the one format rule of TextFormat; and at every
// object, nested ones included, with an empty key, which names no field.
func CheckJSON(p *Problems, at string, obj map[string]JSONValue) {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if obj[k].Kind == "" {
			// The document decoder leaves a null unset.
			p.Addf(fielderr.Key(at, k), "%s", errNull)
		}
	}
	var keys func(path string, obj map[string]JSONValue)
	keys = func(path string, obj map[string]JSONValue) {
		if _, ok := obj[""]; ok {
			p.Addf(path, "has an empty key; every JSON field needs a name")
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			switch v := obj[k]; v.Kind {
			case "object":
				keys(fielderr.Key(path, k), v.Object)
			case "list":
				for i, e := range v.List {
					if e.Kind == "object" {
						keys(fmt.Sprintf("%s[%d]", fielderr.Key(path, k), i), e.Object)
					}
				}
			}
		}
	}
	keys(at, obj)
	eachString(at, obj, func(path, s string) {
		envoyformat.CheckIn(p, path, s, envoyformat.Text)
	})
}

// JSONFor is TextsFor for a JSON object: a problem at every string of obj
// that the proxies of Envoy release envoy refuse though a newer Envoy
// takes it.
func JSONFor(at string, obj map[string]JSONValue, envoy envoyfilter.Version) error {
	var p Problems
	eachString(at, obj, func(path, s string) {
		for _, pr := range envoyformat.Analyze(s, envoyformat.Text).For(envoy) {
			if pr.Since != (envoyfilter.Version{}) {
				p.Addf(path, "%s", pr.Message)
			}
		}
	})
	return p.Err()
}
