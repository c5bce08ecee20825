package envoycheck

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// A MERGE of the HTTP connection manager keeps what the base had and adds
// what the patch sets, inside the typed config, as istiod merges it.
func TestMergeHCMByValue(t *testing.T) {
	p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{
		StreamIdleTimeout:         durationpb.New(300e9),
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(100)},
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err := envoyfilter.NewObject("downstream", envoyfilter.Placement{Priority: 10}, envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := bootstrap(networking.EnvoyFilter_GATEWAY, []patch{{item: "downstream", cp: o.Spec.GetConfigPatches()[0]}})
	if err != nil {
		t.Fatal(err)
	}
	l := bs.GetStaticResources().GetListeners()[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if hcm.GetStatPrefix() == "" || len(hcm.GetHttpFilters()) != 1 || hcm.GetRouteConfig() == nil {
		t.Errorf("the base HCM lost its own fields: %v", hcm)
	}
	if hcm.GetStreamIdleTimeout().AsDuration().Seconds() != 300 || hcm.GetCommonHttpProtocolOptions().GetMaxHeadersCount().GetValue() != 100 {
		t.Errorf("the patch's fields are missing: %v", hcm)
	}
}

// Lists append and an Any of another type replaces the base's.
func TestMergeListsAndAnys(t *testing.T) {
	a, _ := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "a"})
	b, _ := anypb.New(&wrapperspb.StringValue{Value: "b"})
	dst := &listenerv3.Listener{ListenerFilters: []*listenerv3.ListenerFilter{{Name: "one"}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}}}}}
	if err := merge(dst, &listenerv3.Listener{ListenerFilters: []*listenerv3.ListenerFilter{{Name: "two"}}}); err != nil {
		t.Fatal(err)
	}
	if len(dst.GetListenerFilters()) != 2 || dst.GetListenerFilters()[1].GetName() != "two" {
		t.Errorf("listener filters %v", dst.GetListenerFilters())
	}
	f := dst.GetFilterChains()[0].GetFilters()[0]
	if err := merge(f, &listenerv3.Filter{ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: b}}); err != nil {
		t.Fatal(err)
	}
	if f.GetTypedConfig().GetTypeUrl() != b.GetTypeUrl() {
		t.Errorf("an Any of another type should replace: %v", f.GetTypedConfig().GetTypeUrl())
	}
}
