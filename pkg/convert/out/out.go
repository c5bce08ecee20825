// Package out holds what every converter shares: the YAML node helpers the
// converted document is built with (so each written key can carry a
// comment), the global ConfigMap manifest that carries the document, and
// the key-by-key report.
package out

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// Mapping is a YAML mapping of the pairs, in order.
func Mapping(pairs ...[2]*yaml.Node) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, p := range pairs {
		n.Content = append(n.Content, p[0], p[1])
	}
	return n
}

// Pair is one key of a Mapping.
func Pair(key string, value *yaml.Node) [2]*yaml.Node {
	return [2]*yaml.Node{Str(key), value}
}

// Str is a string scalar.
func Str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

// Int is an integer scalar.
func Int[T ~int32 | ~uint32 | ~int | ~uint64 | ~int64](v T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(v), 10)}
}

// Bool is a boolean scalar.
func Bool(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// Float is a number scalar, at full precision.
func Float(v float64) *yaml.Node {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0" // reads as a number without an explicit tag
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
}

// List is a sequence of strings.
func List(values []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, v := range values {
		n.Content = append(n.Content, Str(v))
	}
	return n
}

// Shown is how a value node reads in a report: a scalar as it is, a list
// in brackets.
func Shown(n *yaml.Node) string {
	if n.Kind != yaml.SequenceNode {
		return n.Value
	}
	var vs []string
	for _, c := range n.Content {
		vs = append(vs, c.Value)
	}
	return "[" + strings.Join(vs, ", ") + "]"
}

// ShownList is Shown for a report line that echoes a list: cut as Cut
// cuts it to max bytes, without joining more of a long list than it
// shows. A scalar is shown whole.
func ShownList(n *yaml.Node, max int) string {
	if n.Kind != yaml.SequenceNode {
		return n.Value
	}
	total := len("[]")
	for i, c := range n.Content {
		if i > 0 {
			total += len(", ")
		}
		total += len(c.Value)
	}
	if total <= max {
		return Shown(n)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range n.Content {
		if b.Len() > max {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Value)
	}
	if b.Len() == total-1 {
		b.WriteByte(']')
	}
	return cutAt(b.String(), max, total)
}

// Encode writes a document node as YAML, two spaces an indent level.
func Encode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Document encodes a converted document and checks that globalconfig
// accepts it: anything else is a bug in the converter, not in the user's
// file. The check reads the tree the converter built (document.ParseTree)
// while it is encoded; the fuzz tests hold the encoded text to the same
// check. alongside, when not nil, is called with the encoded document (a
// converter wraps it in its ConfigMap then), and has returned when
// Document does.
func Document(root *yaml.Node, alongside func(doc []byte)) ([]byte, error) {
	var (
		b      []byte
		encErr error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		if b, encErr = Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); encErr == nil && alongside != nil {
			alongside(b)
		}
	})
	_, err := document.ParseTree(root)
	wg.Wait()
	if encErr != nil {
		return nil, fmt.Errorf("encode document: %w", encErr)
	}
	if err == nil && len(b) > document.MaxSize {
		_, err = document.Parse(b) // refused for its size, before parsing
	}
	if err != nil {
		// A value the converter's own checks let through: name each key
		// of the converted document and why, never the document itself.
		var derr *document.Error
		if !errors.As(err, &derr) {
			return nil, fmt.Errorf("the converted document does not parse: %v", err)
		}
		var errs fielderr.List
		for _, p := range derr.Problems {
			errs.Addf(p.Path, "converts to a value globalconfig refuses: %s", p.Msg)
		}
		return nil, errs.Err()
	}
	return b, nil
}

