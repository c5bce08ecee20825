// Package skip is the opt-out every request-checking item shares (extAuth,
// basicAuth, csrf): the `skip` keys, their validation, and the Envoy
// configuration that lets the listed requests pass the item's filter
// unchecked.
//
// One RBAC filter per item, with shadow rules only, never refuses anything:
// it marks, in the request's dynamic metadata, whether the request is one
// to check. The item's own filter reads the mark. A filter with
// filter_enabled_metadata (ext_authz) takes CheckedMetadata; any other
// filter is wrapped by Wrap in an ExtensionWithMatcher that skips it unless
// the mark says "check". The opt-outs therefore depend on no route or
// virtual host name istiod generates, and work on every proxy.
//
// Semantics, the same for every item: a path entry skips that path and
// every path below it, by whole segments, as the connection manager
// normalized it and without the query; a path holding an escape (%), a ;
// a \ or a . or .. segment is always checked; a host entry skips its
// requests on any port, ignoring case.
//
// Using it from an item (four lines):
//
//	type Item struct {
//		Skip skip.Skip `json:"skip" doc:"Requests that pass unchecked. Default: ..."`
//	}
//	var marker = skip.Marker{StatPrefix: "globalconfig_x_", Policy: "x.check"}
//	// Texts:    append(texts, skip.Texts("skip")...)
//	// Validate: it.Skip.Validate(&p, "skip")
//	// Build:    patches, err := it.Skip.Filters(marker, "globalconfig.x.scope", "globalconfig.x", cfg)
//
// Filters returns the item's HTTP filter (wrapped by Wrap when anything is
// skipped) and the scope filter, in the order InsertHTTPFilter patches of
// an INSERT_FIRST stage (the traffic-policy stage) must be listed for the
// scope filter to run first. A filter with filter_enabled_metadata may use
// CheckedMetadata and ScopeFilter instead, as extAuth does.
package skip

