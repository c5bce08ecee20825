package render_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

func parse(t *testing.T, src string) *document.Document {
	t.Helper()
	doc, err := document.Parse([]byte(src))
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", src, err)
	}
	return doc
}

const base = `
gzip:
  chunkSize: 8192
  contentType: [text/html]
tracing:
  enable: true
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
`

func diff(t *testing.T, before, after string) render.Diff {
	t.Helper()
	var keys map[string]string
	if before != "" {
		keys = render.SectionKeys(parse(t, before))
	}
	return render.Compare(keys, render.SectionKeys(parse(t, after)))
}

func TestDiffIsSemantic(t *testing.T) {
	reordered := `
# comments and key order change nothing
tracing:
  zipkin: {port: "9411", service: zipkin.istio-system.svc.cluster.local}
  enable: true
  timeout: 500ms   # the default, spelled out
gzip:
  contentType: [text/html]
  chunkSize: 8192
`
	d := diff(t, base, reordered)
	if !d.Empty() || !slices.Equal(d.Unchanged, []string{"gzip", "tracing"}) {
		t.Errorf("semantically equal documents differ: %+v", d)
	}
	if d.String() != "no item changed" {
		t.Errorf("String() = %q", d.String())
	}
}

func TestDiffNamesAddedChangedRemoved(t *testing.T) {
	next := `
gzip:
  chunkSize: 16384
  contentType: [text/html]
brotli: {}
tracing:
  enable: false
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
`
	d := diff(t, base, next)
	if !slices.Equal(d.Added, []string{"brotli"}) || !slices.Equal(d.Changed, []string{"gzip"}) || !slices.Equal(d.Removed, []string{"tracing"}) {
		t.Errorf("added %v changed %v removed %v; want [brotli] [gzip] [tracing]", d.Added, d.Changed, d.Removed)
	}
	if got, want := d.String(), "added brotli; changed gzip; removed tracing"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestDiffFromNothing(t *testing.T) {
	d := diff(t, "", base)
	if !slices.Equal(d.Added, []string{"gzip", "tracing"}) || len(d.Changed)+len(d.Removed) != 0 {
		t.Errorf("first apply: %+v", d)
	}
}

func TestNamespaceMoveIsAChange(t *testing.T) {
	d := diff(t, base, base+"target: {namespace: gateways}\n")
	if !slices.Equal(d.Changed, []string{"gzip", "tracing"}) {
		t.Errorf("changed %v, want both items (their namespace moved)", d.Changed)
	}
}

// A render rebuilds only the items whose section changed; the others are
// the very objects built before, and the result equals a full build.
func TestRenderRebuildsOnlyChangedItems(t *testing.T) {
	m := render.New()
	first := m.Build(parse(t, base))
	if !first.Valid() || !slices.Equal(first.Rebuilt, []string{"gzip", "tracing"}) {
		t.Fatalf("first render: rebuilt %v, problems %v", first.Rebuilt, first.Problems)
	}
	edited := strings.Replace(base, "chunkSize: 8192", "chunkSize: 16384", 1)
	second := m.Build(parse(t, edited))
	if !slices.Equal(second.Rebuilt, []string{"gzip"}) {
		t.Errorf("after a gzip edit, rebuilt %v, want [gzip]", second.Rebuilt)
	}
	if second.Objects[1] != first.Objects[1] {
		t.Error("the unchanged tracing object was rebuilt, not reused")
	}
	full, err := render.Desired(parse(t, edited))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := render.YAML(second.Objects)
	b, _ := render.YAML(full)
	if !bytes.Equal(a, b) {
		t.Errorf("incremental render differs from a full build:\n%s\n---\n%s", a, b)
	}
	third := m.Build(parse(t, edited))
	if len(third.Rebuilt) != 0 {
		t.Errorf("re-rendering the same document rebuilt %v", third.Rebuilt)
	}
}

func TestEqualDocumentsGiveIdenticalYAML(t *testing.T) {
	var outs [][]byte
	for range 3 {
		objs, err := render.Desired(parse(t, base))
		if err != nil {
			t.Fatal(err)
		}
		y, err := render.YAML(objs)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, y)
	}
	if !bytes.Equal(outs[0], outs[1]) || !bytes.Equal(outs[1], outs[2]) {
		t.Error("equal documents rendered different YAML")
	}
	if !bytes.Contains(outs[0], []byte("\n---\n")) {
		t.Error("two objects are not separated by ---")
	}
}

