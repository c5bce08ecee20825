// Package requestmatch is the one vocabulary the rate limits use to say
// which requests a limit counts: a path prefix of whole segments, hosts,
// methods, header values, query parameters and client address ranges,
// their validation, and their translation into Envoy rate limit actions.
// globalRateLimit and localRateLimit both import it, so a rule (what a
// method is, what a path prefix matches, which regex Envoy's RE2 takes)
// exists once.
//
// A match becomes actions of Envoy's RateLimit: each writes one entry of
// the request's descriptor only when its condition holds, so a descriptor
// that needs every entry (Entries) is built, and counted, only for the
// requests that match everything given.
package requestmatch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
)

// Bounds of a match's lists.
const (
	// MaxHosts bounds hosts, and MaxMethods methods: a list too long for
	// one of Envoy's regexes becomes several, each tried on every request.
	MaxHosts   = 64
	MaxMethods = 32
	// MaxHeaders bounds headers and MaxQueryParams queryParams: each is a
	// matcher every request is tried against.
	MaxHeaders     = 8
	MaxQueryParams = 8
	// MaxValues bounds a header's or a query parameter's values: they are
	// one regex, which must fit Envoy's RE2 program size.
	MaxValues = 32
	// MaxClientRanges bounds clients.cidrs: Envoy tries the ranges one by
	// one on every request.
	MaxClientRanges = 256
)

// The descriptor entries a match's actions write: KeyMatch when the
// path, hosts, methods and headers all match (one action), KeyQuery once
// per query parameter, KeyClients for the client ranges. Each is written
// with the value MatchValue only when its condition (inverted or not)
// holds.
const (
	KeyMatch   = "match"
	KeyQuery   = "query"
	KeyClients = "clients"
	MatchValue = "yes"
)

// ClientsSince is the first Envoy with the remote_address_match action,
// which clients needs.
var ClientsSince = envoyfilter.Version{Major: 1, Minor: 38}

// Match selects the requests a limit counts: those that match every key
// given. The keys added after pathPrefix, hosts and methods are omitted
// from a limit's JSON when empty, so the descriptor hash of a limit that
// does not use them is what it was before they existed.
type Match struct {
	PathPrefix  string       `json:"pathPrefix" doc:"A path prefix of whole segments: /api counts /api and /api/v1, not /apis. The path as the connection manager normalized it (see hardening)."`
	Hosts       []string     `json:"hosts" doc:"Host names (the request's :authority, without its port, compared ignoring case), e.g. api.example.com; at most 64. A list too long for one of Envoy's regexes is matched by several, still counted as one limit."`
	Methods     []string     `json:"methods" doc:"HTTP methods, upper case, e.g. [POST, PUT]; at most 32. A list too long for one of Envoy's regexes is matched by several, still counted as one limit."`
	Headers     []Header     `json:"headers,omitempty" doc:"Request headers, each of which must match: one of its values, or present when no values are given; invert turns a header's condition around. At most 8."`
	QueryParams []QueryParam `json:"queryParams,omitempty" doc:"Query parameters, each of which must match: one of its values, or present when no values are given; invert turns a parameter's condition around. At most 8."`
	Clients     *Clients     `json:"clients,omitempty" doc:"Client address ranges: the address the connection manager trusts (see clientIP and headers.xff). Needs Istio 1.30 (Envoy 1.38) or newer."`
}

// Header is one entry of match.headers.
type Header struct {
	Name   string   `json:"name" doc:"The request header, e.g. x-tier; case does not matter (required)."`
	Values []string `json:"values,omitempty" doc:"Values the header must have one of, compared exactly; none: the header must be present. At most 32."`
	Invert bool     `json:"invert,omitempty" doc:"Match the requests whose header has none of the values, a request without the header included (Envoy's invert_match with treat_missing_header_as_empty), or, without values, the requests without the header (present_match: false)."`
}

// QueryParam is one entry of match.queryParams.
type QueryParam struct {
	Name   string   `json:"name" doc:"The query parameter's name, compared exactly (required)."`
	Values []string `json:"values,omitempty" doc:"Values the parameter must have one of, compared exactly as they arrive (still percent-encoded); none: the parameter must be present. At most 32."`
	Invert bool     `json:"invert,omitempty" doc:"Match the requests whose parameter has none of the values or is absent, or, without values, is absent (the action's expect_match: false)."`
}

