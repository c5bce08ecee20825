package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
)

// Verdict is what a real Envoy said of a configuration.
type Verdict struct {
	Envoy string `json:"envoy"` // the binary's version
	// Rejected is Envoy's message; "" when it accepts.
	Rejected string `json:"rejected,omitempty"`
	// Items are the changed items whose change Envoy rejects on its own.
	Items []string `json:"items,omitempty"`
	// BaseRejected is Envoy's message for the proxy's current config:
	// when Envoy refuses that too, its verdict on the prediction says
	// nothing of the change.
	BaseRejected string `json:"baseRejected,omitempty"`
	// Removed lists what was taken out for upstream Envoy: Istio's own
	// extensions, which only istio-proxy builds have, and typed configs
	// this build could not read.
	Removed []string `json:"removed,omitempty"`
}

// Validate loads p, the prediction of in, into bin in validate mode; when
// Envoy rejects it, it loads the current config, and the prediction of
// each changed item's change alone, to name what Envoy rejects.
func Validate(ctx context.Context, bin *envoybin.Binary, in Input, p *Prediction) (*Verdict, error) {
	v := &Verdict{Envoy: bin.Version}
	msg, removed, err := load(ctx, bin, p.Kind, p.After)
	if err != nil {
		return nil, err
	}
	v.Removed = removed
	if msg == "" {
		return v, nil
	}
	v.Rejected = msg
	if v.BaseRejected, _, err = load(ctx, bin, p.Kind, p.Before); err != nil {
		return nil, err
	}
	if v.BaseRejected != "" {
		return v, nil
	}
	for _, item := range p.Changed {
		alone := in
		alone.Desired = onlyItemChanged(in.Live, in.Desired, item)
		one, err := Predict(alone)
		if err != nil {
			return nil, err
		}
		m, _, err := load(ctx, bin, one.Kind, one.After)
		if err != nil {
			return nil, err
		}
		if m != "" {
			v.Items = append(v.Items, item)
		}
	}
	return v, nil
}

// onlyItemChanged is the live set with item's EnvoyFilter as in desired:
// the change of that item alone.
func onlyItemChanged(live, desired []Filter, item string) []Filter {
	var out []Filter
	for _, f := range live {
		if f.Item != item {
			out = append(out, f)
		}
	}
	for _, f := range desired {
		if f.Item == item {
			out = append(out, f)
		}
	}
	return out
}

// load validates c: "" when Envoy accepts it, else Envoy's message.
func load(ctx context.Context, bin *envoybin.Binary, k Kind, c *Config) (string, []string, error) {
	js, removed, err := bootstrapJSON(k, c)
	if err != nil {
		return "", nil, err
	}
	err = bin.Validate(ctx, js)
	var rej *envoybin.Rejected
	if errors.As(err, &rej) {
		return envoycheck.ProxyPaths(rej.Message), removed, nil
	}
	return "", removed, err
}

// bootstrapJSON is Bootstrap as the JSON Envoy loads: a typed config this
// build does not link is written as the dump had it.
func bootstrapJSON(k Kind, c *Config) ([]byte, []string, error) {
	bs, removed, err := Bootstrap(k, c)
	if err != nil {
		return nil, nil, err
	}
	r := c.res
	if r == nil {
		r = newResolver()
	}
	js, err := protojson.MarshalOptions{Resolver: r}.Marshal(bs)
	if err == nil {
		js, err = r.expand(js)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("encode bootstrap: %w", err)
	}
	return js, removed, nil
}

