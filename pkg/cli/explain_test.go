package cli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/preflight"
)

const explainProxy = "gw-0.istio-system"

func mustAnyT(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func httpFilter(t *testing.T, name string, m proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAnyT(t, m)}}
}

// explainEF is an EnvoyFilter of one HTTP filter patch on every
// connection manager, placed by op against anchor ("" for none); item
// "" is a user's.
func explainEF(t *testing.T, name, item string, priority int32, op networking.EnvoyFilter_Patch_Operation, anchor string, f *hcmv3.HttpFilter) *clientnetworking.EnvoyFilter {
	t.Helper()
	st, err := envoyfilter.ToStruct(f)
	if err != nil {
		t.Fatal(err)
	}
	fm := &networking.EnvoyFilter_ListenerMatch_FilterMatch{Name: "envoy.filters.network.http_connection_manager"}
	if anchor != "" {
		fm.SubFilter = &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: anchor}
	}
	ef := &clientnetworking.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-system"}}
	if item != "" {
		ef.Labels = map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue, envoyfilter.LabelItem: item}
	}
	ef.Spec.Priority = priority
	ef.Spec.ConfigPatches = []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
		ApplyTo: networking.EnvoyFilter_HTTP_FILTER,
		Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: networking.EnvoyFilter_GATEWAY,
			ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networking.EnvoyFilter_ListenerMatch{
				FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: fm}}}},
		Patch: &networking.EnvoyFilter_Patch{Operation: op, Value: st},
	}}
	return ef
}

// explainCase is globalconfig's localRateLimit and, when anchored, a
// user's health check inserted after its filter with a setting Envoy
// refuses; the dump is the gateway's config with both applied, as
// istiod builds it.
func explainCase(t *testing.T, anchored bool) ([]*clientnetworking.EnvoyFilter, []byte) {
	t.Helper()
	efs := []*clientnetworking.EnvoyFilter{
		explainEF(t, "globalconfig-local-rate-limit", "localRateLimit", 45, networking.EnvoyFilter_Patch_INSERT_FIRST, "",
			httpFilter(t, envoyfilter.LocalRateLimit, &localratelimitv3.LocalRateLimit{StatPrefix: "http_local_rate_limiter",
				TokenBucket: &typev3.TokenBucket{MaxTokens: 100, TokensPerFill: wrapperspb.UInt32(100), FillInterval: durationpb.New(time.Second)}})),
	}
	if anchored {
		efs = append(efs, explainEF(t, "user-anchored-healthcheck", "", 100, networking.EnvoyFilter_Patch_INSERT_AFTER, envoyfilter.LocalRateLimit,
			httpFilter(t, "envoy.filters.http.health_check", &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(time.Second)})))
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "outbound_0.0.0.0_8080",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "http.8080",
			VirtualHosts: []*routev3.VirtualHost{{Name: "*:8080", Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 200}}}}}}}},
		HttpFilters: []*hcmv3.HttpFilter{httpFilter(t, "envoy.filters.http.router", &routerv3.Router{})},
	}
	base := &preflight.Config{Listeners: []*listenerv3.Listener{{
		Name: "0.0.0.0_8080",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAnyT(t, hcm)},
		}}}},
	}}}
	var fs []preflight.Filter
	for _, ef := range efs {
		fs = append(fs, preflight.Filter{Namespace: ef.Namespace, Name: ef.Name, Spec: &ef.Spec})
	}
	px := preflight.Proxy{Name: explainProxy, Namespace: "istio-system", Type: "router"}
	ps, _, err := preflight.Select(px, "istio-system", fs)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := preflight.Apply(base, preflight.Kind{}, nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	ld := &adminv3.ListenersConfigDump{}
	for _, l := range cur.Listeners {
		ld.DynamicListeners = append(ld.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{Name: l.GetName(),
			ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{Listener: mustAnyT(t, l)}})
	}
	js, err := protojson.Marshal(ld)
	if err != nil {
		t.Fatal(err)
	}
	return efs, []byte(`{"configs":[` + strings.Replace(string(js), "{", `{"@type":"type.googleapis.com/envoy.admin.v3.ListenersConfigDump",`, 1) + `]}`)
}

