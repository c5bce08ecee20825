package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/globalconfig/globalconfig/test/harness"
)

// check is one thing the banner tells the user to try, and the statuses
// it promises: the banner prints it as curl, and the sandbox's test sends
// the same requests, so what is printed is what is tested.
type check struct {
	// what the banner says the line shows.
	what string
	path string
	// cred is what the request carries for the auth service to allow
	// it; nil: nothing.
	cred *credential
	// n requests are sent, alternating the gateways (1 when 0); the
	// first n-1 answer before, the last want.
	n      int
	before int
	want   int
}

// checks are the profiles' curl lines; gateways is how many gateways
// the requests alternate.
func checks(p profiles, gateways int) []check {
	var out []check
	if p.rateLimit {
		what := fmt.Sprintf("%d requests a minute to %s in all: request %d gets 429, whichever gateway it reaches", sharedLimit, sharedPath, sharedLimit+1)
		if gateways > 1 {
			what = fmt.Sprintf("%d requests a minute to %s, shared by both gateways: request %d gets 429, though each gateway saw only %d", sharedLimit, sharedPath, sharedLimit+1, (sharedLimit+1+1)/2)
		}
		out = append(out, check{what: what, path: sharedPath, cred: p.allowed(), n: sharedLimit + 1, before: 200, want: 429})
	}
	if p.auth {
		out = append(out,
			check{what: "no credentials: oauth2-proxy refuses, 401", path: "/echo", want: 401},
			check{what: "the basic-auth user (" + harness.AuthUser + "): 200", path: "/echo", cred: basicAuth, want: 200},
		)
	}
	if p.extAuthz {
		out = append(out,
			check{what: "without x-ext-authz: allow, Istio's ext_authz sample refuses, 403", path: "/echo", want: 403},
			check{what: "with it: 200", path: "/echo", cred: allowHeader, want: 200},
		)
	}
	if p.auth || p.extAuthz {
		out = append(out, check{what: publicPath + " is opted out (extAuth.skip.paths): 200 without credentials", path: publicPath + "/page", want: 200})
	}
	return out
}

// credential is what a request carries for a profile's auth service to
// allow it: curl's flags, and the same on a Go request.
type credential struct {
	curl string
	set  func(*http.Request)
}

var (
	// basicAuth is oauth2-proxy's htpasswd user.
	basicAuth = &credential{
		curl: fmt.Sprintf("-u %s:%s", harness.AuthUser, harness.AuthPassword),
		set:  func(r *http.Request) { r.SetBasicAuth(harness.AuthUser, harness.AuthPassword) },
	}
	// allowHeader is what Istio's ext_authz sample allows.
	allowHeader = &credential{
		curl: "-H 'x-ext-authz: allow'",
		set:  func(r *http.Request) { r.Header.Set("x-ext-authz", "allow") },
	}
)

// allowed is what a request carries for the profiles' auth service to
// allow it.
func (p profiles) allowed() *credential {
	switch {
	case p.auth:
		return basicAuth
	case p.extAuthz:
		return allowHeader
	}
	return nil
}

// curl is c as a shell line against the gateways' base URLs.
func (c check) curl(urls []string) string {
	user := ""
	if c.cred != nil {
		user = c.cred.curl + " "
	}
	if c.n <= 1 {
		return fmt.Sprintf("curl -s -o /dev/null -w '%%{http_code}\\n' %s'%s%s'", user, urls[0], c.path)
	}
	ports := make([]string, len(urls))
	for i, u := range urls {
		ports[i] = u[strings.LastIndexByte(u, ':')+1:]
	}
	// Request i goes to gateway (i-1) mod len: sh, bash and zsh alike.
	pick := "p=" + ports[0]
	if len(ports) == 2 {
		pick = fmt.Sprintf("if [ $((i %% 2)) = 1 ]; then p=%s; else p=%s; fi", ports[0], ports[1])
	}
	return fmt.Sprintf(`for i in $(seq 1 %d); do %s; curl -s -o /dev/null -w "$i via :$p %%{http_code}\n" %shttp://127.0.0.1:$p%s; done`,
		c.n, pick, user, c.path)
}

// promise is what the banner says c answers.
func (c check) promise() string {
	if c.n <= 1 {
		return fmt.Sprintf("%d", c.want)
	}
	return fmt.Sprintf("1-%d: %d, %d: %d", c.n-1, c.before, c.n, c.want)
}

// result is what one request of a check got.
type result struct {
	gateway string
	status  int
}

// run sends c's requests through the gateways, in the order curl does,
// and returns an error naming each answer that differs from the promise.
func (c check) run(ctx context.Context, gateways []*gateway) ([]result, error) {
	n := max(c.n, 1)
	var got []result
	var bad []string
	for i := range n {
		g := gateways[i%len(gateways)]
		if c.n <= 1 {
			g = gateways[0]
		}
		resp, err := send(ctx, g.url()+c.path, c.cred)
		if err != nil {
			return got, fmt.Errorf("request %d through %s: %w", i+1, g.name, err)
		}
		got = append(got, result{g.name, resp.StatusCode})
		want := c.before
		if i == n-1 {
			want = c.want
		}
		if resp.StatusCode != want {
			bad = append(bad, fmt.Sprintf("request %d through %s: %d, want %d", i+1, g.name, resp.StatusCode, want))
		}
	}
	if len(bad) > 0 {
		return got, fmt.Errorf("%s (%s): %s", c.what, c.path, strings.Join(bad, "; "))
	}
	return got, nil
}

