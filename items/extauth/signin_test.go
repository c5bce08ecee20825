package extauth_test

import (
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/customerrors"
	"github.com/globalconfig/globalconfig/items/extauth"
)

func TestLocation(t *testing.T) {
	for _, c := range []struct{ url, param, want string }{
		{"/oauth2/sign_in", "", "/oauth2/sign_in?rd=" + extauth.OriginalURL},
		{"https://auth.example.com/start?x=1", "next", "https://auth.example.com/start?x=1&next=" + extauth.OriginalURL},
		{"https://auth.example.com/start?rd=%REQ(:path)%", "", "https://auth.example.com/start?rd=%REQ(:path)%"},
		{"https://auth.example.com/start?ard=1", "rd", "https://auth.example.com/start?ard=1&rd=" + extauth.OriginalURL},
	} {
		s := extauth.SignIn{URL: c.url, RedirectParam: c.param}
		if got := s.Location(); got != c.want {
			t.Errorf("%s (%q): %s, want %s", c.url, c.param, got, c.want)
		}
	}
}

// The sign-in redirect and customErrors' pages are mappers of one
// connection manager's local_reply_config, and Envoy uses the first that
// matches: extAuth's must come first, or a customErrors page for 401 would
// hide the redirect. Istio applies EnvoyFilters in ascending priority and
// a MERGE appends lists, so extAuth's priority must be the lower.
func TestSignInMapperBeforeCustomErrors(t *testing.T) {
	ea, ok1 := items.Lookup(extauth.Name)
	ce, ok2 := items.Lookup(customerrors.Name)
	if !ok1 || !ok2 {
		t.Fatal("items not registered")
	}
	if ea.Placement().Priority >= ce.Placement().Priority {
		t.Fatalf("extAuth's priority %d is not below customErrors' %d: its sign-in mapper would come after customErrors' pages", ea.Placement().Priority, ce.Placement().Priority)
	}
	auth := &extauth.ExtAuth{Service: "oauth2-proxy.auth.svc.cluster.local", Port: 4180, Protocol: "http", FailureMode: "deny",
		SignIn: &extauth.SignIn{URL: "/oauth2/sign_in"}}
	pages := &customerrors.CustomErrors{LocalReplies: []customerrors.Page{{Statuses: []uint32{401}, Text: "sign in"}}}
	hcm := &hcmv3.HttpConnectionManager{}
	type built struct {
		prio int32
		it   items.Item
	}
	order := []built{{ea.Placement().Priority, auth}, {ce.Placement().Priority, pages}}
	slices.SortFunc(order, func(a, b built) int { return int(a.prio - b.prio) })
	for _, b := range order {
		patches, err := b.it.Build()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range patches {
			if p.ApplyTo != networking.EnvoyFilter_NETWORK_FILTER || p.Operation != networking.EnvoyFilter_Patch_MERGE {
				continue
			}
			m := &hcmv3.HttpConnectionManager{}
			if err := p.Value.(*listenerv3.Filter).GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			proto.Merge(hcm, m)
		}
	}
	mappers := hcm.GetLocalReplyConfig().GetMappers()
	if len(mappers) != 2 || mappers[0].GetStatusCode().GetValue() != 302 || mappers[1].GetBodyFormatOverride() == nil {
		t.Errorf("mappers in the order Istio merges them: %v; want the sign-in redirect, then the 401 page", mappers)
	}
}
