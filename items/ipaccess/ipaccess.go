// Package ipaccess is the `ipAccess` item: which clients the proxy
// serves. An allow list answers every other client 403, a deny list
// answers its ranges 403, a connection deny list closes the TCP
// connections of its ranges before any HTTP is read, and a user agent
// deny list answers those clients 403 (ingress-nginx's
// whitelist-source-range, denylist-source-range, block-cidrs and
// block-user-agents).
package ipaccess

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	networkrbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "ipAccess"

// The filters the item inserts. Both are Envoy's RBAC filters under names
// of our own: Istio's AuthorizationPolicy inserts envoy.filters.http.rbac
// and envoy.filters.network.rbac, and an EnvoyFilter matches filters by
// name, so sharing the name would let either side's patches hit the other.
const (
	HTTPFilter    = "globalconfig.ip_access"
	NetworkFilter = "globalconfig.ip_access.connections"
)

// Where the filters count. Istio's proxies keep only the statistics on
// their inclusion list, which by default takes every name ending in
// rbac.allowed or rbac.denied; both prefixes are chosen so that the
// item's counters end that way and are kept without extra configuration:
//
//	http.<connection manager prefix>.rbac.globalconfig_ip_access_rbac.denied
//	globalconfig_deny_connections.rbac.denied
//
// HTTPStatPrefix ends in a dot because the HTTP filter also puts it in
// front of its dynamic metadata keys
// (globalconfig_ip_access_rbac.enforced_engine_result); the stat name is
// the same with or without it.
const (
	HTTPStatPrefix    = "globalconfig_ip_access_rbac."
	NetworkStatPrefix = "globalconfig_deny_connections"
)

// Policy names. A refused request's response code details
// (%RESPONSE_CODE_DETAILS%, in Istio's default access log format) name the
// policy that matched, as rbac_access_denied_matched_policy[ipAccess.deny],
// so the access log says which list refused a client. A closed connection
// gets the same in its termination details, but no HTTP access log entry:
// no request was read.
const (
	PolicyDeny            = "ipAccess.deny"
	PolicyNotInAllow      = "ipAccess.notInAllow"
	PolicyDenyConnections = "ipAccess.denyConnections"
	PolicyDenyUserAgents  = "ipAccess.denyUserAgents"
)

// MaxUserAgents bounds denyUserAgents, and MaxUserAgent one entry: each is
// tried on every request.
const (
	MaxUserAgents = 1000
	MaxUserAgent  = 1024
)

// MaxRanges bounds the three lists together. Envoy checks a client against
// the ranges one after the other, so the lists cost time on every request
// and connection; and a range takes up to 86 bytes of the stored
// EnvoyFilter (an IPv6 /128 written out in full), so 10000 make about
// 860 KB, within the API server's 1.5 MiB object limit with room to spare
// (TestMaxRangesFitsOneObject). Longer lists belong in a firewall or the
// cloud load balancer.
const MaxRanges = 10000

// IPAccess is the `ipAccess` section.
type IPAccess struct {
	items.Toggle
	Allow           []string `json:"allow" doc:"Client address ranges served; when set, every other client is answered 403 (ingress-nginx whitelist-source-range). CIDRs or single addresses, IPv4 and IPv6; matched against the client address the HTTP connection manager detected (RBAC remote_ip)."`
	Deny            []string `json:"deny" doc:"Client address ranges answered 403, even inside allow (ingress-nginx denylist-source-range). CIDRs or single addresses; matched like allow."`
	DenyConnections []string `json:"denyConnections" doc:"Address ranges whose TCP connections are closed before any HTTP is read (ingress-nginx block-cidrs, which answers 403 instead). Matched against the connection's peer, or the address in the PROXY protocol header when clientIP.proxyProtocol is on; X-Forwarded-For is not read."`
	DenyUserAgents  []string `json:"denyUserAgents" doc:"User-Agent values answered 403 (ingress-nginx block-user-agents): a value matched whole and ignoring case, as nginx's map matches strings, or a regular expression after ~ (case-sensitive) or ~* (ignoring case) that may match anywhere in the header, in RE2 syntax, as Envoy runs it (no lookaround or backreferences); at most 1000 entries of 1024 bytes."`
}

var (
	_ items.Item           = (*IPAccess)(nil)
	_ items.ContextLimiter = (*IPAccess)(nil)
	_ items.Texter         = (*IPAccess)(nil)
	_ items.Versioned      = (*IPAccess)(nil)
)

