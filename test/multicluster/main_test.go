// Package multicluster tests globalconfig across config clusters, with
// real parts: one etcd serving two kube-apiservers (clusters "a" and "b",
// each under its own etcd prefix), two istiods, each with its own
// CLUSTER_ID and Istio's remote secret for the other cluster (a
// multi-primary mesh), and a real Envoy gateway in each cluster: the
// newest Envoy in a, the oldest in b. Each gateway connects to its own
// cluster's istiod, reports its cluster as its CLUSTER_ID, binds its
// listeners to its own loopback address and routes every request to one
// backend on loopback. Tests read the gateways' own admin (config dump,
// stats) and send traffic through them.
//
// The setup is started once for the package (TestMain); the controller
// binary is built there too (controllerBin), for the tests to run in
// cluster a with member Secrets for b. The gateways differ from a
// production istio-proxy as test/proxy's do (test/proxy/README.md).
package multicluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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

// The gateways' plaintext listener port, and the backend's host and port
// in the mesh (a ServiceEntry in each cluster).
const (
	httpPort    = 8080
	backendHost = "backend.multicluster.test"
	backendPort = 8080
	// clusterHeader is the response header each cluster's VirtualService
	// sets to the cluster's name: which cluster's config a gateway serves.
	clusterHeader = "x-mesh-cluster"
)

// site is one config cluster of the suite: its API server, its istiod
// (CLUSTER_ID = the cluster's Name) and its Envoy gateway.
type site struct {
	*harness.Cluster
	Istiod  *harness.Istiod
	Gateway *harness.EnvoyGateway
	// GatewayName is the gateway's pod name without "gw-"; its label
	// gateway=GatewayName selects it.
	GatewayName string
	// IP is the loopback address the gateway's listeners bind.
	IP string
}

var (
	// siteA is cluster "a", the home cluster of the tests' controller:
	// the newest Envoy. siteB is cluster "b", a member: the oldest Envoy.
	siteA, siteB *site
	// sites are both, a first.
	sites []*site
	// controllerBin is the controller binary, built for this suite.
	controllerBin string
	back          *harness.Backend
	sds           *harness.SDSServer
	setupErr      error
	suiteDir      string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse() // for testing.Verbose
	dir, err := os.MkdirTemp("", "globalconfig-multicluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	suiteDir = dir
	defer os.RemoveAll(dir)
	start := time.Now()
	setupErr = setupSuite(context.Background(), dir)
	if setupErr != nil {
		fmt.Fprintln(os.Stderr, "multicluster setup:", setupErr)
	} else if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "multicluster setup: %.1f s; %s\n", time.Since(start).Seconds(), memory())
	}
	code := m.Run()
	for _, s := range sites {
		if s.Gateway != nil {
			s.Gateway.Kill()
		}
		if s.Istiod != nil {
			s.Istiod.Kill()
		}
	}
	back.Close()
	sds.Close()
	for _, s := range sites {
		if s.Cluster != nil {
			s.Stop()
		}
	}
	return code
}

// memory is the resident set size of each process of the setup.
func memory() string {
	procs := []*harness.Process{siteA.Etcd()}
	for _, s := range sites {
		procs = append(procs, s.APIServer(), s.Istiod.Process, s.Gateway.Process)
	}
	out, total := "", 0.0
	for _, p := range procs {
		mib, err := harness.RSSMiB(p.Cmd.Process.Pid)
		if err != nil {
			return err.Error()
		}
		total += mib
		out += fmt.Sprintf("%s %.0f MiB, ", filepath.Base(filepath.Dir(p.LogPath))+"/"+p.Name, mib)
	}
	return fmt.Sprintf("RSS %s%.0f MiB in all", out, total)
}

// labels are the gateway's pod labels: an ingress gateway's, which
// default targets select, its own name, which its Gateway selects, and
// the canary label as false: it is no canary when a scenario's rollout
// has canaries (a proxy without the label then gets none of the
// EnvoyFilters), and the label changes nothing otherwise.
func (s *site) labels() map[string]string {
	return map[string]string{"istio": "ingressgateway", "gateway": s.GatewayName, canary.DefaultLabel: "false"}
}

