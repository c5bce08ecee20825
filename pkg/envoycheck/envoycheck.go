// Package envoycheck asks a real Envoy whether it would load what
// globalconfig renders. For each group of proxies the patches reach, it
// builds a small representative configuration of the shape istiod gives
// such a proxy (an HTTP listener on 8080, a TLS listener on every other
// port a patch names, HTTP connection managers with inline routes to an
// outbound cluster, that cluster and every outbound cluster a patch
// names), applies the patches that reach the binary's release the way
// istiod applies EnvoyFilters, and loads the result with `envoy --mode validate`. A refusal names Envoy's
// message and the items whose patches Envoy refuses alone.
//
// Proxies are modelled as validation models them: a group is a context
// (gateway, sidecar inbound, sidecar outbound) and a largest set of the
// EnvoyFilters' targets (namespace, workload selector) that can all reach
// one proxy by items.Overlap, the rule validation's cross-item checks use;
// proxy versions are the binary's own release, whose patches alone are
// loaded. Patches that can never meet on one proxy are never loaded
// together, and every set that can meet is. A document whose items share
// one target is one group per context: one Envoy run each.
//
// Its limit: the representative configuration is not the user's. Patches
// that match by a listener, route or cluster the representative one lacks
// (a custom name, a port of no Gateway) are applied to nothing, and the
// istiod-built parts of a real proxy (its filters, TLS settings, clusters)
// are only sketched. A check against one live proxy's own configuration
// is `globalconfig diff --proxy` (pkg/preflight).
package envoycheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
)

// Result is what the Envoy said of one group of proxies' configuration.
type Result struct {
	Context string // GATEWAY, SIDECAR_INBOUND, SIDECAR_OUTBOUND
	// Namespace and Selector say which proxies of the context the group
	// is: those in Namespace ("" for every namespace) whose labels
	// include Selector (empty for every proxy), the proxies every target
	// of the group reaches.
	Namespace string
	Selector  map[string]string
	// Clusters are the config clusters the group's proxies are in (nil
	// for every one): those every target of the group that names
	// clusters (target.clusters) goes to.
	Clusters []string
	Patches  int // patches applied to the representative configuration
	// Rejected is Envoy's message when it refused the configuration.
	Rejected string
	// Items are the items whose patches Envoy refuses on their own; empty
	// when only their combination fails.
	Items []string
	// Unnamed says the check's context ended before the items were
	// named: Items is empty then, whatever they are.
	Unnamed bool
}

// Report is the check of one rendered set against one Envoy binary.
type Report struct {
	Envoy string // the binary's version
	Istio string // the ISTIO_VERSION a proxy of that Envoy reports
	// Results has one entry per group of proxies the set reaches, by
	// context, then by the groups' targets.
	Results []Result
}

// Proxies names the group of proxies r is about, as "GATEWAY" for every
// proxy of a context, or "GATEWAY proxies in namespace shop labelled
// app=storefront", or "GATEWAY proxies of cluster eu-west-1".
func (r *Result) Proxies() string {
	if r.Namespace == "" && len(r.Selector) == 0 && len(r.Clusters) == 0 {
		return r.Context
	}
	s := r.Context + " proxies"
	switch len(r.Clusters) {
	case 0:
	case 1:
		s += " of cluster " + r.Clusters[0]
	default:
		s += " of clusters " + strings.Join(r.Clusters, ", ")
	}
	if r.Namespace != "" {
		s += " in namespace " + r.Namespace
	}
	if len(r.Selector) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(r.Selector)) {
			kv = append(kv, k+"="+r.Selector[k])
		}
		s += " labelled " + strings.Join(kv, ",")
	}
	return s
}

// OK reports whether Envoy accepted every group of proxies.
func (r *Report) OK() bool {
	for _, res := range r.Results {
		if res.Rejected != "" {
			return false
		}
	}
	return true
}

// patch is one config patch with the item it comes from and the proxies
// its EnvoyFilter targets (Namespace, Selector and the config clusters it
// goes to; the context is the patch's own).
type patch struct {
	item   string
	cp     *networking.EnvoyFilter_EnvoyConfigObjectPatch
	target envoyfilter.Target
}

// contexts, in the order they are reported.
var contexts = []networking.EnvoyFilter_PatchContext{
	networking.EnvoyFilter_GATEWAY, networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND,
}

