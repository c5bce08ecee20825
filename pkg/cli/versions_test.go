package cli_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
	examples "github.com/globalconfig/globalconfig/test/example"
)

var update = flag.Bool("update", false, "rewrite the generated parts of README.md and docs/")

// releasesTable is docs/versions.md's table of Istio releases and their Envoy.
func releasesTable() string {
	var b strings.Builder
	b.WriteString("| Istio | Envoy | checked with go-control-plane/envoy |\n|---|---|---|\n")
	for _, r := range envoyfilter.Releases {
		tag := fmt.Sprintf("v%s.0", r.Envoy)
		switch r.Envoy {
		case envoyfilter.Version{Major: 1, Minor: 33}:
			tag = "v1.32.3 (a 1.33 snapshot)"
		case envoyfilter.Version{Major: 1, Minor: 34}:
			tag = "v1.32.4 (a 1.34 snapshot)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Istio, r.Envoy, tag)
	}
	fmt.Fprintf(&b, "| newer than %s | 1.40 expected | v1.40.0, for the variants newer releases get |\n", envoyfilter.Newest().Istio)
	return b.String()
}

// chainLine is docs/reference.md's HTTP filter chain of a gateway with
// every option of every item on.
func chainLine(t *testing.T) string {
	t.Helper()
	src, err := examples.Everything(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := document.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := envoycheck.HTTPChain(objs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range chain {
		switch {
		case f.Name == envoycheck.IstioFilters:
			names = append(names, f.Name)
		case f.Item == "":
			names = append(names, "`"+f.Name+"`")
		default:
			names = append(names, fmt.Sprintf("`%s` (%s)", f.Name, f.Item))
		}
	}
	return "  " + strings.Join(names, ", ") + "\n"
}

// validateTranscript is docs/cli.md's `validate` of the example, as the
// command prints it (the list of EnvoyFilters cut after the first): the
// counts and line numbers change as items arrive.
func validateTranscript(t *testing.T) string {
	t.Helper()
	code, out, errs := run(t, "", "validate", "-f", example)
	if code != cli.ExitOK {
		t.Fatalf("validate of the example: exit %d: %s", code, errs)
	}
	first, rest, _ := strings.Cut(out, "\n")
	if open := strings.Index(first, "("); open > 0 && strings.HasSuffix(first, ")") {
		if i := strings.Index(first[open:], ", "); i > 0 {
			first = first[:open+i] + ", …)"
		}
	}
	return "```\n$ globalconfig validate -f deploy/examples/global-config.yaml\n" + first + "\n" + rest + strings.ReplaceAll(errs, "../../", "") + "```\n"
}

// The generated parts of the docs come from envoyfilter.Releases and the
// items' registrations: go test ./pkg/cli -update (make docs) rewrites
// them, so a new item shows in every list and table by itself.
func TestGeneratedDocs(t *testing.T) {
	for _, file := range []struct {
		path   string
		tables []struct{ marker, body string }
	}{
		{"../../docs/versions.md", []struct{ marker, body string }{
			{"istio releases", releasesTable()},
			{"istio compatibility", items.CompatibilityTable()},
		}},
		{"../../docs/reference.md", []struct{ marker, body string }{
			{"stages", items.StageTable()},
			{"contexts", items.ContextTable()},
			{"chain", chainLine(t)},
		}},
		{"../../README.md", []struct{ marker, body string }{
			{"items", items.ItemList()},
		}},
		{"../../docs/cli.md", []struct{ marker, body string }{
			{"validate example", validateTranscript(t)},
		}},
	} {
		data, err := os.ReadFile(file.path)
		if err != nil {
			t.Fatal(err)
		}
		got := string(data)
		for _, tbl := range file.tables {
			begin, end := "<!-- "+tbl.marker+": begin -->\n", "<!-- "+tbl.marker+": end -->"
			i, j := strings.Index(got, begin), strings.Index(got, end)
			if i < 0 || j < i {
				t.Fatalf("%s lacks the %q markers", file.path, tbl.marker)
			}
			got = got[:i+len(begin)] + tbl.body + got[j:]
		}
		if got == string(data) {
			continue
		}
		if *update {
			if err := os.WriteFile(file.path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's generated parts are stale; run make docs", file.path)
	}
}

// `globalconfig items` says which Istio releases understand each item, and
// what needs newer ones.
func TestItemsSaySupport(t *testing.T) {
	code, out, _ := run(t, "", "items")
	if code != cli.ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"# Istio 1.25 and newer\n",
		"# zipkin.w3c → trace_context_option: Istio 1.28 and newer (Envoy 1.36); older proxies: refused by validation\n",
		"# contentType → content_type_matcher: Envoy 1.40, in no Istio release globalconfig knows yet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("items output lacks %q", want)
		}
	}
}

func TestIstioVersionsFlag(t *testing.T) {
	const w3c = "tracing:\n  enable: true\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411, w3c: true}\n"
	code, _, errs := run(t, w3c, "validate", "-f", "-", "--istio-versions", "1.27,1.28")
	if code != cli.ExitInvalid || !strings.Contains(errs, "tracing.zipkin.w3c: needs Istio 1.28 or newer (Envoy 1.36); the targeted Istio releases include 1.27") {
		t.Errorf("1.27 in the fleet: exit %d, stderr %q", code, errs)
	}
	// The flag replaces the document's own declaration.
	doc := "target:\n  istioVersions: [1.26]\n" + w3c
	if code, _, errs := run(t, doc, "validate", "-f", "-", "--istio-versions", "1.28,1.31"); code != cli.ExitOK {
		t.Errorf("1.28 and 1.31: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := run(t, doc, "validate", "-f", "-"); code != cli.ExitInvalid || !strings.Contains(errs, "include 1.26") {
		t.Errorf("the document's own 1.26: exit %d, stderr %q", code, errs)
	}
	code, out, _ := run(t, strings.Replace(w3c, ", w3c: true", "", 1), "render", "-f", "-", "--istio-versions", "1.27,1.31")
	if code != cli.ExitOK || strings.Count(out, "proxyVersion:") != 2 || !strings.Contains(out, "globalconfig.io/istio-versions: 1.27,1.31") {
		t.Errorf("mixed fleet render: exit %d, want two version-scoped variants:\n%s", code, out)
	}
	for _, bad := range []string{"1.2x", "1.24", "latest,1.30"} {
		if code, _, errs := run(t, w3c, "render", "-f", "-", "--istio-versions", bad); code != cli.ExitUsage || !strings.Contains(errs, "--istio-versions") {
			t.Errorf("--istio-versions %s: exit %d, stderr %q", bad, code, errs)
		}
	}
}
