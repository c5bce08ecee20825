package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/test/harness"
)

// proxyName is g's name as istiod and --proxy name it: POD.NAMESPACE.
func (g *gw) proxyName() string { return strings.Split(g.NodeID, "~")[2] }

func istiodURL() string { return "http://" + istiod.HTTPAddr }

// fetchNow is the configuration istiod generates for g now.
func fetchNow(ctx context.Context, t testing.TB, g *gw) (*preflight.Config, preflight.Proxy) {
	t.Helper()
	cfg, px, err := istiod.ProxyConfig(ctx, g.proxyName())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, px
}

// predict is diff --proxy's prediction for g under objs.
func predict(ctx context.Context, t testing.TB, g *gw, objs []*envoyfilter.Object) *preflight.Prediction {
	t.Helper()
	p, err := cluster.Predict(ctx, istiod, g.proxyName(), objs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// canonical is c's canonical text (preflight.Config.Canonical): equal texts
// are equal protos.
func canonical(t testing.TB, c *preflight.Config) string {
	t.Helper()
	s, err := c.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// applySet makes objs the whole of globalconfig's EnvoyFilters, without
// touching the sentinel: the other EnvoyFilters stay as they are.
func applySet(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	prune(ctx, t, objs)
	if len(objs) > 0 {
		kubectlApply(ctx, t, objs)
	}
}

// checkPredictions applies objs and requires istiod's configuration for
// each gateway to become the prediction made for it before. Each
// prediction must differ from the configuration before the apply, so that
// the wait can't end on the old state.
func checkPredictions(ctx context.Context, t *testing.T, objs []*envoyfilter.Object, ps map[*gw]*preflight.Prediction) {
	t.Helper()
	for g, p := range ps {
		if canonical(t, p.After) == canonical(t, p.Before) {
			t.Fatalf("the prediction for %s does not change its configuration: the case proves nothing", g.name)
		}
	}
	applySet(ctx, t, objs)
	for _, g := range gateways {
		want := canonical(t, ps[g].After)
		var got string
		ok := harness.Eventually(ctx, ackTimeout, func() bool {
			cfg, _ := fetchNow(ctx, t, g)
			got = canonical(t, cfg)
			return got == want
		})
		if !ok {
			t.Errorf("istiod's configuration for %s (Envoy %s) is not the prediction after %s:\n%s", g.name, g.Binary.Version, ackTimeout, plan.Unified("predicted", "istiod", want, got))
		}
	}
}

// predictAll predicts every gateway's configuration under objs.
func predictAll(ctx context.Context, t *testing.T, objs []*envoyfilter.Object) map[*gw]*preflight.Prediction {
	t.Helper()
	out := map[*gw]*preflight.Prediction{}
	for _, g := range gateways {
		out[g] = predict(ctx, t, g, objs)
	}
	return out
}

// exact fails the test on any inexact part.
func exact(t *testing.T, ps map[*gw]*preflight.Prediction) {
	t.Helper()
	for g, p := range ps {
		if len(p.Inexact) > 0 {
			t.Errorf("%s: the prediction must be exact: %q", g.name, p.Inexact)
		}
	}
}

// exampleDocs are each item's example document, by item directory.
func exampleDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "example.in.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no item examples: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(filepath.Dir(filepath.Dir(f)))] = string(b)
	}
	return out
}

// The prediction equals what istiod then generates for each gateway (the
// newest and the oldest Envoy, which get different variants of some
// items): for
// every item's example alone and for the whole example document, each from
// a gateway with no globalconfig EnvoyFilter; and for an edit of the
// example applied over the example, which takes the live patches off the
// current config first.
func TestPreflightPredictsIstiod(t *testing.T) {
	ctx := setup(t)
	t.Cleanup(func() { applyAll(ctx, t, nil) })
	docs := exampleDocs(t)
	names := make([]string, 0, len(docs))
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			applyAll(ctx, t, nil) // no globalconfig EnvoyFilter, loaded
			objs := rendered(t, docs[n])
			ps := predictAll(ctx, t, objs)
			exact(t, ps)
			checkPredictions(ctx, t, objs, ps)
		})
	}
	example, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	full := rendered(t, string(example))
	t.Run("example", func(t *testing.T) {
		applyAll(ctx, t, nil)
		ps := predictAll(ctx, t, full)
		exact(t, ps)
		checkPredictions(ctx, t, full, ps)
	})
	t.Run("edit-over-example", func(t *testing.T) {
		mustACK(ctx, t, full)
		edited := string(example)
		for _, r := range [][2]string{
			{"minContentLength: 1024", "minContentLength: 2048"},
			{"compressionLevel: BEST_COMPRESSION", "compressionLevel: BEST_SPEED"},
			{"connectTimeout: 5s", "connectTimeout: 7s"},
			{"sampling: 10", "sampling: 25"},
			{"streamIdleTimeout: 5m", "streamIdleTimeout: 4m"},
		} {
			if !strings.Contains(edited, r[0]) {
				t.Fatalf("the example has no %q to edit", r[0])
			}
			edited = strings.Replace(edited, r[0], r[1], 1)
		}
		objs := rendered(t, edited)
		ps := predictAll(ctx, t, objs)
		if len(ps[newest].Changed) == 0 {
			t.Fatal("no item changes")
		}
		exact(t, ps)
		t.Logf("changed: %v", ps[newest].Changed)
		checkPredictions(ctx, t, objs, ps)
	})
	// Taking the whole example off a gateway reveals what istiod built
	// under the merges: the clusters' connect_timeout, which the upstream
	// item set and the current config hides, can't be predicted, and the
	// prediction says so by path.
	t.Run("remove-example", func(t *testing.T) {
		mustACK(ctx, t, full)
		p := predict(ctx, t, newest, nil)
		found := false
		for _, s := range p.Inexact {
			if strings.Contains(s, "cluster outbound|8080||backend.proxy.test › connect_timeout") {
				found = true
			}
		}
		if !found {
			t.Errorf("inexact parts do not name the backend cluster's connect_timeout: %q", p.Inexact)
		}
		t.Logf("not predicted exactly: %d parts, e.g. %q", len(p.Inexact), p.Inexact[:min(3, len(p.Inexact))])
	})
}