// Bootstrap is c as static resources for `envoy --mode validate`: the
// listeners with their RDS route configurations inline, the clusters, and
// stand-ins for the bootstrap clusters istio-proxy has (xds-grpc for ADS,
// sds-grpc for secrets) when the dump does not carry them. Istio's own
// extensions are taken out, and listed.
func Bootstrap(k Kind, c *Config) (*bootstrapv3.Bootstrap, []string, error) {
	c = c.clone()
	var removed []string
	opaque := func(a *anypb.Any) bool { return a != nil && isIstioType(a.GetTypeUrl(), c.Opaque) }
	routes := map[string]*routev3.RouteConfiguration{}
	for _, r := range c.Routes {
		routes[r.GetName()] = r
	}
	for _, l := range c.Listeners {
		l.ListenerFilters = slices.DeleteFunc(l.ListenerFilters, func(f *listenerv3.ListenerFilter) bool {
			if opaque(f.GetTypedConfig()) {
				removed = append(removed, fmt.Sprintf("listener %s: listener filter %s", l.GetName(), f.GetName()))
				return true
			}
			return false
		})
		chains := slices.Clone(l.FilterChains)
		if l.DefaultFilterChain != nil {
			chains = append(chains, l.DefaultFilterChain)
		}
		for _, fc := range chains {
			if ts := fc.GetTransportSocket(); opaque(ts.GetTypedConfig()) {
				removed = append(removed, fmt.Sprintf("listener %s: transport socket %s (the chain is checked as plaintext)", l.GetName(), ts.GetName()))
				fc.TransportSocket = nil
			}
			fc.Filters = slices.DeleteFunc(fc.Filters, func(f *listenerv3.Filter) bool {
				if opaque(f.GetTypedConfig()) {
					removed = append(removed, fmt.Sprintf("listener %s: network filter %s", l.GetName(), f.GetName()))
					return true
				}
				return false
			})
		}
		var lerr error
		err := eachHCM(l, func(hcm *hcmv3.HttpConnectionManager) bool {
			hcm.HttpFilters = slices.DeleteFunc(hcm.HttpFilters, func(h *hcmv3.HttpFilter) bool {
				if opaque(h.GetTypedConfig()) {
					removed = append(removed, fmt.Sprintf("listener %s: HTTP filter %s", l.GetName(), h.GetName()))
					return true
				}
				return false
			})
			if err := envoycheck.LocalLogs(hcm); err != nil {
				lerr = err
				return false
			}
			if rds := hcm.GetRds(); rds != nil {
				rc := routes[rds.GetRouteConfigName()]
				if rc == nil {
					// istiod has not sent it (yet): an empty one.
					rc = &routev3.RouteConfiguration{Name: rds.GetRouteConfigName()}
				}
				hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
			}
			return true
		})
		if err == nil {
			err = lerr
		}
		if err != nil {
			return nil, nil, err
		}
	}
	clusters := slices.Clone(c.Clusters)
	for _, cl := range clusters {
		if ts := cl.GetTransportSocket(); opaque(ts.GetTypedConfig()) {
			removed = append(removed, fmt.Sprintf("cluster %s: transport socket %s (checked as plaintext)", cl.GetName(), ts.GetName()))
			cl.TransportSocket = nil
		}
		cl.TransportSocketMatches = slices.DeleteFunc(cl.TransportSocketMatches, func(m *clusterv3.Cluster_TransportSocketMatch) bool {
			if opaque(m.GetTransportSocket().GetTypedConfig()) {
				removed = append(removed, fmt.Sprintf("cluster %s: transport socket match %s", cl.GetName(), m.GetName()))
				return true
			}
			return false
		})
		cl.Filters = slices.DeleteFunc(cl.Filters, func(f *clusterv3.Filter) bool {
			if opaque(f.GetTypedConfig()) {
				removed = append(removed, fmt.Sprintf("cluster %s: filter %s", cl.GetName(), f.GetName()))
				return true
			}
			return false
		})
	}
	have := map[string]bool{}
	for _, cl := range clusters {
		have[cl.GetName()] = true
	}
	for _, cl := range c.StaticClusters {
		if !have[cl.GetName()] {
			clusters = append(clusters, proto.Clone(cl).(*clusterv3.Cluster))
			have[cl.GetName()] = true
		}
	}
	for _, name := range []string{"xds-grpc", "sds-grpc"} {
		if !have[name] {
			clusters = append(clusters, grpcStandIn(name))
		}
	}
	bs := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: nodeType(k) + "~127.0.0.1~preflight.globalconfig~cluster.local", Cluster: "preflight"},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: c.Listeners,
			Clusters:  clusters,
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "xds-grpc"},
				}}},
			},
		},
	}
	if c.Node != nil {
		bs.Node = proto.Clone(c.Node).(*corev3.Node)
	}
	return bs, removed, nil
}

// nodeType is istiod's node type of a proxy of kind k, for the stand-in
// node of a dump that names none.
func nodeType(k Kind) string {
	if k.Sidecar {
		return "sidecar"
	}
	return "router"
}

// grpcStandIn is a static HTTP/2 cluster of name on loopback: validate
// mode never connects.
func grpcStandIn(name string) *clusterv3.Cluster {
	opts, _ := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	return &clusterv3.Cluster{
		Name:                          name,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 15010},
				}}},
			}}}},
		}}},
	}
}

// isIstioType tells a typed config upstream Envoy does not have: Istio's
// own (istio.*, io.istio.*, stats.PluginConfig, Istio's TypedStruct
// wrappers) and any other this build does not link, unless it is one of
// Envoy's own (envoy.*), which Envoy loads from the JSON the dump had.
func isIstioType(url string, opaque []string) bool {
	name := url[strings.LastIndexByte(url, '/')+1:]
	for _, p := range []string{"istio.", "io.istio.", "stats.", "envoy.tcp.metadataexchange.", "envoy.extensions.filters.http.istio_stats", "udpa.type.v1.TypedStruct", "xds.type.v3.TypedStruct"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(opaque, name) && !strings.HasPrefix(name, "envoy.")
}
