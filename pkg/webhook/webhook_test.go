package webhook

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
)

func request(t *testing.T, op admissionv1.Operation, doc, oldDoc string) *admissionv1.AdmissionRequest {
	t.Helper()
	raw := func(d string) runtime.RawExtension {
		b, err := json.Marshal(corev1.ConfigMap{Data: map[string]string{document.DataKey: d}})
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	req := &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Operation: op, Object: raw(doc)}
	if oldDoc != "" {
		req.OldObject = raw(oldDoc)
	}
	return req
}

func TestReview(t *testing.T) {
	h := &Handler{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	valid := "gzip: {}\n"
	cases := []struct {
		name     string
		req      *admissionv1.AdmissionRequest
		allowed  bool
		message  string
		warnings int
	}{
		{"valid create", request(t, admissionv1.Create, valid, ""), true, "", 0},
		{"every problem with its path", request(t, admissionv1.Update, "gizp: {}\ngzip: {chunkSize: 1}\n", valid), false,
			"globalconfig rejected config.yaml: 2 problem(s):\ngizp: unknown item; did you mean \"gzip\"? (config.yaml line 1)\ngzip.chunkSize: must be between 4096 and 65536, got 1 (config.yaml line 2)", 0},
		{"a real change", request(t, admissionv1.Update, "gzip: {chunkSize: 8192}\nbrotli: {}\n", valid), true, "", 1},
		{"no change in the output", request(t, admissionv1.Update, "# a comment\ngzip:\n  chunkSize: 4096\n", valid), true, "", 1},
		{"update from an invalid document", request(t, admissionv1.Update, valid, "gizp: {}\n"), true, "", 0},
		{"delete is not reviewed", &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Kind: "ConfigMap"}, Operation: admissionv1.Delete}, true, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := h.review(context.Background(), c.req)
			if resp.Allowed != c.allowed || len(resp.Warnings) != c.warnings {
				t.Fatalf("allowed %v warnings %v, want %v and %d", resp.Allowed, resp.Warnings, c.allowed, c.warnings)
			}
			if c.message != "" && resp.Result.Message != c.message {
				t.Errorf("message:\n%s\nwant:\n%s", resp.Result.Message, c.message)
			}
			want := NoChangeWarning
			if c.name == "a real change" {
				want = ChangeWarningPrefix + "added brotli; changed gzip"
			}
			if c.warnings > 0 && resp.Warnings[0] != want {
				t.Errorf("warning %q, want %q", resp.Warnings[0], want)
			}
		})
	}
	missing := &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Kind: "ConfigMap"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{"data":{}}`)}}
	if resp := h.review(context.Background(), missing); resp.Allowed || !strings.Contains(resp.Result.Message, `no data key "config.yaml"`) {
		t.Errorf("a labelled ConfigMap without config.yaml: %+v", resp)
	}
}

func servingCert(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if b == nil {
		t.Fatal("no certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertificateLifecycle(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &CertManager{Kube: kube, Namespace: "istio-system", Secret: "tls", Hosts: []string{"globalconfig-webhook.istio-system.svc", "127.0.0.1"}, Now: func() time.Time { return now }}

	first, err := m.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cert := servingCert(t, first)
	if cert.VerifyHostname("127.0.0.1") != nil || cert.VerifyHostname("globalconfig-webhook.istio-system.svc") != nil {
		t.Errorf("certificate hosts: %v %v", cert.DNSNames, cert.IPAddresses)
	}
	if _, err := KeyPair(first); err != nil {
		t.Fatal(err)
	}

	// A second replica, or a restart, reuses it.
	again, err := m.Ensure(ctx)
	if err != nil || string(again.Data[corev1.TLSCertKey]) != string(first.Data[corev1.TLSCertKey]) {
		t.Fatalf("certificate reissued without need: %v", err)
	}

	// Within 30 days of expiry the serving certificate is renewed under the
	// same CA, so caBundle stays valid.
	now = cert.NotAfter.Add(-29 * 24 * time.Hour)
	renewed, err := m.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(renewed.Data[corev1.TLSCertKey]) == string(first.Data[corev1.TLSCertKey]) || string(CABundle(renewed)) != string(CABundle(first)) {
		t.Error("not renewed, or renewed under a new CA")
	}

	// A new host name gets a new certificate.
	m.Hosts = append(m.Hosts, "globalconfig-webhook.istio-system.svc.cluster.local")
	withHost, err := m.Ensure(ctx)
	if err != nil || servingCert(t, withHost).VerifyHostname("globalconfig-webhook.istio-system.svc.cluster.local") != nil {
		t.Errorf("new host not covered: %v", err)
	}

	// caBundle: written when it differs, not when it is already right.
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "globalconfig"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if changed, err := PatchCABundle(ctx, kube, "globalconfig", CABundle(withHost)); err != nil || !changed {
		t.Errorf("first patch: changed %v, %v", changed, err)
	}
	if changed, err := PatchCABundle(ctx, kube, "globalconfig", CABundle(withHost)); err != nil || changed {
		t.Errorf("second patch wrote again: changed %v, %v", changed, err)
	}
}

// An item's warning reaches kubectl as an admission warning, with its path
// and line, beside the diff.
func TestReviewWarns(t *testing.T) {
	h := &Handler{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	resp := h.review(context.Background(), request(t, admissionv1.Update, "downstream:\n  routeTimeout: 30s\n", "gzip: {}\n"))
	want := []string{
		"globalconfig: downstream.routeTimeout: overrides the timeout of every route, including those VirtualServices set (http[].timeout); set timeouts in the VirtualServices instead, or use 0 to leave them alone (config.yaml line 2)",
		ChangeWarningPrefix + "added downstream; removed gzip",
	}
	if !resp.Allowed || strings.Join(resp.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("allowed %v, warnings:\n%s\nwant:\n%s", resp.Allowed, strings.Join(resp.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

// A canary policy that would roll every change back is warned of at
// apply time: no canary proxy, or proxies without the label; istiod not
// answering is said too. Without the policy istiod is not asked.
func TestReviewWarnsOfCanaryPolicy(t *testing.T) {
	var canaries, unlabelled []string
	var fleetErr error
	var asked string
	h := &Handler{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fleet: func(_ context.Context, label string, set []*envoyfilter.Object) ([]string, []string, error) {
			asked = label
			if len(set) != 1 || set[0].Item() != "gzip" {
				t.Errorf("asked about the set %v", set)
			}
			return canaries, unlabelled, fleetErr
		}}
	policy := "rollout:\n  strategy: Canary\n  canaryLabel: example.com/canary\ngzip: {}\n"
	warnings := func(doc string) string {
		t.Helper()
		resp := h.review(context.Background(), request(t, admissionv1.Create, doc, ""))
		if !resp.Allowed {
			t.Fatalf("denied: %v", resp.Result)
		}
		return strings.Join(resp.Warnings, "\n")
	}
	canaries = []string{"gw-0.istio-system"}
	if w := warnings(policy); w != "" || asked != "example.com/canary" {
		t.Errorf("a fleet with a canary and every proxy labelled: %q (asked %q)", w, asked)
	}
	canaries, unlabelled = nil, []string{"a.ns", "b.ns", "c.ns", "d.ns", "e.ns", "f.ns"}
	w := warnings(policy)
	for _, want := range []string{
		"globalconfig: rollout.canaryLabel: no proxy connected to istiod is labelled example.com/canary=true: every change will be rolled back after the bake time",
		"globalconfig: rollout.canaryLabel: 6 proxies the EnvoyFilters reach carry no example.com/canary label (a.ns, b.ns, c.ns, d.ns, e.ns and 1 more): every change will be rolled back; label each true or false",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	fleetErr = errors.New("dial tcp 10.0.0.5:15014: connection refused")
	if w := warnings(policy); !strings.Contains(w, "could not ask istiod which proxies are canaries: dial tcp") {
		t.Errorf("istiod down: %q", w)
	}
	asked = ""
	if w := warnings("gzip: {}\n"); w != "" || asked != "" {
		t.Errorf("without a canary policy: %q, asked %q", w, asked)
	}
}
