package document_test

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/pkg/document"
)

// The schema's pattern for a target.clusters name says what validation
// says of it, at the document's target and at an item's.
func TestClusterNamesSchemaAgrees(t *testing.T) {
	s := compileSchema(t)
	for _, name := range []string{
		"Kubernetes", "eu-west-1", "a", "a.b_c-d", "0", strings.Repeat("x", 63),
		"", "-a", "a-", ".a", "a b", "eü", "a/b", strings.Repeat("x", 64),
	} {
		for _, src := range []string{
			"target: {clusters: ['" + name + "']}\n",
			"gzip:\n  target: {clusters: ['" + name + "']}\n",
		} {
			_, perr := document.Parse([]byte(src))
			var tree any
			if err := yaml.Unmarshal([]byte(src), &tree); err != nil {
				t.Fatal(err)
			}
			serr := s.Validate(jsonValue(t, tree))
			if (perr == nil) != (serr == nil) {
				t.Errorf("%q: validate says %v, the schema %v", src, perr, serr)
			}
		}
	}
}
