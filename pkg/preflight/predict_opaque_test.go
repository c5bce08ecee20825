package preflight

import (
	"encoding/json"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

// A user's EnvoyFilter whose filter names a type this build does not link
// (as the controller's binary links no health check) is selected with a
// stand-in that gives Envoy the value as written; before, Select failed
// ("unable to resolve"), and so did every blame of a proxy it reaches.
func TestSelectKeepsUnlinkedTypes(t *testing.T) {
	const typeURL = "type.googleapis.com/envoy.extensions.filters.http.not_linked.v3.NotLinked"
	value, err := structpb.NewStruct(map[string]any{
		"name":         "envoy.filters.http.not_linked",
		"typed_config": map[string]any{"@type": typeURL, "cache_time": "5s", "pass_through_mode": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := Filter{Namespace: "istio-system", Name: "user", Spec: &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
		ApplyTo: networking.EnvoyFilter_HTTP_FILTER,
		Match:   &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: networking.EnvoyFilter_GATEWAY},
		Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_INSERT_FIRST, Value: value},
	}}}}
	ps, _, err := Select(Proxy{Name: "gw.istio-system", Namespace: "istio-system"}, "istio-system", []Filter{f})
	if err != nil || len(ps) != 1 {
		t.Fatalf("select: %v, %d patches", err, len(ps))
	}
	got, err := (&Config{}).json(ps[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Fatal(err)
	}
	tc, _ := back["typed_config"].(map[string]any)
	if tc["@type"] != typeURL || tc["cache_time"] != "5s" || tc["pass_through_mode"] != false || strings.Contains(got, `"json"`) {
		t.Errorf("the value as Envoy gets it:\n%s", got)
	}
	// A value that is wrong for a type this build does link still fails.
	bad, _ := structpb.NewStruct(map[string]any{"name": "x", "no_such_field": 1})
	f.Spec.ConfigPatches[0].Patch.Value = bad
	if _, _, err := Select(Proxy{Name: "gw.istio-system", Namespace: "istio-system"}, "istio-system", []Filter{f}); err == nil || !strings.Contains(err.Error(), "no_such_field") {
		t.Errorf("an unknown field of a linked type: %v", err)
	}
}

// The filter a user's EnvoyFilter inserted, of a type this build does not
// link, is found in istiod's config dump (which writes it in camelCase,
// where the patch has snake_case), so the config without EnvoyFilters
// lacks it: before, it stayed, and the blame said Envoy refuses the config
// without any EnvoyFilter.
func TestUndoFindsUnlinkedTypes(t *testing.T) {
	const typeURL = "type.googleapis.com/envoy.extensions.filters.http.not_linked.v3.NotLinked"
	decode := func(js string) *hcmv3.HttpFilter {
		t.Helper()
		r := newResolver()
		b, err := r.wrap([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		f := &hcmv3.HttpFilter{}
		if err := (protojson.UnmarshalOptions{Resolver: r}).Unmarshal(b, f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	dumped := decode(`{"name":"envoy.filters.http.not_linked","typedConfig":{"@type":"` + typeURL + `","passThroughMode":false,"cacheTime":"1s"}}`)
	patched := decode(`{"name":"envoy.filters.http.not_linked","typed_config":{"@type":"` + typeURL + `","pass_through_mode":false,"cache_time":"1s"}}`)
	other := decode(`{"name":"envoy.filters.http.not_linked","typed_config":{"@type":"` + typeURL + `","pass_through_mode":true,"cache_time":"1s"}}`)
	if !equalOrStandIn(dumped, patched) {
		t.Error("the dumped filter is not found as the patch inserted it")
	}
	if equalOrStandIn(dumped, other) || equalOrStandIn(patched, other) {
		t.Error("a filter of other content taken for the inserted one")
	}
	router := &hcmv3.HttpFilter{Name: "envoy.filters.http.router"}
	if equalOrStandIn(router, &hcmv3.HttpFilter{Name: "envoy.filters.http.cors"}) || !equalOrStandIn(router, &hcmv3.HttpFilter{Name: "envoy.filters.http.router"}) {
		t.Error("linked types compare as proto.Equal does")
	}
}
