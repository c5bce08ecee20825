package webhook

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/pkg/status"
)

// WebhookName is globalconfig's webhook in its ValidatingWebhookConfiguration.
const WebhookName = "global-config.globalconfig.io"

// MatchExpression is the CEL match condition that sends the API server's
// writes of the global ConfigMap namespace/name, and of no other
// ConfigMap, to the webhook. It selects by name, so no label is needed:
// `kubectl create configmap --from-file … | kubectl apply -f -` replaces
// the labels, and a label selector would then let every edit through.
func MatchExpression(namespace, name string) string {
	return fmt.Sprintf("request.namespace == %q && object.metadata.name == %q", namespace, name)
}

// Guard says whether the ValidatingWebhookConfiguration configName sends
// the API server's writes of cm to globalconfig's webhook, and if not,
// why. It reads the configuration; an error reading it is a reason.
func Guard(ctx context.Context, kube kubernetes.Interface, configName string, cm *corev1.ConfigMap) status.Admission {
	vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return status.Admission{Reason: fmt.Sprintf("the ValidatingWebhookConfiguration %s does not exist", configName)}
	case err != nil:
		return status.Admission{Reason: fmt.Sprintf("the ValidatingWebhookConfiguration %s can't be read: %v", configName, err)}
	}
	return Guards(vwc, cm)
}

// Guards says whether vwc sends the API server's CREATE and UPDATE of cm
// to globalconfig's webhook: its rules cover them, its selectors select
// cm, its match conditions are the one MatchExpression writes, and the API
// server can verify the webhook's certificate. A condition the controller
// can't evaluate is reported as such, not assumed to match.
func Guards(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, cm *corev1.ConfigMap) status.Admission {
	i := slices.IndexFunc(vwc.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == WebhookName })
	if i < 0 {
		return status.Admission{Reason: fmt.Sprintf("the ValidatingWebhookConfiguration %s has no webhook %s", vwc.Name, WebhookName)}
	}
	w := vwc.Webhooks[i]
	if !coversConfigMapWrites(w.Rules) {
		return status.Admission{Reason: fmt.Sprintf("webhook %s: its rules do not cover CREATE and UPDATE of configmaps", WebhookName)}
	}
	if reason := selects(w.ObjectSelector, cm.Labels, "objectSelector", "the ConfigMap's labels"); reason != "" {
		return status.Admission{Reason: reason}
	}
	// A namespace always carries kubernetes.io/metadata.name; other
	// namespace labels are not read.
	if reason := selects(w.NamespaceSelector, map[string]string{corev1.LabelMetadataName: cm.Namespace}, "namespaceSelector", "the namespace's name label"); reason != "" {
		return status.Admission{Reason: reason}
	}
	want := MatchExpression(cm.Namespace, cm.Name)
	for _, c := range w.MatchConditions {
		if c.Expression != want {
			return status.Admission{Reason: fmt.Sprintf("webhook %s: match condition %q is not the one globalconfig writes (%s); the controller can't tell whether it selects %s/%s", WebhookName, c.Name, want, cm.Namespace, cm.Name)}
		}
	}
	if w.ClientConfig.CABundle == nil && vwc.Annotations["cert-manager.io/inject-ca-from"] == "" {
		return status.Admission{Reason: fmt.Sprintf("webhook %s has no caBundle yet: the API server can't verify it, and failurePolicy Ignore admits every edit", WebhookName)}
	}
	return status.Admission{Guarded: true}
}

// coversConfigMapWrites reports whether rules send CREATE and UPDATE of
// core v1 configmaps.
func coversConfigMapWrites(rules []admissionregistrationv1.RuleWithOperations) bool {
	covers := func(op admissionregistrationv1.OperationType) bool {
		return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
			return anyOf(r.Operations, op, admissionregistrationv1.OperationAll) && anyOf(r.APIGroups, "", "*") &&
				anyOf(r.APIVersions, "v1", "*") && anyOf(r.Resources, "configmaps", "*")
		})
	}
	return covers(admissionregistrationv1.Create) && covers(admissionregistrationv1.Update)
}

func anyOf[T comparable](list []T, want ...T) bool {
	return slices.ContainsFunc(list, func(v T) bool { return slices.Contains(want, v) })
}

// selects says why the label selector sel (named what) does not select
// set (described as of), or "" when it does.
func selects(sel *metav1.LabelSelector, set map[string]string, what, of string) string {
	if sel == nil {
		return ""
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return fmt.Sprintf("webhook %s: its %s does not parse: %v", WebhookName, what, err)
	}
	if !s.Matches(labels.Set(set)) {
		return fmt.Sprintf("webhook %s: its %s (%s) does not select %s, so the API server never sends it the edits", WebhookName, what, s, of)
	}
	return ""
}
