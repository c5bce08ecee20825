package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/test/harness"
)

// globalconfig validate --envoy: what both gateways load, each Envoy
// accepts in validate mode too; a patch Envoy refuses at load is reported
// with Envoy's message and the item it came from.
func TestEnvoyCheck(t *testing.T) {
	ctx := setup(t)
	for _, g := range gateways {
		for name, doc := range map[string]string{"example": exampleDocument(t), "everything": everythingDocument(t)} {
			rep, err := envoycheck.Check(ctx, g.Binary, rendered(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || len(rep.Results) == 0 || rep.Results[0].Context != "GATEWAY" || rep.Results[0].Patches < 20 {
				t.Errorf("Envoy %s, %s: %+v", g.Binary.Version, name, rep)
			}
			if rep.Istio != g.IstioVersion {
				t.Errorf("Envoy %s checked as Istio %s, its gateway reports %s", g.Binary.Version, rep.Istio, g.IstioVersion)
			}
		}
		objs := append(rendered(t, exampleDocument(t)), handWritten(t, "hand-written-health-check", "", healthCheckPatch(t)))
		rep, err := envoycheck.Check(ctx, g.Binary, objs)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || len(rep.Results) != 1 || !strings.Contains(rep.Results[0].Rejected, "cache_time_ms must not be set") ||
			strings.Join(rep.Results[0].Items, ",") != "hand-written-health-check" {
			t.Errorf("Envoy %s: %+v", g.Binary.Version, rep)
		}
	}
}

// The CLI: validate --envoy prints the verdict; a binary that is missing,
// not executable or not Envoy is a clear error naming it.
func TestValidateWithEnvoyCLI(t *testing.T) {
	setup(t)
	file := harness.RepoRoot() + "/deploy/examples/global-config.yaml"
	run := func(args ...string) (int, string, string) {
		var out, errs bytes.Buffer
		code := cli.Main(args, cli.Env{Stdout: &out, Stderr: &errs})
		return code, out.String(), errs.String()
	}
	code, out, errs := run("validate", "-f", file, "--envoy", newest.Binary.Path)
	if code != cli.ExitOK || !strings.Contains(out, "envoy "+newest.Binary.Version+" (a proxy of Istio ") || !strings.Contains(out, "accepts: GATEWAY") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
	t.Logf("$ globalconfig validate -f global-config.yaml --envoy envoy-%s\n%s", newest.Binary.Version, out)
	code, out, errs = run("render", "-f", file, "--envoy", oldest.Binary.Path)
	if code != cli.ExitOK || !strings.HasPrefix(out, "apiVersion: networking.istio.io/v1alpha3") || !strings.Contains(errs, "accepts: GATEWAY") {
		t.Errorf("render --envoy: exit %d\n%s", code, errs)
	}
	for _, c := range []struct{ path, want string }{
		{suiteDir + "/no-such-envoy", "does not exist"},
		{certFile, "is not executable"},
		{"/bin/true", "is not an Envoy binary"},
	} {
		code, _, errs := run("validate", "-f", file, "--envoy", c.path)
		if code != cli.ExitIO || !strings.Contains(errs, c.path) || !strings.Contains(errs, c.want) {
			t.Errorf("--envoy %s: exit %d, %q; want %d and %q", c.path, code, errs, cli.ExitIO, c.want)
		}
	}
}
