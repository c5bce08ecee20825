package proxy

import (
	"fmt"
	"testing"
)

// scopedLimitDoc is a localRateLimit with scoped limits (limits), each
// named with this run's id so that its buckets start full, and clients
// told apart by X-Forwarded-For (one trusted hop, as a gateway behind a
// load balancer).
func scopedLimitDoc() string {
	return fmt.Sprintf(`headers:
  xff:
    trustedHops: 1
localRateLimit:
  limits:
    login-%[1]s:
      match: {pathPrefix: /echo/login, methods: [GET]}
      requests: 3
      unit: hour
      perClient: true
    untiered-%[1]s:
      match:
        pathPrefix: /echo/api
        headers: [{name: x-tier, values: [premium], invert: true}]
      requests: 2
      unit: hour
    keyed-%[1]s:
      match: {pathPrefix: /echo/key}
      maxTokens: 2
      tokensPerFill: 1
      fillInterval: 1h
      perHeader: x-api-key
    office-%[1]s:
      match:
        pathPrefix: /echo/office
        clients: {cidrs: [198.51.100.0/24]}
      requests: 1
      unit: hour
    debug-%[1]s:
      match:
        pathPrefix: /echo/q
        queryParams: [{name: debug, values: ["1"]}]
      requests: 1
      unit: hour
`, runID)
}

// from is the headers of a request from client address ip (through the
// trusted X-Forwarded-For hop), with extra headers.
func from(ip string, extra ...string) map[string]string {
	h := map[string]string{"x-forwarded-for": ip}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// A scoped local limit counts only the requests its match selects, by its
// key, at each gateway (each Envoy keeps its own buckets): /login answers
// 429 after 3 requests from one client while / and the other clients are
// untouched; an inverted header match, a header key, a client range and a
// query parameter count the same way.
func TestScopedLocalRateLimit(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, scopedLimitDoc())
	const a, b = "203.0.113.1", "203.0.113.2"
	each(t, func(t *testing.T, g *gw) {
		expect := func(path string, headers map[string]string, want int, why string) {
			t.Helper()
			r := through(ctx, t, g, path, headers)
			if r.status != want {
				t.Errorf("%s %v: %d, want %d: %s", path, headers, r.status, want, why)
				return
			}
			if backend := r.header.Get("x-backend") == "echo"; backend != (want == 200) {
				t.Errorf("%s %v: %d answered by the backend: %v", path, headers, r.status, backend)
			}
		}
		for i := range 3 {
			expect("/echo/login", from(a), 200, fmt.Sprintf("client a's request %d of 3", i+1))
		}
		expect("/echo/login", from(a), 429, "client a's fourth request to /login")
		expect("/echo/login/again?x=1", from(a), 429, "a path below /login is the same limit's")
		for range 4 {
			expect("/echo", from(a), 200, "/ is not counted by the /login limit")
			expect("/echo/loginx", from(a), 200, "/loginx is not below /login (whole segments)")
		}
		for i := range 3 {
			expect("/echo/login", from(b), 200, fmt.Sprintf("client b's request %d of 3: its own bucket", i+1))
		}
		expect("/echo/login", from(b), 429, "client b's fourth request to /login")

		// Inverted: every request not from the premium tier shares 2,
		// those without x-tier included; premium is never counted.
		expect("/echo/api", from(a), 200, "no x-tier: counted (1 of 2)")
		expect("/echo/api", from(b, "x-tier", "free"), 200, "x-tier free: counted (2 of 2)")
		expect("/echo/api", from(a, "x-tier", "trial"), 429, "x-tier trial: a third non-premium request")
		for range 4 {
			expect("/echo/api", from(a, "x-tier", "premium"), 200, "premium is outside the inverted match")
		}

		// Keyed by a header: 2 per API key; no key, not counted.
		expect("/echo/key", from(a, "x-api-key", "k1"), 200, "key k1 (1 of 2)")
		expect("/echo/key", from(b, "x-api-key", "k1"), 200, "key k1 from another client (2 of 2)")
		expect("/echo/key", from(a, "x-api-key", "k1"), 429, "key k1's third request")
		expect("/echo/key", from(a, "x-api-key", "k2"), 200, "key k2 has its own bucket")
		for range 4 {
			expect("/echo/key", from(a), 200, "a request without x-api-key is not counted by a header-keyed limit")
		}

		// A client range: one bucket for the range, others untouched.
		expect("/echo/office", from("198.51.100.7"), 200, "the range's one request")
		expect("/echo/office", from("198.51.100.8"), 429, "another address of the range shares its bucket")
		for range 3 {
			expect("/echo/office", from(a), 200, "a client outside the range is not counted")
		}

		// A query parameter.
		expect("/echo/q?debug=1", from(a), 200, "debug=1: the one request")
		expect("/echo/q?x=2&debug=1", from(b), 429, "debug=1 again, among other parameters")
		for _, p := range []string{"/echo/q?debug=0", "/echo/q", "/echo/q?debug=10"} {
			expect(p, from(a), 200, "debug is not 1: not counted")
		}
	})
}

// An edited limit is a new descriptor: its bucket starts full.
func TestScopedLocalRateLimitEditStartsAfresh(t *testing.T) {
	ctx := setup(t)
	doc := func(requests int) string {
		return fmt.Sprintf("localRateLimit:\n  limits:\n    edited-%s:\n      match: {pathPrefix: /echo/edit}\n      requests: %d\n      unit: hour\n", runID, requests)
	}
	use(ctx, t, doc(1))
	each(t, func(t *testing.T, g *gw) {
		if r := through(ctx, t, g, "/echo/edit", nil); r.status != 200 {
			t.Fatalf("first request: %d", r.status)
		}
		if r := through(ctx, t, g, "/echo/edit", nil); r.status != 429 {
			t.Fatalf("second request under a limit of 1: %d, want 429", r.status)
		}
	})
	use(ctx, t, doc(2))
	each(t, func(t *testing.T, g *gw) {
		var codes []int
		for range 3 {
			codes = append(codes, through(ctx, t, g, "/echo/edit", nil).status)
		}
		if fmt.Sprint(codes) != "[200 200 429]" {
			t.Errorf("under the edited limit of 2: %v, want [200 200 429]", codes)
		}
	})
}
