package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/test/xds"
)

// gatewayLabels and gatewayVersion describe the test client's node.
var (
	gatewayLabels  = map[string]string{"istio": "ingressgateway"}
	gatewayVersion = "1.31.0"
)

// readObjects reads a YAML stream of EnvoyFilters.
func readObjects(t testing.TB, path string) []*envoyfilter.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, data)
}

func parseObjects(t testing.TB, data []byte) []*envoyfilter.Object {
	t.Helper()
	var out []*envoyfilter.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		o := &envoyfilter.Object{}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatalf("parse EnvoyFilter: %v", err)
		}
		out = append(out, o)
	}
	return out
}

// appliesToGateway tells whether Istio should apply o to the test gateway.
func appliesToGateway(o *envoyfilter.Object) bool {
	if o.Metadata.Namespace != ns {
		return false
	}
	for k, v := range o.Spec.GetWorkloadSelector().GetLabels() {
		if gatewayLabels[k] != v {
			return false
		}
	}
	for _, cp := range o.Spec.GetConfigPatches() {
		m := cp.GetMatch()
		if c := m.GetContext(); c != networking.EnvoyFilter_GATEWAY && c != networking.EnvoyFilter_ANY {
			return false
		}
		if pv := m.GetProxy().GetProxyVersion(); pv != "" && !regexp.MustCompile(pv).MatchString(gatewayVersion) {
			return false
		}
	}
	return true
}

// inEffect returns nil when every patch of o shows in what the gateway
// received, or the first patch that doesn't.
func inEffect(o *envoyfilter.Object, s xds.Snapshot) error {
	for i, cp := range o.Spec.GetConfigPatches() {
		if err := patchInEffect(cp, s); err != nil {
			return fmt.Errorf("%s patch %d (%s %s): %w", o.Metadata.Name, i, cp.GetPatch().GetOperation(), cp.GetApplyTo(), err)
		}
	}
	return nil
}

// noneInEffect returns nil when no patch of o shows.
func noneInEffect(o *envoyfilter.Object, s xds.Snapshot) error {
	for i, cp := range o.Spec.GetConfigPatches() {
		if patchInEffect(cp, s) == nil {
			return fmt.Errorf("%s patch %d (%s %s) is in effect", o.Metadata.Name, i, cp.GetPatch().GetOperation(), cp.GetApplyTo())
		}
	}
	return nil
}

func patchInEffect(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, s xds.Snapshot) error {
	value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
	if err != nil {
		return err
	}
	switch want := value.(type) {
	case *hcmv3.HttpFilter:
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return err
		}
		return httpFilterBeforeRouter(hcm, want)
	case *listenerv3.Filter:
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return err
		}
		wantHCM := &hcmv3.HttpConnectionManager{}
		if err := want.GetTypedConfig().UnmarshalTo(wantHCM); err != nil {
			return err
		}
		if !xds.Contains(hcm, wantHCM) {
			return fmt.Errorf("the gateway's HCM does not carry the merged fields")
		}
		return nil
	default:
		if cp.GetApplyTo() != networking.EnvoyFilter_CLUSTER {
			return fmt.Errorf("no effect check for %s", cp.GetApplyTo())
		}
		name := cp.GetMatch().GetCluster().GetName()
		cl, ok := s.Clusters[name]
		if !ok {
			return fmt.Errorf("no cluster %q", name)
		}
		if !xds.Contains(cl, value) {
			return fmt.Errorf("cluster %q does not carry the merged fields", name)
		}
		return nil
	}
}

// httpFilterBeforeRouter checks that want sits before the router with the
// same typed config.
func httpFilterBeforeRouter(hcm *hcmv3.HttpConnectionManager, want *hcmv3.HttpFilter) error {
	at, router := -1, -1
	for i, f := range hcm.GetHttpFilters() {
		switch f.GetName() {
		case want.GetName():
			at = i
			got, err1 := f.GetTypedConfig().UnmarshalNew()
			exp, err2 := want.GetTypedConfig().UnmarshalNew()
			if err1 != nil || err2 != nil || !proto.Equal(got, exp) {
				return fmt.Errorf("filter %s is there with another config", want.GetName())
			}
		case envoyfilter.Router:
			router = i
		}
	}
	switch {
	case at < 0:
		return fmt.Errorf("no filter %s in the HTTP filter chain", want.GetName())
	case router < 0 || at > router:
		return fmt.Errorf("filter %s is not before the router", want.GetName())
	}
	return nil
}

func yamlUnmarshal(data []byte, v any) error { return yaml.Unmarshal(data, v) }