import (
	"fmt"
	"slices"
	"strings"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matchingv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/matching/v3"
	skipactionv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/matcher/action/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	metadatamatcherv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/input_matchers/metadata/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// MaxSkips bounds each opt-out list: every request is matched against
// each entry.
const MaxSkips = 256

// ACMEChallenge is the path ingress-nginx's no-auth-locations names by
// default: Let's Encrypt's HTTP-01 challenges must pass unchecked.
const ACMEChallenge = "/.well-known/acme-challenge"

// Skip lists the requests that pass an item's check unchecked.
type Skip struct {
	Paths []string `json:"paths" doc:"Path prefixes of whole segments: /.well-known/acme-challenge skips /.well-known/acme-challenge and /.well-known/acme-challenge/x, not /.well-known/acme-challengeX; matched on the path as the connection manager normalized it (see hardening), without the query. A path holding an escape (%), a ; a \\ or a . or .. segment is always checked. The default is the item's (its reference section says it)."`
	Hosts []string `json:"hosts" doc:"Host names whose requests pass unchecked, on any port (the request's :authority), e.g. public.example.com; case does not matter."`
}

// Any reports whether any request skips the check.
func (s Skip) Any() bool { return len(s.Paths) > 0 || len(s.Hosts) > 0 }

// Texts declares the free-form keys of a Skip at key ("skip").
func Texts(key string) []items.Text {
	return []items.Text{
		{Path: key + ".paths[]", Kind: items.TextURLPath},
		{Path: key + ".hosts[]", Kind: items.TextPlain},
	}
}

// Validate records every problem of s, at key ("skip") in the item's
// section.
func (s Skip) Validate(p *items.Problems, key string) {
	checkPaths(p, key+".paths", s.Paths)
	checkHosts(p, key+".hosts", s.Hosts)
}

// checkPaths checks the paths: whole-segment prefixes that can't be
// reached by a path that means something else.
func checkPaths(p *items.Problems, key string, paths []string) {
	if len(paths) > MaxSkips {
		p.Addf(key, "has %d paths; at most %d: every request is matched against each", len(paths), MaxSkips)
	}
	seen := map[string]int{}
	for i, s := range paths {
		at := fmt.Sprintf("%s[%d]", key, i)
		switch {
		case s == "" || !strings.HasPrefix(s, "/"):
			continue // CheckURLPath's
		case s == "/":
			p.Addf(at, "/ skips every request; to check nothing, disable the item (enable: false)")
			continue
		case strings.HasSuffix(s, "/"):
			p.Addf(at, "must not end in /: a prefix is of whole segments, so %s already skips %s/x", strings.TrimRight(s, "/"), strings.TrimRight(s, "/"))
			continue
		case strings.ContainsAny(s, "%;\\"):
			p.Addf(at, "must not hold %%, ; or \\: a request path with them is always checked (a backend may decode them into another path), so this entry would never skip anything")
			continue
		case strings.Contains(s, "//") || slices.Contains(strings.Split(s, "/"), ".") || slices.Contains(strings.Split(s, "/"), ".."):
			p.Addf(at, "must not hold empty, . or .. segments: write the path as the connection manager normalizes it")
			continue
		}
		if j, ok := seen[s]; ok {
			p.Addf(at, "repeats %s[%d]", key, j)
			continue
		}
		seen[s] = i
	}
}

// checkHosts checks the hosts: host names, without a port or a wildcard.
func checkHosts(p *items.Problems, key string, hosts []string) {
	if len(hosts) > MaxSkips {
		p.Addf(key, "has %d hosts; at most %d: every request is matched against each", len(hosts), MaxSkips)
	}
	seen := map[string]int{}
	for i, h := range hosts {
		at := fmt.Sprintf("%s[%d]", key, i)
		// Host names ignore case, and so does the matcher (toCheck):
		// Public.Example.com skips public.example.com.
		h = strings.ToLower(h)
		switch {
		case strings.HasPrefix(h, "*"):
			p.Addf(at, "a wildcard is not supported: list each host (a request's host is matched exactly, on any port)")
			continue
		case strings.Contains(h, ":"):
			p.Addf(at, "write the host without a port: its requests on every port skip the check")
			continue
		}
		if len(validation.IsDNS1123Subdomain(h)) > 0 {
			p.Addf(at, "must be a host name of letters, digits, '-' and '.', such as public.example.com, got %q", hosts[i])
			continue
		}
		if j, ok := seen[h]; ok {
			p.Addf(at, "repeats %s[%d]", key, j)
			continue
		}
		seen[h] = i
	}
}

// Filters returns the patches of the item's HTTP filter name, configured
// by cfg, with s's opt-outs: the filter alone when nothing is skipped;
// else the filter wrapped (Wrap) and the scope filter scopeName, listed so
// that, inserted first one after the other (the traffic-policy stage), the
// scope filter runs first.
func (s Skip) Filters(m Marker, scopeName, name string, cfg proto.Message) ([]envoyfilter.Patch, error) {
	if !s.Any() {
		p, err := envoyfilter.InsertHTTPFilter(name, cfg)
		if err != nil {
			return nil, err
		}
		return []envoyfilter.Patch{p}, nil
	}
	wrapped, err := m.Wrap(name, cfg)
	if err != nil {
		return nil, err
	}
	filter, err := envoyfilter.InsertHTTPFilter(name, wrapped)
	if err != nil {
		return nil, err
	}
	scope, err := envoyfilter.InsertHTTPFilter(scopeName, s.ScopeFilter(m))
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{filter, scope}, nil
}

// Marker names one item's mark: the RBAC filter writes its shadow rules'
// result under the dynamic metadata namespace envoy.filters.http.rbac
// whatever its own name, with keys prefixed by StatPrefix. Istio's own
// RBAC filters use other prefixes, and each item has its own, so no two
// overwrite each other's keys.
type Marker struct {
	// StatPrefix prefixes the scope filter's statistics
	// (http.<hcm prefix>.rbac.<StatPrefix>shadow_denied: requests
	// checked; shadow_allowed: requests opted out) and its metadata keys.
	// It ends in "_".
	StatPrefix string
	// Policy names the shadow policy of the requests to check.
	Policy string
}

// rbacMetadata is the namespace the RBAC filter writes.
const rbacMetadata = "envoy.filters.http.rbac"

// effectivePolicyKey is the metadata key naming the policy that matched:
// the policy of the requests to check, or nothing for those opted out.
func (m Marker) effectivePolicyKey() string { return m.StatPrefix + "shadow_effective_policy_id" }

// ScopeFilter is the RBAC filter that marks the requests to check: every
// one that no opt-out covers. It never refuses anything.
func (s Skip) ScopeFilter(m Marker) *httprbacv3.RBAC {
	return &httprbacv3.RBAC{
		ShadowRules: &rbacv3.RBAC{
			Action:   rbacv3.RBAC_DENY,
			Policies: map[string]*rbacv3.Policy{m.Policy: {Permissions: []*rbacv3.Permission{s.toCheck()}, Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}}}},
		},
		ShadowRulesStatPrefix: m.StatPrefix,
	}
}

// CheckedMetadata matches the requests ScopeFilter marked to check, for a
// filter's filter_enabled_metadata (ext_authz).
func (m Marker) CheckedMetadata() *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: rbacMetadata,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: m.effectivePolicyKey()}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.Policy},
		}}},
	}
}