// fakeIstiod answers /debug/adsz, /debug/syncz and /debug/config_dump
// for one gateway of Istio istioVersion whose config is dump.
func fakeIstiod(t *testing.T, istioVersion string, dump []byte) string {
	t.Helper()
	id := "router~10.1.1.1~" + explainProxy + "~istio-system.svc.cluster.local"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/adsz":
			_ = json.NewEncoder(w).Encode(map[string]any{"clients": []any{map[string]any{"connectionId": id + "-1",
				"metadata": map[string]any{"LABELS": map[string]string{"istio": "ingressgateway"}}}}})
		case "/debug/syncz":
			_ = json.NewEncoder(w).Encode([]any{map[string]any{"proxy": id, "proxy_type": "router", "istio_version": istioVersion}})
		case "/debug/config_dump":
			_, _ = w.Write(dump)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func explainEnvoy(t *testing.T) (path, istio string) {
	t.Helper()
	p, v := os.Getenv("GLOBALCONFIG_ENVOY"), os.Getenv("GLOBALCONFIG_ENVOY_VERSION")
	if p == "" || v == "" {
		t.Skip("GLOBALCONFIG_ENVOY is not set: run `make test-one PKG=./pkg/cli RUN=TestExplain`, which installs Envoy and sets it")
	}
	ev, err := envoyfilter.ParseVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	return p, envoyfilter.IstioForEnvoy(ev).String() + ".0"
}

func explainIn(t *testing.T, efs []*clientnetworking.EnvoyFilter, args ...string) (int, string, string) {
	t.Helper()
	var objs []runtime.Object
	for _, ef := range efs {
		objs = append(objs, ef)
	}
	c := &cluster{kube: fake.NewClientset(), istio: istiofake.NewSimpleClientset(objs...)}
	var out, errb bytes.Buffer
	code := cli.Main(append([]string{"explain"}, args...), cli.Env{Stdout: &out, Stderr: &errb, Clients: c.clients})
	return code, out.String(), errb.String()
}

// explain names the combination of a user's EnvoyFilter anchored on
// globalconfig's filter and that item, with Envoy's words, what to do,
// and exit 15; -o json carries the same.
func TestExplainCombination(t *testing.T) {
	envoy, istio := explainEnvoy(t)
	efs, dump := explainCase(t, true)
	url := fakeIstiod(t, istio, dump)
	code, out, errs := explainIn(t, efs, "--proxy", explainProxy, "--envoy", envoy, "--istiod-debug-url", url)
	want := "  the combination of istio-system/user-anchored-healthcheck (not managed by globalconfig) and globalconfig's localRateLimit (istio-system/globalconfig-local-rate-limit): Envoy says: "
	if code != cli.ExitBlamedOurs || !strings.Contains(out, want) || !strings.Contains(out, "cache_time_ms must not be set when path_through_mode is disabled") ||
		!strings.Contains(out, "only together: taking either of them out makes the config load") {
		t.Errorf("exit %d, want %d, naming the combination:\n%s\n%s", code, cli.ExitBlamedOurs, out, errs)
	}
	t.Logf("$ globalconfig explain --proxy %s --envoy ...\n%s", explainProxy, out)

	code, js, errs := explainIn(t, efs, "--proxy", explainProxy, "--envoy", envoy, "--istiod-debug-url", url, "-o", "json")
	var rep struct {
		Outcome string
		Faults  []struct {
			Filters []struct {
				Name    string
				Managed bool `json:"managedByGlobalconfig"`
				Item    string
			}
		}
		Runs    int `json:"envoyRuns"`
		Elapsed string
		Advice  []string
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil || code != cli.ExitBlamedOurs || rep.Outcome != "Blamed" || len(rep.Faults) != 1 || len(rep.Faults[0].Filters) != 2 ||
		rep.Faults[0].Filters[0].Name != "user-anchored-healthcheck" || rep.Faults[0].Filters[0].Managed ||
		rep.Faults[0].Filters[1].Item != "localRateLimit" || !rep.Faults[0].Filters[1].Managed || rep.Runs == 0 || !strings.HasSuffix(rep.Elapsed, "s") || len(rep.Advice) != 1 {
		t.Errorf("-o json: exit %d, %v: %+v\n%s\n%s", code, err, rep, js, errs)
	}
}

// A proxy whose config Envoy accepts: nothing blamed, exit 0.
func TestExplainNotReproduced(t *testing.T) {
	envoy, istio := explainEnvoy(t)
	efs, dump := explainCase(t, false)
	code, out, errs := explainIn(t, efs, "--proxy", explainProxy, "--envoy", envoy, "--istiod-debug-url", fakeIstiod(t, istio, dump))
	if code != cli.ExitOK || !strings.Contains(out, "Envoy accepts its config: nothing to blame") || strings.Contains(out, "combination") {
		t.Errorf("exit %d, want 0 and nothing blamed:\n%s\n%s", code, out, errs)
	}
}

// Faults give a clear error, their exit code and no blame: an Envoy of
// another release than the proxy's, a proxy istiod does not have, an
// istiod that does not answer, a binary that is missing, and usage.
func TestExplainFaults(t *testing.T) {
	envoy, _ := explainEnvoy(t)
	efs, dump := explainCase(t, true)
	old := fakeIstiod(t, "1.28.3", dump)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"another release", []string{"--proxy", explainProxy, "--envoy", envoy, "--istiod-debug-url", old}, cli.ExitEnvoyRelease, "runs Istio 1.28.3, whose proxies are built on Envoy 1.36, but the Envoy binary"},
		{"no such proxy", []string{"--proxy", "nosuch.istio-system", "--envoy", envoy, "--istiod-debug-url", old}, cli.ExitNoProxy, "no istiod has a proxy nosuch.istio-system connected"},
		{"istiod unreachable", []string{"--proxy", explainProxy, "--envoy", envoy, "--istiod-debug-url", "http://127.0.0.1:1"}, cli.ExitIstiod, "no istiod could be asked"},
		{"missing binary", []string{"--proxy", explainProxy, "--envoy", "/nonexistent/envoy", "--istiod-debug-url", old}, cli.ExitNotEnvoy, "/nonexistent/envoy does not exist"},
		{"no --envoy", []string{"--proxy", explainProxy, "--istiod-debug-url", old}, cli.ExitUsage, "--envoy PATH is required"},
		{"no --proxy", []string{"--envoy", envoy}, cli.ExitUsage, "--proxy POD.NAMESPACE is required"},
		{"bad --proxy", []string{"--proxy", "gw-0", "--envoy", envoy, "--istiod-debug-url", old}, cli.ExitUsage, "--proxy must be POD.NAMESPACE"},
		{"bad -o", []string{"--proxy", explainProxy, "--envoy", envoy, "-o", "wide"}, cli.ExitUsage, "-o must be text, json or yaml"},
	} {
		code, out, errs := explainIn(t, efs, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want %d, %q and no blame", c.name, code, errs, out, c.code, c.want)
		}
	}
}
