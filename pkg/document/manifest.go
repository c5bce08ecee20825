package document

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// DataKey is the ConfigMap data key that holds the document.
const DataKey = "config.yaml"

// ParseFile accepts either a ConfigMap manifest carrying the document under
// DataKey, or the bare document, and parses the document. Line numbers in
// problems refer to the file given.
func ParseFile(data []byte) (*Document, error) { return NewParser().ParseFile(data) }

// ParseFile is the package's ParseFile, reusing unchanged sections.
func (p *Parser) ParseFile(data []byte) (*Document, error) {
	doc, offset, isManifest, err := extract(data)
	if err != nil {
		return nil, err
	}
	if !isManifest {
		return p.Parse(data)
	}
	return p.parse(doc, offset)
}

// extract finds the document inside a ConfigMap manifest. A file whose top
// level is not a ConfigMap (no kind: ConfigMap) is not a manifest.
func extract(data []byte) (doc []byte, lineOffset int, isManifest bool, err error) {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, 0, false, nil // let Parse report it.
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode || mappingValue(top, "kind") == nil || mappingValue(top, "kind").Value != "ConfigMap" {
		return nil, 0, false, nil
	}
	fail := func(n *yaml.Node, path, msg string) error {
		return &Error{Problems: []*fielderr.Error{{Path: path, Line: n.Line, Msg: msg}}}
	}
	dataNode := mappingValue(top, "data")
	if dataNode == nil || dataNode.Kind != yaml.MappingNode {
		return nil, 0, true, fail(top, "data", fmt.Sprintf("the ConfigMap has no data key %q", DataKey))
	}
	v := mappingValue(dataNode, DataKey)
	if v == nil {
		return nil, 0, true, fail(dataNode, "data", fmt.Sprintf("the ConfigMap has no data key %q", DataKey))
	}
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		return nil, 0, true, fail(v, "data."+DataKey, "must be a string holding the YAML document")
	}
	// In a block scalar (config.yaml: |) the content starts on the line
	// after the indicator; elsewhere lines can't be mapped back.
	if v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		lineOffset = v.Line
	}
	return []byte(v.Value), lineOffset, true, nil
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
