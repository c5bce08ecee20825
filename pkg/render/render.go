// Package render is the engine between the document and its EnvoyFilters.
// It validates a document, diffs it against the last one section by
// section, and dispatches only the changed sections to their items: an
// item whose section and target are unchanged reuses the EnvoyFilter it
// built and checked before. The controller, the MCP publisher, the
// admission webhook and the CLI all decide through it.
package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// Renderer renders documents, rebuilding only the items whose section or
// target changed since the last render. It is safe for concurrent use.
// The objects it returns are shared between renders: read them, never
// change them.
type Renderer struct {
	parser *document.Parser
	mu     sync.Mutex
	built  map[string]built // by item name
}

// built is an item's last checked EnvoyFilter and the key it was built for.
type built struct {
	key string
	obj *envoyfilter.Object
}

// New returns a Renderer with nothing built yet.
func New() *Renderer { return &Renderer{parser: document.NewParser(), built: map[string]built{}} }

// SetFacts makes every later render check the services items send to
// against f (document.Parser.SetFacts).
func (m *Renderer) SetFacts(f document.Facts) { m.parser.SetFacts(f) }

// SetClusters makes every later render check the names in target.clusters
// against the config clusters known returns: the home cluster and every
// member (document.Parser.SetClusters). The list is asked on every render
// and no verdict on it is kept, so a document refused for naming a member
// that is not there yet is accepted by the first render after it joins;
// the EnvoyFilters built do not depend on it.
func (m *Renderer) SetClusters(known func() []string) { m.parser.SetClusters(known) }

// Result is what one document renders to.
type Result struct {
	// Objects is the desired set: one EnvoyFilter per enabled item,
	// sorted by name. Nil when the document is invalid.
	Objects []*envoyfilter.Object
	// Keys maps each enabled item to its section key (see SectionKeys).
	Keys map[string]string
	// Rebuilt names the items built by this render; the others reused
	// their last EnvoyFilter.
	Rebuilt []string
	// Secrets are the document's secret values (items.SecretHolder), for
	// scrubbing messages; filled even when the document is invalid, as
	// far as it decoded.
	Secrets []string
	// Problems lists every problem, each with its path and line; nil
	// exactly when the document is valid.
	Problems []*fielderr.Error
	// Warnings are what the items say about a valid document
	// (items.Warner), each with its path and line.
	Warnings []*fielderr.Error
	// Rollout is the document's rollout policy.
	Rollout canary.Policy
}

// Valid reports whether the document was valid.
func (r Result) Valid() bool { return r.Problems == nil }

// FromConfigMap renders the document in a ConfigMap's data.
func (m *Renderer) FromConfigMap(data map[string]string) Result {
	src, ok := data[document.DataKey]
	if !ok {
		return Result{Problems: []*fielderr.Error{{Msg: fmt.Sprintf("the ConfigMap has no data key %q", document.DataKey)}}}
	}
	doc, err := m.parser.Parse([]byte(src))
	if err != nil {
		return Result{Problems: problems(err)}
	}
	return m.Build(doc)
}

// Build builds the desired set of a parsed document. A build or check
// failure of any item fails the whole set: nothing is published half-done.
func (m *Renderer) Build(doc *document.Document) Result {
	res := Result{Keys: SectionKeys(doc), Warnings: doc.Warnings(), Rollout: doc.Rollout}
	var errs fielderr.List
	m.mu.Lock()
	defer m.mu.Unlock()
	var todo []document.Section
	for _, s := range doc.Sections {
		if h, ok := s.Item.(items.SecretHolder); ok {
			res.Secrets = append(res.Secrets, h.Secrets()...)
		}
		key, enabled := res.Keys[s.Name]
		if b, ok := m.built[s.Name]; enabled && (!ok || b.key != key) {
			todo = append(todo, s)
		}
	}
	done := buildAll(todo)
	for _, s := range doc.Sections {
		key, enabled := res.Keys[s.Name]
		if !enabled {
			continue
		}
		b := m.built[s.Name]
		if r, ok := done[s.Name]; ok {
			if r.err != nil {
				errs.Add(s.Name, r.err)
				continue
			}
			b = built{key: key, obj: r.obj}
			m.built[s.Name] = b
			res.Rebuilt = append(res.Rebuilt, s.Name)
		}
		if b.obj != nil {
			res.Objects = append(res.Objects, b.obj)
		}
	}
	for name := range m.built {
		if _, ok := res.Keys[name]; !ok {
			delete(m.built, name) // no longer in the document
		}
	}
	if errs.Len() > 0 {
		res.Objects, res.Problems = nil, fielderr.Flatten(errs.Err())
	}
	return res
}