// Check loads objs, as they reach a proxy of bin's Envoy release, into bin
// in validate mode. The error is for a check that could not run (the
// binary failed, a patch shape it can't model, ctx ended); a refusal is in
// the Report, also when ctx ends after it (the rest unchecked, the items
// Unnamed).
func Check(ctx context.Context, bin *envoybin.Binary, objs []*envoyfilter.Object) (*Report, error) {
	ev, err := envoyfilter.ParseVersion(bin.Version)
	if err != nil {
		return nil, fmt.Errorf("envoy %s: %w", bin.Path, err)
	}
	istio := envoyfilter.IstioForEnvoy(ev).String() + ".0"
	rep := &Report{Envoy: bin.Version, Istio: istio}
	gs, err := groupsOf(objs, istio)
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		res := Result{Context: g.context.String(), Namespace: g.namespace, Selector: g.selector, Clusters: g.clusters, Patches: len(g.patches)}
		msg, err := load(ctx, bin, g.context, g.patches)
		if err != nil {
			if !rep.OK() && ctx.Err() != nil {
				return rep, nil // out of time, but Envoy has refused already
			}
			return nil, err
		}
		if msg != "" {
			res.Rejected = msg
			res.Items, err = alone(ctx, bin, g.context, g.patches)
			if err != nil {
				if ctx.Err() == nil {
					return nil, err
				}
				// Out of time naming the items: the refusal stands.
				res.Items, res.Unnamed = nil, true
				rep.Results = append(rep.Results, res)
				return rep, nil
			}
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// Verdict is Check without naming the items: Envoy's message for the first
// group of proxies it refuses ("" when it accepts every one), one Envoy run
// per group the set reaches. The differential check (test/agreement) asks
// it of many documents.
func Verdict(ctx context.Context, bin *envoybin.Binary, objs []*envoyfilter.Object) (string, error) {
	ev, err := envoyfilter.ParseVersion(bin.Version)
	if err != nil {
		return "", fmt.Errorf("envoy %s: %w", bin.Path, err)
	}
	gs, err := groupsOf(objs, envoyfilter.IstioForEnvoy(ev).String()+".0")
	if err != nil {
		return "", err
	}
	for _, g := range gs {
		if msg, err := load(ctx, bin, g.context, g.patches); err != nil || msg != "" {
			return msg, err
		}
	}
	return "", nil
}

// byContext sorts the patches of objs that reach a proxy of Istio release
// istio ("1.32.0") by context, in the order istiod applies them (by
// priority).
func byContext(objs []*envoyfilter.Object, istio string) (map[networking.EnvoyFilter_PatchContext][]patch, error) {
	ordered := slices.Clone(objs)
	slices.SortStableFunc(ordered, func(a, b *envoyfilter.Object) int {
		return int(a.Spec.GetPriority()) - int(b.Spec.GetPriority())
	})
	out := map[networking.EnvoyFilter_PatchContext][]patch{}
	for _, o := range ordered {
		for _, cp := range o.Spec.GetConfigPatches() {
			if pv := cp.GetMatch().GetProxy().GetProxyVersion(); pv != "" {
				re, err := regexp.Compile(pv)
				if err != nil {
					return nil, fmt.Errorf("%s: proxyVersion %q: %w", o.Metadata.Name, pv, err)
				}
				if !re.MatchString(istio) {
					continue
				}
			}
			p := patch{item: o.Item(), cp: cp, target: envoyfilter.Target{
				Namespace: o.Metadata.Namespace, Selector: o.Spec.GetWorkloadSelector().GetLabels(),
				Clusters: envoyfilter.ClustersOf(o),
			}}
			if p.item == "" {
				p.item = o.Metadata.Name
			}
			c := cp.GetMatch().GetContext()
			for _, want := range contexts {
				if c == want || c == networking.EnvoyFilter_ANY {
					out[want] = append(out[want], p)
				}
			}
		}
	}
	return out, nil
}

// IstioFilters stands for the HTTP filters istiod puts in a gateway's
// chain before the router (authentication, authorization, WasmPlugins,
// telemetry) in the chain HTTPChain returns.
const IstioFilters = "…Istio's filters…"

// ChainFilter is one HTTP filter of a chain and the item that inserted
// it ("" for IstioFilters and the router).
type ChainFilter struct {
	Name, Item string
}

// HTTPChain is the HTTP filter chain of a gateway's HTTP connection
// manager with objs applied as istiod applies them to the newest Istio
// release globalconfig knows: the filters the patches insert, around
// IstioFilters and the router.
func HTTPChain(objs []*envoyfilter.Object) ([]ChainFilter, error) {
	ps, err := byContext(objs, envoyfilter.Newest().Istio.String()+".0")
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{HttpFilters: []*hcmv3.HttpFilter{{Name: IstioFilters}, {Name: envoyfilter.Router}}}
	inserted := map[*hcmv3.HttpFilter]string{}
	for _, p := range ps[networking.EnvoyFilter_GATEWAY] {
		if p.cp.GetApplyTo() != networking.EnvoyFilter_HTTP_FILTER || p.cp.GetPatch().GetOperation() == networking.EnvoyFilter_Patch_MERGE {
			continue
		}
		value, err := envoyfilter.FromStruct(p.cp.GetApplyTo(), p.cp.GetPatch().GetValue())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.item, err)
		}
		sub := p.cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
		before := slices.Clone(hcm.HttpFilters)
		if err := patchHTTPFilters(hcm, sub, p.cp.GetPatch().GetOperation(), value.(*hcmv3.HttpFilter)); err != nil {
			return nil, fmt.Errorf("%s: %w", p.item, err)
		}
		for _, f := range hcm.HttpFilters {
			if !slices.Contains(before, f) {
				inserted[f] = p.item
			}
		}
	}
	out := make([]ChainFilter, len(hcm.HttpFilters))
	for i, f := range hcm.HttpFilters {
		out[i] = ChainFilter{Name: f.GetName(), Item: inserted[f]}
	}
	return out, nil
}

