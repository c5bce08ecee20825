// Package globalratelimit is the `globalRateLimit` item: limits shared by
// every proxy, counted by a rate-limit service (envoyproxy/ratelimit, or
// any service of Envoy's rate limit protocol) instead of by each proxy.
// One document drives both sides: the proxies' envoy.filters.http.ratelimit
// filter, whose actions build each request's descriptors, and the
// service's limits for exactly those descriptors (ServiceConfig), which
// the controller serves the service over xDS (pkg/rlsconfig). Ten
// gateway replicas then allow the limit once, not ten times.
package globalratelimit

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/requestmatch"
)

// Name is the item's key in the document, and Filter the HTTP filter it
// inserts.
const (
	Name   = "globalRateLimit"
	Filter = "envoy.filters.http.ratelimit"
)

// Defaults and bounds.
const (
	// DefaultDomain is the rate-limit service domain of the limits: the
	// service keeps each domain's limits apart.
	DefaultDomain = "globalconfig"
	// DefaultTimeout bounds each call to the service. Envoy's own default
	// is 20 ms; past the timeout a request passes unlimited (failureMode
	// allow) or gets failureStatus (deny), so 20 ms would let a slow
	// service's every request through. 100 ms costs a request at most
	// that much while the service is slow.
	DefaultTimeout = 100 * time.Millisecond
	// MaxTimeout bounds it: a request waits this long for the service.
	MaxTimeout = 10 * time.Second
	// DefaultStatusCode answers a limited request: 429 Too Many Requests.
	DefaultStatusCode = 429
	// MaxLimits bounds limits: each is a descriptor every request builds
	// and sends to the service.
	MaxLimits = 64
	// MaxExcept bounds each limit's except list: Envoy tries the ranges
	// one by one on every request.
	MaxExcept = requestmatch.MaxClientRanges
)

// The descriptor keys the actions write, in the order of a descriptor's
// entries: the limit (with its name and a hash of its definition), the
// match's (requestmatch.Entries), the exception, then what the limit
// counts by.
const (
	KeyLimit     = "limit"
	KeyExcept    = "except"
	KeyClient    = "remote_address"
	KeySubnet    = "masked_remote_address"
	KeyHeader    = "header"
	outsideValue = "outside"
)

// The Envoy releases settings need.
var (
	// filterRateLimits is the first Envoy whose ratelimit filter takes
	// its actions itself (rate_limits): nothing depends on the names
	// istiod gives routes or virtual hosts.
	filterRateLimits = envoyfilter.Version{Major: 1, Minor: 36}
	// remoteAddressMatch is the first Envoy with the remote_address_match
	// action, which except and match.clients need.
	remoteAddressMatch = requestmatch.ClientsSince
)

// GlobalRateLimit is the `globalRateLimit` section.
type GlobalRateLimit struct {
	items.Toggle
	Service          string           `json:"service" doc:"Host of the rate-limit service, as istiod names its cluster: a Service's full name (ratelimit.ratelimit.svc.cluster.local) or a ServiceEntry's host."`
	Port             items.Port       `json:"port" doc:"The service's gRPC port (envoyproxy/ratelimit: 8081)."`
	Domain           string           `json:"domain" doc:"The rate-limit service domain the limits live in (default globalconfig)."`
	Timeout          items.Millis     `json:"timeout" doc:"How long a request waits for the service, 1ms to 10s (default 100ms; Envoy's own default is 20ms). Past it, failureMode decides."`
	FailureMode      FailureMode      `json:"failureMode" doc:"When the service fails or times out: allow (default) lets the request through unlimited, deny answers failureStatus."`
	FailureStatus    *uint32          `json:"failureStatus" doc:"The status a request gets when the service fails and failureMode is deny, 400 to 599 as Envoy knows them (Envoy's default 500)."`
	StatusCode       uint32           `json:"statusCode" doc:"The status a limited request gets, 400 to 599 as Envoy knows them (default 429)."`
	RateLimitHeaders bool             `json:"rateLimitHeaders" doc:"Send x-ratelimit-limit, x-ratelimit-remaining and x-ratelimit-reset (the IETF draft 03 headers) on every response a limit counted."`
	Limits           map[string]Limit `json:"limits" doc:"The limits, by name: the name is the limit's identity at the service (its descriptor), so renaming one starts its count afresh. At most 64."`
}

