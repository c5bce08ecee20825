package nginx

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/items/extauth"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// The external authentication keys: global-auth-* and no-auth-locations
// become the extAuth item. ingress-nginx's defaults
// (internal/ingress/controller/config/config.go) are those of the item,
// but for the redirect parameter, which the item shares (rd).
const (
	// oauth2ProxyAuth is oauth2-proxy's auth endpoint, the usual
	// global-auth-url path; it answers 202 to a signed-in request, which
	// Envoy's HTTP ext_authz does not take for a yes.
	oauth2ProxyAuth = "/oauth2/auth"
	// oauth2ProxyPages are oauth2-proxy's own pages (sign-in, callback).
	oauth2ProxyPages = "/oauth2"
)

// authKeys are the keys that configure global-auth-url, in the report's
// words when the URL is missing.
var authKeys = []string{
	"global-auth-method", "global-auth-signin", "global-auth-signin-redirect-param", "global-auth-response-headers",
	"global-auth-request-redirect", "global-auth-cache-key", "global-auth-cache-duration", "global-auth-always-set-cookie",
}

func (c *converter) extAuth() {
	authURL := c.get("global-auth-url", "")
	vs := map[string]value{}
	for _, k := range authKeys {
		vs[k] = c.get(k, "")
	}
	vs["global-auth-signin-redirect-param"] = c.get("global-auth-signin-redirect-param", extauth.DefaultRedirectParam)
	vs["global-auth-always-set-cookie"] = c.get("global-auth-always-set-cookie", "false")
	noAuth := c.get("no-auth-locations", extauth.ACMEChallenge)
	if v := c.get("enable-global-auth", ""); v.set {
		c.report.AddValue(v.key, shownRaw(v.raw), Unknown, "ingress-nginx does not read this key from its ConfigMap: it is the Ingress annotation nginx.ingress.kubernetes.io/enable-global-auth, which the conversion does not read; an Ingress that set it to \"false\" took its paths out of global-auth-url: list its hosts in extAuth.skip.hosts or its paths in extAuth.skip.paths")
	}
	rest := make([]value, 0, len(authKeys))
	for _, k := range authKeys {
		rest = append(rest, vs[k])
	}
	if authURL.raw == "" {
		if authURL.set {
			c.report.AddValue(authURL.key, `""`, DefaultAlready, "empty: no external authentication, as without the key")
		}
		for _, v := range rest {
			c.verdict(v, NotNeeded, "read only with global-auth-url, which is not set")
		}
		c.verdict(noAuth, NotNeeded, "exempts paths from external authentication, and global-auth-url is not set (the Ingress auth-url annotations it also exempts from are not converted)")
		return
	}
	svc, ok := c.authService(authURL)
	if !ok {
		c.notCarried("global-auth-url was not converted, so no extAuth section is written for this key to go with", append(rest, noAuth)...)
		return
	}
	c.write("extAuth.service", out.Str(svc.host), "global-auth-url: "+out.Cut(authURL.raw, maxShownValue))
	c.write("extAuth.port", out.Int(svc.port), "")
	detail := fmt.Sprintf("→ extAuth.service: %s, port: %d", svc.host, svc.port)
	switch {
	case svc.path == oauth2ProxyAuth:
		c.write("extAuth.pathPrefix", out.Str(svc.path), "oauth2-proxy: run it with --upstream=static://200 (see the report)")
		detail += fmt.Sprintf(", pathPrefix: %s. Envoy allows a request only when the service answers 200 (nginx: any 2xx), and oauth2-proxy's %s answers 202: the check goes to %s followed by the request's path, which oauth2-proxy proxies, so run oauth2-proxy with --upstream=static://200 and that answers 200 for a signed-in user", svc.path, svc.path, svc.path)
	case svc.path != "":
		c.write("extAuth.path", out.Str(svc.path), "")
		detail += fmt.Sprintf(", path: %s (Istio 1.30 or newer). Envoy allows a request only when the service answers 200 (nginx: any 2xx)", svc.path)
	default:
		detail += ". The check goes to the request's own path; Envoy allows a request only when the service answers 200 (nginx: any 2xx)"
	}
	detail += svc.note
	detail += ". It is sent with the request's own method and headers (nginx: GET and every header, unless global-auth-method). When the service can't be reached, times out or answers 5xx, the client gets 500, as from nginx (failureStatus); any other answer but 200 goes to the client as it is (nginx: 401 and 403 did, others became 500)"
	c.write("extAuth.failureStatus", out.Int(500), "ingress-nginx answered 500 when the auth service failed")
	c.report.AddValue(authURL.key, out.Cut(authURL.raw, maxShownValue), Converted, detail)

	// What nginx always sent the service, beside the request's headers:
	// written as ingress-nginx's built-in default (not with
	// --no-nginx-defaults), but a global-auth-request-redirect of the
	// ConfigMap's own.
	builtIn := !c.opts.NoDefaults
	var headers [][2]*yaml.Node
	redirectShown := "$request_uri (the default)"
	if v := vs["global-auth-request-redirect"]; v.raw != "" {
		t := translate(escapedURI(v.raw))
		if len(t.missing) > 0 {
			c.report.AddValue(v.key, shownRaw(v.raw), NotSupported, fmt.Sprintf("%s have no Envoy equivalent; x-auth-request-redirect carries the request's path instead, nginx's default", strings.Join(t.missing, ", ")))
		} else {
			headers = append(headers, out.Pair("x-auth-request-redirect", out.Str(t.text)))
			redirectShown = v.raw
			c.report.AddValue(v.key, shownRaw(v.raw), Converted, "→ extAuth.addHeaders.x-auth-request-redirect: "+t.text+suffix(strings.Join(t.notes, "; ")))
		}
	}
	if builtIn {
		if len(headers) == 0 {
			headers = append(headers, out.Pair("x-auth-request-redirect", out.Str("%REQ(:path)%")))
		}
		headers = append(headers, out.Pair("x-original-method", out.Str("%REQ(:method)%")))
		headers = append(headers, out.Pair("x-original-url", out.Str(extauth.OriginalURL)))
	}
	if len(headers) > 0 {
		c.write("extAuth.addHeaders", out.Mapping(headers...), "what ingress-nginx sent its auth service besides the request's headers")
	}
	const builtInKey, builtInRaw = "(built in) X-Original-URL", "$scheme://$http_host$request_uri"
	if builtIn {
		c.report.AddValue(builtInKey, builtInRaw, DefaultWritten, "→ extAuth.addHeaders: x-original-url, x-original-method and x-auth-request-redirect ("+redirectShown+"), which ingress-nginx always sent the auth service")
	} else {
		c.report.AddValue(builtInKey, builtInRaw, DefaultSkipped, "not written; the auth service gets no x-original-url, x-original-method or x-auth-request-redirect, which ingress-nginx always sent it")
	}

	c.authMethod(vs["global-auth-method"])
	pages := c.authSignIn(vs["global-auth-signin"], vs["global-auth-signin-redirect-param"], noAuth)
	c.authResponseHeaders(vs["global-auth-response-headers"])
	if v := vs["global-auth-cache-key"]; v.raw != "" {
		c.report.AddValue(v.key, shownRaw(v.raw), NotSupported, "Envoy's ext_authz filter caches nothing: every request not opted out is checked, so the auth service sees every request")
		c.verdict(vs["global-auth-cache-duration"], NotSupported, "see global-auth-cache-key")
	} else {
		c.verdict(v, DefaultAlready, "empty: nothing cached, as by Envoy")
		c.verdict(vs["global-auth-cache-duration"], NotNeeded, "read only with global-auth-cache-key")
	}
	cookie := vs["global-auth-always-set-cookie"]
	switch always := c.boolean(cookie); {
	case always:
		c.report.AddValue(cookie.key, cookie.raw, Converted, "→ extAuth.clientHeadersOnSuccess (its default, set-cookie): the service's set-cookie reaches the client with every response of a request it allowed, as by nginx with true")
	default:
		c.verdict(cookie, Converted, "→ extAuth.clientHeadersOnSuccess (its default, set-cookie): the service's set-cookie reaches the client with every response of a request it allowed; nginx added it to 2xx and 3xx responses only, and Envoy can't tell the backend's status when it adds it")
	}
	c.noAuthLocations(noAuth, pages)
}

