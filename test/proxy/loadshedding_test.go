package proxy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The load-shedding item proves what takes many requests and the
// gateways' statistics here; items/loadshedding/testdata/traffic.yaml
// shows what it leaves alone.

// Statistics of the two filters, under the connection manager's prefix
// (http.<prefix>.): admission control's counters and the gradient
// controller's gauges.
const (
	admissionRejected = "admission_control.rq_rejected"
	admissionSuccess  = "admission_control.rq_success"
	admissionFailure  = "admission_control.rq_failure"
	concurrencyLimit  = "adaptive_concurrency.gradient_controller.concurrency_limit"
	concurrencyBlock  = "adaptive_concurrency.gradient_controller.rq_blocked"
)

// tally counts the answers of a load by who made them.
type tally struct {
	backend, gateway503, other int
}

// sendMix sends n requests through g, one connection each, all but every
// tenth to the backend's /status?code=503 (the backend fails 90% of them)
// when failing, to /echo otherwise, and counts the answers by who made them.
func sendMix(ctx context.Context, t *testing.T, g *gw, n int, failing bool) tally {
	t.Helper()
	var c tally
	for i := range n {
		path := "/echo"
		if failing && i%10 != 9 {
			path = "/status?code=503"
		}
		r := through(ctx, t, g, path, nil)
		stamped := r.header.Get(harness.BackendHeader) == harness.BackendName
		switch {
		case stamped:
			c.backend++
		case r.status == 503:
			c.gateway503++
		default:
			c.other++
			t.Errorf("%s %s: %d from neither the backend nor admission control: %.200s", g.name, path, r.status, r.body)
		}
	}
	return c
}

// shedWindow is the admission control's sampling window in these tests:
// short, so that a healthy phase is out of the window before a failing one.
const shedWindow = 2 * time.Second

// shedDoc is admission control with the defaults but the window.
var shedDoc = "loadShedding:\n  admissionControl:\n    samplingWindow: " + shedWindow.String() + "\n%s"

// Admission control at both gateways: a healthy backend is never shed;
// a backend that fails 90% of requests makes the gateway answer a share of
// new ones 503 itself (no backend stamp), counted in rq_rejected, up to
// maxRejectionProbability (80%); in shadow mode the same failures are
// counted (rq_failure) and every request still reaches the backend.
func TestLoadSheddingAdmissionControl(t *testing.T) {
	ctx := setup(t)
	const n = 200
	use(ctx, t, fmt.Sprintf(shedDoc, ""))
	each(t, func(t *testing.T, g *gw) {
		rejected := statSum(ctx, t, g, "http.", admissionRejected)
		success := statSum(ctx, t, g, "http.", admissionSuccess)
		healthy := sendMix(ctx, t, g, n, false)
		if healthy.backend != n || healthy.gateway503 != 0 {
			t.Errorf("healthy backend: %+v, want all %d answered by the backend", healthy, n)
		}
		if d := statSum(ctx, t, g, "http.", admissionRejected) - rejected; d != 0 {
			t.Errorf("healthy backend: %s rose by %d, want 0", admissionRejected, d)
		}
		if d := statSum(ctx, t, g, "http.", admissionSuccess) - success; d < n {
			t.Errorf("healthy backend: %s rose by %d, want at least %d (is the filter in the chain?)", admissionSuccess, d, n)
		}

		// The healthy requests leave the window; then the backend fails.
		time.Sleep(shedWindow + time.Second)
		first := sendMix(ctx, t, g, n, true)
		then := sendMix(ctx, t, g, n, true)
		d := statSum(ctx, t, g, "http.", admissionRejected) - rejected
		t.Logf("%s, backend failing 90%%: first %d requests %+v, next %d %+v; %s +%d", g.name, n, first, n, then, admissionRejected, d)
		// Once the window is full of failures the probability is at
		// maxRejectionProbability (80%): well over half are refused.
		if first.gateway503 == 0 || then.gateway503 < n/2 {
			t.Errorf("failing backend: the gateway refused %d of the first %d requests and %d of the next %d, want some and at least %d", first.gateway503, n, then.gateway503, n, n/2)
		}
		if d != int64(first.gateway503+then.gateway503) {
			t.Errorf("failing backend: %s rose by %d, the gateway answered %d requests 503 itself", admissionRejected, d, first.gateway503+then.gateway503)
		}
	})

	use(ctx, t, fmt.Sprintf(shedDoc, "    shadow: true\n"))
	each(t, func(t *testing.T, g *gw) {
		rejected := statSum(ctx, t, g, "http.", admissionRejected)
		failure := statSum(ctx, t, g, "http.", admissionFailure)
		shadow := sendMix(ctx, t, g, n, true)
		if shadow.backend != n || shadow.gateway503 != 0 {
			t.Errorf("shadow mode, failing backend: %+v, want all %d answered by the backend", shadow, n)
		}
		if d := statSum(ctx, t, g, "http.", admissionRejected) - rejected; d != 0 {
			t.Errorf("shadow mode: %s rose by %d, want 0", admissionRejected, d)
		}
		// 9 of every 10 requests failed at the backend, and each is counted.
		if d := statSum(ctx, t, g, "http.", admissionFailure) - failure; d < n*9/10 {
			t.Errorf("shadow mode: %s rose by %d, want at least %d: the failures are not counted", admissionFailure, d, n*9/10)
		}
	})
}

