// Package extauth is the `extAuth` item: every request through the
// gateway is checked by one auth service, over HTTP or gRPC, before it is
// routed (ingress-nginx's global-auth-url). Requests can opt out by path
// prefix and by host (ingress-nginx's no-auth-locations and the
// enable-global-auth annotation), and a refusal with 401 can become a
// redirect to a sign-in page (global-auth-signin).
//
// Two HTTP filters do it, as Istio's own CUSTOM authorization action does:
// an RBAC filter whose shadow rules never refuse anything but mark, in the
// request's dynamic metadata, the requests to check, and Envoy's ext_authz
// filter, enabled by that mark (filter_enabled_metadata). The opt-outs
// therefore depend on no route or virtual host name istiod generates, and
// work on every proxy.
package extauth

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/skip"
)

// Name is the item's key in the document.
const Name = "extAuth"

// The filters the item inserts, under names of its own: Istio's CUSTOM
// action inserts envoy.filters.http.rbac and envoy.filters.http.ext_authz,
// and EnvoyFilters match filters by name.
const (
	// ScopeFilter is the RBAC filter that marks the requests to check.
	ScopeFilter = "globalconfig.ext_auth.scope"
	// AuthFilter is the ext_authz filter.
	AuthFilter = "globalconfig.ext_auth"
	// StripFilter is the header mutation filter that removes, before the
	// check, the headers the client sent under the names of
	// upstreamHeaders: the backend sees the service's, or none, as from
	// ingress-nginx, never a client's own.
	StripFilter = "globalconfig.ext_auth.strip"
)

// How the two filters talk (the shared opt-out, items/internal/skip):
// the scope filter marks the requests that are not opted out, and
// ext_authz runs when the mark is there (filter_enabled_metadata).
const (
	// ShadowStatPrefix prefixes the scope filter's statistics
	// (http.<prefix>.rbac.globalconfig_ext_auth_.shadow_denied: requests
	// checked; .shadow_allowed: requests opted out; Istio keeps names
	// ending in shadow_allowed and shadow_denied by default) and its
	// metadata keys.
	ShadowStatPrefix = "globalconfig_ext_auth_"
	// PolicyCheck is the policy of the requests to check.
	PolicyCheck = "extAuth.check"
	// StatPrefix names the ext_authz filter's statistics:
	// http.<prefix>.ext_authz.globalconfig.ok, .denied, .error,
	// .failure_mode_allowed, .shadow_denied.
	StatPrefix = "globalconfig"
	// signInRuntimeKey is the runtime key of the sign-in mapper's status
	// (Envoy requires one).
	signInRuntimeKey = "globalconfig.ext_auth.sign_in"
	// signInStatus is the sign-in redirect's status, ingress-nginx's.
	signInStatus = 302
	// unauthorizedFlag is the response flag Envoy sets on a request the
	// auth service refused (UnauthorizedExternalService).
	unauthorizedFlag = "UAEX"
)

// Defaults and limits.
const (
	// DefaultTimeout bounds the check: longer than an auth service takes
	// to refresh a session at an identity provider, short enough that an
	// outage shows as failures within seconds instead of holding every
	// request (Envoy's own default is 200ms, Istio's ten minutes).
	DefaultTimeout = 2 * time.Second
	// MaxTimeout bounds timeout: every request waits for the check.
	MaxTimeout = time.Minute
	// DefaultFailureStatus answers a request whose check failed (the
	// service unreachable, timed out or answering 5xx): 503, an outage,
	// not a refusal (Envoy's default is 403, ingress-nginx's 500).
	DefaultFailureStatus = 503
	// DefaultRedirectParam is the sign-in URL's parameter that carries the
	// original URL, ingress-nginx's default.
	DefaultRedirectParam = "rd"
	// ACMEChallenge is the path ingress-nginx's no-auth-locations names by
	// default: Let's Encrypt's HTTP-01 challenges must pass unchecked.
	ACMEChallenge = skip.ACMEChallenge
	// MaxHeaders bounds each header list.
	MaxHeaders = 64
)

