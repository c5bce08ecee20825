package proxy

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/test/harness"
)

// newerOnly is a hand-written EnvoyFilter, not version-scoped, that uses a
// field only Envoy 1.40's API has: the compressor's content_type_matcher.
func newerOnly(t testing.TB) *envoyfilter.Object {
	t.Helper()
	lib, err := anypb.New(&gzipv3.Gzip{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.compressor", &compressorv3.Compressor{
		CompressorLibrary: &corev3.TypedExtensionConfig{Name: "gzip", TypedConfig: lib},
		ResponseDirectionConfig: &compressorv3.Compressor_ResponseDirectionConfig{CommonConfig: &compressorv3.Compressor_CommonDirectionConfig{
			ContentTypeMatcher: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "text/"}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return handWritten(t, "hand-written-compressor", "", p)
}

// handWritten is a user's own EnvoyFilter beside globalconfig's, for the
// gateways whose Istio version matches proxyVersion ("" for all).
func handWritten(t testing.TB, name, proxyVersion string, p envoyfilter.Patch) *envoyfilter.Object {
	t.Helper()
	target := envoyfilter.DefaultTarget()
	target.ProxyVersion = proxyVersion
	o, err := envoyfilter.NewObject(name, envoyfilter.Placement{Priority: 10, Insert: envoyfilter.StageCompression.Insert}, target, []envoyfilter.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	o.Metadata.Name = name
	o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": name}
	return o
}

// rejectedAtLoad is a hand-written EnvoyFilter for the oldest gateway's
// Istio version that every proto rule accepts and Envoy refuses when it
// builds the filter: a health check's cache_time without pass_through_mode.
func rejectedAtLoad(t testing.TB) *envoyfilter.Object {
	t.Helper()
	return handWritten(t, "hand-written-health-check", "^"+regexp.QuoteMeta(oldest.IstioVersion)+"$", healthCheckPatch(t))
}

// healthCheckPatch inserts a health check filter with cache_time and
// pass_through_mode off: every proto rule accepts it, Envoy refuses it.
func healthCheckPatch(t testing.TB) envoyfilter.Patch {
	t.Helper()
	p, err := harness.HealthCheckPatch()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A configuration the proto rules accept and Envoy refuses at load is
// NACKed by the gateway it reaches, with Envoy's own message; that gateway
// keeps serving what it had, and the other is untouched.
func TestRejectedAtLoadIsNACKed(t *testing.T) {
	ctx := setup(t)
	o := rejectedAtLoad(t)
	got := applyAll(ctx, t, []*envoyfilter.Object{o})
	t.Cleanup(func() { deleteObject(context.Background(), t, o) })
	for _, l := range got {
		switch l.gw {
		case newest:
			if l.nacked {
				t.Errorf("Envoy %s rejected a change that was not for it: %s", l.gw.Binary.Version, l.message)
			}
		case oldest:
			if !l.nacked {
				t.Fatalf("Envoy %s took a health check with cache_time and no pass_through_mode", l.gw.Binary.Version)
			}
			if !strings.Contains(l.message, "cache_time_ms must not be set") {
				t.Errorf("Envoy %s's message does not say why: %s", l.gw.Binary.Version, l.message)
			}
			t.Logf("Envoy %s: %s", l.gw.Binary.Version, l.message)
		}
	}
	r, err := get(ctx, oldest.url("/echo"), nil)
	if err != nil || r.status != 200 {
		t.Fatalf("the gateway that refused the change stopped serving: %v %+v", err, r)
	}
}

// A field newer than istiod's own Envoy API (our istiod is built with
// go-control-plane v1.39.0) never reaches a proxy: istiod decodes the patch
// with its API and drops the field, and every Envoy, 1.40 included, loads
// the filter without it. A field only a newer istiod knows is therefore
// the newer istiod's to send: globalconfig emits content_type_matcher only
// for the Istio release that ships Envoy 1.40, whose istiod has that API.
func TestFieldNewerThanIstiodIsDropped(t *testing.T) {
	ctx := setup(t)
	o := newerOnly(t)
	mustACK(ctx, t, []*envoyfilter.Object{o})
	t.Cleanup(func() { deleteObject(context.Background(), t, o) })
	for _, g := range gateways {
		body, err := g.Get(ctx, "/config_dump?resource=dynamic_listeners")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), "envoy.extensions.filters.http.compressor.v3.Compressor") {
			t.Fatalf("gateway %s did not get the compressor", g.name)
		}
		if strings.Contains(string(body), "content_type_matcher") {
			t.Errorf("gateway %s (Envoy %s) got content_type_matcher through istiod: istiod now knows Envoy 1.40's API; revisit envoyfilter.Releases", g.name, g.Binary.Version)
		}
	}
}

func deleteObject(ctx context.Context, t testing.TB, o *envoyfilter.Object) {
	err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(o.Metadata.Namespace).Delete(ctx, o.Metadata.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// rolloutBound is how long the status may take to show a proxy's answer:
// istiod's debounce, the tracker's 1 s poll and one status write.
const rolloutBound = 20 * time.Second

// The controller's rollout status, read from istiod, shows what the real
// Envoys did: both Synced on a set they load; then, with a hand-written
// EnvoyFilter beside ours that Envoy refuses at load (for the older
// gateway's version), the older
// gateway NACKed with Envoy's own message, a Warning Event, the metric,
// and `globalconfig status` showing it; an istiod that doesn't answer is
// reported unreachable.
func TestRolloutShowsRealNACK(t *testing.T) {
	ctx := setup(t)
	_, port, err := net.SplitHostPort(istiod.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	newName, oldName := "gw-"+newest.name+"."+ns, "gw-"+oldest.name+"."+ns
	prune(ctx, t, nil)
	putConfig(ctx, t, "downstream:\n  idleTimeout: 180\n")
	ctl := startController(ctx, t, "--istiod-debug-url=http://127.0.0.1:"+port+",http://127.0.0.2:"+port, "--rollout-timeout=15s")
	first := waitRollout(ctx, t, "both gateways take the first set", func(st *rollout.Status) bool {
		return st.Proxy(newName).State == rollout.Synced && st.Proxy(oldName).State == rollout.Synced
	})

	user := rejectedAtLoad(t)
	if err := cluster.Apply(ctx, user); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteObject(context.Background(), t, user) })
	start := time.Now()
	putConfig(ctx, t, "downstream:\n  idleTimeout: 120\n")
	st := waitRollout(ctx, t, "the newer Envoy ACKs, the older NACKs", func(st *rollout.Status) bool {
		return st.Version != first.Version && st.Proxy(newName).State == rollout.Synced && st.Proxy(oldName).State == rollout.NACKed
	})
	t.Logf("the NACK showed in the status %v after the edit", time.Since(start).Round(time.Millisecond))
	nacked := st.Proxy(oldName)
	if !strings.Contains(nacked.Message, "cache_time_ms must not be set") || nacked.Type != "gateway" || nacked.IstioVersion != oldest.IstioVersion {
		t.Errorf("the NACKed proxy should carry Envoy's message: %+v", nacked)
	}
	t.Logf("Envoy %s's NACK as the status shows it: %s", oldest.Binary.Version, nacked.Message)
	var unreachable []string
	for _, i := range st.Unreachable() {
		unreachable = append(unreachable, i.Address)
	}
	if strings.Join(unreachable, ",") != "http://127.0.0.2:"+port || len(st.Istiod) != 2 {
		t.Errorf("istiod instances %+v: want 127.0.0.2 reported unreachable", st.Istiod)
	}
	if !harness.Eventually(ctx, rolloutBound, func() bool {
		return hasEvent(ctx, "ProxyRejected", oldName, "cache_time_ms") && hasEvent(ctx, "IstiodUnreachable", "127.0.0.2", "")
	}) {
		t.Errorf("no ProxyRejected event for %s and IstiodUnreachable for 127.0.0.2", oldName)
	}
	var out, errs bytes.Buffer
	if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, cli.Env{Stdout: &out, Stderr: &errs}); code != cli.ExitOK {
		t.Fatalf("globalconfig status: exit %d: %s", code, errs.String())
	}
	t.Logf("$ globalconfig status\n%s", out.String())
	for _, want := range []string{"NACKed", oldName, "cache_time_ms must not be set", "istiod http://127.0.0.2:" + port + " unreachable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("globalconfig status lacks %q", want)
		}
	}
	m, err := ctl.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m[`globalconfig_rollout_proxies{state="NACKed"}`] < 1 || m["globalconfig_rollout_istiod_unreachable"] != 1 {
		t.Errorf("metrics: nacked %v, istiod unreachable %v", m[`globalconfig_rollout_proxies{state="NACKed"}`], m["globalconfig_rollout_istiod_unreachable"])
	}
}

// putConfig creates or updates the global ConfigMap.
func putConfig(ctx context.Context, t testing.TB, doc string) {
	t.Helper()
	if err := cluster.PutConfig(ctx, doc); err != nil {
		t.Fatal(err)
	}
}

// startController runs the controller until the test ends and removes
// what it made.
func startController(_ context.Context, t testing.TB, args ...string) *harness.Controller {
	t.Helper()
	return cluster.RunController(t, controlBn, args...)
}

// waitRollout waits until the status ConfigMap's rollout satisfies cond.
func waitRollout(ctx context.Context, t *testing.T, what string, cond func(*rollout.Status) bool) *rollout.Status {
	t.Helper()
	st, err := cluster.WaitRollout(ctx, rolloutBound, cond)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return st
}

// hasEvent reports whether the global ConfigMap has a Warning Event with
// reason whose message contains both parts.
func hasEvent(ctx context.Context, reason, part1, part2 string) bool {
	list, err := cluster.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Reason == reason && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "global-config" &&
			strings.Contains(e.Message, part1) && strings.Contains(e.Message, part2) {
			return true
		}
	}
	return false
}
