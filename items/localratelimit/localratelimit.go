// Package localratelimit is the `localRateLimit` item: token buckets kept
// by each proxy. A global bucket counts every request; keyed buckets count
// the requests of each client address (perClient) or of each value of a
// request header (perHeader), as ingress-nginx's limit_req zones keyed by
// $binary_remote_addr did; scoped limits (limits) count only the requests
// their match selects (requestmatch, the vocabulary globalRateLimit
// shares). Requests over a limit are answered 429, or the
// statusCode given. The filterEnabled and filterEnforced percentages let a
// limit run in shadow mode (counted, not enforced) before it is rolled out.
package localratelimit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/requestmatch"
)

// Name is the item's key in the document.
const (
	Name = "localRateLimit"
	// StatPrefix names the filter's statistics (http_local_rate_limiter.*).
	StatPrefix = "http_local_rate_limiter"
	// MinFillInterval is Envoy's floor for a token bucket's fill interval,
	// the global one's and each descriptor's alike.
	MinFillInterval = 50 * time.Millisecond
	// percentScale turns a percentage with up to four decimals into
	// Envoy's per-million fraction.
	percentScale = 10000
)

// Defaults and limits of statusCode, the keyed limits and responseHeaders.
const (
	// DefaultStatusCode is what limited requests are answered: 429 Too
	// Many Requests, Envoy's default too (ingress-nginx answered 503).
	DefaultStatusCode = 429
	// MinStatusCode is the lowest code Envoy answers as given: below 400
	// it answers 429 instead.
	MinStatusCode = 400
	// DefaultMaxKeys is how many keys (client addresses, header values)
	// each keyed limit remembers by default. Envoy's own default, 20, would
	// make a busy gateway forget a client between two of its requests and
	// give it a full bucket again.
	DefaultMaxKeys = 10000
	// MaxMaxKeys bounds maxKeys: each remembered key costs about 1 KiB
	// (plus twice a header value's length), per keyed limit and per HTTP
	// filter chain.
	MaxMaxKeys = 100000
	// MaxHeaderLimits bounds perHeader: every entry keeps its own list of
	// up to maxKeys values, and every request is matched against each.
	MaxHeaderLimits = 10
	// MaxResponseHeaders is Envoy's limit on response_headers_to_add.
	MaxResponseHeaders = 10
	// MaxLimits bounds limits. Envoy sets no bound of its own on the
	// filter's rate_limits or descriptors (their protos have no
	// max_items), but every request runs every limit's actions and is
	// looked up among the descriptors, so each limit costs every request:
	// 64, as globalRateLimit's limits, keeps that cost small (16 limits
	// measured in test/proxy BenchmarkScopedLocalLimit).
	MaxLimits = 64
	// MaxKeyedLimits bounds the keyed limits together (perClient, each
	// perHeader entry and each limit with perClient or perHeader): each
	// remembers up to maxKeys keys of about 1 KiB, per HTTP filter chain,
	// so 16 of them at the default maxKeys may hold 160 MiB.
	MaxKeyedLimits = 16
)

// Descriptor keys of the scoped limits (limits): the limit's own entry,
// with its name and a hash of its definition, comes first, then the
// match's (requestmatch.Entries), then the key's.
const (
	LimitKey       = "limit"
	LimitHeaderKey = "header"
)

// Descriptor keys of the keyed limits. RemoteAddressKey is the key Envoy's
// remote_address action writes; a header limit's key is HeaderKeyPrefix
// and the header's name, so two limits never share a key.
const (
	RemoteAddressKey = "remote_address"
	HeaderKeyPrefix  = "header:"
)

// Defaults of a keyed bucket's optional keys, the global bucket's too.
const (
	defaultTokensPerFill = 1
	defaultFillInterval  = time.Second
)

