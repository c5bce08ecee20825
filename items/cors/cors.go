// Package cors is the `cors` item: one CORS policy, the default of every
// route of the targeted gateways (Envoy Gateway's SecurityPolicy.cors for
// a whole Gateway; ingress-nginx's enable-cors per Ingress). Istio has a
// CORS policy per VirtualService route only.
//
// The item inserts no filter: istiod puts Envoy's cors filter
// (envoy.filters.http.cors) into every HTTP connection manager it builds,
// and that filter reads its policy from the per-filter configuration of
// the route, its virtual host or its route configuration, the most
// specific first. The item merges the policy into every route
// configuration, the least specific level, so a VirtualService route's
// own corsPolicy (which istiod puts on that route) still decides for that
// route (test/proxy TestCORSVirtualServiceWins).
package cors

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "cors"

// Filter is the name istiod gives Envoy's cors filter in every HTTP
// connection manager: the per-filter configuration is keyed by it.
const Filter = "envoy.filters.http.cors"

// Limits.
const (
	// MaxOrigins bounds allowOrigins: Envoy tries each entry on every
	// request that carries an Origin.
	MaxOrigins = 64
	// MaxNames bounds each list of methods or headers: they are sent in
	// one response header.
	MaxNames = 64
)

// The default methods and request headers, ingress-nginx's
// (cors-allow-methods, cors-allow-headers).
var (
	DefaultMethods = []string{"GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"}
	DefaultHeaders = []string{"dnt", "keep-alive", "user-agent", "x-requested-with", "if-modified-since", "cache-control", "content-type", "range", "authorization"}
)

// latin1 is the RE2 of the newest Envoys (1.39 on), which validation
// checks; BuildFor checks older proxies' own.
var latin1 = envoyfilter.Version{Major: 1, Minor: 39}

// CORS is the `cors` section.
type CORS struct {
	items.Toggle
	AllowOrigins              []string       `json:"allowOrigins" doc:"The origins whose requests may read the answers (required): an origin as browsers send it (https://app.example.com, with its port when not the scheme's own: http://localhost:3000), matched ignoring case; * then a suffix (*.example.com: every origin ending in .example.com, of any scheme, without a port); ~ then an RE2 regular expression the whole origin must match (~* ignores case), e.g. ~^https://[a-z0-9-]+\\.example\\.org$; or a lone * for every origin."`
	AllowMethods              []string       `json:"allowMethods" doc:"The methods a preflight allows (Access-Control-Allow-Methods). Default: GET, PUT, POST, DELETE, PATCH, OPTIONS (ingress-nginx's)."`
	AllowHeaders              []string       `json:"allowHeaders" doc:"The request headers a preflight allows (Access-Control-Allow-Headers), or * for any. Default: ingress-nginx's list (dnt, keep-alive, user-agent, x-requested-with, if-modified-since, cache-control, content-type, range, authorization)."`
	ExposeHeaders             []string       `json:"exposeHeaders" doc:"The response headers a page's script may read besides the CORS-safelisted ones (Access-Control-Expose-Headers)."`
	MaxAge                    *items.Seconds `json:"maxAge" doc:"How long a browser may keep a preflight's answer (Access-Control-Max-Age), in whole seconds (a fraction is dropped); browsers cap it (Chromium at 2h, Firefox at 24h). Unset, none is sent and browsers keep it 5s."`
	AllowCredentials          bool           `json:"allowCredentials" doc:"Requests with cookies or HTTP authentication may be read (Access-Control-Allow-Credentials: true)."`
	AllowPrivateNetworkAccess bool           `json:"allowPrivateNetworkAccess" doc:"Answer Chromium's private network access preflights (Access-Control-Allow-Private-Network: true)."`
	ForwardNotAllowed         *bool          `json:"forwardNotAllowedPreflights" doc:"Whether a preflight from an origin not allowed goes on to the service, which may answer it by its own policy (default true, Envoy's); false: the gateway answers it itself, without the allow headers."`
}

var (
	_ items.Item           = (*CORS)(nil)
	_ items.Ranger         = (*CORS)(nil)
	_ items.Texter         = (*CORS)(nil)
	_ items.Versioned      = (*CORS)(nil)
	_ items.ContextLimiter = (*CORS)(nil)
	_ items.Warner         = (*CORS)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A gateway-wide CORS policy: the default of every route, which a VirtualService route's own corsPolicy overrides.",
		Stage:            envoyfilter.StageHeaders,
		Slot:             1,
		Purpose:          "sets the CORS policy every route of the route configuration falls back to; it inserts no filter (istiod's cors filter reads it)",
		Where:            "a route configuration merge: the per-filter configuration of Envoy's cors filter, which istiod puts into every connection manager; a VirtualService route's own corsPolicy wins on its route",
		EnabledByDefault: true,
		New: func() items.Item {
			return &CORS{}
		},
	})
}

