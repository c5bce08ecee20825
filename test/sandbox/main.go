// Command sandbox is `make run`: a local etcd and kube-apiserver with
// Istio's CRDs, the example global ConfigMap, and the controller running
// against them as its ServiceAccount. Ctrl-C stops it all.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
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
	ctl, err := cluster.StartController(abs, "globalconfig", fmt.Sprintf("--webhook-addr=127.0.0.1:%d", port), "--webhook-hosts=127.0.0.1")
	if err != nil {
		return err
	}
	defer ctl.Stop(10 * time.Second)
	if !harness.Eventually(ctx, 60*time.Second, func() bool { return ctl.Ready(ctx) }) {
		return fmt.Errorf("the controller did not become ready:\n%s", ctl.Log(4000))
	}
	kubectl, _ := harness.Binary(harness.EnvKubectl)
	k := fmt.Sprintf("%s --kubeconfig %s", kubectl, cluster.AdminKubeconfig)
	fmt.Printf(`
globalconfig is running against a local API server.

  kubeconfig:      %s
  controller log:  %s
  metrics:         %s

Try, in another terminal:
  %s get envoyfilters -n istio-system -l app.kubernetes.io/managed-by=globalconfig
  %s edit configmap global-config -n istio-system          # change a value, save, list again;
                                                            # a bad value is refused by the admission webhook
  %s describe configmap global-config -n istio-system      # Events: Applied / InvalidConfig
  %s get configmap global-config-status -n istio-system -o yaml

Ctrl-C stops everything.
`, cluster.AdminKubeconfig, ctl.LogPath, ctl.MetricsURL, k, k, k, k)
	select {
	case <-ctx.Done():
		fmt.Println("\nstopping ...")
	case <-ctl.Done():
		return fmt.Errorf("the controller exited:\n%s", ctl.Log(4000))
	}
	return nil
}
