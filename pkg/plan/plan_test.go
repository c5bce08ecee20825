package plan_test

import (
	"encoding/json"
	"strings"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/render"
)

const docV1 = `
gzip:
  chunkSize: 8192
zstd: {}
`

// render parses and builds a document: its section keys and objects.
func renderDoc(t *testing.T, src string) (map[string]string, []*envoyfilter.Object) {
	t.Helper()
	doc, err := document.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	return render.SectionKeys(doc), objs
}

// applied is what the API server holds after the controller applied objs.
func applied(t *testing.T, objs []*envoyfilter.Object) []*clientnetworking.EnvoyFilter {
	t.Helper()
	var out []*clientnetworking.EnvoyFilter
	for _, o := range objs {
		ef, err := plan.Applied(o)
		if err != nil {
			t.Fatal(err)
		}
		ef.UID, ef.ResourceVersion = "uid", "1"
		ef.Labels["other"] = "kept out of the diff"
		out = append(out, ef)
	}
	return out
}

func TestEqual(t *testing.T) {
	_, objs := renderDoc(t, docV1)
	live := applied(t, objs)
	if !plan.Equal(live[0], objs[0]) {
		t.Fatal("an applied object is not equal to what it was applied from")
	}
	edited := live[0].DeepCopy()
	edited.Spec.Priority++
	if plan.Equal(edited, objs[0]) {
		t.Error("an edited spec under the same content-hash annotation is equal")
	}
	relabelled := live[0].DeepCopy()
	relabelled.Labels[envoyfilter.LabelItem] = "other"
	if plan.Equal(relabelled, objs[0]) {
		t.Error("a changed item label is equal")
	}
	if plan.Equal(live[0], objs[1]) {
		t.Error("different objects are equal")
	}
}

func TestActionWords(t *testing.T) {
	for a, want := range map[plan.Action]string{plan.Create: "created", plan.Update: "updated", plan.Delete: "deleted"} {
		if a.Past() != want {
			t.Errorf("%s.Past() = %q, want %q", a, a.Past(), want)
		}
	}
}

func TestNoChanges(t *testing.T) {
	keys, objs := renderDoc(t, docV1)
	p, err := plan.New(keys, keys, objs, applied(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Fatalf("plan of an applied document is not empty: %+v", p)
	}
	if got, want := p.String(), "no item changed\n"+plan.NoEnvoyFilterChanges+"\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestChangeAndRemove(t *testing.T) {
	before, liveObjs := renderDoc(t, docV1)
	after, objs := renderDoc(t, "gzip:\n  chunkSize: 16384\nbrotli: {}\n")
	live := applied(t, liveObjs)
	// Someone else's EnvoyFilter is never planned.
	live = append(live, &clientnetworking.EnvoyFilter{})
	live[len(live)-1].Name, live[len(live)-1].Namespace = "theirs", "istio-system"
	p, err := plan.New(before, after, objs, live)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Items.String(), render.Compare(before, after).String(); got != want || got != "added brotli; changed gzip; removed zstd" {
		t.Errorf("item line %q, want %q", got, want)
	}
	var lines []string
	for _, c := range p.EnvoyFilters {
		lines = append(lines, string(c.Action)+" "+c.Key())
	}
	if got, want := strings.Join(lines, "; "), "create istio-system/globalconfig-brotli; update istio-system/globalconfig-gzip; delete istio-system/globalconfig-zstd"; got != want {
		t.Errorf("writes %q, want %q", got, want)
	}
	gz := p.EnvoyFilters[1].Diff
	for _, want := range []string{
		"--- live/istio-system/globalconfig-gzip\n+++ file/istio-system/globalconfig-gzip\n@@ ",
		"\n-              chunk_size: 8192\n", "\n+              chunk_size: 16384\n",
		"\n-    globalconfig.io/content-hash: ",
	} {
		if !strings.Contains(gz, want) {
			t.Errorf("gzip diff lacks %q:\n%s", want, gz)
		}
	}
	if strings.Contains(gz, "kept out of the diff") {
		t.Errorf("the diff shows a label globalconfig doesn't set:\n%s", gz)
	}
	// body drops the --- and +++ lines.
	body := func(d string) string { return strings.SplitN(d, "\n", 3)[2] }
	if del := p.EnvoyFilters[2].Diff; !strings.HasPrefix(body(del), "@@ -1,46 +0,0 @@\n-apiVersion: ") || strings.Contains(body(del), "\n+") {
		t.Errorf("delete diff:\n%s", del)
	}
	if cr := p.EnvoyFilters[0].Diff; !strings.HasPrefix(body(cr), "@@ -0,0 +1,") || strings.Contains(body(cr), "\n-") {
		t.Errorf("create diff:\n%s", cr)
	}
	text := p.String()
	if !strings.HasPrefix(text, "added brotli; changed gzip; removed zstd\ncreate istio-system/globalconfig-brotli\nupdate istio-system/globalconfig-gzip\ndelete istio-system/globalconfig-zstd\n\n--- ") {
		t.Errorf("String():\n%s", text)
	}
}

// Drift: no item changed, but an edited EnvoyFilter is put back.
func TestDrift(t *testing.T) {
	keys, objs := renderDoc(t, docV1)
	live := applied(t, objs)
	live[0].Spec.Priority = 7
	p, err := plan.New(keys, keys, objs, live)
	if err != nil {
		t.Fatal(err)
	}
	if p.Empty() || len(p.EnvoyFilters) != 1 || p.EnvoyFilters[0].Action != plan.Update || !strings.Contains(p.EnvoyFilters[0].Diff, "\n-  priority: 7\n") {
		t.Fatalf("plan %+v", p)
	}
	if !strings.HasPrefix(p.String(), "no item changed\nupdate istio-system/globalconfig-gzip\n") {
		t.Errorf("String():\n%s", p.String())
	}
}

// No live document: every item is added.
func TestNoLiveDocument(t *testing.T) {
	keys, objs := renderDoc(t, docV1)
	p, err := plan.New(nil, keys, objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Items.String() != "added gzip, zstd" || len(p.EnvoyFilters) != 2 {
		t.Errorf("plan %+v", p)
	}
}

func TestJSONShape(t *testing.T) {
	keys, objs := renderDoc(t, docV1)
	p, err := plan.New(keys, keys, objs, applied(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"items":{"added":[],"changed":[],"removed":[]},"envoyFilters":[]}`; got != want {
		t.Errorf("json %s, want %s", got, want)
	}
}