// Ranges implements items.Ranger: maxAge is a duration, never negative
// (the type's own floor), without a ceiling of globalconfig's.
func (*CORS) Ranges() []items.Range {
	return []items.Range{items.DurationRange("maxAge", 0, 0)}
}

// Texts implements items.Texter.
func (*CORS) Texts() []items.Text {
	return []items.Text{
		{Path: "allowOrigins[]", Kind: items.TextPattern},
		{Path: "allowMethods[]", Kind: items.TextMethod},
		{Path: "allowHeaders[]", Kind: items.TextHeaderRead},
		{Path: "exposeHeaders[]", Kind: items.TextHeaderRead},
	}
}

// ContextLimits implements items.ContextLimiter.
func (*CORS) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "browsers' cross-origin requests arrive at the edge; for a workload, a VirtualService's corsPolicy says it per route"}}
}

// Origin is one allowOrigins entry as Envoy matches it.
type Origin struct {
	// Any matches every origin.
	Any bool
	// Exact or Suffix, compared ignoring case; or Regex, which the whole
	// origin must match, ignoring case when IgnoreCase.
	Exact, Suffix, Regex string
	IgnoreCase           bool
}

// scheme is an origin's scheme (RFC 3986).
var scheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// ParseOrigin reads an allowOrigins entry, checking a regex with the RE2
// of the newest Envoys.
func ParseOrigin(s string) (Origin, error) {
	switch {
	case s == "*":
		return Origin{Any: true}, nil
	case strings.HasPrefix(s, "~"):
		o := Origin{Regex: strings.TrimPrefix(s, "~")}
		if r, ok := strings.CutPrefix(o.Regex, "*"); ok {
			o.Regex, o.IgnoreCase = r, true
		}
		if o.Regex == "" {
			return Origin{}, fmt.Errorf("the regular expression after ~ is empty; write ~ then an RE2 pattern the whole origin must match, e.g. ~^https://[a-z]+\\.example\\.com$")
		}
		if err := o.checkRegex(re2.EnvoyDialect); err != nil {
			return Origin{}, err
		}
		return o, nil
	case strings.HasPrefix(s, "*"):
		suffix := strings.TrimPrefix(s, "*")
		if suffix == "" || strings.ContainsAny(suffix, "*/ ") {
			return Origin{}, fmt.Errorf("a suffix after * must be the end of an origin, such as *.example.com, without another *, a / or a space, got %q", s)
		}
		return Origin{Suffix: strings.ToLower(suffix)}, nil
	case s == "null":
		// Browsers send Origin: null from sandboxed frames and files.
		return Origin{Exact: s}, nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || !scheme.MatchString(strings.ToLower(u.Scheme)) || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, " *"):
		return Origin{}, fmt.Errorf("must be an origin as browsers send it, scheme://host[:port] (https://app.example.com), a suffix after * (*.example.com), a regex after ~, or *; got %q", s)
	case u.Path != "":
		return Origin{}, fmt.Errorf("an origin has no path, not even /: browsers send %s://%s, which %q would never match", u.Scheme, u.Host, s)
	}
	return Origin{Exact: strings.ToLower(s)}, nil
}

// regex is the regex Envoy runs.
func (o Origin) regex() string {
	if o.IgnoreCase {
		return "(?i)" + o.Regex
	}
	return o.Regex
}

// checkRegex refuses a regex the RE2 of dialect d refuses, or whose
// program is over Envoy's limit.
func (o Origin) checkRegex(d re2.Dialect) error {
	size, err := re2.CheckDialect(o.regex(), d)
	switch {
	case err != nil:
		return fmt.Errorf("Envoy's RE2 refuses the regular expression: %v", err)
	case size > re2.MaxProgramSize:
		return fmt.Errorf("the regular expression's RE2 program size is %d, over Envoy's limit of %d (re2.max_program_size), so no proxy would load it; split it into several entries", size, re2.MaxProgramSize)
	}
	return nil
}

// matcher is the StringMatcher of the entry.
func (o Origin) matcher() *matcherv3.StringMatcher {
	switch {
	case o.Any:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".*"}}}
	case o.Regex != "":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: o.regex()}}}
	case o.Suffix != "":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: o.Suffix}, IgnoreCase: true}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o.Exact}, IgnoreCase: true}
}