// alone returns the items whose patches Envoy refuses on their own.
func alone(ctx context.Context, bin *envoybin.Binary, c networking.EnvoyFilter_PatchContext, ps []patch) ([]string, error) {
	var names []string
	for _, p := range ps {
		if !slices.Contains(names, p.item) {
			names = append(names, p.item)
		}
	}
	var out []string
	for _, name := range names {
		var mine []patch
		for _, p := range ps {
			if p.item == name {
				mine = append(mine, p)
			}
		}
		msg, err := load(ctx, bin, c, mine)
		if err != nil {
			return nil, err
		}
		if msg != "" {
			out = append(out, name)
		}
	}
	return out, nil
}

// load builds the context's configuration with ps and validates it: ""
// when Envoy accepts it, else Envoy's message. The bootstrap goes in
// protobuf's binary encoding, as xDS delivers config to a proxy: a typed
// config of a type the binary does not link (istio-proxy's Envoy has no
// envoy.filters.http.custom_response) stays opaque, and an optional
// filter of that type is skipped as the proxy skips it, where a JSON
// bootstrap would not even parse.
func load(ctx context.Context, bin *envoybin.Binary, c networking.EnvoyFilter_PatchContext, ps []patch) (string, error) {
	bs, err := bootstrap(c, ps)
	if err != nil {
		return "", err
	}
	pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(bs)
	if err != nil {
		return "", fmt.Errorf("encode bootstrap: %w", err)
	}
	err = bin.ValidateBinary(ctx, pb)
	var rej *envoybin.Rejected
	if errors.As(err, &rej) {
		return ProxyPaths(rej.Message), nil
	}
	return "", err
}

// Representative names and ports.
const (
	httpPort       = 8080
	backendCluster = "outbound|8080||backend.default.svc.cluster.local"
	xdsCluster     = "xds-grpc"
)

