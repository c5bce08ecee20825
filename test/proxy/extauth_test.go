package proxy

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The extAuth item at real gateways, against real auth services on
// loopback: oauth2-proxy (HTTP, basic auth and cookie sessions from an
// htpasswd file) and Istio's sample ext_authz server (gRPC). Each is in
// the mesh under a host of its own (ServiceEntries), and the host
// appHost routes /oauth2 to oauth2-proxy, as a user of oauth2-proxy must
// route it, and everything else to the backend.
const (
	oauth2Host   = "oauth2-proxy.authn.svc.cluster.local"
	oauth2Port   = 4180
	extAuthzHost = "ext-authz.authn.svc.cluster.local"
	extAuthzPort = 9000
	appHost      = "app.proxy.test"
	publicHost   = "public.proxy.test"
)

var (
	authOnce sync.Once
	authErr  error
	oauth2   *harness.OAuth2Proxy
	extAuthz *harness.ExtAuthz
)

// authMesh starts the auth services once for the suite (they end with
// the test process) and puts them in the mesh.
func authMesh(ctx context.Context, t testing.TB) {
	t.Helper()
	authOnce.Do(func() { authErr = startAuth(ctx) })
	if authErr != nil {
		t.Fatal(authErr)
	}
}

func startAuth(ctx context.Context) error {
	dir := filepath.Join(suiteDir, "auth")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var err error
	if oauth2, err = harness.StartOAuth2Proxy(ctx, dir, ".proxy.test:*"); err != nil {
		return err
	}
	if extAuthz, err = harness.StartExtAuthz(ctx, dir); err != nil {
		return err
	}
	for _, s := range []struct {
		host       string
		port, real int
	}{{oauth2Host, oauth2Port, oauth2.Port}, {extAuthzHost, extAuthzPort, extAuthz.GRPCPort}} {
		if err := cluster.CreateLoopbackService(ctx, s.host, uint32(s.port), s.real); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("service entry %s: %w", s.host, err)
		}
	}
	var names []string
	for _, g := range gateways {
		names = append(names, ns+"/"+g.name)
	}
	dest := func(host string, port uint32) []*networkingv1.HTTPRouteDestination {
		return []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{Host: host, Port: &networkingv1.PortSelector{Number: port}}}}
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "auth-app", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{appHost},
			Gateways: names,
			Http: []*networkingv1.HTTPRoute{
				{Match: []*networkingv1.HTTPMatchRequest{{Uri: &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/oauth2/"}}}}, Route: dest(oauth2Host, oauth2Port)},
				{Route: dest(backendHost, backendPort)},
			},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("virtual service: %w", err)
	}
	return nil
}

// useAuth makes doc the configuration and waits until each gateway routes
// appHost's /oauth2 to oauth2-proxy.
func useAuth(ctx context.Context, t *testing.T, doc string) {
	t.Helper()
	authMesh(ctx, t)
	use(ctx, t, doc)
	for _, g := range gateways {
		waitRouted(ctx, t, g)
	}
}

// waitRouted waits until g routes appHost's /oauth2 to oauth2-proxy
// (its sign-in page answers).
func waitRouted(ctx context.Context, t testing.TB, g *gw) {
	t.Helper()
	var last string
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		r, err := get(ctx, g.url("/oauth2/sign_in"), map[string]string{"Host": appHost})
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d %.100s", r.status, r.body)
		return r.status == 200
	}) {
		t.Fatalf("gateway %s does not route %s/oauth2 to oauth2-proxy: %s", g.name, appHost, last)
	}
}

// oauth2Doc checks every request with oauth2-proxy but ACME's challenges,
// oauth2-proxy's own pages and publicHost, and passes the user's headers
// to the backend; extra is added to the section.
func oauth2Doc(extra string) string {
	return fmt.Sprintf(`extAuth:
  service: %s
  port: %d
  upstreamHeaders: [x-auth-request-*]
  skip:
    paths: [/.well-known/acme-challenge, /oauth2]
    hosts: [%s]
%s`, oauth2Host, oauth2Port, publicHost, extra)
}

