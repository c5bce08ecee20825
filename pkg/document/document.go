// Package document reads the global document: strict decoding into the
// registered items, validation, and the effective target of every item.
// Every problem is reported at once, each with its path and line.
package document

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/canary"
)

// TargetKey is the document-level (and per-item) key of the target section.
const TargetKey = "target"

// MaxSize bounds the document: a ConfigMap holds at most 1 MiB.
const MaxSize = 1 << 20

// Document is a decoded, valid global document.
type Document struct {
	// Target is the document-level target, defaults filled in.
	Target envoyfilter.Target
	// Rollout is the rollout policy (zero: Direct).
	Rollout canary.Policy
	// Sections are the items present in the document (null sections are
	// absent), sorted by name. Disabled items are included.
	Sections []Section
	// FactWarnings are what the Parser's Facts warn of the services the
	// enabled items send to, with full paths and lines.
	FactWarnings []*fielderr.Error
	// ClusterWarnings say where target.clusters names were not checked
	// against the config clusters, because the Parser knows none
	// (SetClusters).
	ClusterWarnings []*fielderr.Error
}

// Warnings returns the warnings of every section, in section order, then
// what the cluster's facts say.
func (d *Document) Warnings() []*fielderr.Error {
	var out []*fielderr.Error
	for _, s := range d.Sections {
		out = append(out, s.Warnings...)
	}
	out = append(out, d.FactWarnings...)
	return append(out, d.ClusterWarnings...)
}

// Facts answers what the cluster says of the services items send to
// (items.ServiceUser): whether istiod builds their clusters. The
// controller and the admission webhook give one to their Parser
// (SetFacts); `globalconfig validate` has none and checks syntax only.
type Facts interface {
	Service(ref items.ServiceRef) items.ServiceFact
}

// Section is one item of the document.
type Section struct {
	Name string
	// Placement is the item's EnvoyFilter priority and insert position.
	Placement envoyfilter.Placement
	Item      items.Item
	// Target is where the item applies: the document's target with the
	// item's own target section laid over it.
	Target envoyfilter.Target
	// Warnings are what an enabled item says about its valid section
	// (items.Warner), with full paths and lines.
	Warnings []*fielderr.Error
	// Key is a canonical hash of what the item's EnvoyFilter is built
	// from: the decoded section with its defaults, the target and the
	// placement. Formatting, comments, key order and spelled-out defaults
	// do not change it.
	Key string
}

// Error is returned for an invalid document: every problem, sorted by line.
type Error struct {
	Problems []*fielderr.Error
}