// Limit is one named limit.
type Limit struct {
	Requests        uint32   `json:"requests" doc:"Requests allowed per unit (required), in fixed windows of the service: up to twice this can pass across a window's edge."`
	Unit            Unit     `json:"unit" doc:"second, minute, hour or day (required)."`
	PerClient       bool     `json:"perClient" doc:"Count each client address apart: the address the connection manager trusts (see clientIP and headers.xff)."`
	PerClientSubnet *Subnet  `json:"perClientSubnet" doc:"Count each client subnet apart: the client address masked to ipv4 and ipv6 prefix lengths."`
	PerHeader       string   `json:"perHeader" doc:"Count each value of this request header apart, e.g. x-api-key; requests without the header are not counted by this limit."`
	Match           *Match   `json:"match" doc:"Count only the requests that match: every key of it that is given (pathPrefix, hosts, methods, headers, queryParams, clients)."`
	Except          []string `json:"except" doc:"Client address ranges this limit does not count (CIDRs or single addresses), e.g. your own monitoring. Needs Istio 1.30 (Envoy 1.38) or newer."`
	Shadow          bool     `json:"shadow" doc:"Count and report, but never refuse: the service's shadow mode, for trying a limit out."`
}

// Subnet is perClientSubnet.
type Subnet struct {
	IPv4 *uint32 `json:"ipv4" doc:"Prefix length of an IPv4 client's subnet, 1 to 32 (default 24)."`
	IPv6 *uint32 `json:"ipv6" doc:"Prefix length of an IPv6 client's subnet, 1 to 128 (default 64)."`
}

// Match selects the requests a limit counts: the vocabulary both rate
// limits share.
type Match = requestmatch.Match

// FailureMode is what happens when the service can't answer.
type FailureMode string

// Values lists the failure modes.
func (FailureMode) Values() []string { return []string{"allow", "deny"} }

// Unit is a limit's time unit, as localRateLimit spells it too.
type Unit = requestmatch.Unit

var units = map[Unit]rlsv3.RateLimitUnit{
	"second": rlsv3.RateLimitUnit_SECOND, "minute": rlsv3.RateLimitUnit_MINUTE,
	"hour": rlsv3.RateLimitUnit_HOUR, "day": rlsv3.RateLimitUnit_DAY,
}

var (
	_ items.Item              = (*GlobalRateLimit)(nil)
	_ items.Ranger            = (*GlobalRateLimit)(nil)
	_ items.Versioned         = (*GlobalRateLimit)(nil)
	_ items.ContextLimiter    = (*GlobalRateLimit)(nil)
	_ items.Texter            = (*GlobalRateLimit)(nil)
	_ items.ServiceUser       = (*GlobalRateLimit)(nil)
	_ items.ServiceConfigurer = (*GlobalRateLimit)(nil)
	_ items.Enum              = FailureMode("")
	_ items.Enum              = Unit("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Limits shared by every proxy, counted by a rate-limit service (envoyproxy/ratelimit with Redis), its limits configured from the same document.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             5,
		Purpose:          "refuses requests over a limit shared by every proxy, after the local limits shed a flood without a call",
		Where:            "an HTTP filter, and HTTP/2 merged into the service's outbound cluster; on a sidecar's outbound listeners the limits count the requests the workload sends",
		EnabledByDefault: true,
		New: func() items.Item {
			return &GlobalRateLimit{Domain: DefaultDomain, Timeout: items.Millis{Duration: DefaultTimeout}, FailureMode: "allow", StatusCode: DefaultStatusCode}
		},
		Needs: []items.Need{
			{Setting: "limits", Field: "rate_limits (the filter's own)", Envoy: filterRateLimits, Older: "refused by validation"},
			{Setting: "limits.*.except", Field: "remote_address_match", Envoy: remoteAddressMatch, Older: "refused by validation"},
			{Setting: "limits.*.match.clients", Field: "remote_address_match", Envoy: remoteAddressMatch, Older: "refused by validation"},
		},
	})
}

