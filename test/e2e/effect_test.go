package e2e

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/test/xds"
)

// gatewayLabels and gatewayVersion describe the test client's node.
var (
	gatewayLabels  = map[string]string{"istio": "ingressgateway"}
	gatewayVersion = "1.31.0"
)

// sidecarLabels are the labels of the test sidecar's workload, and
// inboundListener the listener whose HTTP chains take its inbound traffic.
var sidecarLabels = map[string]string{"app": "storefront"}

const inboundListener = "virtualInbound"

// appliesToSidecar tells whether Istio should apply o to the test
// sidecar's inbound listener.
func appliesToSidecar(o *envoyfilter.Object) bool {
	sel := o.Spec.GetWorkloadSelector().GetLabels()
	if o.Metadata.Namespace != ns && o.Metadata.Namespace != routeBackend.namespace || len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if sidecarLabels[k] != v {
			return false
		}
	}
	for _, cp := range o.Spec.GetConfigPatches() {
		if cp.GetMatch().GetContext() != networking.EnvoyFilter_SIDECAR_INBOUND {
			return false
		}
	}
	return true
}

// inboundInEffect returns nil when every patch of o, all HTTP connection
// manager merges, shows in every HTTP chain of the sidecar's inbound
// listener.
func inboundInEffect(o *envoyfilter.Object, s xds.Snapshot) error {
	hcms := s.HCMs(inboundListener)
	if len(hcms) == 0 {
		return fmt.Errorf("no HTTP chains in %s", inboundListener)
	}
	for i, cp := range o.Spec.GetConfigPatches() {
		if cp.GetApplyTo() != networking.EnvoyFilter_NETWORK_FILTER || cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_MERGE {
			return fmt.Errorf("%s patch %d: no sidecar effect check for %s %s", o.Metadata.Name, i, cp.GetPatch().GetOperation(), cp.GetApplyTo())
		}
		value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
		if err != nil {
			return err
		}
		want := &hcmv3.HttpConnectionManager{}
		if err := value.(*listenerv3.Filter).GetTypedConfig().UnmarshalTo(want); err != nil {
			return err
		}
		for j, hcm := range hcms {
			if !xds.Contains(hcm, want) {
				return fmt.Errorf("%s patch %d: HTTP chain %d of %s does not carry the merged fields", o.Metadata.Name, i, j, inboundListener)
			}
		}
	}
	return nil
}

// gatewayRoute is the RDS route configuration of the gateway's port 80.
const gatewayRoute = "http.80"

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
	// Version-scoped variants: the object applies when one of its patches
	// is for the gateway's version.
	versionMatch := false
	for _, cp := range o.Spec.GetConfigPatches() {
		if c := cp.GetMatch().GetContext(); c != networking.EnvoyFilter_GATEWAY && c != networking.EnvoyFilter_ANY {
			return false
		}
		versionMatch = versionMatch || forGatewayVersion(cp)
	}
	return versionMatch
}

// forGatewayVersion tells whether cp's proxyVersion, if any, matches the
// test gateway's Istio version.
func forGatewayVersion(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	pv := cp.GetMatch().GetProxy().GetProxyVersion()
	return pv == "" || regexp.MustCompile(pv).MatchString(gatewayVersion)
}

// inEffect returns nil when every patch of o shows in what the gateway
// received, or the first patch that doesn't.
func inEffect(o *envoyfilter.Object, s xds.Snapshot) error { return inEffectAmong(o, nil, s) }

// inEffectAmong is inEffect for o applied together with set. Istio merges a
// cluster's typed_extension_protocol_options entry by replacing it, so a
// later object of the set that patches one cluster by name (the tracing
// collector's HTTP/2 options) wins there over o's patch of every cluster:
// those clusters are not o's to show.
func inEffectAmong(o *envoyfilter.Object, set []*envoyfilter.Object, s xds.Snapshot) error {
	claimed := map[string]bool{}
	for _, other := range set {
		if other.Spec.GetPriority() <= o.Spec.GetPriority() {
			continue
		}
		for _, cp := range other.Spec.GetConfigPatches() {
			if name := cp.GetMatch().GetCluster().GetName(); cp.GetApplyTo() == networking.EnvoyFilter_CLUSTER && name != "" {
				claimed[name] = true
			}
		}
	}
	checked := 0
	for i, cp := range o.Spec.GetConfigPatches() {
		if !forGatewayVersion(cp) {
			continue // a variant for other Istio releases
		}
		err := patchInEffect(cp, s, claimed)
		if errors.Is(err, errNotHere) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s patch %d (%s %s): %w", o.Metadata.Name, i, cp.GetPatch().GetOperation(), cp.GetApplyTo(), err)
		}
		checked++
	}
	if checked == 0 {
		return fmt.Errorf("%s: none of its patches matches a port of the test gateway", o.Metadata.Name)
	}
	return nil
}

// errNotHere is a patch scoped to a port the test gateway doesn't have
// (the tls item's default ports are 443 and 8443; the gateway has 443).
var errNotHere = errors.New("no listener or route configuration of the patch's port")