// Clients is match.clients.
type Clients struct {
	CIDRs  []string `json:"cidrs" doc:"Address ranges (CIDRs or single addresses), e.g. 10.0.0.0/8; at most 256 (required)."`
	Invert bool     `json:"invert,omitempty" doc:"Match the clients outside the ranges instead (Envoy's address matcher invert_match)."`
}

// Texts are the free-form keys of a match at prefix (e.g.
// "limits.*.match"), for the item's items.Texter.
func Texts(prefix string) []items.Text {
	return []items.Text{
		{Path: prefix + ".pathPrefix", Kind: items.TextURLPath},
		{Path: prefix + ".hosts[]", Kind: items.TextHostName},
		{Path: prefix + ".methods[]", Kind: items.TextMethod},
		{Path: prefix + ".headers[].name", Kind: items.TextHeaderRead},
		{Path: prefix + ".headers[].values[]", Kind: items.TextPlain},
		{Path: prefix + ".queryParams[].name", Kind: items.TextPlain},
		{Path: prefix + ".queryParams[].values[]", Kind: items.TextPlain},
		{Path: prefix + ".clients.cidrs[]", Kind: items.TextCIDR},
	}
}

// method is what methods takes: an upper-case token (GET, POST, or
// WebDAV's PROPFIND): methods are compared exactly.
var method = regexp.MustCompile(`^[A-Z][A-Z_-]{0,31}$`)

// Validate records every problem of m, at at (the match's own path, e.g.
// `limits.login.match`). A nil match is valid: it matches every request.
func (m *Match) Validate(p *items.Problems, at string) {
	if m == nil {
		return
	}
	if m.empty() {
		p.Addf(at, "matches everything; give pathPrefix, hosts, methods, headers, queryParams or clients, or remove match")
	}
	if len(m.Hosts) > MaxHosts {
		p.Addf(at+".hosts", "has %d hosts; at most %d", len(m.Hosts), MaxHosts)
	}
	for i, h := range m.Hosts {
		// Hosts compare ignoring case.
		for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(h)) {
			p.Addf(fmt.Sprintf("%s.hosts[%d]", at, i), "must be a host name: %s", msg)
		}
	}
	if len(m.Methods) > MaxMethods {
		p.Addf(at+".methods", "has %d methods; at most %d", len(m.Methods), MaxMethods)
	}
	hostsOK, methodsOK := len(m.Hosts) <= MaxHosts, len(m.Methods) <= MaxMethods
	hostAt := map[string]int{}
	for i, h := range m.Hosts {
		if j, ok := hostAt[strings.ToLower(h)]; ok {
			p.Addf(fmt.Sprintf("%s.hosts[%d]", at, i), "repeats hosts[%d] (host names compare ignoring case); remove one", j)
			hostsOK = false
			continue
		}
		hostAt[strings.ToLower(h)] = i
	}
	methodAt := map[string]int{}
	for i, mth := range m.Methods {
		if !method.MatchString(mth) {
			p.Addf(fmt.Sprintf("%s.methods[%d]", at, i), "must be an HTTP method in upper case, such as GET or POST (methods are compared exactly), got %q", mth)
			methodsOK = false
			continue
		}
		if j, ok := methodAt[mth]; ok {
			p.Addf(fmt.Sprintf("%s.methods[%d]", at, i), "repeats methods[%d]; remove one", j)
			methodsOK = false
			continue
		}
		methodAt[mth] = i
	}
	// A list too long for one regex is split (Actions); an entry too long
	// alone can't be.
	if hostsOK {
		if _, i, err := matchRegexes(m.Hosts, HostRegex); err != nil {
			p.Addf(fmt.Sprintf("%s.hosts[%d]", at, i), "%v", err)
		}
	}
	if methodsOK {
		if _, i, err := matchRegexes(m.Methods, MethodRegex); err != nil {
			p.Addf(fmt.Sprintf("%s.methods[%d]", at, i), "%v", err)
		}
	}
	if m.PathPrefix != "" {
		if strings.Contains(m.PathPrefix, "//") {
			p.Addf(at+".pathPrefix", "has an empty segment (//): a prefix is matched by whole segments, so write each segment once, e.g. /api/v1")
		} else if _, err := pathRegex(m.PathPrefix); err != nil {
			p.Addf(at+".pathPrefix", "%v", err)
		}
	}
	if len(m.Headers) > MaxHeaders {
		p.Addf(at+".headers", "has %d headers; at most %d", len(m.Headers), MaxHeaders)
	}
	headerAt := map[string]int{}
	for i, h := range m.Headers {
		hat := fmt.Sprintf("%s.headers[%d]", at, i)
		switch name := strings.ToLower(h.Name); {
		case name == "":
			p.Addf(hat+".name", "is required: the request header to match, e.g. x-tier")
		case name == "host" || name == ":authority":
			p.Addf(hat+".name", "%s is the request's host: use hosts, which compares it without its port and ignoring case", h.Name)
		case name == ":path" || name == ":method":
			p.Addf(hat+".name", "%s has a key of its own: use %s", h.Name, map[string]string{":path": "pathPrefix", ":method": "methods"}[name])
		default:
			if j, dup := headerAt[name]; dup {
				p.Addf(hat+".name", "repeats headers[%d].name (header names compare ignoring case); give one entry per header", j)
			}
			headerAt[name] = i
		}
		for j, v := range h.Values {
			if v == "" || !httpguts.ValidHeaderFieldValue(v) {
				p.Addf(fmt.Sprintf("%s.values[%d]", hat, j), "must be a header value: not empty, no control characters, got %q", v)
			}
		}
		checkValues(p, hat, h.Values)
	}
	if len(m.QueryParams) > MaxQueryParams {
		p.Addf(at+".queryParams", "has %d parameters; at most %d", len(m.QueryParams), MaxQueryParams)
	}
	queryAt := map[string]int{}
	for i, q := range m.QueryParams {
		qat := fmt.Sprintf("%s.queryParams[%d]", at, i)
		if q.Name == "" {
			p.Addf(qat+".name", "is required: the query parameter to match, e.g. debug")
		} else if strings.ContainsAny(q.Name, "&=#? ") || !printable(q.Name) {
			p.Addf(qat+".name", "must be a query parameter name (printable, without &, =, #, ? or a space), got %q", q.Name)
		} else if j, dup := queryAt[q.Name]; dup {
			p.Addf(qat+".name", "repeats queryParams[%d].name; give one entry per parameter", j)
		} else {
			queryAt[q.Name] = i
		}
		for j, v := range q.Values {
			if v == "" || strings.ContainsAny(v, "&#") || !printable(v) {
				p.Addf(fmt.Sprintf("%s.values[%d]", qat, j), "must be a query parameter value as it arrives: not empty, printable, without & or #, got %q", v)
			}
		}
		checkValues(p, qat, q.Values)
	}
	if c := m.Clients; c != nil {
		if len(c.CIDRs) == 0 {
			p.Addf(at+".clients.cidrs", "give at least one address range, e.g. 10.0.0.0/8, or remove clients")
		}
		if len(c.CIDRs) > MaxClientRanges {
			p.Addf(at+".clients.cidrs", "has %d ranges; at most %d", len(c.CIDRs), MaxClientRanges)
		}
		for i, s := range c.CIDRs {
			if _, err := items.ParseCIDR(s); err != nil {
				p.Addf(fmt.Sprintf("%s.clients.cidrs[%d]", at, i), "%v", err)
			}
		}
	}
}

