package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
)

// othersIn lists the EnvoyFilters of a (fake) cluster as the controller
// hands them to the webhook.
func othersIn(istio *istiofake.Clientset) func(ctx context.Context) ([]anchors.Other, error) {
	return func(ctx context.Context) ([]anchors.Other, error) {
		list, err := istio.NetworkingV1alpha3().EnvoyFilters(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []anchors.Other
		for _, ef := range list.Items {
			out = append(out, anchors.Other{Namespace: ef.Namespace, Name: ef.Name, Labels: ef.Labels, Spec: &ef.Spec})
		}
		return out, nil
	}
}

func clusterWith(t *testing.T, manifests ...string) *istiofake.Clientset {
	t.Helper()
	istio := istiofake.NewSimpleClientset()
	for _, m := range manifests {
		b, err := yaml.YAMLToJSON([]byte(m))
		if err != nil {
			t.Fatal(err)
		}
		ef := &clientnetworking.EnvoyFilter{}
		if err := json.Unmarshal(b, ef); err != nil {
			t.Fatal(err)
		}
		if _, err := istio.NetworkingV1alpha3().EnvoyFilters(ef.Namespace).Create(context.Background(), ef, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return istio
}

// dependentWarningsOf are the warnings of resp about dependents.
func dependentWarningsOf(resp *admissionv1.AdmissionResponse) []string {
	var out []string
	for _, w := range resp.Warnings {
		if strings.Contains(w, "anchors on") || strings.Contains(w, "other EnvoyFilters") {
			out = append(out, w)
		}
	}
	return out
}

func TestReviewWarnsOfDependents(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	user := clusterWith(t, anchorstest.UserAnchoredHealthCheck)
	for _, c := range []struct {
		name        string
		cluster     *istiofake.Clientset
		op          admissionv1.Operation
		doc, oldDoc string
		want        string // the one dependent warning, "" for none
	}{
		{name: "removing localRateLimit", cluster: user, op: admissionv1.Update, doc: "gzip: {}\n", oldDoc: anchorstest.LocalRateLimit,
			want: "globalconfig: this edit removes localRateLimit's HTTP filter envoy.filters.http.local_ratelimit, which istio-system/user-anchored-healthcheck (configPatches[0] INSERT_AFTER) anchors on: istiod skips an insert whose anchor is absent, so its filter silently disappears from those proxies"},
		{name: "narrowing localRateLimit to other gateways", cluster: user, op: admissionv1.Update,
			doc: "target: {selector: {istio: eastwestgateway}}\n" + anchorstest.LocalRateLimit, oldDoc: anchorstest.LocalRateLimit,
			want: "globalconfig: this edit narrows localRateLimit's HTTP filter envoy.filters.http.local_ratelimit"},
		{name: "changing localRateLimit's settings", cluster: user, op: admissionv1.Update,
			doc: strings.Replace(anchorstest.LocalRateLimit, "maxTokens: 100", "maxTokens: 500", 1), oldDoc: anchorstest.LocalRateLimit},
		{name: "removing another item", cluster: user, op: admissionv1.Update, doc: "localRateLimit: {maxTokens: 100, tokensPerFill: 100, fillInterval: 1s}\n", oldDoc: anchorstest.LocalRateLimit},
		{name: "no other EnvoyFilter", cluster: clusterWith(t), op: admissionv1.Update, doc: "gzip: {}\n", oldDoc: anchorstest.LocalRateLimit},
		{name: "a create has no old set", cluster: user, op: admissionv1.Create, doc: "gzip: {}\n"},
		{name: "the old document was invalid, its set never applied", cluster: user, op: admissionv1.Update, doc: "gzip: {}\n", oldDoc: "gizp: {}\n" + anchorstest.LocalRateLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &Handler{Log: log, Others: othersIn(c.cluster)}
			resp := h.review(context.Background(), request(t, c.op, c.doc, c.oldDoc))
			if !resp.Allowed {
				t.Fatalf("refused: %v", resp.Result)
			}
			got := dependentWarningsOf(resp)
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("warned %q, want no warning about dependents", got)
			case c.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], c.want)):
				t.Errorf("warned %q, want one starting %q", got, c.want)
			}
		})
	}
}

// A cluster that can't be listed is said, not taken for one without
// dependents; the edit is admitted.
func TestReviewDependentsUnlisted(t *testing.T) {
	h := &Handler{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Others: func(context.Context) ([]anchors.Other, error) {
		return nil, errors.New("the EnvoyFilter cache has not synced yet")
	}}
	resp := h.review(context.Background(), request(t, admissionv1.Update, "gzip: {}\n", anchorstest.LocalRateLimit))
	got := dependentWarningsOf(resp)
	if !resp.Allowed || len(got) != 1 || !strings.Contains(got[0], "could not list the cluster's other EnvoyFilters") || !strings.Contains(got[0], "not synced yet") {
		t.Errorf("allowed %v, warned %q", resp.Allowed, resp.Warnings)
	}
}