// URL is the gateway's plaintext address for path.
func (s *site) URL(path string) string {
	return "http://" + net.JoinHostPort(s.IP, strconv.Itoa(httpPort)) + path
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
	// The controller builds while the clusters start.
	var build sync.WaitGroup
	var buildErr error
	build.Add(1)
	go func() {
		defer build.Done()
		controllerBin, buildErr = harness.BuildController(dir, raceEnabled)
	}()
	defer build.Wait()
	if back, err = harness.StartBackend(); err != nil {
		return err
	}
	clusters, err := harness.StartClusters(ctx, dir, "a", "b")
	if err != nil {
		return err
	}
	siteA = &site{Cluster: clusters[0], GatewayName: "gateway-a", IP: "127.0.0.21"}
	siteB = &site{Cluster: clusters[1], GatewayName: "gateway-b", IP: "127.0.0.22"}
	sites = []*site{siteA, siteB}
	if err := siteA.CreateRemoteSecret(ctx, siteB.Cluster); err != nil {
		return err
	}
	if err := siteB.CreateRemoteSecret(ctx, siteA.Cluster); err != nil {
		return err
	}
	if err := allowMemberSecrets(ctx, siteA.Cluster); err != nil {
		return err
	}
	if err := startSDS(dir); err != nil {
		return err
	}
	if err := eachSite(func(s *site) error { return s.createMesh(ctx) }); err != nil {
		return err
	}
	if err := eachSite(func(s *site) error {
		o := harness.UpstreamEnvoyIstiod("istiod")
		o.ClusterID = s.Name
		var err error
		s.Istiod, err = s.StartIstiodWith(ctx, o)
		if err != nil {
			return fmt.Errorf("istiod of cluster %s: %w", s.Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	bins := map[*site]*envoybin.Binary{siteA: newBin, siteB: oldBin}
	if err := eachSite(func(s *site) error {
		var err error
		s.Gateway, err = s.StartEnvoyGateway(ctx, s.Istiod, harness.GatewayOptions{
			Name:      s.GatewayName,
			Binary:    bins[s],
			IP:        map[*site]string{siteA: "10.1.21.1", siteB: "10.1.22.1"}[s],
			Labels:    s.labels(),
			ClusterID: s.Name,
			Clusters:  []*clusterv3.Cluster{sds.BootstrapCluster()},
		})
		if err != nil {
			return fmt.Errorf("gateway of cluster %s: %w", s.Name, err)
		}
		return s.waitServing(ctx)
	}); err != nil {
		return err
	}
	build.Wait()
	return buildErr
}

// eachSite runs f for both sites at once, and joins their errors.
func eachSite(f func(*site) error) error {
	errs := make([]error, len(sites))
	var wg sync.WaitGroup
	for i, s := range sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startSDS serves both gateways the secrets of their outbound clusters
// (auto mTLS waits for them): a self-signed certificate.
func startSDS(dir string) error {
	certPEM, keyPEM, err := harness.SelfSigned("gateway.multicluster.test")
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(dir, "gateway-cert.pem"), filepath.Join(dir, "gateway-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	sds, err = harness.StartSDS(certFile, keyFile)
	return err
}

// createMesh creates in s's cluster what its gateway serves: its Gateway
// (HTTP on httpPort), moved to its loopback address by a hand-written
// EnvoyFilter, a ServiceEntry that puts the backend in the mesh, and a
// VirtualService routing every host to it that sets clusterHeader to the
// cluster's name on every response.
func (s *site) createMesh(ctx context.Context) error {
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: s.GatewayName, Namespace: ns},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"gateway": s.GatewayName},
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: httpPort, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}},
		},
	}
	if _, err := s.Istio.NetworkingV1().Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster %s: create gateway %s: %w", s.Name, s.GatewayName, err)
	}
	lo, err := harness.LoopbackListeners("loopback-"+s.GatewayName, map[string]string{"gateway": s.GatewayName}, s.IP, httpPort)
	if err != nil {
		return err
	}
	if err := s.Apply(ctx, lo); err != nil {
		return fmt.Errorf("cluster %s: loopback EnvoyFilter: %w", s.Name, err)
	}
	if err := s.CreateLoopbackService(ctx, backendHost, backendPort, back.Addr.Port); err != nil {
		return fmt.Errorf("cluster %s: backend service entry: %w", s.Name, err)
	}
	if _, err := s.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, s.virtualService(s.Name), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster %s: create virtual service: %w", s.Name, err)
	}
	return nil
}

// virtualService is s's VirtualService "to-backend": every host of its
// gateway to the backend, each response carrying clusterHeader: mark.
func (s *site) virtualService(mark string) *clientnetworkingv1.VirtualService {
	return &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-backend", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{"*"},
			Gateways: []string{ns + "/" + s.GatewayName},
			Http: []*networkingv1.HTTPRoute{{
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
					Host: backendHost, Port: &networkingv1.PortSelector{Number: backendPort},
				}}},
				Headers: &networkingv1.Headers{Response: &networkingv1.Headers_HeaderOperations{Set: map[string]string{clusterHeader: mark}}},
			}},
		},
	}
}

// waitServing waits until a request through s's gateway reaches the
// backend, its answer marked with s's cluster's name.
func (s *site) waitServing(ctx context.Context) error { return s.waitServingMarked(ctx, s.Name) }

// waitServingMarked waits until a request through s's gateway reaches
// the backend, its answer carrying clusterHeader: mark.
func (s *site) waitServingMarked(ctx context.Context, mark string) error {
	var last error
	ok := harness.Eventually(ctx, 60*time.Second, func() bool {
		var r *response
		r, last = get(ctx, s.URL("/echo"))
		if last == nil && (r.status != http.StatusOK || r.header.Get(harness.BackendHeader) != harness.BackendName || r.header.Get(clusterHeader) != mark) {
			last = fmt.Errorf("status %d, %s %q, %s %q (want %q): %s", r.status, harness.BackendHeader, r.header.Get(harness.BackendHeader),
				clusterHeader, r.header.Get(clusterHeader), mark, r.body)
		}
		return last == nil
	})
	if !ok {
		return fmt.Errorf("gateway of cluster %s (Envoy %s) does not serve %s: %v\n%s", s.Name, s.Gateway.Binary.Version, s.URL("/echo"), last, s.Gateway.Log(3000))
	}
	return nil
}

// response is an answer, its body read.
type response struct {
	status int
	header http.Header
	body   string
}

// fresh opens a new connection for every request: a kept-alive
// connection stays on the listener configuration it was accepted by
// until Envoy drains it, so it would not show a change.
var fresh = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// get sends a GET to url, bounded to 10 s, on a new connection.
func get(ctx context.Context, url string) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := fresh.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: string(body)}, nil
}
