// Command sandbox is `make run`: a local etcd and kube-apiserver with
// Istio's CRDs, the example global ConfigMap, istiod with an ingress
// Gateway, the controller running against them as its ServiceAccount, and
// a real Envoy as the ingress gateway on a loopback port, in front of a
// backend that echoes requests. Ctrl-C stops it all.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
)

func main() {
	bin := flag.String("controller", "bin/globalconfig", "the globalconfig binary to run")
	flag.Parse()
	if err := run(*bin); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

func run(bin string) error {
	started := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	istioctl, err := harness.Binary(harness.EnvIstioctl)
	if err != nil {
		return err
	}
	if _, err := harness.Binary(harness.EnvPilotDiscovery); err != nil {
		return err
	}
	envoy, err := harness.EnvoyBinary(ctx, harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "globalconfig-sandbox-")
	if err != nil {
		return err
	}
	backend, err := harness.StartBackend()
	if err != nil {
		return err
	}
	defer backend.Close()
	// The example's tracing sends spans to zipkin.istio-system:9411. Envoy
	// refuses a listener whose tracer names a cluster that doesn't exist,
	// so the sandbox runs a collector there.
	zipkin, err := harness.StartCollector()
	if err != nil {
		return err
	}
	defer zipkin.Close()
	fmt.Println("starting etcd and kube-apiserver in", dir, "...")
	cluster, err := harness.StartCluster(ctx, dir)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	example := filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml")
	if _, err := cluster.Kubectl(ctx, nil, "apply", "-f", example); err != nil {
		return err
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	if err := cluster.CreateWebhookConfig(ctx, fmt.Sprintf("https://127.0.0.1:%d/validate", port), harness.Namespace, harness.ConfigMapName); err != nil {
		return err
	}
	gwPort, err := harness.FreePort()
	if err != nil {
		return err
	}
	if err := createMesh(ctx, cluster, uint32(gwPort), backend, zipkin); err != nil {
		return err
	}
	sds, err := startSDS(dir)
	if err != nil {
		return err
	}
	defer sds.Close()
	// istiod first: the controller is told its debug address.
	fmt.Println("starting istiod ...")
	istiod, err := cluster.StartIstiodWith(ctx, harness.UpstreamEnvoyIstiod("istiod"))
	if err != nil {
		return err
	}
	defer istiod.Stop(10 * time.Second)
	// The controller follows the rollout of each new set of EnvoyFilters
	// through this istiod's sync status.
	rolloutArgs := []string{"--istiod-debug-url=http://" + istiod.HTTPAddr}
	args := append([]string{fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1"}, rolloutArgs...)
	ctl, err := cluster.StartController(abs, "globalconfig", args...)
	if err != nil {
		return err
	}
	defer ctl.Stop(10 * time.Second)
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return ctl.Ready(ctx) }) {
		return fmt.Errorf("the controller did not become ready:\n%s", ctl.Log(4000))
	}
	fmt.Printf("starting the gateway: Envoy %s ...\n", envoy.Version)
	gw, err := cluster.StartEnvoyGateway(ctx, istiod, harness.GatewayOptions{
		Name: "ingressgateway", Binary: envoy, IP: "10.1.1.1", Labels: gatewayLabels,
		Clusters: []*clusterv3.Cluster{sds.BootstrapCluster()},
	})
	if err != nil {
		return err
	}
	defer gw.Stop(5 * time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return serves(ctx, url+"/echo") }) {
		return fmt.Errorf("the gateway does not serve %s:\n%s", url, gw.Log(4000))
	}
	// Ready when the controller's status says the gateway took its set.
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return synced(ctx, cluster) }) {
		return fmt.Errorf("the gateway did not take the example's EnvoyFilters:\n%s", gw.Log(4000))
	}
	kubectl, _ := harness.Binary(harness.EnvKubectl)
	k := fmt.Sprintf("%s --kubeconfig %s", kubectl, cluster.AdminKubeconfig)
	dump := filepath.Join(dir, "gateway-config-dump.json")
	fmt.Printf(`
globalconfig is running against a local API server, and a real Envoy
(%s) is the ingress gateway.

  kubeconfig:      %s
  controller log:  %s
  metrics:         %s
  istiod debug:    http://%s/debug/syncz
  istiod log:      %s
  gateway:         %s  (to a backend that echoes requests; /text?n=N answers N bytes of text)
  gateway admin:   http://%s  (gateway log: %s)

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

What the gateway's Envoy has loaded, after each edit:
  curl -s http://%s/config_dump > %s
  %s proxy-config listener --file %s
  %s proxy-config route --file %s -o json

Ctrl-C stops everything.
`, envoy.Version, cluster.AdminKubeconfig, ctl.LogPath, ctl.MetricsURL, istiod.HTTPAddr, istiod.LogPath, url, gw.AdminAddr, gw.LogPath,
		url, k, k, k, abs, cluster.AdminKubeconfig, abs, cluster.AdminKubeconfig,
		abs, cluster.AdminKubeconfig, strings.Split(gw.NodeID, "~")[2], istiod.HTTPAddr, envoy.Path, gw.AdminAddr, dump, istioctl, dump, istioctl, dump)
	fmt.Printf("Ready in %.1fs.\n", time.Since(started).Seconds())
	select {
	case <-ctx.Done():
		fmt.Println("\nstopping ...")
	case <-ctl.Done():
		return fmt.Errorf("the controller exited:\n%s", ctl.Log(4000))
	case <-istiod.Done():
		return fmt.Errorf("istiod exited:\n%s", istiod.Log(4000))
	case <-gw.Done():
		return fmt.Errorf("the gateway exited:\n%s", gw.Log(4000))
	}
	return nil
}

// gatewayLabels are the sandbox gateway's pod labels: an ingress
// gateway's, which the example's default target selects.
var gatewayLabels = map[string]string{"istio": "ingressgateway"}

// synced tells whether the status ConfigMap says every proxy the applied
// set reaches took it.
func synced(ctx context.Context, cluster *harness.Cluster) bool {
	st, err := cluster.Status(ctx)
	return err == nil && st.Applied != nil && st.Rollout != nil && st.Rollout.Version == st.Applied.Hash &&
		st.Rollout.Selected > 0 && st.Rollout.Synced == st.Rollout.Selected
}

// serves tells whether a GET of url through the gateway reaches the backend.
func serves(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startSDS serves the gateway's workload certificate as istio-agent
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

// createMesh creates the ingress Gateway (an HTTP server on port, moved
// to 127.0.0.1), ServiceEntries putting the backend and the zipkin
// collector in the mesh, and a VirtualService routing every host to the
// backend.
func createMesh(ctx context.Context, cluster *harness.Cluster, port uint32, backend *harness.Backend, zipkin *harness.Collector) error {
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: harness.Namespace},
		Spec: networkingv1.Gateway{
			Selector: gatewayLabels,
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: port, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().Gateways(harness.Namespace).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gateway: %w", err)
	}
	lo, err := harness.LoopbackListeners("sandbox-loopback", gatewayLabels, "127.0.0.1", port)
	if err != nil {
		return err
	}
	if err := cluster.Apply(ctx, lo); err != nil {
		return fmt.Errorf("loopback EnvoyFilter: %w", err)
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
			Gateways: []string{"ingress"},
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
