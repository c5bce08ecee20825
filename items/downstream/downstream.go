// Package downstream is the `downstream` item: timeouts, header limits,
// buffer limits, TCP keepalive and HTTP/2 settings of the connections
// clients open to the proxy, in Higress's higress-config shape.
package downstream

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
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

// The kernel's limits of TCP keepalive (include/net/tcp.h, tcp(7)):
// setsockopt refuses TCP_KEEPIDLE and TCP_KEEPINTVL outside 1 to 32767
// seconds and TCP_KEEPCNT outside 1 to 127 with EINVAL, so no proxy could
// put such a value on its sockets. Envoy's TcpKeepalive takes any uint32
// (0 turns keepalive off), so these are Linux's, not Envoy's.
const (
	// MaxKeepaliveSeconds is MAX_TCP_KEEPIDLE and MAX_TCP_KEEPINTVL.
	MaxKeepaliveSeconds = 32767
	// MaxKeepaliveProbes is MAX_TCP_KEEPCNT.
	MaxKeepaliveProbes = 127
)

// MinHTTP2Keepalive is the floor Envoy's KeepaliveSettings puts on a PING's
// interval and timeout (the proto's gte 1ms).
const MinHTTP2Keepalive = time.Millisecond

// MaxJitterPercent is the ceiling of a Percent.
const MaxJitterPercent = 100

// listenerKeepalive is the first Envoy whose Listener has tcp_keepalive
// (Envoy 1.37, Istio 1.29). Older proxies don't know the field: an
// istiod of their release drops it, a newer one sends it and they ignore
// it (or refuse it, when they reject unknown fields), so tcpKeepalive is
// refused for them.
var listenerKeepalive = envoyfilter.Version{Major: 1, Minor: 37}

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
	TCPKeepalive           *TCPKeepalive  `json:"tcpKeepalive" doc:"TCP keepalive on the client connections the listeners accept (listener tcp_keepalive), so that a load balancer's idle timeout does not drop quiet long-lived connections. {} turns it on with the kernel's defaults."`
	HTTP1                  *HTTP1         `json:"http1" doc:"HTTP/1 behaviour towards clients: HTTP/1.0, header case, trailers (HCM http_protocol_options)."`
	RouteTimeout           *items.Seconds `json:"routeTimeout" doc:"Upstream response timeout of every route (route.timeout). It overrides the timeout every VirtualService sets. 0 (Higress's default) leaves route timeouts as Istio set them."`
}

// HTTP2 is the `http2` sub-section.
type HTTP2 struct {
	MaxConcurrentStreams        *uint32         `json:"maxConcurrentStreams" doc:"1 to 2147483647."`
	InitialStreamWindowSize     *uint32         `json:"initialStreamWindowSize" doc:"65535 to 2147483647 bytes."`
	InitialConnectionWindowSize *uint32         `json:"initialConnectionWindowSize" doc:"65535 to 2147483647 bytes."`
	Keepalive                   *HTTP2Keepalive `json:"keepalive" doc:"PINGs the proxy sends on every client HTTP/2 connection, closing one that does not answer (http2_protocol_options.connection_keepalive)."`
	OnInvalidMessage            *InvalidMessage `json:"onInvalidMessage" doc:"What an invalid HTTP/2 request (a malformed header, a connection-specific header) ends: TerminateStream resets that request alone, TerminateConnection (Envoy's default, which Istio keeps) closes the whole connection and every request on it (http2_protocol_options.override_stream_error_on_invalid_http_message)."`
}

// HTTP2Keepalive is the `http2.keepalive` sub-section.
type HTTP2Keepalive struct {
	Interval *items.Seconds `json:"interval" doc:"Send a PING this often, e.g. \"30s\" (at least 1ms); required."`
	Timeout  *items.Seconds `json:"timeout" doc:"Close the connection when a PING is not answered within this, e.g. \"5s\" (at least 1ms); any frame received extends it. Required."`
	Jitter   *float64       `json:"jitter" doc:"Percent of interval added at random to each interval, 0 to 100 (Envoy's default 15)."`
}

