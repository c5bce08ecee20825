package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
)

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(args, cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

const example = "../../deploy/examples/global-config.yaml"

func TestRenderExample(t *testing.T) {
	code, out, errs := run(t, "", "render", "-f", example)
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	// The example uses every item, each enabled.
	docs := strings.Split(out, "\n---\n")
	if len(docs) != len(items.All()) {
		t.Fatalf("%d objects rendered, want one per item (%d)", len(docs), len(items.All()))
	}
	for _, d := range docs {
		var obj envoyfilter.Object
		if err := yaml.UnmarshalStrict([]byte(d), &obj); err != nil {
			t.Fatalf("rendered object does not read back: %v\n%s", err, d)
		}
		if obj.Kind != "EnvoyFilter" || obj.Metadata.Labels[envoyfilter.LabelManagedBy] != "globalconfig" || len(obj.Spec.GetConfigPatches()) == 0 {
			t.Errorf("unexpected object %+v", obj.Metadata)
		}
	}
}

func TestRenderFromStdinMatchesFile(t *testing.T) {
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	_, fromFile, _ := run(t, "", "render", "-f", example)
	code, fromStdin, _ := run(t, string(data), "render", "-f", "-")
	if code != cli.ExitOK || fromFile != fromStdin {
		t.Errorf("stdin render differs from file render (exit %d)", code)
	}
}

func TestValidateExitCodesAndMessages(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, src string
		code      int
		stderr    string
	}{
		{"misspelled.yaml", "gzip: {}\ngizp: {}\n", cli.ExitInvalid, `misspelled.yaml:2: gizp: unknown item; did you mean "gzip"?` + "\n"},
		{"range.yaml", "gzip:\n  chunkSize: 1\n", cli.ExitInvalid, "range.yaml:2: gzip.chunkSize: must be between 4096 and 65536, got 1\n"},
		{"type.yaml", "gzip:\n  enable: 1\n", cli.ExitInvalid, "type.yaml:2: gzip.enable: expected true or false, got an integer\n"},
		{"ok.yaml", "gzip: {}\n", cli.ExitOK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(c.name, c.src)
			code, out, errs := run(t, "", "validate", "-f", p)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			if got := strings.TrimPrefix(errs, dir+string(filepath.Separator)); got != c.stderr {
				t.Errorf("stderr %q, want %q", got, c.stderr)
			}
			if c.code == cli.ExitOK && !strings.HasPrefix(out, "valid: 1 items, 1 EnvoyFilters") {
				t.Errorf("stdout %q", out)
			}
		})
	}
}

func TestUsageAndIOErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"render"}, {"validate", "-f", "a", "b"}, {"render", "-x"}, {"items", "x"}} {
		if code, _, _ := run(t, "", args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
	if code, _, errs := run(t, "", "validate", "-f", filepath.Join(t.TempDir(), "missing.yaml")); code != cli.ExitIO || !strings.Contains(errs, "no such file") {
		t.Errorf("missing file: exit %d, %q", code, errs)
	}
}

func TestItemsListsDefaults(t *testing.T) {
	code, out, _ := run(t, "", "items")
	if code != cli.ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"# gzip — ", "  chunkSize: 4096", "  compressionLevel: BEST_COMPRESSION", "# tracing — ", "  timeout: 500ms", "# brotli", "# zstd"} {
		if !strings.Contains(out, want) {
			t.Errorf("items output lacks %q:\n%s", want, out)
		}
	}
	// Every registered item is listed, and the listing is YAML that the
	// decoder reads key for key (some items need values before they validate).
	for _, r := range items.All() {
		if !strings.Contains(out, "\n"+r.Name+":\n") && !strings.HasPrefix(out, "# "+r.Name) {
			t.Errorf("item %s not listed", r.Name)
		}
	}
	// The free slots close the listing, a line per stage: none that an
	// item takes.
	for _, r := range items.All() {
		_, line, ok := strings.Cut(out, "\n#   "+r.Stage.Name+": ")
		line, _, _ = strings.Cut(line, "\n")
		if !ok {
			t.Fatalf("no free slots listed for stage %s:\n%s", r.Stage.Name, out)
		}
		for _, free := range strings.Split(line, ", ") {
			if free == fmt.Sprintf("%d (%d)", r.Slot, r.Placement().Priority) {
				t.Errorf("slot %d of stage %s is listed free, and %s takes it", r.Slot, r.Stage.Name, r.Name)
			}
		}
	}
	_, err := document.Parse([]byte(out))
	var de *document.Error
	if errors.As(err, &de) {
		for _, p := range de.Problems {
			if strings.Contains(p.Msg, "unknown") || strings.Contains(p.Msg, "expected") {
				t.Errorf("items output does not decode: %v", p)
			}
		}
	}
}