// BenchmarkRenderExample is a full render of the example: parse, then
// build and check every item.
func BenchmarkRenderExample(b *testing.B) {
	data := mustRead(b, "../../deploy/examples/global-config.yaml")
	b.ReportAllocs()
	for b.Loop() {
		doc, err := document.ParseFile(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := render.Desired(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderOneItemEdit is what the controller spends on an edit of
// one item of the example ConfigMap: parse the document (unchanged sections
// reuse their decoded value), rebuild and check that item, reuse the
// others. The edits alternate gzip's chunk size, so every iteration
// rebuilds gzip.
func BenchmarkRenderOneItemEdit(b *testing.B) {
	data := exampleData(b)
	edited := map[string]string{document.DataKey: strings.Replace(data[document.DataKey], "chunkSize: 4096", "chunkSize: 8192", 1)}
	if edited[document.DataKey] == data[document.DataKey] {
		b.Fatal("the example has no gzip chunkSize: 4096 to edit")
	}
	m := render.New()
	versions := []map[string]string{data, edited}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if res := m.FromConfigMap(versions[i%2]); !res.Valid() || (i > 0 && !slices.Equal(res.Rebuilt, []string{"gzip"})) {
			b.Fatalf("render %d: rebuilt %v, problems %v", i, res.Rebuilt, res.Problems)
		}
		i++
	}
}

// exampleData is the example ConfigMap's data, as the controller reads it.
func exampleData(tb testing.TB) map[string]string {
	tb.Helper()
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := sigsyaml.Unmarshal(mustRead(tb, "../../deploy/examples/global-config.yaml"), &cm); err != nil {
		tb.Fatal(err)
	}
	return cm.Data
}

// BenchmarkParseExample is the floor of any render: decoding and
// validating the example document, building nothing.
func BenchmarkParseExample(b *testing.B) {
	src := []byte(exampleData(b)[document.DataKey])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := document.Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestRenderCollectsSecretsAndScrubRemovesThem(t *testing.T) {
	res := render.New().FromConfigMap(map[string]string{"config.yaml": `
tracing:
  enable: true
  skywalking: {service: sw.default.svc.cluster.local, port: 11800, access_token: s3cr3t-token}
`})
	if !res.Valid() || len(res.Objects) != 1 || len(res.Secrets) != 1 || res.Secrets[0] != "s3cr3t-token" {
		t.Fatalf("objs %d, secrets %v, problems %v", len(res.Objects), res.Secrets, res.Problems)
	}
	msg := `EnvoyFilter "globalconfig-tracing" is invalid: backend_token: "s3cr3t-token" rejected`
	if got := render.Scrub(msg, res.Secrets); strings.Contains(got, "s3cr3t") || !strings.Contains(got, "[redacted]") {
		t.Errorf("scrubbed: %s", got)
	}
}

// A parser reuses an unchanged section, and decodes a changed one afresh;
// an invalid document leaves the reusable sections as they were.
func TestParserReusesUnchangedSections(t *testing.T) {
	p := document.NewParser()
	first, err := p.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(base, "chunkSize: 8192", "chunkSize: 16384", 1)
	if _, err := p.Parse([]byte(edited + "gizp: {}\n")); err == nil {
		t.Fatal("a misspelled item was accepted")
	}
	second, err := p.Parse([]byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	if second.Sections[1].Item != first.Sections[1].Item {
		t.Error("the unchanged tracing section was decoded again")
	}
	if second.Sections[0].Item == first.Sections[0].Item || second.Sections[0].Key == first.Sections[0].Key {
		t.Error("the edited gzip section was reused")
	}
	// A changed document target changes every section.
	third, err := p.Parse([]byte(edited + "target: {namespace: gateways}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if third.Sections[1].Item == second.Sections[1].Item || third.Sections[1].Target.Namespace != "gateways" {
		t.Error("a new document target did not reach the tracing section")
	}
}