// TCPKeepalive is the `tcpKeepalive` sub-section. Its times are whole
// seconds, as the kernel counts them; a key not given keeps the kernel's
// default (net.ipv4.tcp_keepalive_*: 9 probes, 7200s idle, 75s apart).
type TCPKeepalive struct {
	Probes   *uint32       `json:"probes" doc:"Unanswered probes before the connection is closed, 1 to 127 (TCP_KEEPCNT)."`
	IdleTime *WholeSeconds `json:"idleTime" doc:"Idle time before the first probe, 1 to 32767 whole seconds (TCP_KEEPIDLE): 300, \"300s\" or \"5m\"."`
	Interval *WholeSeconds `json:"interval" doc:"Time between probes, 1 to 32767 whole seconds (TCP_KEEPINTVL): 30 or \"30s\"."`
}

// WholeSeconds is a time the kernel takes in whole seconds: an integer
// number of seconds, or a whole number of seconds, minutes or hours
// written with its unit ("90s", "5m", "1h"). A fraction is refused, not
// rounded: below a second it would be 0, which turns keepalive off.
type WholeSeconds uint32

// wholeSecondsPattern is the string form WholeSeconds takes.
const wholeSecondsPattern = `^\+?[0-9]+(s|m|h)$`

var wholeSecondsSyntax = regexp.MustCompile(wholeSecondsPattern)

// DecodeScalar implements items.ScalarDecoder.
func (w *WholeSeconds) DecodeScalar(tag, value string) error {
	unit := uint64(1)
	num := value
	switch tag {
	case "!!int":
	case "!!str":
		if !wholeSecondsSyntax.MatchString(value) {
			return fmt.Errorf("must be a whole number of seconds (the kernel counts TCP keepalive times in seconds), such as 300, \"300s\" or \"5m\", got %q", value)
		}
		num = strings.TrimPrefix(value[:len(value)-1], "+")
		unit = map[byte]uint64{'s': 1, 'm': 60, 'h': 3600}[value[len(value)-1]]
	case "!!float":
		return fmt.Errorf("must be a whole number of seconds (the kernel counts TCP keepalive times in seconds), got %s", value)
	default:
		return fmt.Errorf("expected a whole number of seconds, got %s", items.DescribeTag(tag))
	}
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || n*unit > math.MaxUint32 {
		if strings.HasPrefix(value, "-") {
			return fmt.Errorf("must not be negative, got %s", value)
		}
		return fmt.Errorf("must be a whole number of seconds from 1 to %d, got %s", MaxKeepaliveSeconds, value)
	}
	*w = WholeSeconds(n * unit)
	return nil
}

// SchemaTypes implements items.SchemaTyper.
func (WholeSeconds) SchemaTypes() []string { return []string{"integer", "string"} }

// InvalidMessage is what an invalid HTTP/2 request ends.
type InvalidMessage string

// The values of InvalidMessage.
const (
	TerminateStream     InvalidMessage = "TerminateStream"
	TerminateConnection InvalidMessage = "TerminateConnection"
)

// Values implements items.Enum.
func (InvalidMessage) Values() []string {
	return []string{string(TerminateConnection), string(TerminateStream)}
}

var (
	_ items.Item      = (*Downstream)(nil)
	_ items.Ranger    = (*Downstream)(nil)
	_ items.Warner    = (*Downstream)(nil)
	_ items.Versioned = (*Downstream)(nil)
	_ items.Enum      = InvalidMessage("")

	_ items.ScalarDecoder = (*WholeSeconds)(nil)
	_ items.SchemaTyper   = WholeSeconds(0)
)

// The string form of WholeSeconds, for the JSON Schema; its bounds are
// those of each key's Range.
func init() {
	items.DeclareLimits[WholeSeconds](items.Limits{Pattern: wholeSecondsPattern})
}

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them. Keys not given are not checked.
func (*Downstream) Ranges() []items.Range {
	return []items.Range{
		{Path: "maxRequestHeadersKb", Min: 1, Max: MaxRequestHeadersKb},
		items.AtLeast("maxHeadersCount", 1),
		{Path: "http2.maxConcurrentStreams", Min: 1, Max: MaxHTTP2},
		{Path: "http2.initialStreamWindowSize", Min: MinHTTP2Window, Max: MaxHTTP2},
		{Path: "http2.initialConnectionWindowSize", Min: MinHTTP2Window, Max: MaxHTTP2},
		keepaliveRange("http2.keepalive.interval", "Envoy's floor"),
		keepaliveRange("http2.keepalive.timeout", "Envoy's floor"),
		{Path: "http2.keepalive.jitter", Min: 0, Max: MaxJitterPercent, Why: "a percentage of interval"},
		{Path: "tcpKeepalive.probes", Min: 1, Max: MaxKeepaliveProbes, Why: "the kernel's range for TCP_KEEPCNT"},
		{Path: "tcpKeepalive.idleTime", Min: 1, Max: MaxKeepaliveSeconds, Why: "the kernel's range for TCP_KEEPIDLE, in seconds"},
		{Path: "tcpKeepalive.interval", Min: 1, Max: MaxKeepaliveSeconds, Why: "the kernel's range for TCP_KEEPINTVL, in seconds"},
	}
}

