package document

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// same reports how a and b differ as parsed YAML (kinds, tags, values,
// styles, anchors, positions), "" when they don't; comments are not
// compared (nothing reads them).
func same(a, b *yaml.Node, path string) string {
	switch {
	case a == nil || b == nil:
		if a != b {
			return path + ": one is nil"
		}
		return ""
	case a.Kind != b.Kind || a.Tag != b.Tag || a.Value != b.Value || a.Style != b.Style || a.Anchor != b.Anchor ||
		a.Line != b.Line || a.Column != b.Column || len(a.Content) != len(b.Content):
		return fmt.Sprintf("%s: %+v and %+v", path, *a, *b)
	}
	for i := range a.Content {
		if d := same(a.Content[i], b.Content[i], fmt.Sprintf("%s/%d", path, i)); d != "" {
			return d
		}
	}
	return ""
}

// whole is data parsed as one document.
func whole(t testing.TB, data []byte) (*yaml.Node, error) {
	t.Helper()
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	return &n, err
}

// checkSections requires data parsed by sections (with the cache last)
// to be the tree the whole parse gives, when it is parsed by sections.
func checkSections(t testing.TB, name string, data []byte, last parsedSections) parsedSections {
	t.Helper()
	got, next, _, ok := parseSections(data, last)
	if !ok {
		return nil
	}
	want, err := whole(t, data)
	if err != nil {
		t.Fatalf("%s: parsed by sections, but the whole document does not parse: %v", name, err)
	}
	if d := same(got, want, ""); d != "" {
		t.Fatalf("%s: by sections and whole differ at %s", name, d)
	}
	return next
}

// Every golden input and the example parse by sections to the tree the
// whole parse gives, also when the sections come from the cache at other
// lines; the tricky ones fall back to the whole parse.
func TestSectionsParseAsWhole(t *testing.T) {
	files, err := filepath.Glob("../../items/*/testdata/*.in.yaml")
	if err != nil || len(files) < 50 {
		t.Fatalf("golden inputs: %d, %v", len(files), err)
	}
	bySections := 0
	var all []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := splitSections(data); ok {
			bySections++
		}
		checkSections(t, f, data, nil)
		all = append(all, string(data))
	}
	if bySections < len(files)*3/4 {
		t.Errorf("only %d of %d golden inputs parse by sections", bySections, len(files))
	}
	// All of them as one document, then with its first section longer:
	// every later section comes from the cache, two lines further down.
	doc := strings.Join(all, "\n")
	cache := checkSections(t, "every golden input", []byte(doc), nil)
	if cache == nil {
		t.Fatal("the document of every golden input does not parse by sections")
	}
	first, rest, _ := strings.Cut(doc, "\n")
	longer := first + "\n# one\n# two\n" + rest
	if _, _, _, ok := parseSections([]byte(longer), cache); !ok {
		t.Fatal("the longer document does not parse by sections")
	}
	// The same document again reuses every section's moved copy; the
	// longer one moves all but the first; back again moves them back.
	cache = checkSections(t, "every golden input, again", []byte(doc), cache)
	cache = checkSections(t, "every golden input, two lines added", []byte(longer), cache)
	checkSections(t, "every golden input, two lines taken away", []byte(doc), cache)

	for _, tricky := range []string{
		"gzip: &a {chunkSize: 4096}\nbrotli: *a\n", // an alias across sections
		"{gzip: {}}\n",    // a flow mapping at the top
		"---\ngzip: {}\n", // a document marker
		"gzip: {chunkSize: 4096,\nwindowBits: 9}\n", // a flow mapping over a line that looks like a key
		"key: \"abc\ndef: ghi\"\n",                  // a quoted scalar over such a line
		"gzip: {}\r\nbrotli: {}\r\n",                // CRLF
		"  gzip: {}\n",                              // indented
		"gzip:\n\tchunkSize: 1\n",                   // a tab
		"- gzip\n",                                  // a list
		"# only a comment\n", "\n\ngzip: {}\n", "",
		"gzip: {}\ngzip: {}\n", // a key twice
		"gzip: |\n  text\n\nbrotli: {}\n",
	} {
		checkSections(t, fmt.Sprintf("%q", tricky), []byte(tricky), nil)
	}
}

// FuzzSections: whatever parses by sections is the tree the whole parse
// gives, first without and then with a cache.
func FuzzSections(f *testing.F) {
	for _, seed := range []string{"gzip: {}\nbrotli: {}\n", "a: 1\nb:\n  c: [1, 2]\n# x\nd: |\n  t\n", "gzip: &a {}\nb: *a\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cache := checkSections(t, "input", data, nil)
		checkSections(t, "input, cached", data, cache)
	})
}
