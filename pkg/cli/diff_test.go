package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/render"
)

const liveDoc = `
gzip:
  chunkSize: 8192
zstd: {}
`

// cluster is a fake API server behind the Clients of cli.Env.
type cluster struct {
	kube  *fake.Clientset
	istio *istiofake.Clientset
	// dialed counts the connections made.
	dialed int
}

// newCluster holds the global ConfigMap with doc (none when doc is "")
// and the EnvoyFilters the controller applied for it, plus one
// EnvoyFilter globalconfig doesn't own.
func newCluster(t *testing.T, doc string) *cluster {
	t.Helper()
	var kubeObjs, istioObjs []runtime.Object
	if doc != "" {
		kubeObjs = append(kubeObjs, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "global-config", Namespace: "istio-system"},
			Data:       map[string]string{document.DataKey: doc},
		})
		d, err := document.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := render.Desired(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			ef, err := plan.Applied(o)
			if err != nil {
				t.Fatal(err)
			}
			istioObjs = append(istioObjs, ef)
		}
	}
	theirs := &clientnetworking.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "istio-system"}}
	istioObjs = append(istioObjs, theirs)
	return &cluster{kube: fake.NewClientset(kubeObjs...), istio: istiofake.NewSimpleClientset(istioObjs...)}
}

func (c *cluster) clients(string) (kubernetes.Interface, istioclient.Interface, error) {
	c.dialed++
	return c.kube, c.istio, nil
}

// runIn runs the command line against c.
func runIn(t *testing.T, c *cluster, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
	if c != nil {
		env.Clients = c.clients
	}
	code = cli.Main(args, env)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDiffNoChanges(t *testing.T) {
	c := newCluster(t, liveDoc)
	// Formatting and comments are no change.
	file := writeFile(t, "same.yaml", "# reformatted\nzstd: {}\ngzip: {chunkSize: 8192}\n")
	code, out, errs := runIn(t, c, "diff", "-f", file)
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if want := "no item changed\nno changes to the EnvoyFilters\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	t.Logf("$ globalconfig diff -f same.yaml\n%s", out)
}

func TestDiffChangedItem(t *testing.T) {
	c := newCluster(t, liveDoc)
	file := writeFile(t, "edit.yaml", "gzip:\n  chunkSize: 16384\nzstd: {}\n")
	code, out, errs := runIn(t, c, "diff", "-f", file)
	if code != cli.ExitChanged || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"changed gzip\nupdate istio-system/globalconfig-gzip\n\n--- live/istio-system/globalconfig-gzip\n+++ file/istio-system/globalconfig-gzip\n@@ ",
		"\n-              chunk_size: 8192\n+              chunk_size: 16384\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "theirs") || strings.Contains(out, "zstd") {
		t.Errorf("stdout names an EnvoyFilter that does not change:\n%s", out)
	}
	t.Logf("$ globalconfig diff -f edit.yaml\n%s", out)
}

func TestDiffRemovedItem(t *testing.T) {
	c := newCluster(t, liveDoc)
	file := writeFile(t, "removed.yaml", "gzip:\n  chunkSize: 8192\n")
	code, out, errs := runIn(t, c, "diff", "-f", file)
	if code != cli.ExitChanged || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.HasPrefix(out, "removed zstd\ndelete istio-system/globalconfig-zstd\n\n--- live/istio-system/globalconfig-zstd\n+++ file/istio-system/globalconfig-zstd\n@@ -1,") {
		t.Errorf("stdout:\n%s", out)
	}
}

// The item line is the words of the controller's Applied Event and of the
// webhook's warning for the same edit: render.Compare of the section keys.
func TestDiffItemLineIsTheEventsWords(t *testing.T) {
	c := newCluster(t, liveDoc)
	next := "brotli: {}\ngzip:\n  chunkSize: 16384\n"
	_, out, _ := runIn(t, c, "diff", "-f", writeFile(t, "next.yaml", next))
	before, _ := render.KeysOf(map[string]string{document.DataKey: liveDoc})
	after, _ := render.KeysOf(map[string]string{document.DataKey: next})
	want := render.Compare(before, after).String()
	if line, _, _ := strings.Cut(out, "\n"); line != want || want != "added brotli; changed gzip; removed zstd" {
		t.Errorf("item line %q, want %q", line, want)
	}
	// The plan lines use the actions whose past tense the Event uses.
	for _, a := range []plan.Action{plan.Create, plan.Update, plan.Delete} {
		if !strings.Contains(out, "\n"+string(a)+" istio-system/globalconfig-") {
			t.Errorf("no %s line:\n%s", a, out)
		}
	}
}

