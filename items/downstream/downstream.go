// Package downstream is the `downstream` item: timeouts, header limits,
// buffer limits and HTTP/2 settings of the connections clients open to the
// proxy, in Higress's higress-config shape.
package downstream

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "downstream"

// Envoy's limits.
const (
	// MaxRequestHeadersKb is Envoy's ceiling for max_request_headers_kb.
	MaxRequestHeadersKb = 8192
	// MaxHTTP2 is the HTTP/2 maximum for streams and window sizes (2^31-1).
	MaxHTTP2 = 2147483647
	// MinHTTP2Window is the smallest HTTP/2 window Envoy accepts.
	MinHTTP2Window = 65535
)

// Downstream is the `downstream` section. Every key is optional: a key not
// given leaves Istio's and Envoy's default in place.
type Downstream struct {
	items.Toggle
	IdleTimeout            *items.Seconds `json:"idleTimeout" doc:"Close a client connection idle this long (HCM common_http_protocol_options.idle_timeout); integer seconds or a duration."`
	StreamIdleTimeout      *items.Seconds `json:"streamIdleTimeout" doc:"Reset a request stream idle this long (HCM stream_idle_timeout); kept separate from idleTimeout."`
	RequestTimeout         *items.Seconds `json:"requestTimeout" doc:"Time to receive the whole request (HCM request_timeout); 0 disables."`
	RequestHeadersTimeout  *items.Seconds `json:"requestHeadersTimeout" doc:"Time to receive the request headers (HCM request_headers_timeout); 0 disables."`
	MaxRequestHeadersKb    *uint32        `json:"maxRequestHeadersKb" doc:"Largest request header block, 1 to 8192 KiB (HCM max_request_headers_kb)."`
	MaxHeadersCount        *uint32        `json:"maxHeadersCount" doc:"Most request headers, at least 1 (HCM common_http_protocol_options.max_headers_count)."`
	ConnectionBufferLimits *uint32        `json:"connectionBufferLimits" doc:"Per-connection read and write buffer, bytes (listener per_connection_buffer_limit_bytes)."`
	HTTP2                  *HTTP2         `json:"http2" doc:"HTTP/2 settings towards clients (HCM http2_protocol_options)."`
	HTTP1                  *HTTP1         `json:"http1" doc:"HTTP/1 behaviour towards clients: HTTP/1.0, header case, trailers (HCM http_protocol_options)."`
	RouteTimeout           *items.Seconds `json:"routeTimeout" doc:"Upstream response timeout of every route (route.timeout). It overrides the timeout every VirtualService sets. 0 (Higress's default) leaves route timeouts as Istio set them."`
}

// HTTP2 is the `http2` sub-section.
type HTTP2 struct {
	MaxConcurrentStreams        *uint32 `json:"maxConcurrentStreams" doc:"1 to 2147483647."`
	InitialStreamWindowSize     *uint32 `json:"initialStreamWindowSize" doc:"65535 to 2147483647 bytes."`
	InitialConnectionWindowSize *uint32 `json:"initialConnectionWindowSize" doc:"65535 to 2147483647 bytes."`
}

var (
	_ items.Item   = (*Downstream)(nil)
	_ items.Ranger = (*Downstream)(nil)
	_ items.Warner = (*Downstream)(nil)
)

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them. Keys not given are not checked.
func (*Downstream) Ranges() []items.Range {
	return []items.Range{
		{Path: "maxRequestHeadersKb", Min: 1, Max: MaxRequestHeadersKb},
		items.AtLeast("maxHeadersCount", 1),
		{Path: "http2.maxConcurrentStreams", Min: 1, Max: MaxHTTP2},
		{Path: "http2.initialStreamWindowSize", Min: MinHTTP2Window, Max: MaxHTTP2},
		{Path: "http2.initialConnectionWindowSize", Min: MinHTTP2Window, Max: MaxHTTP2},
	}
}

// Warnings implements items.Warner: a global route timeout reaches every
// route. Envoy has no route timeout below the route, and an EnvoyFilter
// can't tell a route whose VirtualService set a timeout from one whose
// didn't (Istio writes 0s there), so it overrides them all.
func (d *Downstream) Warnings() error {
	var p items.Problems
	if d.RouteTimeout != nil && d.RouteTimeout.Duration > 0 {
		p.Addf("routeTimeout", "overrides the timeout of every route, including those VirtualServices set (http[].timeout); set timeouts in the VirtualServices instead, or use 0 to leave them alone")
	}
	d.HTTP1.warnings(&p)
	return p.Err()
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Client-side connection settings: timeouts, header and buffer limits, HTTP/2 (Higress-compatible).",
		Stage:            envoyfilter.StageConnection,
		Slot:             1,
		Purpose:          "limits and times the client connections",
		Where:            "connection manager, listener and route merges; `routeTimeout` reaches the routes to the workload (inbound) or every mesh route the workload calls through (outbound)",
		EnabledByDefault: true,
		New:              func() items.Item { return &Downstream{} },
	})
}

// Validate implements items.Item.
func (d *Downstream) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, d)
	d.HTTP1.validate(&p)
	items.RequireSomething(&p, d)
	return p.Err()
}

// Build implements items.Item.
func (d *Downstream) Build() ([]envoyfilter.Patch, error) {
	var patches []envoyfilter.Patch
	hcm := &hcmv3.HttpConnectionManager{
		StreamIdleTimeout:     items.OptionalDuration(d.StreamIdleTimeout),
		RequestTimeout:        items.OptionalDuration(d.RequestTimeout),
		RequestHeadersTimeout: items.OptionalDuration(d.RequestHeadersTimeout),
		MaxRequestHeadersKb:   items.OptionalUInt32(d.MaxRequestHeadersKb),
	}
	if d.IdleTimeout != nil || d.MaxHeadersCount != nil {
		hcm.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{
			IdleTimeout:     items.OptionalDuration(d.IdleTimeout),
			MaxHeadersCount: items.OptionalUInt32(d.MaxHeadersCount),
		}
	}
	if h := d.HTTP2; h != nil {
		hcm.Http2ProtocolOptions = &corev3.Http2ProtocolOptions{
			MaxConcurrentStreams:        items.OptionalUInt32(h.MaxConcurrentStreams),
			InitialStreamWindowSize:     items.OptionalUInt32(h.InitialStreamWindowSize),
			InitialConnectionWindowSize: items.OptionalUInt32(h.InitialConnectionWindowSize),
		}
	}
	if hcm.StreamIdleTimeout != nil || hcm.RequestTimeout != nil || hcm.RequestHeadersTimeout != nil ||
		hcm.MaxRequestHeadersKb != nil || hcm.CommonHttpProtocolOptions != nil || hcm.Http2ProtocolOptions != nil {
		p, err := envoyfilter.MergeHCM(hcm)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if d.ConnectionBufferLimits != nil {
		patches = append(patches, envoyfilter.MergeListeners(&listenerv3.Listener{
			PerConnectionBufferLimitBytes: items.OptionalUInt32(d.ConnectionBufferLimits),
		}))
	}
	// 0 means what it means in Higress, whose chart sets it by default:
	// leave the routes alone.
	if d.RouteTimeout != nil && d.RouteTimeout.Duration > 0 {
		patches = append(patches, envoyfilter.MergeRoutes(&routev3.Route{
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{Timeout: items.OptionalDuration(d.RouteTimeout)}},
		}))
	}
	http1, err := d.HTTP1.patches()
	if err != nil {
		return nil, err
	}
	return append(patches, http1...), nil
}
