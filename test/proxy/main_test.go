// Package proxy makes a real Envoy the judge: Envoy gateways of the
// newest and the oldest Envoy release our istiod serves connect to a real
// istiod over ADS, load what globalconfig generates, and serve live
// traffic to a backend on loopback. Tests read the gateways' own admin
// (config dump, stats) and send requests through them; nothing here trusts
// istiod's view of what a proxy has.
//
// The setup differs from a production istio-proxy in three ways, each
// documented in test/proxy/README.md: the Envoys are the
// official upstream builds (the test istiod is started with Istio's own
// extensions switched off, harness.UpstreamEnvoyIstiod), they connect to
// istiod's plaintext port directly instead of through istio-agent, and
// their gateway certificate comes from a file served by sdsServer instead
// of a credentialName secret.
package proxy

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/test/harness"
)

const ns = harness.Namespace

// gw is one Envoy gateway of the suite: its own Gateway object binds its
// listeners to its own loopback address, so the two Envoys never share a
// socket and a request reaches the Envoy it names.
type gw struct {
	name string
	ip   string // the listeners' loopback address
	*harness.EnvoyGateway
}

// The gateways' listener ports: plaintext HTTP and HTTPS (8443 is one of
// the tls item's default ports).
const (
	httpPort  = 8080
	httpsPort = 8443
	// backendHost is the backend's ServiceEntry host.
	backendHost = "backend.proxy.test"
	// backendPort is the backend's port in the mesh (its ServiceEntry).
	backendPort = 8080
	// The zipkin collector's name in the mesh: the tracing item's example.
	zipkinHost = "zipkin.istio-system.svc.cluster.local"
	zipkinPort = 9411
)

// gatewayLabels are every test gateway's labels (besides the gateway's own
// name): those of an ingress gateway, which default targets select.
var gatewayLabels = map[string]string{"istio": "ingressgateway"}