// LocalRateLimit is the `localRateLimit` section.
type LocalRateLimit struct {
	items.Toggle
	MaxTokens       *uint32                      `json:"maxTokens" doc:"The global bucket's size, the burst allowed for all requests together, at least 1. Required unless perClient or perHeader is given; without it only the keyed limits apply."`
	TokensPerFill   uint32                       `json:"tokensPerFill" doc:"Tokens added to the global bucket every fillInterval (default 1): the two make the refill rate."`
	FillInterval    items.Seconds                `json:"fillInterval" doc:"How often tokens are added to the global bucket, at least 50ms (default 1s)."`
	PerClient       *Bucket                      `json:"perClient" doc:"One bucket per client address, the one the connection manager trusts (see clientIP and headers.xff)."`
	PerHeader       []HeaderLimit                `json:"perHeader" doc:"One bucket per value of a request header, e.g. x-api-key; requests without the header are not counted here. At most 10."`
	MaxKeys         uint32                       `json:"maxKeys" doc:"How many keys (client addresses, header values) each keyed limit remembers, least recently used forgotten first, 1 to 100000 (default 10000; Envoy's max_dynamic_descriptors)."`
	StatusCode      uint32                       `json:"statusCode" doc:"The status limited requests are answered, 400 to 599 as Envoy knows them (default 429)."`
	ResponseHeaders map[string]items.HeaderValue `json:"responseHeaders" doc:"Headers added to limited responses, e.g. x-local-rate-limit: \"true\"; at most 10."`
	FilterEnabled   float64                      `json:"filterEnabled" doc:"Percentage of requests the limits are checked for (default 100)."`
	FilterEnforced  float64                      `json:"filterEnforced" doc:"Percentage of checked requests over a limit that are refused (default 100; 0 is shadow mode: counted, not refused)."`
	Limits          map[string]Limit             `json:"limits" doc:"Scoped limits, by name: each counts only the requests its match selects, in one bucket or one per client or header value. A request is counted by every limit that matches it, and by the global bucket too; the first that is empty refuses it. At most 64."`
}

// Limit is one scoped limit of limits: a match, a bucket (maxTokens with
// tokensPerFill and fillInterval, or requests per unit) and a key.
type Limit struct {
	Match         *requestmatch.Match `json:"match" doc:"Count only the requests that match every key given (pathPrefix, hosts, methods, headers, queryParams, clients), as globalRateLimit's match; none: every request."`
	Requests      *uint32             `json:"requests" doc:"Requests allowed per unit, with unit: a bucket of this many tokens that refills at this many per unit, continuously (so in any one unit up to twice this can pass). Or give maxTokens."`
	Unit          requestmatch.Unit   `json:"unit" doc:"second, minute, hour or day, with requests."`
	MaxTokens     *uint32             `json:"maxTokens" doc:"The bucket's size, the burst allowed, at least 1. Or give requests and unit."`
	TokensPerFill *uint32             `json:"tokensPerFill" doc:"Tokens added every fillInterval, with maxTokens (default 1)."`
	FillInterval  *items.Seconds      `json:"fillInterval" doc:"How often tokens are added, with maxTokens, at least 50ms (default 1s)."`
	PerClient     bool                `json:"perClient" doc:"One bucket per client address (the one the connection manager trusts) instead of one for every request that matches."`
	PerHeader     string              `json:"perHeader" doc:"One bucket per value of this request header instead of one for every request that matches; a request without the header is not counted by this limit."`
}

// Bucket is a keyed limit's token bucket: one per key.
type Bucket struct {
	MaxTokens     uint32         `json:"maxTokens" doc:"Each key's bucket size, the burst it is allowed, at least 1 (required)."`
	TokensPerFill *uint32        `json:"tokensPerFill" doc:"Tokens added to each key's bucket every fillInterval (default 1): the two make the refill rate."`
	FillInterval  *items.Seconds `json:"fillInterval" doc:"How often tokens are added to each key's bucket, at least 50ms (default 1s)."`
}

