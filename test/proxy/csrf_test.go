package proxy

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// csrf's shadow mode refuses nothing and counts what it would refuse:
// traffic.yaml shows both POSTs pass; this shows the gateway's own csrf
// statistics count the cross-origin one as invalid and the same-origin
// one as valid, at both Envoys.
func TestCSRFShadowCounts(t *testing.T) {
	ctx := setup(t)
	use(ctx, t, "csrf:\n  shadow: true\n")
	defer prune(ctx, t, nil)
	post := func(t *testing.T, g *gw, origin string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url("/echo"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "shop.test"
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-backend") != "echo" {
			t.Fatalf("POST with Origin %s: status %d, x-backend %q; want the backend's 200 in shadow mode", origin, resp.StatusCode, resp.Header.Get("x-backend"))
		}
	}
	each(t, func(t *testing.T, g *gw) {
		counts := func() (invalid, valid int64) {
			return statSum(ctx, t, g, "http.", ".csrf.request_invalid"), statSum(ctx, t, g, "http.", ".csrf.request_valid")
		}
		invalid0, valid0 := counts()
		post(t, g, "http://evil.test")
		post(t, g, "http://shop.test")
		invalid1, valid1 := waitCounts(ctx, t, counts, invalid0+1, valid0+1)
		if invalid1 != invalid0+1 || valid1 != valid0+1 {
			t.Errorf("csrf counted %d invalid and %d valid requests, want 1 and 1", invalid1-invalid0, valid1-valid0)
		}
	})
}

// waitCounts reads counts until they reach the wanted values (Envoy flushes
// counters to its admin interface at once, but leave it a moment), or a
// few tries have passed.
func waitCounts(ctx context.Context, t *testing.T, counts func() (int64, int64), a, b int64) (int64, int64) {
	t.Helper()
	var x, y int64
	for range 20 {
		if x, y = counts(); x >= a && y >= b {
			return x, y
		}
		select {
		case <-ctx.Done():
			return x, y
		case <-time.After(100 * time.Millisecond):
		}
	}
	return x, y
}
