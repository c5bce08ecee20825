package requestmatch

import (
	"regexp"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/globalconfig/globalconfig/items"
)

// written is the descriptor entry an action writes when its condition
// holds.
func written(a *routev3.RateLimit_Action) Entry {
	switch {
	case a.GetHeaderValueMatch() != nil:
		return Entry{a.GetHeaderValueMatch().GetDescriptorKey(), a.GetHeaderValueMatch().GetDescriptorValue()}
	case a.GetQueryParameterValueMatch() != nil:
		return Entry{a.GetQueryParameterValueMatch().GetDescriptorKey(), a.GetQueryParameterValueMatch().GetDescriptorValue()}
	case a.GetRemoteAddressMatch() != nil:
		return Entry{a.GetRemoteAddressMatch().GetDescriptorKey(), a.GetRemoteAddressMatch().GetDescriptorValue()}
	}
	return Entry{}
}

// Every alternative's actions write exactly the entries a limit's
// descriptor lists (Entries), in order: otherwise a request that matches
// would make a descriptor no configured one equals, and never be counted.
func TestActionsWriteTheEntries(t *testing.T) {
	sixHosts := []string{"api.example.com", "www.example.com", "shop.example.com", "checkout.example.com", "accounts.example.com", "login.example.com"}
	for name, m := range map[string]*Match{
		"path":          {PathPrefix: "/login"},
		"query only":    {QueryParams: []QueryParam{{Name: "debug"}, {Name: "trace", Values: []string{"1", "2"}, Invert: true}}},
		"clients only":  {Clients: &Clients{CIDRs: []string{"10.0.0.0/8"}, Invert: true}},
		"headers only":  {Headers: []Header{{Name: "x-tier", Values: []string{"premium"}, Invert: true}}},
		"split, all":    {PathPrefix: "/api", Hosts: sixHosts, Methods: []string{"GET"}, Headers: []Header{{Name: "x-a"}}, QueryParams: []QueryParam{{Name: "q"}}, Clients: &Clients{CIDRs: []string{"192.0.2.1"}}},
		"nil: no entry": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var p items.Problems
			m.Validate(&p, "match")
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			alts, err := m.Actions()
			if err != nil {
				t.Fatal(err)
			}
			want := m.Entries()
			if name == "split, all" && len(alts) < 2 {
				t.Fatalf("%d alternatives; six hosts don't fit one regex", len(alts))
			}
			for i, actions := range alts {
				var got []Entry
				for _, a := range actions {
					got = append(got, written(a))
				}
				if len(got) != len(want) {
					t.Fatalf("alternative %d writes %v, the descriptor lists %v", i, got, want)
				}
				for j := range got {
					if got[j] != want[j] {
						t.Errorf("alternative %d entry %d: %v, the descriptor lists %v", i, j, got[j], want[j])
					}
				}
			}
		})
	}
}

// The inverted conditions are built as Envoy reads them: an inverted
// header value list matches a request without the header (invert_match
// with treat_missing_header_as_empty: Envoy 1.39 and 1.40 match no absent
// header otherwise, test/proxy TestScopedLocalRateLimit),
// an inverted presence is present_match: false, an inverted parameter is
// expect_match: false, inverted ranges invert_match.
func TestInvertedConditions(t *testing.T) {
	m := &Match{
		Headers:     []Header{{Name: "X-Tier", Values: []string{"premium", "gold"}, Invert: true}, {Name: "x-internal", Invert: true}},
		QueryParams: []QueryParam{{Name: "debug", Values: []string{"1"}, Invert: true}},
		Clients:     &Clients{CIDRs: []string{"10.0.0.0/8"}, Invert: true},
	}
	alts, err := m.Actions()
	if err != nil || len(alts) != 1 || len(alts[0]) != 3 {
		t.Fatalf("%v %v", alts, err)
	}
	hs := alts[0][0].GetHeaderValueMatch().GetHeaders()
	if len(hs) != 2 || hs[0].GetName() != "x-tier" || !hs[0].GetInvertMatch() || !hs[0].GetTreatMissingHeaderAsEmpty() {
		t.Fatalf("headers %v", hs)
	}
	re := regexp.MustCompile(hs[0].GetStringMatch().GetSafeRegex().GetRegex())
	if !re.MatchString("gold") || re.MatchString("golden") || re.MatchString("xpremium") {
		t.Errorf("the values regex %s does not match the values exactly", re)
	}
	if hs[1].GetInvertMatch() || hs[1].GetPresentMatch() || hs[1].GetHeaderMatchSpecifier() == nil {
		t.Errorf("an inverted presence: %v, want present_match: false", hs[1])
	}
	if q := alts[0][1].GetQueryParameterValueMatch(); q.GetExpectMatch().GetValue() {
		t.Errorf("an inverted parameter: expect_match %v", q.GetExpectMatch())
	}
	if c := alts[0][2].GetRemoteAddressMatch(); !c.GetAddressMatcher().GetInvertMatch() {
		t.Errorf("inverted ranges: %v", c)
	}
}

// A limit that uses none of the newer match keys marshals as before they
// existed, so its descriptor hash, and with it its count at a rate-limit
// service, survives the upgrade.
func TestOlderMatchKeepsItsJSON(t *testing.T) {
	m := Match{PathPrefix: "/api", Methods: []string{"GET"}}
	if got := Descriptor("x", m); got != "x."+descriptorOf(`{"pathPrefix":"/api","hosts":null,"methods":["GET"]}`) {
		t.Errorf("descriptor %s: the JSON of an older match changed", got)
	}
}

func descriptorOf(js string) string {
	d := Descriptor("", jsonRaw(js))
	return strings.TrimPrefix(d, ".")
}

type jsonRaw string

func (j jsonRaw) MarshalJSON() ([]byte, error) { return []byte(j), nil }