// HeaderLimit is one entry of perHeader.
type HeaderLimit struct {
	Header string `json:"header" doc:"The request header whose values are counted apart, lower case (required)."`
	Bucket
}

// Texts implements items.Texter.
func (*LocalRateLimit) Texts() []items.Text {
	return append([]items.Text{
		{Path: "responseHeaders.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
		{Path: "perHeader[].header", Kind: items.TextHeaderRead},
		{Path: "limits.*", Key: items.TextPlain},
		{Path: "limits.*.perHeader", Kind: items.TextHeaderRead},
	}, requestmatch.Texts("limits.*.match")...)
}

var (
	_ items.Texter         = (*LocalRateLimit)(nil)
	_ items.Item           = (*LocalRateLimit)(nil)
	_ items.Ranger         = (*LocalRateLimit)(nil)
	_ items.ContextLimiter = (*LocalRateLimit)(nil)
	_ items.Versioned      = (*LocalRateLimit)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Token buckets per proxy: global, per client address, per header value, and scoped limits that count only the requests they match (a path, hosts, methods, headers, query parameters, client ranges); requests over a limit are answered 429.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             4,
		Purpose:          "refuses requests over the rate, before their body is buffered",
		Where:            "an HTTP filter; outbound, the global bucket and `perHeader` limit the requests the workload sends",
		EnabledByDefault: true,
		New: func() items.Item {
			return &LocalRateLimit{
				TokensPerFill:  defaultTokensPerFill,
				FillInterval:   items.Seconds{Duration: defaultFillInterval},
				MaxKeys:        DefaultMaxKeys,
				StatusCode:     DefaultStatusCode,
				FilterEnabled:  100,
				FilterEnforced: 100,
			}
		},
		Needs: []items.Need{
			{Setting: "perClient", Field: "max_dynamic_descriptors", Envoy: dynamicDescriptors, Older: "refused by validation"},
			{Setting: "perHeader", Field: "max_dynamic_descriptors", Envoy: dynamicDescriptors, Older: "refused by validation"},
			{Setting: "limits.*.perClient, limits.*.perHeader", Field: "max_dynamic_descriptors", Envoy: dynamicDescriptors, Older: "refused by validation"},
			{Setting: "limits.*.match.clients", Field: "remote_address_match", Envoy: requestmatch.ClientsSince, Older: "refused by validation"},
		},
	})
}

// MaxPercent is the ceiling of filterEnabled and filterEnforced.
const MaxPercent = 100

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*LocalRateLimit) Ranges() []items.Range {
	return []items.Range{
		{Path: "maxKeys", Min: 1, Max: MaxMaxKeys},
		items.AtLeast("maxTokens", 1),
		items.AtLeast("perClient.maxTokens", 1),
		items.AtLeast("perHeader[].maxTokens", 1),
		fillFloor("fillInterval"),
		fillFloor("perClient.fillInterval"),
		fillFloor("perHeader[].fillInterval"),
		items.AtLeast("tokensPerFill", 1),
		items.AtLeast("perClient.tokensPerFill", 1),
		items.AtLeast("perHeader[].tokensPerFill", 1),
		items.AtLeast("limits.*.maxTokens", 1),
		items.AtLeast("limits.*.tokensPerFill", 1),
		fillFloor("limits.*.fillInterval"),
		items.AtLeast("limits.*.requests", 1),
		{Path: "filterEnabled", Min: 0, Max: MaxPercent},
		{Path: "filterEnforced", Min: 0, Max: MaxPercent},
		statusCodes,
	}
}

// fillFloor is the Range of a bucket's fillInterval.
func fillFloor(path string) items.Range {
	r := items.DurationRange(path, MinFillInterval, 0)
	r.Why = "Envoy's floor"
	return r
}