// keepaliveRange is the Range of an HTTP/2 PING duration.
func keepaliveRange(path, why string) items.Range {
	r := items.DurationRange(path, MinHTTP2Keepalive, 0)
	r.Why = why
	return r
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
		Needs: []items.Need{
			{Setting: "tcpKeepalive", Field: "listener tcp_keepalive", Envoy: listenerKeepalive, Older: "refused by validation"},
		},
	})
}

// Validate implements items.Item.
func (d *Downstream) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, d)
	d.HTTP1.validate(&p)
	items.RequireSomething(&p, d)
	if h := d.HTTP2; h != nil && h.Keepalive != nil {
		if h.Keepalive.Interval == nil {
			p.Addf("http2.keepalive.interval", "is required: how often the proxy PINGs each client connection, e.g. \"30s\"")
		}
		if h.Keepalive.Timeout == nil {
			p.Addf("http2.keepalive.timeout", "is required: how long the proxy waits for a PING's answer before it closes the connection, e.g. \"5s\"")
		}
	}
	return p.Err()
}

// BuildFor implements items.Versioned: tcpKeepalive is a listener field
// of Envoy 1.37 and newer, and is refused for proxies of older releases
// (they would ignore it); every other key is the same everywhere.
func (d *Downstream) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	if d.TCPKeepalive != nil && !r.Envoy.AtLeast(listenerKeepalive) {
		return nil, &fielderr.Error{Path: "tcpKeepalive", Msg: items.NeedsMsg(listenerKeepalive) + ": older proxies don't know the listener's tcp_keepalive; target only newer releases with it (target.istioVersions)"}
	}
	return d.Build()
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
			ConnectionKeepalive:         h.Keepalive.settings(),
		}
		if h.OnInvalidMessage != nil {
			// A wrapper: false (terminate the connection) is set, not left
			// as the default a MERGE can't write.
			hcm.Http2ProtocolOptions.OverrideStreamErrorOnInvalidHttpMessage = wrapperspb.Bool(*h.OnInvalidMessage == TerminateStream)
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
	if d.ConnectionBufferLimits != nil || d.TCPKeepalive != nil {
		patches = append(patches, envoyfilter.MergeListeners(&listenerv3.Listener{
			PerConnectionBufferLimitBytes: items.OptionalUInt32(d.ConnectionBufferLimits),
			TcpKeepalive:                  d.TCPKeepalive.proto(),
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

// settings is the KeepaliveSettings of k, nil when k is.
func (k *HTTP2Keepalive) settings() *corev3.KeepaliveSettings {
	if k == nil {
		return nil
	}
	s := &corev3.KeepaliveSettings{
		Interval: items.OptionalDuration(k.Interval),
		Timeout:  items.OptionalDuration(k.Timeout),
	}
	if k.Jitter != nil {
		s.IntervalJitter = &typev3.Percent{Value: *k.Jitter}
	}
	return s
}

// proto is the listener's TcpKeepalive of k, nil when k is. A singular
// message: Istio's MERGE merges it field by field into the listener it
// built (which has none), and builds the listener afresh on every push,
// so nothing is appended twice.
func (k *TCPKeepalive) proto() *corev3.TcpKeepalive {
	if k == nil {
		return nil
	}
	return &corev3.TcpKeepalive{
		KeepaliveProbes:   items.OptionalUInt32(k.Probes),
		KeepaliveTime:     wholeSecondsValue(k.IdleTime),
		KeepaliveInterval: wholeSecondsValue(k.Interval),
	}
}

// wholeSecondsValue is the seconds of s, nil when it is not set.
func wholeSecondsValue(s *WholeSeconds) *wrapperspb.UInt32Value {
	if s == nil {
		return nil
	}
	return wrapperspb.UInt32(uint32(*s))
}