func TestSchema(t *testing.T) {
	code, out, _ := run(t, "", "schema")
	if code != cli.ExitOK {
		t.Fatalf("exit %d", code)
	}
	var s document.Schema
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.AdditionalProperties != false {
		t.Error("document schema allows unknown items")
	}
	gz := s.Properties["gzip"]
	if gz == nil || gz.Properties["chunkSize"] == nil || string(gz.Properties["chunkSize"].Default) != "4096" || gz.AdditionalProperties != false {
		t.Fatalf("gzip schema: %+v", gz)
	}
	if lv := gz.Properties["compressionLevel"]; len(lv.Enum) == 0 {
		t.Error("compressionLevel has no enum")
	}
	if port := s.Properties["tracing"].Properties["zipkin"].Properties["port"]; strings.Join(port.Type, ",") != "integer,string" {
		t.Errorf("port types %v", port.Type)
	}
	if s.Properties["gzip"].Properties["target"] == nil || s.Properties["target"] == nil {
		t.Error("target missing from schema")
	}
}

func TestVersion(t *testing.T) {
	defer func(v string) { cli.Version = v }(cli.Version)
	cli.Version = "v1.2.3-test" // as -ldflags -X sets it
	code, out, _ := run(t, "", "version")
	if code != cli.ExitOK || out != "v1.2.3-test\n" {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// A valid document with a setting that overrides more than it seems to is
// valid (exit 0), and validate says why on stderr with the line.
func TestValidateWarns(t *testing.T) {
	code, out, errs := run(t, "downstream:\n  idleTimeout: 60\n  routeTimeout: 30s\n", "validate", "-f", "-")
	if code != cli.ExitOK || !strings.HasPrefix(out, "valid:") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errs, "<stdin>:3: downstream.routeTimeout: warning: overrides the timeout of every route, including those VirtualServices set") {
		t.Errorf("stderr %q", errs)
	}
	// Higress's default, 0, leaves routes alone and says nothing.
	if code, _, errs := run(t, "downstream:\n  idleTimeout: 60\n  routeTimeout: 0\n", "validate", "-f", "-"); code != cli.ExitOK || errs != "" {
		t.Errorf("routeTimeout 0: exit %d, stderr %q", code, errs)
	}
}

const higressConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: higress-config
  namespace: higress-system
data:
  higress: |
    downstream:
      idleTimeout: 60
      routeTimeout: 0
    tracing:
      enable: true
      zipkin: {service: zipkin.istio-system.svc.cluster.local, port: "9411"}
  mesh: |
    accessLogFile: /dev/stdout
`

func TestConvertHigress(t *testing.T) {
	code, out, errs := run(t, higressConfigMap, "convert", "--from", "higress", "-f", "-", "--gateway-selector", "istio=ingressgateway")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// The manifest on stdout is a valid global ConfigMap.
	code, vout, verrs := run(t, out, "validate", "-f", "-")
	if code != cli.ExitOK || !strings.Contains(vout, "valid: 4 items") {
		t.Fatalf("the converted manifest: exit %d %q %q\n%s", code, vout, verrs, out)
	}
	for _, want := range []string{"name: global-config", "istio: ingressgateway", "streamIdleTimeout: 60", "maxRequestHeadersKb: 60 # Higress's default"} {
		if !strings.Contains(out, want) {
			t.Errorf("manifest lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"converted (same effect at the gateway):", "default written", "difference (what changes at the proxy", "mesh.accessLogFile"} {
		if !strings.Contains(errs, want) {
			t.Errorf("report lacks %q:\n%s", want, errs)
		}
	}
	// JSON report for CI.
	if code, _, errs := run(t, higressConfigMap, "convert", "--from", "higress", "-f", "-", "--report", "json"); code != cli.ExitOK || !strings.Contains(errs, `"verdict": "default written"`) {
		t.Errorf("json report: exit %d %s", code, errs)
	}
	// What Higress would refuse: exit 1, the path on stderr, nothing out.
	code, out, errs = run(t, "gzip:\n  minContentLength: 0\n", "convert", "--from", "higress", "-f", "-")
	if code != cli.ExitInvalid || out != "" || !strings.Contains(errs, "<stdin>: higress.gzip.minContentLength: Higress requires more than 0") {
		t.Errorf("refused document: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, _ := run(t, "", "convert", "--from", "nginx", "-f", "-"); code != cli.ExitUsage {
		t.Errorf("an unknown --from: exit %d", code)
	}
}

func TestValidateHigress(t *testing.T) {
	code, out, _ := run(t, "downstream:\n  idleTimeout: 60\naddXRealIpHeader: true\n", "validate", "--higress", "-f", "-")
	if code != cli.ExitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"downstream.maxRequestHeadersKb: Higress applies its default 60 without the key; globalconfig would leave it unset",
		"addXRealIpHeader: Higress sets x-real-ip to %REQ(X-ENVOY-EXTERNAL-ADDRESS)%",
		"gzip: Higress compresses with gzip when the section is absent",
		"valid for Higress and for globalconfig;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	// Higress's mcpServer has no place in globalconfig's document.
	if code, out, _ := run(t, "mcpServer: {enable: false}\n", "validate", "--higress", "-f", "-"); code != cli.ExitInvalid || !strings.Contains(out, "mcpServer: unknown item") {
		t.Errorf("mcpServer: exit %d\n%s", code, out)
	}
}

// docs/migrating-from-higress.md converts docs/examples/higress-config.yaml;
// it converts, and the report counts what that page says.
func TestReadmeHigressExampleConverts(t *testing.T) {
	code, out, errs := run(t, "", "convert", "--from", "higress", "-f", "../../docs/examples/higress-config.yaml")
	if code != cli.ExitOK || !strings.Contains(out, "higress: higress-system-higress-gateway") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	readme, err := os.ReadFile("../../docs/migrating-from-higress.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(strings.TrimSpace(errs), "\n") + 1
	if !strings.Contains(string(readme), fmt.Sprintf("among its %d lines", lines)) {
		t.Errorf("docs/migrating-from-higress.md's report excerpt does not say %d lines; rerun the conversion and update it", lines)
	}
}

// The controller's ConfigMap of a small ingress-nginx install, with the
// add-headers ConfigMap it names.
const nginxConfigMap = `apiVersion: v1
kind: ConfigMap
metadata: {name: ingress-nginx-controller, namespace: ingress-nginx}
data:
  proxy-body-size: "8m"
  use-gzip: "true"
  add-headers: ingress-nginx/custom-headers
  worker-processes: "4"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: custom-headers, namespace: ingress-nginx}
