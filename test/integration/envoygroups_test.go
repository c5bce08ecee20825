package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/webhook"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The webhook with `run --envoy` models proxies as validation does:
// clientIP.trustedCIDRs and headers.xff.trustedHops, which Envoy refuses
// on one connection manager, are admitted when their targets can never
// reach one proxy (disjoint selectors, disjoint namespaces), each loaded
// into Envoy beside gzip on every sidecar and accepted; on targets that
// meet, the edit is denied, naming both keys.
func TestAdmissionWebhookEnvoyGroups(t *testing.T) {
	f := setup(t)
	real, err := harness.EnvoyBinary(f.ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}
	const items = `target: {context: SIDECAR_INBOUND}
gzip: {}
clientIP:
  target: {%s}
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  target: {%s}
  xff: {trustedHops: 1}
`
	apart := []string{
		fmt.Sprintf(items, "selector: {app: storefront}", "selector: {app: billing}"),
		fmt.Sprintf(items, "namespace: default", "namespace: kube-public"),
	}
	together := fmt.Sprintf(items, "selector: {app: storefront}", "namespace: default")

	ctl := startEnvoyWebhook(t, f, "gzip: {}\n", real.Path)
	accepted := func() float64 {
		return f.metrics(ctl)[`globalconfig_webhook_envoy_checks_total{result="`+webhook.EnvoyAccepted+`"}`]
	}
	for _, doc := range apart {
		before := accepted()
		if out, err := applyManifest(f, cmName, doc); err != nil {
			t.Errorf("%s\ndenied: %v\n%s", doc, err, out)
		}
		if got := accepted(); got != before+1 {
			t.Errorf("%s\nEnvoy accepted %v edits, want one: was it loaded?", doc, got-before)
		}
	}
	out, err := applyManifest(f, cmName, together)
	if err == nil || !strings.Contains(err.Error(), "clientIP.trustedCIDRs: can't be beside headers.xff.trustedHops") {
		t.Errorf("%s\nadmitted or denied for another reason: %v\n%s", together, err, out)
	}
	if m := f.metrics(ctl); m[`globalconfig_webhook_envoy_checks_total{result="`+webhook.EnvoyRejected+`"}`] != 0 || m[`globalconfig_webhook_envoy_checks_total{result="`+webhook.EnvoyFailed+`"}`] != 0 {
		t.Errorf("Envoy check metrics: %v", m)
	}
}
