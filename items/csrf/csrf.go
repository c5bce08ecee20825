// Package csrf is the `csrf` item: Envoy's CSRF filter at the gateways.
// A request that changes state (POST, PUT, DELETE, PATCH) must come from
// the origin it is sent to: its Origin header (or, without one, its
// Referer) must name the host the request is for, or one of the additional
// origins; anything else is refused with 403. It can run in shadow mode
// first, counting what it would refuse. Requests opt out by path and host
// with the `skip` keys every request-checking item shares
// (items/internal/skip).
package csrf

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	csrfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/csrf/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/skip"
)

// Name is the item's key in the document.
const Name = "csrf"

// The filters the item inserts, under names of their own.
const (
	// Filter is the CSRF filter.
	Filter = "globalconfig.csrf"
	// ScopeFilter is the RBAC filter that marks the requests to check
	// (items/internal/skip).
	ScopeFilter = "globalconfig.csrf.scope"
)

// The scope filter's mark.
const (
	// ShadowStatPrefix prefixes the scope filter's statistics
	// (http.<prefix>.rbac.globalconfig_csrf_.shadow_denied: requests
	// checked; .shadow_allowed: requests opted out).
	ShadowStatPrefix = "globalconfig_csrf_"
	// PolicyCheck is the policy of the requests to check.
	PolicyCheck = "csrf.check"
)

var marker = skip.Marker{StatPrefix: ShadowStatPrefix, Policy: PolicyCheck}

// Runtime keys of the two shares, so that an operator can change them on
// one proxy through its admin interface without a new EnvoyFilter.
const (
	enforcedRuntimeKey = "globalconfig.csrf.enforced"
	shadowRuntimeKey   = "globalconfig.csrf.shadow"
)

// Defaults and limits.
const (
	// DefaultEnforcedPercent: every request is checked and refused when
	// its origin is another.
	DefaultEnforcedPercent = 100
	// MaxOrigins bounds additionalOrigins: each is tried on every
	// cross-origin request.
	MaxOrigins = 64
)

// CSRF is the `csrf` section.
type CSRF struct {
	items.Toggle
	EnforcedPercent   *uint32   `json:"enforcedPercent" doc:"The share of requests, 0 to 100, whose origin is checked and refused with 403 when it is another (Envoy's filter_enabled; default 100). The rest are checked and counted without being refused (shadow_enabled), so a rollout can start low and watch the counts."`
	Shadow            bool      `json:"shadow" doc:"Check and count every request, refuse none: the results are in the gateway's statistics (http.<prefix>.csrf.request_invalid, .missing_source_origin, .request_valid). The same as enforcedPercent: 0."`
	AdditionalOrigins []Origin  `json:"additionalOrigins" doc:"Origins besides the request's own host that may send state-changing requests; each is matched against the Origin header's host and port (no scheme), e.g. app.example.com or app.example.com:8443. At most 64."`
	Skip              skip.Skip `json:"skip" doc:"Requests that pass unchecked, as for every request-checking item (a webhook that receives POSTs from another origin, say). Default: none."`
}

// Origin is one additional origin: exactly one of exact, suffix, regex.
type Origin struct {
	Exact  string `json:"exact" doc:"The origin's host (and port, when the Origin header has one), compared whole, ignoring case: app.example.com."`
	Suffix string `json:"suffix" doc:"A suffix of the origin's host and port, ignoring case: .example.com takes every subdomain of example.com (not example.com itself)."`
	Regex  string `json:"regex" doc:"An RE2 regular expression the whole of the origin's host and port must match, as Envoy runs it (no lookaround or backreferences; a program size of at most 100): ^[a-z]+\\.example\\.com$."`
}

var (
	_ items.Item           = (*CSRF)(nil)
	_ items.Ranger         = (*CSRF)(nil)
	_ items.ContextLimiter = (*CSRF)(nil)
	_ items.Texter         = (*CSRF)(nil)
	_ items.Warner         = (*CSRF)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Gateway-wide CSRF protection (Envoy's csrf filter): state-changing requests from another origin are refused with 403, or only counted in shadow mode, with additional trusted origins and opt-outs by path and host.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             8,
		Purpose:          "refuses cross-origin state-changing requests by their headers alone, after the other refusals (the slots before the auth service were taken: 0 error pages, 1 basicAuth, 2 the address lists), before Istio's own filters and the router",
		Where:            "HTTP filters (an RBAC filter in shadow mode that marks the requests to check when `skip` lists any, and csrf, wrapped in a matcher that skips it for the requests not marked)",
		EnabledByDefault: true,
		New:              func() items.Item { return &CSRF{} },
	})
}

