package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/pkg/webhook"
	"github.com/globalconfig/globalconfig/test/harness"
)

const docLocalRateLimit = `gzip: {}
localRateLimit:
  maxTokens: 100
  tokensPerFill: 100
  fillInterval: 1s
`

const docWithoutLocalRateLimit = "gzip: {}\n"

// warnings collects the warnings the API server sends client-go
// (rest.Config's WarningHandler).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// At a real kube-apiserver with the webhook registered: the status (and
// `globalconfig status`) lists the user's EnvoyFilter as a dependent of
// localRateLimit; an edit removing localRateLimit is warned about at
// `kubectl apply` and through client-go, and is still admitted; the
// dependent leaves the status with the item; validate --kubeconfig warns
// the same against the live cluster.
func TestDependents(t *testing.T) {
	f := setup(t)
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	createWebhookConfig(f, fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path))
	user, err := anchorstest.EnvoyFilter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Create(f.ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(f.ctx, user.Name, metav1.DeleteOptions{})
	})
	f.put(docLocalRateLimit)
	ctl := f.start("controller", fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1")
	f.waitLive(f.desired(docLocalRateLimit), 30*time.Second)
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool { return ctl.Ready(f.ctx) }) {
		t.Fatal("controller with webhook never ready")
	}
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool {
		_, err := applyManifest(f, cmName, "gizp: {}\n")
		return err != nil
	}) {
		t.Fatal("the webhook never refused a bad document")
	}

	want := status.Dependent{Namespace: ns, Name: "user-anchored-healthcheck", Patch: 0, Operation: "INSERT_AFTER",
		Filter: "envoy.filters.http.local_ratelimit", Item: "localRateLimit"}
	f.waitStatus(func(st *status.Status) bool { return len(st.Dependents) == 1 && st.Dependents[0] == want })
	var stdout, stderr bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}
	if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, env); code != cli.ExitOK {
		t.Fatalf("status: exit %d: %s", code, stderr.String())
	}
	line := "dependents: istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): removing or moving that item changes or breaks it\n"
	if !strings.Contains(stdout.String(), line) {
		t.Errorf("globalconfig status:\n%s\nwant the line:\n%s", stdout.String(), line)
	}

	// validate --kubeconfig compares a file with the live document.
	file := filepath.Join(t.TempDir(), "edit.yaml")
	if err := os.WriteFile(file, []byte(docWithoutLocalRateLimit), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := cli.Main([]string{"validate", "-f", file, "--kubeconfig", cluster.AdminKubeconfig}, env); code != cli.ExitOK ||
		!strings.Contains(stderr.String(), "warning: applying it removes localRateLimit's HTTP filter envoy.filters.http.local_ratelimit, which istio-system/user-anchored-healthcheck") {
		t.Errorf("validate --kubeconfig: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	// kubectl apply: the edit is admitted, with the warning.
	removal := "Warning: globalconfig: this edit removes localRateLimit's HTTP filter envoy.filters.http.local_ratelimit, which istio-system/user-anchored-healthcheck (configPatches[0] INSERT_AFTER) anchors on: istiod skips an insert whose anchor is absent, so its filter silently disappears from those proxies"
	if out, err := applyManifest(f, cmName, docLocalRateLimit); err != nil || strings.Contains(out, "anchors on") {
		t.Fatalf("an edit that keeps localRateLimit: err %v, output:\n%s", err, out)
	}
	out, err := applyManifest(f, cmName, docWithoutLocalRateLimit)
	if err != nil {
		t.Fatalf("the removal was refused: %v\n%s", err, out)
	}
	if !strings.Contains(out, removal) {
		t.Errorf("kubectl apply said:\n%s\nwant:\n%s", out, removal)
	}
	t.Logf("kubectl apply said:\n%s", out)
	f.waitLive(f.desired(docWithoutLocalRateLimit), 30*time.Second)
	f.waitStatus(func(st *status.Status) bool { return st.Dependents == nil })

	// client-go gets the same warning through its WarningHandler.
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var got warnings
	cfg.WarningHandler = &got
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	update := func(doc string) {
		t.Helper()
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(f.ctx, cmName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{document.DataKey: doc}
		if _, err := kube.CoreV1().ConfigMaps(ns).Update(f.ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(docLocalRateLimit)
	f.waitStatus(func(st *status.Status) bool { return len(st.Dependents) == 1 })
	update(docWithoutLocalRateLimit)
	found := false
	for _, w := range got.all() {
		found = found || strings.HasPrefix("Warning: "+w, removal)
	}
	if !found {
		t.Errorf("client-go's warnings: %q, want %q", got.all(), removal)
	}

	// The controller follows the other EnvoyFilters: deleting the user's
	// takes it out of the status, creating it again puts it back.
	update(docLocalRateLimit)
	f.waitStatus(func(st *status.Status) bool { return len(st.Dependents) == 1 })
	if err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(f.ctx, user.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(func(st *status.Status) bool { return st.Dependents == nil })
	user.ResourceVersion = ""
	if _, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).Create(f.ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(func(st *status.Status) bool { return len(st.Dependents) == 1 && st.Dependents[0] == want })
}