// Texts implements items.Texter.
func (*IPAccess) Texts() []items.Text {
	return []items.Text{
		{Path: "allow[]", Kind: items.TextCIDR},
		{Path: "deny[]", Kind: items.TextCIDR},
		{Path: "denyConnections[]", Kind: items.TextCIDR},
		{Path: "denyUserAgents[]", Kind: items.TextPattern},
	}
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Client address allow and deny lists (403), connection deny lists (closed before HTTP) and a User-Agent deny list (403), through Envoy's RBAC filters.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             2,
		Purpose:          "refuses requests by client address, before they cost a token",
		Where:            "an HTTP filter and a network filter",
		EnabledByDefault: true,
		New:              func() items.Item { return &IPAccess{} },
	})
}

// entry is one parsed range and where it was written.
type entry struct {
	path string
	pfx  netip.Prefix
}

// Validate implements items.Item.
func (a *IPAccess) Validate() error {
	var p items.Problems
	allow := checkList(&p, "allow", a.Allow, nil)
	deny := checkList(&p, "deny", a.Deny, func(pfx netip.Prefix) string {
		return fmt.Sprintf("%s would refuse every %s client; to take the gateway out of service remove its routes, and to serve only %s clients write allow: [%q]", pfx, family(pfx), family(other(pfx)), other(pfx))
	})
	checkList(&p, "denyConnections", a.DenyConnections, func(pfx netip.Prefix) string {
		return fmt.Sprintf("%s would close every %s connection; to take the gateway out of service remove its routes or its listener", pfx, family(pfx))
	})
	checkUserAgents(&p, a.DenyUserAgents)
	n := len(a.Allow) + len(a.Deny) + len(a.DenyConnections)
	if n > MaxRanges {
		p.Addf("", "lists %d address ranges in all (allow %d, deny %d, denyConnections %d); at most %d: Envoy tries them one by one on every request, and the EnvoyFilter must fit the API server's object size limit. Block large feeds at a firewall or the load balancer",
			n, len(a.Allow), len(a.Deny), len(a.DenyConnections), MaxRanges)
	}
	if v4, v6 := find(allow, netip.MustParsePrefix("0.0.0.0/0")), find(allow, netip.MustParsePrefix("::/0")); v4 != nil && v6 != nil {
		p.Addf("allow", "allows every address (%s and %s), so it restricts nothing; remove allow", v4.path, v6.path)
	}
	// deny wins over allow, so an allow range inside a deny range can
	// never let a client in: it is a mistake in one of the two lists.
	denied := index(deny)
	for _, e := range allow {
		if d, ok := container(denied, e.pfx); ok {
			p.Addf(e.path, "%s is inside %s (%s), and deny wins: it could never allow anything; remove one of them", e.pfx, d.path, d.pfx)
		}
	}
	items.RequireSomething(&p, a)
	if a.Enable && n+len(a.DenyUserAgents) == 0 && (a.Allow != nil || a.Deny != nil || a.DenyConnections != nil || a.DenyUserAgents != nil) {
		// Empty lists are set keys to RequireSomething, but generate
		// nothing all the same.
		p.Addf("", "lists no address range and no user agent; give at least one in allow, deny, denyConnections or denyUserAgents, or remove the section")
	}
	return p.Err()
}

// UserAgent is one parsed denyUserAgents entry: a value matched whole and
// ignoring case, or a regular expression.
type UserAgent struct {
	Value      string
	Regex      bool
	IgnoreCase bool
}

// ParseUserAgent reads one denyUserAgents entry as nginx's map reads its
// source values: ~ starts a case-sensitive regular expression, ~* one
// that ignores case, anything else is a string matched ignoring case.
func ParseUserAgent(s string) (UserAgent, error) {
	switch {
	case strings.HasPrefix(s, "~*"):
		return parseRegex(strings.TrimPrefix(s, "~*"), true)
	case strings.HasPrefix(s, "~"):
		return parseRegex(strings.TrimPrefix(s, "~"), false)
	case strings.TrimSpace(s) == "":
		return UserAgent{}, fmt.Errorf("must not be empty")
	}
	return UserAgent{Value: s, IgnoreCase: true}, nil
}

