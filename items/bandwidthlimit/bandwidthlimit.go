// Package bandwidthlimit is the `bandwidthLimit` item: Envoy's
// bandwidth_limit filter at the gateways, which slows the bodies of
// responses (and, if asked, of requests) to a rate in KiB/s, with a
// token bucket of its own for every route.
package bandwidthlimit

import (
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	bandwidthv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/bandwidth_limit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "bandwidthLimit"

// Filter is the name of the HTTP filter the item inserts; the routes'
// per-route configurations are keyed by it.
const Filter = "globalconfig.bandwidth_limit"

// StatPrefix is the filter's statistics prefix (Envoy requires one):
// its counters are globalconfig.http_bandwidth_limit.*.
const StatPrefix = "globalconfig"

// Limits from Envoy's BandwidthLimit proto (envoy.extensions.filters.http.
// bandwidth_limit.v3): limit_kbps at least 1, fill_interval inside
// [20ms, 1s]; Envoy's default fill interval is 50ms.
const (
	MinLimitKbps        = 1
	MinFillInterval     = 20 * time.Millisecond
	MaxFillInterval     = time.Second
	DefaultFillInterval = 50 * time.Millisecond
)

// BandwidthLimit is the `bandwidthLimit` section.
type BandwidthLimit struct {
	items.Toggle
	LimitKbps        *uint64      `json:"limitKbps" doc:"Required: the rate each route's bodies are slowed to, in KiB per second (1024 bytes a second, not kilobits; Envoy's limit_kbps), at least 1. Every request and response of one route shares it, and the first second's worth passes at once."`
	Direction        Direction    `json:"direction" doc:"Which bodies are slowed: RESPONSE (default: what clients download), REQUEST (what they upload) or REQUEST_AND_RESPONSE (both, sharing one limit); Envoy's enable_mode. Envoy's DISABLED is enable: false."`
	FillInterval     items.Millis `json:"fillInterval" doc:"How often the limit's tokens are refilled and held data is sent on, 20ms to 1s; a bare integer is milliseconds (default 50ms, Envoy's; fill_interval). Longer intervals send larger bursts less often."`
	ResponseTrailers bool         `json:"responseTrailers" doc:"Add Envoy's delay trailers (bandwidth-response-delay-ms, bandwidth-response-filter-delay-ms and their request- twins) to limited responses (enable_response_trailers): HTTP/2 and HTTP/3 clients get them; HTTP/1 clients only on chunked responses where the connection manager enables HTTP/1 trailers. Not with direction REQUEST."`
}

var (
	_ items.Item           = (*BandwidthLimit)(nil)
	_ items.Ranger         = (*BandwidthLimit)(nil)
	_ items.ContextLimiter = (*BandwidthLimit)(nil)
	_ items.Enum           = Direction("")
)

// Direction is which bodies the filter slows, by Envoy's EnableMode names.
// DISABLED is left out: it says what `enable: false` says.
type Direction string

// Values lists Envoy's names but DISABLED.
func (Direction) Values() []string {
	var out []string
	for _, n := range items.EnumNames(bandwidthv3.BandwidthLimit_EnableMode_value) {
		if n != bandwidthv3.BandwidthLimit_DISABLED.String() {
			out = append(out, n)
		}
	}
	return out
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A bandwidth limit per route at the gateways, in KiB/s, on response bodies, request bodies or both.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             10,
		Purpose:          "slows the bodies of what the refusing filters let through, so nothing refused is counted or slowed, and sees responses before the compressors (it counts uncompressed bytes)",
		Where:            "an HTTP filter, and its per-route configuration merged into every route that goes to a service, so each route has a limit of its own",
		EnabledByDefault: true,
		New:              New,
		Provides: []items.Capability{
			{Envoy: "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit.limit_kbps", Setting: "limitKbps"},
		},
	})
}

// New returns the defaults. limitKbps has none: it is required.
func New() items.Item {
	return &BandwidthLimit{Direction: "RESPONSE", FillInterval: items.Millis{Duration: DefaultFillInterval}}
}

// Ranges implements items.Ranger.
func (*BandwidthLimit) Ranges() []items.Range {
	limit := items.AtLeast("limitKbps", MinLimitKbps)
	limit.Why = "Envoy's least limit, in KiB/s"
	fill := items.DurationRange("fillInterval", MinFillInterval, MaxFillInterval)
	fill.Why = "Envoy's range: shorter refills are too aggressive"
	return []items.Range{limit, fill}
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*BandwidthLimit) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "it limits what clients outside the mesh download and upload through the gateways; in a sidecar it would slow the calls between services"}}
}

// Validate implements items.Item.
func (b *BandwidthLimit) Validate() error {
	var p items.Problems
	if b.Enable && b.LimitKbps == nil {
		p.Addf("limitKbps", "is required, e.g. 1024 (1 MiB a second)")
	}
	if b.ResponseTrailers && b.Direction == "REQUEST" {
		p.Addf("responseTrailers", "needs direction RESPONSE or REQUEST_AND_RESPONSE: Envoy adds the trailers only to limited responses")
	}
	items.CheckRanges(&p, b)
	return p.Err()
}

// config is the filter's configuration, the same at the filter (for
// requests no route of a service takes) and in each route.
func (b *BandwidthLimit) config() *bandwidthv3.BandwidthLimit {
	return &bandwidthv3.BandwidthLimit{
		StatPrefix:             StatPrefix,
		EnableMode:             bandwidthv3.BandwidthLimit_EnableMode(bandwidthv3.BandwidthLimit_EnableMode_value[string(b.Direction)]),
		LimitKbps:              wrapperspb.UInt64(*b.LimitKbps),
		FillInterval:           durationpb.New(b.FillInterval.Duration),
		EnableResponseTrailers: b.ResponseTrailers,
	}
}

// Build implements items.Item: the filter, and its configuration merged
// into every route, so that each route gets a token bucket of its own
// (Envoy makes one per configuration; the filter's own is shared by every
// route of the connection manager).
func (b *BandwidthLimit) Build() ([]envoyfilter.Patch, error) {
	filter, err := envoyfilter.InsertHTTPFilter(Filter, b.config())
	if err != nil {
		return nil, err
	}
	perRoute, err := envoyfilter.Any(b.config())
	if err != nil {
		return nil, err
	}
	route := envoyfilter.MergeRoutes(&routev3.Route{TypedPerFilterConfig: map[string]*anypb.Any{Filter: perRoute}})
	return []envoyfilter.Patch{filter, route}, nil
}
