package webhook

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/envoycheck"
)

// A denial names the group of proxies Envoy refused, so that a user whose
// items target some workloads sees which, and the groups it accepted are
// not mentioned.
func TestRefusalNamesTheGroup(t *testing.T) {
	rep := &envoycheck.Report{Envoy: "1.40.0", Istio: "1.32.0", Results: []envoycheck.Result{
		{Context: "SIDECAR_INBOUND", Selector: map[string]string{"app": "billing"}, Patches: 2},
		{Context: "SIDECAR_INBOUND", Namespace: "shop", Selector: map[string]string{"tier": "web", "app": "storefront"}, Patches: 3,
			Rejected: "Original IP detection extensions and xff_num_trusted_hops may not be mixed"},
	}}
	got := refusal(rep, nil)
	want := "\nSIDECAR_INBOUND proxies in namespace shop labelled app=storefront,tier=web configuration: \"Original IP detection extensions and xff_num_trusted_hops may not be mixed\"\nno item is refused on its own: only their combination"
	if !strings.HasSuffix(got, want) || strings.Contains(got, "billing") {
		t.Errorf("refusal:\n%s\nwant it to end:%s", got, want)
	}
}
