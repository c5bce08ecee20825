package globalratelimit

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/requestmatch"
)

var (
	sixHosts      = []string{"api.example.com", "www.example.com", "shop.example.com", "checkout.example.com", "accounts.example.com", "login.example.com"}
	twentyMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "PURGE", "LINK"}
)

// The six hosts and twenty methods of issue 41 build regexes of program
// size 110 and 120 as one list: both Envoys refuse that. Split, every
// regex fits in every dialect, and a request counts exactly once, under
// the one descriptor of the limit, whatever its host (any case, with or
// without a port) and method; other hosts and methods are not counted.
func TestLongMatchListsSplitIntoRegexesThatFitAndCountOnce(t *testing.T) {
	if size, _ := re2.CheckAll(requestmatch.HostRegex(sixHosts)); size <= re2.MaxProgramSize {
		t.Fatalf("the six hosts as one regex: size %d, no longer over the limit; the test proves nothing", size)
	}
	if size, _ := re2.CheckAll(requestmatch.MethodRegex(twentyMethods)); size <= re2.MaxProgramSize {
		t.Fatalf("the twenty methods as one regex: size %d, no longer over the limit; the test proves nothing", size)
	}
	l := Limit{Requests: 10, Unit: "minute", PerClient: true, Match: &Match{PathPrefix: "/api", Hosts: sixHosts, Methods: twentyMethods}}
	g := &GlobalRateLimit{Toggle: enabled(), Service: "ratelimit.ratelimit.svc.cluster.local", Port: 8081, Domain: DefaultDomain, Timeout: items.Millis{Duration: DefaultTimeout}, StatusCode: DefaultStatusCode, FailureMode: "allow", Limits: map[string]Limit{"storefront": l}}
	if err := g.Validate(); err != nil {
		t.Fatalf("validate refuses the long lists: %v", err)
	}
	rls, err := l.rateLimits("storefront")
	if err != nil {
		t.Fatal(err)
	}
	if len(rls) < 4 {
		t.Fatalf("%d rate limits; want at least 2 host groups × 2 method groups", len(rls))
	}
	type compiled struct {
		path, host, method *regexp.Regexp
	}
	var limits []compiled
	for i, rl := range rls {
		// Every entry writes the same descriptor: the same actions but
		// the header matchers.
		generic := rl.Actions[0].GetGenericKey()
		if generic.GetDescriptorValue() != l.Descriptor("storefront") || len(rl.Actions) != 3 || rl.Actions[2].GetRemoteAddress() == nil {
			t.Fatalf("rate limit %d: actions %v", i, rl.Actions)
		}
		var c compiled
		for _, h := range rl.Actions[1].GetHeaderValueMatch().GetHeaders() {
			re := h.GetStringMatch().GetSafeRegex().GetRegex()
			for _, d := range re2.Dialects() {
				if size, err := re2.CheckDialect(re, d); err != nil || size > re2.MaxProgramSize {
					t.Errorf("rate limit %d: %s regex %q: size %d, %v in %s", i, h.Name, re, size, err, d)
				}
			}
			rx := regexp.MustCompile(re)
			switch h.Name {
			case ":path":
				c.path = rx
			case ":authority":
				c.host = rx
			case ":method":
				c.method = rx
			}
		}
		if c.path == nil || c.host == nil || c.method == nil {
			t.Fatalf("rate limit %d lacks a matcher: %v", i, rl.Actions[1])
		}
		limits = append(limits, c)
	}
	counts := func(host, method string) int {
		n := 0
		for _, c := range limits {
			if c.path.MatchString("/api/x") && c.host.MatchString(host) && c.method.MatchString(method) {
				n++
			}
		}
		return n
	}
	for _, h := range sixHosts {
		for _, authority := range []string{h, strings.ToUpper(h), h + ":8443"} {
			for _, m := range twentyMethods {
				if n := counts(authority, m); n != 1 {
					t.Errorf("%s %s is counted %d times; want once", m, authority, n)
				}
			}
		}
	}
	for _, miss := range [][2]string{{"evil.example.com", "GET"}, {"api.example.com.evil", "GET"}, {"api.example.com", "get"}, {"api.example.com", "BREW"}} {
		if n := counts(miss[0], miss[1]); n != 0 {
			t.Errorf("%s %s is counted %d times; want never", miss[1], miss[0], n)
		}
	}
	// The filter carries them all.
	patches, err := g.BuildFor(envoyfilter.Newest())
	if err != nil {
		t.Fatal(err)
	}
	if n := countRateLimits(t, patches[0].Value); n != len(rls) {
		t.Errorf("the filter has %d rate limits; want %d", n, len(rls))
	}
}

// A host that can't fit even alone is refused at its own path: in Envoy
// 1.36 to 1.38's UTF-8 RE2, (?i)k also matches the Kelvin sign, and a
// label of sixty k's is over the limit.
func TestHostTooLongForOneRegexIsRefusedAtItsPath(t *testing.T) {
	long := strings.Repeat("k", 60) + ".example.com"
	g := &GlobalRateLimit{Toggle: enabled(), Service: "ratelimit.ratelimit.svc.cluster.local", Port: 8081, Domain: DefaultDomain, Timeout: items.Millis{Duration: DefaultTimeout}, StatusCode: DefaultStatusCode, FailureMode: "allow",
		Limits: map[string]Limit{"api": {Requests: 1, Unit: "second", Match: &Match{Hosts: []string{"api.example.com", long}}}}}
	err := g.Validate()
	if err == nil || !strings.Contains(err.Error(), "limits.api.match.hosts[1]: is too long") || !strings.Contains(err.Error(), fmt.Sprint(re2.MaxProgramSize)) {
		t.Fatalf("got %v", err)
	}
}

func countRateLimits(t *testing.T, v proto.Message) int {
	t.Helper()
	var cfg ratelimitv3.RateLimit
	if err := v.(*hcmv3.HttpFilter).GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	return len(cfg.GetRateLimits())
}

func enabled() items.Toggle { return items.Toggle{Enable: true} }
