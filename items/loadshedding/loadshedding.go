// Package loadshedding is the `loadShedding` item: two Envoy filters that
// refuse requests at the gateway when the services behind it are in
// trouble, so that the requests that do go through still succeed.
//
// admissionControl (envoy.filters.http.admission_control) keeps the
// success rate of the recent requests and, while it is below a threshold,
// answers a share of new requests 503 itself; adaptiveConcurrency
// (envoy.filters.http.adaptive_concurrency) keeps the number of requests
// in flight under a limit it computes from the latency it measures,
// answering the requests over it 503. Istio has no API for either
// (istio/istio#25991).
package loadshedding

import (
	"fmt"
	"math"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	adaptivev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/adaptive_concurrency/v3"
	admissionv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/admission_control/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "loadShedding"

// The filters' names: Envoy's own (Istio inserts neither).
const (
	AdmissionControlFilter    = "envoy.filters.http.admission_control"
	AdaptiveConcurrencyFilter = "envoy.filters.http.adaptive_concurrency"
)

// Runtime keys of the admission control's settings, so an operator can
// override one at a proxy (ProxyConfig runtimeValues) without an edit.
const runtimePrefix = "globalconfig.load_shedding.admission_control."

// Defaults of admissionControl. Where Envoy has the same default it is
// written out all the same, so that a change of Envoy's defaults never
// changes what a document means.
const (
	// DefaultSamplingWindow is Envoy's: the success rate of the last 30
	// seconds, long enough that a few failures of a quiet service weigh
	// little, short enough to follow an outage within a minute.
	DefaultSamplingWindow = 30 * time.Second
	// DefaultSRThreshold is Envoy's: rejection starts when fewer than 95%
	// of the window's requests succeed.
	DefaultSRThreshold = 95.0
	// DefaultAggression is Envoy's 1: the rejection probability grows in
	// step with the failures (higher values reject sooner and harder).
	DefaultAggression = 1.0
	// DefaultRPSThreshold is 1 request a second, where Envoy's default is
	// 0: with 0, a quiet service with one failed request in the window is
	// refused half of its next requests. A window of the default 30 s
	// then needs 30 requests (on one worker thread) before it rejects any.
	DefaultRPSThreshold = 1
	// DefaultMaxRejectionProbability is Envoy's 80%: some requests always
	// go through, so the success rate can be seen to recover.
	DefaultMaxRejectionProbability = 80.0
)

// Limits of admissionControl.
const (
	// MinSamplingWindow is the shortest window: Envoy keeps whole seconds
	// (it truncates the window), so a shorter one is 0 s.
	MinSamplingWindow = time.Second
	// MinSRThreshold is Envoy's floor: its config factory refuses a
	// success-rate threshold under 1% (a 0% one would divide by zero).
	MinSRThreshold = 1
	// MaxPercent is the ceiling of every percentage (Envoy's Percent).
	MaxPercent = 100
	// MinAggression is the least aggression Envoy uses: it reads a lower
	// value as 1.
	MinAggression = 1
	// MinStatus and MaxStatus bound a success range's statuses: Envoy
	// takes ranges within [100, 600).
	MinStatus, MaxStatus = 100, 599
	// MaxGRPCStatus is the highest gRPC status (UNAUTHENTICATED); Envoy
	// refuses a higher one.
	MaxGRPCStatus = 16
)

// Defaults of adaptiveConcurrency's gradient controller.
const (
	// DefaultSampleAggregatePercentile is Envoy's p50: the latency a
	// concurrency update compares with the minimum.
	DefaultSampleAggregatePercentile = 50.0
	// DefaultMaxConcurrencyLimit is Envoy's 1000 requests in flight.
	DefaultMaxConcurrencyLimit = 1000
	// DefaultConcurrencyUpdateInterval is 100 ms, the value of Envoy's
	// own example (the field has no default there and is required): the
	// limit follows a change of latency within a fraction of a second.
	DefaultConcurrencyUpdateInterval = 100 * time.Millisecond
	// DefaultMinRTTInterval is 60 s: how often the minimum latency is
	// measured again, each time limiting the gateway to minConcurrency
	// requests in flight until requestCount requests are measured. Envoy
	// requires it (it has no default); a minute keeps that brief window
	// rare.
	DefaultMinRTTInterval = 60 * time.Second
	// DefaultRequestCount is Envoy's: 50 requests make one minimum
	// latency measurement.
	DefaultRequestCount = 50
	// DefaultJitter is Envoy's 15%: each measurement starts up to 15% of
	// the interval late, so a fleet of gateways does not measure at once.
	DefaultJitter = 15.0
	// DefaultBuffer is Envoy's 25%: latency up to 25% over the minimum
	// counts as no worse.
	DefaultBuffer = 25.0
	// DefaultMinConcurrency is Envoy's 3 requests in flight while the
	// minimum latency is measured.
	DefaultMinConcurrency = 3
	// MinInterval is the floor of the two intervals: Envoy counts them in
	// whole milliseconds (a shorter one is 0 and it refuses 0).
	MinInterval = time.Millisecond
)

// LoadShedding is the `loadShedding` section.
type LoadShedding struct {
	items.Toggle
	AdmissionControl    *AdmissionControl    `json:"admissionControl" doc:"Rejects a share of requests (503, answered by the gateway) while the recent success rate is below srThreshold (Envoy's admission_control filter)."`
	AdaptiveConcurrency *AdaptiveConcurrency `json:"adaptiveConcurrency" doc:"Limits the requests in flight to what the measured latency says the services can take; requests over the limit are answered 503 by the gateway (Envoy's adaptive_concurrency filter, gradient controller)."`
}

// AdmissionControl is `loadShedding.admissionControl`.
type AdmissionControl struct {
	HTTPSuccess             []StatusRange  `json:"httpSuccess" doc:"HTTP statuses that count as a success, as ranges (default: every status below 500). Envoy's http_success_status."`
	GRPCSuccess             []GRPCStatus   `json:"grpcSuccess" doc:"gRPC statuses that count as a success, by name (default Envoy's: OK, CANCELED, UNKNOWN, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED). Envoy's grpc_success_status."`
	SamplingWindow          *items.Seconds `json:"samplingWindow" doc:"The sliding window the success rate is computed over, in whole seconds, at least 1s (default 30s). Envoy's sampling_window."`
	SRThreshold             *float64       `json:"srThreshold" doc:"Success rate, in percent, under which requests start being rejected, 1 to 100 (default 95). Envoy's sr_threshold."`
	Aggression              *float64       `json:"aggression" doc:"How fast the rejection probability grows as the success rate falls, at least 1 (default 1: in step with the failures). Envoy's aggression."`
	RPSThreshold            *uint32        `json:"rpsThreshold" doc:"Requests a second (averaged over the window, per worker thread) under which nothing is rejected, whatever the success rate (default 1; Envoy's own default is 0). Envoy's rps_threshold."`
	MaxRejectionProbability *float64       `json:"maxRejectionProbability" doc:"The most requests, in percent, ever rejected, 0 to 100 (default 80). Envoy's max_rejection_probability."`
	Shadow                  bool           `json:"shadow" doc:"Measure the success rate (the filter's rq_success and rq_failure statistics) but reject nothing: the rejection probability is held at 0, since Envoy has no shadow mode of its own."`
}

// StatusRange is one entry of httpSuccess: the statuses from `from` to
// `to`, both included.
type StatusRange struct {
	From uint32 `json:"from" doc:"The first status of the range, 100 to 599."`
	To   uint32 `json:"to" doc:"The last status of the range (included), 100 to 599, not below from."`
}

// GRPCStatus is a gRPC status by Envoy's name of it.
type GRPCStatus string

// Values lists the names (Envoy's gRPC status names, as in its access
// log's gRPC status filter).
func (GRPCStatus) Values() []string {
	return items.EnumNames(accesslogv3.GrpcStatusFilter_Status_value)
}

// AdaptiveConcurrency is `loadShedding.adaptiveConcurrency`.
type AdaptiveConcurrency struct {
	SampleAggregatePercentile *float64       `json:"sampleAggregatePercentile" doc:"The latency percentile of each update's requests that is compared with the minimum, 0 to 100 (default 50). Envoy's sample_aggregate_percentile."`
	MaxConcurrencyLimit       *uint32        `json:"maxConcurrencyLimit" doc:"The highest the concurrency limit goes, at least 1 (default 1000). Envoy's max_concurrency_limit."`
	ConcurrencyUpdateInterval *items.Seconds `json:"concurrencyUpdateInterval" doc:"How often the limit is recomputed from the latency of the requests since the last update, at least 1ms (default 100ms). Envoy's concurrency_update_interval."`
	MinRTT                    *MinRTT        `json:"minRTT" doc:"How the minimum latency, the baseline of every update, is measured: periodically, with the gateway held to minConcurrency requests in flight until requestCount requests are measured."`
}

// MinRTT is `loadShedding.adaptiveConcurrency.minRTT`.
type MinRTT struct {
	Interval       *items.Seconds `json:"interval" doc:"How often the minimum latency is measured again, at least 1ms (default 60s). Envoy's min_rtt_calc_params.interval."`
	RequestCount   *uint32        `json:"requestCount" doc:"Requests each measurement takes, at least 1 (default 50). Envoy's request_count."`
	Jitter         *float64       `json:"jitter" doc:"Random delay of each measurement's start, in percent of interval, 0 to 100 (default 15). Envoy's jitter."`
	Buffer         *float64       `json:"buffer" doc:"Latency above the minimum, in percent of it, still taken as no worse, 0 to 100 (default 25). Envoy's buffer."`
	MinConcurrency *uint32        `json:"minConcurrency" doc:"The concurrency limit while the minimum latency is measured, at least 1 (default 3). Envoy's min_concurrency."`
}

var (
	_ items.Item   = (*LoadShedding)(nil)
	_ items.Ranger = (*LoadShedding)(nil)
	_ items.Enum   = GRPCStatus("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Load shedding: admission control (reject a share of requests while the services' success rate is low) and adaptive concurrency (a limit on requests in flight from measured latency).",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             9,
		Purpose:          "sheds load after the policy filters and the body buffer, so it measures and protects the services alone",
		Where:            "HTTP filters; outbound, they shed the requests the workload sends when the services it calls fail or slow down",
		EnabledByDefault: true,
		New:              func() items.Item { return &LoadShedding{} },
	})
}