// statSum sums g's counters whose names end in suffix and start with
// prefix.
func statSum(ctx context.Context, t *testing.T, g *gw, prefix, suffix string) int64 {
	t.Helper()
	st, err := g.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for name, v := range st {
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix) {
			n += v
		}
	}
	return n
}

// authCalls is how many requests g has sent oauth2-proxy: its own count of
// the auth service cluster's requests (istiod names a cluster's statistics
// after the cluster and ";").
func authCalls(ctx context.Context, t *testing.T, g *gw) int64 {
	t.Helper()
	return statSum(ctx, t, g, fmt.Sprintf("cluster.outbound|%d||%s;", oauth2Port, oauth2Host), ".upstream_rq_total")
}

// basic is the Authorization header of the htpasswd user.
func basic() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(harness.AuthUser+":"+harness.AuthPassword))
}

// app is a request to appHost with headers.
func app(headers map[string]string) map[string]string {
	h := map[string]string{"Host": appHost}
	for k, v := range headers {
		h[k] = v
	}
	return h
}

// TestExtAuth: oauth2-proxy checks every request through the gateway. No
// credentials: 401; basic auth or the session cookie its sign-in form
// sets: through, with the user's headers at the backend (and a client's
// own forged ones replaced). The opted-out paths and host pass without a
// call to the service; look-alikes of the path do not.
func TestExtAuth(t *testing.T) {
	ctx := setup(t)
	useAuth(ctx, t, oauth2Doc(""))
	each(t, func(t *testing.T, g *gw) {
		calls := authCalls(ctx, t, g)
		call := func(what string, want int64) {
			t.Helper()
			now := authCalls(ctx, t, g)
			if now-calls != want {
				t.Errorf("%s: %d calls to the auth service, want %d", what, now-calls, want)
			}
			calls = now
		}
		if r := mustGet(ctx, t, g.url("/echo"), app(map[string]string{"x-auth-request-user": "admin"})); r.status != 401 {
			t.Errorf("no credentials: status %d, want 401: %s", r.status, r.body)
		}
		call("no credentials", 1)
		s := echoed(t, mustGet(ctx, t, g.url("/echo"), app(map[string]string{"Authorization": basic(),
			"x-auth-request-user": "admin", "X-Auth-Request-Email": "admin@example.com"})))
		if s.Header("x-auth-request-user") != harness.AuthUser || s.Header("x-auth-request-groups") != harness.AuthGroup {
			t.Errorf("basic auth: the backend saw user %q, groups %q; want %s, %s (the service's, not the client's)",
				s.Header("x-auth-request-user"), s.Header("x-auth-request-groups"), harness.AuthUser, harness.AuthGroup)
		}
		// oauth2-proxy sends no email for an htpasswd user: the client's
		// own is removed, not passed on.
		if s.Has("x-auth-request-email") {
			t.Errorf("basic auth: the backend saw the client's own x-auth-request-email %q", s.Header("x-auth-request-email"))
		}
		call("basic auth", 1)

		// Opted out: no call at all.
		for _, path := range []string{"/.well-known/acme-challenge/token-1", "/.well-known/acme-challenge"} {
			if r := mustGet(ctx, t, g.url(path), app(nil)); r.status != 200 {
				t.Errorf("%s: status %d, want 200 without a check", path, r.status)
			}
		}
		for _, host := range []string{publicHost, publicHost + ":8080", "PUBLIC.proxy.test"} {
			if r := mustGet(ctx, t, g.url("/echo"), map[string]string{"Host": host}); r.status != 200 {
				t.Errorf("host %s: status %d, want 200 without a check", host, r.status)
			}
		}
		call("opted-out paths and host", 0)

		// Look-alikes are checked.
		for _, path := range []string{
			"/.well-known/acme-challengeX", "/.well-known/acme-challenge-2/x", "/.well-known%2Facme-challenge/x",
			"/.well-known/acme-challenge%2F..%2F..%2Fecho", "/.well-known/acme-challenge/..;/echo",
			"/.well-known/acme-challenge/../../echo", "/.WELL-KNOWN/acme-challenge/x",
		} {
			if r := mustGet(ctx, t, g.url(path), app(nil)); r.status != 401 {
				t.Errorf("%s: status %d, want 401 from the auth service", path, r.status)
			}
			call(path, 1)
		}
		for _, host := range []string{"public.proxy.test.evil", "xpublic.proxy.test"} {
			if r := mustGet(ctx, t, g.url("/echo"), map[string]string{"Host": host}); r.status != 401 {
				t.Errorf("host %s: status %d, want 401", host, r.status)
			}
			call(host, 1)
		}

		// A cookie session from oauth2-proxy's sign-in form, reached
		// through the gateway.
		cookie := signIn(ctx, t, g, "/echo")
		s = echoed(t, mustGet(ctx, t, g.url("/echo"), app(map[string]string{"Cookie": cookie})))
		if s.Header("x-auth-request-user") != harness.AuthUser {
			t.Errorf("cookie session: the backend saw user %q", s.Header("x-auth-request-user"))
		}
	})
	// Each opt-out is counted by the scope filter (shadow_allowed), each
	// check (shadow_denied): Istio keeps both by default.
	for _, g := range gateways {
		if statSum(ctx, t, g, "http.", "rbac.globalconfig_ext_auth_.shadow_allowed") == 0 || statSum(ctx, t, g, "http.", "rbac.globalconfig_ext_auth_.shadow_denied") == 0 {
			t.Errorf("gateway %s: the scope filter's counters did not move", g.name)
		}
	}
}

