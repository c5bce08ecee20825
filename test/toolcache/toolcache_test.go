package toolcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tool whose manifest names one source of this package and the Envoy
// packages ./envoyfilter imports.
func fakeTool(t *testing.T) (bin string, manifest []string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "tool")
	for name, data := range map[string]string{"tool": "#!/bin/sh\n", "tool.key": "k1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := fileSum(filepath.Join(RepoRoot(), "test", "toolcache", "toolcache.go"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = []string{"key k1", "file test/toolcache/toolcache.go " + sum, "deps ./envoyfilter", `match ^github\.com/envoyproxy/go-control-plane/envoy/`}
	m, err := readManifest(writeManifest(t, bin, manifest))
	if err != nil {
		t.Fatal(err)
	}
	deps, err := depsMatching(RepoRoot(), m.deps, m.match)
	if err != nil || len(deps) < 3 {
		t.Fatalf("envoyfilter's Envoy packages: %v %v", deps, err)
	}
	for _, d := range deps {
		manifest = append(manifest, "import "+d)
	}
	writeManifest(t, bin, manifest)
	return bin, manifest
}

func writeManifest(t *testing.T, bin string, lines []string) string {
	t.Helper()
	path := bin + ManifestSuffix
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	bin, manifest := fakeTool(t)
	if err := Check(bin, "some-tools"); err != nil {
		t.Fatalf("a tool built from the checkout: %v", err)
	}
	lacked := strings.TrimPrefix(manifest[len(manifest)-1], "import ")
	for _, tc := range []struct {
		name  string
		edit  func() []string
		wants []string
	}{
		{"a package it lacks", func() []string { return manifest[:len(manifest)-1] }, []string{"it lacks " + lacked + ", which the checkout's ./envoyfilter import"}},
		{"a package no longer imported", func() []string {
			return append(manifest, "import github.com/envoyproxy/go-control-plane/envoy/gone/v3")
		}, []string{"built with github.com/envoyproxy/go-control-plane/envoy/gone/v3"}},
		{"a source changed", func() []string {
			m := append([]string(nil), manifest...)
			m[1] = "file test/toolcache/toolcache.go 00"
			return m
		}, []string{"its source test/toolcache/toolcache.go changed"}},
		{"rebuilt elsewhere", func() []string {
			m := append([]string(nil), manifest...)
			m[0] = "key k0"
			return m
		}, []string{"rebuilt from other sources"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeManifest(t, bin, tc.edit())
			err := Check(bin, "some-tools")
			var stale *StaleError
			if !errors.As(err, &stale) {
				t.Fatalf("%v, want stale", err)
			}
			for _, want := range append(tc.wants, bin+" is stale", "rebuild it with `make some-tools`") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
		})
	}
	if err := os.Remove(bin + ManifestSuffix); err != nil {
		t.Fatal(err)
	}
	if err := Check(bin, "some-tools"); err == nil || !strings.Contains(err.Error(), "tool.inputs is missing") {
		t.Errorf("no manifest: %v", err)
	}
	if err := Check(bin+"-none", "some-tools"); err == nil || !strings.Contains(err.Error(), "build it with `make some-tools`") {
		t.Errorf("no binary: %v", err)
	}
}

func TestUnsetNamesTheCommand(t *testing.T) {
	err := Unset("the Envoys", "GLOBALCONFIG_ENVOY", "GLOBALCONFIG_ENVOY_OLD")
	for _, want := range []string{"$GLOBALCONFIG_ENVOY and $GLOBALCONFIG_ENVOY_OLD are not set", "make test-one PKG=./test/toolcache", "make -s test-env"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
