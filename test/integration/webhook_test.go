package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/pkg/webhook"
	"github.com/globalconfig/globalconfig/test/harness"
)

// createWebhookConfig registers the webhook at url the way deploy/ does
// (objectSelector, failurePolicy Ignore), without a caBundle: the
// controller fills it in.
// startEnvoyWebhook puts doc in the global ConfigMap and starts the
// controller serving the API server's admission webhook with `--envoy
// envoy`, once it refuses a bad document.
func startEnvoyWebhook(t *testing.T, f *fixture, doc, envoy string) *harness.Controller {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	createWebhookConfig(f, fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path))
	f.put(doc)
	ctl := f.start("controller", fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1", "--envoy="+envoy)
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool { return ctl.Ready(f.ctx) }) {
		t.Fatal("controller with webhook never ready")
	}
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool {
		_, err := applyManifest(f, cmName, "gizp: {}\n")
		return err != nil
	}) {
		t.Fatal("the webhook never refused a bad document")
	}
	return ctl
}

func createWebhookConfig(f *fixture, url string) {
	f.t.Helper()
	if err := cluster.CreateWebhookConfig(f.ctx, url, ns, cmName); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cluster.Admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(f.ctx, harness.WebhookConfigName, metav1.DeleteOptions{})
		_ = cluster.Admin.CoreV1().Secrets(ns).Delete(f.ctx, "globalconfig-webhook-tls", metav1.DeleteOptions{})
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(f.ctx, "another-configmap", metav1.DeleteOptions{})
	})
}

// applyManifest writes the ConfigMap name with doc and runs kubectl apply
// on it, returning kubectl's output.
func applyManifest(f *fixture, name, doc string) (string, error) {
	f.t.Helper()
	cm := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string]string{document.DataKey: doc},
	}
	y, err := yaml.Marshal(cm)
	if err != nil {
		f.t.Fatal(err)
	}
	file := filepath.Join(f.t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, y, 0o644); err != nil {
		f.t.Fatal(err)
	}
	return cluster.Kubectl(f.ctx, nil, "apply", "-f", file)
}

// createFromFile updates the global ConfigMap from a file as many users
// do: kubectl create configmap --from-file --dry-run=client -o yaml,
// piped to kubectl apply. The manifest it makes has no labels.
func createFromFile(f *fixture, doc string) error {
	f.t.Helper()
	file := filepath.Join(f.t.TempDir(), document.DataKey)
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		f.t.Fatal(err)
	}
	manifest, err := cluster.Kubectl(f.ctx, nil, "create", "configmap", cmName, "-n", ns, "--from-file="+document.DataKey+"="+file, "--dry-run=client", "-o", "yaml")
	if err != nil {
		f.t.Fatalf("kubectl create --dry-run: %v\n%s", err, manifest)
	}
	if strings.Contains(manifest, "labels:") {
		f.t.Fatalf("the manifest carries labels:\n%s", manifest)
	}
	_, err = cluster.Kubectl(f.ctx, []byte(manifest), "apply", "-f", "-")
	return err
}

