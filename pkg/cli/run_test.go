package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run's --envoy: a flag that can't work is a usage error, and a binary
// that is not there or can't run an error at start that names it, with a
// webhook or without one (the blame of a NACK).
func TestRunEnvoyFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "envoy")
	// A file that is not an executable Envoy.
	notEnvoy := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(notEnvoy, []byte("not envoy"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--envoy", missing, "--rollout=false"}, ExitUsage, "--envoy names the EnvoyFilter proxies refuse, which needs --rollout, or checks the webhook's edits, which needs --webhook-addr"},
		// Without a webhook, for the blame of a NACK: the binary is
		// opened at start all the same.
		{[]string{"--envoy", missing}, ExitRun, "--envoy: envoy: " + missing + " does not exist"},
		{[]string{"--envoy", notEnvoy}, ExitRun, "--envoy: envoy: " + notEnvoy + " is not executable"},
		{[]string{"--webhook-addr", "127.0.0.1:0", "--envoy", missing, "--envoy-timeout", "0s"}, ExitUsage, "--envoy-timeout must be positive"},
		{[]string{"--webhook-addr", "127.0.0.1:0", "--envoy", missing}, ExitRun, "--envoy: envoy: " + missing + " does not exist"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"run"}, c.args...), Env{Stdout: &stdout, Stderr: &stderr})
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("run %s: exit %d, %q; want %d and %q", strings.Join(c.args, " "), code, stderr.String(), c.code, c.want)
		}
	}
}
