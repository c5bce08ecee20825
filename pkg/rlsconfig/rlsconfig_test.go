package rlsconfig_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rlsconfig"
)

const doc = `globalRateLimit:
  service: ratelimit.ratelimit.svc.cluster.local
  port: 8081
  limits:
    per-client:
      requests: 600
      unit: minute
      perClient: true
      except: ["10.0.0.0/8"]
    login:
      requests: 10
      unit: minute
      perClient: true
      match: {pathPrefix: /login, methods: [POST]}
    everyone:
      requests: 100000
      unit: hour
      shadow: true
`

func set(t *testing.T, src string) []*envoyfilter.Object {
	t.Helper()
	res := render.New().FromConfigMap(map[string]string{document.DataKey: src})
	if !res.Valid() {
		t.Fatalf("%v", res.Problems)
	}
	return res.Objects
}

// The service's configuration is the document's limits, nested as the
// proxies' actions write each descriptor's entries, in its file format.
func TestFiles(t *testing.T) {
	cfgs, err := rlsconfig.Configs(set(t, doc+"gzip: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := rlsconfig.Files(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	got := string(files["globalconfig.yaml"])
	for _, want := range []string{
		"domain: globalconfig",
		"- descriptors:\n  - descriptors:\n    - key: remote_address\n      rate_limit:\n        requests_per_unit: 10\n        unit: minute\n    key: match\n    value: \"yes\"\n  key: limit\n  value: login.",
		"    key: except\n    value: outside\n  key: limit\n  value: per-client.",
		"- key: limit\n  rate_limit:\n    requests_per_unit: 100000\n    unit: hour\n  shadow_mode: true\n  value: everyone.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if len(files) != 1 {
		t.Errorf("files %v", files)
	}
}

// A canary split carries both versions of a changed limit: the service
// holds both, each under its own descriptor, so canaries and the others
// are each limited by their own version.
func TestCanarySplitKeepsBoth(t *testing.T) {
	stable := set(t, doc)
	candidate := set(t, strings.Replace(doc, "requests: 10\n", "requests: 20\n", 1))
	split, err := canary.Split(stable, candidate, canary.DefaultLabel)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := rlsconfig.Configs(split)
	if err != nil {
		t.Fatal(err)
	}
	var logins []string
	for _, d := range cfgs[0].GetDescriptors() {
		if strings.HasPrefix(d.GetValue(), "login.") {
			logins = append(logins, d.GetValue())
		}
	}
	if len(cfgs) != 1 || len(logins) != 2 || len(cfgs[0].GetDescriptors()) != 4 {
		t.Errorf("split: %v", cfgs)
	}
	// Each side alone has its own, and the same versions hash the same.
	_, v1, _ := rlsconfig.Resources(must(rlsconfig.Configs(stable)))
	_, v2, _ := rlsconfig.Resources(must(rlsconfig.Configs(set(t, doc))))
	if v1 != v2 {
		t.Errorf("the same document hashed %s and %s", v1, v2)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The reference service's own config checker accepts what is generated.
func TestConfigCheckerAccepts(t *testing.T) {
	checker := os.Getenv("GLOBALCONFIG_RATELIMIT_CONFIG_CHECK")
	if checker == "" {
		t.Skip("GLOBALCONFIG_RATELIMIT_CONFIG_CHECK is not set: run `make test-one PKG=./pkg/rlsconfig` (or `make test`), which builds the rate-limit service's config checker")
	}
	for _, src := range []string{doc, "globalRateLimit:\n  service: rl.example.com\n  port: 8081\n  domain: edge\n  limits:\n    api:\n      requests: 5\n      unit: second\n      perHeader: x-api-key\n      match: {hosts: [api.example.com]}\n    sub:\n      requests: 50\n      unit: day\n      perClientSubnet: {ipv4: 16}\n"} {
		files, err := rlsconfig.Files(must(rlsconfig.Configs(set(t, src))))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, checker, "-config_dir", dir).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "all rate limit configs ok") {
			t.Errorf("the checker refuses %v: %v\n%s", files, err, out)
		}
	}
	// And refuses what is wrong: the check can fail.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: x\ndescriptors:\n- key: a\n  rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(checker, "-config_dir", dir).CombinedOutput(); err == nil {
		t.Errorf("the checker accepts a unit of fortnight:\n%s", out)
	}
}
