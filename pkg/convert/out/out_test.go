package out

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// ShownList is Cut of Shown, however long the list and wherever the cut
// falls (inside a value, on a separator, on a multi-byte rune, at the
// closing bracket).
func TestShownListIsCutShown(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 50} {
		for _, value := range []string{"a", "text/html", "é", "ab£"} {
			var values []string
			for i := range n {
				values = append(values, fmt.Sprintf("%s%d", value, i))
			}
			list := List(values)
			full := Shown(list)
			for max := 0; max <= len(full)+2; max++ {
				if got, want := ShownList(list, max), Cut(full, max); got != want {
					t.Fatalf("%d values of %q, max %d: got %q, want %q", n, value, max, got, want)
				}
			}
		}
	}
	if got := ShownList(Str(strings.Repeat("x", 400)), 10); len(got) != 400 {
		t.Errorf("a scalar was cut: %q", got)
	}
}

// Document checks the tree it is given as the parser checks the text it
// writes: a value globalconfig refuses is named by its path, and an
// accepted tree comes back encoded, handed to alongside as it is.
func TestDocumentChecksTheTree(t *testing.T) {
	bad := Mapping(Pair("gzip", Mapping(Pair("enable", Bool(true)), Pair("chunkSize", Int(10)))))
	if _, err := Document(bad, nil); err == nil || !strings.Contains(err.Error(), "gzip.chunkSize: converts to a value globalconfig refuses") {
		t.Errorf("gzip.chunkSize 10: got %v, want a refusal at gzip.chunkSize", err)
	}
	if _, err := document.Parse(mustEncode(t, bad)); err == nil {
		t.Error("the text of the refused tree parses")
	}
	good := Mapping(Pair("gzip", Mapping(Pair("enable", Bool(true)), Pair("contentType", List([]string{"text/html", "yes", "1"})))))
	var handed []byte
	b, err := Document(good, func(doc []byte) { handed = doc })
	if err != nil {
		t.Fatal(err)
	}
	if want := mustEncode(t, good); string(b) != string(want) || string(handed) != string(want) {
		t.Errorf("got %q, alongside got %q, want %q", b, handed, want)
	}
	if _, err := document.Parse(b); err != nil {
		t.Errorf("the text of the accepted tree does not parse: %v", err)
	}
}

func mustEncode(t *testing.T, root *yaml.Node) []byte {
	t.Helper()
	b, err := Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Manifest writes, byte for byte, what the encoder writes for the
// ConfigMap with the document in it: for converted documents, the
// examples, and documents the encoder writes another way (trailing
// spaces, a leading space, blank lines at the end, no final line break,
// tabs, non-ASCII, control characters).
func TestManifestIsTheEncoders(t *testing.T) {
	docs := []string{
		"gzip:\n  enable: true\n",
		"# comment\ngzip:\n  enable: true\n\n\nbrotli: {}\n",
		"a: 1\n  b\n",
		"a: 1 \nb: 2\n",
		"a: 1\nb: 2 ",
		" a: 1\n",
		"\na: 1\n",
		"a: 1\n\n",
		"a: 1",
		"a: \"\\t\"\n",
		"a: \"x\ty\"\n",
		"a: é\n",
		"a: \"\x01\"\n",
		"a: |\n  x\n  y\n",
		"",
	}
	for _, path := range []string{"../../../deploy/examples/global-config.yaml", "../../../docs/examples/higress-config.yaml"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if !plainLiteral([]byte(docs[0])) || !plainLiteral([]byte(docs[1])) || !plainLiteral([]byte(docs[2])) {
		t.Fatal("the first documents do not take the fast path, so this test compares nothing")
	}
	for _, doc := range docs {
		fastManifest = true
		got, err := Manifest([]byte(doc), "ns/name", "a comment")
		fastManifest = false
		want, err2 := Manifest([]byte(doc), "ns/name", "a comment")
		fastManifest = true
		if err != nil || err2 != nil {
			t.Fatalf("%q: %v, %v", doc, err, err2)
		}
		if string(got) != string(want) {
			t.Errorf("%q:\ngot  %q\nwant %q", doc, got, want)
		}
	}
}