// authTarget is the auth service global-auth-url names.
type authTarget struct {
	host string
	port int
	path string
	note string
}

// authService reads global-auth-url. A URL that names no service Istio
// knows is reported not supported.
func (c *converter) authService(v value) (authTarget, bool) {
	if isPlaceholder(v.raw) {
		c.report.AddValue(v.key, out.Cut(v.raw, maxShownValue), NotSupported, "a template placeholder, not a URL: convert the ConfigMap as it is deployed (helm template, or after your pipeline substitutes the value)")
		return authTarget{}, false
	}
	u, err := url.Parse(v.raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		c.probs.Addf(v.key, "must be an http or https URL, got %q", out.Cut(v.raw, 100))
		return authTarget{}, false
	}
	host := strings.ToLower(u.Hostname())
	if _, err := netip.ParseAddr(host); err == nil {
		c.report.AddValue(v.key, out.Cut(v.raw, maxShownValue), NotSupported, "an address: extAuth calls a service Istio knows (a Service, or a ServiceEntry for one outside the cluster); give its host name")
		return authTarget{}, false
	}
	if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(host, ".")); len(msgs) > 0 {
		c.report.AddValue(v.key, out.Cut(v.raw, maxShownValue), NotSupported, "its host is not a host name: "+msgs[0])
		return authTarget{}, false
	}
	t := authTarget{host: strings.TrimSuffix(host, "."), path: strings.TrimRight(u.EscapedPath(), "/")}
	switch parts := strings.Split(t.host, "."); {
	case strings.HasSuffix(t.host, ".svc.cluster.local"):
	case len(parts) == 1:
		t.host = fmt.Sprintf("%s.%s.svc.cluster.local", t.host, c.in.Namespace)
		t.note = "; a short name, which nginx resolved in its own namespace " + c.in.Namespace
	case len(parts) == 2 || len(parts) == 3 && parts[2] == "svc":
		t.host = fmt.Sprintf("%s.%s.svc.cluster.local", parts[0], parts[1])
		t.note = "; the service's full name in a cluster whose domain is cluster.local"
	default:
		t.note = "; a host outside the cluster: Istio needs a ServiceEntry for it"
	}
	t.port = 80
	if u.Scheme == "https" {
		t.port = 443
		t.note += "; nginx spoke TLS to it: Istio's connection to the service is mutual TLS within the mesh, and needs a DestinationRule with tls.mode SIMPLE for a service outside it"
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			c.probs.Addf(v.key, "has no valid port, got %q", p)
			return authTarget{}, false
		}
		t.port = n
	}
	if u.RawQuery != "" {
		t.note += "; its query (" + out.Cut(u.RawQuery, 60) + ") is not sent: Envoy's check carries the request's own query (with pathPrefix) or none (with path)"
	}
	return t, true
}

