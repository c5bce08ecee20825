package harness

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebhookConfigName is the ValidatingWebhookConfiguration deploy/ creates
// and the controller keeps the caBundle of.
const WebhookConfigName = "globalconfig"

// CreateWebhookConfig registers the admission webhook at url the way
// deploy/base/webhook.yaml does (objectSelector on globalconfig.io/validate,
// failurePolicy Ignore), but by URL instead of a Service, and without a
// caBundle: the controller fills it in.
func (c *Cluster) CreateWebhookConfig(ctx context.Context, url string) error {
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	scope := admissionregistrationv1.NamespacedScope
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "global-config.globalconfig.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          &timeout,
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"globalconfig.io/validate": "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: &scope},
			}},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
		}},
	}
	_, err := c.Admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	return err
}
