package envoybin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeEnvoy writes an executable script that answers --version as an
// Envoy of version would, and exits 1 with msg on anything else.
func fakeEnvoy(t *testing.T, version, msg string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo; echo 'envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/" + version + "/Clean/RELEASE/BoringSSL'; exit 0; fi\n" +
		"cat >&2 <<'EOF'\n[2026-11-25 07:49:45.675][1][critical][main] [source/server/config_validation/server.cc:76] error initializing configuration 'x.json': " + msg + "\nEOF\nexit 1\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenVersion(t *testing.T) {
	ctx := context.Background()
	path := fakeEnvoy(t, "1.39.3", "")
	b, err := OpenVersion(ctx, path, "1.39.3")
	if err != nil || b.Version != "1.39.3" || b.Minor() != "1.39" {
		t.Fatalf("OpenVersion: %+v, %v", b, err)
	}
	if _, err := OpenVersion(ctx, path, "1.40.0"); err == nil || !strings.Contains(err.Error(), "reports version 1.39.3, expected 1.40.0") || !strings.Contains(err.Error(), path) {
		t.Errorf("wrong version: %v", err)
	}
	for name, c := range map[string]struct{ path, want string }{
		"missing":        {filepath.Join(t.TempDir(), "nope"), "does not exist"},
		"directory":      {t.TempDir(), "is a directory"},
		"not executable": {writeFile(t, 0o644), "is not executable"},
		"not envoy":      {writeFile(t, 0o755), "is not an Envoy binary"},
	} {
		_, err := OpenVersion(ctx, c.path, "1.40.0")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v; want %q naming the path", name, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "expected Envoy 1.40.0") {
			t.Errorf("%s: %v does not say what was expected", name, err)
		}
	}
}

func writeFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho hello\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// Validate returns Envoy's own reason, without the log prefix, as a
// *Rejected.
func TestValidateRejected(t *testing.T) {
	b, err := Open(context.Background(), fakeEnvoy(t, "1.40.0", "route: unknown cluster outbound|80||missing.default"))
	if err != nil {
		t.Fatal(err)
	}
	err = b.Validate(context.Background(), []byte("{}"))
	var rej *Rejected
	if !errors.As(err, &rej) || rej.Message != "route: unknown cluster outbound|80||missing.default" {
		t.Errorf("Validate: %v", err)
	}
}