// statusCodes are the codes statusCode takes: those from 400 Envoy's
// StatusCode enum defines (HttpStatus refuses others; below 400 Envoy
// answers 429 instead).
var statusCodes = func() items.Range {
	r := items.ErrorStatuses("statusCode")
	r.Why = fmt.Sprintf("the codes from %d Envoy knows (below %d it answers 429 instead)", MinStatusCode, MinStatusCode)
	return r
}()

// keyed reports whether any keyed limit is given.
func (l *LocalRateLimit) keyed() bool {
	return l.PerClient != nil || len(l.PerHeader) > 0 || l.keyedLimits() > 0
}

// keyedLimits counts the scoped limits with a key.
func (l *LocalRateLimit) keyedLimits() int {
	n := 0
	for _, lim := range l.Limits {
		if lim.keyed() {
			n++
		}
	}
	return n
}

func (l Limit) keyed() bool { return l.PerClient || l.PerHeader != "" }

// ContextLimits implements items.ContextLimiter. On a sidecar's outbound
// listeners the client is the workload itself: perClient would count every
// request the workload sends in one bucket, a cap on all its outgoing
// calls at the rate meant for one client; ANY includes those listeners.
// The global bucket and perHeader mean the same there as anywhere.
func (*LocalRateLimit) ContextLimits() []items.ContextLimit {
	clients := []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound}
	return []items.ContextLimit{
		{Path: "perClient", Contexts: clients,
			Why: "on a sidecar's outbound listeners the client is the workload itself, so one bucket would count every request the workload sends, capping all its outgoing calls at the rate meant for one client (ANY includes those listeners); use maxTokens or perHeader to limit a workload's outgoing requests"},
		{Path: "limits.*.perClient", Contexts: clients,
			Why: "on a sidecar's outbound listeners the client is the workload itself, so the limit would count every request the workload sends as one client's (ANY includes those listeners)"},
		{Path: "limits.*.match.clients", Contexts: clients,
			Why: "on a sidecar's outbound listeners the client is the workload itself, so every request it sends has the same client address (ANY includes those listeners)"},
	}
}

// Validate implements items.Item.
func (l *LocalRateLimit) Validate() error {
	var p items.Problems
	keyed := l.keyed()
	if l.MaxTokens == nil && l.Enable && !keyed && len(l.Limits) == 0 {
		p.Addf("maxTokens", "is required and must be at least 1, unless perClient, perHeader or limits is given")
	}
	if l.MaxTokens == nil && (keyed || len(l.Limits) > 0) {
		// Without maxTokens there is no global bucket for these to shape.
		where := "perClient or perHeader"
		if len(l.Limits) > 0 {
			where = "perClient, perHeader or a limit"
		}
		if l.TokensPerFill > 1 {
			p.Addf("tokensPerFill", "only applies with maxTokens (the global bucket); set tokensPerFill in %s instead", where)
		}
		if l.FillInterval.Duration >= MinFillInterval && l.FillInterval.Duration != defaultFillInterval {
			p.Addf("fillInterval", "only applies with maxTokens (the global bucket); set fillInterval in %s instead", where)
		}
	}
	if len(l.PerHeader) > MaxHeaderLimits {
		p.Addf("perHeader", "has %d entries; at most %d", len(l.PerHeader), MaxHeaderLimits)
	}
	seen := map[string]int{}
	for i, h := range l.PerHeader {
		path := fmt.Sprintf("perHeader[%d]", i)
		checkKeyHeader(&p, path+".header", h.Header)
		// Envoy compares header names ignoring case.
		if j, dup := seen[strings.ToLower(h.Header)]; dup && h.Header != "" {
			p.Addf(path+".header", "%s is also perHeader[%d].header; give one limit per header", h.Header, j)
		} else {
			seen[strings.ToLower(h.Header)] = i
		}
	}
	items.CheckRanges(&p, l)
	if !keyed && l.MaxKeys != DefaultMaxKeys {
		p.Addf("maxKeys", "only applies with perClient, perHeader or a limit with a key")
	}
	if len(l.Limits) > MaxLimits {
		p.Addf("limits", "has %d limits; at most %d: every request runs each one's match", len(l.Limits), MaxLimits)
	}
	n := l.keyedLimits() + len(l.PerHeader)
	if l.PerClient != nil {
		n++
	}
	if n > MaxKeyedLimits {
		p.Addf("limits", "has %d keyed limits with perClient and perHeader; at most %d together: each remembers up to maxKeys keys (about 1 KiB each)", n, MaxKeyedLimits)
	}
	for _, name := range slices.Sorted(maps.Keys(l.Limits)) {
		at := fielderr.Key("limits", name)
		requestmatch.CheckLimitName(&p, at, name, "in its descriptor and the filter's statistics")
		l.Limits[name].validate(&p, at)
	}
	if len(l.ResponseHeaders) > MaxResponseHeaders {
		p.Addf("responseHeaders", "has %d headers; Envoy allows at most %d", len(l.ResponseHeaders), MaxResponseHeaders)
	}
	return p.Err()
}