// checkValues checks a header's or parameter's values as a list: their
// number, repeats, and that their regex fits Envoy's RE2.
func checkValues(p *items.Problems, at string, values []string) {
	if len(values) > MaxValues {
		p.Addf(at+".values", "has %d values; at most %d", len(values), MaxValues)
		return
	}
	seen := map[string]int{}
	for i, v := range values {
		if j, ok := seen[v]; ok {
			p.Addf(fmt.Sprintf("%s.values[%d]", at, i), "repeats values[%d]; remove one", j)
			return
		}
		seen[v] = i
	}
	if len(values) > 1 {
		if err := fits(valuesRegex(values)); err != nil {
			p.Addf(at+".values", "%v: give fewer or shorter values", err)
		}
	}
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

func (m *Match) empty() bool {
	return m.PathPrefix == "" && len(m.Hosts) == 0 && len(m.Methods) == 0 && len(m.Headers) == 0 && len(m.QueryParams) == 0 && m.Clients == nil
}

// Entry is one entry of a descriptor, as Envoy's actions write it.
type Entry struct{ Key, Value string }

// Entries are the descriptor entries Actions write for a request that
// matches, in their order: what a limit's descriptor at the proxy or the
// service lists between the limit's own entry and its key.
func (m *Match) Entries() []Entry {
	if m == nil {
		return nil
	}
	var out []Entry
	if m.PathPrefix != "" || len(m.Hosts) > 0 || len(m.Methods) > 0 || len(m.Headers) > 0 {
		out = append(out, Entry{KeyMatch, MatchValue})
	}
	for range m.QueryParams {
		out = append(out, Entry{KeyQuery, MatchValue})
	}
	if m.Clients != nil {
		out = append(out, Entry{KeyClients, MatchValue})
	}
	return out
}

// Actions are the rate limit actions of m, as alternatives: a limit
// becomes one RateLimit per alternative, each with the same descriptor
// (Entries). There is more than one only when a host or method list is too
// long for one of Envoy's regexes and is split into groups that each fit:
// a request matches at most one of them (its :authority is one host, its
// method one method), so the limit still counts it once. A nil match has
// one alternative with no action.
func (m *Match) Actions() ([][]*routev3.RateLimit_Action, error) {
	if m == nil {
		return [][]*routev3.RateLimit_Action{nil}, nil
	}
	var tail []*routev3.RateLimit_Action
	for _, q := range m.QueryParams {
		qm := &routev3.QueryParameterMatcher{Name: q.Name}
		switch len(q.Values) {
		case 0:
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		case 1:
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: q.Values[0]}}}
		default:
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: regexString(valuesRegex(q.Values))}
		}
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_QueryParameterValueMatch_{QueryParameterValueMatch: &routev3.RateLimit_Action_QueryParameterValueMatch{
			DescriptorKey: KeyQuery, DescriptorValue: MatchValue, ExpectMatch: wrapperspb.Bool(!q.Invert), QueryParameters: []*routev3.QueryParameterMatcher{qm},
		}}})
	}
	if c := m.Clients; c != nil {
		var ranges []*xdscorev3.CidrRange
		for _, s := range c.CIDRs {
			pfx, err := items.ParseCIDR(s)
			if err != nil {
				return nil, err
			}
			ranges = append(ranges, &xdscorev3.CidrRange{AddressPrefix: pfx.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(pfx.Bits()))})
		}
		tail = append(tail, &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddressMatch_{RemoteAddressMatch: &routev3.RateLimit_Action_RemoteAddressMatch{
			DescriptorKey: KeyClients, DescriptorValue: MatchValue,
			AddressMatcher: &matcherv3.AddressMatcher{Ranges: ranges, InvertMatch: c.Invert},
		}}})
	}
	if m.PathPrefix == "" && len(m.Hosts) == 0 && len(m.Methods) == 0 && len(m.Headers) == 0 {
		return [][]*routev3.RateLimit_Action{tail}, nil
	}
	// The header matchers every alternative shares: the path, then the
	// headers.
	var shared, headers []*routev3.HeaderMatcher
	if m.PathPrefix != "" {
		re, err := pathRegex(m.PathPrefix)
		if err != nil {
			return nil, err
		}
		shared = append(shared, regexHeader(":path", re))
	}
	for _, h := range m.Headers {
		hm := &routev3.HeaderMatcher{Name: strings.ToLower(h.Name)}
		switch len(h.Values) {
		case 0:
			// Present, or (inverted) absent: present_match false is
			// Envoy's own "absent", clearer than an inverted presence.
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: !h.Invert}
		case 1:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h.Values[0]}}}
		default:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: regexString(valuesRegex(h.Values))}
		}
		if len(h.Values) > 0 && h.Invert {
			// Envoy matches no absent header, inverted or not, unless it
			// reads it as empty: no value is empty, so a request without
			// the header has none of them, and an inverted list matches it.
			hm.InvertMatch = true
			hm.TreatMissingHeaderAsEmpty = true
		}
		headers = append(headers, hm)
	}
	hostREs, i, err := matchRegexes(m.Hosts, HostRegex)
	if err != nil {
		return nil, fmt.Errorf("hosts[%d]: %w", i, err)
	}
	methodREs, i, err := matchRegexes(m.Methods, MethodRegex)
	if err != nil {
		return nil, fmt.Errorf("methods[%d]: %w", i, err)
	}
	var out [][]*routev3.RateLimit_Action
	for _, hostRE := range hostREs {
		for _, methodRE := range methodREs {
			hs := append([]*routev3.HeaderMatcher(nil), shared...)
			if hostRE != "" {
				hs = append(hs, regexHeader(":authority", hostRE))
			}
			if methodRE != "" {
				hs = append(hs, regexHeader(":method", methodRE))
			}
			hs = append(hs, headers...)
			match := &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: &routev3.RateLimit_Action_HeaderValueMatch{
				DescriptorKey: KeyMatch, DescriptorValue: MatchValue, ExpectMatch: wrapperspb.Bool(true), Headers: hs,
			}}}
			out = append(out, append([]*routev3.RateLimit_Action{match}, tail...))
		}
	}
	return out, nil
}

