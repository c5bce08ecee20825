package proxy

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The rate-limit service the globalRateLimit goldens and tests send to:
// the reference service with its Redis, in the mesh under the host and
// port of the item's example.
const (
	rateLimitHost = "ratelimit.ratelimit.svc.cluster.local"
	rateLimitPort = 8081
)

// runID keeps this run's limits apart from an earlier run's counters in
// the service.
var runID = strconv.FormatInt(time.Now().UnixNano(), 36)

// rls is the suite's rate-limit service, nil when its binaries are not
// installed (its tests then fail, naming make test).
var rls *harness.RateLimitService

// startRateLimit starts the rate-limit service and puts it in the mesh.
func startRateLimit(ctx context.Context, dir string) error {
	var err error
	if rls, err = harness.StartRateLimitService(ctx, dir); err != nil {
		return err
	}
	if err := cluster.CreateLoopbackService(ctx, rateLimitHost, rateLimitPort, rls.GRPCPort); err != nil {
		return fmt.Errorf("rate-limit service entry: %w", err)
	}
	return nil
}

// useLimits applies doc as the controller does: the rate-limit service
// gets the set's limits first (applyAll), then the proxies the set.
func useLimits(ctx context.Context, t *testing.T, doc string) {
	t.Helper()
	use(ctx, t, doc)
}

// rateLimitDoc is a document with one globalRateLimit limit, and extra
// items or keys.
func rateLimitDoc(limit string, extra string) string {
	return fmt.Sprintf(`globalRateLimit:
  service: %s
  port: %d
  rateLimitHeaders: true
%s  limits:
%s`, rateLimitHost, rateLimitPort, extra, limit)
}

// awayFromMidnight waits while a day's window is about to end: the
// service's windows are fixed and aligned to the clock.
func awayFromMidnight(t *testing.T) {
	now := time.Now().UTC()
	next := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if left := next.Sub(now); left < 20*time.Second {
		t.Logf("waiting %s for the day's window to turn", left)
		time.Sleep(left + time.Second)
	}
}

// through sends a GET through g and returns the status and the response.
func through(ctx context.Context, t *testing.T, g *gw, path string, headers map[string]string) *response {
	t.Helper()
	r, err := get(ctx, g.url(path), headers)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, g.name, err)
	}
	return r
}

// Two gateways share one limit: N requests through both together pass,
// and the next gets 429 with the rate-limit headers, whichever gateway it
// reaches.
func TestGlobalRateLimitShared(t *testing.T) {
	ctx := setup(t)
	awayFromMidnight(t)
	const n = 5
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf("    shared-%s:\n      requests: %d\n      unit: day\n", runID, n), ""))
	for i := range n {
		g := gateways[i%len(gateways)]
		r := through(ctx, t, g, "/echo", nil)
		if r.status != 200 {
			t.Fatalf("request %d through %s: %d, want 200 (%s)", i+1, g.name, r.status, r.body)
		}
		if r.header.Get("x-ratelimit-limit") == "" {
			t.Errorf("request %d: no x-ratelimit-limit header: %v", i+1, r.header)
		}
	}
	for _, g := range gateways {
		r := through(ctx, t, g, "/echo", nil)
		if r.status != 429 {
			t.Errorf("request %d through %s: %d, want 429", n+1, g.name, r.status)
		}
		if r.header.Get("x-envoy-ratelimited") != "true" || r.header.Get("x-ratelimit-remaining") != "0" {
			t.Errorf("through %s: headers %v, want x-envoy-ratelimited: true and x-ratelimit-remaining: 0", g.name, r.header)
		}
	}
}

// A per-client limit counts each client apart: the client address the
// gateway trusts (here from X-Forwarded-For, one trusted hop).
func TestGlobalRateLimitPerClient(t *testing.T) {
	ctx := setup(t)
	awayFromMidnight(t)
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf("    per-client-%s:\n      requests: 2\n      unit: day\n      perClient: true\n", runID), "")+
		"headers:\n  xff:\n    trustedHops: 1\n")
	a := map[string]string{"x-forwarded-for": "203.0.113.1"}
	b := map[string]string{"x-forwarded-for": "203.0.113.2"}
	for i, g := range []*gw{newest, oldest} {
		if r := through(ctx, t, g, "/echo", a); r.status != 200 {
			t.Fatalf("client a, request %d: %d", i+1, r.status)
		}
	}
	if r := through(ctx, t, newest, "/echo", a); r.status != 429 {
		t.Errorf("client a's third request: %d, want 429", r.status)
	}
	for _, g := range gateways {
		if r := through(ctx, t, g, "/echo", b); r.status != 200 {
			t.Errorf("client b through %s: %d, want 200 (its own count)", g.name, r.status)
		}
	}
}

// A limit with a path prefix counts only its path: whole segments.
func TestGlobalRateLimitPathMatch(t *testing.T) {
	ctx := setup(t)
	awayFromMidnight(t)
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf("    login-%s:\n      requests: 1\n      unit: day\n      match: {pathPrefix: /echo/login}\n", runID), ""))
	if r := through(ctx, t, newest, "/echo/login", nil); r.status != 200 {
		t.Fatalf("first login: %d", r.status)
	}
	if r := through(ctx, t, oldest, "/echo/login/again?x=1", nil); r.status != 429 {
		t.Errorf("second login (a sub-path, with a query): %d, want 429", r.status)
	}
	for _, p := range []string{"/echo/loginx", "/echo/other", "/echo"} {
		for range 3 {
			if r := through(ctx, t, newest, p, nil); r.status != 200 {
				t.Errorf("%s: %d, want 200: the limit counts /echo/login only", p, r.status)
			}
		}
	}
}

