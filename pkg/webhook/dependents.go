package webhook

import (
	"context"
	"encoding/json"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// DependentWarningPrefix starts every warning of an edit that removes or
// moves a filter another EnvoyFilter anchors on.
const DependentWarningPrefix = "globalconfig: "

// OthersTimeout bounds the Others question within one review.
const OthersTimeout = 2 * time.Second

// dependentWarnings warn of an UPDATE whose set no longer inserts, where
// another EnvoyFilter may meet it, a filter that EnvoyFilter anchors on
// in the old document's set (pkg/anchors): istiod then skips its patch
// without a word. The old document is rendered afresh (6 to 10 ms for
// the full example), only when the edit changes an item (diff) and the
// cluster has EnvoyFilters of others.
func (h *Handler) dependentWarnings(ctx context.Context, req *admissionv1.AdmissionRequest, res render.Result, diff *render.Diff) []string {
	if h.Others == nil || req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 || (diff != nil && diff.Empty()) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, OthersTimeout)
	defer cancel()
	others, err := h.Others(ctx)
	if err != nil {
		return []string{DependentWarningPrefix + "could not list the cluster's other EnvoyFilters to check whether this edit removes a filter one anchors on: " + err.Error()}
	}
	if len(others) == 0 {
		return nil
	}
	var old corev1.ConfigMap
	if json.Unmarshal(req.OldObject.Raw, &old) != nil {
		return nil
	}
	before := render.New().FromConfigMap(old.Data)
	if !before.Valid() {
		return nil // the old document's set was never applied
	}
	var out []string
	for _, w := range anchors.Compare(before.Objects, res.Objects, others, h.RootNamespace) {
		out = append(out, DependentWarningPrefix+w.String())
	}
	return out
}