func regexString(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

func regexHeader(name, re string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: regexString(re)}}
}

// pathRegex is the regex of a path prefix of whole segments: the prefix
// itself, or the prefix followed by "/" or a query. It must fit Envoy's
// RE2 in every dialect.
func pathRegex(prefix string) (string, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return "", fmt.Errorf("the path prefix \"/\" matches everything; leave pathPrefix out")
	}
	re := "^" + regexp.QuoteMeta(prefix) + `(?:[/?].*)?$`
	if err := fits(re); err != nil {
		return "", err
	}
	return re, nil
}

// fits says why Envoy would refuse regex re in some dialect a fleet may
// run, or nil.
func fits(re string) error {
	size, err := re2.CheckAll(re)
	switch {
	case err != nil:
		return fmt.Errorf("Envoy's RE2 refuses the regex globalconfig builds from it: %v", err)
	case size > re2.MaxProgramSize:
		return fmt.Errorf("is too long: its regex's RE2 program size is %d, over Envoy's limit of %d", size, re2.MaxProgramSize)
	}
	return nil
}

// valuesRegex matches a value exactly against values.
func valuesRegex(values []string) string {
	alts := make([]string, len(values))
	for i, v := range values {
		alts[i] = regexp.QuoteMeta(v)
	}
	return "^(?:" + strings.Join(alts, "|") + ")$"
}

