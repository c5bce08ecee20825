package document_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	examples "github.com/globalconfig/globalconfig/test/example"
)

// The JSON Schema carries the limits validation enforces, from the same
// declarations. These tests hold the two to each other: every document
// below is judged as `globalconfig validate` judges it and by the whole
// schema `globalconfig schema` prints (with a real JSON Schema
// validator), and both must give the expected verdict. Removing a limit
// from either side fails them.

// example is the full example ConfigMap.
const example = "../../deploy/examples/global-config.yaml"

// validate is what `globalconfig validate` runs (pkg/cli's load): parse,
// then render every EnvoyFilter, which checks each with Envoy's rules.
func validate(src []byte) (ok bool, problems string) {
	doc, err := document.NewParserFor(nil).ParseFile(src)
	if err == nil {
		_, err = render.Desired(doc)
	}
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

// verdicts are what validation and the schema say of doc.
func verdicts(t *testing.T, schema *jsonschema.Schema, doc *yaml.Node) (ok bool, problems string, schemaErr error) {
	t.Helper()
	src, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	ok, problems = validate(src)
	var tree any
	if err := yaml.Unmarshal(src, &tree); err != nil {
		t.Fatal(err)
	}
	return ok, problems, schema.Validate(jsonValue(t, tree))
}

// limitsCase is one value put into the full example.
type limitsCase struct {
	path  string // item name, then keys ("tracing.zipkin.port")
	value *yaml.Node
	valid bool
}

func intNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: s} }

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

// numberNode writes a Range's bound as YAML: an integer when it is one.
func numberNode(f float64) *yaml.Node {
	if f == math.Trunc(f) {
		return intNode(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f, 'f', -1, 64)}
}