// signIn posts the htpasswd user to oauth2-proxy's sign-in form through g
// (rd is where to go next) and returns the session cookie; the form
// answers with a redirect to rd.
func signIn(ctx context.Context, t *testing.T, g *gw, rd string) string {
	t.Helper()
	form := url.Values{"username": {harness.AuthUser}, "password": {harness.AuthPassword}, "rd": {rd}}
	r, err := do(ctx, http.MethodPost, g.url("/oauth2/sign_in"), app(map[string]string{"Content-Type": "application/x-www-form-urlencoded"}), form.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 302 || r.header.Get("Location") != rd {
		t.Fatalf("sign-in form: status %d, location %q; want 302 to %s", r.status, r.header.Get("Location"), rd)
	}
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "_oauth2_proxy" {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("sign-in form: no session cookie in %v", r.header)
	return ""
}

// TestExtAuthSignIn: with signIn, the service's 401 becomes a redirect
// to the sign-in page with the original URL; following it, signing in
// and coming back gets the page. The redirect wins over a customErrors
// page for 401 (the extAuth mapper comes first in the connection
// manager's local reply config); without signIn, that page is what the
// service's 401 becomes.
func TestExtAuthSignIn(t *testing.T) {
	ctx := setup(t)
	page := `customErrors:
  localReplies:
  - statuses: [401]
    json:
      error: sign_in_required
`
	useAuth(ctx, t, oauth2Doc("  signIn:\n    url: /oauth2/sign_in\n")+page)
	each(t, func(t *testing.T, g *gw) {
		r := mustGet(ctx, t, g.url("/echo?a=1"), app(nil))
		want := "/oauth2/sign_in?rd=http://" + appHost + "/echo?a=1"
		if r.status != 302 || r.header.Get("Location") != want {
			t.Fatalf("no credentials: status %d, location %q; want 302 to %s (%s)", r.status, r.header.Get("Location"), want, r.body)
		}
		// The browser's way: the sign-in page, the form, and back.
		u, err := url.Parse(r.header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		if p := mustGet(ctx, t, g.url(u.RequestURI()), app(nil)); p.status != 200 || !strings.Contains(string(p.body), "<form") {
			t.Errorf("sign-in page: status %d: %.200s", p.status, p.body)
		}
		rd := u.Query().Get("rd")
		cookie := signIn(ctx, t, g, rd)
		back, err := url.Parse(rd)
		if err != nil {
			t.Fatal(err)
		}
		s := echoed(t, mustGet(ctx, t, g.url(back.RequestURI()), app(map[string]string{"Cookie": cookie})))
		if s.Path != "/echo?a=1" || s.Header("x-auth-request-user") != harness.AuthUser {
			t.Errorf("back after sign-in: the backend saw %s as %q", s.Path, s.Header("x-auth-request-user"))
		}
	})
	useAuth(ctx, t, oauth2Doc("")+page)
	each(t, func(t *testing.T, g *gw) {
		r := mustGet(ctx, t, g.url("/echo"), app(nil))
		if r.status != 401 || !strings.Contains(string(r.body), "sign_in_required") {
			t.Errorf("without signIn: status %d, body %s; want customErrors' 401 page", r.status, r.body)
		}
	})
}

// TestExtAuthFailureModes: with the service stopped, failureMode deny
// answers failureStatus (503 by default) while opted-out requests still
// pass; allow lets requests through unchecked, tells the backend so, and
// counts them in the ext_authz statistics.
func TestExtAuthFailureModes(t *testing.T) {
	ctx := setup(t)
	useAuth(ctx, t, oauth2Doc(""))
	if err := oauth2.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := oauth2.Start(context.Background()); err != nil {
			t.Errorf("restart oauth2-proxy: %v", err)
		}
	})
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), app(map[string]string{"Authorization": basic()})); r.status != 503 {
			t.Errorf("service stopped, deny: status %d, want 503: %s", r.status, r.body)
		}
		if r := mustGet(ctx, t, g.url("/.well-known/acme-challenge/x"), app(nil)); r.status != 200 {
			t.Errorf("service stopped, an opted-out path: status %d, want 200", r.status)
		}
	})
	use(ctx, t, oauth2Doc("  failureStatus: 500\n"))
	each(t, func(t *testing.T, g *gw) {
		if r := mustGet(ctx, t, g.url("/echo"), app(nil)); r.status != 500 {
			t.Errorf("service stopped, failureStatus 500: status %d", r.status)
		}
	})
	use(ctx, t, oauth2Doc("  failureMode: allow\n"))
	each(t, func(t *testing.T, g *gw) {
		before := statSum(ctx, t, g, "http.", "ext_authz.globalconfig.failure_mode_allowed")
		s := echoed(t, mustGet(ctx, t, g.url("/echo"), app(map[string]string{"x-auth-request-user": "admin"})))
		if s.Header("x-envoy-auth-failure-mode-allowed") != "true" {
			t.Errorf("service stopped, allow: the backend was not told (headers %v)", s.Headers)
		}
		if s.Has("x-auth-request-user") {
			t.Errorf("service stopped, allow: the client's own x-auth-request-user reached the backend")
		}
		if after := statSum(ctx, t, g, "http.", "ext_authz.globalconfig.failure_mode_allowed"); after != before+1 {
			t.Errorf("failure_mode_allowed went from %d to %d, want one more", before, after)
		}
	})
}

