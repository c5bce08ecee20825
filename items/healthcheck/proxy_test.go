package healthcheck_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness/declared"
)

// A declared goTest (testdata/traffic.yaml, shortcache.in.yaml: /slow passed
// through, cacheTime 3s): the first health check after the cache expired
// goes to the backend and takes its 2 s; the next one, sent at once, is the
// gateway's cached answer, without the backend's time. traffic.yaml can't
// say it: a timed request is sent three times and judged by its fastest
// send, which the cache answers.
//
// Envoy clears the cache on a timer of its own every cacheTime, whenever
// it was filled, so waiting a whole cacheTime with no health check makes
// the next one go to the service; and a timer that fires between the two
// checks (a few milliseconds of its 3 s) makes the second go there too:
// that attempt is tried again. Skipped outside test/proxy's runner.
func TestFirstCheckSlowThenCached(t *testing.T) {
	url, envoy := declared.Proxy(t)
	const (
		cacheTime = 3 * time.Second
		slow      = 2 * time.Second
		path      = "/slow?ms=2000"
		attempts  = 3
	)
	c := &http.Client{Timeout: 20 * time.Second}
	get := func() (time.Duration, bool, int) {
		start := time.Now()
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatalf("Envoy %s, GET %s: %v", envoy, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start), resp.Header.Get("x-backend") != "", resp.StatusCode
	}
	for i := range attempts {
		time.Sleep(cacheTime + 300*time.Millisecond) // a whole cache period without a check
		first, fromBackend, status := get()
		if status != http.StatusOK || !fromBackend || first < slow-100*time.Millisecond {
			t.Fatalf("Envoy %s: the first health check after %v without one: status %d, from the backend %v, in %v; want 200 from the backend, in at least %v",
				envoy, cacheTime, status, fromBackend, first.Round(time.Millisecond), slow-100*time.Millisecond)
		}
		second, fromBackend, status := get()
		if fromBackend {
			t.Logf("Envoy %s, attempt %d: the second check went to the backend (%v): the cache timer fired between the two; again", envoy, i+1, second.Round(time.Millisecond))
			continue
		}
		if status != http.StatusOK || second > 500*time.Millisecond {
			t.Fatalf("Envoy %s: the health check right after the first: status %d in %v from the gateway; want the cached 200 in at most 500ms", envoy, status, second.Round(time.Millisecond))
		}
		t.Logf("Envoy %s: first health check %v (to the backend, /slow?ms=2000), the next %v (the gateway's cached 200)", envoy, first.Round(time.Millisecond), second.Round(time.Millisecond))
		return
	}
	t.Fatalf("Envoy %s: in %d attempts, the check right after the first was never answered from the cache", envoy, attempts)
}

// A declared goTest (testdata/traffic.yaml, example.in.yaml: the gateway
// answers /healthz/gateway itself): once the gateway fails its health
// checks (Envoy's admin POST /healthcheck/fail, what a draining proxy
// does), the health path answers 503, still from the gateway, while other
// paths still reach the service; POST /healthcheck/ok brings the 200 back.
// The gateway serves the cases after this one, so the cleanup sets it ok
// whatever happens. Skipped outside test/proxy's runner.
func TestDrainingGatewayAnswers503(t *testing.T) {
	url, envoy := declared.Proxy(t)
	admin := declared.Admin(t)
	c := &http.Client{Timeout: 10 * time.Second}
	post := func(path string) {
		t.Helper()
		resp, err := c.Post(admin+path, "text/plain", nil)
		if err != nil {
			t.Fatalf("Envoy %s admin POST %s: %v", envoy, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("Envoy %s admin POST %s: %s", envoy, path, resp.Status)
		}
	}
	get := func(path string) (status int, fromBackend bool) {
		t.Helper()
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatalf("Envoy %s, GET %s: %v", envoy, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("x-backend") != ""
	}
	want := func(when, path string, status int, fromBackend bool) {
		t.Helper()
		if s, b := get(path); s != status || b != fromBackend {
			t.Errorf("Envoy %s, %s: GET %s answered %d (from the backend: %v), want %d (from the backend: %v)", envoy, when, path, s, b, status, fromBackend)
		}
	}
	want("running", "/healthz/gateway", http.StatusOK, false)
	t.Cleanup(func() { post("/healthcheck/ok") })
	post("/healthcheck/fail")
	want("draining", "/healthz/gateway", http.StatusServiceUnavailable, false)
	want("draining", "/echo", http.StatusOK, true)
	post("/healthcheck/ok")
	want("running again", "/healthz/gateway", http.StatusOK, false)
}
