package render

import (
	"regexp"
	"strings"
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// hostsItem builds one regex from its whole host list, as globalRateLimit
// did before issue 41: the output walk is what catches it.
type hostsItem struct {
	items.Toggle
	Hosts []string `json:"hosts"`
	Raw   bool     `json:"raw"` // hosts are regexes
}

func (*hostsItem) Validate() error { return nil }

func (*hostsItem) Texts() []items.Text {
	return []items.Text{{Path: "hosts[]", Kind: items.TextPlain}}
}

func (h *hostsItem) Build() ([]envoyfilter.Patch, error) {
	alts := make([]string, len(h.Hosts))
	for i, host := range h.Hosts {
		alts[i] = regexp.QuoteMeta(host)
		if h.Raw {
			alts[i] = host
		}
	}
	re := "(?i)^(?:" + strings.Join(alts, "|") + `)(?::[0-9]+)?$`
	header := &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}},
		}},
	}}}
	cfg := &rbacv3.RBAC{Rules: &rbacconfigv3.RBAC{Action: rbacconfigv3.RBAC_DENY, Policies: map[string]*rbacconfigv3.Policy{
		"hosts": {Permissions: []*rbacconfigv3.Permission{header}, Principals: []*rbacconfigv3.Principal{{Identifier: &rbacconfigv3.Principal_Any{Any: true}}}},
	}}}
	p, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.rbac", cfg)
	return []envoyfilter.Patch{p}, err
}

// sectionFor is a section of a real item's placement and target, holding it.
func sectionFor(t *testing.T, it items.Item) document.Section {
	t.Helper()
	doc, err := document.Parse([]byte("target: {context: GATEWAY}\ngzip: {enable: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Sections[0]
	s.Name, s.Item = "hostList", it
	return s
}

// What an item builds is held to Envoy's rules even when its input
// passed: a regex made from six ordinary host names is over Envoy's RE2
// limit, and the problem names the list it came from.
func TestBuildRefusesAnEmittedRegexOverEnvoysLimitAtItsList(t *testing.T) {
	six := []string{"api.example.com", "www.example.com", "shop.example.com", "checkout.example.com", "accounts.example.com", "login.example.com"}
	_, err := build(sectionFor(t, &hostsItem{Toggle: items.Toggle{Enable: true}, Hosts: six}))
	if err == nil {
		t.Fatal("a regex of RE2 program size 110 was emitted")
	}
	// Envoy 1.39 and newer (Latin-1) count 110, older ones (UTF-8, where
	// (?i)k and s match two more letters) 117.
	probs := fielderr.Flatten(err)
	if len(probs) != 2 {
		t.Fatalf("got %v", err)
	}
	for i, size := range []string{"117", "110"} {
		if p := probs[i]; p.Path != "hosts" || !strings.Contains(p.Msg, "program size is "+size+", over Envoy's limit of 100") || strings.Contains(p.Msg, "envoy.type") {
			t.Errorf("got %v", p)
		}
	}
	// Five fit: nothing to say.
	if _, err := build(sectionFor(t, &hostsItem{Toggle: items.Toggle{Enable: true}, Hosts: six[:5]})); err != nil {
		t.Fatalf("five hosts (size 93 in Latin-1, 100 in UTF-8): %v", err)
	}
}

// One element of a list is named by its index, and a refusal of some
// releases only is said for those: Envoy 1.39 and newer read regexes in
// Latin-1 and refuse \x{4e00}, older ones take it.
func TestBuildNamesTheOneElementAnEmittedValueCameFrom(t *testing.T) {
	_, err := build(sectionFor(t, &hostsItem{Toggle: items.Toggle{Enable: true}, Hosts: []string{`\x{4e00}`}, Raw: true}))
	probs := fielderr.Flatten(err)
	if len(probs) != 1 || probs[0].Path != "hosts[0]" || !strings.Contains(probs[0].Msg, "RE2 refuses") || strings.Contains(probs[0].Msg, "1.30") {
		t.Fatalf("got %v", err)
	}
}
