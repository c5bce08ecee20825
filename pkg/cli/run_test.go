package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// run's --envoy: a flag that can't work is a usage error, and a binary
// that is not there an error at start that names it.
func TestRunEnvoyFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "envoy")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--envoy", missing}, ExitUsage, "--envoy checks the webhook's edits and needs --webhook-addr"},
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