// escapedURI stands $escaped_request_uri, which nginx percent-encodes, for
// the request's path: Envoy's formatter can't encode.
func escapedURI(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "${escaped_request_uri}", "$request_uri"), "$escaped_request_uri", "$request_uri")
}

func (c *converter) authMethod(v value) {
	if v.raw == "" {
		c.verdict(v, DefaultAlready, "empty: see global-auth-url for the method Envoy sends")
		return
	}
	c.report.AddValue(v.key, shownRaw(v.raw), NotSupported, "Envoy sends every check with the request's own method and can't be told another (it refuses to set :method); the auth service must answer every method (oauth2-proxy does)")
}

// authSignIn converts the sign-in URL; it reports whether the URL is
// oauth2-proxy's sign-in on the gateway's own hosts, whose pages must then
// pass unchecked.
func (c *converter) authSignIn(v, param value, noAuth value) bool {
	if v.raw == "" {
		c.verdict(v, DefaultAlready, "empty: the service's 401 goes to the client, as from nginx")
		c.verdict(param, NotNeeded, "read only with global-auth-signin")
		return false
	}
	t := translate(escapedURI(v.raw))
	switch {
	case len(t.missing) > 0:
		c.report.AddValue(v.key, shownRaw(v.raw), NotSupported, fmt.Sprintf("%s have no Envoy equivalent, so the sign-in URL can't be built: the service's 401 goes to the client", strings.Join(t.missing, ", ")))
		c.notCarried("global-auth-signin was not converted, so there is no signIn for this key to go with", param)
		return false
	case !strings.HasPrefix(t.text, "http://") && !strings.HasPrefix(t.text, "https://") && !strings.HasPrefix(t.text, "/"):
		c.probs.Addf(v.key, "must be an http or https URL, got %q", out.Cut(v.raw, 100))
		return false
	}
	c.write("extAuth.signIn.url", out.Str(t.text), "global-auth-signin: "+out.Cut(v.raw, maxShownValue))
	rd := param.raw
	if rd == "" {
		rd = extauth.DefaultRedirectParam
	}
	s := extauth.SignIn{URL: t.text, RedirectParam: rd}
	detail := "→ extAuth.signIn: a 401 from the service becomes a 302 to " + s.Location()
	if strings.Contains(v.raw, "escaped_request_uri") || !strings.Contains(s.URL, "?"+rd+"=") && !strings.Contains(s.URL, "&"+rd+"=") {
		detail += ", as from nginx, but with the original URL as it arrived: Envoy can't percent-encode it, so of a query with several parameters only the first comes back after sign-in, and the sign-in service must check where it redirects to (oauth2-proxy's --whitelist-domain), as it had to with nginx"
	}
	if len(t.notes) > 0 {
		detail += "; " + strings.Join(t.notes, "; ")
	}
	c.report.AddValue(v.key, shownRaw(v.raw), Converted, detail)
	if param.set {
		if !extauth.ValidRedirectParam(param.raw) {
			c.probs.Addf(param.key, "must be a query parameter name, got %q", out.Cut(param.raw, 100))
			return false
		}
		c.write("extAuth.signIn.redirectParam", out.Str(param.raw), "")
		c.report.AddValue(param.key, param.raw, Converted, "→ extAuth.signIn.redirectParam: "+param.raw)
	}
	// oauth2-proxy's own sign-in pages must pass unchecked, or signing in
	// itself needs a sign-in: ingress-nginx users exempted the
	// oauth2-proxy Ingress with enable-global-auth: "false", which the
	// conversion can't read.
	u, err := url.Parse(strings.NewReplacer("%REQ(:AUTHORITY)%", "host", "%REQ(X-FORWARDED-PROTO)%", "http").Replace(t.text))
	if err == nil && (u.Host == "" || u.Host == "host") && (u.Path == oauth2ProxyPages || strings.HasPrefix(u.Path, oauth2ProxyPages+"/")) && !slices.Contains(list(noAuth), oauth2ProxyPages) {
		c.report.AddValue("(oauth2-proxy's pages)", oauth2ProxyPages, Converted, "→ extAuth.skip.paths: /oauth2 added: the sign-in page is oauth2-proxy's, on the gateway's own hosts, and must pass unchecked; ingress-nginx users exempt oauth2-proxy's Ingress with the enable-global-auth: \"false\" annotation, which the conversion does not read. Route /oauth2 of each host to oauth2-proxy with a VirtualService")
		return true
	}
	return false
}

