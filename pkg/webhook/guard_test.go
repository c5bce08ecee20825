package webhook

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// guarding is a webhook configuration as deploy/base writes it, with a
// caBundle.
func guarding() *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "globalconfig"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: WebhookName,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "the-global-configmap", Expression: MatchExpression("istio-system", "global-config")}},
			ClientConfig:    admissionregistrationv1.WebhookClientConfig{CABundle: []byte("ca")},
		}},
	}
}

func TestGuards(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "global-config", Labels: map[string]string{"team": "edge"}}}
	for _, c := range []struct {
		name   string
		change func(*admissionregistrationv1.ValidatingWebhookConfiguration)
		want   string // "" for guarded
	}{
		{"as deployed", func(*admissionregistrationv1.ValidatingWebhookConfiguration) {}, ""},
		{"no match condition, all configmaps", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) { v.Webhooks[0].MatchConditions = nil }, ""},
		{"the old label selector", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"globalconfig.io/validate": "true"}}
		}, "objectSelector (globalconfig.io/validate=true) does not select the ConfigMap's labels"},
		{"a namespace selector for another namespace", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "other"}}
		}, "namespaceSelector"},
		{"a condition for another name", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].MatchConditions[0].Expression = MatchExpression("istio-system", "other")
		}, "can't tell whether it selects istio-system/global-config"},
		{"UPDATE not covered", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
		}, "rules do not cover CREATE and UPDATE"},
		{"every operation and resource", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
			v.Webhooks[0].Rules[0].Resources = []string{"*"}
		}, ""},
		{"no caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].ClientConfig.CABundle = nil
		}, "no caBundle"},
		{"no caBundle, injected by cert-manager", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].ClientConfig.CABundle = nil
			v.Annotations = map[string]string{"cert-manager.io/inject-ca-from": "istio-system/globalconfig-webhook"}
		}, ""},
		{"another webhook", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v.Webhooks[0].Name = "other.example.com"
		}, "has no webhook " + WebhookName},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := guarding()
			c.change(v)
			got := Guards(v, cm)
			if got.Guarded != (c.want == "") || !strings.Contains(got.Reason, c.want) || (c.want == "" && got.Reason != "") {
				t.Errorf("%+v, want guarded=%v with %q", got, c.want == "", c.want)
			}
		})
	}
}