func (e *Error) Error() string {
	var b bytes.Buffer
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Parse decodes and validates a bare global document. An empty document is
// valid and configures nothing. A returned error is an *Error.
func Parse(data []byte) (*Document, error) {
	return NewParser().Parse(data)
}

// Parser parses documents, reusing the decoded sections of its last valid
// document: a section whose YAML, document target and top-level keys are
// unchanged is not decoded or validated again. It is safe for concurrent
// use; the sections it returns are shared, so never change them.
type Parser struct {
	mu    sync.Mutex
	facts Facts
	// clusters lists the config clusters target.clusters may name (see
	// SetClusters); nil when none are known.
	clusters func() []string
	last     map[string]cachedSection // by item name
	fleet    []envoyfilter.Version
	// unvalidated skips every rule beyond decoding (see Unvalidated).
	unvalidated bool
	// sections are the last document's parsed top-level sections.
	sections parsedSections
}

// cachedSection is a decoded section and the hash of the YAML it came from.
type cachedSection struct {
	source  uint64
	section Section
}

// NewParser returns a Parser with an empty cache.
func NewParser() *Parser { return &Parser{last: map[string]cachedSection{}} }

// NewParserFor returns a Parser whose documents render for the Istio
// releases istioVersions, whatever their targets declare: the CLI's
// --istio-versions, for checking a document against a mixed fleet.
func NewParserFor(istioVersions []envoyfilter.Version) *Parser {
	p := NewParser()
	p.fleet = istioVersions
	return p
}

// Unvalidated returns a Parser that decodes documents strictly (unknown
// keys, wrong types and values a key's type can't hold are still
// problems) but applies no rule beyond that: no item's Validate, context
// limits, service or cross-item checks. What Envoy makes of a document
// globalconfig refuses can then be asked of Envoy itself: the differential
// check (test/agreement) renders such documents. Never deliver what it
// parses.
func Unvalidated() *Parser {
	p := NewParser()
	p.unvalidated = true
	return p
}

// SetFacts makes the parser check the services enabled items send to
// against f on every parse: a reference istiod will never resolve is a
// problem, one it does not resolve now a warning. Nil turns it off.
func (p *Parser) SetFacts(f Facts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.facts = f
}

// SetClusters makes the parser check, on every parse, that each name in
// a target.clusters is one of the config clusters known returns: the
// home cluster and the members. Nil, or a known that returns none,
// leaves the names unchecked, with a warning where the document names
// any (the offline `globalconfig validate`). The list is asked afresh on
// every parse, never cached with the sections: a member may come or go
// while the document stays.
func (p *Parser) SetClusters(known func() []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clusters = known
}

// Parse is the package's Parse, reusing unchanged sections.
func (p *Parser) Parse(data []byte) (*Document, error) { return p.parse(data, 0) }

func (p *Parser) parse(data []byte, lineOffset int) (*Document, error) {
	if len(data) > MaxSize {
		return nil, &Error{Problems: []*fielderr.Error{{Msg: fmt.Sprintf("document is %d bytes; at most %d are allowed", len(data), MaxSize)}}}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	root, sections, hashes, ok := parseSections(data, p.sections)
	if ok {
		p.sections = sections
	} else {
		root = &yaml.Node{}
		if err := yaml.Unmarshal(data, root); err != nil {
			return nil, &Error{Problems: []*fielderr.Error{syntaxError(err, lineOffset)}}
		}
	}
	return p.decodeRoot(root, hashes, lineOffset)
}

// ParseTree decodes and validates a document given as its YAML tree (a
// mapping node), as Parse does its text: what a converter builds is
// checked as it stands, without encoding and parsing it again. Problems
// have no lines.
func ParseTree(root *yaml.Node) (*Document, error) {
	p := NewParser()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decodeRoot(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}, nil, 0)
}

// decodeRoot decodes the document node root; p.mu is held.
func (p *Parser) decodeRoot(root *yaml.Node, hashes map[*yaml.Node]uint64, lineOffset int) (*Document, error) {
	d := newDecoder()
	d.fleet = p.fleet
	d.facts = p.facts
	d.clusters = p.clusters
	d.unvalidated = p.unvalidated
	d.cache = p.last
	d.hashes = hashes
	doc := &Document{Target: envoyfilter.DefaultTarget()}
	doc.Target.IstioVersions = p.fleet
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 && !isNull(root.Content[0]) {
		d.decodeDocument(root.Content[0], doc)
	}
	if len(d.errs) == 0 {
		p.last = d.decoded // only a valid document's sections are reused.
	}
	if len(d.errs) > 0 {
		for _, e := range d.errs {
			if e.Line > 0 {
				e.Line += lineOffset
			}
		}
		fielderr.Sort(d.errs)
		return nil, &Error{Problems: d.errs}
	}
	return doc, nil
}

// syntaxError turns a YAML parser error into a problem with its line.
func syntaxError(err error, lineOffset int) *fielderr.Error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return &fielderr.Error{Msg: "invalid YAML: " + fmt.Sprint(te.Errors)}
	}
	var line int
	msg := err.Error()
	if _, scanErr := fmt.Sscanf(msg, "yaml: line %d:", &line); scanErr == nil {
		_, rest, _ := bytes.Cut([]byte(msg), []byte(": "))
		_, rest, _ = bytes.Cut(rest, []byte(": "))
		return &fielderr.Error{Line: line + lineOffset, Msg: "invalid YAML: " + string(rest)}
	}
	return &fielderr.Error{Msg: "invalid YAML: " + msg}
}