// Ranges implements items.Ranger.
func (*LoadShedding) Ranges() []items.Range {
	window := items.DurationRange("admissionControl.samplingWindow", MinSamplingWindow, 0)
	window.Why = "Envoy keeps whole seconds, so a shorter window is 0 s"
	interval := func(path string) items.Range {
		r := items.DurationRange(path, MinInterval, 0)
		r.Why = "Envoy counts it in whole milliseconds"
		return r
	}
	percent := func(path string) items.Range { return items.Range{Path: path, Min: 0, Max: MaxPercent} }
	status := func(path string) items.Range {
		return items.Range{Path: path, Min: MinStatus, Max: MaxStatus, Why: "the statuses Envoy takes in a success range"}
	}
	return []items.Range{
		status("admissionControl.httpSuccess[].from"),
		status("admissionControl.httpSuccess[].to"),
		window,
		{Path: "admissionControl.srThreshold", Min: MinSRThreshold, Max: MaxPercent, Why: "Envoy refuses a threshold under 1%"},
		{Path: "admissionControl.aggression", Min: MinAggression, Max: math.Inf(1), Why: "Envoy reads a lower aggression as 1"},
		percent("admissionControl.maxRejectionProbability"),
		percent("adaptiveConcurrency.sampleAggregatePercentile"),
		items.AtLeast("adaptiveConcurrency.maxConcurrencyLimit", 1),
		interval("adaptiveConcurrency.concurrencyUpdateInterval"),
		interval("adaptiveConcurrency.minRTT.interval"),
		items.AtLeast("adaptiveConcurrency.minRTT.requestCount", 1),
		percent("adaptiveConcurrency.minRTT.jitter"),
		percent("adaptiveConcurrency.minRTT.buffer"),
		items.AtLeast("adaptiveConcurrency.minRTT.minConcurrency", 1),
	}
}