// outcome is what build returned for one item.
type outcome struct {
	obj *envoyfilter.Object
	err error
}

// buildAll builds secs, by item name, on as many goroutines as the process
// has processors: items build independently of each other, and everything
// they share (the checks' memos) is safe for concurrent use.
func buildAll(secs []document.Section) map[string]outcome {
	out := make(map[string]outcome, len(secs))
	workers := min(runtime.GOMAXPROCS(0), len(secs))
	if workers <= 1 {
		for _, s := range secs {
			obj, err := build(s)
			out[s.Name] = outcome{obj, err}
		}
		return out
	}
	results := make([]outcome, len(secs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(secs); i = int(next.Add(1)) - 1 {
				obj, err := build(secs[i])
				results[i] = outcome{obj, err}
			}
		})
	}
	wg.Wait()
	for i, s := range secs {
		out[s.Name] = results[i]
	}
	return out
}

// build runs one item and checks its EnvoyFilter. An item whose section
// asks for nothing at the proxy (downstream with only routeTimeout: 0)
// returns no patches and gets no EnvoyFilter. Every item is built for each
// Istio release of its target's fleet: a Versioned item's patches may
// differ by release, and a format string or header value an older Envoy
// refuses (items.TextsFor) is refused for the releases that have it.
// What it builds for each release is checked as that release's Envoy
// reads it (pkg/emitcheck): a regex, format string, header or file an item
// made from the document is held to the rules its input is.
func build(s document.Section) (*envoyfilter.Object, error) {
	texts, _ := s.Item.(items.Texter)
	v, versioned := s.Item.(items.Versioned)
	var fixed []envoyfilter.Patch
	if !versioned {
		var err error
		if fixed, err = s.Item.Build(); err != nil || len(fixed) == 0 {
			return nil, err
		}
	}
	empty := true
	emit := newEmitted(s.Item)
	obj, err := envoyfilter.NewVersionedObject(s.Name, s.Placement, s.Target, func(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
		if texts != nil {
			if err := items.TextsFor(texts, r.Envoy); err != nil {
				empty = false
				return nil, err
			}
		}
		if !versioned {
			empty = false
			return emit.check(fixed, r)
		}
		patches, err := v.BuildFor(r)
		empty = empty && err == nil && len(patches) == 0
		if err != nil {
			return nil, err
		}
		return emit.check(patches, r)
	})
	if empty && versioned {
		return nil, nil
	}
	if sc, ok := s.Item.(items.ServiceConfigurer); ok && err == nil {
		cfg, err := sc.ServiceConfig()
		if err != nil {
			return nil, err
		}
		if err := obj.SetServiceConfig(cfg); err != nil {
			return nil, fmt.Errorf("service config: %w", err)
		}
	}
	return obj, err
}

// Desired builds every enabled item of doc from scratch, sorted by name.
// The error is a *document.Error listing every failing item under its
// name.
func Desired(doc *document.Document) ([]*envoyfilter.Object, error) {
	res := New().Build(doc)
	if !res.Valid() {
		return nil, &document.Error{Problems: res.Problems}
	}
	return res.Objects, nil
}