// httpListeners are the gateway's listeners: the plaintext one and the
// one that terminates TLS.
var httpListeners = []string{listenerName, tlsListenerName}

// portOfRoute is the port in a gateway's RDS name: http.80,
// https.443.https.ingress.istio-system.
func portOfRoute(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// noneInEffect returns nil when no patch of o shows.
func noneInEffect(o *envoyfilter.Object, s xds.Snapshot) error {
	for i, cp := range o.Spec.GetConfigPatches() {
		if patchInEffect(cp, s, nil) == nil {
			return fmt.Errorf("%s patch %d (%s %s) is in effect", o.Metadata.Name, i, cp.GetPatch().GetOperation(), cp.GetApplyTo())
		}
	}
	return nil
}

func patchInEffect(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, s xds.Snapshot, claimed map[string]bool) error {
	value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
	if err != nil {
		return err
	}
	merge := cp.GetPatch().GetOperation() == networking.EnvoyFilter_Patch_MERGE
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_HTTP_FILTER:
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return err
		}
		want := value.(*hcmv3.HttpFilter)
		if merge {
			return httpFilterMerged(hcm, want)
		}
		return httpFilterBeforeRouter(hcm, want)
	case networking.EnvoyFilter_NETWORK_FILTER:
		if !merge {
			return networkFilterBeforeHCM(s, value.(*listenerv3.Filter))
		}
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return err
		}
		wantHCM := &hcmv3.HttpConnectionManager{}
		if err := value.(*listenerv3.Filter).GetTypedConfig().UnmarshalTo(wantHCM); err != nil {
			return err
		}
		if !xds.Contains(hcm, wantHCM) {
			return fmt.Errorf("the gateway's HCM does not carry the merged fields")
		}
		return nil
	case networking.EnvoyFilter_LISTENER:
		l, ok := s.Listeners[listenerName]
		if !ok || !xds.Contains(l, value) {
			return fmt.Errorf("listener %s does not carry the merged fields", listenerName)
		}
		return nil
	case networking.EnvoyFilter_LISTENER_FILTER:
		want := value.(*listenerv3.ListenerFilter)
		for _, name := range httpListeners {
			first := s.Listeners[name].GetListenerFilters()
			if len(first) == 0 || first[0].GetName() != want.GetName() || !sameTyped(first[0].GetTypedConfig(), want.GetTypedConfig()) {
				return fmt.Errorf("listener %s does not start with listener filter %s as configured", name, want.GetName())
			}
		}
		return nil
	case networking.EnvoyFilter_FILTER_CHAIN:
		return tlsChainsMerged(s, cp.GetMatch().GetListener().GetPortNumber(), value.(*listenerv3.FilterChain))
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		if port := cp.GetMatch().GetRouteConfiguration().GetPortNumber(); port != 0 {
			return routesOnPort(s, fmt.Sprint(port), value)
		}
		rc, ok := s.Routes[gatewayRoute]
		if !ok || !xds.Contains(rc, value) {
			return fmt.Errorf("route configuration %s does not carry the merged fields", gatewayRoute)
		}
		return nil
	case networking.EnvoyFilter_HTTP_ROUTE:
		rc, ok := s.Routes[gatewayRoute]
		if !ok {
			return fmt.Errorf("no route configuration %s", gatewayRoute)
		}
		n := 0
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if r.GetRoute() == nil {
					continue // redirects and direct responses aren't matched
				}
				n++
				if !xds.Contains(r, value) {
					return fmt.Errorf("route %q of %s does not carry the merged fields", r.GetName(), vh.GetName())
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no routes in %s to check", gatewayRoute)
		}
		return nil
	case networking.EnvoyFilter_CLUSTER:
		if name := cp.GetMatch().GetCluster().GetName(); name != "" {
			cl, ok := s.Clusters[name]
			if !ok {
				return fmt.Errorf("no cluster %q", name)
			}
			if !xds.Contains(cl, value) {
				return fmt.Errorf("cluster %q does not carry the merged fields", name)
			}
			return nil
		}
		n := 0
		for name, cl := range s.Clusters {
			if !strings.HasPrefix(name, "outbound|") || claimed[name] {
				continue
			}
			n++
			if !xds.Contains(cl, value) {
				return fmt.Errorf("cluster %q does not carry the merged fields", name)
			}
		}
		if n == 0 {
			return fmt.Errorf("no outbound clusters to check")
		}
		return nil
	}
	return fmt.Errorf("no effect check for %s", cp.GetApplyTo())
}