func parseRegex(expr string, ignoreCase bool) (UserAgent, error) {
	if expr == "" {
		return UserAgent{}, fmt.Errorf("the regular expression after ~ is empty")
	}
	ua := UserAgent{Value: expr, Regex: true, IgnoreCase: ignoreCase}
	// Refused here only when every Envoy of the fleet refuses it; one
	// that only some refuse is refused for their releases by BuildFor.
	var errs []error
	for _, d := range re2.Dialects() {
		if _, err := ua.matchers(d); err != nil {
			errs = append(errs, err)
			continue
		}
		return ua, nil
	}
	return UserAgent{}, errs[0]
}

// wrap is the regex Envoy runs for expr: nginx's regular expressions match
// anywhere in the value, Envoy's match it whole.
func (ua UserAgent) wrap(expr string) string {
	if ua.IgnoreCase {
		expr = "(?i)" + expr
	}
	return ".*(?:" + expr + ").*"
}

// matchers are the regexes Envoy runs for a regex entry with the RE2 of
// dialect d: one, or, when its program is over Envoy's limit
// (re2.MaxProgramSize) and it is an alternation, several that together
// match what it matches (a bot list written as one regex keeps working).
func (ua UserAgent) matchers(d re2.Dialect) ([]string, error) {
	check := func(re string) (int, error) { return re2.CheckDialect(re, d) }
	re := ua.wrap(ua.Value)
	size, err := check(re)
	switch {
	case err != nil:
		return nil, fmt.Errorf("Envoy's RE2 refuses it: %v", err)
	case size <= re2.MaxProgramSize:
		return []string{re}, nil
	}
	prefix, alts, suffix, ok := re2.TopAlternatives(ua.Value)
	if !ok {
		return nil, fmt.Errorf("its RE2 program size is %d, over Envoy's limit of %d (re2.max_program_size), and it is no alternation globalconfig can split; split it into several entries", size, re2.MaxProgramSize)
	}
	build := func(group []string) string { return ua.wrap(prefix + "(?:" + strings.Join(group, "|") + ")" + suffix) }
	groups, err := re2.SplitAlternatives(alts, build, check)
	var alt *re2.AlternativeError
	switch {
	case errors.As(err, &alt) && alt.Err != nil:
		return nil, fmt.Errorf("Envoy's RE2 refuses its alternative %q: %v", alt.Alternative, alt.Err)
	case errors.As(err, &alt):
		return nil, fmt.Errorf("its RE2 program size is %d, over Envoy's limit of %d, and its alternative %q alone is %d; split it into several entries", size, re2.MaxProgramSize, alt.Alternative, alt.Size)
	case err != nil:
		return nil, err
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = build(g)
	}
	return out, nil
}

// dialectOf is the RE2 dialect of the proxies of release r: Envoy 1.39
// and newer compile regexes in Latin-1 (see internal/re2).
func dialectOf(r envoyfilter.Release) re2.Dialect {
	if r.Envoy.AtLeast(envoyfilter.Version{Major: 1, Minor: 39}) {
		return re2.Envoy139
	}
	return re2.Envoy136
}

func checkUserAgents(p *items.Problems, list []string) {
	if len(list) > MaxUserAgents {
		p.Addf("denyUserAgents", "lists %d user agents; at most %d: each is tried on every request", len(list), MaxUserAgents)
	}
	seen := map[string]int{}
	for i, s := range list {
		path := fmt.Sprintf("denyUserAgents[%d]", i)
		if len(s) > MaxUserAgent {
			p.Addf(path, "is %d bytes; at most %d", len(s), MaxUserAgent)
			continue
		}
		if _, err := ParseUserAgent(s); err != nil {
			p.Addf(path, "%v", err)
			continue
		}
		if j, ok := seen[s]; ok {
			p.Addf(path, "repeats denyUserAgents[%d]; remove one", j)
		}
		seen[s] = i
	}
}

// userAgents is the permission of requests whose User-Agent matches an
// entry of list, on proxies whose RE2 is of dialect d. A regex entry Envoy
// would refuse there is an error at its path.
func userAgents(list []string, d re2.Dialect) ([]*rbacv3.Permission, error) {
	var rules []*rbacv3.Permission
	var p items.Problems
	for i, s := range list {
		ua, err := ParseUserAgent(s)
		if err != nil {
			return nil, err
		}
		matchers := []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: ua.Value}, IgnoreCase: true}}
		if ua.Regex {
			regexes, err := ua.matchers(d)
			if err != nil {
				p.Addf(fmt.Sprintf("denyUserAgents[%d]", i), "%v", err)
				continue
			}
			matchers = matchers[:0]
			for _, re := range regexes {
				matchers = append(matchers, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
			}
		}
		for _, m := range matchers {
			rules = append(rules, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
				Name: "user-agent", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m},
			}}})
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return []*rbacv3.Permission{{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: rules}}}}, nil
}

