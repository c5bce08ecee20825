package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

const effectTimeout = 30 * time.Second

func goldenOutputs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "*.out.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden outputs: %v", err)
	}
	return files
}

// waitEffect waits until check passes on what the gateway receives.
func waitEffect(ctx context.Context, t testing.TB, what string, check func(xds.Snapshot) error) time.Time {
	t.Helper()
	var last error
	at, err := gateway.WaitFor(ctx, effectTimeout, func(s xds.Snapshot) bool {
		last = check(s)
		return last == nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last check: %v)", what, err, last)
	}
	return at
}

// sentinel applies an EnvoyFilter that sets the HCM via header to a fresh
// value and waits for it, proving istiod has processed every earlier write.
// No item sets via.
func sentinel(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	name := fmt.Sprintf("sentinel-%d", n)
	p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{Via: name})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := envoyfilter.NewObject("e2e-sentinel", envoyfilter.Placement{Priority: -100}, envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	obj.Metadata.Name = "e2e-sentinel"
	obj.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "e2e-sentinel"}
	y, err := obj.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Kubectl(ctx, y, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitEffect(ctx, t, "sentinel", func(s xds.Snapshot) error {
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return err
		}
		if hcm.GetVia() != name {
			return fmt.Errorf("via %q", hcm.GetVia())
		}
		return nil
	})
}

// Every golden output, applied as it is, does what it says at the gateway —
// or, when its target is not the gateway, nothing there — and deleting it
// removes the effect.
func TestGoldenEffects(t *testing.T) {
	ctx := setup(t)
	checked := 0
	for i, file := range goldenOutputs(t) {
		objs := readObjects(t, file)
		if len(objs) == 0 {
			continue // a disabled or absent item: nothing to apply.
		}
		name := strings.TrimPrefix(file, filepath.Join(harness.RepoRoot(), "items")+"/")
		t.Run(name, func(t *testing.T) {
			if _, err := cluster.Kubectl(ctx, nil, "apply", "-f", file); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = cluster.Kubectl(ctx, nil, "delete", "--ignore-not-found", "-f", file) })
			sentinel(ctx, t, i)
			for _, o := range objs {
				if appliesToGateway(o) {
					waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffect(o, s) })
					checked++
					continue
				}
				if appliesToSidecar(o) {
					waitOn(ctx, t, sidecar, o.Metadata.Name+" at the sidecar", func(s xds.Snapshot) error { return inboundInEffect(o, s) })
					checked++
				}
				if err := noneInEffect(o, gateway.Snapshot()); err != nil {
					t.Errorf("targets elsewhere, yet reached the gateway: %v", err)
				}
			}
			if _, err := cluster.Kubectl(ctx, nil, "delete", "-f", file); err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				waitEffect(ctx, t, o.Metadata.Name+" removed", func(s xds.Snapshot) error { return noneInEffect(o, s) })
				if appliesToSidecar(o) {
					waitOn(ctx, t, sidecar, o.Metadata.Name+" removed from the sidecar", func(s xds.Snapshot) error {
						if inboundInEffect(o, s) == nil {
							return fmt.Errorf("still in effect")
						}
						return nil
					})
				}
			}
		})
	}
	if checked < 8 {
		t.Errorf("only %d EnvoyFilters were checked at the gateway", checked)
	}
	if _, err := cluster.Kubectl(ctx, nil, "delete", "envoyfilter", "-n", ns, "e2e-sentinel"); err != nil {
		t.Error(err)
	}
}