// networkFilterBeforeHCM checks that every HTTP filter chain of the
// gateway has want, as configured, before its HTTP connection manager.
func networkFilterBeforeHCM(s xds.Snapshot, want *listenerv3.Filter) error {
	for _, name := range httpListeners {
		for i, fc := range s.Listeners[name].GetFilterChains() {
			at, hcm := -1, -1
			for j, f := range fc.GetFilters() {
				switch f.GetName() {
				case want.GetName():
					if !sameTyped(f.GetTypedConfig(), want.GetTypedConfig()) {
						return fmt.Errorf("listener %s chain %d has %s with another config", name, i, want.GetName())
					}
					at = j
				case envoyfilter.HTTPConnectionManager:
					hcm = j
				}
			}
			if hcm >= 0 && (at < 0 || at > hcm) {
				return fmt.Errorf("listener %s chain %d has no %s before its HTTP connection manager", name, i, want.GetName())
			}
		}
	}
	return nil
}

// tlsChainsMerged checks a FILTER_CHAIN merge scoped to port: every HTTP
// filter chain of the listener on port carries the merged fields and
// still has Istio's certificate (from the Secret, over SDS), and the
// plaintext listener got no transport socket.
func tlsChainsMerged(s xds.Snapshot, port uint32, want *listenerv3.FilterChain) error {
	l, ok := s.Listeners[fmt.Sprintf("0.0.0.0_%d", port)]
	if !ok {
		return errNotHere
	}
	n := 0
	for i, fc := range l.GetFilterChains() {
		if _, err := xds.HCMOf(fc); err != nil {
			continue
		}
		n++
		if !xds.Contains(fc, want) {
			return fmt.Errorf("listener %s chain %d does not carry the merged fields", l.GetName(), i)
		}
		tls := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(tls); err != nil {
			return fmt.Errorf("listener %s chain %d: %w", l.GetName(), i, err)
		}
		if len(tls.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()) == 0 {
			return fmt.Errorf("listener %s chain %d lost its certificate", l.GetName(), i)
		}
	}
	if n == 0 {
		return fmt.Errorf("listener %s has no HTTP filter chain", l.GetName())
	}
	if port != gatewayPort {
		for i, fc := range s.Listeners[listenerName].GetFilterChains() {
			if fc.GetTransportSocket() != nil {
				return fmt.Errorf("plaintext listener %s chain %d got a transport socket", listenerName, i)
			}
		}
	}
	return nil
}

// routesOnPort checks a ROUTE_CONFIGURATION merge scoped to port: every
// route configuration of that port carries it, and the plaintext port's
// does not (an object may patch several TLS ports with the same value).
func routesOnPort(s xds.Snapshot, port string, want proto.Message) error {
	n := 0
	for name, rc := range s.Routes {
		if portOfRoute(name) != port {
			continue
		}
		if !xds.Contains(rc, want) {
			return fmt.Errorf("route configuration %s does not carry the merged fields", name)
		}
		n++
	}
	if n == 0 {
		return errNotHere
	}
	if port != fmt.Sprint(gatewayPort) && xds.Contains(s.Routes[gatewayRoute], want) {
		return fmt.Errorf("the plaintext route configuration %s carries the merged fields too", gatewayRoute)
	}
	return nil
}

// sameMessage tells whether a and b hold the same values, comparing the
// messages packed in Anys rather than their bytes: istiod re-encodes nested
// typed configs, and the encoding of equal messages may differ.
func sameMessage(a, b proto.Message) bool { return xds.Contains(a, b) && xds.Contains(b, a) }

// sameTyped tells whether two typed configs hold equal messages.
func sameTyped(a, b *anypb.Any) bool {
	am, err1 := a.UnmarshalNew()
	bm, err2 := b.UnmarshalNew()
	return err1 == nil && err2 == nil && sameMessage(am, bm)
}

// httpFilterMerged checks that the filter want names carries want's config.
func httpFilterMerged(hcm *hcmv3.HttpConnectionManager, want *hcmv3.HttpFilter) error {
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == want.GetName() {
			if !xds.Contains(f, want) {
				return fmt.Errorf("filter %s does not carry the merged fields", want.GetName())
			}
			return nil
		}
	}
	return fmt.Errorf("no filter %s", want.GetName())
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
			if err1 != nil || err2 != nil || !sameMessage(got, exp) {
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

// checker returns a check of one value at the gateway against the value
// wanted, compared as printed.
func checker(t *testing.T) func(what string, got, want any) {
	return func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v at the gateway, want %v", what, got, want)
		}
	}
}

// eachOutboundCluster calls f for every outbound cluster of s with its
// HTTP protocol options, and fails t when there is none.
func eachOutboundCluster(t *testing.T, s xds.Snapshot, f func(name string, c *clusterv3.Cluster, opts *httpv3.HttpProtocolOptions)) {
	t.Helper()
	n := 0
	for name, c := range s.Clusters {
		if !strings.HasPrefix(name, "outbound|") {
			continue
		}
		n++
		opts := &httpv3.HttpProtocolOptions{}
		if err := c.GetTypedExtensionProtocolOptions()[envoyfilter.HTTPProtocolOptionsKey].UnmarshalTo(opts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f(name, c, opts)
	}
	if n == 0 {
		t.Error("no outbound clusters")
	}
}

func yamlUnmarshal(data []byte, v any) error { return yaml.Unmarshal(data, v) }
