package document_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// bounded is one key of the schema with a minimum or a maximum.
type bounded struct {
	keys []string // from the document's root; "[]" a list's element, "*" a map's value
	node *document.Schema
}

// boundedKeys walks the schema `globalconfig schema` prints and returns
// every key whose node has a minimum or a maximum, whatever declared it
// (a value type's Limits, an item's Range, an unsigned type's floor). The
// shared target node is walked once, at the root.
func boundedKeys(s *document.Schema) []bounded {
	var out []bounded
	var walk func(n *document.Schema, keys []string)
	walk = func(n *document.Schema, keys []string) {
		if n == nil {
			return
		}
		if n.Minimum != nil || n.Maximum != nil {
			out = append(out, bounded{slices.Clone(keys), n})
		}
		names := make([]string, 0, len(n.Properties))
		for k := range n.Properties {
			if k == document.TargetKey && len(keys) > 0 {
				continue
			}
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			walk(n.Properties[k], append(keys, k))
		}
		if n.Items != nil {
			walk(n.Items, append(keys, "[]"))
		}
		if ap, ok := n.AdditionalProperties.(*document.Schema); ok {
			walk(ap, append(keys, "*"))
		}
	}
	walk(s, nil)
	return out
}

// edgeValues are the numbers at a bounded node's edges: its minimum and
// maximum, and just past each (1 for an integer key, a thousandth for a
// number), with a value inside an enum's span that the enum leaves out.
func edgeValues(n *document.Schema) []float64 {
	step := 1.0
	if slices.Contains(n.Type, "number") {
		step = 0.001
	}
	var out []float64
	if n.Minimum != nil {
		out = append(out, *n.Minimum, *n.Minimum-step)
	}
	if n.Maximum != nil {
		out = append(out, *n.Maximum, *n.Maximum+step)
	}
	if len(n.Enum) > 1 {
		in := map[float64]bool{}
		for _, v := range n.Enum {
			if f, ok := v.(float64); ok {
				in[f] = true
			}
		}
		for v := *n.Minimum + 1; v < *n.Maximum; v++ {
			if !in[v] {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

// edgeNode writes f as YAML: an integer when it is one.
func edgeNode(f float64) *yaml.Node {
	if f == math.Trunc(f) && math.Abs(f) < 1e18 {
		return intNode(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f, 'f', -1, 64)}
}

// goldenInputs are every item's valid golden inputs (those with an
// .out.yaml), each a whole document.
func goldenInputs(t *testing.T) []*yaml.Node {
	t.Helper()
	ins, err := filepath.Glob(filepath.Join("..", "..", "items", "*", "testdata", "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*yaml.Node
	for _, in := range ins {
		if _, err := os.Stat(strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"); err != nil {
			continue
		}
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(src, &doc); err != nil || doc.Kind != yaml.DocumentNode {
			t.Fatalf("%s: %v", in, err)
		}
		out = append(out, &doc)
	}
	return out
}

// baseFor is the first of docs that holds the section the key at keys
// belongs in (every key but the last), so that setting it changes that
// one key of a valid document: the everything document first, then the
// golden inputs (a tracing backend other than the everything document's
// is only in its own golden input, as tracing takes one backend). The
// rollout section, which no item's document has, is created.
func baseFor(docs []*yaml.Node, keys []string) *yaml.Node {
	for _, d := range docs {
		if keys[0] == canary.Key || reachable(d, keys[:len(keys)-1], false) {
			return d
		}
	}
	return nil
}

// reachable reports whether n holds keys, with an element for every list
// and a value for every map on the way (any value of a map will do); with
// create, a missing mapping key counts as held (setPath creates it).
func reachable(n *yaml.Node, keys []string, create bool) bool {
	if n != nil && n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	if len(keys) == 0 {
		return n != nil || create
	}
	if n == nil {
		return create
	}
	k, rest := keys[0], keys[1:]
	switch k {
	case "[]":
		return n.Kind == yaml.SequenceNode && len(n.Content) > 0 && reachable(n.Content[0], rest, create)
	case "*":
		for j := 1; n.Kind == yaml.MappingNode && j < len(n.Content); j += 2 {
			if reachable(n.Content[j], rest, create) {
				return true
			}
		}
		return false
	}
	if n.Kind != yaml.MappingNode {
		return false
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == k {
			return reachable(n.Content[j+1], rest, create)
		}
	}
	return reachable(nil, rest, create)
}

// setEdge sets keys of doc to value as setPath does, but a map's value is
// the first one that holds the rest of the section ("limits.*" the limit
// that has a perClientSubnet).
func setEdge(t *testing.T, doc *yaml.Node, keys []string, value *yaml.Node) {
	t.Helper()
	n := doc.Content[0]
	for i, k := range keys {
		if k != "*" {
			continue
		}
		m := n
		for _, step := range keys[:i] {
			m = child(m, step)
		}
		for j := 1; j < len(m.Content); j += 2 {
			if reachable(m.Content[j], keys[i+1:len(keys)-1], false) {
				// Move that value first, where setPath looks.
				m.Content[0], m.Content[1], m.Content[j-1], m.Content[j] = m.Content[j-1], m.Content[j], m.Content[0], m.Content[1]
				break
			}
		}
	}
	setPath(t, doc, keys, value)
}

// child is the node at one step under n.
func child(n *yaml.Node, step string) *yaml.Node {
	switch step {
	case "[]":
		return n.Content[0]
	case "*":
		return n.Content[1]
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		if n.Content[j].Value == step {
			return n.Content[j+1]
		}
	}
	return nil
}

// TestSchemaEdgesAgreeWithValidate derives its cases from the schema
// itself, not from a list or from the declarations: every key the schema
// bounds is set, in the document with every option of every item (or the
// first golden input with the key's section), to the schema's own minimum and maximum and to just past each, and the schema's
// verdict on the document must be validation's. An editor with the schema
// then never tells a user a value is fine that the webhook refuses, or the
// other way round.
func TestSchemaEdgesAgreeWithValidate(t *testing.T) {
	schema := compileSchema(t)
	docs := append([]*yaml.Node{everythingDocument(t)}, goldenInputs(t)...)
	keys := boundedKeys(document.JSONSchema())
	if len(keys) < 50 {
		t.Fatalf("the schema bounds %d keys; the walk is broken", len(keys))
	}
	var unreachable []string
	cases := 0
	for _, b := range keys {
		path := strings.Join(b.keys, ".")
		base := baseFor(docs, b.keys)
		if base == nil {
			unreachable = append(unreachable, path)
			continue
		}
		for _, v := range edgeValues(b.node) {
			value := edgeNode(v)
			cases++
			t.Run(fmt.Sprintf("%s=%s", path, value.Value), func(t *testing.T) {
				doc := cloneNode(base)
				if b.keys[0] == canary.Key {
					setRolloutFor(t, doc, b.keys[1])
					if b.keys[1] == "phaseTimeout" {
						// Its floor is also the bake time, a rule between
						// two keys that a schema can't state.
						setPath(t, doc, []string{canary.Key, "bakeTime"}, strNode(canary.MinBakeTime.String()))
					}
				}
				requestsForm(t, doc, path)
				setEdge(t, doc, b.keys, value)
				ok, problems, schemaErr := verdicts(t, schema, only(doc, path))
				if ok != (schemaErr == nil) {
					t.Errorf("validate says valid=%v, the schema valid=%v\nvalidate: %s\nschema: %v", ok, schemaErr == nil, problems, schemaErr)
				}
			})
		}
	}
	if len(unreachable) > 0 {
		t.Errorf("the everything document has no list element or map value on the way to %d bounded keys, so their edges go untested; give the item's all.in.yaml (or a golden input) one: %s",
			len(unreachable), strings.Join(unreachable, ", "))
	}
	t.Logf("%d bounded keys, %d edge cases", len(keys), cases)
}