func (d *decoder) decodeDocument(n *yaml.Node, doc *Document) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, "", "the document must be a mapping of item names, got %s", describe(n))
		return
	}
	aliases := map[string]items.Registration{}
	for _, r := range items.All() {
		for top := range r.TopLevel {
			aliases[top] = r
		}
	}
	// The document target first: item targets lay over it.
	type pending struct {
		reg      items.Registration
		node     *yaml.Node
		override envoyfilter.Target
	}
	sections := make([]pending, 0, len(n.Content)/2)
	// Top-level keys that belong to an item: item name → key → node.
	topLevel := map[string][]aliasNode{}
	d.eachKey(n, "", func(key string, kn, vn *yaml.Node) {
		if key == TargetKey {
			d.decodeTarget(vn, &doc.Target, TargetKey)
			if d.fleet != nil {
				doc.Target.IstioVersions = d.fleet
			}
			return
		}
		if key == canary.Key {
			d.decode(vn, reflect.ValueOf(&doc.Rollout).Elem(), canary.Key)
			d.addValidation(canary.Key, doc.Rollout.Validate())
			return
		}
		if reg, ok := aliases[key]; ok {
			topLevel[reg.Name] = append(topLevel[reg.Name], aliasNode{top: key, field: reg.TopLevel[key], node: vn})
			return
		}
		reg, ok := items.Lookup(key)
		if !ok {
			d.fail(kn, key, "%s", unknownKey("unknown item", key, knownTopKeys()))
			return
		}
		if isNull(vn) {
			return // an absent item: nothing generated.
		}
		sections = append(sections, pending{reg: reg, node: vn})
	})
	// The document target as text, for the sections' source hashes.
	targetText := fmt.Sprintf("%+v", doc.Target)
	doc.Sections = make([]Section, 0, len(sections)+len(topLevel))
	for _, p := range sections {
		sec, _ := d.cachedSection(p.reg, p.node, doc.Target, targetText, topLevel[p.reg.Name])
		doc.Sections = append(doc.Sections, sec)
		delete(topLevel, p.reg.Name)
	}
	// Items set only through top-level keys get a section of defaults.
	for name, nodes := range topLevel {
		reg, _ := items.Lookup(name)
		empty := &yaml.Node{Kind: yaml.MappingNode, Line: nodes[0].node.Line}
		// The section exists only through these keys: its problems belong
		// to them, and it is only validated when they decoded.
		d.lines[reg.Name] = nodes[0].node.Line
		if sec, ok := d.cachedSection(reg, empty, doc.Target, targetText, nodes); ok {
			doc.Sections = append(doc.Sections, sec)
		}
	}
	slices.SortFunc(doc.Sections, func(a, b Section) int { return strings.Compare(a.Name, b.Name) })
	if d.unvalidated {
		return
	}
	d.checkCanaryLabel(doc)
	d.checkShared(doc.Sections)
	doc.FactWarnings = d.checkFacts(doc.Sections)
	doc.ClusterWarnings = d.checkClusters(doc)
}

// checkClusters checks the names of the document's target.clusters, and
// of every enabled item's that differs from it (a disabled item goes
// nowhere; checkFacts skips its services too), against the config
// clusters the Parser knows: an unknown name is a problem listing the
// known ones.
// Knowing none, it checks nothing and warns once per list. Names that are
// no cluster name at all were refused by Target.Validate already.
func (d *decoder) checkClusters(doc *Document) []*fielderr.Error {
	type list struct {
		path  string
		names []string
	}
	var lists []list
	if len(doc.Target.Clusters) > 0 {
		lists = append(lists, list{fielderr.Join(TargetKey, "clusters"), doc.Target.Clusters})
	}
	for _, s := range doc.Sections {
		if s.Item.Enabled() && len(s.Target.Clusters) > 0 && !slices.Equal(s.Target.Clusters, doc.Target.Clusters) {
			lists = append(lists, list{fielderr.Join(s.Name, TargetKey+".clusters"), s.Target.Clusters})
		}
	}
	staged := doc.Rollout.Staged()
	if staged {
		// rollout.clusters names clusters too.
		lists = append(lists, list{fielderr.Join(canary.Key, "clusters"), nil})
	}
	if len(lists) == 0 {
		return nil
	}
	var known []string
	if d.clusters != nil {
		known = slices.Clone(d.clusters())
	}
	if len(known) == 0 {
		warnings := make([]*fielderr.Error, len(lists))
		for i, l := range lists {
			warnings[i] = &fielderr.Error{Path: l.path, Line: d.lineOf(l.path), Msg: "the cluster names are not checked: no config cluster is known here (the controller and its admission webhook check them against the home cluster and the members)"}
		}
		return warnings
	}
	slices.Sort(known)
	known = slices.Compact(known)
	if staged {
		d.addValidation(canary.Key, doc.Rollout.ValidateClusters(known))
	}
	var errs fielderr.List
	for _, l := range lists {
		for i, name := range l.names {
			if envoyfilter.ValidateClusterName(name) != nil {
				continue
			}
			if _, ok := slices.BinarySearch(known, name); !ok {
				errs.Addf(fmt.Sprintf("%s[%d]", l.path, i), "unknown cluster %q: the members are %s", name, strings.Join(known, ", "))
			}
		}
	}
	d.addValidation("", errs.Err())
	return nil
}