// rangeCases are, for every Range of every registered item, a value below
// its minimum and one above its maximum (refused) and both bounds
// (accepted).
func rangeCases(t *testing.T) []limitsCase {
	t.Helper()
	var out []limitsCase
	for _, r := range items.All() {
		rg, ok := r.NewItem().(items.Ranger)
		if !ok {
			continue
		}
		for _, rng := range rg.Ranges() {
			path := r.Name + "." + rng.Path
			if rng.Duration {
				out = append(out, durationCases(path, rng)...)
				continue
			}
			out = append(out,
				limitsCase{path, numberNode(rng.Min - 1), false},
				limitsCase{path, numberNode(rng.Min), true},
			)
			if !math.IsInf(rng.Max, 1) {
				out = append(out,
					limitsCase{path, numberNode(rng.Max), true},
					limitsCase{path, numberNode(rng.Max + 1), false},
				)
			}
			// A value between the bounds that OneOf leaves out.
			for v := rng.Min + 1; rng.OneOf != nil && v < rng.Max; v++ {
				if !slices.Contains(rng.OneOf, v) {
					out = append(out, limitsCase{path, numberNode(v), false})
					break
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no item declares a Range")
	}
	// The rollout policy's bakeTime and phaseTimeout, 0 included: a key
	// left out takes its default, one written is held to its range.
	for _, rng := range (canary.Policy{}).Ranges() {
		path := canary.Key + "." + rng.Path
		if !rng.Duration {
			out = append(out,
				limitsCase{path, numberNode(rng.Min - 1), false}, limitsCase{path, numberNode(rng.Min), true},
				limitsCase{path, numberNode(rng.Max), true}, limitsCase{path, numberNode(rng.Max + 1), false})
			continue
		}
		out = append(out, durationCases(path, rng)...)
	}
	return out
}

// stagedKeys are the rollout keys of a rollout across clusters, which
// take strategy Direct and a clusters list.
var stagedKeys = []string{"minSuccessTime", "progressDeadline", "maxFailures"}

// setRolloutFor gives the rollout section what the key keys[1] of it
// needs beside it: strategy Canary for the canary keys, a clusters list
// for a rollout across clusters (with the longest progressDeadline, as
// minSuccessTime may not exceed it, a rule between two keys that a
// schema can't state).
func setRolloutFor(t *testing.T, doc *yaml.Node, key string) {
	t.Helper()
	if !slices.Contains(stagedKeys, key) {
		setPath(t, doc, []string{canary.Key, "strategy"}, strNode(string(canary.Canary)))
		return
	}
	var clusters yaml.Node
	if err := yaml.Unmarshal([]byte("[[a]]"), &clusters); err != nil {
		t.Fatal(err)
	}
	setPath(t, doc, []string{canary.Key, "clusters"}, clusters.Content[0])
	if key == "minSuccessTime" {
		setPath(t, doc, []string{canary.Key, "progressDeadline"}, strNode(oneUnit(canary.MaxProgressDeadline)))
	}
}

// durationCases are a duration Range's bounds (accepted) and a nanosecond
// past each (refused), written in one unit as the schema's pattern takes
// them, and 0 as an integer.
func durationCases(path string, rng items.Range) []limitsCase {
	lo := time.Duration(math.Round(rng.Min * float64(time.Second)))
	out := []limitsCase{
		{path, strNode(oneUnit(lo)), true},
		{path, strNode(oneUnit(lo - 1)), false},
		{path, intNode("0"), lo <= 0},
	}
	if !math.IsInf(rng.Max, 1) {
		hi := time.Duration(math.Round(rng.Max * float64(time.Second)))
		out = append(out, limitsCase{path, strNode(oneUnit(hi)), true}, limitsCase{path, strNode(oneUnit(hi + 1)), false})
	}
	return out
}

// oneUnit writes d as a whole number of the largest unit that divides it.
func oneUnit(d time.Duration) string {
	for _, u := range []struct {
		size   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d%u.size == 0 {
			return strconv.FormatInt(int64(d/u.size), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// valueCases exercise the value types' Limits: Port, the durations and
// ByteSize, in both their number and their string forms.
var valueCases = []limitsCase{
	{"tracing.zipkin.port", intNode("0"), false},
	{"tracing.zipkin.port", intNode("65536"), false},
	{"tracing.zipkin.port", strNode("0"), false},
	{"tracing.zipkin.port", strNode("65536"), false},
	{"tracing.zipkin.port", strNode("http"), false},
	{"tracing.zipkin.port", strNode(""), false},
	{"tracing.zipkin.port", intNode("1"), true},
	{"tracing.zipkin.port", intNode("65535"), true},
	{"tracing.zipkin.port", strNode("65535"), true},
	{"tracing.zipkin.port", strNode("9411"), true},
	{"tls.ports", &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{intNode("443"), intNode("65536")}}, false},
	{"tls.ports", &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{intNode("443"), strNode("8443")}}, true},
	// Seconds: integers up to 10 years.
	{"downstream.idleTimeout", intNode("315360000"), true},
	{"downstream.idleTimeout", intNode("315360001"), false},
	{"downstream.idleTimeout", intNode("-1"), false},
	{"downstream.idleTimeout", strNode("1m30s"), true},
	{"downstream.idleTimeout", strNode("+1.5h"), true},
	{"downstream.idleTimeout", strNode("0"), true},
	{"downstream.idleTimeout", strNode("5 minutes"), false},
	{"downstream.idleTimeout", strNode("1h30"), false},
	{"downstream.idleTimeout", strNode("90"), false},
	{"downstream.idleTimeout", strNode("-5s"), false},
	{"downstream.idleTimeout", strNode("-0s"), false},
	{"downstream.idleTimeout", strNode("1d"), false},
	// Millis: integers are milliseconds.
	{"tracing.timeout", intNode("315360000000"), true},
	{"tracing.timeout", intNode("315360000001"), false},
	{"tracing.timeout", strNode("250ms"), true},
	{"tracing.timeout", strNode("250 ms"), false},
	// ByteSize.
	{"requestBody.maxSize", strNode("10Mi"), true},
	{"requestBody.maxSize", strNode("512K"), true},
	{"requestBody.maxSize", intNode("1048576"), true},
	{"requestBody.maxSize", strNode("10MB"), false},
	{"requestBody.maxSize", strNode("10 Mi"), false},
	{"requestBody.maxSize", strNode("1048576"), false},
	{"requestBody.maxSize", strNode("-1Ki"), false},
	{"requestBody.maxSize", intNode("-1"), false},
}

// TestSchemaAndValidateAgreeOnLimits puts each value into the full example
// and asks `globalconfig validate` and the schema of `globalconfig schema`
// about the document: both must accept the in-range values and refuse the
// others.
func TestSchemaAndValidateAgreeOnLimits(t *testing.T) {
	schema := compileSchema(t)
	// Every option of every item is set, so that every Range's key, list
	// elements included, has a value to replace.
	base := everythingDocument(t)
	// An invalid value must be refused at its key: Envoy's own rules,
	// which rendering checks, refuse some values too, but at the patch
	// and after the fact.
	check := func(t *testing.T, doc *yaml.Node, path string, valid bool) {
		t.Helper()
		ok, problems, schemaErr := verdicts(t, schema, doc)
		// setPath sets a list's first element.
		// setPath sets a list's first element and a map's first value.
		at := regexp.MustCompile(strings.NewReplacer(`\[\]`, `\[0\]`, `\*`, `[^.]+`).Replace(regexp.QuoteMeta(path)))
		if ok != valid || (!valid && !at.MatchString(problems)) {
			t.Errorf("validate: valid=%v, want %v with a problem at %s\n%s", ok, valid, path, problems)
		}
		if (schemaErr == nil) != valid {
			t.Errorf("schema: %v, want valid=%v", schemaErr, valid)
		}
	}
	t.Run("everything", func(t *testing.T) { check(t, base, "", true) })
	for _, c := range append(rangeCases(t), valueCases...) {
		value, _ := yaml.Marshal(c.value)
		t.Run(fmt.Sprintf("%s=%s", c.path, strings.TrimSpace(string(value))), func(t *testing.T) {
			doc := cloneNode(base)
			if key, ok := strings.CutPrefix(c.path, canary.Key+"."); ok {
				// The policy's keys other than strategy need Canary, or
				// clusters.
				setRolloutFor(t, doc, key)
			}
			if c.path == canary.Key+".phaseTimeout" {
				// Its floor is also the bake time, which a schema can't
				// say: the shortest bake time leaves the range's floor.
				setPath(t, doc, []string{canary.Key, "bakeTime"}, strNode(canary.MinBakeTime.String()))
			}
			requestsForm(t, doc, c.path)
			setPath(t, doc, items.Range{Path: c.path}.Keys(), c.value)
			check(t, only(doc, c.path), c.path, c.valid)
		})
	}
}

// TestValueLimitsMatchDecodeScalar holds each value type's Limits to its
// DecodeScalar, value by value: the bounds against integers around them,
// the pattern against every short string of the characters that matter.
func TestValueLimitsMatchDecodeScalar(t *testing.T) {
	for _, c := range []struct {
		decoder  func() items.ScalarDecoder
		alphabet []string
		extra    []string
		overflow []string
	}{
		{func() items.ScalarDecoder { return new(items.Seconds) },
			[]string{"0", "1", "9", ".", "+", "-", "s", "m", "h", "n", "u", "µ", "μ", " ", "d"},
			[]string{"1m30s", "250ms", "1h2m3.5s", "10.000001us", "1.5µs", "007s"},
			[]string{"3000000h", "99999999999999999999s"}},
		{func() items.ScalarDecoder { return new(items.Millis) },
			[]string{"0", "5", ".", "+", "-", "s", "m", "h", "n"},
			[]string{"500ms", "2s"}, nil},
		{func() items.ScalarDecoder { return new(items.Port) },
			[]string{"0", "1", "5", "6", "9", "+", "-", " ", "x"},
			portStrings(), nil},
		{func() items.ScalarDecoder { return new(items.ByteSize) },
			[]string{"0", "1", "K", "M", "G", "i", "+", "-", " ", "B", "k"},
			[]string{"10Mi", "512Ki", "3Gi", "18446744073709551615", "007M"},
			[]string{"18446744073709551615K", "99999999999999999999Ki"}},
	} {
		typ := reflect.TypeOf(c.decoder()).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			l, ok := items.LimitsOf(typ)
			if !ok {
				t.Fatalf("%s declares no Limits", typ)
			}
			if l.Minimum == nil || l.Pattern == "" {
				t.Fatalf("%s: Limits %+v lack a minimum or a pattern", typ, l)
			}
			pattern := regexp.MustCompile(l.Pattern)
			accepts := func(tag, value string) bool { return c.decoder().DecodeScalar(tag, value) == nil }
			// The number form: each bound and one past it.
			bounds := []float64{*l.Minimum - 1, *l.Minimum}
			if l.Maximum != nil {
				bounds = append(bounds, *l.Maximum, *l.Maximum+1)
			}
			for _, b := range bounds {
				n := strconv.FormatFloat(b, 'f', -1, 64)
				inSchema := b >= *l.Minimum && (l.Maximum == nil || b <= *l.Maximum)
				if got := accepts("!!int", n); got != inSchema {
					t.Errorf("integer %s: DecodeScalar accepts=%v, schema accepts=%v", n, got, inSchema)
				}
			}
			// The string form: the pattern is its syntax. A string's
			// magnitude is not in it: what overflows is refused by
			// validation only.
			for _, s := range c.overflow {
				if accepts("!!str", s) || !pattern.MatchString(s) {
					t.Errorf("overflowing string %q: DecodeScalar accepts=%v, pattern matches=%v; want false, true", s, accepts("!!str", s), pattern.MatchString(s))
				}
			}
			mismatches := 0
			for _, s := range append(words(c.alphabet, 4), c.extra...) {
				if got, want := accepts("!!str", s), pattern.MatchString(s); got != want {
					if mismatches++; mismatches <= 10 {
						t.Errorf("string %q: DecodeScalar accepts=%v, pattern %s matches=%v", s, got, l.Pattern, want)
					}
				}
			}
		})
	}
}

// words returns every string of up to n symbols of alphabet.
func words(alphabet []string, n int) []string {
	out, last := []string{""}, []string{""}
	for range n {
		var next []string
		for _, w := range last {
			for _, a := range alphabet {
				next = append(next, w+a)
			}
		}
		out, last = append(out, next...), next
	}
	return out
}

// portStrings are the decimal numbers around the port range, some with
// leading zeros.
func portStrings() []string {
	var out []string
	for n := range 70000 {
		out = append(out, strconv.Itoa(n))
	}
	return append(out, "00080", "065535", "065536", "4294967297", "99999999999999999999")
}

// compileSchema compiles what `globalconfig schema` prints.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	out, err := json.MarshalIndent(document.JSONSchema(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("globalconfig.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("globalconfig.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// jsonValue turns a decoded YAML tree into the JSON value an editor's
// validator sees.
func jsonValue(t *testing.T, tree any) any {
	t.Helper()
	b, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// exampleDocument is the document of the full example ConfigMap.
func exampleDocument(t *testing.T) *yaml.Node {
	t.Helper()
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &doc); err != nil || doc.Kind != yaml.DocumentNode {
		t.Fatalf("the example's config.yaml: %v", err)
	}
	return &doc
}

// everythingDocument is each item's testdata/all.in.yaml (every option
// set), or its example.in.yaml when it has none, in one document.
func everythingDocument(t *testing.T) *yaml.Node {
	t.Helper()
	src, err := examples.Everything(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil || doc.Kind != yaml.DocumentNode {
		t.Fatalf("the everything document: %v", err)
	}
	return &doc
}

// only is doc with the item sections other than path's own taken out
// (target and rollout stay): a case's verdict is its section's, and the
// everything document's other sections, valid as the "everything" case
// shows, would only make each case parse every item again. A key that
// is no item's (rollout's) keeps the whole document.
func only(doc *yaml.Node, path string) *yaml.Node {
	section, _, _ := strings.Cut(path, ".")
	if _, ok := items.Lookup(section); !ok {
		return doc
	}
	root := doc.Content[0]
	kept := &yaml.Node{Kind: yaml.MappingNode, Tag: root.Tag}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i].Value; k == section || !isItem(k) {
			kept.Content = append(kept.Content, root.Content[i], root.Content[i+1])
		}
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{kept}}
}

func isItem(key string) bool { _, ok := items.Lookup(key); return ok }

func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, child := range n.Content {
		c.Content[i] = cloneNode(child)
	}
	return &c
}

// requestsForm makes a case of localRateLimit's limits.*.requests valid
// but for the value it sets: a scoped limit is written either as requests
// per unit or as a token bucket, never both (a rule between keys that a
// schema can't state), and the everything document's first limit is a
// token bucket. The case's limit becomes the requests form alone.
func requestsForm(t *testing.T, doc *yaml.Node, path string) {
	t.Helper()
	if path == "localRateLimit.limits.*.requests" {
		setPath(t, doc, []string{"localRateLimit", "limits", "*"}, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{strNode("unit"), strNode("minute")}})
	}
}

// setPath sets keys (mapping keys; "[]" is the first element of a list, "*"
// the first value of a map) of the document doc to value, creating the
// mappings on the way.
func setPath(t *testing.T, doc *yaml.Node, keys []string, value *yaml.Node) {
	t.Helper()
	n := doc.Content[0]
	for i, k := range keys {
		last := i == len(keys)-1
		switch k {
		case "[]", "*":
			if len(n.Content) == 0 {
				t.Fatalf("%s: the example has no element to set; give it one", strings.Join(keys, "."))
			}
			idx := 0
			if k == "*" {
				idx = 1
			}
			if last {
				n.Content[idx] = value
			}
			n = n.Content[idx]
			continue
		}
		if n.Kind != yaml.MappingNode {
			t.Fatalf("%s: %s is not a mapping", strings.Join(keys, "."), strings.Join(keys[:i], "."))
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == k {
				next = n.Content[j+1]
				if last {
					n.Content[j+1] = value
				}
			}
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			if last {
				next = value
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, next)
		}
		n = next
	}
}
