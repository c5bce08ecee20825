package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// The real Envoy binaries `make tools` installs (test/tools/envoy): the
// newest, the Envoy of our istiod build, and the oldest istiod still
// serves.
const (
	EnvEnvoy           = "GLOBALCONFIG_ENVOY"
	EnvEnvoyVersion    = "GLOBALCONFIG_ENVOY_VERSION"
	EnvEnvoyOld        = "GLOBALCONFIG_ENVOY_OLD"
	EnvEnvoyOldVersion = "GLOBALCONFIG_ENVOY_OLD_VERSION"
)

// EnvoyBinary is the Envoy binary env names, checked to be the version
// versionEnv names: a missing, non-executable or other binary is an error
// that says what was expected.
func EnvoyBinary(ctx context.Context, env, versionEnv string) (*envoybin.Binary, error) {
	path, want := os.Getenv(env), os.Getenv(versionEnv)
	if path == "" || want == "" {
		return nil, toolcache.Unset("the real Envoys", env, versionEnv)
	}
	b, err := envoybin.OpenVersion(ctx, path, want)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make tools`, or this suite with `%s`)", err, toolcache.Command())
	}
	return b, nil
}

// IstioReleaseOf is the ISTIO_VERSION ("1.31.0") a real istio-proxy of an
// Envoy release reports (envoyfilter.IstioForEnvoy), so version-scoped
// patches reach the gateway as they would reach that istio-proxy.
func IstioReleaseOf(envoyVersion string) (string, error) {
	v, err := envoyfilter.ParseVersion(envoyVersion)
	if err != nil {
		return "", fmt.Errorf("envoy version: %w", err)
	}
	return envoyfilter.IstioForEnvoy(v).String() + ".0", nil
}

// GatewayOptions describe an Envoy gateway.
type GatewayOptions struct {
	// Name names the pod (gw-<Name>) and the log and bootstrap files.
	Name string
	// Binary is the Envoy to run.
	Binary *envoybin.Binary
	// IP is the pod address in the node ID; no socket uses it.
	IP string
	// Namespace is the pod's namespace (istio-system when empty).
	Namespace string
	// Labels are the pod's labels: EnvoyFilter workload selectors and
	// Gateway selectors match them.
	Labels map[string]string
	// IstioVersion is the ISTIO_VERSION the node reports; when empty, the
	// Istio release that ships Binary's Envoy.
	IstioVersion string
	// Clusters are added to the bootstrap's static clusters (an SDS
	// server for the gateway's certificates).
	Clusters []*clusterv3.Cluster
	// ClusterID is the CLUSTER_ID the node reports, the cluster its pod
	// runs in; DefaultClusterName when empty. Give it the Name of the
	// Cluster whose istiod the gateway connects to.
	ClusterID string
	// AllowUnknownFields lets Envoy accept dynamic configuration with
	// fields it doesn't know (Envoy's default). Off, the gateway runs with
	// --reject-unknown-dynamic-fields and NACKs such configuration.
	AllowUnknownFields bool
}

// EnvoyGateway is a real Envoy connected to istiod over ADS as an Istio
// ingress gateway (a router node), bootstrapped as istio-agent would
// bootstrap it, with its admin interface on loopback.
type EnvoyGateway struct {
	*Process
	Binary *envoybin.Binary
	NodeID string
	// ClusterID is the CLUSTER_ID its node reports.
	ClusterID string
	// IstioVersion is the ISTIO_VERSION its node reports.
	IstioVersion string
	AdminAddr    string
	admin        *http.Client
}

// XDSCluster is the bootstrap's cluster for istiod's plaintext gRPC port.
const XDSCluster = "xds-grpc"

// StartEnvoyGateway starts an Envoy gateway against istiod and waits until
// its admin interface answers and it has received its listeners.
func (c *Cluster) StartEnvoyGateway(ctx context.Context, istiod *Istiod, o GatewayOptions) (*EnvoyGateway, error) {
	if o.Namespace == "" {
		o.Namespace = Namespace
	}
	if o.ClusterID == "" {
		o.ClusterID = DefaultClusterName
	}
	if o.IstioVersion == "" {
		v, err := IstioReleaseOf(o.Binary.Version)
		if err != nil {
			return nil, err
		}
		o.IstioVersion = v
	}
	adminPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	bs, nodeID, err := GatewayBootstrap(istiod.GRPCAddr, adminPort, o)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(c.Dir, o.Name+"-bootstrap.json")
	if err := os.WriteFile(file, bs, 0o644); err != nil {
		return nil, err
	}
	args := []string{"--config-path", file, "--disable-hot-restart", "--concurrency", "1",
		"--log-level", "warning", "--drain-time-s", "1", "--parent-shutdown-time-s", "2"}
	if !o.AllowUnknownFields {
		args = append(args, "--reject-unknown-dynamic-fields")
	}
	p, err := Start(c.Dir, o.Name, o.Binary.Path, args, nil)
	if err != nil {
		return nil, err
	}
	g := &EnvoyGateway{Process: p, Binary: o.Binary, NodeID: nodeID, ClusterID: o.ClusterID, IstioVersion: o.IstioVersion,
		AdminAddr: fmt.Sprintf("127.0.0.1:%d", adminPort), admin: &http.Client{Timeout: 5 * time.Second}}
	var last error
	ok := Eventually(ctx, 60*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		var st map[string]int64
		if st, last = g.Stats(ctx); last != nil {
			return false
		}
		if st["listener_manager.lds.update_success"] == 0 || st["cluster_manager.cds.update_success"] == 0 {
			last = fmt.Errorf("no LDS/CDS update yet")
			return false
		}
		return true
	})
	if p.Exited() || !ok {
		diag, _ := g.Get(ctx, "/stats?filter=^sds\\.|listener_manager.lds|cluster_manager.cds|server.state")
		p.Kill()
		return nil, fmt.Errorf("envoy gateway %s (Envoy %s) did not get its configuration: %v\n%s\n%s", o.Name, o.Binary.Version, last, diag, p.Log(4000))
	}
	return g, nil
}

// GatewayBootstrap is the bootstrap of an Envoy gateway that reaches
// istiod at xdsAddr over ADS (plaintext, as istio-agent's local xDS proxy
// would), with its admin on 127.0.0.1:adminPort, and its node ID.
func GatewayBootstrap(xdsAddr string, adminPort int, o GatewayOptions) ([]byte, string, error) {
	host, portText, err := splitHostPort(xdsAddr)
	if err != nil {
		return nil, "", err
	}
	clusterID := o.ClusterID
	if clusterID == "" {
		clusterID = DefaultClusterName
	}
	labels := map[string]any{}
	for k, v := range o.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION": o.IstioVersion,
		"NAMESPACE":     o.Namespace,
		"CLUSTER_ID":    clusterID,
		"LABELS":        labels,
		"NAME":          "gw-" + o.Name,
	})
	if err != nil {
		return nil, "", err
	}
	nodeID := fmt.Sprintf("router~%s~gw-%s.%s~%s.svc.cluster.local", o.IP, o.Name, o.Namespace, o.Namespace)
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	xds := StaticCluster(XDSCluster, host, portText)
	xds.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": http2Options()}
	bs := &bootstrapv3.Bootstrap{
		Node:  &corev3.Node{Id: nodeID, Cluster: "istio-ingressgateway." + o.Namespace, Metadata: md},
		Admin: &bootstrapv3.Admin{Address: socketAddress("127.0.0.1", uint32(adminPort))},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster},
				}}},
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: append([]*clusterv3.Cluster{xds}, o.Clusters...)},
	}
	if err := bs.ValidateAll(); err != nil {
		return nil, "", fmt.Errorf("gateway bootstrap: %w", err)
	}
	out, err := protojson.MarshalOptions{Indent: "  "}.Marshal(bs)
	if err != nil {
		return nil, "", err
	}
	return out, nodeID, nil
}

// http2Options are a cluster's upstream protocol options for gRPC.
func http2Options() *anypb.Any {
	a, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		panic(err) // a fixed message always packs
	}
	return a
}

// LoopbackListeners is a test EnvoyFilter that moves the listeners on
// ports of the gateways matching selector from istiod's 0.0.0.0 to ip, so
// that test servers listen on loopback only and each test gateway has an
// address of its own. Apply it before the gateway connects, and no
// listener ever binds 0.0.0.0. (A Gateway server's bind would do it too,
// but it changes the route configurations' names, "http.8080.127.0.0.11",
// and Istio's portNumber match on route configurations then no longer
// recognises the port: every route configuration would match every port's
// patches.)
func LoopbackListeners(name string, selector map[string]string, ip string, ports ...uint32) (*envoyfilter.Object, error) {
	var patches []envoyfilter.Patch
	for _, port := range ports {
		patches = append(patches, envoyfilter.Patch{
			ApplyTo: networking.EnvoyFilter_LISTENER,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{
				Listener: &networking.EnvoyFilter_ListenerMatch{PortNumber: port},
			}},
			Operation: networking.EnvoyFilter_Patch_MERGE,
			Value:     &listenerv3.Listener{Address: socketAddress(ip, port)},
		})
	}
	target := envoyfilter.DefaultTarget()
	target.Selector = selector
	o, err := envoyfilter.NewObject("loopback", envoyfilter.Placement{Priority: -1000}, target, patches)
	if err != nil {
		return nil, err
	}
	o.Metadata.Name = name
	o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "loopback"}
	return o, nil
}

// StaticCluster is a cluster of one loopback endpoint.
func StaticCluster(name, host, port string) *clusterv3.Cluster {
	p, _ := strconv.Atoi(port)
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(host, uint32(p)),
			}}}},
		}}},
	}
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func splitHostPort(addr string) (string, string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("address %q has no port", addr)
	}
	return addr[:i], addr[i+1:], nil
}

// Get reads an admin path (for example "/config_dump?resource=dynamic_listeners").
func (g *EnvoyGateway) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.AdminAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.admin.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

// Stats are the gateway's counters and gauges by name, from its admin.
func (g *EnvoyGateway) Stats(ctx context.Context) (map[string]int64, error) {
	body, err := g.Get(ctx, "/stats?format=json")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("envoy admin /stats: %w", err)
	}
	out := map[string]int64{}
	for _, s := range doc.Stats {
		if v, err := strconv.ParseInt(string(s.Value), 10, 64); err == nil {
			out[s.Name] = v
		}
	}
	return out, nil
}