// HostRegex matches a request's :authority against hosts: it may carry a
// port, and host names compare ignoring case.
func HostRegex(hosts []string) string {
	alts := make([]string, len(hosts))
	for i, h := range hosts {
		alts[i] = regexp.QuoteMeta(h)
	}
	return "(?i)^(?:" + strings.Join(alts, "|") + `)(?::[0-9]+)?$`
}

// MethodRegex matches a request's method against methods, exactly.
func MethodRegex(methods []string) string {
	return "^(?:" + strings.Join(methods, "|") + ")$"
}

// matchRegexes are the regexes that together match list (one element:
// "" when list is empty), each within Envoy's RE2 limit in every dialect
// (a fleet may run several Envoy releases): one while the whole list fits,
// else the fewest groups that each fit. An element that can't be matched
// even alone is an error, with its index.
func matchRegexes(list []string, build func([]string) string) ([]string, int, error) {
	if len(list) == 0 {
		return []string{""}, 0, nil
	}
	groups, err := re2.SplitAlternatives(list, build, re2.CheckAll)
	var alt *re2.AlternativeError
	switch {
	case errors.As(err, &alt) && alt.Err != nil:
		return nil, alt.Index, fmt.Errorf("Envoy's RE2 refuses the regex globalconfig builds from it: %v", alt.Err)
	case errors.As(err, &alt):
		return nil, alt.Index, fmt.Errorf("is too long: the regex globalconfig builds from it alone has an RE2 program size of %d, over Envoy's limit of %d (re2.max_program_size; Envoy 1.36 to 1.38 also match k and s as the Kelvin and long s signs, which costs more), so no proxy would load it", alt.Size, re2.MaxProgramSize)
	case err != nil:
		return nil, 0, err
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = build(g)
	}
	return out, 0, nil
}

// limitName is what a limit's name may be: it is a descriptor's value,
// and at a rate-limit service a part of its counter keys.
var limitName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$`)

// CheckLimitName records a problem at at when name can't name a limit.
func CheckLimitName(p *items.Problems, at, name, names string) {
	if !limitName.MatchString(name) {
		p.Addf(at, "a limit's name must be 1 to 63 letters, digits, '_' or '-', starting and ending with a letter or digit: it names the limit %s", names)
	}
}

// descriptorHashes is how many hex digits of a limit's hash its
// descriptor carries.
const descriptorHashes = 8

// Descriptor is a limit's descriptor value: its name and a short hash of
// its definition (def, marshalled as JSON), so that an edited limit is a
// new descriptor, counted afresh, and nothing depends on a list position.
func Descriptor(name string, def any) string {
	b, err := json.Marshal(def)
	if err != nil {
		b = fmt.Appendf(nil, "%#v", def) // plain data: never
	}
	sum := sha256.Sum256(b)
	return name + "." + hex.EncodeToString(sum[:])[:descriptorHashes]
}

// Unit is a limit's time unit, spelled the same in both rate limits.
type Unit string

// Values lists the units.
func (Unit) Values() []string { return []string{"second", "minute", "hour", "day"} }

var _ items.Enum = Unit("")

// Duration is how long one unit is (0 for no unit).
func (u Unit) Duration() time.Duration {
	return map[Unit]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[u]
}