// Validate implements items.Item.
func (l *LoadShedding) Validate() error {
	var p items.Problems
	items.RequireSomething(&p, l)
	items.CheckRanges(&p, l)
	if a := l.AdmissionControl; a != nil {
		for i, r := range a.HTTPSuccess {
			if r.From > r.To && r.To >= MinStatus && r.From <= MaxStatus {
				p.Addf(fmt.Sprintf("admissionControl.httpSuccess[%d]", i), "from %d is above to %d, so the range holds no status; give the lower status as from", r.From, r.To)
			}
		}
		seen := map[GRPCStatus]int{}
		for i, s := range a.GRPCSuccess {
			if j, dup := seen[s]; dup {
				p.Addf(fmt.Sprintf("admissionControl.grpcSuccess[%d]", i), "%s is listed twice (also grpcSuccess[%d])", s, j)
			} else {
				seen[s] = i
			}
		}
		if a.Shadow && a.MaxRejectionProbability != nil {
			p.Addf("admissionControl.maxRejectionProbability", "give either shadow or maxRejectionProbability, not both: shadow holds the rejection probability at 0")
		}
	}
	return p.Err()
}

// Build implements items.Item. Both filters go to the front of the chain
// in this item's slot, one after the other: the one inserted last runs
// first, so admission control comes before adaptive concurrency. That way
// adaptive concurrency, next to the router, times only what the services
// take (admission control's fast local 503s would otherwise pass it as
// latency samples and raise the limit); the price is that admission
// control counts adaptive concurrency's 503s as failures, which the
// reference says.
func (l *LoadShedding) Build() ([]envoyfilter.Patch, error) {
	var patches []envoyfilter.Patch
	if c := l.AdaptiveConcurrency; c != nil {
		p, err := envoyfilter.InsertHTTPFilter(AdaptiveConcurrencyFilter, c.config())
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if a := l.AdmissionControl; a != nil {
		p, err := envoyfilter.InsertHTTPFilter(AdmissionControlFilter, a.config())
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}

// config is the admission control filter's configuration.
func (a *AdmissionControl) config() *admissionv3.AdmissionControl {
	criteria := &admissionv3.AdmissionControl_SuccessCriteria{}
	if len(a.HTTPSuccess) > 0 {
		h := &admissionv3.AdmissionControl_SuccessCriteria_HttpCriteria{}
		for _, r := range a.HTTPSuccess {
			// Envoy's ranges end before their end; ours include `to`.
			h.HttpSuccessStatus = append(h.HttpSuccessStatus, &typev3.Int32Range{Start: int32(r.From), End: int32(r.To) + 1})
		}
		criteria.HttpCriteria = h
	}
	if len(a.GRPCSuccess) > 0 {
		g := &admissionv3.AdmissionControl_SuccessCriteria_GrpcCriteria{}
		for _, s := range a.GRPCSuccess {
			code, ok := accesslogv3.GrpcStatusFilter_Status_value[string(s)]
			if !ok {
				// Validation refused it; Envoy refuses a code above 16.
				code = MaxGRPCStatus + 1
			}
			g.GrpcSuccessStatus = append(g.GrpcSuccessStatus, uint32(code))
		}
		criteria.GrpcCriteria = g
	}
	maxReject := orFloat(a.MaxRejectionProbability, DefaultMaxRejectionProbability)
	if a.Shadow {
		maxReject = 0
	}
	return &admissionv3.AdmissionControl{
		EvaluationCriteria:      &admissionv3.AdmissionControl_SuccessCriteria_{SuccessCriteria: criteria},
		SamplingWindow:          durationpb.New(orDuration(a.SamplingWindow, DefaultSamplingWindow)),
		SrThreshold:             runtimePercent(orFloat(a.SRThreshold, DefaultSRThreshold), "sr_threshold"),
		Aggression:              &corev3.RuntimeDouble{DefaultValue: orFloat(a.Aggression, DefaultAggression), RuntimeKey: runtimePrefix + "aggression"},
		RpsThreshold:            &corev3.RuntimeUInt32{DefaultValue: orUint(a.RPSThreshold, DefaultRPSThreshold), RuntimeKey: runtimePrefix + "rps_threshold"},
		MaxRejectionProbability: runtimePercent(maxReject, "max_rejection_probability"),
	}
}

// config is the adaptive concurrency filter's configuration.
func (c *AdaptiveConcurrency) config() *adaptivev3.AdaptiveConcurrency {
	m := c.MinRTT
	if m == nil {
		m = &MinRTT{}
	}
	return &adaptivev3.AdaptiveConcurrency{
		ConcurrencyControllerConfig: &adaptivev3.AdaptiveConcurrency_GradientControllerConfig{GradientControllerConfig: &adaptivev3.GradientControllerConfig{
			SampleAggregatePercentile: &typev3.Percent{Value: orFloat(c.SampleAggregatePercentile, DefaultSampleAggregatePercentile)},
			ConcurrencyLimitParams: &adaptivev3.GradientControllerConfig_ConcurrencyLimitCalculationParams{
				MaxConcurrencyLimit:       wrapperspb.UInt32(orUint(c.MaxConcurrencyLimit, DefaultMaxConcurrencyLimit)),
				ConcurrencyUpdateInterval: durationpb.New(orDuration(c.ConcurrencyUpdateInterval, DefaultConcurrencyUpdateInterval)),
			},
			MinRttCalcParams: &adaptivev3.GradientControllerConfig_MinimumRTTCalculationParams{
				Interval:       durationpb.New(orDuration(m.Interval, DefaultMinRTTInterval)),
				RequestCount:   wrapperspb.UInt32(orUint(m.RequestCount, DefaultRequestCount)),
				Jitter:         &typev3.Percent{Value: orFloat(m.Jitter, DefaultJitter)},
				MinConcurrency: wrapperspb.UInt32(orUint(m.MinConcurrency, DefaultMinConcurrency)),
				Buffer:         &typev3.Percent{Value: orFloat(m.Buffer, DefaultBuffer)},
			},
		}},
	}
}

// runtimePercent is a percentage Envoy reads from the runtime key when an
// operator sets it there, value otherwise.
func runtimePercent(value float64, key string) *corev3.RuntimePercent {
	return &corev3.RuntimePercent{DefaultValue: &typev3.Percent{Value: value}, RuntimeKey: runtimePrefix + key}
}

func orFloat(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

func orUint(v *uint32, def uint32) uint32 {
	if v == nil {
		return def
	}
	return *v
}

func orDuration(v *items.Seconds, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	return v.Duration
}
