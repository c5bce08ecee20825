package xds

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	// The types of the typed configs nested in what istiod sends, linked
	// so that protojson can print them (ConfigDump names any still
	// missing). Istio's private ones first: istio.alpn and TypedStruct
	// (istio.metadata_exchange) reach every gateway; the rest come with
	// Telemetry or to sidecars.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"
	_ "istio.io/api/envoy/config/filter/network/metadata_exchange"
	_ "istio.io/api/envoy/extensions/stats"

	// Envoy extensions istiod itself configures: on a gateway with an HTTP
	// server cors, fault, grpc_stats, router, uuid, raw_buffer, tls and
	// upstreams/http; the listener filters and tcp_proxy with TLS or TCP
	// servers and on sidecars.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	// Envoy extensions globalconfig's items put in their patches.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/brotli/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/zstd/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/custom_response/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/connection_limit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/custom_response/local_response_policy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/custom_header/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/xff/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// rawType is what the client holds of one type: the version of the last
// response and each resource by name.
type rawType struct {
	version string
	byName  map[string]rawResource
}

// rawResource is one resource as istiod sent it, with the version of the
// response that last changed it and when that arrived.
type rawResource struct {
	any     *anypb.Any
	version string
	updated time.Time
}

// keepRaw records the resources of resp for the config dump: listeners
// and clusters replace what the client had of their type (state of the
// world), route configurations are added by name. A resource whose bytes
// did not change keeps its version and time, as in Envoy's dump. names
// are the resources' names, decoded by handle.
func (c *Client) keepRaw(resp *discoveryv3.DiscoveryResponse, names []string) {
	typeURL := resp.GetTypeUrl()
	if typeURL != ListenerType && typeURL != ClusterType && typeURL != RouteType {
		return
	}
	old := c.raw[typeURL].byName
	next := map[string]rawResource{}
	if typeURL == RouteType {
		for k, v := range old {
			next[k] = v
		}
	}
	now := time.Now()
	for i, r := range resp.GetResources() {
		name := names[i]
		if prev, ok := old[name]; ok && bytes.Equal(prev.any.GetValue(), r.GetValue()) {
			next[name] = prev
			continue
		}
		next[name] = rawResource{any: r, version: resp.GetVersionInfo(), updated: now}
	}
	c.raw[typeURL] = rawType{version: resp.GetVersionInfo(), byName: next}
}

// ConfigDump returns what the client holds in the JSON form of Envoy's
// admin /config_dump (proto field names, as Envoy prints them), which
// `istioctl proxy-config … --file` reads: the bootstrap (the node only),
// then the dynamic clusters, listeners and route configurations, each as
// received.
func (c *Client) ConfigDump() ([]byte, error) {
	c.mu.Lock()
	node := proto.Clone(c.node).(*corev3.Node)
	dialed := c.dialed
	cds := &adminv3.ClustersConfigDump{VersionInfo: c.raw[ClusterType].version}
	lds := &adminv3.ListenersConfigDump{VersionInfo: c.raw[ListenerType].version}
	rds := &adminv3.RoutesConfigDump{}
	clusters := sortedRaw(c.raw[ClusterType].byName)
	listeners := sortedRaw(c.raw[ListenerType].byName)
	routes := sortedRaw(c.raw[RouteType].byName)
	c.mu.Unlock()

	for _, r := range clusters {
		cds.DynamicActiveClusters = append(cds.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{
			VersionInfo: r.version, Cluster: r.any, LastUpdated: timestamppb.New(r.updated),
		})
	}
	for _, r := range listeners {
		lds.DynamicListeners = append(lds.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{
			Name: r.name,
			ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{
				VersionInfo: r.version, Listener: r.any, LastUpdated: timestamppb.New(r.updated),
			},
		})
	}
	for _, r := range routes {
		rds.DynamicRouteConfigs = append(rds.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{
			VersionInfo: r.version, RouteConfig: r.any, LastUpdated: timestamppb.New(r.updated),
		})
	}
	dump := &adminv3.ConfigDump{}
	for _, m := range []proto.Message{
		&adminv3.BootstrapConfigDump{
			Bootstrap:   &bootstrapv3.Bootstrap{Node: node},
			LastUpdated: timestamppb.New(dialed),
		},
		cds, lds, rds,
	} {
		a, err := anypb.New(m)
		if err != nil {
			return nil, err
		}
		dump.Configs = append(dump.Configs, a)
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(dump)
	if err != nil {
		if missing := unresolved(dump); len(missing) > 0 {
			return nil, fmt.Errorf("config dump: no Go type linked for %s (blank-import the Go package of each in test/xds/dump.go): %w",
				strings.Join(missing, ", "), err)
		}
		return nil, fmt.Errorf("config dump: %w", err)
	}
	return out, nil
}

// WriteConfigDump writes ConfigDump to path atomically: a reader sees the
// old dump or the new one, never a part.
func (c *Client) WriteConfigDump(path string) error {
	data, err := c.ConfigDump()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

type namedRaw struct {
	name string
	rawResource
}

func sortedRaw(m map[string]rawResource) []namedRaw {
	out := make([]namedRaw, 0, len(m))
	for name, r := range m {
		out = append(out, namedRaw{name, r})
	}
	slices.SortFunc(out, func(a, b namedRaw) int { return strings.Compare(a.name, b.name) })
	return out
}

// unresolved lists, sorted, the type URLs of every Any nested in m whose
// message type no linked package registers.
func unresolved(m proto.Message) []string {
	seen := map[string]bool{}
	var walk func(protoreflect.Message)
	walkValue := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
		if fd.Message() != nil {
			walk(v.Message())
		}
	}
	walk = func(msg protoreflect.Message) {
		if a, ok := msg.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if errors.Is(err, protoregistry.NotFound) {
				seen[a.GetTypeUrl()] = true
				return
			}
			if err == nil {
				walk(inner.ProtoReflect())
			}
			return
		}
		msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList():
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walkValue(fd, l.Get(i))
				}
			case fd.IsMap():
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walkValue(fd.MapValue(), mv)
					return true
				})
			default:
				walkValue(fd, v)
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	out := make([]string, 0, len(seen))
	for u := range seen {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}