// With the service stopped: failure mode deny answers the configured
// status; allow lets requests through, and the gateway's own statistics
// say the service failed.
func TestGlobalRateLimitServiceDown(t *testing.T) {
	ctx := setup(t)
	rls.StopService()
	t.Cleanup(func() {
		if err := rls.StartService(context.Background()); err != nil {
			t.Errorf("restart the rate-limit service: %v", err)
		}
	})
	limit := fmt.Sprintf("    down-%s:\n      requests: 100\n      unit: day\n", runID)
	useLimits(ctx, t, rateLimitDoc(limit, "  failureMode: deny\n  failureStatus: 503\n  timeout: 200ms\n"))
	each(t, func(t *testing.T, g *gw) {
		if r := through(ctx, t, g, "/echo", nil); r.status != 503 {
			t.Errorf("failure mode deny, service down: %d, want 503", r.status)
		}
	})
	useLimits(ctx, t, rateLimitDoc(limit, "  failureMode: allow\n  timeout: 200ms\n"))
	each(t, func(t *testing.T, g *gw) {
		before := failedCalls(ctx, t, g)
		if r := through(ctx, t, g, "/echo", nil); r.status != 200 {
			t.Errorf("failure mode allow, service down: %d, want 200", r.status)
		}
		if after := failedCalls(ctx, t, g); after <= before {
			t.Errorf("the gateway's ratelimit failure_mode_allowed counters did not move (%d → %d)", before, after)
		}
	})
}

// failedCalls sums g's ratelimit failure_mode_allowed counters: what
// Prometheus scrapes of a proxy whose service fails.
func failedCalls(ctx context.Context, t *testing.T, g *gw) int64 {
	t.Helper()
	return statSum(ctx, t, g, "", ".ratelimit.failure_mode_allowed")
}

// An edit of a limit reaches both sides: the service takes the new limit
// over xDS, without a restart, and the proxies send its new descriptor.
func TestGlobalRateLimitEdit(t *testing.T) {
	ctx := setup(t)
	awayFromMidnight(t)
	name := "edited-" + runID
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf("    %s:\n      requests: 2\n      unit: day\n", name), ""))
	pid := rls.Service.Cmd.Process.Pid
	for range 2 {
		through(ctx, t, newest, "/echo", nil)
	}
	if r := through(ctx, t, newest, "/echo", nil); r.status != 429 {
		t.Fatalf("third request under a limit of 2: %d", r.status)
	}
	useLimits(ctx, t, rateLimitDoc(fmt.Sprintf("    %s:\n      requests: 4\n      unit: day\n", name), ""))
	var codes []int
	for range 5 {
		codes = append(codes, through(ctx, t, newest, "/echo", nil).status)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 429]" {
		t.Errorf("under the edited limit of 4: %v, want [200 200 200 200 429]", codes)
	}
	if rls.Service.Cmd.Process.Pid != pid {
		t.Error("the rate-limit service was restarted")
	}
}

// BenchmarkGlobalRateLimit measures what the rate-limit call adds to a
// request at the gateway (p50, p99, against the same requests without the
// item), and how long an edit of a limit takes to be enforced.
func BenchmarkGlobalRateLimit(b *testing.B) {
	ctx := setup(b)
	const n = 400
	measure := func() []time.Duration { return getTimes(ctx, b, "/echo", 0, n) }
	q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	mustACK(ctx, b, rendered(b, ""))
	without := measure()
	doc := func(requests int) string {
		return fmt.Sprintf("globalRateLimit:\n  service: %s\n  port: %d\n  limits:\n    bench-%s:\n      requests: %d\n      unit: day\n      perClient: true\n",
			rateLimitHost, rateLimitPort, runID, requests)
	}
	mustACK(ctx, b, rendered(b, doc(1_000_000)))
	with := measure()
	// An edit: the limit becomes 1, applied as the controller applies it;
	// enforced when a request gets 429.
	edited := rendered(b, doc(1))
	start := time.Now()
	if _, err := rls.Publish(edited); err != nil {
		b.Fatal(err)
	}
	kubectlApply(ctx, b, edited)
	var enforced time.Duration
	if !harness.Eventually(ctx, 60*time.Second, func() bool {
		r, err := get(ctx, newest.url("/echo"), nil)
		if err == nil && r.status == 429 {
			enforced = time.Since(start)
			return true
		}
		return false
	}) {
		b.Fatal("the edited limit was never enforced")
	}
	b.ReportMetric(float64(q(with, 0.5)-q(without, 0.5))/1e6, "added-p50-ms")
	b.ReportMetric(float64(q(with, 0.99)-q(without, 0.99))/1e6, "added-p99-ms")
	b.ReportMetric(float64(enforced)/1e6, "edit-enforced-ms")
	writeEnvoyReport(b, "globalratelimit", fmt.Sprintf(`## What the global rate limit adds to a request

BenchmarkGlobalRateLimit, %s. Envoy %s gateway, the reference rate-limit service with Redis on loopback, %d sequential GETs of /echo each, one connection a request; a per-client limit the requests never reach.

| | p50 | p99 |
|---|---|---|
| without globalRateLimit | %s | %s |
| with the rate-limit call | %s | %s |
| added | %s | %s |

An edit of the limit (1,000,000 a day → 1), the service's configuration and the EnvoyFilter applied as the controller applies them, until a request is refused: %s.
`, harness.RunStamp(), newest.Binary.Version, n,
		q(without, 0.5).Round(10*time.Microsecond), q(without, 0.99).Round(10*time.Microsecond),
		q(with, 0.5).Round(10*time.Microsecond), q(with, 0.99).Round(10*time.Microsecond),
		(q(with, 0.5)-q(without, 0.5)).Round(10*time.Microsecond), (q(with, 0.99)-q(without, 0.99)).Round(10*time.Microsecond),
		enforced.Round(time.Millisecond)))
}
