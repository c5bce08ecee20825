package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// benchRequests is how many requests each row of the request-path
// benchmarks (extAuth, basicAuth, csrf, cors, extProc) times, after
// benchWarmup untimed ones.
const (
	benchRequests = 1000
	benchWarmup   = 100
)

// requestTimes sends benchWarmup+benchRequests requests of method to
// path at g one after the other over one kept-alive connection, and
// returns the times of the last benchRequests, each from the
// request's start to the end of its response body. Every answer must have
// status want. A "Host" header sets the request's host, as do's does.
func requestTimes(ctx context.Context, b *testing.B, g *gw, method, path string, headers map[string]string, want int) []time.Duration {
	b.Helper()
	keepAlive := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1}}
	defer keepAlive.CloseIdleConnections()
	// The first answer may still come from the configuration before the
	// last one (a listener drained by its update): wait for one as wanted.
	var last string
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		r, err := do(ctx, method, g.url(path), headers, "")
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("status %d: %.200s", r.status, r.body)
		return r.status == want
	}) {
		b.Fatalf("%s %s: %s, want %d", method, path, last, want)
	}
	var out []time.Duration
	for i := range benchWarmup + benchRequests {
		req, err := http.NewRequestWithContext(ctx, method, g.url(path), nil)
		if err != nil {
			b.Fatal(err)
		}
		for k, v := range headers {
			if strings.EqualFold(k, "host") {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		start := time.Now()
		resp, err := keepAlive.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != want {
			b.Fatalf("%s %s (request %d): status %d, want %d: %.200s", method, path, i+1, resp.StatusCode, want, body)
		}
		if i >= benchWarmup {
			out = append(out, took)
		}
	}
	return out
}

// latencyRow is one row of a latency table: p50 and p99, and what they add
// to the row none.
func latencyRow(what string, d, none []time.Duration) string {
	p := func(d []time.Duration, q int) float64 { return harness.Ms(harness.Percentile(d, q)) }
	return fmt.Sprintf("| %s | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms |\n", what, p(d, 50), p(d, 99), p(d, 50)-p(none, 50), p(d, 99)-p(none, 99))
}

// getTimes sends warm+n GETs of path to the newest gateway one after the
// other with get (the test client's own connections), and returns the
// times of the last n, sorted, each from the request's start to the end
// of its response body. Every answer must be 200.
func getTimes(ctx context.Context, b *testing.B, path string, warm, n int) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, n)
	for i := range warm + n {
		start := time.Now()
		r, err := get(ctx, newest.url(path), nil)
		if err != nil || r.status != 200 {
			b.Fatalf("GET %s: %v %v", path, err, r)
		}
		if i >= warm {
			out = append(out, time.Since(start))
		}
	}
	slices.Sort(out)
	return out
}