// Ranges implements items.Ranger.
func (*GlobalRateLimit) Ranges() []items.Range {
	return []items.Range{
		items.ErrorStatuses("statusCode"),
		items.ErrorStatuses("failureStatus"),
		items.DurationRange("timeout", time.Millisecond, MaxTimeout),
		items.AtLeast("limits.*.requests", 1),
		{Path: "limits.*.perClientSubnet.ipv4", Min: 1, Max: 32},
		{Path: "limits.*.perClientSubnet.ipv6", Min: 1, Max: 128},
	}
}

// Texts implements items.Texter.
func (*GlobalRateLimit) Texts() []items.Text {
	return append([]items.Text{
		{Path: "service", Kind: items.TextServiceHost},
		{Path: "limits.*", Key: items.TextPlain},
		{Path: "limits.*.perHeader", Kind: items.TextHeaderRead},
		{Path: "limits.*.except[]", Kind: items.TextCIDR},
	}, requestmatch.Texts("limits.*.match")...)
}

// Services implements items.ServiceUser.
func (g *GlobalRateLimit) Services() []items.ServiceRef {
	if g.Service == "" {
		return nil
	}
	return []items.ServiceRef{{Path: "service", Host: g.Service, Port: uint32(g.Port), Missing: g.missing()}}
}

// missing says what a gateway does while the service has no cluster:
// Envoy 1.40 and 1.39 load the rate limit filter and fail every call, as
// when the cluster has no endpoints or its endpoint refuses connections
// (test/proxy TestServiceFailure); no listener is refused.
func (g *GlobalRateLimit) missing() string {
	if g.FailureMode == "deny" {
		status := uint32(500) // Envoy's own
		if g.FailureStatus != nil {
			status = *g.FailureStatus
		}
		return fmt.Sprintf("every request is denied with %d (failureMode deny)", status)
	}
	return "no limit is enforced: every request passes unlimited (failureMode allow)"
}

// ContextLimits implements items.ContextLimiter: on a sidecar's outbound
// listeners the client is the workload itself.
func (*GlobalRateLimit) ContextLimits() []items.ContextLimit {
	why := "on a sidecar's outbound listeners the client is the workload itself, so every request it sends would be counted as one client's (ANY includes those listeners)"
	clients := []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound}
	return []items.ContextLimit{
		{Path: "limits.*.perClient", Contexts: clients, Why: why},
		{Path: "limits.*.perClientSubnet", Contexts: clients, Why: why},
		{Path: "limits.*.except", Contexts: clients, Why: why},
		{Path: "limits.*.match.clients", Contexts: clients, Why: why},
	}
}

// domainName is what the domain may be.
var domainName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)

// Validate implements items.Item.
func (g *GlobalRateLimit) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, g)
	if g.Enable {
		if g.Service == "" {
			p.Addf("service", "is required: the rate-limit service's host")
		}
		if g.Port == 0 {
			p.Addf("port", "is required: the rate-limit service's gRPC port")
		}
		if len(g.Limits) == 0 {
			p.Addf("limits", "give at least one limit")
		}
	}
	if !domainName.MatchString(g.Domain) {
		p.Addf("domain", "must be 1 to 63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit, got %q", g.Domain)
	}
	if g.FailureStatus != nil && g.FailureMode != "deny" {
		p.Addf("failureStatus", "only applies with failureMode: deny")
	}
	if len(g.Limits) > MaxLimits {
		p.Addf("limits", "has %d limits; at most %d: every request builds and sends each one", len(g.Limits), MaxLimits)
	}
	for _, name := range slices.Sorted(maps.Keys(g.Limits)) {
		at := fielderr.Key("limits", name)
		requestmatch.CheckLimitName(&p, at, name, "at the service")
		g.Limits[name].validate(&p, at)
	}
	return p.Err()
}