data:
  X-Frame-Options: SAMEORIGIN
`

func TestConvertIngressNginx(t *testing.T) {
	code, out, errs := run(t, nginxConfigMap, "convert", "--from", "ingress-nginx", "-f", "-")
	if code != cli.ExitOK {
		t.Fatalf("every key converted or not needed: exit %d, want 0\n%s", code, errs)
	}
	if code, vout, verrs := run(t, out, "validate", "-f", "-"); code != cli.ExitOK {
		t.Fatalf("the converted manifest: exit %d %q %q\n%s", code, vout, verrs, out)
	}
	for _, want := range []string{"istio: ingressgateway", "maxSize: 8Mi # proxy-body-size: 8m", "x-frame-options: SAMEORIGIN", "streamIdleTimeout: 60s"} {
		if !strings.Contains(out, want) {
			t.Errorf("manifest lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"converted:\n", "proxy-body-size = 8m: → requestBody.maxSize: 8Mi", "not needed with Envoy:\n  worker-processes = 4"} {
		if !strings.Contains(errs, want) {
			t.Errorf("report lacks %q:\n%s", want, errs)
		}
	}
	// --no-nginx-defaults writes only what the ConfigMap sets.
	_, out, errs = run(t, nginxConfigMap, "convert", "--from", "ingress-nginx", "-f", "-", "--no-nginx-defaults")
	if strings.Contains(out, "streamIdleTimeout") || !strings.Contains(errs, "nginx default not written") {
		t.Errorf("--no-nginx-defaults wrote a default or did not report it:\n%s\n%s", out, errs)
	}

	// A key not converted: exit 5, the document still written, and the
	// JSON report counts it.
	partial := strings.Replace(nginxConfigMap, `worker-processes: "4"`, `worker-processes: "4"`+"\n  server-snippet: \"return 403;\"\n  proxy-bodysize: 1m", 1)
	code, out, errs = run(t, partial, "convert", "--from", "ingress-nginx", "-f", "-", "--report", "json")
	if code != cli.ExitNotConverted || !strings.Contains(out, "kind: ConfigMap") {
		t.Fatalf("exit %d, want %d with the manifest; stderr:\n%s", code, cli.ExitNotConverted, errs)
	}
	for _, want := range []string{`"notConverted": 2`, `"verdict": "insecure, refused"`, `"verdict": "unknown key"`, `did you mean \"proxy-body-size\"?`} {
		if !strings.Contains(errs, want) {
			t.Errorf("json report lacks %s:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "return 403") {
		t.Error("the report shows a snippet's nginx configuration")
	}

	// An invalid value: exit 1, the key named, nothing written.
	code, out, errs = run(t, strings.Replace(nginxConfigMap, `"8m"`, `"8 megabytes"`, 1), "convert", "--from", "ingress-nginx", "-f", "-")
	if code != cli.ExitInvalid || out != "" || !strings.Contains(errs, "<stdin>: data.proxy-body-size: must be an nginx size") {
		t.Errorf("invalid value: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	// The header ConfigMap from --configmap-dir; without it, reported.
	main, headers, _ := strings.Cut(nginxConfigMap, "---\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "custom-headers.yaml"), []byte(headers), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, main, "convert", "--from", "ingress-nginx", "-f", "-", "--configmap-dir", dir); code != cli.ExitOK || !strings.Contains(out, "x-frame-options: SAMEORIGIN") {
		t.Errorf("--configmap-dir: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := run(t, main, "convert", "--from", "ingress-nginx", "-f", "-"); code != cli.ExitNotConverted || !strings.Contains(errs, "names the ConfigMap ingress-nginx/custom-headers, which was not given") {
		t.Errorf("missing header ConfigMap: exit %d\n%s", code, errs)
	}
	if code, _, _ := run(t, main, "convert", "--from", "ingress-nginx", "-f", "-", "--trusted-hops", "65"); code != cli.ExitUsage {
		t.Errorf("--trusted-hops 65: exit %d", code)
	}
}

// An input over 1 MiB is refused before it is parsed, with exit 1 and the
// limit in the message, from stdin and from a file, for both converters
// and validate --higress; a --configmap-dir file over it too.
func TestConvertRefusesHugeInput(t *testing.T) {
	huge := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  k: \"" + strings.Repeat("a", cli.MaxConvertInput) + "\"\n"
	path := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(path, []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"convert", "--from", "higress", "-f", "-"},
		{"convert", "--from", "ingress-nginx", "-f", "-"},
		{"convert", "--from", "ingress-nginx", "-f", path},
		{"validate", "--higress", "-f", path},
	} {
		code, out, errs := run(t, huge, args...)
		if code != cli.ExitInvalid || out != "" || !strings.Contains(errs, "the input is over 1048576 bytes (1 MiB, what a ConfigMap holds); refused before parsing") || len(errs) > 300 {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q", args, code, len(out), errs)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "headers.yaml"), []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, nginxConfigMap, "convert", "--from", "ingress-nginx", "-f", "-", "--configmap-dir", dir)
	if code != cli.ExitIO || !strings.Contains(errs, "headers.yaml is over 1048576 bytes") {
		t.Errorf("--configmap-dir: exit %d, stderr %q", code, errs)
	}
}

// A refusal names each problem's path once, briefly, whatever the size of
// the value; with --report json it is JSON; input that is not UTF-8 is
// refused with its line and column.
func TestConvertErrors(t *testing.T) {
	long := strings.Repeat("x", 500000)
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  keep-alive: \"" + long + "\"\n  whitelist-source-range: \"" + strings.Repeat("nope,", 50) + "\"\n"
	code, _, errs := run(t, cm, "convert", "--from", "ingress-nginx", "-f", "-")
	if code != cli.ExitInvalid || len(errs) > 8000 || !strings.Contains(errs, "data.keep-alive: ") || !strings.Contains(errs, "bytes more)") ||
		strings.Count(errs, "data.whitelist-source-range:") != 11 || !strings.Contains(errs, "data.whitelist-source-range: and 40 more problems") {
		t.Errorf("exit %d, %d bytes of stderr:\n%.3000s", code, len(errs), errs)
	}
	code, _, errs = run(t, cm, "convert", "--from", "ingress-nginx", "-f", "-", "--report", "json")
	var report struct {
		File   string `json:"file"`
		Errors []struct{ Path, Message string }
	}
	if err := json.Unmarshal([]byte(errs), &report); code != cli.ExitInvalid || err != nil || len(report.Errors) != 12 || report.Errors[0].Path != "data.keep-alive" {
		t.Errorf("--report json: exit %d, %v: %.2000s", code, err, errs)
	}
	code, _, errs = run(t, "apiVersion: v1\nkind: ConfigMap\ndata:\n  keep-alive: \"7\xff5\"\n", "convert", "--from", "higress", "-f", "-")
	if code != cli.ExitInvalid || !strings.Contains(errs, "line 4, column 17: not UTF-8 (byte 0xff)") {
		t.Errorf("not UTF-8: exit %d, %q", code, errs)
	}
}

// A key that looks like a snippet key, misspelt or differently cased, is
// reported unknown without its value, in text and in JSON.
func TestConvertNeverEchoesSnippets(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  server-snipet: \"auth_basic_user_file s3cr3t-1;\"\n  Server-Snippet: \"set $token s3cr3t-2;\"\n  http-snipett: \"s3cr3t-3\"\n  main-snippet: \"s3cr3t-4\"\n"
	for _, report := range []string{"text", "json"} {
		code, out, errs := run(t, cm, "convert", "--from", "ingress-nginx", "-f", "-", "--report", report)
		if code != cli.ExitNotConverted || strings.Contains(out+errs, "s3cr3t") || strings.Count(errs, "did you mean") != 3 {
			t.Errorf("--report %s: exit %d, a value shown or a key missing:\n%s", report, code, errs)
		}
	}
}

// The higress-config ConfigMap's own namespace is Higress's namespace,
// unless --higress-namespace says otherwise.
func TestConvertHigressNamespace(t *testing.T) {
	cm := strings.Replace(higressConfigMap, "namespace: higress-system", "namespace: edge", 1)
	_, out, errs := run(t, cm, "convert", "--from", "higress", "-f", "-")
	if !strings.Contains(out, "higress: edge-higress-gateway") || strings.Contains(out+errs, "higress-system") {
		t.Errorf("the ConfigMap's namespace was not used:\n%s\n%s", out, errs)
	}
	_, out, _ = run(t, cm, "convert", "--from", "higress", "-f", "-", "--higress-namespace", "other")
	if !strings.Contains(out, "higress: other-higress-gateway") {
		t.Errorf("--higress-namespace was not used:\n%s", out)
	}
}
