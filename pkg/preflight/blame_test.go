package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
)

// blameEnvoy is the test tools' Envoy 1.40 (GLOBALCONFIG_ENVOY).
func blameEnvoy(t *testing.T) *envoybin.Binary {
	t.Helper()
	p := os.Getenv("GLOBALCONFIG_ENVOY")
	if p == "" {
		t.Skip("GLOBALCONFIG_ENVOY is not set: run `make test-one PKG=./pkg/preflight RUN=TestBlame`, which installs Envoy and sets it")
	}
	b, err := envoybin.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proxyOf is a gateway of the Istio release whose Envoy bin is.
func proxyOf(t *testing.T, bin *envoybin.Binary) Proxy {
	t.Helper()
	v, err := envoyfilter.ParseVersion(bin.Version)
	if err != nil {
		t.Fatal(err)
	}
	return Proxy{Name: "gw-0.istio-system", Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"},
		Type: "router", IstioVersion: envoyfilter.IstioForEnvoy(v).String() + ".0"}
}

// httpFilterEF is an EnvoyFilter of one HTTP filter patch: op on the
// connection manager's filters, against the HTTP filter anchor ("" for
// none).
func httpFilterEF(t *testing.T, ns, name string, priority int32, op networking.EnvoyFilter_Patch_Operation, anchor string, f *hcmv3.HttpFilter) Filter {
	t.Helper()
	st, err := envoyfilter.ToStruct(f)
	if err != nil {
		t.Fatal(err)
	}
	m := hcmMatch()
	if anchor != "" {
		m.GetListener().GetFilterChain().GetFilter().SubFilter = &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: anchor}
	}
	return Filter{Namespace: ns, Name: name, Spec: &networking.EnvoyFilter{
		Priority: priority,
		ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_HTTP_FILTER, Match: m,
			Patch: &networking.EnvoyFilter_Patch{Operation: op, Value: st},
		}},
	}}
}

func typed(t *testing.T, name string, m proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, m)}}
}

// localRateLimitEF is globalconfig's localRateLimit: a local_ratelimit
// filter first in the chain.
func localRateLimitEF(t *testing.T) Filter {
	f := httpFilterEF(t, "istio-system", "globalconfig-local-rate-limit", 45, networking.EnvoyFilter_Patch_INSERT_FIRST, "",
		typed(t, envoyfilter.LocalRateLimit, &localratelimitv3.LocalRateLimit{StatPrefix: "http_local_rate_limiter",
			TokenBucket: &typev3.TokenBucket{MaxTokens: 100, TokensPerFill: wrapperspb.UInt32(100), FillInterval: durationpb.New(time.Second)}}))
	f.Item = "localRateLimit"
	return f
}

// anchoredHealthCheck is a user's health check inserted after
// globalconfig's local_ratelimit filter, with cache_time while
// pass_through_mode is false, which Envoy refuses.
func anchoredHealthCheck(t *testing.T) Filter {
	return httpFilterEF(t, "istio-system", "user-anchored-healthcheck", 100, networking.EnvoyFilter_Patch_INSERT_AFTER, envoyfilter.LocalRateLimit,
		typed(t, "envoy.filters.http.health_check", &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(time.Second)}))
}

// userBuffer is a user's buffer filter Envoy accepts.
func userBuffer(t *testing.T, name string, max uint32) Filter {
	return httpFilterEF(t, "istio-system", name, 100, networking.EnvoyFilter_Patch_INSERT_FIRST, "",
		typed(t, "envoy.filters.http.buffer", &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(max)}))
}

