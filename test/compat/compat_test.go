// Package compat checks that every generated patch is understood by the
// Envoy of every Istio release it goes to. It renders the items' golden
// inputs and the full example, for the default releases and for every
// known release, then runs one strict decoder per Envoy API over them
// (test/tools/compat, built by `make compat-tools` into
// $GLOBALCONFIG_COMPAT_DIR), each checked first to be what the checkout
// builds (test/toolcache). Each decoder checks only the patches that
// reach its release: those of EnvoyFilters rendered for it (or for older
// releases only, as newer proxies get the newest variant) whose
// proxyVersion matches it.
package compat_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// EnvCompatDir names the directory of the envoy-compat-<tag> decoders.
const EnvCompatDir = "GLOBALCONFIG_COMPAT_DIR"

// decoders maps each go-control-plane/envoy tag to the Istio release whose
// Envoy API it stands for. v1.32.3 and v1.32.4 are snapshots of the Envoy
// 1.33 and 1.34 lines; v1.40.0 stands for the releases newer than the
// table, which get the newest variant.
var decoders = []struct{ tag, istio string }{
	{"v1.32.3", "1.25"},
	{"v1.32.4", "1.26"},
	{"v1.35.0", "1.27"},
	{"v1.36.0", "1.28"},
	{"v1.37.0", "1.29"},
	{"v1.38.0", "1.30"},
	{"v1.39.0", "1.31"},
	{"v1.40.0", "1.32"},
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func decoder(t *testing.T, tag string) string {
	t.Helper()
	dir := os.Getenv(EnvCompatDir)
	if dir == "" {
		t.Fatal(toolcache.Unset("the compat decoders", EnvCompatDir))
	}
	bin, err := decoderIn(dir, tag)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// decoderIn is the decoder for tag in dir, checked to be what the
// checkout builds: one built before an item imported a new Envoy
// extension would fail on its type ("unable to resolve"), which looks
// like a bug of the item; this says it is stale and how to rebuild it.
func decoderIn(dir, tag string) (string, error) {
	bin := filepath.Join(dir, "envoy-compat-"+tag)
	if err := toolcache.Check(bin, "compat-tools"); err != nil {
		return "", fmt.Errorf("decoder for go-control-plane/envoy %s: %w", tag, err)
	}
	return bin, nil
}

// render writes the EnvoyFilters of src for fleet (nil: the document's
// own declaration) to path, and reports whether the document rendered.
func renderFile(t *testing.T, src []byte, fleet []envoyfilter.Version, path string) error {
	t.Helper()
	doc, err := document.NewParserFor(fleet).ParseFile(src)
	if err != nil {
		return err
	}
	objs, err := render.Desired(doc)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return nil
	}
	y, err := render.YAML(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, y, 0o644); err != nil {
		t.Fatal(err)
	}
	return nil
}

// inputs are every golden input and the full example, by a file name.
func inputs(t *testing.T) map[string][]byte {
	t.Helper()
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "items", "*", "testdata", "*.in.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	files = append(files, filepath.Join(root, "deploy", "examples", "global-config.yaml"))
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		out[strings.NewReplacer("/", "_", ".in.yaml", "", ".yaml", "").Replace(rel)+".yaml"] = data
	}
	return out
}

