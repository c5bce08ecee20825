package cli_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/cli"
)

var update = flag.Bool("update", false, "rewrite docs/versions.md's generated tables")

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

// docs/versions.md's version tables are generated from envoyfilter.Releases and
// the items' registrations: go test ./pkg/cli -update rewrites them.
func TestReadmeVersionTables(t *testing.T) {
	const path = "../../docs/versions.md"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(readme)
	for _, tbl := range []struct{ marker, body string }{
		{"istio releases", releasesTable()},
		{"istio compatibility", items.CompatibilityTable()},
	} {
		begin, end := "<!-- "+tbl.marker+": begin -->\n", "<!-- "+tbl.marker+": end -->"
		i, j := strings.Index(got, begin), strings.Index(got, end)
		if i < 0 || j < i {
			t.Fatalf("docs/versions.md lacks the %q markers", tbl.marker)
		}
		got = got[:i+len(begin)] + tbl.body + got[j:]
	}
	if got == string(readme) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Error("docs/versions.md's version tables are stale; run go test ./pkg/cli -update")
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