// blameInput is the gateway's config with live and others applied, as
// istiod builds it.
func blameInput(t *testing.T, px Proxy, live, others []Filter) Input {
	t.Helper()
	ps, _, err := Select(px, "istio-system", append(append([]Filter{}, live...), others...))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := Apply(gateway(t), Kind{}, nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	return Input{Current: cur, Proxy: px, RootNamespace: "istio-system", Live: live, Others: others}
}

func faultNames(b *Blame) []string {
	var out []string
	for _, f := range b.Faults {
		out = append(out, f.String())
	}
	return out
}

// A user's filter anchored on ours, which Envoy refuses, is blamed as the
// combination of the two: the user's alone inserts nothing (istiod skips
// an insert whose anchor is absent), ours alone loads. The user's other
// filters are not named.
func TestBlameCombination(t *testing.T) {
	bin := blameEnvoy(t)
	px := proxyOf(t, bin)
	in := blameInput(t, px, []Filter{localRateLimitEF(t)},
		[]Filter{userBuffer(t, "user-buffer-a", 1024), anchoredHealthCheck(t), userBuffer(t, "user-buffer-b", 2048)})
	b, err := BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	if b.Outcome != Blamed {
		t.Fatalf("outcome %s (%s), want Blamed", b.Outcome, b.Rejected)
	}
	want := "the combination of istio-system/user-anchored-healthcheck (not managed by globalconfig) and globalconfig's localRateLimit (istio-system/globalconfig-local-rate-limit)"
	if got := faultNames(b); len(got) != 1 || got[0] != want {
		t.Fatalf("faults %q, want [%q]", got, want)
	}
	if !strings.Contains(b.Faults[0].Message, "cache_time_ms must not be set when path_through_mode is disabled") {
		t.Errorf("the fault's message is %q, want Envoy's refusal of the health check", b.Faults[0].Message)
	}
	if !b.Ours() {
		t.Error("Ours() is false for a combination with globalconfig's localRateLimit")
	}
	if b.Filters != 4 || b.Runs < 3 || b.Runs > MaxBlameRuns {
		t.Errorf("filters %d, runs %d: want 4 filters and 3 to %d runs", b.Filters, b.Runs, MaxBlameRuns)
	}
	t.Logf("%d filters, %d Envoy runs, %s", b.Filters, b.Runs, b.Elapsed)
}

// A user's filter Envoy refuses on its own is blamed alone, not ours, and
// two independent faults are both found.
func TestBlameOthersOnly(t *testing.T) {
	bin := blameEnvoy(t)
	px := proxyOf(t, bin)
	broken := httpFilterEF(t, "istio-system", "user-broken-healthcheck", 100, networking.EnvoyFilter_Patch_INSERT_FIRST, "",
		typed(t, "envoy.filters.http.health_check", &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(time.Second)}))
	in := blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{userBuffer(t, "user-buffer-a", 1024), broken})
	b, err := BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := faultNames(b); b.Outcome != Blamed || len(got) != 1 || got[0] != "istio-system/user-broken-healthcheck (not managed by globalconfig)" {
		t.Fatalf("outcome %s, faults %q: want only the user's broken health check", b.Outcome, got)
	}
	if b.Ours() {
		t.Error("Ours() is true, but no fault names globalconfig's EnvoyFilter")
	}

	// A second broken filter makes a second fault.
	broken2 := broken
	broken2.Name = "user-broken-healthcheck-2"
	in = blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{broken, userBuffer(t, "user-buffer-a", 1024), broken2})
	b, err = BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	// istiod orders equal priorities by NAME.NAMESPACE:
	// "user-broken-healthcheck-2.istio-system" sorts first ('-' < '.').
	got := faultNames(b)
	if len(got) != 2 || got[0] != "istio-system/user-broken-healthcheck-2 (not managed by globalconfig)" || got[1] != "istio-system/user-broken-healthcheck (not managed by globalconfig)" {
		t.Fatalf("faults %q, want the two broken health checks in istiod's order", got)
	}
}

// A config Envoy accepts blames nothing; one Envoy refuses without any
// EnvoyFilter is BaseRejected.
func TestBlameNotReproducedAndBaseRejected(t *testing.T) {
	bin := blameEnvoy(t)
	px := proxyOf(t, bin)
	in := blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{userBuffer(t, "user-buffer-a", 1024)})
	b, err := BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	if b.Outcome != NotReproduced || len(b.Faults) != 0 || b.Runs != 1 {
		t.Fatalf("outcome %s, faults %v, runs %d: want NotReproduced after one run", b.Outcome, b.Faults, b.Runs)
	}

	// The listener's address is none, with or without EnvoyFilters.
	in = blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{anchoredHealthCheck(t)})
	in.Current.Listeners[0].Address.GetSocketAddress().Address = "not-an-address"
	b, err = BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	if b.Outcome != BaseRejected || len(b.Faults) != 0 || b.Rejected == "" {
		t.Fatalf("outcome %s, faults %v, rejected %q: want BaseRejected with Envoy's message", b.Outcome, b.Faults, b.Rejected)
	}
}