func run(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var checked = regexp.MustCompile(`checked (\d+) patches`)

func TestEveryPatchDecodesWithItsReleasesEnvoyAPI(t *testing.T) {
	dir := t.TempDir()
	var all []envoyfilter.Version
	for _, r := range envoyfilter.Releases {
		all = append(all, r.Istio)
	}
	var files []string
	oldest := map[string]string{}
	for name, src := range inputs(t) {
		// As declared (the default releases unless the input says).
		path := filepath.Join(dir, "declared-"+name)
		if err := renderFile(t, src, nil, path); err != nil {
			continue // an invalid golden input (*.err.txt)
		}
		if _, err := os.Stat(path); err == nil {
			files = append(files, path)
		}
		// For every known release, or from the oldest the document can
		// be put into effect on (a setting without a fallback).
		for i := range all {
			path := filepath.Join(dir, "all-"+name)
			if err := renderFile(t, src, all[i:], path); err == nil {
				if _, err := os.Stat(path); err == nil {
					files = append(files, path)
				}
				oldest[name] = all[i].String()
				break
			}
		}
	}
	if len(files) < 20 {
		t.Fatalf("only %d rendered files", len(files))
	}
	for name, v := range oldest {
		if v != all[0].String() {
			t.Logf("%s renders from Istio %s on", name, v)
		}
	}
	for _, d := range decoders {
		t.Run(d.tag, func(t *testing.T) {
			out, err := run(t, decoder(t, d.tag), append([]string{"--istio", d.istio}, files...)...)
			if err != nil {
				t.Fatalf("Istio %s, go-control-plane/envoy %s: %v\n%s", d.istio, d.tag, err, out)
			}
			m := checked.FindStringSubmatch(out)
			if m == nil || m[1] == "0" {
				t.Fatalf("Istio %s: nothing checked:\n%s", d.istio, out)
			}
			t.Logf("Istio %s (go-control-plane/envoy %s): %s", d.istio, d.tag, strings.TrimSpace(out))
		})
	}
}

// The decoders are strict, and the variants are needed: the patch for
// newer proxies does not decode with an older release's API, and the
// decoder says which field.
func TestDecodersRefuseWhatAnOlderEnvoyDoesNotKnow(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "items", "tracing", "testdata", "zipkin-mixed-fleet.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(dir, "mixed.yaml")
	if err := renderFile(t, src, nil, mixed); err != nil {
		t.Fatal(err)
	}
	// Every patch, whichever release it is for, with Envoy 1.35's API.
	out, err := run(t, decoder(t, "v1.35.0"), "--istio", "1.27", "--all", mixed)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "collector_service") {
		t.Errorf("the 1.28+ variant decoded with Envoy 1.35's API: %v\n%s", err, out)
	}
	// Envoy 1.39 knows both shapes.
	if out, err := run(t, decoder(t, "v1.39.0"), "--istio", "1.31", "--all", mixed); err != nil {
		t.Errorf("Envoy 1.39's API refused a variant: %v\n%s", err, out)
	}

	// Unknown fields, types and enum values, each refused.
	bad := filepath.Join(dir, "bad.yaml")
	var b strings.Builder
	for i, value := range []string{
		`{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router, no_such_field: true}}`,
		`{name: x, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.nosuch.v3.Filter}}`,
	} {
		fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: bad-%d, namespace: istio-system}\nspec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: INSERT_BEFORE\n      value: %s\n", i, value)
	}
	fmt.Fprintf(&b, "---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: bad-enum, namespace: istio-system}\nspec:\n  configPatches:\n  - applyTo: CLUSTER\n    patch:\n      operation: MERGE\n      value: {lb_policy: NO_SUCH_POLICY}\n")
	if err := os.WriteFile(bad, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, decoder(t, "v1.40.0"), "--istio", "1.32", bad)
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("bad values passed: %v\n%s", err, out)
	}
	for _, want := range []string{"bad-0", "no_such_field", "bad-1", "nosuch", "bad-enum", "NO_SUCH_POLICY"} {
		if !strings.Contains(out, want) {
			t.Errorf("the decoder's output lacks %q:\n%s", want, out)
		}
	}
}

// A decoder built before an item imported a new Envoy extension is
// reported as stale, with the target that rebuilds it, before it runs: not
// as the unresolved type it would fail on. The stale decoder is a copy of
// the real newest one whose manifest lacks a package the items import.
func TestStaleDecoderIsReportedAsStale(t *testing.T) {
	real := decoder(t, "v1.40.0")
	manifest, err := os.ReadFile(real + toolcache.ManifestSuffix)
	if err != nil {
		t.Fatal(err)
	}
	const lacked = "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	var kept []string
	for _, line := range strings.Split(string(manifest), "\n") {
		if line != "import "+lacked {
			kept = append(kept, line)
		}
	}
	if len(kept) == len(strings.Split(string(manifest), "\n")) {
		t.Fatalf("the manifest of %s does not list %s: is it still imported?", real, lacked)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, filepath.Base(real))
	if err := os.Symlink(real, bin); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(real + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin+".key", key, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin+toolcache.ManifestSuffix, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = decoderIn(dir, "v1.40.0")
	var stale *toolcache.StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("a decoder lacking %s: %v, want it stale", lacked, err)
	}
	msg := err.Error()
	t.Logf("reported: %s", msg)
	for _, want := range []string{bin, "is stale", "it lacks " + lacked, "make compat-tools"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "unable to resolve") {
		t.Errorf("reported as an unresolved type: %s", msg)
	}

	// With its manifest whole again it is what the checkout builds.
	if err := os.WriteFile(bin+toolcache.ManifestSuffix, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := decoderIn(dir, "v1.40.0"); err != nil {
		t.Errorf("the same decoder with its own manifest: %v", err)
	}
}