// printBanner prints where everything is and what to try.
func (p *playground) printBanner(w io.Writer) {
	kubectl, _ := harness.Binary(harness.EnvKubectl)
	k := fmt.Sprintf("%s --kubeconfig %s", kubectl, p.cluster.AdminKubeconfig)
	abs := p.ctl.Cmd.Path
	dump := p.dir + "/gateway-config-dump.json"
	g0 := p.gateways[0]
	url := g0.url()
	fmt.Fprintf(w, `
globalconfig is running against a local API server, and a real Envoy
(%s) is the ingress gateway.

  kubeconfig:      %s
  controller log:  %s
  metrics:         %s
  istiod debug:    http://%s/debug/syncz
  istiod log:      %s
  gateway:         %s  (to a backend that echoes requests; /text?n=N answers N bytes of text)
  gateway admin:   http://%s  (gateway log: %s)
`, p.envoy, p.cluster.AdminKubeconfig, p.ctl.LogPath, p.ctl.MetricsURL, p.istiod.HTTPAddr, p.istiod.LogPath, url, g0.gw.AdminAddr, g0.gw.LogPath)
	for _, g := range p.gateways[1:] {
		fmt.Fprintf(w, "  second gateway:  %s  (same labels; admin http://%s, log %s)\n", g.url(), g.gw.AdminAddr, g.gw.LogPath)
	}
	if p.rls != nil {
		fmt.Fprintf(w, "  rate limits:     envoyproxy/ratelimit as %s:%d (gRPC 127.0.0.1:%d), Redis; limits from the controller's --ratelimit-config-addr\n",
			rateLimitHost, rateLimitPort, p.rls.GRPCPort)
		fmt.Fprintf(w, "                   (service log: %s)\n", p.rls.Service.LogPath)
	}
	if p.extAuthz != nil {
		fmt.Fprintf(w, "  auth:            Istio's ext_authz sample as %s:%d (gRPC 127.0.0.1:%d): allows a request with x-ext-authz: allow (log: %s)\n",
			extAuthzHost, extAuthzPort, p.extAuthz.GRPCPort, p.extAuthz.LogPath)
	}
	if p.oauth2 != nil {
		fmt.Fprintf(w, "  auth:            oauth2-proxy as %s:%d (127.0.0.1:%d), user %s, password %s (log: %s)\n",
			oauth2Host, oauth2Port, p.oauth2.Port, harness.AuthUser, harness.AuthPassword, p.oauth2.LogPath)
	}
	fmt.Fprintf(w, `
Try, in another terminal:
  curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' '%s/text?n=4096'
                                                            # content-encoding: gzip, from the gzip item
  %s get envoyfilters -n istio-system -l app.kubernetes.io/managed-by=globalconfig
  %s edit configmap global-config -n istio-system          # change a value, save, curl again;
                                                            # a bad value is refused by the admission webhook
  %s describe configmap global-config -n istio-system      # Events: Applied / InvalidConfig
  %s status --kubeconfig %s                          # the document, the items and which proxies took the set
  %s diff -f edited.yaml --kubeconfig %s             # what applying edited.yaml would change
  %s diff -f edited.yaml --kubeconfig %s \
      --proxy %s --istiod-debug-url http://%s --envoy %s
                                                            # the gateway's own Envoy-level change, and whether its Envoy takes it
`, url, k, k, k, abs, p.cluster.AdminKubeconfig, abs, p.cluster.AdminKubeconfig,
		abs, p.cluster.AdminKubeconfig, strings.Split(g0.gw.NodeID, "~")[2], p.istiod.HTTPAddr, p.envoyBin)
	if len(p.checks) > 0 {
		urls := make([]string, len(p.gateways))
		for i, g := range p.gateways {
			urls[i] = g.url()
		}
		fmt.Fprintf(w, "\nThe profiles (WITH=%s), each line with the statuses it answers:\n", p.o.profiles)
		for _, c := range p.checks {
			fmt.Fprintf(w, "  # %s\n  %s\n                                                            # → %s\n", c.what, c.curl(urls), c.promise())
		}
	} else {
		fmt.Fprintf(w, "\nThe real rate-limit and auth services, a second gateway and curl lines for them: make run WITH=ratelimit,auth\n")
	}
	fmt.Fprintf(w, `
What the gateway's Envoy has loaded, after each edit:
  curl -s http://%s/config_dump > %s
  %s proxy-config listener --file %s
  %s proxy-config route --file %s -o json

Ctrl-C stops everything and removes %s.
`, g0.gw.AdminAddr, dump, p.istioctl, dump, p.istioctl, dump, p.dir)
}
