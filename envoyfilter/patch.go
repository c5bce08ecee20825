package envoyfilter

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// Patch is one change to a proxy's configuration, in Istio's own shape.
// Value is a typed go-control-plane message of the type Istio decodes a
// value of ApplyTo into (see ValueType). The renderer fills in the match's
// context and proxy version from the item's Target.
type Patch struct {
	ApplyTo   networking.EnvoyFilter_ApplyTo
	Match     *networking.EnvoyFilter_EnvoyConfigObjectMatch
	Operation networking.EnvoyFilter_Patch_Operation
	Value     proto.Message

	// atStage marks an HTTP filter insert whose operation and anchor come
	// from the item's stage (see InsertHTTPFilter).
	atStage bool
}

// ValueType returns an empty message of the type Istio decodes the patch
// value of applyTo into.
func ValueType(applyTo networking.EnvoyFilter_ApplyTo) (proto.Message, error) {
	switch applyTo {
	case networking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}, nil
	case networking.EnvoyFilter_FILTER_CHAIN:
		return &listenerv3.FilterChain{}, nil
	case networking.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}, nil
	case networking.EnvoyFilter_HTTP_FILTER:
		return &hcmv3.HttpFilter{}, nil
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}, nil
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}, nil
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}, nil
	case networking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}, nil
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return &corev3.TypedExtensionConfig{}, nil
	case networking.EnvoyFilter_LISTENER_FILTER:
		return &listenerv3.ListenerFilter{}, nil
	}
	return nil, fmt.Errorf("patches to %s are not supported", applyTo)
}

// hcmMatch matches the HTTP connection manager of every listener.
func hcmMatch(subFilter string) *networking.EnvoyFilter_EnvoyConfigObjectMatch {
	f := &networking.EnvoyFilter_ListenerMatch_FilterMatch{Name: HTTPConnectionManager}
	if subFilter != "" {
		f.SubFilter = &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: subFilter}
	}
	return &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{
			Listener: &networking.EnvoyFilter_ListenerMatch{
				FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: f},
			},
		},
	}
}

// InsertHTTPFilter adds the HTTP filter name, configured by cfg, to every
// HTTP connection manager. Where it goes in the chain is not the item's
// choice: NewObject places it at the Insert position of the item's stage
// (see the table in priority.go).
func InsertHTTPFilter(name string, cfg proto.Message) (Patch, error) {
	typed, err := pack(name, cfg)
	if err != nil {
		return Patch{}, err
	}
	return Patch{
		ApplyTo: networking.EnvoyFilter_HTTP_FILTER,
		Value:   &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}},
		atStage: true,
	}, nil
}

// place gives an InsertHTTPFilter patch its stage's position.
func (p Patch) place(at Position) Patch {
	if p.atStage {
		p.Operation, p.Match = at.Operation, hcmMatch(at.Anchor)
	}
	return p
}

// Any puts m in an Any, marshaled deterministically: the same config
// always gives the same bytes, so two releases' equal patches compare
// equal (proto.Equal compares an Any's bytes, and a map inside m, such as
// a JSON log format's Struct, marshals in random order otherwise).
func Any(m proto.Message) (*anypb.Any, error) {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, err
	}
	return a, nil
}

// pack puts cfg, the configuration of what is named name, in an Any.
func pack(name string, cfg proto.Message) (*anypb.Any, error) {
	typed, err := Any(cfg)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", name, err)
	}
	return typed, nil
}

// SetHeader is a header set on a request or response, replacing a header
// of that name if there is one.
func SetHeader(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// AppendHeader is a header added to a request or response, keeping any
// header of that name already there.
func AppendHeader(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
	}
}

// MergeHCM merges the fields set in hcm into every HTTP connection manager.
func MergeHCM(hcm *hcmv3.HttpConnectionManager) (Patch, error) {
	typed, err := pack("http connection manager", hcm)
	if err != nil {
		return Patch{}, err
	}
	return Patch{
		ApplyTo:   networking.EnvoyFilter_NETWORK_FILTER,
		Match:     hcmMatch(""),
		Operation: networking.EnvoyFilter_Patch_MERGE,
		Value:     &listenerv3.Filter{Name: HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: typed}},
	}, nil
}

// MergeRouter merges the fields set in r into the router filter. It never
// replaces the router, so router settings of other items survive.
func MergeRouter(r *routerv3.Router) (Patch, error) {
	typed, err := pack("router", r)
	if err != nil {
		return Patch{}, err
	}
	return Patch{
		ApplyTo:   networking.EnvoyFilter_HTTP_FILTER,
		Match:     hcmMatch(Router),
		Operation: networking.EnvoyFilter_Patch_MERGE,
		Value:     &hcmv3.HttpFilter{Name: Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}},
	}, nil
}

// MergeCluster merges c into the cluster named name.
func MergeCluster(name string, c *clusterv3.Cluster) Patch {
	return merge(networking.EnvoyFilter_CLUSTER, &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Cluster{
			Cluster: &networking.EnvoyFilter_ClusterMatch{Name: name},
		},
	}, c)
}