// validate records the problems of one scoped limit, at at.
func (l Limit) validate(p *items.Problems, at string) {
	rate := l.Requests != nil || l.Unit != ""
	bucket := l.MaxTokens != nil || l.TokensPerFill != nil || l.FillInterval != nil
	switch {
	case rate && bucket:
		p.Addf(at, "give either requests and unit (e.g. requests: 10, unit: minute) or maxTokens with tokensPerFill and fillInterval, not both: they are two ways to write the same bucket")
	case !rate && !bucket:
		p.Addf(at, "needs exactly one rate: requests and unit (e.g. requests: 10, unit: minute), or maxTokens with tokensPerFill and fillInterval")
	case rate && l.Requests == nil:
		p.Addf(at+".requests", "is required with unit: how many requests per %s", l.Unit)
	case rate && l.Unit == "":
		p.Addf(at+".unit", "is required with requests: second, minute, hour or day")
	case bucket && l.MaxTokens == nil:
		p.Addf(at+".maxTokens", "is required with tokensPerFill or fillInterval: the bucket's size, at least 1")
	}
	if l.PerClient && l.PerHeader != "" {
		p.Addf(at, "give at most one of perClient and perHeader: a limit counts by one key (none: one bucket for every request it matches)")
	}
	if l.PerHeader != "" {
		checkKeyHeader(p, at+".perHeader", l.PerHeader)
	}
	l.Match.Validate(p, at+".match")
}

// bucket is the limit's token bucket, from whichever form it is given in
// (validation admits exactly one; Build may see a refused document too).
func (l Limit) bucket() (*typev3.TokenBucket, error) {
	switch {
	case l.Requests != nil:
		return tokenBucket(*l.Requests, *l.Requests, l.Unit.Duration()), nil
	case l.MaxTokens != nil:
		b := Bucket{TokensPerFill: l.TokensPerFill, FillInterval: l.FillInterval}
		return tokenBucket(*l.MaxTokens, b.tokensPerFill(), b.fillInterval()), nil
	}
	return nil, fmt.Errorf("needs exactly one rate: requests and unit, or maxTokens")
}

// Descriptor is the limit's descriptor value: its name and a hash of its
// definition, so that an edited limit is a new descriptor with a full
// bucket, and nothing depends on a list position.
func (l Limit) Descriptor(name string) string { return requestmatch.Descriptor(name, l) }