// Adaptive concurrency at both gateways: the gateway serves traffic with it
// and its limit is in the statistics; right after the filter is loaded it
// measures the minimum latency, holding the gateway to minConcurrency
// requests in flight, so of requests sent at once some are answered 503 by
// the gateway and counted in rq_blocked; once measured, sequential traffic
// is never blocked.
func TestLoadSheddingAdaptiveConcurrency(t *testing.T) {
	ctx := setup(t)
	const (
		minConcurrency = 2
		requestCount   = 20
		parallel       = 8
	)
	use(ctx, t, fmt.Sprintf(`loadShedding:
  adaptiveConcurrency:
    minRTT:
      interval: 1h
      requestCount: %d
      minConcurrency: %d
`, requestCount, minConcurrency))
	each(t, func(t *testing.T, g *gw) {
		blocked := statSum(ctx, t, g, "http.", concurrencyBlock)
		// Requests at once, each held 500 ms by the backend: while the
		// minimum latency is measured only minConcurrency are let through.
		var (
			mu      sync.Mutex
			answers tally
			wg      sync.WaitGroup
		)
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := get(ctx, g.url("/slow?ms=500"), nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("GET /slow through %s: %v", g.name, err)
				case r.header.Get(harness.BackendHeader) == harness.BackendName:
					answers.backend++
				case r.status == 503:
					answers.gateway503++
				default:
					answers.other++
				}
			}()
		}
		wg.Wait()
		d := statSum(ctx, t, g, "http.", concurrencyBlock) - blocked
		t.Logf("%s, %d requests at once while the minimum latency is measured: %+v; %s +%d", g.name, parallel, answers, concurrencyBlock, d)
		if answers.backend < 1 || answers.backend > minConcurrency || answers.gateway503 != parallel-answers.backend {
			t.Errorf("%d requests at once: %+v, want at most %d answered by the backend and the rest 503 by the gateway", parallel, answers, minConcurrency)
		}
		if d != int64(answers.gateway503) {
			t.Errorf("%s rose by %d, the gateway refused %d", concurrencyBlock, d, answers.gateway503)
		}
		// Sequential requests finish the measurement and are never blocked.
		if c := sendMix(ctx, t, g, 2*requestCount, false); c.backend != 2*requestCount {
			t.Errorf("sequential requests: %+v, want all %d answered by the backend", c, 2*requestCount)
		}
		st, err := g.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		var names []string
		for name, v := range st {
			if strings.Contains(name, "adaptive_concurrency.") {
				names = append(names, fmt.Sprintf("%s=%d", name, v))
			}
			if len(name) > len(concurrencyLimit) && name[len(name)-len(concurrencyLimit):] == concurrencyLimit {
				found = true
				if v < 1 {
					t.Errorf("%s = %d, want a limit of at least 1", name, v)
				}
			}
		}
		sort.Strings(names)
		t.Logf("%s: %s", g.name, strings.Join(names, " "))
		if !found {
			t.Errorf("no %s gauge in the gateway's statistics", concurrencyLimit)
		}
	})
}
