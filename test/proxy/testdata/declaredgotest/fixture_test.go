// Package declaredgotest holds the goTests test/proxy's
// TestDeclaredFailuresAreReported runs through the declared-traffic
// runner: one that passes, one that skips and one that fails. Under
// testdata, no ./... pattern (make test's included) ever runs them.
package declaredgotest

import (
	"net/http"
	"testing"

	"github.com/globalconfig/globalconfig/test/harness/declared"
)

// TestFixturePasses passes when the gateway it is given serves /echo.
func TestFixturePasses(t *testing.T) {
	url, envoy := declared.Proxy(t)
	resp, err := http.Get(url + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /echo at Envoy %s: status %d", envoy, resp.StatusCode)
	}
}

// TestFixtureSkips skips at the gateway: the runner must refuse it.
func TestFixtureSkips(t *testing.T) {
	declared.Proxy(t)
	t.Skip("deliberately skipped at the gateway")
}

// TestFixtureFails fails at the gateway, naming what it saw there: the
// runner must refuse it with this output.
func TestFixtureFails(t *testing.T) {
	url, envoy := declared.Proxy(t)
	resp, err := http.Get(url + "/status?code=418")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Errorf("deliberate failure at Envoy %s: GET /status?code=418 answered %d", envoy, resp.StatusCode)
}