// Ranges implements items.Ranger.
func (*CSRF) Ranges() []items.Range {
	return []items.Range{{Path: "enforcedPercent", Min: 0, Max: 100, Why: "a share of requests, in percent"}}
}

// Texts implements items.Texter.
func (*CSRF) Texts() []items.Text {
	return append([]items.Text{
		{Path: "additionalOrigins[].exact", Kind: items.TextPlain},
		{Path: "additionalOrigins[].suffix", Kind: items.TextPlain},
		{Path: "additionalOrigins[].regex", Kind: items.TextPlain},
	}, skip.Texts("skip")...)
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*CSRF) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "browsers reach the mesh through its gateways; between services, requests carry no Origin and every state-changing one would be refused"}}
}

// Validate implements items.Item.
func (c *CSRF) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, c)
	if c.Shadow && c.EnforcedPercent != nil {
		p.Addf("enforcedPercent", "give at most one of shadow and enforcedPercent: shadow is enforcedPercent: 0")
	}
	if len(c.AdditionalOrigins) > MaxOrigins {
		p.Addf("additionalOrigins", "has %d origins; at most %d: each is tried on every cross-origin request", len(c.AdditionalOrigins), MaxOrigins)
	}
	seen := map[Origin]int{}
	for i, o := range c.AdditionalOrigins {
		at := fmt.Sprintf("additionalOrigins[%d]", i)
		n := 0
		for _, s := range []string{o.Exact, o.Suffix, o.Regex} {
			if s != "" {
				n++
			}
		}
		if n != 1 {
			p.Addf(at, "needs exactly one of exact, suffix and regex")
			continue
		}
		if j, ok := seen[o]; ok {
			p.Addf(at, "repeats additionalOrigins[%d]", j)
			continue
		}
		seen[o] = i
		if o.Regex != "" {
			if err := checkRegex(o.Regex); err != nil {
				p.Addf(at+".regex", "%v", err)
			}
		}
	}
	c.Skip.Validate(&p, "skip")
	return p.Err()
}

// checkRegex is the one regex rule (internal/re2): what every Envoy of the
// fleet's RE2 takes, within Envoy's program size.
func checkRegex(expr string) error {
	size, err := re2.CheckAll(expr)
	switch {
	case err != nil:
		return fmt.Errorf("Envoy's RE2 refuses it: %w", err)
	case size > re2.MaxProgramSize:
		return fmt.Errorf("its RE2 program size is %d, over Envoy's limit of %d (re2.max_program_size): simplify it, or list origins with exact or suffix", size, re2.MaxProgramSize)
	}
	return nil
}

// Warnings implements items.Warner.
func (c *CSRF) Warnings() error {
	var p items.Problems
	if c.Shadow || (c.EnforcedPercent != nil && *c.EnforcedPercent == 0) {
		p.Addf("", "no request is refused: cross-origin requests are only counted (http.<prefix>.csrf.request_invalid)")
	}
	for i, o := range c.AdditionalOrigins {
		for _, s := range []string{o.Exact, o.Suffix, o.Regex} {
			if strings.Contains(s, "://") {
				p.Addf(fmt.Sprintf("additionalOrigins[%d]", i), "%q holds a scheme, but the origin is matched by its host and port alone (app.example.com): it never matches", s)
			}
		}
	}
	return p.Err()
}

// Build implements items.Item.
func (c *CSRF) Build() ([]envoyfilter.Patch, error) {
	enforced := uint32(DefaultEnforcedPercent)
	switch {
	case c.Shadow:
		enforced = 0
	case c.EnforcedPercent != nil:
		enforced = *c.EnforcedPercent
	}
	cfg := &csrfv3.CsrfPolicy{
		FilterEnabled: percent(enforcedRuntimeKey, enforced),
		// Every request not enforced is still checked and counted.
		ShadowEnabled: percent(shadowRuntimeKey, 100),
	}
	for _, o := range c.AdditionalOrigins {
		m := &matcherv3.StringMatcher{}
		switch {
		case o.Exact != "":
			m.MatchPattern, m.IgnoreCase = &matcherv3.StringMatcher_Exact{Exact: o.Exact}, true
		case o.Suffix != "":
			m.MatchPattern, m.IgnoreCase = &matcherv3.StringMatcher_Suffix{Suffix: o.Suffix}, true
		default:
			m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: o.Regex}}
		}
		cfg.AdditionalOrigins = append(cfg.AdditionalOrigins, m)
	}
	return c.Skip.Filters(marker, ScopeFilter, Filter, cfg)
}

func percent(key string, n uint32) *corev3.RuntimeFractionalPercent {
	return &corev3.RuntimeFractionalPercent{
		DefaultValue: &typev3.FractionalPercent{Numerator: n, Denominator: typev3.FractionalPercent_HUNDRED},
		RuntimeKey:   key,
	}
}
