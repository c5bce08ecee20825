// Package declared is what a declared Go test (a goTest of an item's
// testdata/traffic.yaml) reads of the gateway test/proxy's
// TestDeclaredTraffic runs it against. It imports nothing but the
// standard library, so that an item's unit tests (make test runs them
// with the race detector) don't link the harness's Kubernetes clients.
package declared

import (
	"os"
	"testing"
)

// The environment test/proxy's TestDeclaredTraffic gives a declared Go
// test, which it runs as a subprocess once the case's document is in
// effect at a gateway.
const (
	// EnvProxyURL is the gateway's plaintext base URL, such as
	// http://127.0.0.11:8080: a path is appended to it.
	EnvProxyURL = "GLOBALCONFIG_PROXY_URL"
	// EnvProxyEnvoy is that gateway's Envoy release, such as 1.40.0.
	EnvProxyEnvoy = "GLOBALCONFIG_PROXY_ENVOY"
	// EnvProxyAdmin is that gateway's Envoy admin base URL, such as
	// http://127.0.0.1:40123.
	EnvProxyAdmin = "GLOBALCONFIG_PROXY_ADMIN"
)

// Proxy returns the gateway a declared Go test runs against: its
// base URL and its Envoy release. Outside test/proxy's runner (the unit
// phase of make test, or go test ./items/<pkg>) the variables are unset
// and the test is skipped; the runner itself refuses a goTest that skips.
func Proxy(t testing.TB) (url, envoy string) {
	t.Helper()
	url, envoy = os.Getenv(EnvProxyURL), os.Getenv(EnvProxyEnvoy)
	if url == "" || envoy == "" {
		t.Skipf("a declared goTest: it runs at a real gateway only from test/proxy's TestDeclaredTraffic, which sets %s and %s", EnvProxyURL, EnvProxyEnvoy)
	}
	return url, envoy
}

// Admin returns the Envoy admin base URL of the gateway a declared Go test
// runs against, to read its stats or change its state (POST
// /healthcheck/fail). The gateway serves the cases after this one: a test
// that changes its state undoes that in t.Cleanup. Skipped outside
// test/proxy's runner, as Proxy is.
func Admin(t testing.TB) string {
	t.Helper()
	Proxy(t)
	admin := os.Getenv(EnvProxyAdmin)
	if admin == "" {
		t.Skipf("a declared goTest: %s is unset", EnvProxyAdmin)
	}
	return admin
}
