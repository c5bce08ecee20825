package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/test/xds"
)

// What istiod gives the test sidecar for its workload (see createWorkload):
// in virtualInbound, HTTP chains for port 8080 whose connection manager
// carries the route configuration inbound|8080|| inline, and the cluster
// of that name; outbound, the HTTP listener 0.0.0.0_8080 with RDS "8080"
// and an outbound cluster for every Service port of the mesh.
var (
	inboundCluster    = fmt.Sprintf("inbound|%d||", storefrontPort)
	outboundListener  = fmt.Sprintf("0.0.0.0_%d", storefrontPort)
	outboundRoute     = fmt.Sprint(storefrontPort)
	storefrontCluster = envoyfilter.OutboundCluster(storefront+"."+routeBackend.namespace+".svc.cluster.local", storefrontPort)
)

// namedHCM is one HTTP connection manager and where it was found.
type namedHCM struct {
	where string
	hcm   *hcmv3.HttpConnectionManager
}

func hcmsOf(s xds.Snapshot, listeners ...string) []namedHCM {
	var out []namedHCM
	for _, name := range listeners {
		for i, fc := range s.Listeners[name].GetFilterChains() {
			if hcm, err := xds.HCMOf(fc); err == nil {
				out = append(out, namedHCM{fmt.Sprintf("%s chain %d (%s)", name, i, fc.GetName()), hcm})
			}
		}
	}
	return out
}

// sidecarInbound returns the HTTP connection managers of the sidecar's
// inbound listener: the workload's port 8080 and the catch-all chains.
func sidecarInbound(s xds.Snapshot) []namedHCM { return hcmsOf(s, inboundListener) }