var (
	cluster   *harness.Cluster
	istiod    *harness.Istiod
	newest    *gw // the Envoy of our istiod build
	oldest    *gw // the oldest Envoy our istiod serves
	gateways  []*gw
	back      *harness.Backend
	zipkin    *harness.Collector
	sds       *harness.SDSServer
	certPEM   []byte
	certFile  string
	keyFile   string
	setupErr  error
	suiteDir  string
	controlBn string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if err := readShard(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := restrictToShard(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "globalconfig-proxy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	suiteDir = dir
	defer os.RemoveAll(dir)
	ctx := context.Background()
	setupErr = setupSuite(ctx, dir)
	if setupErr != nil {
		fmt.Fprintln(os.Stderr, "proxy setup:", setupErr)
	}
	code := m.Run()
	for _, g := range gateways {
		if g.EnvoyGateway != nil {
			g.Kill()
		}
	}
	back.Close()
	zipkin.Close()
	rls.Close()
	sds.Close()
	if istiod != nil {
		istiod.Kill()
	}
	if cluster != nil {
		cluster.Stop()
	}
	return code
}

func setupSuite(ctx context.Context, dir string) error {
	// The binaries first: a missing or wrong Envoy fails here, named.
	newBin, err := harness.EnvoyBinary(ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		return err
	}
	oldBin, err := harness.EnvoyBinary(ctx, harness.EnvEnvoyOld, harness.EnvEnvoyOldVersion)
	if err != nil {
		return err
	}
	if controlBn, err = harness.BuildController(dir, raceEnabled); err != nil {
		return err
	}
	if back, err = harness.StartBackend(); err != nil {
		return err
	}
	if zipkin, err = harness.StartCollector(); err != nil {
		return err
	}
	if cluster, err = harness.StartCluster(ctx, dir); err != nil {
		return err
	}
	newest = &gw{name: "envoy-" + dashed(newBin.Minor()), ip: loopback(11)}
	oldest = &gw{name: "envoy-" + dashed(oldBin.Minor()), ip: loopback(12)}
	gateways = []*gw{newest, oldest}
	if err := createMesh(ctx, dir); err != nil {
		return err
	}
	if err := startRateLimit(ctx, dir); err != nil {
		return err
	}
	if sds, err = harness.StartSDS(certFile, keyFile); err != nil {
		return err
	}
	if istiod, err = cluster.StartIstiodWith(ctx, harness.UpstreamEnvoyIstiod("istiod")); err != nil {
		return err
	}
	for i, g := range gateways {
		bin := []*envoybin.Binary{newBin, oldBin}[i]
		g.EnvoyGateway, err = cluster.StartEnvoyGateway(ctx, istiod, harness.GatewayOptions{
			Name:     g.name,
			Binary:   bin,
			IP:       fmt.Sprintf("10.1.3.%d", i+1),
			Labels:   g.labels(),
			Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
		})
		if err != nil {
			return err
		}
	}
	for _, g := range gateways {
		if err := waitServing(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

func dashed(v string) string {
	out := []byte(v)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}

// labels are g's pod labels: an ingress gateway's, its own name, which
// its Gateway object selects, and the canary label: the oldest Envoy is
// the canary of canary rollouts (its Envoy is the one that refuses more).
func (g *gw) labels() map[string]string {
	l := map[string]string{"gateway": g.name, canary.DefaultLabel: strconv.FormatBool(g == oldest)}
	for k, v := range gatewayLabels {
		l[k] = v
	}
	return l
}

// url is the gateway's plaintext address for path.
func (g *gw) url(path string) string {
	return "http://" + net.JoinHostPort(g.ip, strconv.Itoa(httpPort)) + path
}

// httpsAddr is the gateway's TLS listener.
func (g *gw) httpsAddr() string { return net.JoinHostPort(g.ip, strconv.Itoa(httpsPort)) }

// createMesh creates what the gateways serve: one Gateway per Envoy (HTTP
// and HTTPS, moved to its loopback address), a VirtualService routing
// every host to the backend, and ServiceEntries that put the backend and
// the zipkin collector in the mesh at their loopback addresses.
func createMesh(ctx context.Context, dir string) error {
	var err error
	var keyPEM []byte
	if certPEM, keyPEM, err = harness.SelfSigned("gateway.proxy.test"); err != nil {
		return err
	}

	certFile, keyFile = filepath.Join(dir, "gateway-cert.pem"), filepath.Join(dir, "gateway-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	var names []string
	for _, g := range gateways {
		names = append(names, ns+"/"+g.name)
		if err := gatewayMesh(ctx, g); err != nil {
			return err
		}
	}
	if err := cluster.CreateLoopbackService(ctx, backendHost, backendPort, back.Addr.Port); err != nil {
		return fmt.Errorf("backend service entry: %w", err)
	}
	if err := cluster.CreateLoopbackService(ctx, zipkinHost, zipkinPort, zipkin.Addr.Port); err != nil {
		return fmt.Errorf("zipkin service entry: %w", err)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{"*"},
			Gateways: names,
			Http: []*networkingv1.HTTPRoute{{
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
					Host: backendHost, Port: &networkingv1.PortSelector{Number: backendPort},
				}}},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create virtual service: %w", err)
	}
	return nil
}

// waitServing waits until a request through g reaches the backend.
// gatewayMesh creates what g serves on: its own Gateway object (HTTP and
// HTTPS), moved to its loopback address by a hand-written EnvoyFilter.
func gatewayMesh(ctx context.Context, g *gw) error {
	obj := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: g.name, Namespace: ns},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"gateway": g.name},
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: httpPort, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}, {
				Port:  &networkingv1.Port{Number: httpsPort, Name: "https", Protocol: "HTTPS"},
				Hosts: []string{"*"},
				Tls: &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE,
					ServerCertificate: certFile, PrivateKey: keyFile},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().Gateways(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gateway %s: %w", g.name, err)
	}
	lo, err := harness.LoopbackListeners("loopback-"+g.name, map[string]string{"gateway": g.name}, g.ip, httpPort, httpsPort)
	if err != nil {
		return err
	}
	if err := cluster.Apply(ctx, lo); err != nil {
		return fmt.Errorf("loopback EnvoyFilter for %s: %w", g.name, err)
	}
	return nil
}

func waitServing(ctx context.Context, g *gw) error {
	var last error
	ok := harness.Eventually(ctx, 60*time.Second, func() bool {
		var r *response
		r, last = get(ctx, g.url("/echo"), nil)
		if last == nil && r.status != 200 {
			last = fmt.Errorf("status %d: %s", r.status, r.body)
		}
		return last == nil
	})
	if !ok {
		return fmt.Errorf("gateway %s (Envoy %s) does not serve: %v\n%s", g.name, g.Binary.Version, last, g.Log(3000))
	}
	return nil
}

func setup(t testing.TB) context.Context {
	t.Helper()
	return harness.TestContext(t, "proxy", setupErr)
}
