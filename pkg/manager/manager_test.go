package manager_test

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/manager"
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
	c, err := manager.Diff(parse(t, base), parse(t, reordered))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Empty() {
		t.Errorf("semantically equal documents differ: %+v", c)
	}
	if len(c.Desired) != 2 {
		t.Errorf("desired set has %d objects, want 2", len(c.Desired))
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
	c, err := manager.Diff(parse(t, base), parse(t, next))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Added, []string{"brotli"}) || !slices.Equal(c.Changed, []string{"gzip"}) || !slices.Equal(c.Removed, []string{"tracing"}) {
		t.Errorf("added %v changed %v removed %v; want [brotli] [gzip] [tracing]", c.Added, c.Changed, c.Removed)
	}
	var names []string
	for _, o := range c.Desired {
		names = append(names, o.Metadata.Name)
	}
	if !slices.Equal(names, []string{"globalconfig-brotli", "globalconfig-gzip"}) {
		t.Errorf("desired %v", names)
	}
}

func TestDiffFromNothing(t *testing.T) {
	c, err := manager.Diff(nil, parse(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Added, []string{"gzip", "tracing"}) || len(c.Changed)+len(c.Removed) != 0 {
		t.Errorf("first apply: %+v", c)
	}
}

func TestNamespaceMoveIsAChange(t *testing.T) {
	c, err := manager.Diff(parse(t, base), parse(t, base+"target: {namespace: gateways}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Changed, []string{"gzip", "tracing"}) {
		t.Errorf("changed %v, want both items (their namespace moved)", c.Changed)
	}
}

func TestEqualDocumentsGiveIdenticalYAML(t *testing.T) {
	var outs [][]byte
	for range 3 {
		objs, err := manager.Desired(parse(t, base))
		if err != nil {
			t.Fatal(err)
		}
		y, err := manager.YAML(objs)
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

func BenchmarkRenderExample(b *testing.B) {
	data := mustRead(b, "../../deploy/examples/global-config.yaml")
	b.ReportAllocs()
	for b.Loop() {
		doc, err := document.ParseFile(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := manager.Desired(doc); err != nil {
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
	objs, secrets, problems := manager.Render(map[string]string{"config.yaml": `
tracing:
  enable: true
  skywalking: {service: sw.default.svc.cluster.local, port: 11800, access_token: s3cr3t-token}
`})
	if problems != nil || len(objs) != 1 || len(secrets) != 1 || secrets[0] != "s3cr3t-token" {
		t.Fatalf("objs %d, secrets %v, problems %v", len(objs), secrets, problems)
	}
	msg := `EnvoyFilter "globalconfig-tracing" is invalid: backend_token: "s3cr3t-token" rejected`
	if got := manager.Scrub(msg, secrets); strings.Contains(got, "s3cr3t") || !strings.Contains(got, "[redacted]") {
		t.Errorf("scrubbed: %s", got)
	}
}