// The Envoy releases settings need.
var (
	// pathOverride and shadowMode came into ext_authz's API with Envoy
	// 1.38 (go-control-plane envoy/v1.38.0).
	pathOverride = envoyfilter.Version{Major: 1, Minor: 38}
	shadowMode   = envoyfilter.Version{Major: 1, Minor: 38}
	// removeOnMatch (a header mutation removing every header whose name
	// matches) came with Envoy 1.36: it strips a prefix's headers.
	removeOnMatch = envoyfilter.Version{Major: 1, Minor: 36}
)

// marker is the scope filter's mark.
var marker = skip.Marker{StatPrefix: ShadowStatPrefix, Policy: PolicyCheck}

// checkReads are the request headers the check itself needs, which the
// strip filter leaves alone even when upstreamHeaders names them: the
// client's credentials.
var checkReads = []string{"authorization", "cookie"}

// ExtAuth is the `extAuth` section.
type ExtAuth struct {
	items.Toggle
	Service                string                       `json:"service" doc:"Host of the auth service, as istiod names its cluster: a Service's full name (oauth2-proxy.auth.svc.cluster.local) or a ServiceEntry's host."`
	Port                   items.Port                   `json:"port" doc:"The auth service's port."`
	Protocol               Protocol                     `json:"protocol" doc:"http (default): Envoy sends the request's headers to the service, and a 200 answer allows it; grpc: Envoy's ext_authz gRPC API (envoy.service.auth.v3.Authorization)."`
	Path                   string                       `json:"path" doc:"http only: the path every check is sent to, replacing the request's own (Envoy's path_override; Istio 1.30 / Envoy 1.38 or newer). The service must answer 200 to allow."`
	PathPrefix             string                       `json:"pathPrefix" doc:"http only: a prefix put before the request's own path and query in the check (Envoy's path_prefix), e.g. /oauth2/auth sends /oauth2/auth/app?x=1 for /app?x=1. Without path or pathPrefix the check goes to the request's own path."`
	Timeout                items.Millis                 `json:"timeout" doc:"How long a request waits for the check, 1ms to 1m; a bare integer is milliseconds (default 2s). Past it, failureMode decides."`
	FailureMode            FailureMode                  `json:"failureMode" doc:"When the check fails (the service unreachable, timed out, or answering 5xx): deny (default) answers failureStatus; allow lets the request through unchecked, with x-envoy-auth-failure-mode-allowed: true."`
	FailureStatus          *uint32                      `json:"failureStatus" doc:"The status of a request whose check failed, with failureMode deny: 400 to 599 as Envoy knows them (default 503)."`
	RequestHeaders         []string                     `json:"requestHeaders" doc:"The request headers sent to the service (default, or a lone *: every one, as ingress-nginx sends them); Envoy always sends authorization, the method, path and host over http. Cookie sessions need cookie."`
	UpstreamHeaders        []string                     `json:"upstreamHeaders" doc:"http only: headers of the service's 200 answer put on the request to the backend (ingress-nginx global-auth-response-headers); a trailing * matches a prefix, e.g. x-auth-request-* (Istio 1.28 or newer). The client's own headers of these names are removed first, but authorization and cookie, which the check reads: the backend sees the service's value or none."`
	ClientHeaders          []string                     `json:"clientHeaders" doc:"http only: headers of the service's refusal sent to the client (default: every one). Given, Envoy also sends www-authenticate and location."`
	ClientHeadersOnSuccess []string                     `json:"clientHeadersOnSuccess" doc:"http only: headers of the service's 200 answer added to the response the client gets (default: set-cookie, so a refreshed session cookie reaches the browser, as ingress-nginx does)."`
	AddHeaders             map[string]items.HeaderValue `json:"addHeaders" doc:"http only: headers added to every check, name → value with Envoy command operators, e.g. x-auth-request-redirect: \"%REQ(:path)%\" (ingress-nginx global-auth-request-redirect)."`
	Skip                   skip.Skip                    `json:"skip" doc:"Requests that pass without a check, as for every request-checking item. Default: paths [/.well-known/acme-challenge], as ingress-nginx's no-auth-locations."`
	SignIn                 *SignIn                      `json:"signIn" doc:"A refusal with 401 becomes a redirect (302) to a sign-in page, with the original URL as a parameter (ingress-nginx global-auth-signin)."`
	Shadow                 bool                         `json:"shadow" doc:"Check and count, but never refuse: the result is in the ext_authz statistics (shadow_denied) and in filter state. Istio 1.30 (Envoy 1.38) or newer."`
}

