package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
)

// blameLimitDoc turns on localRateLimit alone.
const blameLimitDoc = "localRateLimit:\n  maxTokens: 1000\n  tokensPerFill: 1000\n  fillInterval: 1s\n"

// refusedHealthCheck is a health check filter Envoy refuses at load:
// cache_time set while pass_through_mode is false.
func refusedHealthCheck(t testing.TB) envoyfilter.Patch {
	t.Helper()
	p, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.health_check",
		&healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// userAnchoredHealthCheck is a team's own EnvoyFilter (priority 100) that
// inserts refusedHealthCheck's filter after globalconfig's local_ratelimit
// filter: it inserts nothing while localRateLimit is off.
func userAnchoredHealthCheck(t testing.TB) *envoyfilter.Object {
	t.Helper()
	o, err := envoyfilter.NewObject("user-anchored-healthcheck", envoyfilter.Placement{Priority: 100, Insert: envoyfilter.Position{
		Operation: networking.EnvoyFilter_Patch_INSERT_AFTER, Anchor: envoyfilter.LocalRateLimit}},
		envoyfilter.DefaultTarget(), []envoyfilter.Patch{refusedHealthCheck(t)})
	if err != nil {
		t.Fatal(err)
	}
	o.Metadata.Name = "user-anchored-healthcheck"
	o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "user-anchored-healthcheck"}
	return o
}

// userBrokenHealthCheck is a team's EnvoyFilter that Envoy refuses on its
// own: the same filter first in the chain, anchored on nothing.
func userBrokenHealthCheck(t testing.TB) *envoyfilter.Object {
	t.Helper()
	o := handWritten(t, "user-broken-healthcheck", "", refusedHealthCheck(t))
	o.Spec.Priority = 100
	return o
}

// mustNACK applies objs as globalconfig's set, with the user's
// EnvoyFilters already in the cluster, and requires every gateway to
// refuse the push.
func mustNACK(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	for _, l := range applyAll(ctx, t, objs) {
		if !l.nacked {
			t.Fatalf("gateway %s (Envoy %s) loaded a config with the refused health check", l.gw.name, l.gw.Binary.Version)
		}
		if !strings.Contains(l.message, "cache_time_ms must not be set") {
			t.Fatalf("gateway %s (Envoy %s) refused it for another reason: %s", l.gw.name, l.gw.Binary.Version, l.message)
		}
	}
}

// explainRun is `globalconfig explain` for g with the binary at envoy.
func explainRun(g *gw, envoy string, more ...string) (int, string, string) {
	return runCLI(append([]string{"explain", "--proxy", g.proxyName(), "--istiod-debug-url", istiodURL(), "--envoy", envoy}, more...)...)
}