// Manifest wraps a document in the global ConfigMap NAMESPACE/NAME
// (default istio-system/global-config), labelled for the admission
// webhook, under a head comment saying where it came from.
func Manifest(doc []byte, configMap, comment string) ([]byte, error) {
	ns, name, ok := strings.Cut(configMap, "/")
	if configMap == "" {
		ns, name, ok = "istio-system", "global-config", true
	}
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--configmap must be NAMESPACE/NAME, got %q", configMap)
	}
	root := Mapping(
		Pair("apiVersion", Str("v1")),
		Pair("kind", Str("ConfigMap")),
		Pair("metadata", Mapping(
			Pair("name", Str(name)),
			Pair("namespace", Str(ns)),
			Pair("labels", Mapping(
				Pair("app.kubernetes.io/part-of", Str("globalconfig")),
			)),
		)),
		Pair("data", Mapping(
			Pair(document.DataKey, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(doc), Style: yaml.LiteralStyle}),
		)),
	)
	root.HeadComment = comment
	if !fastManifest || !plainLiteral(doc) {
		return Encode(root)
	}
	// The document is the last value: encoded with a one-line stand-in,
	// its lines then go where the stand-in's went, indented as the
	// encoder indents a literal block. The encoder writes a document of
	// up to 1 MiB byte by byte, and keeps every event of it.
	data := root.Content[len(root.Content)-1]
	data.Content[1].Value = "x\n"
	b, err := Encode(root)
	if err != nil {
		return nil, err
	}
	head, ok := bytes.CutSuffix(b, []byte("x\n"))
	indent := head[bytes.LastIndexByte(head[:len(head)-1], '\n')+1:]
	if !ok || !bytes.HasSuffix(head, []byte(": |\n"+string(indent))) || len(bytes.Trim(indent, " ")) != 0 {
		data.Content[1].Value = string(doc)
		return Encode(root)
	}
	out := bytes.NewBuffer(make([]byte, 0, len(head)+len(doc)+len(doc)/8))
	out.Write(head[:len(head)-len(indent)])
	for line := range bytes.Lines(doc) {
		if len(line) > 1 {
			out.Write(indent)
		}
		out.Write(line)
	}
	return out.Bytes(), nil
}

// fastManifest is false only in the test that holds Manifest's output to
// the encoder's.
var fastManifest = true

// plainLiteral reports whether the encoder writes doc as a literal block
// of its lines, each indented, with no indicator beyond "|": printable
// ASCII lines without trailing spaces, the first not indented, ending in
// one line break.
func plainLiteral(doc []byte) bool {
	if len(doc) == 0 || doc[0] == ' ' || doc[0] == '\n' || doc[len(doc)-1] != '\n' || bytes.HasSuffix(doc, []byte("\n\n")) {
		return false
	}
	for i, c := range doc {
		switch {
		case c == '\n':
			if i > 0 && doc[i-1] == ' ' {
				return false
			}
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return true
}

// Entry is one line of a report.
type Entry[V ~string] struct {
	Key     string `json:"key"`
	Value   string `json:"value,omitempty"` // empty for secrets
	Verdict V      `json:"verdict"`
	Detail  string `json:"detail"`
}

// Report is the key-by-key account of a conversion.
type Report[V ~string] struct {
	Entries []Entry[V] `json:"entries"`
}

// Add records a key without its value.
func (r *Report[V]) Add(key string, v V, detail string) {
	r.Entries = append(r.Entries, Entry[V]{Key: key, Verdict: v, Detail: detail})
}

// AddValue records a key with its value.
func (r *Report[V]) AddValue(key, value string, v V, detail string) {
	r.Entries = append(r.Entries, Entry[V]{Key: key, Value: value, Verdict: v, Detail: detail})
}

// Of returns the entries with verdict v.
func (r Report[V]) Of(v V) []Entry[V] {
	return r.where(func(e Entry[V]) bool { return e.Verdict == v })
}

// Find returns the entries for key.
func (r Report[V]) Find(key string) []Entry[V] {
	return r.where(func(e Entry[V]) bool { return e.Key == key })
}

func (r Report[V]) where(keep func(Entry[V]) bool) []Entry[V] {
	var out []Entry[V]
	for _, e := range r.Entries {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// Write prints the report for people: one group per verdict, in order,
// each under its title.
func (r Report[V]) Write(w io.Writer, order []V, titles map[V]string) {
	for _, v := range order {
		entries := r.Of(v)
		if len(entries) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s:\n", titles[v])
		for _, e := range entries {
			key := e.Key
			if e.Value != "" {
				key += " = " + e.Value
			}
			fmt.Fprintf(w, "  %s: %s\n", key, e.Detail)
		}
	}
}