// SignIn is the sign-in redirect.
type SignIn struct {
	URL           string `json:"url" doc:"The sign-in page: an absolute http(s) URL or a path on the same host (required), e.g. /oauth2/sign_in. Envoy command operators work (%REQ(:authority)%); a literal % is %%."`
	RedirectParam string `json:"redirectParam" doc:"The query parameter that carries the original URL (default rd); left out when url already has it."`
}

// Protocol is how Envoy talks to the service.
type Protocol string

// Values lists the protocols.
func (Protocol) Values() []string { return []string{"http", "grpc"} }

// FailureMode is what happens when the check fails.
type FailureMode string

// Values lists the failure modes.
func (FailureMode) Values() []string { return []string{"allow", "deny"} }

var (
	_ items.Item           = (*ExtAuth)(nil)
	_ items.Ranger         = (*ExtAuth)(nil)
	_ items.Versioned      = (*ExtAuth)(nil)
	_ items.ContextLimiter = (*ExtAuth)(nil)
	_ items.Texter         = (*ExtAuth)(nil)
	_ items.ServiceUser    = (*ExtAuth)(nil)
	_ items.Warner         = (*ExtAuth)(nil)
	_ items.Enum           = Protocol("")
	_ items.Enum           = FailureMode("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Gateway-wide external authorization (ingress-nginx global-auth-url): every request checked by one auth service over HTTP or gRPC, with opt-outs by path and host and a sign-in redirect.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             3,
		Purpose:          "asks the auth service about each request, after the address lists and before the rate limits, which may key on what it sets",
		Where:            "HTTP filters (an RBAC filter in shadow mode that marks the requests to check, ext_authz, and a header mutation that removes the client's own `upstreamHeaders`), a connection manager merge for `signIn`, and HTTP/2 merged into a gRPC service's outbound cluster",
		EnabledByDefault: true,
		New: func() items.Item {
			return &ExtAuth{
				Protocol:    "http",
				Timeout:     items.Millis{Duration: DefaultTimeout},
				FailureMode: "deny",
				Skip:        skip.Skip{Paths: []string{ACMEChallenge}},
			}
		},
		Needs: []items.Need{
			{Setting: "path", Field: "http_service.path_override", Envoy: pathOverride, Older: "refused by validation (pathPrefix works on every proxy)"},
			{Setting: "shadow", Field: "shadow_mode", Envoy: shadowMode, Older: "refused by validation"},
			{Setting: "upstreamHeaders (a trailing *)", Field: "header_mutation remove_on_match", Envoy: removeOnMatch, Older: "refused by validation: list the names"},
		},
	})
}

// Ranges implements items.Ranger.
func (*ExtAuth) Ranges() []items.Range {
	r := items.ErrorStatuses("failureStatus")
	r.Why = "the codes from 400 Envoy knows: a failed check is no success"
	t := items.DurationRange("timeout", time.Millisecond, MaxTimeout)
	t.Why = "every request waits for the check"
	return []items.Range{r, t}
}