// checkCanaryLabel refuses, under a canary rollout, a target selector
// that names the canary label: the rollout adds that label to every
// EnvoyFilter's selector itself (true on the canaries' copy, false on the
// others'), so such an item could never be split between them.
func (d *decoder) checkCanaryLabel(doc *Document) {
	if !doc.Rollout.Enabled() {
		return
	}
	label := doc.Rollout.Label()
	msg := "names the canary label " + label + " (rollout.canaryLabel): a canary rollout selects on it itself, true on the canaries and false on the other proxies, so an item that selects on it can't be rolled out; select on other labels"
	if _, ok := doc.Target.Selector[label]; ok {
		d.addValidation("", &fielderr.Error{Path: fielderr.Key(TargetKey+".selector", label), Msg: msg})
	}
	for _, s := range doc.Sections {
		if _, ok := s.Target.Selector[label]; !ok || reflect.DeepEqual(s.Target.Selector, doc.Target.Selector) {
			continue // none, or the document's, refused above
		}
		d.addValidation("", &fielderr.Error{Path: fielderr.Key(s.Name+"."+TargetKey+".selector", label), Msg: msg})
	}
}

// checkFacts asks the Facts about every service the enabled, valid
// sections send to: a refusal is a problem, a warning is returned. The
// facts are asked on every parse, never cached with the sections: a
// Service may come or go while the document stays.
func (d *decoder) checkFacts(sections []Section) []*fielderr.Error {
	if d.facts == nil {
		return nil
	}
	var warnings []*fielderr.Error
	var p items.Problems
	for _, s := range sections {
		su, ok := s.Item.(items.ServiceUser)
		if !ok || !s.Item.Enabled() || d.sectionFailed(s.Name) {
			continue
		}
		for _, ref := range su.Services() {
			f := d.facts.Service(ref)
			path := fielderr.Join(s.Name, ref.Path)
			switch {
			case f.Refuse:
				p.Addf(path, "%s", f.Msg)
			case f.Warn:
				// No line: a reformatting edit that moves the key is no
				// change, as for the sections' own warnings, which are
				// kept with the section.
				warnings = append(warnings, &fielderr.Error{Path: path, Msg: f.Msg})
			}
		}
	}
	d.addValidation("", p.Err())
	return warnings
}

// checkShared applies the rules the items declare for what they set on
// shared Envoy objects (items.CheckShared) to the sections that decoded
// and validated.
func (d *decoder) checkShared(sections []Section) {
	shared := make([]items.SharedSection, 0, len(sections))
	for _, s := range sections {
		if !d.sectionFailed(s.Name) {
			shared = append(shared, items.SharedSection{Name: s.Name, Item: s.Item, Target: s.Target})
		}
	}
	var p items.Problems
	items.CheckShared(&p, shared)
	d.addValidation("", p.Err())
}

func (d *decoder) decodeTarget(n *yaml.Node, t *envoyfilter.Target, path string) {
	// A value that failed to decode keeps its default, so validating
	// afterwards reports the other problems without repeating that one.
	d.decode(n, reflect.ValueOf(t).Elem(), path)
	d.addValidation(path, t.Validate())
}

// addValidation records validation errors under prefix, with their lines.
func (d *decoder) addValidation(prefix string, err error) {
	for _, fe := range fielderr.Flatten(err) {
		p := fielderr.Join(prefix, fe.Path)
		if d.failedAt(p) {
			continue
		}
		d.errs = append(d.errs, &fielderr.Error{Path: p, Line: d.lineOf(p), Msg: fe.Msg})
	}
}

// knownTopKeys is every key the document's top level takes, for the
// message about one it doesn't.
func knownTopKeys() []string {
	known := []string{TargetKey, canary.Key}
	for _, r := range items.All() {
		known = append(known, r.Name)
		for top := range r.TopLevel {
			known = append(known, top)
		}
	}
	return known
}

// cachedSection returns the section decoded from the same YAML last time,
// or decodes it. targetText is docTarget as fmt's %+v writes it.
func (d *decoder) cachedSection(reg items.Registration, n *yaml.Node, docTarget envoyfilter.Target, targetText string, top []aliasNode) (Section, bool) {
	// The cache lives in memory only, so a seeded maphash will do; fields
	// are length-prefixed so no two trees write the same bytes.
	var h maphash.Hash
	h.SetSeed(sourceSeed)
	writeString(&h, reg.Name)
	writeString(&h, targetText)
	d.writeNodeHash(&h, n)
	for _, a := range top {
		writeString(&h, a.top)
		d.writeNodeHash(&h, a.node)
	}
	source := h.Sum64()
	if c, ok := d.cache[reg.Name]; ok && c.source == source {
		d.decoded[reg.Name] = c
		return c.section, true
	}
	sec, ok := d.decodeSection(reg, n, docTarget, top)
	if ok {
		sec.Key = sectionKey(sec)
		d.decoded[reg.Name] = cachedSection{source: source, section: sec}
	}
	return sec, ok
}

