// Package faultinjection is the `faultInjection` item: Envoy's fault filter
// at the gateways as a gateway-wide chaos-testing knob: a fixed delay for a
// percentage of requests and/or an abort with an HTTP status for a
// percentage, in the keys of an Istio VirtualService's fault (Envoy
// Gateway's BackendTrafficPolicy.faultInjection offers the same).
//
// istiod already puts a fault filter named envoy.filters.http.fault into
// every connection manager, which carries the faults of VirtualService
// routes in their typed_per_filter_config under that name. This item's
// filter has a name of its own (globalconfig.fault), and Envoy looks a
// filter's per-route configuration up by the filter's name first and, when
// none is there, by its extension's name (envoy.filters.http.fault): without
// a configuration of its own on every route, this filter would also run a
// VirtualService's fault, doubling its delay and abort. So the item merges
// its configuration into every route under its own name, and reads its own
// runtime keys, so Istio's fault filter and its runtime overrides are left
// as they are.
package faultinjection

import (
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "faultInjection"

// Filter is the name of the HTTP filter the item inserts, and the key of its
// per-route configuration. It must not be envoy.filters.http.fault, the
// name of istiod's own fault filter.
const Filter = "globalconfig.fault"

// RuntimePrefix prefixes the runtime keys the filter reads, so that the
// runtime overrides of istiod's fault filter (fault.http.*, Envoy's
// defaults) don't reach this one.
const RuntimePrefix = "globalconfig.fault."

// Limits. Envoy's (envoy.extensions.filters.http.fault.v3 and
// envoy.extensions.filters.common.fault.v3): an abort's http_status in
// [200, 600); a fixed delay greater than 0, which Envoy counts in whole
// milliseconds (so 1ms is the least delay there is; Istio's floor too).
// A percentage is 0 to 100, Istio's range: Envoy takes it as a fraction of
// a million (Istio's translation), and reads more than all as all.
const (
	MinHTTPStatus     = 200
	MaxHTTPStatus     = 599
	MinFixedDelay     = time.Millisecond
	MinPercentage     = 0
	MaxPercentage     = 100
	DefaultPercentage = 100
	// perMillion is the FractionalPercent denominator the percentages are
	// rendered with: 0.0001% steps, as Istio renders a VirtualService's.
	perMillion = 10000
)

// FaultInjection is the `faultInjection` section.
type FaultInjection struct {
	items.Toggle
	Delay *Delay `json:"delay" doc:"Delays requests before they go on to the service (Envoy's delay). With abort, a request picked for both is delayed, then aborted."`
	Abort *Abort `json:"abort" doc:"Answers requests at the gateway with an HTTP status instead of sending them to the service (Envoy's abort)."`
}

// Delay is the delay fault, in the keys of Istio's HTTPFaultInjection.Delay.
type Delay struct {
	FixedDelay *items.Millis `json:"fixedDelay" doc:"Required: how long each picked request waits before it goes on, such as 2s; a bare integer is milliseconds, at least 1ms (Envoy counts whole milliseconds; fixed_delay)."`
	Percentage *Percentage   `json:"percentage" doc:"The share of requests delayed, {value: 0 to 100} (default 100: every request; Envoy's percentage)."`
}

// Abort is the abort fault, in the keys of Istio's HTTPFaultInjection.Abort.
type Abort struct {
	HTTPStatus *uint32     `json:"httpStatus" doc:"Required: the status picked requests are answered with, 200 to 599 (Envoy's http_status)."`
	Percentage *Percentage `json:"percentage" doc:"The share of requests aborted, {value: 0 to 100} (default 100: every request; Envoy's percentage)."`
}

// Percentage is Istio's Percent: a share of requests in percent.
type Percentage struct {
	Value float64 `json:"value" doc:"Percent of requests, 0 to 100, in steps of 0.0001."`
}

var (
	_ items.Item           = (*FaultInjection)(nil)
	_ items.Ranger         = (*FaultInjection)(nil)
	_ items.ContextLimiter = (*FaultInjection)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Gateway-wide fault injection for chaos testing: a fixed delay and/or an abort with an HTTP status, each for a percentage of requests (an Istio VirtualService's fault, for every route).",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             11,
		Purpose:          "delays or aborts, as a failing service would, only the requests every refusing filter let through, and after the load shedding, so injected faults don't make it shed real traffic",
		Where:            "an HTTP filter, and its configuration merged into every route that goes to a service under the filter's own name, so that it never runs a VirtualService's fault (istiod's envoy.filters.http.fault keeps those)",
		EnabledByDefault: true,
		New:              New,
		Provides: []items.Capability{
			{Envoy: "envoy.extensions.filters.http.fault.v3.HTTPFault.delay", Setting: "delay"},
			{Envoy: "envoy.extensions.filters.http.fault.v3.HTTPFault.abort", Setting: "abort"},
		},
	})
}

