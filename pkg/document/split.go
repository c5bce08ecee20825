package document

import (
	"bytes"
	"hash/maphash"

	"go.yaml.in/yaml/v3"
)

// An edit of one item changes one top-level section of the document, yet
// parsing the whole YAML is most of what a render costs. So the Parser
// parses a document of plain top-level keys section by section, and reuses
// the parsed tree of every section whose text is unchanged since the last
// document. Anything less plain, or any section that does not parse on
// its own, is parsed whole, as before: the result is the same tree.

// isTopKey reports whether l is a line that starts a top-level section:
// a plain key ([A-Za-z_][A-Za-z0-9_-]*), then ':' and a space or the end
// of the line.
func isTopKey(l []byte) bool {
	if len(l) == 0 || !(isLetter(l[0]) || l[0] == '_') {
		return false
	}
	for i := 1; i < len(l); i++ {
		switch c := l[i]; {
		case isLetter(c), c >= '0' && c <= '9', c == '_', c == '-':
		case c == ':':
			return i+1 == len(l) || l[i+1] == ' '
		default:
			return false
		}
	}
	return false
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// section is one top-level section's text and its first line (1-based).
type section struct {
	text []byte
	line int
}

// splitSections splits data into its top-level sections, or says no
// when data is not a plain block mapping of plain keys: every line is
// blank, a comment, indented, or a section's key line.
func splitSections(data []byte) ([]section, bool) {
	if bytes.IndexByte(data, '\r') >= 0 || bytes.IndexByte(data, '\t') >= 0 || bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return nil, false
	}
	out := make([]section, 0, 32)
	start, startLine := -1, 0
	line := 0
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		line++
		l := bytes.TrimSuffix(data[off:next], []byte("\n"))
		switch {
		case len(l) == 0, l[0] == ' ', l[0] == '#':
			if start < 0 && len(l) > 0 && l[0] == ' ' && !blank(l) {
				return nil, false // indented content before any key
			}
		case isTopKey(l):
			if start >= 0 {
				out = append(out, section{text: data[start:off], line: startLine})
			}
			start, startLine = off, line
		default:
			return nil, false
		}
		off = next
	}
	if start < 0 {
		return nil, false
	}
	return append(out, section{text: data[start:], line: startLine}), true
}

// blank reports whether l holds only spaces (tabs and carriage returns
// never reach here).
func blank(l []byte) bool {
	for _, c := range l {
		if c != ' ' {
			return false
		}
	}
	return true
}

// parsedSections caches the last document's sections by their text.
type parsedSections map[string]*parsedSection

// parsedSection is one section's key and value nodes, parsed at line 1,
// the hash of the value's content, and the copy of the nodes moved to the
// line the section last started at: an unchanged section at an unchanged
// line is neither parsed, copied nor hashed again.
type parsedSection struct {
	key, value               *yaml.Node
	hash                     uint64
	line                     int
	shiftedKey, shiftedValue *yaml.Node
}

// parseSections parses data section by section, reusing the sections of
// last; ok is false when data must be parsed whole. The returned cache
// holds data's sections, and hashes the content hash (nodeHash) of every
// section's value node in the returned tree.
func parseSections(data []byte, last parsedSections) (root *yaml.Node, next parsedSections, hashes map[*yaml.Node]uint64, ok bool) {
	secs, ok := splitSections(data)
	if !ok {
		return nil, nil, nil, false
	}
	if len(last) == 0 {
		// Nothing to reuse: one parse of the whole is cheaper than one per
		// section, and its sections are what the next parse reuses.
		if root, next, hashes, ok := parseWhole(data, secs); ok {
			return root, next, hashes, true
		}
	}
	next = make(parsedSections, len(secs))
	hashes = make(map[*yaml.Node]uint64, len(secs))
	mapping := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: secs[0].line, Column: 1}
	mapping.Content = make([]*yaml.Node, 0, 2*len(secs))
	for _, s := range secs {
		ps, ok := last[string(s.text)]
		if !ok {
			var n yaml.Node
			if err := yaml.Unmarshal(s.text, &n); err != nil || n.Kind != yaml.DocumentNode || len(n.Content) != 1 ||
				n.Content[0].Kind != yaml.MappingNode || len(n.Content[0].Content) != 2 || !plain(&n) {
				return nil, nil, nil, false
			}
			ps = &parsedSection{key: n.Content[0].Content[0], value: n.Content[0].Content[1]}
			ps.hash = nodeHash(ps.value)
		}
		if _, dup := next[string(s.text)]; dup || ps.shiftedKey == nil || ps.line != s.line {
			// A section repeated word for word gets its own copy: a
			// duplicate key is reported at each one's line.
			key, value := ps.key, ps.value
			if key == nil { // from a whole parse: only its moved copy
				key, value = shifted(ps.shiftedKey, 1-ps.line), shifted(ps.shiftedValue, 1-ps.line)
			}
			ps = &parsedSection{key: key, value: value, hash: ps.hash, line: s.line,
				shiftedKey: shifted(key, s.line-1), shiftedValue: shifted(value, s.line-1)}
		}
		next[string(s.text)] = ps
		hashes[ps.shiftedValue] = ps.hash
		mapping.Content = append(mapping.Content, ps.shiftedKey, ps.shiftedValue)
	}
	root = &yaml.Node{Kind: yaml.DocumentNode, Line: mapping.Line, Column: 1, Content: []*yaml.Node{mapping}}
	return root, next, hashes, true
}

// parseWhole parses data, split into secs, as one document, and caches
// each section's nodes as the copy moved to its line (the nodes at line
// 1 are made when a later document moves the section). ok is false when
// the whole does not parse, or its top-level keys are not the sections'.
func parseWhole(data []byte, secs []section) (*yaml.Node, parsedSections, map[*yaml.Node]uint64, bool) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil || root.Kind != yaml.DocumentNode || len(root.Content) != 1 || !plain(&root) {
		return nil, nil, nil, false
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode || len(m.Content) != 2*len(secs) {
		return nil, nil, nil, false
	}
	next := make(parsedSections, len(secs))
	hashes := make(map[*yaml.Node]uint64, len(secs))
	for i, s := range secs {
		k, v := m.Content[2*i], m.Content[2*i+1]
		if k.Line != s.line {
			return nil, nil, nil, false
		}
		ps := &parsedSection{hash: nodeHash(v), line: s.line, shiftedKey: k, shiftedValue: v}
		next[string(s.text)] = ps
		hashes[v] = ps.hash
	}
	return &root, next, hashes, true
}

// nodeHash is the hash of the content of the tree n (hashNode).
func nodeHash(n *yaml.Node) uint64 {
	var h maphash.Hash
	h.SetSeed(sourceSeed)
	hashNode(&h, n)
	return h.Sum64()
}

// plain reports whether the tree n has no anchor and no alias: the
// document with anchors is parsed whole, so that an alias resolves
// across sections and its node stays shared.
func plain(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return false
	}
	for _, c := range n.Content {
		if !plain(c) {
			return false
		}
	}
	return true
}

// shifted is a copy of the tree n (plain) with its lines moved down by
// lines: the cached tree is never changed.
func shifted(n *yaml.Node, lines int) *yaml.Node {
	c := *n
	c.Line += lines
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, child := range n.Content {
			c.Content[i] = shifted(child, lines)
		}
	}
	return &c
}