func (l Limit) validate(p *items.Problems, at string) {
	if l.Unit == "" {
		p.Addf(at+".unit", "is required: second, minute, hour or day")
	}
	keys := 0
	for _, set := range []bool{l.PerClient, l.PerClientSubnet != nil, l.PerHeader != ""} {
		if set {
			keys++
		}
	}
	if keys > 1 {
		p.Addf(at, "give at most one of perClient, perClientSubnet and perHeader: a limit counts by one key (none: one count for every request)")
	}
	if h := strings.ToLower(l.PerHeader); h == "host" {
		p.Addf(at+".perHeader", "host is not a request header inside Envoy (it becomes :authority); use :authority")
	}
	l.Match.Validate(p, at+".match")
	if len(l.Except) > MaxExcept {
		p.Addf(at+".except", "has %d ranges; at most %d", len(l.Except), MaxExcept)
	}
	for i, s := range l.Except {
		if _, err := items.ParseCIDR(s); err != nil {
			p.Addf(fmt.Sprintf("%s.except[%d]", at, i), "%v", err)
		}
	}
}

// Build implements items.Item: the patches for the newest Envoy.
func (g *GlobalRateLimit) Build() ([]envoyfilter.Patch, error) {
	return g.BuildFor(envoyfilter.Newest())
}

// BuildFor implements items.Versioned.
func (g *GlobalRateLimit) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	if !r.Envoy.AtLeast(filterRateLimits) {
		return nil, &fielderr.Error{Path: "limits", Msg: items.NeedsMsg(filterRateLimits) + ": older proxies take rate limit actions only from routes and virtual hosts, whose names istiod generates"}
	}
	var p items.Problems
	var rateLimits []*routev3.RateLimit
	for _, name := range slices.Sorted(maps.Keys(g.Limits)) {
		l := g.Limits[name]
		if len(l.Except) > 0 && !r.Envoy.AtLeast(remoteAddressMatch) {
			p.Addf(fielderr.Key("limits", name)+".except", "%s", items.NeedsMsg(remoteAddressMatch))
			continue
		}
		if l.Match != nil && l.Match.Clients != nil && !r.Envoy.AtLeast(remoteAddressMatch) {
			p.Addf(fielderr.Key("limits", name)+".match.clients", "%s", items.NeedsMsg(remoteAddressMatch))
			continue
		}
		rls, err := l.rateLimits(name)
		if err != nil {
			p.Add(fielderr.Key("limits", name), err)
			continue
		}
		rateLimits = append(rateLimits, rls...)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	cluster := envoyfilter.OutboundCluster(g.Service, uint32(g.Port))
	cfg := &ratelimitv3.RateLimit{
		Domain:          g.Domain,
		Timeout:         durationpb.New(g.Timeout.Duration),
		FailureModeDeny: g.FailureMode == "deny",
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: cluster, Authority: g.Service,
			}}},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
		RateLimits: rateLimits,
	}
	if g.StatusCode != DefaultStatusCode {
		cfg.RateLimitedStatus = &typev3.HttpStatus{Code: typev3.StatusCode(g.StatusCode)}
	}
	if g.FailureStatus != nil {
		cfg.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(*g.FailureStatus)}
	}
	if g.RateLimitHeaders {
		cfg.EnableXRatelimitHeaders = ratelimitv3.RateLimit_DRAFT_VERSION_03
	}
	filter, err := envoyfilter.InsertHTTPFilter(Filter, cfg)
	if err != nil {
		return nil, err
	}
	grpc, err := envoyfilter.GRPCCluster(cluster)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{filter, grpc}, nil
}

// Descriptor is one limit's descriptor value: its name and a hash of what
// it is, so that a changed limit is a new descriptor both at the proxies
// and at the service (a canary and a stable proxy each get theirs).
func (l Limit) Descriptor(name string) string { return requestmatch.Descriptor(name, l) }

