package preflight

import (
	"errors"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	statspb "istio.io/api/envoy/extensions/stats"
	networking "istio.io/api/networking/v1alpha3"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// gateway is a gateway's listener on 8080 as istiod builds it: an HTTP
// connection manager with istiod's stream idle timeout, RDS http.8080 and
// the router, plus that route configuration.
func gateway(t *testing.T, extra ...*hcmv3.HttpFilter) *Config {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:        "outbound_0.0.0.0_8080",
		StreamIdleTimeout: durationpb.New(300 * time.Second),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "http.8080",
			ConfigSource: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}},
		HttpFilters: append(extra, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}),
	}
	return &Config{
		Listeners: []*listenerv3.Listener{{
			Name: "0.0.0.0_8080",
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}},
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)},
			}}}},
		}},
		Routes: []*routev3.RouteConfiguration{{Name: "http.8080", VirtualHosts: []*routev3.VirtualHost{{Name: "*:8080", Domains: []string{"*"}}}}},
	}
}

func hcmMatch() *networking.EnvoyFilter_EnvoyConfigObjectMatch {
	return &networking.EnvoyFilter_EnvoyConfigObjectMatch{
		Context: networking.EnvoyFilter_GATEWAY,
		ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networking.EnvoyFilter_ListenerMatch{
			FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: &networking.EnvoyFilter_ListenerMatch_FilterMatch{
				Name: "envoy.filters.network.http_connection_manager"}}}},
	}
}

// insertBuffer is an item's INSERT_FIRST of a buffer filter.
func insertBuffer(t *testing.T, item string, max uint32) Patch {
	return Patch{Item: item, Filter: "istio-system/globalconfig-" + item, CP: &networking.EnvoyFilter_EnvoyConfigObjectPatch{
		ApplyTo: networking.EnvoyFilter_HTTP_FILTER, Match: hcmMatch(),
		Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_INSERT_FIRST},
	}, Value: &hcmv3.HttpFilter{Name: "envoy.filters.http.buffer", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(max)})}}}
}

// mergeHCM is an item's MERGE into the connection manager.
func mergeHCM(t *testing.T, item string, hcm *hcmv3.HttpConnectionManager) Patch {
	return Patch{Item: item, Filter: "istio-system/globalconfig-" + item, CP: &networking.EnvoyFilter_EnvoyConfigObjectPatch{
		ApplyTo: networking.EnvoyFilter_NETWORK_FILTER, Match: hcmMatch(),
		Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE},
	}, Value: &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}}}
}

func accessLog(t *testing.T) []*accesslogv3.AccessLog {
	return []*accesslogv3.AccessLog{{Name: "envoy.access_loggers.stdout", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(t, &streamv3.StdoutAccessLog{})}}}
}

func text(t *testing.T, c *Config) string {
	t.Helper()
	var b strings.Builder
	for _, r := range c.resources() {
		js, err := c.json(r.msg)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(r.kind + " " + r.name + "\n" + js)
	}
	return b.String()
}

// Taking the live patches off is exact when the new set sets the same
// fields again, and names what it can't recover otherwise: the current
// config is built with the live set, and the prediction must equal the
// new set applied to the config istiod built without any.
func TestUndoThenApply(t *testing.T) {
	base := gateway(t)
	live := []Patch{
		insertBuffer(t, "requestBody", 1024),
		mergeHCM(t, "downstream", &hcmv3.HttpConnectionManager{StreamIdleTimeout: durationpb.New(60 * time.Second), AccessLog: accessLog(t)}),
	}
	current, err := Apply(base, Kind{}, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	if text(t, current) == text(t, base) {
		t.Fatal("the live patches change nothing: the test proves nothing")
	}
	for _, c := range []struct {
		name    string
		next    []Patch
		inexact string // a part of the one inexact path, "" for exact
	}{
		{"same fields, new values", []Patch{
			insertBuffer(t, "requestBody", 4096),
			mergeHCM(t, "downstream", &hcmv3.HttpConnectionManager{StreamIdleTimeout: durationpb.New(30 * time.Second), AccessLog: accessLog(t)}),
		}, ""},
		{"unchanged", live, ""},
		{"insert removed, merge kept", live[1:], ""},
		{"merge removed", live[:1], "stream_idle_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := current.clone()
			holes := undo(got, Kind{}, nil, live, c.next, nil)
			got, err := Apply(got, Kind{}, nil, c.next)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Apply(base, Kind{}, nil, c.next)
			if err != nil {
				t.Fatal(err)
			}
			if c.inexact == "" {
				if len(holes) > 0 {
					t.Errorf("inexact: %q", holes)
				}
				if g, w := text(t, got), text(t, want); g != w {
					t.Errorf("prediction differs from the new set applied to istiod's config:\n%s\nwant\n%s", g, w)
				}
				return
			}
			if len(holes) != 1 || !strings.Contains(holes[0], c.inexact) {
				t.Errorf("inexact = %q, want one naming %s", holes, c.inexact)
			}
		})
	}
}

