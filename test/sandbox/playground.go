package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The services the profiles put in the mesh, under the hosts and ports
// the example document names (deploy/examples).
const (
	rateLimitHost = "ratelimit.ratelimit.svc.cluster.local"
	rateLimitPort = 8081
	oauth2Host    = "oauth2-proxy.oauth2-proxy.svc.cluster.local"
	oauth2Port    = 4180
	extAuthzHost  = "ext-authz.ext-authz.svc.cluster.local"
	extAuthzPort  = 9000
)

// The playground's limit and opt-out, which the banner's curl lines show.
const (
	// sharedLimit requests a minute to sharedPath, counted across both
	// gateways by the one rate-limit service.
	sharedLimit = 10
	sharedPath  = "/limited"
	// publicPath is opted out of extAuth: it passes without credentials.
	publicPath = "/public"
)

// gatewayLabels are the labels every sandbox gateway has: an ingress
// gateway's, which the example's default target selects. Each gateway
// also has its own name under "gateway", which its Gateway object and
// loopback EnvoyFilter select.
var gatewayLabels = map[string]string{"istio": "ingressgateway"}

// gateway is one Envoy gateway of the sandbox.
type gateway struct {
	name string
	port int
	gw   *harness.EnvoyGateway
}

func (g *gateway) url() string { return fmt.Sprintf("http://127.0.0.1:%d", g.port) }

func (g *gateway) labels() map[string]string {
	l := map[string]string{"gateway": g.name}
	for k, v := range gatewayLabels {
		l[k] = v
	}
	return l
}

// playground is a running sandbox: what the banner prints and the test
// checks.
type playground struct {
	o        options
	dir      string
	gateways []*gateway
	cluster  *harness.Cluster
	istiod   *harness.Istiod
	ctl      *harness.Controller
	envoy    string // Envoy's version
	envoyBin string
	istioctl string
	rls      *harness.RateLimitService
	oauth2   *harness.OAuth2Proxy
	extAuthz *harness.ExtAuthz
	checks   []check
	started  time.Time
}

// step prints what the sandbox starts now, and when.
func (p *playground) step(format string, args ...any) {
	fmt.Fprintf(p.o.out, "%5.1fs  %s\n", time.Since(p.started).Seconds(), fmt.Sprintf(format, args...))
}

