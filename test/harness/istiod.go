package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Istiod is a running pilot-discovery against the cluster.
type Istiod struct {
	*Process
	// GRPCAddr is the plaintext xDS address proxies (and the test client)
	// connect to.
	GRPCAddr string
	HTTPAddr string
	// MonitoringAddr serves istiod's own metrics (/metrics): its pushes
	// and its process's CPU and memory.
	MonitoringAddr string
	// ClusterID is the cluster ID istiod runs with.
	ClusterID string
}

// DebugURL is the base URL of istiod's debug endpoints (/debug/syncz,
// /debug/adsz), as the controller's --istiod-debug-url takes it.
func (i *Istiod) DebugURL() string { return "http://" + i.HTTPAddr }

// StartIstiod starts istiod with meshConfig (YAML; rootNamespace is
// istio-system when it says nothing else) and waits until /ready answers.
func (c *Cluster) StartIstiod(ctx context.Context, name, meshConfig string) (*Istiod, error) {
	return c.StartIstiodAt(ctx, name, meshConfig, 0)
}

// StartIstiodAt is StartIstiod with its HTTP (debug) port chosen by the
// caller, who may need it before istiod starts; 0 picks a free one.
func (c *Cluster) StartIstiodAt(ctx context.Context, name, meshConfig string, httpPort int) (*Istiod, error) {
	return c.StartIstiodWith(ctx, IstiodOptions{Name: name, MeshConfig: meshConfig, HTTPPort: httpPort})
}

// IstiodOptions describe an istiod to start.
type IstiodOptions struct {
	Name string
	// MeshConfig is added to the mesh config file after rootNamespace.
	MeshConfig string
	// HTTPPort is the HTTP (debug) port; 0 picks a free one.
	HTTPPort int
	// Env is added to istiod's environment (feature switches).
	Env []string
	// ClusterID is istiod's CLUSTER_ID, the name of the cluster it runs
	// in (its Cluster's Name in a multi-cluster test); empty keeps
	// istiod's default, DefaultClusterName.
	ClusterID string
}

// StartIstiodWith starts istiod as o says and waits until /ready answers.
func (c *Cluster) StartIstiodWith(ctx context.Context, o IstiodOptions) (*Istiod, error) {
	name, meshConfig, httpPort := o.Name, o.MeshConfig, o.HTTPPort
	bin, err := Binary(EnvPilotDiscovery)
	if err != nil {
		return nil, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if i == 1 && httpPort != 0 {
			ports[i] = httpPort
			continue
		}
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	meshFile := filepath.Join(c.Dir, name+"-mesh.yaml")
	if err := os.WriteFile(meshFile, []byte("rootNamespace: istio-system\n"+meshConfig), 0o644); err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	env := []string{
		"POD_NAME=" + name, "POD_NAMESPACE=" + Namespace, "REVISION=default",
		"VALIDATION_WEBHOOK_CONFIG_NAME=", "INJECTION_WEBHOOK_CONFIG_NAME=",
	}
	if o.ClusterID != "" {
		env = append(env, "CLUSTER_ID="+o.ClusterID)
	}
	p, err := Start(c.Dir, name, bin, []string{"discovery",
		"--kubeconfig=" + c.AdminKubeconfig,
		"--meshConfig=" + meshFile,
		"--grpcAddr=" + addr(ports[0]),
		"--httpAddr=" + addr(ports[1]),
		"--httpsAddr=" + addr(ports[2]),
		"--monitoringAddr=" + addr(ports[3]),
		"--secureGRPCAddr=",
		"--domain=cluster.local",
		"--log_output_level=default:warn",
	}, append(env, o.Env...))
	if err != nil {
		return nil, err
	}
	clusterID := o.ClusterID
	if clusterID == "" {
		clusterID = DefaultClusterName
	}
	ist := &Istiod{Process: p, GRPCAddr: addr(ports[0]), HTTPAddr: addr(ports[1]), MonitoringAddr: addr(ports[3]), ClusterID: clusterID}
	client := &http.Client{Timeout: 2 * time.Second}
	ready := Eventually(ctx, 90*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		resp, err := client.Get("http://" + ist.HTTPAddr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if p.Exited() || !ready {
		p.Kill()
		return nil, fmt.Errorf("istiod did not become ready:\n%s", p.Log(4000))
	}
	return ist, nil
}

// UpstreamEnvoyIstiod is an istiod whose output an upstream Envoy (the
// official build, without Istio's own extensions) loads: the switches of
// every Istio-private extension pilot would put in a gateway's or a
// sidecar's configuration are off. test/proxy/README.md says what this
// changes against a production istio-proxy.
func UpstreamEnvoyIstiod(name string) IstiodOptions {
	return IstiodOptions{
		Name: name,
		// No default metrics provider: istio.stats comes with the
		// Prometheus provider. pilot's built-in mesh config has none (Istio's
		// Helm chart sets prometheus); this says so in the file too. A
		// Telemetry resource naming prometheus would still add it.
		MeshConfig: "defaultProviders:\n  metrics: []\n",
		Env: []string{
			// istio.metadata_exchange: the HTTP filter of every gateway
			// HCM, the upstream filter of every outbound cluster, the
			// network filter of ISTIO_MUTUAL servers and sidecar inbound
			// chains (pilot/pkg/features/telemetry.go).
			"PILOT_ENABLE_METADATA_EXCHANGE=false",
			// istio.alpn: every HCM but sidecar inbound (features/pilot.go).
			"PILOT_ENABLE_ALPN_FILTER=false",
		},
	}
}

// Metrics scrapes istiod's own metrics: series to value (see Sum).
func (i *Istiod) Metrics(ctx context.Context) (map[string]float64, error) {
	return Scrape(ctx, "http://"+i.MonitoringAddr+"/metrics")
}