// addLimit adds one scoped limit: a rate limit per alternative of its
// match (all writing the same descriptor), and the descriptor with its
// bucket: the limit's entry, the match's, then the key's, left without a
// value when keyed so that each client or header value gets a bucket.
func addLimit(cfg *ratelimitv3.LocalRateLimit, name string, l Limit) error {
	head := []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{
		DescriptorKey: LimitKey, DescriptorValue: l.Descriptor(name),
	}}}}
	entries := []*commonratelimitv3.RateLimitDescriptor_Entry{{Key: LimitKey, Value: l.Descriptor(name)}}
	for _, e := range l.Match.Entries() {
		entries = append(entries, &commonratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	var tail []*routev3.RateLimit_Action
	switch {
	case l.PerClient:
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}})
		entries = append(entries, &commonratelimitv3.RateLimitDescriptor_Entry{Key: RemoteAddressKey})
	case l.PerHeader != "":
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
			HeaderName: strings.ToLower(l.PerHeader), DescriptorKey: LimitHeaderKey,
		}}})
		entries = append(entries, &commonratelimitv3.RateLimitDescriptor_Entry{Key: LimitHeaderKey})
	}
	alts, err := l.Match.Actions()
	if err != nil {
		return fmt.Errorf("match.%w", err)
	}
	for _, match := range alts {
		cfg.RateLimits = append(cfg.RateLimits, &routev3.RateLimit{Actions: slices.Concat(head, match, tail)})
	}
	bucket, err := l.bucket()
	if err != nil {
		return err
	}
	cfg.Descriptors = append(cfg.Descriptors, &commonratelimitv3.LocalRateLimitDescriptor{Entries: entries, TokenBucket: bucket})
	return nil
}

func (b *Bucket) tokensPerFill() uint32 {
	if b.TokensPerFill == nil {
		return defaultTokensPerFill
	}
	return *b.TokensPerFill
}

func (b *Bucket) fillInterval() time.Duration {
	if b.FillInterval == nil {
		return defaultFillInterval
	}
	return b.FillInterval.Duration
}

// checkKeyHeader checks the name of a header whose values key a limit.
// It is the one header rule (items.CheckHeader), with messages of its own
// for the two names that rule refuses for another reason or would let
// through to no effect.
func checkKeyHeader(p *items.Problems, path, name string) {
	switch strings.ToLower(name) {
	case "":
		p.Addf(path, "is required")
	case "host":
		// Envoy keeps the host as the :authority pseudo-header, so a
		// lookup of host finds nothing and the limit would never apply.
		p.Addf(path, "host is not a request header inside Envoy (it becomes :authority), so this limit would never apply")
	case "x-forwarded-for":
		p.Addf(path, "x-forwarded-for is a list any client can write; use perClient, which counts the trusted client address")
	}
}

// fraction is a percentage as Envoy's runtime fractional percent.
func fraction(percent float64, key string) *corev3.RuntimeFractionalPercent {
	return &corev3.RuntimeFractionalPercent{
		DefaultValue: &typev3.FractionalPercent{Numerator: uint32(percent*percentScale + 0.5), Denominator: typev3.FractionalPercent_MILLION},
		RuntimeKey:   key,
	}
}

// tokenBucket is Envoy's token bucket.
func tokenBucket(maxTokens, tokensPerFill uint32, fillInterval time.Duration) *typev3.TokenBucket {
	return &typev3.TokenBucket{
		MaxTokens:     maxTokens,
		TokensPerFill: wrapperspb.UInt32(tokensPerFill),
		FillInterval:  durationpb.New(fillInterval),
	}
}

// addKeyed adds one keyed limit: the rate limit configuration whose action
// writes the descriptor entry key, and the descriptor that matches every
// value of it (an empty value is Envoy's wildcard), each distinct value
// getting its own bucket.
func addKeyed(cfg *ratelimitv3.LocalRateLimit, action *routev3.RateLimit_Action, key string, b *Bucket) {
	cfg.RateLimits = append(cfg.RateLimits, &routev3.RateLimit{Actions: []*routev3.RateLimit_Action{action}})
	cfg.Descriptors = append(cfg.Descriptors, &commonratelimitv3.LocalRateLimitDescriptor{
		Entries:     []*commonratelimitv3.RateLimitDescriptor_Entry{{Key: key}},
		TokenBucket: tokenBucket(b.MaxTokens, b.tokensPerFill(), b.fillInterval()),
	})
}