// start starts everything; stop (never nil) stops what started, in
// reverse order.
func start(ctx context.Context, o options, dir string) (_ *playground, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stops = nil
	}
	p := &playground{o: o, dir: dir, started: time.Now()}
	if p.istioctl, err = harness.Binary(harness.EnvIstioctl); err != nil {
		return nil, stop, err
	}
	if _, err := harness.Binary(harness.EnvPilotDiscovery); err != nil {
		return nil, stop, err
	}
	envoy, err := harness.EnvoyBinary(ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		return nil, stop, err
	}
	p.envoy, p.envoyBin = envoy.Version, envoy.Path
	if o.profiles.rateLimit {
		if _, err := harness.Binary("GLOBALCONFIG_RATELIMIT"); err != nil {
			return nil, stop, fmt.Errorf("WITH=ratelimit: %w", err)
		}
		if _, err := harness.Binary("GLOBALCONFIG_REDIS"); err != nil {
			return nil, stop, fmt.Errorf("WITH=ratelimit: %w", err)
		}
	}
	if o.profiles.auth {
		if _, err := harness.Binary(harness.EnvOAuth2Proxy); err != nil {
			return nil, stop, fmt.Errorf("WITH=auth: %w", err)
		}
	}
	if o.profiles.extAuthz {
		if _, err := harness.Binary(harness.EnvExtAuthz); err != nil {
			return nil, stop, fmt.Errorf("WITH=extauthz: %w", err)
		}
	}
	backend, err := harness.StartBackend()
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, backend.Close)
	// The example's tracing sends spans to zipkin.istio-system:9411. Envoy
	// refuses a listener whose tracer names a cluster that doesn't exist,
	// so the sandbox runs a collector there.
	zipkin, err := harness.StartCollector()
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, zipkin.Close)
	p.step("starting etcd and kube-apiserver in %s ...", dir)
	cluster, err := harness.StartCluster(ctx, dir)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, cluster.Stop)
	p.cluster = cluster
	webhookPort, err := harness.FreePort()
	if err != nil {
		return nil, stop, err
	}
	if err := cluster.CreateWebhookConfig(ctx, fmt.Sprintf("https://127.0.0.1:%d/validate", webhookPort), harness.Namespace, harness.ConfigMapName); err != nil {
		return nil, stop, err
	}
	names := []string{"ingressgateway"}
	if o.profiles.rateLimit {
		// A second gateway shows that a global limit is shared.
		names = append(names, "ingressgateway-2")
	}
	for _, name := range names {
		port, err := harness.FreePort()
		if err != nil {
			return nil, stop, err
		}
		p.gateways = append(p.gateways, &gateway{name: name, port: port})
	}
	if err := createMesh(ctx, cluster, p.gateways, backend, zipkin); err != nil {
		return nil, stop, err
	}
	if o.profiles.auth {
		p.step("starting oauth2-proxy (user %s) ...", harness.AuthUser)
		if p.oauth2, err = harness.StartOAuth2Proxy(ctx, dir, "127.0.0.1:*"); err != nil {
			return nil, stop, err
		}
		stops = append(stops, p.oauth2.Kill)
		if err := cluster.CreateLoopbackService(ctx, oauth2Host, oauth2Port, p.oauth2.Port); err != nil {
			return nil, stop, fmt.Errorf("oauth2-proxy service entry: %w", err)
		}
	}
	if o.profiles.extAuthz {
		p.step("starting Istio's ext_authz sample ...")
		if p.extAuthz, err = harness.StartExtAuthz(ctx, dir); err != nil {
			return nil, stop, err
		}
		stops = append(stops, p.extAuthz.Kill)
		if err := cluster.CreateLoopbackService(ctx, extAuthzHost, extAuthzPort, p.extAuthz.GRPCPort); err != nil {
			return nil, stop, fmt.Errorf("ext_authz service entry: %w", err)
		}
	}
	sds, err := startSDS(dir)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, sds.Close)
	// istiod first: the controller is told its debug address.
	p.step("starting istiod ...")
	if p.istiod, err = cluster.StartIstiodWith(ctx, harness.UpstreamEnvoyIstiod("istiod")); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = p.istiod.Stop(10 * time.Second) })
	// The controller follows the rollout of each new set of EnvoyFilters
	// through this istiod's sync status.
	args := []string{fmt.Sprintf("--webhook-addr=127.0.0.1:%d", webhookPort), "--webhook-hosts=127.0.0.1",
		"--istiod-debug-url=http://" + p.istiod.HTTPAddr}
	var rlsConfigAddr string
	if o.profiles.rateLimit {
		port, err := harness.FreePort()
		if err != nil {
			return nil, stop, err
		}
		rlsConfigAddr = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "--ratelimit-config-addr="+rlsConfigAddr)
	}
	abs, err := filepath.Abs(o.controller)
	if err != nil {
		return nil, stop, err
	}
	p.step("starting the controller: %s %s", abs, strings.Join(args, " "))
	if p.ctl, err = cluster.StartController(abs, "globalconfig", args...); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = p.ctl.Stop(10 * time.Second) })
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return p.ctl.Ready(ctx) }) {
		return nil, stop, fmt.Errorf("the controller did not become ready:\n%s", p.ctl.Log(4000))
	}
	var rlsPort int
	if o.profiles.rateLimit {
		// The service is in the mesh before the document names it.
		if rlsPort, err = harness.FreePort(); err != nil {
			return nil, stop, err
		}
		if err := cluster.CreateLoopbackService(ctx, rateLimitHost, rateLimitPort, rlsPort); err != nil {
			return nil, stop, fmt.Errorf("rate-limit service entry: %w", err)
		}
	}
	for i, g := range p.gateways {
		p.step("starting the gateway %s: Envoy %s on %s ...", g.name, envoy.Version, g.url())
		g.gw, err = cluster.StartEnvoyGateway(ctx, p.istiod, harness.GatewayOptions{
			Name: g.name, Binary: envoy, IP: fmt.Sprintf("10.1.1.%d", i+1), Labels: g.labels(),
			Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
		})
		if err != nil {
			return nil, stop, err
		}
		gw := g.gw
		stops = append(stops, func() { _ = gw.Stop(5 * time.Second) })
	}
	// The gateways are up before the document: the controller's first
	// rollout then finds them, not an empty mesh.
	for _, g := range p.gateways {
		if !harness.Eventually(ctx, 60*time.Second, func() bool {
			r, err := send(ctx, g.url()+"/echo", nil)
			return err == nil && r.StatusCode == http.StatusOK
		}) {
			return nil, stop, fmt.Errorf("the gateway %s does not serve %s:\n%s", g.name, g.url(), g.gw.Log(4000))
		}
	}
	// The document goes through the admission webhook, as a user's edit.
	p.step("applying the global ConfigMap (WITH=%s) ...", o.profiles)
	cm, err := configMap(o.profiles)
	if err != nil {
		return nil, stop, err
	}
	if out, err := cluster.Kubectl(ctx, cm, "apply", "-f", "-"); err != nil {
		return nil, stop, fmt.Errorf("apply the global ConfigMap: %w: %s", err, out)
	}
	if o.profiles.rateLimit {
		// The service reads its limits from the controller, which serves
		// them once it has applied the document's EnvoyFilters.
		p.step("starting Redis and the rate-limit service, configured by the controller at %s ...", rlsConfigAddr)
		if p.rls, err = harness.StartRateLimitServiceFrom(ctx, dir, rlsConfigAddr, rlsPort); err != nil {
			return nil, stop, err
		}
		stops = append(stops, p.rls.Close)
	}
	p.checks = checks(o.profiles, len(p.gateways))
	p.step("waiting until the gateways serve what the banner shows ...")
	for _, g := range p.gateways {
		if !harness.Eventually(ctx, 60*time.Second, func() bool { return p.serves(ctx, g) }) {
			return nil, stop, fmt.Errorf("the gateway %s does not serve %s:\n%s", g.name, g.url(), g.gw.Log(4000))
		}
	}
	p.step("waiting until the controller's status says the gateways took the set ...")
	// Ready when the controller's status says the gateways took its set.
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return synced(ctx, cluster, len(p.gateways)) }) {
		return nil, stop, fmt.Errorf("the gateways did not take the document's EnvoyFilters:\n%s", p.gateways[0].gw.Log(4000))
	}
	return p, stop, nil
}