func (f *fixture) configMapVersion() string {
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(f.ctx, cmName, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return cm.ResourceVersion
}

func TestAdmissionWebhook(t *testing.T) {
	f := setup(t)
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	createWebhookConfig(f, fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path))
	f.put(docV1)
	ctl := f.start("controller", fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1")
	f.waitLive(f.desired(docV1), 30*time.Second)
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool { return ctl.Ready(f.ctx) }) {
		t.Fatal("controller with webhook never ready")
	}
	vwc, err := cluster.Admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(f.ctx, "globalconfig", metav1.GetOptions{})
	if err != nil || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("caBundle not patched: %v", err)
	}
	// The API server reloads webhook configurations asynchronously; until
	// it has the caBundle, calls fail and Ignore admits. Wait until a bad
	// document is refused.
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool {
		_, err := applyManifest(f, cmName, "gizp: {}\n")
		return err != nil
	}) {
		t.Fatal("the webhook never refused a bad document")
	}
	// Only the global ConfigMap is sent to it.
	if out, err := applyManifest(f, "another-configmap", "gizp: {}\n"); err != nil {
		t.Errorf("another ConfigMap was refused: %v\n%s", err, out)
	}

	// The global ConfigMap as kubectl apply manages it, then bad edits.
	if out, err := applyManifest(f, cmName, docV1); err != nil {
		t.Fatalf("valid document refused: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"misspelled key", strings.Replace(docV1, "gzip: {}", "gizp: {}", 1), `gizp: unknown item; did you mean "gzip"? (config.yaml line 5)`},
		{"out of range", strings.Replace(docV1, "gzip: {}", "gzip: {chunkSize: 100}", 1), "gzip.chunkSize: must be between 4096 and 65536, got 100"},
		{"wrong type", strings.Replace(docV1, "gzip: {}", "gzip: {memoryLevel: high}", 1), "gzip.memoryLevel: expected an integer, got a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.configMapVersion()
			out, err := applyManifest(f, cmName, c.doc)
			if err == nil {
				t.Fatalf("admitted:\n%s", out)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "denied the request") {
				t.Errorf("denial does not carry %q:\n%v", c.want, err)
			}
			if f.configMapVersion() != before {
				t.Error("the ConfigMap changed although the edit was refused")
			}
			t.Logf("kubectl apply said:\n%v", err)
		})
	}

	// The most common way to update a ConfigMap from a file replaces its
	// labels; the webhook selects the ConfigMap by name, so it still
	// checks the edit.
	t.Run("kubectl create --dry-run | kubectl apply", func(t *testing.T) {
		before := f.configMapVersion()
		err := createFromFile(f, strings.Replace(docV1, "gzip: {}", "gzip: {chunkSize: 100}", 1))
		if err == nil || !strings.Contains(err.Error(), "gzip.chunkSize: must be between 4096 and 65536, got 100") {
			t.Fatalf("an edit without the example's labels: %v", err)
		}
		if f.configMapVersion() != before {
			t.Error("the ConfigMap changed although the edit was refused")
		}
	})
	f.waitStatus(func(st *status.Status) bool { return st.Admission != nil && st.Admission.Guarded })

	out, err := applyManifest(f, cmName, docV2)
	if err != nil {
		t.Fatalf("valid edit refused: %v", err)
	}
	if strings.Contains(out, webhook.NoChangeWarning) {
		t.Errorf("a real change was warned about:\n%s", out)
	}
	f.waitLive(f.desired(docV2), 10*time.Second)
	out, err = applyManifest(f, cmName, docV2Reformatted)
	if err != nil || !strings.Contains(out, "Warning: "+webhook.NoChangeWarning) {
		t.Errorf("a no-op edit: err %v, output:\n%s", err, out)
	}

	// A renewed certificate (by another replica, or cert-manager) is served
	// without a restart.
	served := func() string {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served certificate
		if err != nil {
			return ""
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	later := &webhook.CertManager{Kube: cluster.Admin, Namespace: ns, Secret: "globalconfig-webhook-tls", Hosts: []string{"127.0.0.1"},
		Now: func() time.Time { return time.Now().Add(webhook.ServingLifetime - 10*24*time.Hour) }}
	renewed, err := later.Ensure(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := webhook.KeyPair(renewed)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.String() == before {
		t.Fatal("the certificate was not renewed")
	}
	if !harness.Eventually(f.ctx, 10*time.Second, func() bool { return served() == leaf.SerialNumber.String() }) {
		t.Errorf("the webhook still serves certificate %s after the Secret changed", served())
	}
	if _, err := applyManifest(f, cmName, "gizp: {}\n"); err == nil {
		t.Error("after the renewal a bad document was admitted")
	}

	// A webhook configuration that no longer selects the ConfigMap (the
	// label selector of earlier releases, the label gone): the controller
	// says so at the next sync, in the status and an Event.
	vwc, err = cluster.Admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(f.ctx, harness.WebhookConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"globalconfig.io/validate": "true"}}
	if _, err := cluster.Admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(f.ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := applyManifest(f, cmName, docV1); err != nil {
		t.Fatalf("valid edit refused: %v\n%s", err, out)
	}
	f.waitStatus(func(st *status.Status) bool {
		return st.Admission != nil && !st.Admission.Guarded && strings.Contains(st.Admission.Reason, "objectSelector (globalconfig.io/validate=true) does not select")
	})
	var selectorEvents []string
	for _, e := range f.events("AdmissionNotGuarding") {
		if strings.Contains(e.Message, "objectSelector") {
			selectorEvents = append(selectorEvents, e.Message)
		}
	}
	if len(selectorEvents) != 1 || !strings.Contains(selectorEvents[0], "not checked before they are saved") {
		t.Errorf("AdmissionNotGuarding events naming the objectSelector: %q", selectorEvents)
	}

	// With the controller down, edits are admitted (failurePolicy Ignore),
	// and the controller's own validation still keeps the EnvoyFilters.
	ctl.Kill()
	_ = cluster.Admin.CoordinationV1().Leases(ns).Delete(f.ctx, leaseName, metav1.DeleteOptions{})
	_, live := f.live()
	if out, err := applyManifest(f, cmName, docInvalid); err != nil {
		t.Fatalf("with the controller down the edit was refused (failurePolicy must be Ignore): %v\n%s", err, out)
	}
	f.start("controller-2")
	f.waitStatus(func(st *status.Status) bool {
		return st.State == status.Invalid && contains(problems(st), "gzip.chunkSize") &&
			st.Admission != nil && st.Admission.Reason == controller.NoWebhook // controller-2 serves no webhook
	})
	if _, after := f.live(); !maps.Equal(live, after) {
		t.Error("EnvoyFilters changed after an invalid edit got past the webhook")
	}
}

// withoutBrotli writes an Envoy that lacks the brotli compressor: the
// real Envoy `make tools` installs, started without that extension, as a
// build without it would be (istio-proxy lacks custom_response so).
// globalconfig's own validation can't know which extensions the fleet's
// Envoy was built with; only that Envoy can refuse them.
func withoutBrotli(t testing.TB, envoy string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy-without-brotli")
	script := "#!/bin/sh\nexec '" + envoy + "' --disable-extensions envoy.compression.compressor/envoy.compression.brotli.compressor \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The API server's admission chain with `run --envoy`: an edit that
// globalconfig's own validation accepts and the given Envoy refuses is
// denied, and kubectl shows Envoy's own message and the item; an edit it
// loads is admitted and applied; a no-op edit runs no Envoy.
func TestAdmissionWebhookEnvoy(t *testing.T) {
	f := setup(t)
	real, err := harness.EnvoyBinary(f.ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}
	loaded := strings.Replace(docV1, "brotli: {}\n", "", 1)
	refused := docV1 // brotli
	changed := strings.Replace(loaded, "gzip: {}", "gzip: {chunkSize: 8192}", 1)
	ctl := startEnvoyWebhook(t, f, loaded, withoutBrotli(t, real.Path))
	if out, err := applyManifest(f, cmName, loaded); err != nil {
		t.Fatalf("a document Envoy loads was refused: %v\n%s", err, out)
	}

	// globalconfig's own validation accepts what Envoy refuses.
	file := filepath.Join(t.TempDir(), "refused.yaml")
	if err := os.WriteFile(file, []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"validate", "-f", file}, cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}); code != cli.ExitOK {
		t.Fatalf("globalconfig validate refuses the document: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	before := f.configMapVersion()
	out, err := applyManifest(f, cmName, refused)
	if err == nil {
		t.Fatalf("admitted:\n%s", out)
	}
	t.Logf("kubectl apply said:\n%v", err)
	for _, want := range []string{
		`admission webhook "` + webhook.WebhookName + `" denied the request`,
		webhook.EnvoyRefusalPrefix,
		"envoy " + real.Version,
		`GATEWAY configuration: "Didn't find a registered implementation for type: 'envoy.extensions.compression.brotli.compressor.v3.Brotli'"`,
		"refused on their own: brotli",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial does not say %q", want)
		}
	}
	if f.configMapVersion() != before {
		t.Error("the ConfigMap changed although the edit was refused")
	}

	// An edit Envoy loads is admitted and applied; a no-op edit after it
	// is admitted without an Envoy run.
	if out, err := applyManifest(f, cmName, changed); err != nil {
		t.Fatalf("an edit Envoy loads was refused: %v\n%s", err, out)
	}
	f.waitLive(f.desired(changed), 10*time.Second)
	m := f.metrics(ctl)
	runs, unchanged := m["globalconfig_webhook_envoy_check_duration_seconds_count"], m[`globalconfig_webhook_envoy_checks_total{result="unchanged"}`]
	out, err = applyManifest(f, cmName, "# the same, reformatted\n"+changed)
	if err != nil || !strings.Contains(out, webhook.NoChangeWarning) {
		t.Errorf("a no-op edit: %v\n%s", err, out)
	}
	m = f.metrics(ctl)
	if m["globalconfig_webhook_envoy_check_duration_seconds_count"] != runs || m[`globalconfig_webhook_envoy_checks_total{result="unchanged"}`] != unchanged+1 {
		t.Errorf("a no-op edit: Envoy checks %v → %v, unchanged %v → %v; want no check, one unchanged",
			runs, m["globalconfig_webhook_envoy_check_duration_seconds_count"], unchanged, m[`globalconfig_webhook_envoy_checks_total{result="unchanged"}`])
	}
	if m[`globalconfig_webhook_envoy_checks_total{result="rejected"}`] < 1 || m[`globalconfig_webhook_envoy_checks_total{result="failed"}`] != 0 {
		t.Errorf("Envoy check metrics: %v", m)
	}
}