// exampleDocument is the config.yaml of deploy/examples/global-config.yaml.
func exampleDocument(t testing.TB) string {
	t.Helper()
	doc, err := harness.ExampleDocument()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func desiredObjects(t testing.TB, doc string) []*envoyfilter.Object {
	t.Helper()
	d, err := document.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(d)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// putConfig creates or updates the global ConfigMap.
func putConfig(ctx context.Context, t testing.TB, doc string) {
	t.Helper()
	if err := cluster.PutConfig(ctx, doc); err != nil {
		t.Fatal(err)
	}
}

// startController runs the controller until the test ends and removes
// what it made; the rollout is read from the suite's istiod unless args
// say otherwise.
func startController(ctx context.Context, t testing.TB, args ...string) *harness.Controller {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--istiod") }) {
		args = append(args, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	}
	return cluster.RunController(t, controlBin, args...)
}

// Through the controller: the example document takes effect at the
// gateway, an edit reaches it without a restart, and removing items
// removes their effect.
func TestControllerEffects(t *testing.T) {
	ctx := setup(t)
	doc := exampleDocument(t)
	putConfig(ctx, t, doc)
	startController(ctx, t)
	set := desiredObjects(t, doc)
	for _, o := range set {
		waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, set, s) })
	}
	// Each compressor sits before the router, with Envoy's chunk_size.
	hcm, err := gateway.Snapshot().GatewayHCM(listenerName)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	chain := strings.Join(names, ",")
	// The chain envoycheck.HTTPChain predicts from the patches, as istiod
	// applies them: the filters inserted at the front (the compressors,
	// then the filters that refuse requests, in their slots' order) ahead
	// of all of Istio's own, the ones inserted before the router after
	// them. Predicted, not listed here, so a new item changes nothing.
	want, err := envoycheck.HTTPChain(set)
	if err != nil {
		t.Fatal(err)
	}
	var front, back []string
	istio := false
	for _, f := range want {
		switch {
		case f.Name == envoycheck.IstioFilters:
			istio = true
		case istio:
			back = append(back, f.Name)
		default:
			front = append(front, f.Name)
		}
	}
	if len(front) < 3 || len(back) == 0 || back[len(back)-1] != envoyfilter.Router {
		t.Fatalf("the predicted chain %v has no front or no router: the prediction is broken", want)
	}
	head, tail := strings.Join(front, ",")+",", ","+strings.Join(back, ",")
	if !strings.HasPrefix(chain, head) || !strings.HasSuffix(chain, tail) || len(chain) <= len(head)+len(tail) {
		t.Errorf("HTTP filter chain %s: want it to start %s, then Istio's own filters, and end %s", chain, head, tail)
	}
	if got := hcm.GetTracing().GetRandomSampling().GetValue(); got != 10 {
		t.Errorf("tracing sampling %v, want 10 (the document's)", got)
	}
	if got := hcm.GetTracing().GetProvider().GetName(); got != envoyfilter.TracerZipkin {
		t.Errorf("tracing provider %q", got)
	}

	edited := strings.Replace(doc, "chunkSize: 4096", "chunkSize: 16384", 1)
	putConfig(ctx, t, edited)
	for _, o := range desiredObjects(t, edited) {
		if o.Item() == "gzip" {
			waitEffect(ctx, t, "edited gzip", func(s xds.Snapshot) error { return inEffect(o, s) })
		}
	}

	reduced := strings.Replace(edited, "zstd:\n  enable: true", "zstd:\n  enable: false", 1)
	if reduced == edited {
		t.Fatal("the example document has no enabled zstd section to disable")
	}
	putConfig(ctx, t, reduced)
	for _, o := range desiredObjects(t, edited) {
		if o.Item() == "zstd" {
			waitEffect(ctx, t, "zstd removed", func(s xds.Snapshot) error { return noneInEffect(o, s) })
		}
	}
}

// istioctlMessages runs istioctl validate on file and returns every
// message line that is not the generic EnvoyFilter warning.
func istioctlMessages(ctx context.Context, t *testing.T, file string) []string {
	t.Helper()
	bin, err := harness.Binary(harness.EnvIstioctl)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "validate", "--kubeconfig="+cluster.AdminKubeconfig, "-f", file).CombinedOutput()
	var msgs []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "* ") && !strings.HasPrefix(line, "Error") {
			continue
		}
		if strings.Contains(line, "EnvoyFilter exposes internal implementation details") {
			continue
		}
		msgs = append(msgs, line)
	}
	if err != nil && len(msgs) == 0 {
		msgs = append(msgs, fmt.Sprintf("istioctl failed: %v: %s", err, out))
	}
	return msgs
}

func TestIstioctlValidate(t *testing.T) {
	ctx := setup(t)
	dir := t.TempDir()
	rendered := filepath.Join(dir, "example.yaml")
	out, err := exec.CommandContext(ctx, controlBin, "render", "-f", filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml")).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rendered, out, 0o644); err != nil {
		t.Fatal(err)
	}
	files := append([]string{rendered}, goldenOutputs(t)...)
	checked := 0
	for _, f := range files {
		if info, err := os.Stat(f); err != nil || info.Size() == 0 {
			continue
		}
		if msgs := istioctlMessages(ctx, t, f); len(msgs) > 0 {
			t.Errorf("%s: istioctl validate says:\n%s", f, strings.Join(msgs, "\n"))
		}
		checked++
	}
	// The check itself can fail: Higress's old gzip typo is reported.
	bad := filepath.Join(dir, "check_size.yaml")
	badObj := strings.Replace(string(out), "chunk_size: 4096", "check_size: 4096", 1)
	if err := os.WriteFile(bad, []byte(badObj), 0o644); err != nil {
		t.Fatal(err)
	}
	if msgs := istioctlMessages(ctx, t, bad); len(msgs) == 0 || !strings.Contains(strings.Join(msgs, " "), `unknown field "check_size"`) {
		t.Errorf("istioctl did not report check_size: %v", msgs)
	}
	t.Logf("%d files passed istioctl validate", checked)
}

func TestIstioctlAnalyze(t *testing.T) {
	ctx := setup(t)
	putConfig(ctx, t, exampleDocument(t))
	startController(ctx, t)
	objs := desiredObjects(t, exampleDocument(t))
	for _, o := range objs {
		waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, objs, s) })
	}
	bin, err := harness.Binary(harness.EnvIstioctl)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.CommandContext(ctx, bin, "analyze", "--kubeconfig="+cluster.AdminKubeconfig, "--all-namespaces").CombinedOutput()
	reported := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "(EnvoyFilter "+ns+"/"+envoyfilter.NamePrefix) {
			continue
		}
		reported++
		// Every EnvoyFilter gets this one generic warning; nothing else may
		// be said about ours.
		if !strings.Contains(line, "EnvoyFilter exposes internal implementation details") {
			t.Errorf("istioctl analyze reports on a generated EnvoyFilter: %s", line)
		}
	}
	if reported != len(objs) {
		t.Errorf("istioctl analyze mentioned our EnvoyFilters %d times, want the generic warning once for each of %d; did it analyze them?", reported, len(objs))
	}
	t.Logf("istioctl analyze:\n%s", out)
}