// New returns the defaults: no fault (a present, enabled section needs
// delay or abort).
func New() items.Item { return &FaultInjection{} }

// Ranges implements items.Ranger.
func (*FaultInjection) Ranges() []items.Range {
	delay := items.DurationRange("delay.fixedDelay", MinFixedDelay, 0)
	delay.Why = "Envoy counts the delay in whole milliseconds"
	status := items.Range{Path: "abort.httpStatus", Min: MinHTTPStatus, Max: MaxHTTPStatus, Why: "Envoy's range of HTTP statuses"}
	var out []items.Range
	out = append(out, delay, status)
	for _, p := range []string{"delay.percentage.value", "abort.percentage.value"} {
		out = append(out, items.Range{Path: p, Min: MinPercentage, Max: MaxPercentage, Why: "a percentage of requests"})
	}
	return out
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*FaultInjection) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "it injects faults into what clients outside the mesh send through the gateways; between services a VirtualService's fault says it per route"}}
}

// Validate implements items.Item.
func (f *FaultInjection) Validate() error {
	var p items.Problems
	if f.Enable && f.Delay == nil && f.Abort == nil {
		p.Addf("", "sets nothing: give delay or abort (or both), e.g. delay: {fixedDelay: 2s, percentage: {value: 10}}")
	}
	if f.Enable && f.Delay != nil && f.Delay.FixedDelay == nil {
		p.Addf("delay.fixedDelay", "is required, e.g. 2s")
	}
	if f.Enable && f.Abort != nil && f.Abort.HTTPStatus == nil {
		p.Addf("abort.httpStatus", "is required, e.g. 503")
	}
	items.CheckRanges(&p, f)
	return p.Err()
}

func percent(p *Percentage) *typev3.FractionalPercent {
	v := float64(DefaultPercentage)
	if p != nil {
		v = p.Value
	}
	return &typev3.FractionalPercent{Numerator: uint32(v*perMillion + 0.5), Denominator: typev3.FractionalPercent_MILLION}
}

// config is the filter's configuration, the same at the filter and in each
// route.
func (f *FaultInjection) config() *faultv3.HTTPFault {
	cfg := &faultv3.HTTPFault{
		DelayPercentRuntime:    RuntimePrefix + "delay.fixed_delay_percent",
		DelayDurationRuntime:   RuntimePrefix + "delay.fixed_duration_ms",
		AbortPercentRuntime:    RuntimePrefix + "abort.abort_percent",
		AbortHttpStatusRuntime: RuntimePrefix + "abort.http_status",
		AbortGrpcStatusRuntime: RuntimePrefix + "abort.grpc_status",
		MaxActiveFaultsRuntime: RuntimePrefix + "max_active_faults",
	}
	// A fault without its required key (refused by Validate) is rendered
	// without it too, as Envoy would see it: it refuses a delay or an abort
	// without its kind.
	if f.Delay != nil {
		cfg.Delay = &commonfaultv3.FaultDelay{Percentage: percent(f.Delay.Percentage)}
		if f.Delay.FixedDelay != nil {
			cfg.Delay.FaultDelaySecifier = &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(f.Delay.FixedDelay.Duration)}
		}
	}
	if f.Abort != nil {
		cfg.Abort = &faultv3.FaultAbort{Percentage: percent(f.Abort.Percentage)}
		if f.Abort.HTTPStatus != nil {
			cfg.Abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: *f.Abort.HTTPStatus}
		}
	}
	return cfg
}

// Build implements items.Item: the filter, and its configuration merged
// into every route under the filter's name, so Envoy never falls back to
// istiod's per-route fault (keyed envoy.filters.http.fault) for it.
func (f *FaultInjection) Build() ([]envoyfilter.Patch, error) {
	filter, err := envoyfilter.InsertHTTPFilter(Filter, f.config())
	if err != nil {
		return nil, err
	}
	perRoute, err := envoyfilter.Any(f.config())
	if err != nil {
		return nil, err
	}
	route := envoyfilter.MergeRoutes(&routev3.Route{TypedPerFilterConfig: map[string]*anypb.Any{Filter: perRoute}})
	return []envoyfilter.Patch{filter, route}, nil
}