// Istio's merge differs from proto.Merge: a Duration is replaced, not
// merged field by field, and a nested Any is replaced.
func TestMergeIstioSemantics(t *testing.T) {
	dst := &hcmv3.HttpConnectionManager{StreamIdleTimeout: &durationpb.Duration{Seconds: 1, Nanos: 500_000_000}, AccessLog: accessLog(t)}
	src := &hcmv3.HttpConnectionManager{StreamIdleTimeout: &durationpb.Duration{Seconds: 2}, AccessLog: accessLog(t)}
	Merge(dst, src)
	if got := dst.GetStreamIdleTimeout().AsDuration(); got != 2*time.Second {
		t.Errorf("duration merged to %s, want 2s (proto.Merge gives 2.5s)", got)
	}
	if len(dst.GetAccessLog()) != 2 {
		t.Errorf("lists append: %d access logs, want 2", len(dst.GetAccessLog()))
	}
	a := &hcmv3.HttpFilter{ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(1)})}}
	Merge(a, &hcmv3.HttpFilter{ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}})
	if a.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" {
		t.Errorf("nested Any not replaced: %s", a.GetTypedConfig().GetTypeUrl())
	}
}

func dumpOf(t *testing.T, c *Config, extraHCMFilter string) []byte {
	t.Helper()
	js, err := protojson.Marshal(c.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	lis := `{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener", ` + string(js)[1:]
	if extraHCMFilter != "" {
		lis = strings.Replace(lis, `"httpFilters":[`, `"httpFilters":[`+extraHCMFilter+`,`, 1)
	}
	return []byte(`{"configs": [
	  {"@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump", "bootstrap": {"node": {"id": "router~10.1.1.1~gw.istio-system~istio-system.svc.cluster.local",
	    "metadata": {"ISTIO_VERSION": "1.31.0", "LABELS": {"istio": "ingressgateway"}}}}},
	  {"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump", "dynamicListeners": [{"name": "0.0.0.0_8080", "activeState": {"versionInfo": "v1", "listener": ` + lis + `}}]},
	  {"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump", "dynamicActiveSecrets": [{"name": "cert", "secret": {"name": "cert", "tlsCertificate": {"privateKey": {"inlineString": "SECRET-KEY"}}}}]}
	]}`)
}

func TestParseDump(t *testing.T) {
	priv := `{"name": "private.filter", "typedConfig": {"@type": "type.googleapis.com/example.private.v1.Config", "knob": 3}}`
	data := dumpOf(t, gateway(t), priv)
	c, err := ParseDump(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listeners) != 1 || c.Node.GetId() == "" {
		t.Fatalf("listeners %d, node %v", len(c.Listeners), c.Node)
	}
	if strings.Join(c.Opaque, ",") != "example.private.v1.Config" || c.Dropped != "" {
		t.Errorf("opaque %q, dropped %q", c.Opaque, c.Dropped)
	}
	if strings.Contains(text(t, c), "SECRET-KEY") {
		t.Error("a secret reached the parsed config")
	}
	for _, bad := range []struct{ in, want string }{
		{"", "empty"},
		{string(data[:len(data)/2]), "truncated"},
		{`{"apiVersion": "v1", "kind": "List", "items": []}`, `no "configs" list (top-level keys: apiVersion, items, kind)`},
		{`[1, 2]`, "not a JSON object"},
		{`{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump"}]}`, "no listener"},
		{`{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump"}]}`, "no listeners, clusters or routes"},
	} {
		_, err := ParseDump([]byte(bad.in))
		var de *DumpError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseDump(%.40q) = %v, want a DumpError with %q", bad.in, err, bad.want)
		}
	}
}