// TestExtAuthShadow: in shadow mode a request the service refuses passes,
// and the refusal is counted.
func TestExtAuthShadow(t *testing.T) {
	ctx := setup(t)
	useAuth(ctx, t, oauth2Doc("  shadow: true\n"))
	each(t, func(t *testing.T, g *gw) {
		before := statSum(ctx, t, g, "http.", "ext_authz.globalconfig.shadow_denied")
		echoed(t, mustGet(ctx, t, g.url("/echo"), app(nil)))
		if after := statSum(ctx, t, g, "http.", "ext_authz.globalconfig.shadow_denied"); after != before+1 {
			t.Errorf("shadow_denied went from %d to %d, want one more", before, after)
		}
	})
}

// TestExtAuthGRPC: Istio's sample ext_authz server over gRPC allows a
// request with x-ext-authz: allow, refuses others with 403 and its body,
// and tells the backend its verdict; opted-out paths pass without it.
func TestExtAuthGRPC(t *testing.T) {
	ctx := setup(t)
	useAuth(ctx, t, fmt.Sprintf("extAuth:\n  service: %s\n  port: %d\n  protocol: grpc\n  timeout: 1s\n  skip:\n    paths: [/.well-known/acme-challenge, /oauth2]\n", extAuthzHost, extAuthzPort))
	each(t, func(t *testing.T, g *gw) {
		r := mustGet(ctx, t, g.url("/echo"), app(nil))
		if r.status != 403 || !strings.Contains(string(r.body), "denied by ext_authz") || r.header.Get("x-ext-authz-check-result") != "denied" {
			t.Errorf("without x-ext-authz: status %d, %q: %s", r.status, r.header.Get("x-ext-authz-check-result"), r.body)
		}
		s := echoed(t, mustGet(ctx, t, g.url("/echo"), app(map[string]string{"x-ext-authz": "allow"})))
		if s.Header("x-ext-authz-check-result") != "allowed" {
			t.Errorf("allowed: the backend saw x-ext-authz-check-result %q", s.Header("x-ext-authz-check-result"))
		}
		if r := mustGet(ctx, t, g.url("/.well-known/acme-challenge/t"), app(nil)); r.status != 200 {
			t.Errorf("ACME challenge: status %d, want 200 without a check", r.status)
		}
	})
}

