package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// sidecarName is the test sidecar as istiod names it: POD.NAMESPACE.
func sidecarName() string { return "workload-0." + routeBackend.namespace }

// predictSidecar is diff --proxy's prediction for the test sidecar.
func predictSidecar(ctx context.Context, t *testing.T, objs []*envoyfilter.Object) *preflight.Prediction {
	t.Helper()
	p, err := cluster.Predict(ctx, istiod, sidecarName(), objs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sidecarConfig(ctx context.Context, t *testing.T) (*preflight.Config, preflight.Proxy) {
	t.Helper()
	cfg, px, err := istiod.ProxyConfig(ctx, sidecarName())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, px
}

// canonicalConfig is c's canonical text (preflight.Config.Canonical): equal texts
// are equal protos.
func canonicalConfig(t testing.TB, c *preflight.Config) string {
	t.Helper()
	s, err := c.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clearManaged deletes globalconfig's EnvoyFilters and waits until istiod
// has processed it.
func clearManaged(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	if err := cluster.PruneManaged(ctx); err != nil {
		t.Fatal(err)
	}
	sentinel(ctx, t, n)
}

// withContext is an item's example document with target.context set.
func withContext(t *testing.T, doc, context string) string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		sec, ok := v.(map[string]any)
		if !ok {
			continue
		}
		sec["target"] = map[string]any{"context": context}
		m[k] = sec
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// diff --proxy for a sidecar: the prediction equals the configuration
// istiod then generates for the test sidecar, for the document with one
// item per context and for every item's example aimed at both directions
// (context ANY, or SIDECAR_INBOUND where the item refuses ANY), each from a sidecar without globalconfig's patches; and
// for an edit of the contexts document over itself.
func TestPreflightSidecar(t *testing.T) {
	ctx := setup(t)
	n := 9000
	next := func() int { n++; return n }
	t.Cleanup(func() { clearManaged(context.Background(), t, next()) })
	check := func(t *testing.T, objs []*envoyfilter.Object, p *preflight.Prediction) {
		t.Helper()
		if len(p.Inexact) > 0 {
			t.Errorf("not exact: %q", p.Inexact)
		}
		want, before := canonicalConfig(t, p.After), canonicalConfig(t, p.Before)
		if want == before {
			t.Fatal("the prediction does not change the sidecar: the case proves nothing")
		}
		for _, o := range objs {
			y, err := o.YAML()
			if err != nil {
				t.Fatal(err)
			}
			if out, err := cluster.Kubectl(ctx, y, "apply", "-f", "-"); err != nil {
				t.Fatalf("kubectl apply: %v\n%s", err, out)
			}
		}
		var got string
		deadline := time.Now().Add(effectTimeout)
		for {
			cfg, _ := sidecarConfig(ctx, t)
			if got = canonicalConfig(t, cfg); got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("istiod's configuration for the sidecar is not the prediction after %s:\n%s", effectTimeout, plan.Unified("predicted", "istiod", want, got))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Run("contexts", func(t *testing.T) {
		clearManaged(ctx, t, next())
		objs := desiredObjects(t, contextsDoc)
		check(t, objs, predictSidecar(ctx, t, objs))
	})
	t.Run("edit-contexts", func(t *testing.T) {
		// The contexts document is applied: its live patches come off.
		edited := strings.NewReplacer("minContentLength: 2345", "minContentLength: 3456", "connectTimeout: 7s", "connectTimeout: 9s").Replace(contextsDoc)
		if edited == contextsDoc {
			t.Fatal("nothing edited")
		}
		objs := desiredObjects(t, edited)
		p := predictSidecar(ctx, t, objs)
		if len(p.Changed) != 2 {
			t.Errorf("changed %v, want gzip and upstream", p.Changed)
		}
		check(t, objs, p)
	})
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "example.in.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no item examples: %v", err)
	}
	ran := 0
	for _, f := range files {
		item := filepath.Base(filepath.Dir(filepath.Dir(f)))
		t.Run(item, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// Both directions when the item may go there, else inbound.
			objs, err := tryObjects(withContext(t, string(b), "ANY"))
			if err != nil {
				var errIn error
				if objs, errIn = tryObjects(withContext(t, string(b), "SIDECAR_INBOUND")); errIn != nil {
					t.Skipf("the item takes neither ANY nor SIDECAR_INBOUND: %v", err)
				}
			}
			clearManaged(ctx, t, next())
			p := predictSidecar(ctx, t, objs)
			if canonicalConfig(t, p.After) == canonicalConfig(t, p.Before) {
				t.Skip("the item's example does not reach a sidecar")
			}
			ran++
			check(t, objs, p)
		})
	}
	if ran < 12 {
		t.Errorf("only %d items' examples reached the sidecar", ran)
	}
}

// tryObjects is desiredObjects that returns the document's problems.
func tryObjects(doc string) ([]*envoyfilter.Object, error) {
	d, err := document.Parse([]byte(doc))
	if err != nil {
		return nil, err
	}
	return render.Desired(d)
}

// diff --proxy --envoy on proxies of a stock istiod, whose configuration
// carries Istio's own extensions (istio.alpn, istio.metadata_exchange,
// istio.stats), which upstream Envoy lacks: they are taken out and listed,
// and the real Envoy accepts what remains, for the sidecar and the gateway.
func TestPreflightEnvoyStockIstiod(t *testing.T) {
	ctx := setup(t)
	bin, err := harness.EnvoyBinary(ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}
	clearManaged(ctx, t, 9500)
	file := filepath.Join(t.TempDir(), "contexts.yaml")
	if err := os.WriteFile(file, []byte(contextsDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, proxy := range []string{sidecarName(), strings.Split(xds.GatewayNode().GetId(), "~")[2]} {
		var out, errs bytes.Buffer
		code := cli.Main([]string{"diff", "-f", file, "--kubeconfig", cluster.AdminKubeconfig, "--proxy", proxy,
			"--istiod-debug-url", "http://" + istiod.HTTPAddr, "--envoy", bin.Path}, cli.Env{Stdout: &out, Stderr: &errs})
		if code != cli.ExitChanged || !strings.Contains(out.String(), "accepts the predicted configuration") {
			t.Errorf("%s: exit %d\n%s\n%s", proxy, code, out.String(), errs.String())
		}
		if !strings.Contains(out.String(), "taken out for upstream Envoy (Istio's own extensions): ") {
			t.Errorf("%s: nothing of Istio's own was taken out:\n%s", proxy, out.String())
		}
		t.Logf("%s: %s", proxy, lastLine(out.String(), "taken out"))
	}
}

func lastLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, prefix) {
			return l
		}
	}
	return ""
}