func TestDiffMissingConfigMap(t *testing.T) {
	c := newCluster(t, "")
	code, out, errs := runIn(t, c, "diff", "-f", writeFile(t, "new.yaml", liveDoc))
	if code != cli.ExitChanged {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if want := "added gzip, zstd\ncreate istio-system/globalconfig-gzip\ncreate istio-system/globalconfig-zstd\n\n--- live/istio-system/globalconfig-gzip\n+++ file/istio-system/globalconfig-gzip\n@@ -0,0 +1,"; !strings.HasPrefix(out, want) {
		t.Errorf("stdout:\n%s", out)
	}
	if !strings.Contains(errs, "ConfigMap istio-system/global-config not found: every item counts as added") {
		t.Errorf("stderr %q", errs)
	}
}

func TestDiffInvalidFile(t *testing.T) {
	c := newCluster(t, liveDoc)
	code, out, errs := runIn(t, c, "diff", "-f", writeFile(t, "bad.yaml", "gzip:\n  chunkSize: 1\ngizp: {}\n"))
	if code != cli.ExitDiffInvalid || code <= 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		"bad.yaml:2: gzip.chunkSize: must be between 4096 and 65536, got 1\n",
		`bad.yaml:3: gizp: unknown item; did you mean "gzip"?` + "\n",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if c.dialed != 0 {
		t.Error("an invalid file still reached the API server")
	}
}

func TestDiffJSON(t *testing.T) {
	c := newCluster(t, liveDoc)
	code, out, errs := runIn(t, c, "diff", "-o", "json", "-f", writeFile(t, "edit.yaml", "gzip:\n  chunkSize: 16384\n"))
	if code != cli.ExitChanged {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got struct {
		Items        map[string][]string `json:"items"`
		EnvoyFilters []struct {
			Name, Namespace, Action, Diff string
		} `json:"envoyFilters"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Items["added"]) != 0 || strings.Join(got.Items["changed"], ",") != "gzip" || strings.Join(got.Items["removed"], ",") != "zstd" {
		t.Errorf("items %v", got.Items)
	}
	if len(got.EnvoyFilters) != 2 || got.EnvoyFilters[0].Action != "update" || got.EnvoyFilters[1].Action != "delete" ||
		got.EnvoyFilters[1].Name != "globalconfig-zstd" || got.EnvoyFilters[1].Namespace != "istio-system" ||
		!strings.Contains(got.EnvoyFilters[0].Diff, "+              chunk_size: 16384\n") {
		t.Errorf("envoyFilters %+v", got.EnvoyFilters)
	}
	code, out, _ = runIn(t, c, "diff", "-o", "yaml", "-f", writeFile(t, "same.yaml", liveDoc))
	if code != cli.ExitOK || out != "envoyFilters: []\nitems:\n  added: []\n  changed: []\n  removed: []\n" {
		t.Errorf("exit %d, yaml:\n%s", code, out)
	}
}

// --istio-versions renders the EnvoyFilters for other releases; the item
// line stays the controller's.
func TestDiffIstioVersions(t *testing.T) {
	c := newCluster(t, liveDoc)
	code, out, errs := runIn(t, c, "diff", "--istio-versions", "1.30", "-f", writeFile(t, "same.yaml", liveDoc))
	if code != cli.ExitChanged {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.HasPrefix(out, "no item changed\nupdate istio-system/globalconfig-gzip\nupdate istio-system/globalconfig-zstd\n") ||
		!strings.Contains(out, "\n+    globalconfig.io/istio-versions: \"1.30\"\n") {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestDiffAPIErrors(t *testing.T) {
	file := writeFile(t, "doc.yaml", liveDoc)
	var errb bytes.Buffer
	env := cli.Env{Stdout: &bytes.Buffer{}, Stderr: &errb, Clients: func(string) (kubernetes.Interface, istioclient.Interface, error) {
		return nil, nil, errors.New("load kubeconfig: no configuration has been provided")
	}}
	if code := cli.Main([]string{"diff", "-f", file}, env); code != cli.ExitAPI || !strings.Contains(errb.String(), "no configuration") {
		t.Errorf("no kubeconfig: exit %d, stderr %q", code, errb.String())
	}

	c := newCluster(t, liveDoc)
	c.kube.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "global-config", errors.New("no RBAC"))
	})
	code, _, errs := runIn(t, c, "diff", "-f", file)
	if code != cli.ExitAPI || !strings.Contains(errs, "forbidden") {
		t.Errorf("forbidden: exit %d, stderr %q", code, errs)
	}

	c = newCluster(t, liveDoc)
	c.istio.PrependReactor("list", "envoyfilters", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if code, _, errs := runIn(t, c, "diff", "-f", file); code != cli.ExitAPI || !strings.Contains(errs, "list envoyfilters: connection refused") {
		t.Errorf("list: exit %d, stderr %q", code, errs)
	}
}

func TestDiffUsage(t *testing.T) {
	c := newCluster(t, liveDoc)
	file := writeFile(t, "doc.yaml", liveDoc)
	for _, args := range [][]string{
		{"diff"},
		{"diff", "-f", file, "-o", "wide"},
		{"diff", "-f", file, "--configmap", "global-config"},
		{"diff", "-f", file, "extra"},
		{"diff", "-f", file, "--istio-versions", "0.1"},
	} {
		if code, _, errs := runIn(t, c, args...); code != cli.ExitUsage || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, _ := runIn(t, c, "diff", "-f", filepath.Join(t.TempDir(), "missing.yaml")); code != cli.ExitIO {
		t.Errorf("missing file: exit %d", code)
	}
	if c.dialed != 0 {
		t.Error("a usage error reached the API server")
	}
}

// A live document that doesn't validate: the EnvoyFilters still diff.
func TestDiffInvalidLiveDocument(t *testing.T) {
	c := newCluster(t, liveDoc)
	cm, err := c.kube.CoreV1().ConfigMaps("istio-system").Get(context.Background(), "global-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[document.DataKey] = "gizp: {}\n"
	if _, err := c.kube.CoreV1().ConfigMaps("istio-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runIn(t, c, "diff", "-f", writeFile(t, "doc.yaml", liveDoc))
	if code != cli.ExitChanged || !strings.HasPrefix(out, "added gzip, zstd\nno changes to the EnvoyFilters\n") || !strings.Contains(errs, "is invalid") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
