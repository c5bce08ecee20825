package harness

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/webhook"
)

// WebhookConfigName is the ValidatingWebhookConfiguration deploy/ creates
// and the controller keeps the caBundle of.
const WebhookConfigName = "globalconfig"

// CreateWebhookConfig registers the admission webhook at url for the
// ConfigMap namespace/name the way deploy/base/webhook.yaml does (a match
// condition on the name, failurePolicy Ignore), but by URL instead of a
// Service, and without a caBundle: the controller fills it in.
func (c *Cluster) CreateWebhookConfig(ctx context.Context, url, namespace, name string) error {
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	scope := admissionregistrationv1.NamespacedScope
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    webhook.WebhookName,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          &timeout,
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "the-global-configmap", Expression: webhook.MatchExpression(namespace, name),
			}},
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
