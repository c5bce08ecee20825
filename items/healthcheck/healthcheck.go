// Package healthcheck is the `healthCheck` item: Envoy's health check filter
// (envoy.filters.http.health_check) at the gateways, so that a cloud load
// balancer that can only probe the traffic port gets a health answer there.
//
// Two modes. By default the gateway answers the health paths itself: 200
// while it runs, 503 once Envoy fails its health checks (it is draining:
// the admin's POST /healthcheck/fail). With passThrough, a health check goes
// on to the service its route names, and the service's status is the
// answer; with cacheTime, the filter repeats the last answer to further
// checks for that long instead of asking the service again.
//
// Envoy's filter matches requests by header matchers, all of which must
// match, and matches every request when it has none. So the item requires
// its paths, and matches them with one regex on :path (the path whole, the
// query string aside), which must fit Envoy's RE2 program size.
package healthcheck

import (
	"regexp"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "healthCheck"

// Filter is the name of the HTTP filter the item inserts: a name of its own,
// so that an EnvoyFilter of a team that inserts Envoy's health check under
// its extension name is never matched or replaced by it.
const Filter = "globalconfig.health_check"

// Limits. Envoy counts cache_time in whole milliseconds (a cache time under
// 1ms is no cache), and refuses a cache time without pass_through_mode
// ("cache_time_ms must not be set when path_through_mode is disabled").
const MinCacheTime = time.Millisecond

// HealthCheck is the `healthCheck` section.
type HealthCheck struct {
	items.Toggle
	Paths       []string      `json:"paths" doc:"Required: the request paths answered as health checks, e.g. [/healthz/gateway]; each absolute, matched whole, with any query string (/healthz?x=1 is /healthz), on every host. Together they must fit one regex of Envoy's (RE2 program size at most 100): about 85 characters of paths, prefixes they share counted once."`
	PassThrough bool          `json:"passThrough" doc:"false (default): the gateway answers the paths itself, 200 while it runs, 503 once it fails its health checks (draining); the services never see them. true: a health check goes on to the service its route names, and the service's status is the answer (pass_through_mode)."`
	CacheTime   *items.Millis `json:"cacheTime" doc:"Only with passThrough: for how long the last answer of the service is repeated to further health checks, without asking it, such as 5s; at least 1ms (Envoy counts whole milliseconds; cache_time); a bare integer is milliseconds. Left out: every check goes to the service."`
}

var (
	_ items.Item           = (*HealthCheck)(nil)
	_ items.Ranger         = (*HealthCheck)(nil)
	_ items.Texter         = (*HealthCheck)(nil)
	_ items.ContextLimiter = (*HealthCheck)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Health checks answered at the gateways' traffic ports (Envoy's health_check filter): by the gateway itself, 200 while it runs and 503 once it drains, or passed through to the service, with its last answer cached.",
		Stage:            envoyfilter.StageCompression,
		Slot:             3,
		Purpose:          "answers load balancers' health checks behind only the compressors, before any filter that refuses requests (error pages, auth, address lists, rate limits, load shedding, faults) can refuse or slow one",
		Where:            "an HTTP filter at the front of every HTTP connection manager of the gateways, after the compressors; requests to the health paths are answered there (or passed on to their service, whose last answer it may repeat)",
		EnabledByDefault: true,
		New:              New,
		Provides: []items.Capability{
			{Envoy: "envoy.extensions.filters.http.health_check.v3.HealthCheck.headers", Setting: "paths"},
			{Envoy: "envoy.extensions.filters.http.health_check.v3.HealthCheck.pass_through_mode", Setting: "passThrough"},
			{Envoy: "envoy.extensions.filters.http.health_check.v3.HealthCheck.cache_time", Setting: "cacheTime"},
		},
	})
}

// New returns the defaults: the gateway answers itself; paths is required.
func New() items.Item { return &HealthCheck{} }

// Ranges implements items.Ranger.
func (*HealthCheck) Ranges() []items.Range {
	r := items.DurationRange("cacheTime", MinCacheTime, 0)
	r.Why = "Envoy counts the cache time in whole milliseconds"
	return []items.Range{r}
}

// Texts implements items.Texter: each path is a URL path (absolute, no
// query or fragment).
func (*HealthCheck) Texts() []items.Text {
	return []items.Text{{Path: "paths[]", Kind: items.TextURLPath}}
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*HealthCheck) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "it answers the health checks of load balancers in front of the gateways; a workload's health is its own readiness probe, which Istio's sidecar passes on"}}
}

// Validate implements items.Item.
func (h *HealthCheck) Validate() error {
	var p items.Problems
	if h.Enable && len(h.Paths) == 0 {
		p.Addf("paths", "is required: the paths a load balancer probes, e.g. [/healthz/gateway]")
	}
	// Envoy refuses a cache time of a whole millisecond or more without
	// pass-through (a shorter one, which it reads as none, is out of range).
	if h.CacheTime != nil && !h.PassThrough && h.CacheTime.Duration >= MinCacheTime {
		p.Addf("cacheTime", "is only for passThrough: true (Envoy refuses a cache time when the gateway answers itself: there is no service's answer to repeat); remove it, or set passThrough: true")
	}
	items.CheckRanges(&p, h)
	if len(h.Paths) > 0 && pathsValid(h.Paths) {
		size, err := re2.CheckAll(pathRegex(h.Paths))
		switch {
		case err != nil:
			p.Addf("paths", "Envoy's RE2 refuses the regex built from them: %v", err)
		case size > re2.MaxProgramSize:
			p.Addf("paths", "are too long together: the regex that matches them has an RE2 program size of %d, over Envoy's limit of %d (re2.max_program_size), so no gateway would load it; give fewer or shorter paths", size, re2.MaxProgramSize)
		}
	}
	return p.Err()
}

// pathsValid says whether every path passes the URL path rule (the document
// reports those that don't): only then is the regex's size worth a problem.
func pathsValid(paths []string) bool {
	for _, v := range paths {
		var p items.Problems
		items.CheckURLPath(&p, "", v)
		if p.Err() != nil {
			return false
		}
	}
	return true
}

// pathRegex is the regex Envoy matches :path with: one of the paths, whole,
// with or without a query string. Duplicates are listed once.
func pathRegex(paths []string) string {
	seen := map[string]bool{}
	var alts []string
	for _, v := range paths {
		if seen[v] {
			continue
		}
		seen[v] = true
		alts = append(alts, regexp.QuoteMeta(v))
	}
	return "(?:" + strings.Join(alts, "|") + `)(?:\?.*)?`
}

// config is the filter's configuration. A section Validate refused is
// rendered as Envoy would see it: without paths, no header matcher (Envoy
// then takes every request for a health check), and a cache time with or
// without passThrough.
func (h *HealthCheck) config() *healthcheckv3.HealthCheck {
	cfg := &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(h.PassThrough)}
	if len(h.Paths) > 0 {
		cfg.Headers = []*routev3.HeaderMatcher{{
			Name: ":path",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: pathRegex(h.Paths)}},
			}},
		}}
	}
	if h.CacheTime != nil {
		cfg.CacheTime = durationpb.New(h.CacheTime.Duration)
	}
	return cfg
}

// Build implements items.Item: the filter, at the front of the chain after
// the compressors.
func (h *HealthCheck) Build() ([]envoyfilter.Patch, error) {
	p, err := envoyfilter.InsertHTTPFilter(Filter, h.config())
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
