package proxy

import (
	"fmt"
	"testing"
)

// Issue 41's lists: six ordinary host names and twenty methods are each
// over Envoy's RE2 limit as one regex, so globalRateLimit splits each into
// regexes that fit (two host groups, two method groups: four rate limits
// of one descriptor). At real gateways and the real service, a request
// of any group counts against the one limit, and a request of no host of
// the list isn't counted.
func TestGlobalRateLimitLongHostAndMethodLists(t *testing.T) {
	ctx := setup(t)
	awayFromMidnight(t)
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf(`    lists-%s:
      requests: 3
      unit: day
      match:
        hosts: [api.example.com, www.example.com, shop.example.com, checkout.example.com, accounts.example.com, login.example.com]
        methods: [GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK, REPORT, SEARCH, PURGE, LINK]
`, runID), ""))
	send := func(method, host string) int {
		t.Helper()
		r, err := do(ctx, method, newest.url("/echo"), map[string]string{"host": host}, "")
		if err != nil {
			t.Fatalf("%s %s: %v", method, host, err)
		}
		return r.status
	}
	for range 4 {
		if s := send("GET", "other.example.com"); s == 429 {
			t.Fatalf("GET other.example.com: 429, but no host of the list matches it")
		}
	}
	// One of each group but the last pair: three requests, one count.
	for i, req := range [][2]string{{"GET", "api.example.com"}, {"GET", "LOGIN.example.com:80"}, {"LINK", "www.example.com"}} {
		if s := send(req[0], req[1]); s == 429 {
			t.Fatalf("request %d, %s %s: 429 before the limit of 3", i+1, req[0], req[1])
		}
	}
	if s := send("LINK", "login.example.com"); s != 429 {
		t.Errorf("LINK login.example.com, the fourth counted request (last host group, last method group): %d, want 429: the groups don't share one count", s)
	}
	if s := send("GET", "other.example.com"); s == 429 {
		t.Errorf("GET other.example.com after the limit: 429, but no host of the list matches it")
	}
}