// runCLI runs globalconfig in-process against the suite's cluster.
func runCLI(args ...string) (int, string, string) {
	var out, errs bytes.Buffer
	code := cli.Main(append(args, "--kubeconfig", cluster.AdminKubeconfig), cli.Env{Stdout: &out, Stderr: &errs})
	return code, out.String(), errs.String()
}

// liveSet is globalconfig's EnvoyFilters in the cluster, by name.
func liveSet(ctx context.Context, t *testing.T) []string {
	t.Helper()
	live, _, err := preflight.ClusterFilters(ctx, cluster.Istio)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range live {
		out = append(out, f.Name)
	}
	sort.Strings(out)
	return out
}

// diff --proxy --envoy: a real Envoy of the gateway's release judges the
// predicted configuration. A tracing collector that is no service in the
// mesh passes globalconfig's checks and istiod's, but Envoy refuses a
// zipkin tracer whose cluster does not exist: the preflight says so and
// names the item, before anything is applied. The example is accepted.
func TestPreflightEnvoyVerdict(t *testing.T) {
	ctx := setup(t)
	t.Cleanup(func() { applyAll(ctx, t, nil) })
	applyAll(ctx, t, nil)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("gzip:\n  enable: true\ntracing:\n  enable: true\n  sampling: 100\n  zipkin:\n    service: nosuch.istio-system.svc.cluster.local\n    port: 9411\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := liveSet(ctx, t)
	base := []string{"diff", "--proxy", newest.proxyName(), "--istiod-debug-url", istiodURL(), "--envoy", newest.Binary.Path}
	code, out, errs := runCLI(append(base, "-f", bad)...)
	if code != cli.ExitEnvoyRejects || !strings.Contains(out, "REJECTS") || !strings.Contains(out, "rejected on its own: the change of tracing\n") {
		t.Errorf("a collector that is no cluster: exit %d, want %d naming tracing alone\n%s\n%s", code, cli.ExitEnvoyRejects, out, errs)
	}
	t.Logf("$ globalconfig diff -f bad.yaml --proxy %s --envoy envoy-%s\n%s", newest.proxyName(), newest.Binary.Version, lastLines(out, 4))
	example := filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml")
	code, out, errs = runCLI(append(base, "-f", example)...)
	if code != cli.ExitChanged || !strings.Contains(out, "envoy "+newest.Binary.Version+" accepts the predicted configuration") {
		t.Errorf("the example: exit %d, want %d and accepted\n%s\n%s", code, cli.ExitChanged, out, errs)
	}
	if !strings.Contains(out, "+++ listener ") || !strings.Contains(out, "envoy.filters.http.compressor.gzip") {
		t.Errorf("the example's diff shows no listener change with gzip:\n%s", out)
	}
	code, js, errs := runCLI(append(base, "-f", example, "-o", "json")...)
	var rep struct {
		Proxy   struct{ Name string }
		Items   []string
		Changes []struct{ Kind, Name, Change, Diff string }
		Envoy   struct{ Rejected string }
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil || code != cli.ExitChanged || rep.Proxy.Name != newest.proxyName() || len(rep.Items) == 0 || len(rep.Changes) == 0 || rep.Envoy.Rejected != "" {
		t.Errorf("-o json: exit %d, %v: %+v\n%s", code, err, rep, errs)
	}
	if after := liveSet(ctx, t); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("diff --proxy changed the cluster: %v, was %v", after, before)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Bad input to diff --proxy: each gets a clear error and its own exit
// code, and nothing is applied. A gateway's own admin config dump (what
// istioctl proxy-config all -o json prints) is read whole.
func TestPreflightBadInput(t *testing.T) {
	ctx := setup(t)
	t.Cleanup(func() { applyAll(ctx, t, nil) })
	applyAll(ctx, t, nil)
	example := filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml")
	dir := t.TempDir()
	dump, err := newest.Get(ctx, "/config_dump")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	whole := write("envoy.json", dump)
	truncated := write("truncated.json", dump[:len(dump)/2])
	other := write("kubectl.json", []byte(`{"apiVersion": "v1", "kind": "List", "items": []}`))
	before := liveSet(ctx, t)
	url := "--istiod-debug-url=" + istiodURL()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no such proxy", []string{"--proxy", "nosuch.istio-system", url}, cli.ExitNoProxy, "no istiod has a proxy nosuch.istio-system connected"},
		{"istiod unreachable", []string{"--proxy", newest.proxyName(), "--istiod-debug-url=http://127.0.0.1:1"}, cli.ExitIstiod, "no istiod could be asked"},
		{"truncated dump", []string{"--config-dump", truncated}, cli.ExitBadDump, "truncated"},
		{"another tool's JSON", []string{"--config-dump", other}, cli.ExitBadDump, `no "configs" list`},
		{"not an Envoy", []string{"--proxy", newest.proxyName(), url, "--envoy", "/bin/true"}, cli.ExitNotEnvoy, "is not an Envoy binary"},
		{"the gateway's own dump", []string{"--config-dump", whole, "--envoy", newest.Binary.Path}, cli.ExitChanged, ""},
	} {
		code, out, errs := runCLI(append([]string{"diff", "-f", example}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want %d and %q\n%s", c.name, code, errs, c.code, c.want, out)
		}
		if c.code == cli.ExitChanged && (!strings.Contains(out, "proxy "+newest.proxyName()+" (gateway") || !strings.Contains(out, "accepts the predicted configuration")) {
			t.Errorf("%s: %s", c.name, out)
		}
	}
	if after := liveSet(ctx, t); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("diff --proxy changed the cluster: %v, was %v", after, before)
	}
}
