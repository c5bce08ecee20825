package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/test/harness"
)

// groupsDocs are clientIP.trustedCIDRs and headers.xff.trustedHops, which
// Envoy refuses on one connection manager ("may not be mixed"), beside
// gzip on every sidecar. Apart, by selector or by namespace, the test
// sidecar (app: storefront in routeBackend's namespace) gets clientIP and
// gzip only; together, both reach it.
func groupsDocs() (apart map[string]string, together string) {
	const items = `target: {context: SIDECAR_INBOUND}
gzip: {}
clientIP:
  target: {%s}
  trustedCIDRs: ["10.0.0.0/8"]
headers:
  target: {%s}
  xff: {trustedHops: 1}
`
	apart = map[string]string{
		"disjoint selectors":  fmt.Sprintf(items, "selector: {app: storefront}", "selector: {app: billing}"),
		"disjoint namespaces": fmt.Sprintf(items, "namespace: "+routeBackend.namespace, "namespace: globalconfig-e2e-billing"),
	}
	together = fmt.Sprintf(items, "selector: {app: storefront}", "namespace: "+routeBackend.namespace)
	return apart, together
}

// Items whose targets can never reach one proxy are admitted by validate,
// validate --envoy and diff --proxy --envoy on the sidecar they reach; the
// same items on targets that meet on that sidecar are refused by all
// three, each naming the two keys.
func TestEnvoyCheckModelsProxiesAsValidation(t *testing.T) {
	ctx := setup(t)
	bin, err := harness.EnvoyBinary(ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}
	clearManaged(ctx, t, 9541)
	run := func(doc string, args ...string) (int, string, string) {
		file := filepath.Join(t.TempDir(), "groups.yaml")
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errs bytes.Buffer
		code := cli.Main(append([]string{args[0], "-f", file}, args[1:]...), cli.Env{Stdout: &out, Stderr: &errs})
		return code, out.String(), errs.String()
	}
	diffProxy := []string{"diff", "--kubeconfig", cluster.AdminKubeconfig, "--proxy", sidecarName(),
		"--istiod-debug-url", "http://" + istiod.HTTPAddr, "--envoy", bin.Path}

	apart, together := groupsDocs()
	for name, doc := range apart {
		if code, out, errs := run(doc, "validate"); code != cli.ExitOK {
			t.Errorf("%s: validate: exit %d\n%s%s", name, code, out, errs)
		}
		code, out, errs := run(doc, "validate", "--envoy", bin.Path)
		if code != cli.ExitOK || strings.Count(out, "SIDECAR_INBOUND proxies") != 2 {
			t.Errorf("%s: validate --envoy: exit %d\n%s%s", name, code, out, errs)
		}
		t.Logf("%s: validate --envoy: %s", name, out)
		code, out, errs = run(doc, diffProxy...)
		if code != cli.ExitChanged || !strings.Contains(out, "accepts the predicted configuration") {
			t.Errorf("%s: diff --proxy --envoy: exit %d\n%s%s", name, code, out, errs)
		}
	}

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"validate"}, cli.ExitInvalid},
		{[]string{"validate", "--envoy", bin.Path}, cli.ExitInvalid},
		{diffProxy, cli.ExitDiffInvalid},
	} {
		code, out, errs := run(together, c.args...)
		if code != c.code || !strings.Contains(errs, "clientIP.trustedCIDRs: can't be beside headers.xff.trustedHops") {
			t.Errorf("together: %s: exit %d, want %d\n%s%s", c.args[0], code, c.code, out, errs)
		}
	}
}