// An Envoy extension this build does not link (a hand-written EnvoyFilter
// added it) keeps its content: Envoy's check loads it as the dump had it,
// and a diff shows it; only its type is reported as not read.
func TestUnlinkedEnvoyTypeKeepsItsJSON(t *testing.T) {
	const kill = "envoy.extensions.filters.http.kill_request.v3.KillRequest"
	if _, err := protoregistry.GlobalTypes.FindMessageByName(kill); err == nil {
		t.Fatalf("%s is linked into this build: the test needs a type that is not", kill)
	}
	ext := `{"name": "envoy.filters.http.kill_request", "typedConfig": {"@type": "type.googleapis.com/` + kill + `",
	  "probability": {"numerator": 3, "denominator": "TEN_THOUSAND"}, "killRequestHeader": "x-kill<me>"}}`
	priv := `{"name": "private.filter", "typedConfig": {"@type": "type.googleapis.com/example.private.v1.Config", "knob": 3}}`
	c, err := ParseDump(dumpOf(t, gateway(t), ext+","+priv))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Opaque, ","); got != "envoy.extensions.filters.http.kill_request.v3.KillRequest,example.private.v1.Config" || c.Dropped != "" {
		t.Errorf("opaque %q, dropped %q", got, c.Dropped)
	}
	js, removed, err := bootstrapJSON(Kind{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removed, "; "); got != "listener 0.0.0.0_8080: HTTP filter private.filter" {
		t.Errorf("removed: %s", got)
	}
	want := `{"@type":"type.googleapis.com/` + kill + `","killRequestHeader":"x-kill<me>","probability":{"denominator":"TEN_THOUSAND","numerator":3}}`
	if !strings.Contains(string(js), want) {
		t.Errorf("the bootstrap Envoy loads lacks %s:\n%s", want, js)
	}
	if strings.Contains(string(js), "knob") {
		t.Errorf("the private filter reached the bootstrap:\n%s", js)
	}
	// The diff shows the content too, and an unchanged one is no change.
	txt, err := c.json(c.Listeners[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt, `"killRequestHeader": "x-kill<me>"`) {
		t.Errorf("the diff's JSON lacks the extension's content:\n%s", txt)
	}
	again, err := c.clone().json(c.clone().Listeners[0])
	if err != nil || again != txt {
		t.Errorf("a clone reads differently (%v)", err)
	}
}

// What upstream Envoy lacks is taken out and listed: Istio's stats filter
// and a type this build does not know; RDS becomes the inline route
// configuration.
func TestBootstrapForUpstreamEnvoy(t *testing.T) {
	stats := &hcmv3.HttpFilter{Name: "istio.stats", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &statspb.PluginConfig{})}}
	priv := `{"name": "private.filter", "typedConfig": {"@type": "type.googleapis.com/example.private.v1.Config"}}`
	c, err := ParseDump(dumpOf(t, gateway(t, stats), priv))
	if err != nil {
		t.Fatal(err)
	}
	bs, removed, err := Bootstrap(Kind{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removed, "; "); got != "listener 0.0.0.0_8080: HTTP filter private.filter; listener 0.0.0.0_8080: HTTP filter istio.stats" {
		t.Errorf("removed: %s", got)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if hcm.GetRouteConfig().GetName() != "http.8080" || len(hcm.GetHttpFilters()) != 1 {
		t.Errorf("route %q inline, filters %v", hcm.GetRouteConfig().GetName(), hcm.GetHttpFilters())
	}
	if bs.GetNode().GetId() != c.Node.GetId() {
		t.Errorf("node %v", bs.GetNode())
	}
}
