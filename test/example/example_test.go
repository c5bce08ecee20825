package example_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/example"
)

var update = flag.Bool("update", false, "rewrite the example and docs/reference.md's copy")

const root = "../.."

// The committed example and docs/reference.md's copy are what the items' parts
// compose; `make golden` rewrites them.
func TestExampleIsComposedFromTheItems(t *testing.T) {
	want, err := example.Compose(root)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, example.File)
	readmeFile := filepath.Join(root, "docs", "reference.md")
	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	wantReadme, err := example.Readme(readme, want)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(readmeFile, wantReadme, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the items' example.in.yaml compose; run make golden", example.File)
	}
	if !bytes.Equal(readme, wantReadme) && !*update {
		t.Error("docs/reference.md's example is not the composed example; run make golden")
	}
	// The example is valid and uses every item.
	doc, err := document.ParseFile(got)
	if err != nil {
		t.Fatalf("the example is invalid: %v", err)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Sections) != len(objs) {
		t.Errorf("%d items in the example, %d EnvoyFilters: every item should be enabled", len(doc.Sections), len(objs))
	}
}