// GRPCCluster makes the cluster named name speak HTTP/2 upstream: Envoy's
// gRPC client (a tracer's, a rate-limit or an auth service's) needs it even
// when the service port's name doesn't tell Istio the port is gRPC. Istio
// replaces a cluster's typed options whole: other items' protocol options
// for that cluster are replaced too.
func GRPCCluster(name string) (Patch, error) {
	opts, err := Any(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return Patch{}, fmt.Errorf("pack http protocol options: %w", err)
	}
	return MergeCluster(name, &clusterv3.Cluster{
		TypedExtensionProtocolOptions: map[string]*anypb.Any{HTTPProtocolOptionsKey: opts},
	}), nil
}

// merge is a MERGE of value into what match selects.
func merge(applyTo networking.EnvoyFilter_ApplyTo, match *networking.EnvoyFilter_EnvoyConfigObjectMatch, value proto.Message) Patch {
	return Patch{ApplyTo: applyTo, Match: match, Operation: networking.EnvoyFilter_Patch_MERGE, Value: value}
}

// OutboundCluster is the name Istio gives the outbound cluster of a
// service port: outbound|<port>||<fqdn>.
func OutboundCluster(fqdn string, port uint32) string {
	return fmt.Sprintf("outbound|%d||%s", port, fqdn)
}

// MergeListeners merges l into every listener of the context.
func MergeListeners(l *listenerv3.Listener) Patch {
	return merge(networking.EnvoyFilter_LISTENER, &networking.EnvoyFilter_EnvoyConfigObjectMatch{}, l)
}

// MergeRoutes merges r into every route of every virtual host that routes
// to a cluster (not redirects or direct responses).
func MergeRoutes(r *routev3.Route) Patch {
	return merge(networking.EnvoyFilter_HTTP_ROUTE, &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{
			RouteConfiguration: &networking.EnvoyFilter_RouteConfigurationMatch{
				Vhost: &networking.EnvoyFilter_RouteConfigurationMatch_VirtualHostMatch{
					Route: &networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch{Action: networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE},
				},
			},
		},
	}, r)
}

// MergeRouteConfigurations merges rc into every route configuration.
func MergeRouteConfigurations(rc *routev3.RouteConfiguration) Patch {
	return merge(networking.EnvoyFilter_ROUTE_CONFIGURATION, &networking.EnvoyFilter_EnvoyConfigObjectMatch{}, rc)
}

// MergeClusters merges c into every cluster of the context.
func MergeClusters(c *clusterv3.Cluster) Patch {
	return merge(networking.EnvoyFilter_CLUSTER, &networking.EnvoyFilter_EnvoyConfigObjectMatch{}, c)
}

// InsertNetworkFilter adds the network filter name, configured by cfg,
// just before the HTTP connection manager of every filter chain that has
// one, so it sees each connection before HTTP does. Chains without an HTTP
// connection manager (TLS passthrough, TCP) are left alone.
func InsertNetworkFilter(name string, cfg proto.Message) (Patch, error) {
	typed, err := pack(name, cfg)
	if err != nil {
		return Patch{}, err
	}
	return Patch{
		ApplyTo:   networking.EnvoyFilter_NETWORK_FILTER,
		Match:     hcmMatch(""),
		Operation: networking.EnvoyFilter_Patch_INSERT_BEFORE,
		Value:     &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: typed}},
	}, nil
}

// InsertListenerFilter adds the listener filter name, configured by cfg, at
// the front of every listener's listener filters, so it runs before any
// other (the TLS inspector among them).
func InsertListenerFilter(name string, cfg proto.Message) (Patch, error) {
	typed, err := pack(name, cfg)
	if err != nil {
		return Patch{}, err
	}
	return Patch{
		ApplyTo:   networking.EnvoyFilter_LISTENER_FILTER,
		Match:     &networking.EnvoyFilter_EnvoyConfigObjectMatch{},
		Operation: networking.EnvoyFilter_Patch_INSERT_FIRST,
		Value:     &listenerv3.ListenerFilter{Name: name, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: typed}},
	}, nil
}

// MergeFilterChainsOnPort merges fc into every filter chain of the
// listeners on port. Istio's EnvoyFilter can't tell a gateway's TLS filter
// chain from a plaintext one (it gives neither a transport protocol) and
// ignores a network filter in a FILTER_CHAIN match, so a port is how an
// item says which chains terminate TLS.
func MergeFilterChainsOnPort(port uint32, fc *listenerv3.FilterChain) Patch {
	return merge(networking.EnvoyFilter_FILTER_CHAIN, &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{
			Listener: &networking.EnvoyFilter_ListenerMatch{PortNumber: port},
		},
	}, fc)
}

// MergeRouteConfigurationsOnPort merges rc into the route configurations
// of port (for a gateway, the port of its Gateway server or Service).
func MergeRouteConfigurationsOnPort(port uint32, rc *routev3.RouteConfiguration) Patch {
	return merge(networking.EnvoyFilter_ROUTE_CONFIGURATION, &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{
			RouteConfiguration: &networking.EnvoyFilter_RouteConfigurationMatch{PortNumber: port},
		},
	}, rc)
}