// method is an HTTP method: a token (RFC 9110).
var method = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// Validate implements items.Item.
func (c *CORS) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, c)
	if c.Enable && len(c.AllowOrigins) == 0 {
		p.Addf("allowOrigins", "is required: the origins whose requests may read the answers (a lone * for every origin)")
	}
	if len(c.AllowOrigins) > MaxOrigins {
		p.Addf("allowOrigins", "lists %d origins; at most %d: each is tried on every request with an Origin", len(c.AllowOrigins), MaxOrigins)
	}
	seen := map[string]int{}
	for i, s := range c.AllowOrigins {
		at := fmt.Sprintf("allowOrigins[%d]", i)
		if _, err := ParseOrigin(s); err != nil {
			p.Addf(at, "%v", err)
			continue
		}
		if j, ok := seen[strings.ToLower(s)]; ok {
			p.Addf(at, "repeats allowOrigins[%d]", j)
			continue
		}
		seen[strings.ToLower(s)] = i
	}
	if len(c.AllowOrigins) > 1 {
		for i, s := range c.AllowOrigins {
			if s == "*" {
				p.Addf(fmt.Sprintf("allowOrigins[%d]", i), "a lone * already allows every origin; remove the other entries, or the *")
			}
		}
	}
	checkNames(&p, "allowMethods", c.AllowMethods, true)
	checkNames(&p, "allowHeaders", c.AllowHeaders, false)
	checkNames(&p, "exposeHeaders", c.ExposeHeaders, false)
	return p.Err()
}

// checkNames checks a list of methods or header names: tokens (the Text
// rule checks header names, empty entries included), no empty method, none twice (headers compared
// ignoring case), at most MaxNames.
func checkNames(p *items.Problems, key string, list []string, methods bool) {
	if len(list) > MaxNames {
		p.Addf(key, "lists %d; at most %d: they are sent in one response header", len(list), MaxNames)
	}
	seen := map[string]int{}
	for i, s := range list {
		at := fmt.Sprintf("%s[%d]", key, i)
		k := strings.ToLower(s)
		if s == "" {
			if methods { // a header name's empty entry is the Text rule's
				p.Addf(at, "is empty")
			}
			continue
		}
		if methods {
			k = s
			if !method.MatchString(s) {
				p.Addf(at, "must be an HTTP method, one token such as GET or PROPFIND, got %q", s)
				continue
			}
		}
		if j, ok := seen[k]; ok {
			p.Addf(at, "repeats %s[%d]", key, j)
			continue
		}
		seen[k] = i
	}
}

// Warnings implements items.Warner.
func (c *CORS) Warnings() error {
	var p items.Problems
	if c.AllowCredentials {
		for i, s := range c.AllowOrigins {
			if o, err := ParseOrigin(s); err == nil && o.Any {
				p.Addf(fmt.Sprintf("allowOrigins[%d]", i), "with allowCredentials, a page of any site may read the answers to requests sent with its visitors' cookies: Envoy echoes every origin back, which browsers accept where they refuse a literal *")
			}
		}
	}
	return p.Err()
}

// Build implements items.Item: the patches for the newest Envoy.
func (c *CORS) Build() ([]envoyfilter.Patch, error) { return c.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: the same policy for every release,
// but a regex is held to the RE2 of the release's Envoy (1.36 to 1.38
// read patterns as UTF-8, with larger programs).
func (c *CORS) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	d := re2.Envoy136
	if r.Envoy.AtLeast(latin1) {
		d = re2.Envoy139
	}
	var p items.Problems
	policy := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(orDefault(c.AllowMethods, DefaultMethods), ","),
		AllowHeaders:  strings.Join(orDefault(c.AllowHeaders, DefaultHeaders), ","),
		ExposeHeaders: strings.Join(c.ExposeHeaders, ","),
	}
	for i, s := range c.AllowOrigins {
		o, err := ParseOrigin(s)
		if err == nil && o.Regex != "" {
			err = o.checkRegex(d)
		}
		if err != nil {
			p.Addf(fmt.Sprintf("allowOrigins[%d]", i), "on Envoy %s (Istio %s): %v", r.Envoy, r.Istio, err)
			continue
		}
		policy.AllowOriginStringMatch = append(policy.AllowOriginStringMatch, o.matcher())
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	if c.MaxAge != nil {
		policy.MaxAge = strconv.FormatInt(int64(c.MaxAge.Duration/time.Second), 10)
	}
	if c.AllowCredentials {
		policy.AllowCredentials = wrapperspb.Bool(true)
	}
	if c.AllowPrivateNetworkAccess {
		policy.AllowPrivateNetworkAccess = wrapperspb.Bool(true)
	}
	if c.ForwardNotAllowed != nil {
		policy.ForwardNotMatchingPreflights = wrapperspb.Bool(*c.ForwardNotAllowed)
	}
	cfg, err := anypb.New(policy)
	if err != nil {
		return nil, fmt.Errorf("cors: %w", err)
	}
	return []envoyfilter.Patch{envoyfilter.MergeRouteConfigurations(&routev3.RouteConfiguration{
		TypedPerFilterConfig: map[string]*anypb.Any{Filter: cfg},
	})}, nil
}

func orDefault(list, def []string) []string {
	if list == nil {
		return def
	}
	return list
}