// sidecarOutbound returns the HTTP connection managers of every other
// listener of the sidecar: its outbound listeners.
func sidecarOutbound(s xds.Snapshot) []namedHCM {
	var names []string
	for name := range s.Listeners {
		if name != inboundListener {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return hcmsOf(s, names...)
}

// gatewayHCMs returns the HTTP connection managers of the gateway's HTTP
// and HTTPS listeners.
func gatewayHCMs(s xds.Snapshot) []namedHCM { return hcmsOf(s, httpListeners...) }

// sidecarReady checks that the sidecar has what its workload gives it.
func sidecarReady(s xds.Snapshot) error {
	found := false
	for _, fc := range s.Listeners[inboundListener].GetFilterChains() {
		hcm, err := xds.HCMOf(fc)
		if err == nil && fc.GetFilterChainMatch().GetDestinationPort().GetValue() == storefrontPort && hcm.GetRouteConfig().GetName() == inboundCluster {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("no HTTP chain for port %d in %s", storefrontPort, inboundListener)
	}
	out := hcmsOf(s, outboundListener)
	if len(out) == 0 || out[0].hcm.GetRds().GetRouteConfigName() != outboundRoute {
		return fmt.Errorf("no outbound HTTP listener %s with RDS %q", outboundListener, outboundRoute)
	}
	if _, ok := s.Routes[outboundRoute]; !ok {
		return fmt.Errorf("no route configuration %q", outboundRoute)
	}
	for _, name := range []string{inboundCluster, storefrontCluster} {
		if _, ok := s.Clusters[name]; !ok {
			return fmt.Errorf("no cluster %s", name)
		}
	}
	return nil
}

// The document of TestSidecarContexts: one item per context, each with a
// value no Istio default has.
const (
	ctxGzipMinLength  = 2345
	ctxConnectTimeout = 7 * time.Second
	ctxAccessLogPath  = "/var/lib/istio/data/globalconfig-e2e-outbound.log"
	ctxIdleTimeout    = 123 * time.Second
	ctxServerName     = "e2e-gateway-only"
	ctxGatewayHeader  = "x-e2e-gateway-only"
)

var contextsDoc = fmt.Sprintf(`gzip:
  target: {context: SIDECAR_INBOUND}
  minContentLength: %d
upstream:
  target: {context: SIDECAR_OUTBOUND}
  connectTimeout: %s
accessLog:
  target: {context: SIDECAR_OUTBOUND}
  path: %s
downstream:
  target: {context: ANY}
  idleTimeout: %s
headers:
  target: {context: GATEWAY}
  server: {mode: overwrite, name: %s}
  responseHeaders:
    %s: "yes"
`, ctxGzipMinLength, ctxConnectTimeout, ctxAccessLogPath, ctxIdleTimeout, ctxServerName, ctxGatewayHeader)

// gzipAt returns the gzip compressor of hcm and its place relative to the
// router, or nil.
func gzipAt(hcm *hcmv3.HttpConnectionManager) (*compressorv3.Compressor, bool, error) {
	at, router := -1, -1
	var c *compressorv3.Compressor
	for i, f := range hcm.GetHttpFilters() {
		switch f.GetName() {
		case envoyfilter.Compressor + ".gzip":
			at = i
			c = &compressorv3.Compressor{}
			if err := f.GetTypedConfig().UnmarshalTo(c); err != nil {
				return nil, false, err
			}
		case envoyfilter.Router:
			router = i
		}
	}
	return c, at >= 0 && at < router, nil
}

// accessLogPaths lists the paths of hcm's file access logs.
func accessLogPaths(hcm *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, l := range hcm.GetAccessLog() {
		f := &filev3.FileAccessLog{}
		if l.GetName() == envoyfilter.FileAccessLog && l.GetTypedConfig().UnmarshalTo(f) == nil {
			out = append(out, f.GetPath())
		}
	}
	return out
}

func idleTimeout(hcm *hcmv3.HttpConnectionManager) time.Duration {
	return hcm.GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration()
}

func hasResponseHeader(rc *routev3.RouteConfiguration, name string) bool {
	return slices.ContainsFunc(rc.GetResponseHeadersToAdd(), func(h *corev3.HeaderValueOption) bool { return h.GetHeader().GetKey() == name })
}

// each returns nil when check passes for every HCM of hcms, and there is
// at least one.
func each(what string, hcms []namedHCM, check func(*hcmv3.HttpConnectionManager) error) error {
	if len(hcms) == 0 {
		return fmt.Errorf("no HTTP connection managers %s", what)
	}
	for _, h := range hcms {
		if err := check(h.hcm); err != nil {
			return fmt.Errorf("%s: %w", h.where, err)
		}
	}
	return nil
}

// carrying names the HCMs of hcms for which has holds.
func carrying(hcms []namedHCM, has func(*hcmv3.HttpConnectionManager) bool) []string {
	var out []string
	for _, h := range hcms {
		if has(h.hcm) {
			out = append(out, h.where)
		}
	}
	return out
}

// clustersWhere returns the names of the clusters of s that sel picks.
func clustersWhere(s xds.Snapshot, sel func(name string, c *clusterv3.Cluster) bool) []string {
	var out []string
	for name, c := range s.Clusters {
		if sel(name, c) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func isInboundCluster(name string) bool {
	return strings.HasPrefix(name, "inbound|") || name == "InboundPassthroughCluster"
}

func hasConnectTimeout(c *clusterv3.Cluster) bool {
	return c.GetConnectTimeout().AsDuration() == ctxConnectTimeout
}

// gzipInbound: the compressor, as configured, before the router in every
// HTTP chain of the sidecar's inbound listener.
func gzipInbound(s xds.Snapshot) error {
	if err := sidecarReady(s); err != nil {
		return err
	}
	return each("inbound", sidecarInbound(s), func(hcm *hcmv3.HttpConnectionManager) error {
		c, beforeRouter, err := gzipAt(hcm)
		switch {
		case err != nil:
			return err
		case c == nil:
			return fmt.Errorf("no gzip compressor")
		case !beforeRouter:
			return fmt.Errorf("the gzip compressor is not before the router")
		case c.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue() != ctxGzipMinLength:
			return fmt.Errorf("gzip min_content_length %d", c.GetResponseDirectionConfig().GetCommonConfig().GetMinContentLength().GetValue())
		}
		return nil
	})
}

// upstreamOutbound: the connect timeout on every outbound cluster of s.
func upstreamOutbound(s xds.Snapshot) error {
	if _, ok := s.Clusters[storefrontCluster]; !ok {
		return fmt.Errorf("no cluster %s", storefrontCluster)
	}
	for name, c := range s.Clusters {
		if strings.HasPrefix(name, "outbound|") && !hasConnectTimeout(c) {
			return fmt.Errorf("cluster %s: connect_timeout %v", name, c.GetConnectTimeout().AsDuration())
		}
	}
	return nil
}

// accessLogOutbound: the file access log in every outbound HTTP
// connection manager of the sidecar.
func accessLogOutbound(s xds.Snapshot) error {
	if err := sidecarReady(s); err != nil {
		return err
	}
	return each("outbound", sidecarOutbound(s), func(hcm *hcmv3.HttpConnectionManager) error {
		if !slices.Contains(accessLogPaths(hcm), ctxAccessLogPath) {
			return fmt.Errorf("file access logs %v", accessLogPaths(hcm))
		}
		return nil
	})
}

func idleTimeoutSet(hcm *hcmv3.HttpConnectionManager) error {
	if got := idleTimeout(hcm); got != ctxIdleTimeout {
		return fmt.Errorf("idle_timeout %v", got)
	}
	return nil
}

// headersAtGateway: the server name in every gateway HCM and the response
// header in its plaintext route configuration.
func headersAtGateway(s xds.Snapshot) error {
	if err := each("at the gateway", gatewayHCMs(s), func(hcm *hcmv3.HttpConnectionManager) error {
		if hcm.GetServerName() != ctxServerName {
			return fmt.Errorf("server_name %q", hcm.GetServerName())
		}
		return nil
	}); err != nil {
		return err
	}
	if !hasResponseHeader(s.Routes[gatewayRoute], ctxGatewayHeader) {
		return fmt.Errorf("route configuration %s has no response header %s", gatewayRoute, ctxGatewayHeader)
	}
	return nil
}

// sidecarRoutes returns every route configuration of the sidecar: the
// inline ones of its inbound chains and those it received over RDS.
func sidecarRoutes(s xds.Snapshot) map[string]*routev3.RouteConfiguration {
	out := map[string]*routev3.RouteConfiguration{}
	for _, h := range sidecarInbound(s) {
		if rc := h.hcm.GetRouteConfig(); rc != nil {
			out[h.where+" inline "+rc.GetName()] = rc
		}
	}
	for name, rc := range s.Routes {
		out["RDS "+name] = rc
	}
	return out
}

// anySentinel applies an EnvoyFilter of context ANY that sets every HCM's
// via header and removes a request header in every route configuration,
// and waits for both at the gateway and the sidecar. What the proxies hold
// then reflects every EnvoyFilter written before it: istiod builds each
// push from all the EnvoyFilters it has seen, in order, and sends
// clusters before listeners before routes. No item sets via.
func anySentinel(ctx context.Context, t *testing.T) {
	t.Helper()
	const name = "e2e-sentinel-any"
	hcmPatch, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{Via: name})
	if err != nil {
		t.Fatal(err)
	}
	rcPatch := envoyfilter.MergeRouteConfigurations(&routev3.RouteConfiguration{RequestHeadersToRemove: []string{"x-" + name}})
	target := envoyfilter.DefaultTarget()
	target.Context = envoyfilter.ContextAny
	obj, err := envoyfilter.NewObject(name, envoyfilter.Placement{Priority: -100}, target, []envoyfilter.Patch{hcmPatch, rcPatch})
	if err != nil {
		t.Fatal(err)
	}
	obj.Metadata.Name = name
	obj.Metadata.Labels = map[string]string{"app.kubernetes.io/name": name}
	y, err := obj.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Kubectl(ctx, y, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "envoyfilter", "-n", ns, name)
	})
	seen := func(hcms []namedHCM, routes map[string]*routev3.RouteConfiguration) error {
		if err := each("", hcms, func(hcm *hcmv3.HttpConnectionManager) error {
			if hcm.GetVia() != name {
				return fmt.Errorf("via %q", hcm.GetVia())
			}
			return nil
		}); err != nil {
			return err
		}
		for where, rc := range routes {
			if !slices.Contains(rc.GetRequestHeadersToRemove(), "x-"+name) {
				return fmt.Errorf("route configuration %s: no sentinel", where)
			}
		}
		return nil
	}
	waitEffect(ctx, t, "sentinel at the gateway", func(s xds.Snapshot) error {
		return seen(gatewayHCMs(s), map[string]*routev3.RouteConfiguration{gatewayRoute: s.Routes[gatewayRoute]})
	})
	waitOn(ctx, t, sidecar, "sentinel at the sidecar", func(s xds.Snapshot) error {
		return seen(append(sidecarInbound(s), sidecarOutbound(s)...), sidecarRoutes(s))
	})
}

// One document, one item per context, through the controller: each item
// shows exactly where its context says, on the gateway and on a sidecar
// with a real workload (inbound chains and clusters for its port, outbound
// HTTP listeners, routes and clusters for the mesh's services), and
// nowhere else.
func TestSidecarContexts(t *testing.T) {
	ctx := setup(t)
	if err := sidecarReady(sidecar.Snapshot()); err != nil {
		t.Fatalf("sidecar: %v", err)
	}
	putConfig(ctx, t, contextsDoc)
	startController(ctx, t)

	// Where each item must show.
	waitOn(ctx, t, sidecar, "gzip (SIDECAR_INBOUND) in every inbound HTTP chain", gzipInbound)
	waitOn(ctx, t, sidecar, "upstream (SIDECAR_OUTBOUND) on every outbound cluster", upstreamOutbound)
	waitOn(ctx, t, sidecar, "accessLog (SIDECAR_OUTBOUND) in every outbound HTTP connection manager", accessLogOutbound)
	waitOn(ctx, t, sidecar, "downstream (ANY) in every sidecar HTTP connection manager", func(s xds.Snapshot) error {
		return each("at the sidecar", append(sidecarInbound(s), sidecarOutbound(s)...), idleTimeoutSet)
	})
	waitEffect(ctx, t, "downstream (ANY) at the gateway", func(s xds.Snapshot) error {
		return each("at the gateway", gatewayHCMs(s), idleTimeoutSet)
	})
	waitEffect(ctx, t, "headers (GATEWAY) at the gateway", headersAtGateway)

	// Every object is in istiod's hands now; after the sentinel, what the
	// proxies hold is final, and what is absent stays absent.
	anySentinel(ctx, t)
	gw, sc := gateway.Snapshot(), sidecar.Snapshot()
	in, out, gwh := sidecarInbound(sc), sidecarOutbound(sc), gatewayHCMs(gw)
	withGzip := func(hcm *hcmv3.HttpConnectionManager) bool { c, _, _ := gzipAt(hcm); return c != nil }
	withLog := func(hcm *hcmv3.HttpConnectionManager) bool {
		return slices.Contains(accessLogPaths(hcm), ctxAccessLogPath)
	}
	withServer := func(hcm *hcmv3.HttpConnectionManager) bool { return hcm.GetServerName() == ctxServerName }
	timed := func(_ string, c *clusterv3.Cluster) bool { return hasConnectTimeout(c) }

	if got := carrying(out, withGzip); len(got) > 0 {
		t.Errorf("gzip (SIDECAR_INBOUND) reached the sidecar's outbound HTTP connection managers: %v", got)
	}
	if got := carrying(gwh, withGzip); len(got) > 0 {
		t.Errorf("gzip (SIDECAR_INBOUND) reached the gateway: %v", got)
	}
	inboundClusters := clustersWhere(sc, func(name string, _ *clusterv3.Cluster) bool { return isInboundCluster(name) })
	if !slices.Contains(inboundClusters, inboundCluster) {
		t.Errorf("no inbound cluster %s among %v", inboundCluster, inboundClusters)
	}
	if got := clustersWhere(sc, func(name string, c *clusterv3.Cluster) bool { return isInboundCluster(name) && hasConnectTimeout(c) }); len(got) > 0 {
		t.Errorf("upstream (SIDECAR_OUTBOUND) reached the sidecar's inbound clusters: %v", got)
	}
	if got := clustersWhere(gw, timed); len(got) > 0 {
		t.Errorf("upstream (SIDECAR_OUTBOUND) reached the gateway's clusters: %v", got)
	}
	if got := carrying(in, withLog); len(got) > 0 {
		t.Errorf("accessLog (SIDECAR_OUTBOUND) reached the sidecar's inbound HTTP chains: %v", got)
	}
	if got := carrying(gwh, withLog); len(got) > 0 {
		t.Errorf("accessLog (SIDECAR_OUTBOUND) reached the gateway: %v", got)
	}
	if got := carrying(append(in, out...), withServer); len(got) > 0 {
		t.Errorf("headers (GATEWAY) reached the sidecar's HTTP connection managers: %v", got)
	}
	routes := sidecarRoutes(sc)
	if _, ok := routes["RDS "+outboundRoute]; !ok {
		t.Errorf("no outbound route configuration %q at the sidecar", outboundRoute)
	}
	for where, rc := range routes {
		if hasResponseHeader(rc, ctxGatewayHeader) {
			t.Errorf("headers (GATEWAY) reached the sidecar's route configuration %s", where)
		}
	}

	// What was seen where.
	summary := func(hcms []namedHCM) string {
		var b strings.Builder
		for _, h := range hcms {
			c, _, _ := gzipAt(h.hcm)
			fmt.Fprintf(&b, "\n  %s: gzip=%t accessLog=%v idle_timeout=%v server_name=%q", h.where, c != nil, accessLogPaths(h.hcm), idleTimeout(h.hcm), h.hcm.GetServerName())
		}
		return b.String()
	}
	timeouts := func(s xds.Snapshot, names ...string) string {
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s=%v", n, s.Clusters[n].GetConnectTimeout().AsDuration()))
		}
		return strings.Join(parts, " ")
	}
	t.Logf("gateway:%s\n  clusters with connect_timeout %v: %v; %s", summary(gwh), ctxConnectTimeout, clustersWhere(gw, timed), timeouts(gw, storefrontCluster))
	t.Logf("sidecar inbound:%s\n  inbound clusters: %s", summary(in), timeouts(sc, inboundClusters...))
	t.Logf("sidecar outbound:%s\n  outbound clusters with connect_timeout %v: %d of %d (%s)", summary(out), ctxConnectTimeout,
		len(clustersWhere(sc, func(n string, c *clusterv3.Cluster) bool {
			return strings.HasPrefix(n, "outbound|") && hasConnectTimeout(c)
		})),
		len(clustersWhere(sc, func(n string, _ *clusterv3.Cluster) bool { return strings.HasPrefix(n, "outbound|") })),
		timeouts(sc, storefrontCluster, "PassthroughCluster", "BlackHoleCluster"))
	t.Logf("route configurations: gateway %s response header %s=%t; sidecar %d (inline inbound and RDS), none with it",
		gatewayRoute, ctxGatewayHeader, hasResponseHeader(gw.Routes[gatewayRoute], ctxGatewayHeader), len(routes))
}