func (c *converter) authResponseHeaders(v value) {
	var nodes []*yaml.Node
	var dropped []string
	for _, n := range list(v) {
		// ingress-nginx takes header names of letters, digits, - and _
		// (authreq.ValidHeader) and skips the rest.
		if !headerName.MatchString(n) {
			dropped = append(dropped, strconv.Quote(out.Cut(n, 60)))
			continue
		}
		nodes = append(nodes, out.Str(strings.ToLower(n)))
	}
	if len(dropped) > 0 {
		c.report.AddValue(v.key+" (not carried)", strings.Join(dropped, ", "), NotSupported, "not header names: ingress-nginx skipped them too")
	}
	if len(nodes) == 0 {
		c.verdict(v, DefaultAlready, "names no header: no header of the service's answer reaches the backend")
		return
	}
	c.write("extAuth.upstreamHeaders", &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: nodes}, "global-auth-response-headers")
	c.report.AddValue(v.key, shownRaw(v.raw), Converted, "→ extAuth.upstreamHeaders: these headers of the service's 200 answer go to the backend, replacing any the client sent, as by nginx")
}

// headerName is a header name ingress-nginx's auth keys take.
var headerName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// noAuthLocations writes skip.paths. nginx compared each entry with the
// paths of Ingresses by string prefix; the item compares it with each
// request's path, by whole segments.
func (c *converter) noAuthLocations(v value, oauth2Pages bool) {
	var keep, refused []string
	for _, p := range list(v) {
		p = strings.TrimRight(p, "/")
		switch {
		case p == "":
			refused = append(refused, `"/" (every path)`)
		case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "%;\\?# ") || strings.Contains(p, "//"):
			refused = append(refused, strconv.Quote(out.Cut(p, 80)))
		case !slices.Contains(keep, p):
			keep = append(keep, p)
		}
	}
	if oauth2Pages && !slices.Contains(keep, oauth2ProxyPages) {
		keep = append(keep, oauth2ProxyPages)
	}
	switch {
	case !v.set && !oauth2Pages:
		c.report.AddValue(v.key, v.raw, DefaultAlready, "extAuth.skip.paths' default is the same: ACME's HTTP-01 challenges pass unchecked")
		return
	case len(keep) == 0 && len(refused) == 0:
		c.write("extAuth.skip.paths", &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}, "no-auth-locations: \"\"")
		c.report.AddValue(v.key, `""`, Converted, "→ extAuth.skip.paths: []: every request is checked, ACME's challenges too, as by nginx")
		return
	}
	nodes := make([]*yaml.Node, 0, len(keep))
	for _, p := range keep {
		nodes = append(nodes, out.Str(p))
	}
	c.write("extAuth.skip.paths", &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: nodes}, "no-auth-locations")
	detail := "→ extAuth.skip.paths: requests whose path is one of these or below it pass unchecked; a prefix is of whole segments here (/api skips /api/x, not /apis), matched on each request's normalized path, where nginx compared it with the paths of Ingresses as a string"
	if !v.set {
		detail = "→ extAuth.skip.paths: the default, written beside /oauth2"
	}
	c.report.AddValue(v.key, shownRaw(v.raw), Converted, detail)
	if len(refused) > 0 {
		c.report.AddValue(v.key+" (not carried)", strings.Join(refused, ", "), NotSupported, "not a path prefix the item can skip safely (an escape, ;, a query, or every path): those locations are checked")
	}
}