// Texts implements items.Texter.
func (*ExtAuth) Texts() []items.Text {
	return append([]items.Text{
		{Path: "service", Kind: items.TextServiceHost},
		{Path: "path", Kind: items.TextURLPath},
		{Path: "pathPrefix", Kind: items.TextURLPath},
		{Path: "requestHeaders[]", Kind: items.TextHeaderRead},
		{Path: "upstreamHeaders[]", Kind: items.TextHeaderRead},
		{Path: "clientHeaders[]", Kind: items.TextHeaderRead},
		{Path: "clientHeadersOnSuccess[]", Kind: items.TextHeaderRead},
		{Path: "addHeaders.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
		{Path: "signIn.url", Kind: items.TextHeaderValue},
		{Path: "signIn.redirectParam", Kind: items.TextPlain},
	}, skip.Texts("skip")...)
}

// Services implements items.ServiceUser.
func (a *ExtAuth) Services() []items.ServiceRef {
	if a.Service == "" {
		return nil
	}
	return []items.ServiceRef{{Path: "service", Host: a.Service, Port: uint32(a.Port), Missing: a.missing()}}
}

// missing says what a gateway does while the service has no cluster:
// Envoy 1.40 and 1.39 load the ext_authz filter and fail every check, as
// when the cluster has no endpoints or its endpoint refuses connections
// (test/proxy TestServiceFailure).
func (a *ExtAuth) missing() string {
	switch {
	case a.Shadow:
		return "every check fails and no request is refused (shadow)"
	case a.FailureMode == "allow":
		return "every check fails and every request passes unchecked, with x-envoy-auth-failure-mode-allowed: true (failureMode allow)"
	}
	status := uint32(DefaultFailureStatus)
	if a.FailureStatus != nil {
		status = *a.FailureStatus
	}
	return fmt.Sprintf("every check fails and every request that is not opted out (skip) is denied with %d (failureMode deny)", status)
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*ExtAuth) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "on a sidecar the auth service's own sidecar would check its own checks, without end, and every call between services would wait for the auth service; for a workload, use an AuthorizationPolicy with action CUSTOM"}}
}

// httpOnly are the keys that mean something with protocol http only: a
// gRPC service says in its answer which headers go where.
func (a *ExtAuth) httpOnly() map[string]bool {
	return map[string]bool{
		"path": a.Path != "", "pathPrefix": a.PathPrefix != "", "upstreamHeaders": a.UpstreamHeaders != nil,
		"clientHeaders": a.ClientHeaders != nil, "clientHeadersOnSuccess": a.ClientHeadersOnSuccess != nil, "addHeaders": a.AddHeaders != nil,
	}
}