// The case, at real gateways of Envoy 1.40 and 1.39 that NACK
// every push: a team's EnvoyFilter inserts a health check Envoy refuses
// after globalconfig's local_ratelimit filter. `globalconfig explain`,
// run with each gateway's own Envoy release, names the combination of the
// user's EnvoyFilter (not globalconfig's) and localRateLimit, with Envoy's
// words, and exits 15 (ours is in it); -o json says the same. Then a
// user's EnvoyFilter Envoy refuses on its own, beside an unrelated
// globalconfig item, is named alone (exit 16). Faults give their error
// and code, never a blame: a proxy istiod does not have, an istiod that
// does not answer, a missing Envoy binary, and each gateway's proxy
// given the other release's Envoy.
func TestExplainNamesTheCulprit(t *testing.T) {
	ctx := setup(t)
	limit := rendered(t, blameLimitDoc)
	var ours string
	for _, o := range limit {
		if o.Item() == "localRateLimit" {
			ours = o.Metadata.Namespace + "/" + o.Metadata.Name
		}
	}
	if ours == "" {
		t.Fatalf("the document renders no localRateLimit EnvoyFilter: %v", limit)
	}
	anchored := userAnchoredHealthCheck(t)
	broken := userBrokenHealthCheck(t)
	t.Cleanup(func() {
		deleteObject(context.Background(), t, anchored)
		deleteObject(context.Background(), t, broken)
		applyAll(context.Background(), t, nil)
	})
	mustACK(ctx, t, limit)
	if err := cluster.Apply(ctx, anchored); err != nil {
		t.Fatal(err)
	}
	mustNACK(ctx, t, limit)

	combination := "the combination of istio-system/user-anchored-healthcheck (not managed by globalconfig) and globalconfig's localRateLimit (" + ours + "): Envoy says: "
	for _, g := range gateways {
		start := time.Now()
		code, out, errs := explainRun(g, g.Binary.Path)
		if code != cli.ExitBlamedOurs || !strings.Contains(out, combination) || !strings.Contains(out, "cache_time_ms must not be set when path_through_mode is disabled") ||
			!strings.Contains(out, "taking either of them out makes the config load") {
			t.Errorf("Envoy %s: exit %d, want %d naming %q\n%s\n%s", g.Binary.Version, code, cli.ExitBlamedOurs, combination, out, errs)
		}
		t.Logf("$ globalconfig explain --proxy %s --envoy envoy-%s   (%s)\n%s", g.proxyName(), g.Binary.Version, time.Since(start).Round(time.Millisecond), out)

		code, js, errs := explainRun(g, g.Binary.Path, "-o", "json")
		var rep struct {
			Outcome string
			Envoy   string
			Faults  []struct {
				Filters []struct {
					Namespace, Name, Item string
					Managed               bool `json:"managedByGlobalconfig"`
				}
				Message string
			}
		}
		if err := json.Unmarshal([]byte(js), &rep); err != nil || code != cli.ExitBlamedOurs || rep.Outcome != "Blamed" || rep.Envoy != g.Binary.Version || len(rep.Faults) != 1 {
			t.Fatalf("Envoy %s -o json: exit %d, %v: %+v\n%s\n%s", g.Binary.Version, code, err, rep, js, errs)
		}
		f := rep.Faults[0].Filters
		if len(f) != 2 || f[0].Name != "user-anchored-healthcheck" || f[0].Managed || f[1].Item != "localRateLimit" || !f[1].Managed {
			t.Errorf("Envoy %s -o json: culprits %+v, want the user's (not managed) and localRateLimit", g.Binary.Version, f)
		}
	}

	// Faults: each a clear error and its code, nothing on stdout.
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no such proxy", []string{"explain", "--proxy", "nosuch.istio-system", "--istiod-debug-url", istiodURL(), "--envoy", newest.Binary.Path}, cli.ExitNoProxy, "no istiod has a proxy nosuch.istio-system connected"},
		{"istiod unreachable", []string{"explain", "--proxy", newest.proxyName(), "--istiod-debug-url", "http://127.0.0.1:1", "--envoy", newest.Binary.Path}, cli.ExitIstiod, "no istiod could be asked"},
		{"Envoy binary missing", []string{"explain", "--proxy", newest.proxyName(), "--istiod-debug-url", istiodURL(), "--envoy", t.TempDir() + "/envoy"}, cli.ExitNotEnvoy, "does not exist"},
		{"Envoy " + oldest.Binary.Minor() + " for an Envoy " + newest.Binary.Minor() + " proxy", []string{"explain", "--proxy", newest.proxyName(), "--istiod-debug-url", istiodURL(), "--envoy", oldest.Binary.Path}, cli.ExitEnvoyRelease,
			"whose proxies are built on Envoy " + newest.Binary.Minor() + ", but the Envoy binary " + oldest.Binary.Path + " is Envoy " + oldest.Binary.Version},
		{"Envoy " + newest.Binary.Minor() + " for an Envoy " + oldest.Binary.Minor() + " proxy", []string{"explain", "--proxy", oldest.proxyName(), "--istiod-debug-url", istiodURL(), "--envoy", newest.Binary.Path}, cli.ExitEnvoyRelease,
			"give an Envoy " + oldest.Binary.Minor() + " binary"},
	} {
		code, out, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want %d and %q, no blame", c.name, code, errs, out, c.code, c.want)
		}
	}

	// A user's EnvoyFilter refused on its own, while globalconfig's set
	// changes something unrelated (gzip beside localRateLimit).
	deleteObject(ctx, t, anchored)
	mustACK(ctx, t, limit)
	if err := cluster.Apply(ctx, broken); err != nil {
		t.Fatal(err)
	}
	mustNACK(ctx, t, rendered(t, blameLimitDoc+"gzip:\n  minContentLength: 2048\n"))
	for _, g := range gateways {
		code, out, errs := explainRun(g, g.Binary.Path)
		if code != cli.ExitBlamedOthers || !strings.Contains(out, "  istio-system/user-broken-healthcheck (not managed by globalconfig): Envoy says: ") ||
			strings.Contains(out, "\n  globalconfig's ") || strings.Contains(out, " and globalconfig's ") || !strings.Contains(out, "rolling globalconfig back would not help") {
			t.Errorf("Envoy %s: exit %d, want %d naming only the user's EnvoyFilter\n%s\n%s", g.Binary.Version, code, cli.ExitBlamedOthers, out, errs)
		}
		if g == newest {
			t.Logf("$ globalconfig explain --proxy %s --envoy envoy-%s\n%s", g.proxyName(), g.Binary.Version, out)
		}
	}
}