// Build implements items.Item.
func (l *LocalRateLimit) Build() ([]envoyfilter.Patch, error) {
	return l.BuildFor(envoyfilter.Newest())
}

// dynamicDescriptors is the first Envoy whose local rate limit keeps a
// bucket per value of a descriptor entry left without a value
// (max_dynamic_descriptors); older ones refuse such an entry, and with it
// the listener.
var dynamicDescriptors = envoyfilter.Version{Major: 1, Minor: 35}

// BuildFor implements items.Versioned: the keyed limits need Envoy's
// dynamic descriptors, and have no equivalent on older proxies.
func (l *LocalRateLimit) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	var p items.Problems
	if !r.Envoy.AtLeast(dynamicDescriptors) {
		if l.PerClient != nil {
			p.Addf("perClient", "%s", items.NeedsMsg(dynamicDescriptors))
		}
		if len(l.PerHeader) > 0 {
			p.Addf("perHeader", "%s", items.NeedsMsg(dynamicDescriptors))
		}
		for _, name := range slices.Sorted(maps.Keys(l.Limits)) {
			if lim := l.Limits[name]; lim.keyed() {
				key := "perClient"
				if lim.PerHeader != "" {
					key = "perHeader"
				}
				p.Addf(fielderr.Key("limits", name)+"."+key, "%s", items.NeedsMsg(dynamicDescriptors))
			}
		}
	}
	if !r.Envoy.AtLeast(requestmatch.ClientsSince) {
		for _, name := range slices.Sorted(maps.Keys(l.Limits)) {
			if m := l.Limits[name].Match; m != nil && m.Clients != nil {
				p.Addf(fielderr.Key("limits", name)+".match.clients", "%s", items.NeedsMsg(requestmatch.ClientsSince))
			}
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	cfg := &ratelimitv3.LocalRateLimit{
		StatPrefix:     StatPrefix,
		FilterEnabled:  fraction(l.FilterEnabled, "globalconfig.local_rate_limit.enabled"),
		FilterEnforced: fraction(l.FilterEnforced, "globalconfig.local_rate_limit.enforced"),
		Status:         &typev3.HttpStatus{Code: typev3.StatusCode(l.StatusCode)},
	}
	if l.MaxTokens != nil {
		cfg.TokenBucket = tokenBucket(*l.MaxTokens, l.TokensPerFill, l.FillInterval.Duration)
	}
	if l.PerClient != nil {
		addKeyed(cfg, &routev3.RateLimit_Action{
			ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}},
		}, RemoteAddressKey, l.PerClient)
	}
	for i := range l.PerHeader {
		h := &l.PerHeader[i]
		key := HeaderKeyPrefix + h.Header
		addKeyed(cfg, &routev3.RateLimit_Action{
			ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
				HeaderName:    h.Header,
				DescriptorKey: key,
			}},
		}, key, &h.Bucket)
	}
	for _, name := range slices.Sorted(maps.Keys(l.Limits)) {
		if err := addLimit(cfg, name, l.Limits[name]); err != nil {
			p.Add(fielderr.Key("limits", name), err)
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	if l.keyed() {
		cfg.MaxDynamicDescriptors = wrapperspb.UInt32(l.MaxKeys)
	}
	if l.keyed() || len(l.Limits) > 0 {
		if cfg.TokenBucket != nil {
			// Envoy's default, said outright: a request a keyed limit
			// counts is counted by the global bucket too, so the global
			// bucket stays a limit on all requests.
			cfg.AlwaysConsumeDefaultTokenBucket = wrapperspb.Bool(true)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.ResponseHeaders)) {
		cfg.ResponseHeadersToAdd = append(cfg.ResponseHeadersToAdd, envoyfilter.SetHeader(name, string(l.ResponseHeaders[name])))
	}
	patch, err := envoyfilter.InsertHTTPFilter(envoyfilter.LocalRateLimit, cfg)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{patch}, nil
}
