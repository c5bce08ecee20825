// Package upstream is the `upstream` item: timeouts and limits of the
// connections the proxy opens to services, in Higress's higress-config
// shape, with the idle timeout set through Envoy's typed
// HttpProtocolOptions (Envoy ignores the deprecated cluster field when
// typed options exist).
package upstream

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "upstream"

// Upstream is the `upstream` section. Every key is optional.
type Upstream struct {
	items.Toggle
	IdleTimeout              *items.Seconds `json:"idleTimeout" doc:"Close an upstream connection idle this long (typed HttpProtocolOptions common_http_protocol_options.idle_timeout)."`
	ConnectTimeout           *items.Seconds `json:"connectTimeout" doc:"Time to establish an upstream connection (cluster connect_timeout); must be more than 0."`
	ConnectionBufferLimits   *uint32        `json:"connectionBufferLimits" doc:"Per-connection buffer towards services, bytes (cluster per_connection_buffer_limit_bytes)."`
	MaxRequestsPerConnection *uint32        `json:"maxRequestsPerConnection" doc:"Requests per upstream connection before it is closed, at least 1 (typed HttpProtocolOptions common_http_protocol_options.max_requests_per_connection)."`
}

var _ items.Item = (*Upstream)(nil)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Service-side connection settings: idle and connect timeouts, buffer limits, requests per connection (Higress-compatible).",
		Stage:            envoyfilter.StageConnection,
		Slot:             4,
		Purpose:          "tunes the connections to the services",
		Where:            "a merge into every cluster of the context (see above): inbound, only the connections to the workload itself",
		EnabledByDefault: true,
		New:              func() items.Item { return &Upstream{} },
	})
}

// Ranges implements items.Ranger.
func (*Upstream) Ranges() []items.Range {
	return []items.Range{items.AtLeast("maxRequestsPerConnection", 1), items.DurationRange("connectTimeout", time.Nanosecond, 0)}
}

// Claims implements items.Sharer: idleTimeout and maxRequestsPerConnection
// set every cluster's HTTP protocol options (downstream declares the rule).
func (u *Upstream) Claims() []items.Claim {
	var out []items.Claim
	if u.IdleTimeout != nil {
		out = append(out, items.Claim{Field: items.ClusterHTTPProtocolOptions, Path: "idleTimeout"})
	}
	if u.MaxRequestsPerConnection != nil {
		out = append(out, items.Claim{Field: items.ClusterHTTPProtocolOptions, Path: "maxRequestsPerConnection"})
	}
	return out
}

// Exclusions implements items.Sharer: downstream declares the rule.
func (*Upstream) Exclusions() []items.Exclusion { return nil }

// Validate implements items.Item.
func (u *Upstream) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, u)
	items.RequireSomething(&p, u)
	return p.Err()
}

// Build implements items.Item.
func (u *Upstream) Build() ([]envoyfilter.Patch, error) {
	c := &clusterv3.Cluster{
		ConnectTimeout:                items.OptionalDuration(u.ConnectTimeout),
		PerConnectionBufferLimitBytes: items.OptionalUInt32(u.ConnectionBufferLimits),
	}
	if u.IdleTimeout != nil || u.MaxRequestsPerConnection != nil {
		common := &corev3.HttpProtocolOptions{
			IdleTimeout:              items.OptionalDuration(u.IdleTimeout),
			MaxRequestsPerConnection: items.OptionalUInt32(u.MaxRequestsPerConnection),
		}
		// Istio merges a cluster patch's typed_extension_protocol_options
		// entry by replacing it whole, so these options must say how to
		// speak upstream too: the protocol the client used.
		opts, err := envoyfilter.Any(&httpv3.HttpProtocolOptions{
			CommonHttpProtocolOptions: common,
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
				UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
					HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		})
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{envoyfilter.HTTPProtocolOptionsKey: opts}
	}
	return []envoyfilter.Patch{envoyfilter.MergeClusters(c)}, nil
}