// SectionKeys returns the section key (document.Section.Key) of every
// enabled item of doc.
func SectionKeys(doc *document.Document) map[string]string {
	keys := map[string]string{}
	for _, s := range doc.Sections {
		if s.Item.Enabled() {
			keys[s.Name] = s.Key
		}
	}
	return keys
}

// Diff says which items a change of document adds, changes, removes or
// leaves alone, by section key. It is what the controller's Events and
// status, the webhook's warning and `globalconfig diff` report.
type Diff struct {
	Added, Changed, Removed, Unchanged []string
}

// Compare diffs two sets of section keys; before may be nil (nothing
// applied yet).
func Compare(before, after map[string]string) Diff {
	var d Diff
	for _, name := range sortedKeys(after) {
		old, ok := before[name]
		switch {
		case !ok:
			d.Added = append(d.Added, name)
		case old != after[name]:
			d.Changed = append(d.Changed, name)
		default:
			d.Unchanged = append(d.Unchanged, name)
		}
	}
	for _, name := range sortedKeys(before) {
		if _, ok := after[name]; !ok {
			d.Removed = append(d.Removed, name)
		}
	}
	return d
}

// MarshalJSON writes the diff as tools read it, without the unchanged
// items: {"added":[…],"changed":[…],"removed":[…]}, never null.
func (d Diff) MarshalJSON() ([]byte, error) {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return json.Marshal(struct {
		Added   []string `json:"added"`
		Changed []string `json:"changed"`
		Removed []string `json:"removed"`
	}{nonNil(d.Added), nonNil(d.Changed), nonNil(d.Removed)})
}

// Empty reports whether nothing is added, changed or removed.
func (d Diff) Empty() bool { return len(d.Added)+len(d.Changed)+len(d.Removed) == 0 }

// String words the diff for people: "added brotli; changed gzip; removed
// zstd", or "no item changed".
func (d Diff) String() string {
	var parts []string
	for _, p := range []struct {
		verb  string
		names []string
	}{{"added", d.Added}, {"changed", d.Changed}, {"removed", d.Removed}} {
		if len(p.names) > 0 {
			parts = append(parts, p.verb+" "+strings.Join(p.names, ", "))
		}
	}
	if len(parts) == 0 {
		return "no item changed"
	}
	return strings.Join(parts, "; ")
}

// KeysOf parses the document in a ConfigMap's data without building it
// and returns its section keys; ok is false when it doesn't parse.
func KeysOf(data map[string]string) (keys map[string]string, ok bool) {
	src, found := data[document.DataKey]
	if !found {
		return nil, false
	}
	doc, err := document.Parse([]byte(src))
	if err != nil {
		return nil, false
	}
	return SectionKeys(doc), true
}

// SetHash identifies a desired set by its objects' names and content
// hashes, and the cluster list of each object limited to some config
// clusters (envoyfilter.AnnotationClusters): equal documents give equal
// hashes, whatever their formatting, and a set whose only change is
// where an item goes is a new set. The status's lastAppliedHash and the
// MCP version are it. It is canary.SetHash.
func SetHash(objs []*envoyfilter.Object) string { return canary.SetHash(objs) }

// YAML writes objects as one YAML stream, "---" between documents.
func YAML(objs []*envoyfilter.Object) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		y, err := o.YAML()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", o.Metadata.Name, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// problems lists the problems of a parse or build error.
func problems(err error) []*fielderr.Error {
	var de *document.Error
	if errors.As(err, &de) {
		return de.Problems
	}
	return fielderr.Flatten(err)
}

// Scrub replaces every secret value in msg.
func Scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

// Describe writes problems one per entry as "path: message (config.yaml
// line N)", joined by sep: the form Events, the status and admission
// denials use.
func Describe(problems []*fielderr.Error, sep string) string {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.Error()
		if p.Line > 0 {
			lines[i] += fmt.Sprintf(" (%s line %d)", document.DataKey, p.Line)
		}
	}
	return strings.Join(lines, sep)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