// TestExtAuthFromIngressNginx: an ingress-nginx ConfigMap that sends every
// request to oauth2-proxy's /oauth2/auth, with its sign-in page and
// response headers, converts into a document whose gateway does what the
// controller did: the sign-in redirect without credentials, the user's
// headers at the backend with them, ACME's challenges unchecked.
func TestExtAuthFromIngressNginx(t *testing.T) {
	ctx := setup(t)
	cm := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: ingress-nginx-controller, namespace: ingress-nginx}
data:
  global-auth-url: "http://%s:%d/oauth2/auth"
  global-auth-signin: "http://$host/oauth2/sign_in"
  global-auth-response-headers: "X-Auth-Request-User,X-Auth-Request-Groups"
  global-auth-method: "GET"
  global-auth-snippet: |
    proxy_set_header X-Api-Key "s3cr3t";
`, strings.TrimSuffix(oauth2Host, ".svc.cluster.local"), oauth2Port)
	in, err := nginx.ReadInput([]byte(cm))
	if err != nil {
		t.Fatal(err)
	}
	res, err := nginx.Convert(in, nginx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	res.Report.Write(&report)
	if strings.Contains(report.String(), "s3cr3t") || strings.Contains(string(res.Document), "s3cr3t") {
		t.Errorf("the snippet's secret is shown:\n%s", report.String())
	}
	for key, verdict := range map[string]nginx.Verdict{"global-auth-url": nginx.Converted, "global-auth-signin": nginx.Converted,
		"global-auth-response-headers": nginx.Converted, "global-auth-method": nginx.NotSupported, "global-auth-snippet": nginx.Insecure} {
		if e := res.Report.Find(key); len(e) != 1 || e[0].Verdict != verdict {
			t.Errorf("%s: %+v, want %q", key, e, verdict)
		}
	}
	useAuth(ctx, t, string(res.Document))
	each(t, func(t *testing.T, g *gw) {
		r := mustGet(ctx, t, g.url("/echo?x=1"), app(nil))
		want := "http://" + appHost + "/oauth2/sign_in?rd=http://" + appHost + "/echo?x=1"
		if r.status != 302 || r.header.Get("Location") != want {
			t.Errorf("no credentials: status %d, location %q; want 302 to %s", r.status, r.header.Get("Location"), want)
		}
		s := echoed(t, mustGet(ctx, t, g.url("/echo?x=1"), app(map[string]string{"Authorization": basic()})))
		if s.Header("x-auth-request-user") != harness.AuthUser || s.Path != "/echo?x=1" {
			t.Errorf("basic auth: the backend saw %s as %q", s.Path, s.Header("x-auth-request-user"))
		}
		if r := mustGet(ctx, t, g.url("/.well-known/acme-challenge/t"), app(nil)); r.status != 200 {
			t.Errorf("ACME challenge: status %d, want 200 (no-auth-locations' default)", r.status)
		}
		if r := mustGet(ctx, t, g.url("/oauth2/sign_in"), app(nil)); r.status != 200 {
			t.Errorf("oauth2-proxy's sign-in page: status %d, want 200 unchecked", r.status)
		}
	})
}