// serves tells whether g serves what the banner promises: the backend,
// and, with the profiles, the rate-limit service's answer (its headers)
// and the auth service's refusal without credentials.
func (p *playground) serves(ctx context.Context, g *gateway) bool {
	r, err := send(ctx, g.url()+"/echo", p.o.profiles.allowed())
	if err != nil || r.StatusCode != http.StatusOK {
		return false
	}
	if p.o.profiles.rateLimit && r.Header.Get("x-ratelimit-limit") == "" {
		return false
	}
	if p.o.profiles.auth || p.o.profiles.extAuthz {
		r, err := send(ctx, g.url()+"/echo", nil)
		if err != nil || r.StatusCode != http.StatusUnauthorized && r.StatusCode != http.StatusForbidden {
			return false
		}
	}
	return true
}

// send makes a GET carrying cred (none when nil) and returns the
// response, its body read and closed.
func send(ctx context.Context, url string, cred *credential) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if cred != nil {
		cred.set(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// synced tells whether the status ConfigMap says every proxy the applied
// set reaches took it, and that it reaches the sandbox's gateways.
func synced(ctx context.Context, cluster *harness.Cluster, gateways int) bool {
	st, err := cluster.Status(ctx)
	return err == nil && st.Applied != nil && st.Rollout != nil && st.Rollout.Version == st.Applied.Hash &&
		st.Rollout.Selected >= gateways && st.Rollout.Synced == st.Rollout.Selected
}

// wait runs until ctx ends or a component exits.
func (p *playground) wait(ctx context.Context, out io.Writer) error {
	done := []struct {
		what string
		p    *harness.Process
	}{{"the controller", p.ctl.Process}, {"istiod", p.istiod.Process}}
	for _, g := range p.gateways {
		done = append(done, struct {
			what string
			p    *harness.Process
		}{"the gateway " + g.name, g.gw.Process})
	}
	if p.rls != nil {
		done = append(done, struct {
			what string
			p    *harness.Process
		}{"the rate-limit service", p.rls.Service}, struct {
			what string
			p    *harness.Process
		}{"redis", p.rls.Redis})
	}
	if p.oauth2 != nil {
		done = append(done, struct {
			what string
			p    *harness.Process
		}{"oauth2-proxy", p.oauth2.Process})
	}
	if p.extAuthz != nil {
		done = append(done, struct {
			what string
			p    *harness.Process
		}{"the ext_authz sample", p.extAuthz.Process})
	}
	exited := make(chan int, len(done))
	for i, d := range done {
		go func() {
			select {
			case <-d.p.Done():
				exited <- i
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nstopping ...")
		return nil
	case i := <-exited:
		return fmt.Errorf("%s exited:\n%s", done[i].what, done[i].p.Log(4000))
	}
}

// startSDS serves the gateways' workload certificate as istio-agent
// would (the backend's cluster names it for Istio mTLS).
func startSDS(dir string) (*harness.SDSServer, error) {
	cert, key, err := harness.SelfSigned("gateway.sandbox")
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "gateway-cert.pem"), filepath.Join(dir, "gateway-key.pem")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return nil, err
	}
	return harness.StartSDS(certFile, keyFile)
}

// createMesh creates, for each gateway, an ingress Gateway (an HTTP server
// on its port, moved to 127.0.0.1); ServiceEntries putting the backend and
// the zipkin collector in the mesh; and a VirtualService routing every
// host to the backend.
func createMesh(ctx context.Context, cluster *harness.Cluster, gateways []*gateway, backend *harness.Backend, zipkin *harness.Collector) error {
	var names []string
	for i, g := range gateways {
		name := "ingress"
		if i > 0 {
			name = fmt.Sprintf("ingress-%d", i+1)
		}
		names = append(names, name)
		selector := map[string]string{"gateway": g.name}
		obj := &clientnetworkingv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.Namespace},
			Spec: networkingv1.Gateway{
				Selector: selector,
				Servers: []*networkingv1.Server{{
					Port:  &networkingv1.Port{Number: uint32(g.port), Name: "http", Protocol: "HTTP"},
					Hosts: []string{"*"},
				}},
			},
		}
		if _, err := cluster.Istio.NetworkingV1().Gateways(harness.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create gateway %s: %w", name, err)
		}
		lo, err := harness.LoopbackListeners("sandbox-loopback-"+g.name, selector, "127.0.0.1", uint32(g.port))
		if err != nil {
			return err
		}
		if err := cluster.Apply(ctx, lo); err != nil {
			return fmt.Errorf("loopback EnvoyFilter for %s: %w", g.name, err)
		}
	}
	if err := cluster.CreateLoopbackService(ctx, "backend.sandbox", 8080, backend.Addr.Port); err != nil {
		return fmt.Errorf("backend service entry: %w", err)
	}
	if err := cluster.CreateLoopbackService(ctx, "zipkin.istio-system.svc.cluster.local", 9411, zipkin.Addr.Port); err != nil {
		return fmt.Errorf("zipkin service entry: %w", err)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend", Namespace: harness.Namespace},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{"*"},
			Gateways: names,
			Http: []*networkingv1.HTTPRoute{{Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
				Host: "backend.sandbox", Port: &networkingv1.PortSelector{Number: 8080},
			}}}}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(harness.Namespace).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create virtual service: %w", err)
	}
	return nil
}