// sourceSeed seeds the hashes of section sources.
var sourceSeed = maphash.MakeSeed()

// writeNodeHash writes the content hash of the tree n: the one
// parseSections kept for it, or a fresh one.
func (d *decoder) writeNodeHash(h *maphash.Hash, n *yaml.Node) {
	sum, ok := d.hashes[n]
	if !ok {
		sum = nodeHash(n)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], sum)
	h.Write(b[:])
}

// hashNode writes the content of a YAML node tree: kinds, tags and values,
// not positions or styles.
func hashNode(h *maphash.Hash, n *yaml.Node) {
	h.WriteByte(byte(n.Kind))
	writeString(h, n.ShortTag())
	writeString(h, n.Value)
	var count [8]byte
	binary.LittleEndian.PutUint64(count[:], uint64(len(n.Content)))
	h.Write(count[:])
	for _, c := range n.Content {
		hashNode(h, c)
	}
}

// writeString writes s with its length.
func writeString(h *maphash.Hash, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.WriteString(s)
}

// sectionKey is the canonical hash of Section.Key.
func sectionKey(s Section) string {
	b, err := json.Marshal(struct {
		Item      items.Item
		Target    envoyfilter.Target
		Placement envoyfilter.Placement
	}{s.Item, s.Target, s.Placement})
	if err != nil {
		// Item structs are plain data, so this is a programming error; a
		// key from the Go syntax still tells sections apart.
		b = fmt.Appendf(nil, "%#v", s)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// aliasNode is a top-level key that sets a key of an item.
type aliasNode struct {
	top, field string
	node       *yaml.Node
}

// decodeSection decodes one item. A section made only of top-level keys
// that restate the defaults (Higress writes disableXEnvoyHeaders: false) is
// no section at all: ok is false.
func (d *decoder) decodeSection(reg items.Registration, n *yaml.Node, docTarget envoyfilter.Target, top []aliasNode) (sec Section, ok bool) {
	s := Section{Name: reg.Name, Placement: reg.Placement(), Item: reg.NewItem(), Target: docTarget}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == TargetKey {
				var override envoyfilter.Target
				d.lines[fielderr.Join(reg.Name, TargetKey)] = n.Content[i].Line
				d.decodeTarget(n.Content[i+1], &override, fielderr.Join(reg.Name, TargetKey))
				s.Target = docTarget.Override(override)
				if d.fleet != nil {
					s.Target.IstioVersions = d.fleet
				}
			}
		}
	}
	d.decodeStruct(n, reflect.ValueOf(s.Item).Elem(), reg.Name, map[string]bool{TargetKey: true})
	for _, a := range top {
		if n.Kind == yaml.MappingNode && mappingValue(n, a.field) != nil {
			d.fail(a.node, a.top, "is also set as %s.%s; set it once", reg.Name, a.field)
			continue
		}
		before := len(d.errs)
		d.decodeField(a.node, reflect.ValueOf(s.Item).Elem(), a.field, a.top)
		if len(d.errs) > before && len(n.Content) == 0 {
			d.failed[reg.Name] = true // a section made only of a broken key
		}
		// Validation reports the item's key; point it at the line used.
		d.lines[fielderr.Join(reg.Name, a.field)] = a.node.Line
	}
	if len(n.Content) == 0 && len(top) > 0 && reflect.DeepEqual(s.Item, reg.NewItem()) {
		return s, false
	}
	if d.unvalidated {
		return s, true
	}
	err := s.Item.Validate()
	var rules items.Problems
	if t, ok := s.Item.(items.Texter); ok {
		items.CheckTexts(&rules, t)
	}
	if su, ok := s.Item.(interface {
		items.ServiceUser
		Enabled() bool
	}); ok {
		items.CheckServices(&rules, su)
	}
	err = errors.Join(err, rules.Err())
	if cl, ok := s.Item.(items.ContextLimiter); ok && err == nil && s.Item.Enabled() {
		var p items.Problems
		items.CheckContexts(&p, cl, s.Target.Context)
		err = p.Err()
	}
	d.addValidation(reg.Name, err)
	if w, ok := s.Item.(items.Warner); ok && s.Item.Enabled() {
		for _, fe := range fielderr.Flatten(w.Warnings()) {
			p := fielderr.Join(reg.Name, fe.Path)
			s.Warnings = append(s.Warnings, &fielderr.Error{Path: p, Line: d.lineOf(p), Msg: fe.Msg})
		}
	}
	return s, true
}