// rateLimits are the filter's rate limits for the limit: each action
// writes one entry of the descriptor, in the order the service's
// descriptors nest. A host or method list whose regex would be over
// Envoy's limit is split into groups that each fit (matchRegexes), and the
// limit becomes one rate limit per combination of groups: a request
// matches at most one of them (its :authority one host, its method one
// method), and all of them write the same descriptor, so the limit keeps
// one count at the service.
func (l Limit) rateLimits(name string) ([]*routev3.RateLimit, error) {
	head := []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{
		DescriptorKey: KeyLimit, DescriptorValue: l.Descriptor(name),
	}}}}
	var tail []*routev3.RateLimit_Action
	if len(l.Except) > 0 {
		var ranges []*xdscorev3.CidrRange
		for _, s := range l.Except {
			pfx, err := items.ParseCIDR(s)
			if err != nil {
				return nil, err
			}
			ranges = append(ranges, &xdscorev3.CidrRange{AddressPrefix: pfx.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pfx.Bits()))})
		}
		// Applied, and so counted, only outside the ranges.
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddressMatch_{RemoteAddressMatch: &routev3.RateLimit_Action_RemoteAddressMatch{
			DescriptorKey: KeyExcept, DescriptorValue: outsideValue,
			AddressMatcher: &matcherv3.AddressMatcher{Ranges: ranges, InvertMatch: true},
		}}})
	}
	switch {
	case l.PerClient:
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}})
	case l.PerClientSubnet != nil:
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_MaskedRemoteAddress_{MaskedRemoteAddress: &routev3.RateLimit_Action_MaskedRemoteAddress{
			V4PrefixMaskLen: wrapperspb.UInt32(l.PerClientSubnet.v4()), V6PrefixMaskLen: wrapperspb.UInt32(l.PerClientSubnet.v6()),
		}}})
	case l.PerHeader != "":
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
			HeaderName: strings.ToLower(l.PerHeader), DescriptorKey: KeyHeader,
		}}})
	}
	alts, err := l.Match.Actions()
	if err != nil {
		return nil, fmt.Errorf("match.%w", err)
	}
	var out []*routev3.RateLimit
	for _, match := range alts {
		out = append(out, &routev3.RateLimit{Actions: slices.Concat(head, match, tail)})
	}
	return out, nil
}

// Default subnet prefix lengths: a /24 is commonly one site or customer,
// a /64 one IPv6 host's network.
const DefaultSubnetV4, DefaultSubnetV6 = 24, 64

func (s *Subnet) v4() uint32 {
	if s.IPv4 == nil {
		return DefaultSubnetV4
	}
	return *s.IPv4
}

func (s *Subnet) v6() uint32 {
	if s.IPv6 == nil {
		return DefaultSubnetV6
	}
	return *s.IPv6
}

// ServiceConfig implements items.ServiceConfigurer: the rate-limit
// service's domain, its descriptors nested as the actions write their
// entries, and each limit at the innermost one.
func (g *GlobalRateLimit) ServiceConfig() (proto.Message, error) {
	cfg := &rlsv3.RateLimitConfig{Name: g.Domain, Domain: g.Domain}
	for _, name := range slices.Sorted(maps.Keys(g.Limits)) {
		cfg.Descriptors = append(cfg.Descriptors, g.Limits[name].descriptor(name))
	}
	return cfg, nil
}

// descriptor is the service's descriptor of the limit.
func (l Limit) descriptor(name string) *rlsv3.RateLimitDescriptor {
	top := &rlsv3.RateLimitDescriptor{Key: KeyLimit, Value: l.Descriptor(name)}
	leaf := top
	nest := func(key, value string) {
		d := &rlsv3.RateLimitDescriptor{Key: key, Value: value}
		leaf.Descriptors = []*rlsv3.RateLimitDescriptor{d}
		leaf = d
	}
	for _, e := range l.Match.Entries() {
		nest(e.Key, e.Value)
	}
	if len(l.Except) > 0 {
		nest(KeyExcept, outsideValue)
	}
	switch {
	case l.PerClient:
		nest(KeyClient, "") // no value: each client address counts apart
	case l.PerClientSubnet != nil:
		nest(KeySubnet, "")
	case l.PerHeader != "":
		nest(KeyHeader, "")
	}
	leaf.RateLimit = &rlsv3.RateLimitPolicy{Unit: units[l.Unit], RequestsPerUnit: l.Requests}
	leaf.ShadowMode = l.Shadow
	return top
}