// configMap is the global ConfigMap the sandbox applies: the example's,
// with the sections of services the sandbox doesn't run left out
// (globalRateLimit, extAuth and extProc name Services of a real cluster;
// extProc's, missing, would fail every request closed), basicAuth's
// password wall left out too (the banner's curl lines carry no password,
// and WITH=auth's oauth2-proxy asks for its own), and the profiles' own
// sections for the services they start.
func configMap(p profiles) ([]byte, error) {
	file := filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	doc, ok := cm.Data[document.DataKey]
	if !ok {
		return nil, fmt.Errorf("%s: no %s in its data", file, document.DataKey)
	}
	doc = withoutSections(doc, "globalRateLimit", "extAuth", "extProc", "basicAuth")
	if p.rateLimit {
		doc += rateLimitSection
	}
	if p.auth {
		doc += authSection
	}
	if p.extAuthz {
		doc += extAuthzSection
	}
	cm.Data[document.DataKey] = doc
	return yaml.Marshal(&cm)
}

// The profiles' sections of the document.
var (
	rateLimitSection = fmt.Sprintf(`globalRateLimit:
  # WITH=ratelimit: envoyproxy/ratelimit on loopback, its limits served by
  # the controller (--ratelimit-config-addr).
  service: %s
  port: %d
  rateLimitHeaders: true
  limits:
    per-client:                 # every client: 600 requests a minute, across the gateways
      requests: 600
      unit: minute
      perClient: true
    shared:                     # %s: %d requests a minute in all, across the gateways
      requests: %d
      unit: minute
      match: {pathPrefix: %s}
`, rateLimitHost, rateLimitPort, sharedPath, sharedLimit, sharedLimit, sharedPath)
	authSection = fmt.Sprintf(`extAuth:
  # WITH=auth: oauth2-proxy on loopback checks every request (basic auth,
  # user %s); the skipped paths and host pass unchecked.
  service: %s
  port: %d
  upstreamHeaders: [x-auth-request-*]   # the user and groups, to the backends
  skip:
    paths: [/.well-known/acme-challenge, /oauth2, %s]
    hosts: [status.example.com]
`, harness.AuthUser, oauth2Host, oauth2Port, publicPath)
	extAuthzSection = fmt.Sprintf(`extAuth:
  # WITH=extauthz: Istio's ext_authz sample on loopback checks every request
  # over gRPC (it allows x-ext-authz: allow); the skipped paths and host
  # pass unchecked.
  service: %s
  port: %d
  protocol: grpc
  skip:
    paths: [/.well-known/acme-challenge, %s]
    hosts: [status.example.com]
`, extAuthzHost, extAuthzPort, publicPath)
)

// withoutSections removes top-level keys from a document, with their
// lines up to the next top-level key or comment.
func withoutSections(doc string, keys ...string) string {
	var out []string
	skipping := false
	for _, line := range strings.SplitAfter(doc, "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\n' {
			skipping = false
			for _, k := range keys {
				if strings.HasPrefix(line, k+":") {
					skipping = true
				}
			}
		}
		if !skipping {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
