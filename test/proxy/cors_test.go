package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The cors item beside a VirtualService route with a corsPolicy of its
// own, which istiod puts on that route: the route's policy is the most
// specific, so it answers for the route, and the item's default for every
// other route.
const (
	corsVSHost      = "cors-vs.proxy.test"
	corsVSOrigin    = "https://vs.example.com"
	corsItemOrigin  = "https://app.example.com"
	corsItemMethods = "GET,POST,PUT"
)

// corsDoc allows corsItemOrigin on every route.
var corsDoc = fmt.Sprintf("cors:\n  allowOrigins: [%s]\n  allowMethods: [GET, POST, PUT]\n  exposeHeaders: [x-from-default]\n  forwardNotAllowedPreflights: false\n", corsItemOrigin)

// corsVirtualService routes corsVSHost's /vs to the backend with a
// corsPolicy that allows corsVSOrigin and GET only, and the rest of the
// host without one.
func corsVirtualService(ctx context.Context, t *testing.T) {
	t.Helper()
	var names []string
	for _, g := range gateways {
		names = append(names, ns+"/"+g.name)
	}
	dest := []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: backendHost, Port: &networkingv1.PortSelector{Number: backendPort}}}}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "cors-vs", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{corsVSHost},
			Gateways: names,
			Http: []*networkingv1.HTTPRoute{
				{
					Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/vs"}}}},
					Route: dest,
					CorsPolicy: &networkingv1.CorsPolicy{
						AllowOrigins: []*networkingv1.StringMatch{{MatchType: &networkingv1.StringMatch_Exact{Exact: corsVSOrigin}}},
						AllowMethods: []string{"GET"},
					},
				},
				{Route: dest},
			},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("virtual service: %v", err)
	}
}

// corsPreflight sends a CORS preflight for PUT from origin to path on host.
func corsPreflight(ctx context.Context, t *testing.T, g *gw, host, path, origin string) *response {
	t.Helper()
	r, err := do(ctx, "OPTIONS", g.url(path), map[string]string{"Host": host, "Origin": origin, "Access-Control-Request-Method": "PUT"}, "")
	if err != nil {
		t.Fatalf("OPTIONS %s from %s: %v", path, origin, err)
	}
	return r
}

// TestCORSVirtualServiceWins: on a route with its own corsPolicy, the
// route's policy answers (its origin allowed, with its methods; the
// item's origin not), while the item's policy answers on the host's other
// routes; a setting the route's policy leaves out comes from the item's.
func TestCORSVirtualServiceWins(t *testing.T) {
	ctx := setup(t)
	corsVirtualService(ctx, t)
	use(ctx, t, corsDoc)
	each(t, func(t *testing.T, g *gw) {
		// Wait until the gateway has the VirtualService's route.
		var last string
		if !harness.Eventually(ctx, 30*time.Second, func() bool {
			r := corsPreflight(ctx, t, g, corsVSHost, "/vs", corsVSOrigin)
			last = fmt.Sprintf("%d %v", r.status, r.header)
			return r.header.Get("access-control-allow-origin") == corsVSOrigin
		}) {
			t.Fatalf("the VirtualService's corsPolicy never answered on %s/vs: %s", corsVSHost, last)
		}
		r := corsPreflight(ctx, t, g, corsVSHost, "/vs", corsVSOrigin)
		if got := r.header.Get("access-control-allow-methods"); got != "GET" {
			t.Errorf("route with its own corsPolicy, its origin: allow-methods %q, want the route's GET", got)
		}
		r = corsPreflight(ctx, t, g, corsVSHost, "/vs", corsItemOrigin)
		if got := r.header.Get("access-control-allow-origin"); got != "" {
			t.Errorf("route with its own corsPolicy, the item's origin: allow-origin %q, want none (the route's policy decides)", got)
		}
		// The item's default on the host's other route and on others.
		for _, host := range []string{corsVSHost, "other.proxy.test"} {
			r = corsPreflight(ctx, t, g, host, "/echo", corsItemOrigin)
			if got, m := r.header.Get("access-control-allow-origin"), r.header.Get("access-control-allow-methods"); got != corsItemOrigin || m != corsItemMethods {
				t.Errorf("%s/echo, the item's origin: allow-origin %q, allow-methods %q; want %q, %q (the item's default)", host, got, m, corsItemOrigin, corsItemMethods)
			}
			r = corsPreflight(ctx, t, g, host, "/echo", corsVSOrigin)
			if got := r.header.Get("access-control-allow-origin"); got != "" {
				t.Errorf("%s/echo, the VirtualService's origin: allow-origin %q, want none", host, got)
			}
		}
		// A simple request on the route with its own policy: Envoy takes
		// each setting from the most specific policy that has it, so the
		// item's exposeHeaders, which the route's policy leaves unset,
		// still apply there (measured at Envoy 1.40.0 and 1.39.3).
		r, err := get(ctx, g.url("/vs"), map[string]string{"Host": corsVSHost, "Origin": corsVSOrigin})
		if err != nil {
			t.Fatal(err)
		}
		if got, e := r.header.Get("access-control-allow-origin"), r.header.Get("access-control-expose-headers"); got != corsVSOrigin || e != "x-from-default" {
			t.Errorf("simple GET on the route with its own corsPolicy: status %d, allow-origin %q, expose-headers %q; want %q (the route's) and x-from-default (the item's, which the route leaves unset); headers %v", r.status, got, e, corsVSOrigin, r.header)
		}
	})
}