// Wrap wraps the HTTP filter name, configured by cfg, for filters without
// filter_enabled_metadata: an ExtensionWithMatcher whose matcher skips the
// filter (SkipFilter) for a request ScopeFilter did not mark to check. A
// request without the mark at all (the scope filter absent) is checked:
// the matcher skips only when the mark names no policy to check.
func (m Marker) Wrap(name string, cfg proto.Message) (*matchingv3.ExtensionWithMatcher, error) {
	typed, err := envoyfilter.Any(cfg)
	if err != nil {
		return nil, fmt.Errorf("skip: pack %s: %w", name, err)
	}
	input, err := envoyfilter.Any(&networkinputsv3.DynamicMetadataInput{
		Filter: rbacMetadata,
		Path:   []*networkinputsv3.DynamicMetadataInput_PathSegment{{Segment: &networkinputsv3.DynamicMetadataInput_PathSegment_Key{Key: m.engineResultKey()}}},
	})
	if err != nil {
		return nil, fmt.Errorf("skip: pack the metadata input: %w", err)
	}
	allowed, err := envoyfilter.Any(&metadatamatcherv3.Metadata{Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
		MatchPattern: &matcherv3.StringMatcher_Exact{Exact: engineAllowed},
	}}}})
	if err != nil {
		return nil, fmt.Errorf("skip: pack the metadata matcher: %w", err)
	}
	action, err := envoyfilter.Any(&skipactionv3.SkipFilter{})
	if err != nil {
		return nil, fmt.Errorf("skip: pack the skip action: %w", err)
	}
	return &matchingv3.ExtensionWithMatcher{
		XdsMatcher: &xdsmatcherv3.Matcher{MatcherType: &xdsmatcherv3.Matcher_MatcherList_{MatcherList: &xdsmatcherv3.Matcher_MatcherList{
			Matchers: []*xdsmatcherv3.Matcher_MatcherList_FieldMatcher{{
				Predicate: &xdsmatcherv3.Matcher_MatcherList_Predicate{MatchType: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_{
					SinglePredicate: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate{
						Input:   &xdscorev3.TypedExtensionConfig{Name: "globalconfig.skip.mark", TypedConfig: input},
						Matcher: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_CustomMatch{CustomMatch: &xdscorev3.TypedExtensionConfig{Name: "globalconfig.skip.opted_out", TypedConfig: allowed}},
					},
				}},
				OnMatch: &xdsmatcherv3.Matcher_OnMatch{OnMatch: &xdsmatcherv3.Matcher_OnMatch_Action{Action: &xdscorev3.TypedExtensionConfig{Name: "globalconfig.skip", TypedConfig: action}}},
			}},
		}}},
		ExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: typed},
	}, nil
}

// The RBAC filter also writes, for every request, its shadow engine's
// result: "denied" when a policy matched (with the DENY action: a request
// to check), "allowed" when none did (a request opted out). Wrap skips on
// "allowed", so that a request without the key is checked.
const engineAllowed = "allowed"

func (m Marker) engineResultKey() string { return m.StatPrefix + "shadow_engine_result" }

// unsafe are the paths no opt-out covers, whatever its prefix: an
// escape (%2F, %2E, %5C), a ; (path parameters some servers drop), a
// backslash, or a . or .. segment, which the connection manager removes
// when it normalizes paths (Istio's default) but a backend might resolve
// otherwise. Such a path is checked.
func unsafe() *rbacv3.Permission {
	var rules []*rbacv3.Permission
	for _, m := range []*matcherv3.StringMatcher{
		{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "%"}},
		{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: ";"}},
		{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: `\`}},
		{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "/./"}},
		{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "/../"}},
		{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "/."}},
		{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "/.."}},
	} {
		rules = append(rules, urlPath(m))
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: rules}}}
}

func urlPath(m *matcherv3.StringMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: m},
	}}}
}

// toCheck is the permission of the requests to check: every one that no
// opt-out covers.
func (s Skip) toCheck() *rbacv3.Permission {
	var skip []*rbacv3.Permission
	if len(s.Paths) > 0 {
		var prefixes []*rbacv3.Permission
		for _, path := range s.Paths {
			prefixes = append(prefixes,
				urlPath(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: path}}),
				urlPath(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: path + "/"}}))
		}
		skip = append(skip, &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: []*rbacv3.Permission{
			{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: prefixes}}},
			{Rule: &rbacv3.Permission_NotRule{NotRule: unsafe()}},
		}}}})
	}
	for _, h := range s.Hosts {
		// The authority as the client sent it: the host alone, or with a
		// port after a colon. Host names ignore case.
		h = strings.ToLower(h)
		skip = append(skip,
			authority(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h}, IgnoreCase: true}),
			authority(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: h + ":"}, IgnoreCase: true}))
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: &rbacv3.Permission{
		Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: skip}},
	}}}
}

func authority(m *matcherv3.StringMatcher) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m},
	}}}
}