// checkList parses one list, records every entry that is not a valid range,
// that repeats another or lies inside another, and returns the valid ones.
// everything, when not nil, refuses a whole address family (/0) with the
// message it returns; such an entry is left out of the other checks, which
// would only repeat the problem.
func checkList(p *items.Problems, key string, list []string, everything func(netip.Prefix) string) []entry {
	var valid []entry
	for i, s := range list {
		path := fmt.Sprintf("%s[%d]", key, i)
		pfx, err := ParseRange(s)
		if err != nil {
			p.Addf(path, "%v", err)
			continue
		}
		if everything != nil && pfx.Bits() == 0 {
			p.Addf(path, "%s", everything(pfx))
			continue
		}
		valid = append(valid, entry{path: path, pfx: pfx})
	}
	// Equal ranges: the later one repeats the first.
	first := map[netip.Prefix]entry{}
	var distinct []entry
	for _, e := range valid {
		if f, ok := first[e.pfx]; ok {
			p.Addf(e.path, "%s repeats %s; remove one", e.pfx, f.path)
			continue
		}
		first[e.pfx] = e
		distinct = append(distinct, e)
	}
	// A range inside a wider one of the same list adds nothing.
	for _, e := range distinct {
		if c, ok := container(first, e.pfx); ok && c.pfx != e.pfx {
			p.Addf(e.path, "%s is inside %s (%s); remove it", e.pfx, c.path, c.pfx)
		}
	}
	return valid
}

// index maps each range of a list to its (first) entry.
func index(list []entry) map[netip.Prefix]entry {
	m := make(map[netip.Prefix]entry, len(list))
	for _, e := range list {
		if _, ok := m[e.pfx]; !ok {
			m[e.pfx] = e
		}
	}
	return m
}

// container returns the widest range of set that contains pfx (pfx itself
// included), trying each shorter prefix of pfx: at most 129 lookups.
func container(set map[netip.Prefix]entry, pfx netip.Prefix) (entry, bool) {
	for bits := 0; bits <= pfx.Bits(); bits++ {
		if e, ok := set[netip.PrefixFrom(pfx.Addr(), bits).Masked()]; ok {
			return e, true
		}
	}
	return entry{}, false
}

func find(list []entry, pfx netip.Prefix) *entry {
	for i := range list {
		if list[i].pfx == pfx {
			return &list[i]
		}
	}
	return nil
}

func family(pfx netip.Prefix) string {
	if pfx.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// other is the whole address space of the other family.
func other(pfx netip.Prefix) netip.Prefix {
	if pfx.Addr().Is4() {
		return netip.MustParsePrefix("::/0")
	}
	return netip.MustParsePrefix("0.0.0.0/0")
}

// ParseRange reads one address range: a CIDR (203.0.113.0/24,
// 2001:db8::/32) or a single address, which is a range of one (/32 or
// /128), as in ingress-nginx. It refuses what would not do what it says:
// host bits set (10.0.0.1/8 most likely names the wrong range), IPv6
// zones, IPv4-mapped IPv6 ranges (Envoy compares IPv4 clients with IPv4
// ranges only), and several ranges in one string.
func ParseRange(s string) (netip.Prefix, error) {
	if f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }); len(f) > 1 {
		return netip.Prefix{}, fmt.Errorf("holds %d ranges (%q); write one range per list entry", len(f), s)
	}
	var pfx netip.Prefix
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%s has an IPv6 zone; write the address without %%%s", s, a.Zone())
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	} else {
		pfx, err = netip.ParsePrefix(s)
		if err != nil {
			if a, bits, ok := strings.Cut(s, "/"); ok {
				if addr, aerr := netip.ParseAddr(a); aerr == nil && addr.Zone() == "" {
					if n, nerr := strconv.Atoi(bits); nerr == nil && n > addr.BitLen() {
						return netip.Prefix{}, fmt.Errorf("%s has a prefix length of %d; an %s range has at most %d", s, n, family(netip.PrefixFrom(addr, 0)), addr.BitLen())
					}
				}
			}
			return netip.Prefix{}, fmt.Errorf("must be an address range such as 203.0.113.0/24 or 2001:db8::/32, or a single address, got %q", s)
		}
		if pfx.Masked() != pfx {
			return netip.Prefix{}, fmt.Errorf("%s has host bits set; did you mean %s?", s, pfx.Masked())
		}
	}
	if pfx.Addr().Is4In6() {
		if pfx.Bits() >= 96 {
			return netip.Prefix{}, fmt.Errorf("%s is an IPv4-mapped IPv6 range, which Envoy never matches against IPv4 clients; write %s", s, netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96))
		}
		return netip.Prefix{}, fmt.Errorf("%s is an IPv4-mapped IPv6 range, which Envoy never matches against IPv4 clients; write IPv4 ranges in IPv4 form", s)
	}
	return pfx, nil
}