// redirectParam is what signIn.redirectParam may be: a query parameter
// name that needs no escaping.
var redirectParam = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,64}$`)

// ValidRedirectParam reports whether s can be signIn.redirectParam.
func ValidRedirectParam(s string) bool { return redirectParam.MatchString(s) }

// Validate implements items.Item.
func (a *ExtAuth) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, a)
	if a.Enable {
		if a.Service == "" {
			p.Addf("service", "is required: the auth service's host")
		}
		if a.Port == 0 {
			p.Addf("port", "is required: the auth service's port")
		}
	}
	if a.Protocol == "grpc" {
		set := a.httpOnly()
		for _, k := range slices.Sorted(maps.Keys(set)) {
			if set[k] {
				p.Addf(k, "only applies with protocol http: a gRPC service says in its answer which headers go to the backend and to the client")
			}
		}
	}
	if a.Path != "" && a.PathPrefix != "" {
		p.Addf("pathPrefix", "give either path or pathPrefix, not both")
	}
	if a.PathPrefix != "" && strings.HasSuffix(a.PathPrefix, "/") {
		p.Addf("pathPrefix", "must not end in /: the request's path, which starts with /, follows it (%s/app), and a double slash is a path few services answer", strings.TrimRight(a.PathPrefix, "/"))
	}
	if a.FailureStatus != nil && a.FailureMode != "deny" {
		p.Addf("failureStatus", "only applies with failureMode: deny")
	}
	checkHeaderList(&p, "requestHeaders", a.RequestHeaders, false)
	if i := slices.Index(a.RequestHeaders, "*"); i >= 0 && len(a.RequestHeaders) > 1 {
		p.Addf(fmt.Sprintf("requestHeaders[%d]", i), "a lone * already sends every request header; remove the other names, or the *")
	}
	checkHeaderList(&p, "upstreamHeaders", a.UpstreamHeaders, true)
	for i, h := range a.UpstreamHeaders {
		prefix, ok := strings.CutSuffix(strings.ToLower(h), "*")
		if !ok || prefix == "" {
			continue
		}
		for _, r := range append(slices.Clone(checkReads), lower(a.RequestHeaders)...) {
			if strings.HasPrefix(r, prefix) {
				p.Addf(fmt.Sprintf("upstreamHeaders[%d]", i), "%s takes %s, which the check reads: the client's own headers of the names here are removed before the check; name the headers instead", h, r)
				break
			}
		}
	}
	checkHeaderList(&p, "clientHeaders", a.ClientHeaders, true)
	checkHeaderList(&p, "clientHeadersOnSuccess", a.ClientHeadersOnSuccess, true)
	for _, name := range slices.Sorted(maps.Keys(a.AddHeaders)) {
		if strings.EqualFold(name, "content-length") {
			p.Addf(fielderr.Key("addHeaders", name), "content-length is Envoy's to set on the check")
		}
	}
	a.Skip.Validate(&p, "skip")
	if s := a.SignIn; s != nil {
		switch {
		case s.URL == "":
			p.Addf("signIn.url", "is required: the sign-in page")
		case !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "/"):
			p.Addf("signIn.url", "must be an absolute http(s) URL or a path starting with /, got %q: browsers follow the redirect's location", s.URL)
		case strings.ContainsAny(s.URL, "# "):
			p.Addf("signIn.url", "must not hold a fragment (#) or a space: the original URL is added as a query parameter")
		}
		if s.RedirectParam != "" && !redirectParam.MatchString(s.RedirectParam) {
			p.Addf("signIn.redirectParam", "must be a query parameter name of letters, digits, '.', '_', '~' or '-', got %q", s.RedirectParam)
		}
	}
	return p.Err()
}

// checkHeaderList checks a list of header names: no name twice (Envoy
// compares them ignoring case), and, for the auth service's answer
// (response), no pseudo-header and an optional trailing * for a prefix.
func checkHeaderList(p *items.Problems, key string, list []string, response bool) {
	if len(list) > MaxHeaders {
		p.Addf(key, "has %d headers; at most %d", len(list), MaxHeaders)
	}
	seen := map[string]int{}
	for i, h := range list {
		at := fmt.Sprintf("%s[%d]", key, i)
		name := strings.ToLower(h)
		if j, ok := seen[name]; ok {
			p.Addf(at, "repeats %s[%d]", key, j)
			continue
		}
		seen[name] = i
		if !response {
			continue
		}
		switch {
		case name == "*":
			p.Addf(at, "a lone * would take every header of the service's answer, :status and content-length among them; name the headers, or a prefix such as x-auth-request-*")
		case strings.HasPrefix(name, ":") || name == "host":
			p.Addf(at, "%s is never copied from the service's answer: pseudo-headers and host belong to the request and the response themselves", h)
		case strings.Contains(strings.TrimSuffix(name, "*"), "*"):
			p.Addf(at, "* may only end a name, as a prefix: x-auth-request-*")
		}
	}
}

// Warnings implements items.Warner.
func (a *ExtAuth) Warnings() error {
	var p items.Problems
	if a.FailureMode == "allow" && !a.Shadow {
		p.Addf("failureMode", "allow lets every request through unchecked while the auth service is down, times out or answers 5xx (counted in ext_authz.%s.failure_mode_allowed)", StatPrefix)
	}
	if a.Shadow {
		p.Addf("shadow", "no request is refused: the service's answers are only counted (ext_authz.%s.shadow_denied)", StatPrefix)
	}
	return p.Err()
}

// Build implements items.Item: the patches for the newest Envoy.
func (a *ExtAuth) Build() ([]envoyfilter.Patch, error) { return a.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: path and shadow need Envoy 1.38.
func (a *ExtAuth) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	var p items.Problems
	if a.Path != "" && !r.Envoy.AtLeast(pathOverride) {
		p.Addf("path", "%s; pathPrefix works on every proxy", items.NeedsMsg(pathOverride))
	}
	if a.Shadow && !r.Envoy.AtLeast(shadowMode) {
		p.Addf("shadow", "%s", items.NeedsMsg(shadowMode))
	}
	if !r.Envoy.AtLeast(removeOnMatch) {
		for i, h := range a.UpstreamHeaders {
			if strings.HasSuffix(h, "*") {
				p.Addf(fmt.Sprintf("upstreamHeaders[%d]", i), "%s: a prefix: the client's own headers it takes are removed before the check with remove_on_match; list the names for older proxies", items.NeedsMsg(removeOnMatch))
			}
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	cluster := envoyfilter.OutboundCluster(a.Service, uint32(a.Port))
	timeout := durationpb.New(a.Timeout.Duration)
	cfg := &extauthzv3.ExtAuthz{
		StatPrefix:          StatPrefix,
		TransportApiVersion: corev3.ApiVersion_V3,
		ShadowMode:          a.Shadow,
	}
	if a.FailureMode == "allow" {
		cfg.FailureModeAllow = true
		cfg.FailureModeAllowHeaderAdd = true
	} else {
		status := uint32(DefaultFailureStatus)
		if a.FailureStatus != nil {
			status = *a.FailureStatus
		}
		cfg.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(status)}
	}
	switch {
	case a.RequestHeaders != nil && !slices.Contains(a.RequestHeaders, "*"):
		cfg.AllowedHeaders = names(a.RequestHeaders)
	case a.Protocol == "http":
		// Envoy's HTTP client sends only authorization, the method, path
		// and host unless told more; its gRPC client sends every header.
		cfg.AllowedHeaders = &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*"}},
		}}}
	}
	if a.Skip.Any() {
		cfg.FilterEnabledMetadata = marker.CheckedMetadata()
	}
	if a.Protocol == "grpc" {
		cfg.Services = &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: a.Service}},
			Timeout:         timeout,
		}}
	} else {
		cfg.Services = &extauthzv3.ExtAuthz_HttpService{HttpService: a.httpService(cluster, timeout)}
	}
	// The filters go to the front of the chain (INSERT_FIRST), one after
	// the other: the one inserted last runs first. In chain order: strip,
	// scope, ext_authz.
	auth, err := envoyfilter.InsertHTTPFilter(AuthFilter, cfg)
	if err != nil {
		return nil, err
	}
	patches := []envoyfilter.Patch{auth}
	if a.Skip.Any() {
		scope, err := envoyfilter.InsertHTTPFilter(ScopeFilter, a.Skip.ScopeFilter(marker))
		if err != nil {
			return nil, err
		}
		patches = append(patches, scope)
	}
	if strip := a.strip(); strip != nil {
		p, err := envoyfilter.InsertHTTPFilter(StripFilter, strip)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if a.Protocol == "grpc" {
		h2, err := envoyfilter.GRPCCluster(cluster)
		if err != nil {
			return nil, err
		}
		patches = append(patches, h2)
	}
	if a.SignIn != nil {
		hcm, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{LocalReplyConfig: &hcmv3.LocalReplyConfig{
			Mappers: []*hcmv3.ResponseMapper{a.SignIn.mapper()},
		}})
		if err != nil {
			return nil, err
		}
		patches = append(patches, hcm)
	}
	return patches, nil
}

// httpService is the HTTP service configuration.
func (a *ExtAuth) httpService(cluster string, timeout *durationpb.Duration) *extauthzv3.HttpService {
	s := &extauthzv3.HttpService{
		ServerUri: &corev3.HttpUri{
			Uri:              fmt.Sprintf("http://%s:%d", a.Service, a.Port),
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
			Timeout:          timeout,
		},
		PathPrefix:   a.PathPrefix,
		PathOverride: a.Path,
	}
	if len(a.AddHeaders) > 0 {
		s.AuthorizationRequest = &extauthzv3.AuthorizationRequest{}
		for _, k := range slices.Sorted(maps.Keys(a.AddHeaders)) {
			s.AuthorizationRequest.HeadersToAdd = append(s.AuthorizationRequest.HeadersToAdd, &corev3.HeaderValue{Key: k, Value: string(a.AddHeaders[k])})
		}
	}
	onSuccess := a.ClientHeadersOnSuccess
	if onSuccess == nil {
		onSuccess = []string{"set-cookie"}
	}
	resp := &extauthzv3.AuthorizationResponse{
		AllowedUpstreamHeaders:        names(a.UpstreamHeaders),
		AllowedClientHeaders:          names(a.ClientHeaders),
		AllowedClientHeadersOnSuccess: names(onSuccess),
	}
	if resp.AllowedUpstreamHeaders != nil || resp.AllowedClientHeaders != nil || resp.AllowedClientHeadersOnSuccess != nil {
		s.AuthorizationResponse = resp
	}
	return s
}

// strip is the header mutation that removes the client's own headers of
// the names upstreamHeaders gives (but those the check reads), before the
// check: the backend then sees the service's value or none, as
// ingress-nginx's proxy_set_header of an auth response header does; nil
// when there are none.
func (a *ExtAuth) strip() *headermutationv3.HeaderMutation {
	reads := append(slices.Clone(checkReads), lower(a.RequestHeaders)...)
	var muts []*mutationrulesv3.HeaderMutation
	for _, h := range lower(a.UpstreamHeaders) {
		if prefix, ok := strings.CutSuffix(h, "*"); ok {
			muts = append(muts, &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationrulesv3.HeaderMutation_RemoveOnMatch{
				KeyMatcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}, IgnoreCase: true},
			}}})
			continue
		}
		if !slices.Contains(reads, h) {
			muts = append(muts, &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}})
		}
	}
	if len(muts) == 0 {
		return nil
	}
	return &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{RequestMutations: muts}}
}

// lower is list in lower case.
func lower(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strings.ToLower(s)
	}
	return out
}

// names matches header names, ignoring case, a trailing * as a prefix;
// nil for an empty list.
func names(list []string) *matcherv3.ListStringMatcher {
	if len(list) == 0 {
		return nil
	}
	m := &matcherv3.ListStringMatcher{}
	for _, h := range list {
		h = strings.ToLower(h)
		sm := &matcherv3.StringMatcher{IgnoreCase: true, MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h}}
		if prefix, ok := strings.CutSuffix(h, "*"); ok {
			sm.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: prefix}
		}
		m.Patterns = append(m.Patterns, sm)
	}
	return m
}

// mapper turns a refusal with 401 by the auth service (the response flag
// UAEX) into a redirect to the sign-in page. Envoy's formatter can't
// percent-encode, so the original URL goes into the parameter as it
// arrived (docs/reference.md says what that means).
func (s *SignIn) mapper() *hcmv3.ResponseMapper {
	return &hcmv3.ResponseMapper{
		Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
			Filters: []*accesslogv3.AccessLogFilter{
				{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
					Comparison: &accesslogv3.ComparisonFilter{Op: accesslogv3.ComparisonFilter_EQ, Value: &corev3.RuntimeUInt32{DefaultValue: 401, RuntimeKey: signInRuntimeKey}},
				}}},
				{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{unauthorizedFlag}}}},
			},
		}}},
		StatusCode:   wrapperspb.UInt32(signInStatus),
		HeadersToAdd: []*corev3.HeaderValueOption{envoyfilter.SetHeader("location", s.Location())},
	}
}

// OriginalURL is the original request's URL as Envoy's formatter writes
// it: the scheme the connection manager set, the authority and the path
// with its query.
const OriginalURL = "%REQ(x-forwarded-proto)%://%REQ(:authority)%%REQ(:path)%"

// Location is the sign-in redirect's location: the URL with the redirect
// parameter added, unless the URL has it already (as ingress-nginx does).
func (s *SignIn) Location() string {
	param := s.RedirectParam
	if param == "" {
		param = DefaultRedirectParam
	}
	if _, query, ok := strings.Cut(s.URL, "?"); ok {
		for _, kv := range strings.Split(query, "&") {
			if k, _, _ := strings.Cut(kv, "="); k == param || url.QueryEscape(k) == param {
				return s.URL
			}
		}
		return s.URL + "&" + param + "=" + OriginalURL
	}
	return s.URL + "?" + param + "=" + OriginalURL
}
