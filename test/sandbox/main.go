// Command sandbox is `make run`: a local etcd and kube-apiserver with
// Istio's CRDs, the example global ConfigMap, istiod with an ingress
// Gateway, and the controller running against them as its ServiceAccount.
// An xDS client connected to istiod as the gateway keeps what it receives
// in an Envoy config dump file that `istioctl proxy-config … --file`
// reads. Ctrl-C stops it all.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

const (
	// gatewayListener is the listener the ingress Gateway's HTTP server
	// on port 80 gives the gateway.
	gatewayListener = "0.0.0.0_80"
	// dumpDebounce lets a push settle (istiod answers one with a response
	// per type) before the dump is rewritten; dumpMaxDelay bounds the wait
	// while updates keep coming.
	dumpDebounce = 100 * time.Millisecond
	dumpMaxDelay = time.Second
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
	dir, err := os.MkdirTemp("", "globalconfig-sandbox-")
	if err != nil {
		return err
	}
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
	if err := cluster.CreateWebhookConfig(ctx, fmt.Sprintf("https://127.0.0.1:%d/validate", port)); err != nil {
		return err
	}
	// istiod first: the controller is told its debug address.
	fmt.Println("starting istiod ...")
	if err := createGateway(ctx, cluster); err != nil {
		return err
	}
	istiod, err := cluster.StartIstiod(ctx, "istiod", "")
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
	gateway, err := xds.Dial(ctx, istiod.GRPCAddr, xds.GatewayNode())
	if err != nil {
		return err
	}
	defer gateway.Close()
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return ctl.Ready(ctx) }) {
		return fmt.Errorf("the controller did not become ready:\n%s", ctl.Log(4000))
	}
	if _, err := gateway.WaitFor(ctx, 60*time.Second, func(s xds.Snapshot) bool {
		_, ok := s.Listeners[gatewayListener]
		return ok
	}); err != nil {
		return fmt.Errorf("the gateway got no listener %s: %w\n%s", gatewayListener, err, istiod.Log(4000))
	}
	// The controller is ready with its EnvoyFilters written; let istiod's
	// push of them arrive before the first dump.
	settle(ctx, gateway, 500*time.Millisecond, 5*time.Second)
	dump := filepath.Join(dir, "gateway-config-dump.json")
	next := gateway.Updated()
	if err := gateway.WriteConfigDump(dump); err != nil {
		return err
	}
	dumpCtx, stopDump := context.WithCancel(ctx)
	dumpErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dumpErr <- keepDump(dumpCtx, gateway, dump, next)
	}()
	defer wg.Wait()
	defer stopDump()
	kubectl, _ := harness.Binary(harness.EnvKubectl)
	k := fmt.Sprintf("%s --kubeconfig %s", kubectl, cluster.AdminKubeconfig)
	fmt.Printf(`
globalconfig is running against a local API server.

  kubeconfig:      %s
  controller log:  %s
  metrics:         %s
  istiod debug:    http://%s/debug/syncz
  istiod log:      %s
  gateway config:  %s
                   (an xDS client connected to istiod as the ingress gateway
                   rewrites this Envoy config dump on every update)

Try, in another terminal:
  %s get envoyfilters -n istio-system -l app.kubernetes.io/managed-by=globalconfig
  %s edit configmap global-config -n istio-system          # change a value, save, list again;
                                                            # a bad value is refused by the admission webhook
  %s describe configmap global-config -n istio-system      # Events: Applied / InvalidConfig
  %s get configmap global-config-status -n istio-system -o yaml
  %s status --kubeconfig %s                          # the document, the items and which proxies took the set
  %s diff -f edited.yaml --kubeconfig %s             # what applying edited.yaml would change

What the gateway receives from istiod, after each edit:
  %s proxy-config listener --file %s
  %s proxy-config route --file %s -o json
  %s proxy-config cluster --file %s

Ctrl-C stops everything.
Ready in %.1fs.
`, cluster.AdminKubeconfig, ctl.LogPath, ctl.MetricsURL, istiod.HTTPAddr, istiod.LogPath, dump,
		k, k, k, k, abs, cluster.AdminKubeconfig, abs, cluster.AdminKubeconfig, istioctl, dump, istioctl, dump, istioctl, dump, time.Since(started).Seconds())
	select {
	case <-ctx.Done():
		fmt.Println("\nstopping ...")
	case <-ctl.Done():
		return fmt.Errorf("the controller exited:\n%s", ctl.Log(4000))
	case <-istiod.Done():
		return fmt.Errorf("istiod exited:\n%s", istiod.Log(4000))
	case err := <-dumpErr:
		return fmt.Errorf("gateway config dump: %w", err)
	}
	return nil
}

// createGateway creates the ingress Gateway: an HTTP server on port 80 for
// every host, which gives a gateway proxy the listener 0.0.0.0_80.
func createGateway(ctx context.Context, cluster *harness.Cluster) error {
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: harness.Namespace},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"istio": "ingressgateway"},
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().Gateways(harness.Namespace).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gateway: %w", err)
	}
	return nil
}

// settle waits until the client has received nothing for quiet, or for at
// most limit.
func settle(ctx context.Context, c *xds.Client, quiet, limit time.Duration) {
	deadline := time.After(limit)
	for {
		select {
		case <-c.Updated():
		case <-time.After(quiet):
			return
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// keepDump rewrites the config dump at path after every update the client
// receives from next on, once the updates pause for dumpDebounce (or after
// dumpMaxDelay while they keep coming), until ctx ends or the client's
// stream fails.
func keepDump(ctx context.Context, c *xds.Client, path string, next <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
		timer := time.NewTimer(dumpDebounce)
		deadline := time.After(dumpMaxDelay)
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-c.Updated():
				timer.Reset(dumpDebounce)
			case <-timer.C:
				break wait
			case <-deadline:
				timer.Stop()
				break wait
			}
		}
		next = c.Updated()
		if err := c.Err(); err != nil {
			return fmt.Errorf("the xDS client lost istiod: %w", err)
		}
		if err := c.WriteConfigDump(path); err != nil {
			return err
		}
	}
}