// ContextLimits implements items.ContextLimiter. On a sidecar's outbound
// listeners the client is the workload itself, so an allow list would
// refuse every request the workload makes; ANY includes those listeners.
func (*IPAccess) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound},
		Why: "on a sidecar's outbound listeners the client is the workload itself, so the lists would refuse or close the workload's own requests (ANY includes those listeners)"}}
}

// Build implements items.Item: the patches for the newest Envoy.
func (a *IPAccess) Build() ([]envoyfilter.Patch, error) { return a.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: regexes are compiled by the RE2 of
// the release's Envoy, whose dialect and so program sizes differ.
func (a *IPAccess) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	allow, err := parseAll(a.Allow)
	if err != nil {
		return nil, err
	}
	deny, err := parseAll(a.Deny)
	if err != nil {
		return nil, err
	}
	conns, err := parseAll(a.DenyConnections)
	if err != nil {
		return nil, err
	}
	var patches []envoyfilter.Patch
	if len(conns) > 0 {
		p, err := envoyfilter.InsertNetworkFilter(NetworkFilter, &networkrbacv3.RBAC{
			StatPrefix: NetworkStatPrefix,
			Rules: &rbacv3.RBAC{
				Action: rbacv3.RBAC_DENY,
				Policies: map[string]*rbacv3.Policy{
					PolicyDenyConnections: {Permissions: anything(), Principals: remoteIPs(conns)},
				},
			},
		})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if len(allow) > 0 || len(deny) > 0 || len(a.DenyUserAgents) > 0 {
		policies := map[string]*rbacv3.Policy{}
		if len(a.DenyUserAgents) > 0 {
			perms, err := userAgents(a.DenyUserAgents, dialectOf(r))
			if err != nil {
				return nil, err
			}
			policies[PolicyDenyUserAgents] = &rbacv3.Policy{Permissions: perms, Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}}}
		}
		if len(deny) > 0 {
			policies[PolicyDeny] = &rbacv3.Policy{Permissions: anything(), Principals: remoteIPs(deny)}
		}
		if len(allow) > 0 {
			policies[PolicyNotInAllow] = &rbacv3.Policy{
				Permissions: anything(),
				Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_NotId{NotId: &rbacv3.Principal{
					Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: remoteIPs(allow)}},
				}}}},
			}
		}
		p, err := envoyfilter.InsertHTTPFilter(HTTPFilter, &httprbacv3.RBAC{
			Rules:           &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: policies},
			RulesStatPrefix: HTTPStatPrefix,
		})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}

func parseAll(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		pfx, err := ParseRange(s)
		if err != nil {
			return nil, err
		}
		out = append(out, pfx)
	}
	return out, nil
}

// anything is the permission of every request or connection: the policies
// select by client address alone.
func anything() []*rbacv3.Permission {
	return []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}
}

// remoteIPs is one remote_ip principal per range. remote_ip is the
// downstream address Envoy settled on: in the HTTP filter, the client the
// connection manager detected (X-Forwarded-For with trusted hops, original
// IP detection); in the network filter, the connection's peer or its PROXY
// protocol address. direct_remote_ip would be the physical peer in both,
// the load balancer when it speaks PROXY protocol.
func remoteIPs(list []netip.Prefix) []*rbacv3.Principal {
	out := make([]*rbacv3.Principal, 0, len(list))
	for _, pfx := range list {
		out = append(out, &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: &corev3.CidrRange{
			AddressPrefix: pfx.Addr().String(),
			PrefixLen:     wrapperspb.UInt32(uint32(pfx.Bits())),
		}}})
	}
	return out
}