// A binary of another release, and a proxy of an unknown release, give a
// *ReleaseError that says both releases, never a blame.
func TestBlameRelease(t *testing.T) {
	bin := &envoybin.Binary{Path: "/opt/envoy-1.40", Version: "1.40.0"}
	for _, tc := range []struct {
		istio string
		want  []string
	}{
		{"1.31.2", []string{"Istio 1.31.2", "Envoy 1.39", "/opt/envoy-1.40 is Envoy 1.40.0", "give an Envoy 1.39 binary"}},
		{"", []string{"does not know its Istio version"}},
		{"1.40.0", []string{"outside the releases globalconfig knows"}},
		{"1.20.1", []string{"outside the releases globalconfig knows"}},
	} {
		px := Proxy{Name: "gw-0.istio-system", Type: "router", IstioVersion: tc.istio}
		_, err := BlameConfig(context.Background(), bin, Input{Current: gateway(t), Proxy: px})
		var re *ReleaseError
		if !errors.As(err, &re) {
			t.Fatalf("Istio %q: err %v, want a *ReleaseError", tc.istio, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Istio %q: %q does not say %q", tc.istio, err, w)
			}
		}
	}
	for _, ok := range []string{"1.32.0", "1.32-dev"} {
		if err := CheckRelease(bin, Proxy{IstioVersion: ok}); err != nil {
			t.Errorf("Istio %s with Envoy 1.40: %v", ok, err)
		}
	}
	if err := CheckRelease(&envoybin.Binary{Version: "1.39.3"}, Proxy{IstioVersion: "1.31.0"}); err != nil {
		t.Errorf("Istio 1.31 with Envoy 1.39.3: %v", err)
	}
}

// A MERGE whose field the base can't recover (a listener's address, set
// by a user's EnvoyFilter that moves it) leaves a base Envoy refuses; the
// blame then keeps what the MERGEs set in the base, says so, and still
// finds the combination.
func TestBlameKeepsUnrecoverableMerges(t *testing.T) {
	bin := blameEnvoy(t)
	px := proxyOf(t, bin)
	st, err := envoyfilter.ToStruct(&listenerv3.Listener{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.11", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}})
	if err != nil {
		t.Fatal(err)
	}
	move := Filter{Namespace: "istio-system", Name: "user-loopback", Spec: &networking.EnvoyFilter{
		Priority: -1000,
		ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
			ApplyTo: networking.EnvoyFilter_LISTENER,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{
				Listener: &networking.EnvoyFilter_ListenerMatch{PortNumber: 8080}}},
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: st},
		}},
	}}
	in := blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{move, anchoredHealthCheck(t)})
	b, err := BlameConfig(context.Background(), bin, in)
	if err != nil {
		t.Fatal(err)
	}
	want := "the combination of istio-system/user-anchored-healthcheck (not managed by globalconfig) and globalconfig's localRateLimit (istio-system/globalconfig-local-rate-limit)"
	if got := faultNames(b); b.Outcome != Blamed || len(got) != 1 || got[0] != want {
		t.Fatalf("outcome %s (%s), faults %q: want [%q]", b.Outcome, b.Rejected, got, want)
	}
	kept := false
	for _, s := range b.Inexact {
		kept = kept || strings.Contains(s, "the base keeps what these MERGEs set and the search never takes them out: istio-system/user-loopback")
	}
	if !kept {
		t.Errorf("Inexact does not say the user's listener MERGE is kept: %q", b.Inexact)
	}
	t.Logf("%d runs; inexact %q", b.Runs, b.Inexact)
}

// The search stops at its bound of Envoy runs with a *BoundError that
// says so and names the faults found before it, never a partial blame.
func TestBlameBound(t *testing.T) {
	bin := blameEnvoy(t)
	px := proxyOf(t, bin)
	broken := func(name string) Filter {
		return httpFilterEF(t, "istio-system", name, 100, networking.EnvoyFilter_Patch_INSERT_FIRST, "",
			typed(t, "envoy.filters.http.health_check", &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(time.Second)}))
	}
	in := blameInput(t, px, []Filter{localRateLimitEF(t)}, []Filter{broken("user-broken-a"), userBuffer(t, "user-buffer", 1024), broken("user-broken-b")})
	full, err := BlameConfig(context.Background(), bin, in)
	if err != nil || len(full.Faults) != 2 {
		t.Fatalf("unbounded: %v, %+v: want 2 faults", err, full)
	}
	// A bound below what the search needs stops it, with no blame.
	named := false
	for _, bound := range []int{1, full.Runs / 2, full.Runs - 1} {
		b, err := blameWithin(context.Background(), bin, in, bound)
		var be *BoundError
		if !errors.As(err, &be) || b != nil {
			t.Fatalf("with %d runs: %v, %+v: want a *BoundError and no blame", bound, err, b)
		}
		if be.Runs != bound || !strings.Contains(err.Error(), "Envoy ran "+fmt.Sprint(bound)+" times, the bound") {
			t.Errorf("with %d runs: %v", bound, err)
		}
		named = named || strings.Contains(err.Error(), "found so far: istio-system/user-broken-")
	}
	if !named {
		t.Error("no bound error names the faults found before it")
	}
}