// bootstrap is the representative configuration of context c with the
// patches ps applied, as Envoy's static resources.
func bootstrap(c networking.EnvoyFilter_PatchContext, ps []patch) (*bootstrapv3.Bootstrap, error) {
	ports := []uint32{httpPort}
	clusters := []string{backendCluster}
	for _, p := range ps {
		if n := p.cp.GetMatch().GetListener().GetPortNumber(); n != 0 && !slices.Contains(ports, n) {
			ports = append(ports, n)
		}
		if n := p.cp.GetMatch().GetRouteConfiguration().GetPortNumber(); n != 0 && !slices.Contains(ports, n) {
			ports = append(ports, n)
		}
		js, err := protojson.Marshal(p.cp.GetPatch().GetValue())
		if err != nil {
			return nil, err
		}
		for _, name := range outboundRef.FindAllString(string(js), -1) {
			if !slices.Contains(clusters, name) {
				clusters = append(clusters, name)
			}
		}
		if name := p.cp.GetMatch().GetCluster().GetName(); name != "" && !slices.Contains(clusters, name) {
			clusters = append(clusters, name)
		}
	}
	cfg := &config{}
	for _, port := range ports {
		l, err := listener(port, port != httpPort)
		if err != nil {
			return nil, err
		}
		cfg.listeners = append(cfg.listeners, l)
	}
	for _, name := range clusters {
		cfg.clusters = append(cfg.clusters, outboundCluster(name))
	}
	for _, p := range ps {
		if err := cfg.apply(p.cp); err != nil {
			return nil, fmt.Errorf("%s: %w", p.item, err)
		}
	}
	if err := cfg.encode(); err != nil {
		return nil, err
	}
	xds := staticCluster(xdsCluster, 15010)
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}},
	}})
	if err != nil {
		return nil, err
	}
	xds.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2}
	node := &corev3.Node{Id: "router~10.0.0.1~gateway-0.istio-system~istio-system.svc.cluster.local", Cluster: "istio-ingressgateway.istio-system"}
	if c != networking.EnvoyFilter_GATEWAY {
		node = &corev3.Node{Id: "sidecar~10.0.0.1~workload-0.default~default.svc.cluster.local", Cluster: "workload.default"}
	}
	return &bootstrapv3.Bootstrap{
		Node: node,
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: cfg.listeners,
			Clusters:  append(cfg.clusters, xds),
		},
		// The TLS listeners' certificates come over ADS, as istiod sends
		// them; validate mode fetches nothing.
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{AdsConfig: &corev3.ApiConfigSource{
			ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: xdsCluster}}}},
		}},
	}, nil
}

// outboundRef finds Istio outbound cluster names in a patch value.
var outboundRef = regexp.MustCompile(`outbound\|\d+\|[^|"]*\|[A-Za-z0-9.-]+`)

// config is the representative configuration being patched. HTTP
// connection managers are kept decoded while patches apply, and packed
// into their listeners' filters at the end.
type config struct {
	listeners []*listenerv3.Listener
	clusters  []*clusterv3.Cluster
	hcms      map[*listenerv3.Filter]*hcmv3.HttpConnectionManager
}

// listener is an HTTP listener on port, terminating TLS when tls.
func listener(port uint32, tls bool) (*listenerv3.Listener, error) {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: fmt.Sprintf("outbound_0.0.0.0_%d", port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: fmt.Sprintf("http.%d", port),
			VirtualHosts: []*routev3.VirtualHost{{
				Name: fmt.Sprintf("*:%d", port), Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: backendCluster}}},
				}},
			}},
		}},
	}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm.HttpFilters = []*hcmv3.HttpFilter{{Name: envoyfilter.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}
	typed, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	chain := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
		Name: envoyfilter.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: typed},
	}}}
	if tls {
		ctx, err := anypb.New(&tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{
				Name: "kubernetes://gateway-cert",
				SdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
					ResourceApiVersion: corev3.ApiVersion_V3},
			}},
		}})
		if err != nil {
			return nil, err
		}
		chain.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: ctx}}
	}
	return &listenerv3.Listener{
		Name:         fmt.Sprintf("0.0.0.0_%d", port),
		Address:      socket("0.0.0.0", port),
		FilterChains: []*listenerv3.FilterChain{chain},
	}, nil
}

func socket(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// outboundCluster is an outbound cluster as istiod names it, with one
// static endpoint on the port its name carries.
func outboundCluster(name string) *clusterv3.Cluster {
	port := uint32(80)
	if parts := strings.Split(name, "|"); len(parts) == 4 {
		if n, err := strconv.ParseUint(parts[1], 10, 16); err == nil && n > 0 {
			port = uint32(n)
		}
	}
	return staticCluster(name, port)
}

func staticCluster(name string, port uint32) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(10 * time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socket("127.0.0.1", port),
			}}}},
		}}},
	}
}
