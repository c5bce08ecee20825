package envoybin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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

// scriptEnvoy writes an executable script that answers --version as
// Envoy 1.40.0 and runs body for anything else.
func scriptEnvoy(t *testing.T, body string) *Binary {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL'; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A binary killed by a signal (a crash, the OOM killer) gave no verdict:
// that is not a *Rejected, and the error says what happened.
func TestValidateKilledIsNoVerdict(t *testing.T) {
	b := scriptEnvoy(t, "echo 'about to crash' >&2\nkill -SEGV $$")
	err := b.Validate(context.Background(), []byte("{}"))
	var rej *Rejected
	if err == nil || errors.As(err, &rej) || !strings.Contains(err.Error(), "signal: segmentation fault") || !strings.Contains(err.Error(), "about to crash") {
		t.Errorf("Validate of a crashing binary: %v", err)
	}
}

// A binary that hangs is stopped when the context ends, even when
// something it started holds its output open.
func TestValidateBoundedByContext(t *testing.T) {
	b := scriptEnvoy(t, "sleep 3 &\nexec sleep 30")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.ValidateBinary(ctx, []byte{})
	var rej *Rejected
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &rej) {
		t.Errorf("Validate of a hanging binary: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Validate returned after %v", d)
	}
}

// An Envoy copied out of its image into one without a dynamic loader
// (istio/proxyv2's into globalconfig's distroless static image) runs
// through the loader copied beside it, in LibDir.
func TestCopiedLoader(t *testing.T) {
	real := os.Getenv("GLOBALCONFIG_ENVOY")
	if real == "" {
		t.Skip("GLOBALCONFIG_ENVOY is not set: run `make test-one PKG=./pkg/envoybin` (or `make test`), which installs Envoy and sets it")
	}
	interp := interpreter(real)
	if interp == "" {
		t.Skipf("%s is a static binary", real)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "envoy")
	if err := os.Symlink(real, path); err != nil {
		t.Fatal(err)
	}
	// What the init container does: `ldd` names the loader and libraries.
	out, err := exec.Command("ldd", real).Output()
	if err != nil {
		t.Skipf("ldd: %v", err)
	}
	libs := filepath.Join(dir, LibDir)
	if err := os.Mkdir(libs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range regexp.MustCompile(`/\S+`).FindAllString(string(out), -1) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(libs, filepath.Base(f)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// This system's loader is taken away.
	exists = func(p string) bool {
		if p == interp {
			return false
		}
		_, err := os.Stat(p)
		return err == nil
	}
	t.Cleanup(func() {
		exists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	})
	b, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.loader) == 0 || b.loader[0] != filepath.Join(libs, filepath.Base(interp)) {
		t.Fatalf("runs as %q, not through the copied loader", b.loader)
	}
	if err := b.Validate(context.Background(), []byte(`{"node":{"id":"a","cluster":"b"}}`)); err != nil {
		t.Errorf("Validate through the copied loader: %v", err)
	}
	// Without the copy, the exec failure names what is missing and where
	// to put it.
	if err := os.RemoveAll(libs); err != nil {
		t.Fatal(err)
	}
	if l := copiedLoader(path); l != nil {
		t.Errorf("runs through %q, which is gone", l)
	}
	hint := loaderHint(path, errors.New("fork/exec: no such file or directory"))
	if !strings.Contains(hint, interp) || !strings.Contains(hint, libs) {
		t.Errorf("hint %q names neither %s nor %s", hint, interp, libs)
	}
}
