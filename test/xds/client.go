// Package xds is a plain xDS client for tests: it connects to istiod as a
// gateway proxy would, subscribes to listeners, clusters and routes over
// ADS (state of the world, with ACKs), and lets tests wait for what istiod
// sends. It decodes only what tests ask for, so Istio's private filter
// types (istio.alpn, TypedStruct) never break it.
package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs of the resources the client subscribes to.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// DefaultClusterID is the CLUSTER_ID the nodes report unless InCluster
// says otherwise: istiod's own default cluster ID.
const DefaultClusterID = "Kubernetes"

// InCluster is node as it reports clusterID as its CLUSTER_ID, the cluster
// its pod runs in (a copy; node is left as it is).
func InCluster(node *corev3.Node, clusterID string) *corev3.Node {
	n := proto.Clone(node).(*corev3.Node)
	if n.Metadata == nil {
		n.Metadata = &structpb.Struct{}
	}
	if n.Metadata.Fields == nil {
		n.Metadata.Fields = map[string]*structpb.Value{}
	}
	n.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue(clusterID)
	return n
}

// GatewayNode is the node of an ingress gateway pod in istio-system with
// the labels istio: ingressgateway, running Istio 1.31.
func GatewayNode() *corev3.Node { return GatewayNodeIn("istio-system", "10.1.1.1", "1.31.0") }

// GatewayNodeIn is the node of an ingress gateway pod (labels istio:
// ingressgateway) in namespace at ip, whose proxy reports istioVersion.
func GatewayNodeIn(namespace, ip, istioVersion string) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION": istioVersion,
		"NAMESPACE":     namespace,
		"CLUSTER_ID":    DefaultClusterID,
		"LABELS":        map[string]any{"istio": "ingressgateway"},
	})
	return &corev3.Node{Id: fmt.Sprintf("router~%s~gw-%s.%s~%s.svc.cluster.local", ip, strings.ReplaceAll(ip, ".", "-"), namespace, namespace), Metadata: md}
}

// SidecarNode is the node of a sidecar of a pod in namespace with labels,
// at ip. It needs no Pod object: istiod takes the labels from the node's
// metadata and builds the catch-all inbound chains every sidecar has.
func SidecarNode(namespace, ip string, labels map[string]string) *corev3.Node {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	md, _ := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION": "1.31.0",
		"NAMESPACE":     namespace,
		"CLUSTER_ID":    DefaultClusterID,
		"LABELS":        l,
	})
	return &corev3.Node{Id: fmt.Sprintf("sidecar~%s~workload-0.%s~%s.svc.cluster.local", ip, namespace, namespace), Metadata: md}
}

// Snapshot is what istiod last sent.
type Snapshot struct {
	Listeners map[string]*listenerv3.Listener
	Clusters  map[string]*clusterv3.Cluster
	Routes    map[string]*routev3.RouteConfiguration
}

// Client is a connected ADS client.
type Client struct {
	conn   *grpc.ClientConn
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	cancel context.CancelFunc

	mu      sync.Mutex
	snap    Snapshot
	updated chan struct{} // closed and replaced on every update
	last    time.Time     // when the last response arrived
	pushes  int           // responses received, of any type
	err     error
	routes  []string          // route names subscribed to
	acked   map[string]string // type URL → version last ACKed
}

// Dial connects to istiod's plaintext gRPC address as node. The client
// ACKs everything; NACKs come from real Envoys (test/proxy).
func Dial(ctx context.Context, addr string, node *corev3.Node) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("open ADS stream: %w", err)
	}
	c := &Client{conn: conn, stream: stream, node: node, cancel: cancel, updated: make(chan struct{}), acked: map[string]string{},
		snap: Snapshot{Listeners: map[string]*listenerv3.Listener{}, Clusters: map[string]*clusterv3.Cluster{}, Routes: map[string]*routev3.RouteConfiguration{}}}
	for i, typeURL := range []string{ClusterType, ListenerType} {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL}
		if i == 0 {
			req.Node = node
		}
		if err := stream.Send(req); err != nil {
			c.Close()
			return nil, fmt.Errorf("subscribe %s: %w", typeURL, err)
		}
	}
	go c.recv()
	return c, nil
}

// Pushes counts the discovery responses received so far, of every type:
// istiod answers each push with one per type the proxy watches.
func (c *Client) Pushes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pushes
}

// Updated returns a channel that is closed at the next response the
// client receives, or when its stream fails (see Err). Take it before
// looking at the state, then wait on it.
func (c *Client) Updated() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updated
}

// Err is why the stream ended, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the stream.
func (c *Client) Close() {
	c.cancel()
	c.conn.Close()
}

func (c *Client) recv() {
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			c.fail(err)
			return
		}
		if err := c.handle(resp); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	close(c.updated)
	c.updated = make(chan struct{})
}

func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) error {
	var ackNames []string
	c.mu.Lock()
	c.acked[resp.GetTypeUrl()] = resp.GetVersionInfo()
	switch resp.GetTypeUrl() {
	case ListenerType:
		c.snap.Listeners = map[string]*listenerv3.Listener{}
		for _, r := range resp.GetResources() {
			l := &listenerv3.Listener{}
			if err := r.UnmarshalTo(l); err != nil {
				c.mu.Unlock()
				return fmt.Errorf("decode listener: %w", err)
			}
			c.snap.Listeners[l.GetName()] = l
		}
	case ClusterType:
		c.snap.Clusters = map[string]*clusterv3.Cluster{}
		for _, r := range resp.GetResources() {
			cl := &clusterv3.Cluster{}
			if err := r.UnmarshalTo(cl); err != nil {
				c.mu.Unlock()
				return fmt.Errorf("decode cluster: %w", err)
			}
			c.snap.Clusters[cl.GetName()] = cl
		}
	case RouteType:
		for _, r := range resp.GetResources() {
			rc := &routev3.RouteConfiguration{}
			if err := r.UnmarshalTo(rc); err != nil {
				c.mu.Unlock()
				return fmt.Errorf("decode route: %w", err)
			}
			c.snap.Routes[rc.GetName()] = rc
		}
		ackNames = c.routes
	}
	routeNames := c.routeNamesLocked()
	newRoutes := !slices.Equal(routeNames, c.routes)
	if newRoutes {
		c.routes = routeNames
	}
	c.last = time.Now()
	c.pushes++
	close(c.updated)
	c.updated = make(chan struct{})
	c.mu.Unlock()

	ack := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: ackNames}
	if err := c.stream.Send(ack); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if newRoutes && len(routeNames) > 0 {
		return c.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: routeNames})
	}
	return nil
}

// routeNamesLocked lists the RDS names the listeners refer to.
func (c *Client) routeNamesLocked() []string {
	var names []string
	for _, l := range c.snap.Listeners {
		for _, fc := range l.GetFilterChains() {
			if hcm, err := HCMOf(fc); err == nil && hcm.GetRds() != nil {
				names = append(names, hcm.GetRds().GetRouteConfigName())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// HCMOf decodes the HTTP connection manager of a filter chain.
func HCMOf(fc *listenerv3.FilterChain) (*hcmv3.HttpConnectionManager, error) {
	for _, f := range fc.GetFilters() {
		if f.GetName() != "envoy.filters.network.http_connection_manager" {
			continue
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
			return nil, fmt.Errorf("decode http connection manager: %w", err)
		}
		return hcm, nil
	}
	return nil, errors.New("no http connection manager")
}

// Snapshot returns a copy of the current state.
func (c *Client) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Snapshot{Listeners: map[string]*listenerv3.Listener{}, Clusters: map[string]*clusterv3.Cluster{}, Routes: map[string]*routev3.RouteConfiguration{}}
	for k, v := range c.snap.Listeners {
		out.Listeners[k] = proto.Clone(v).(*listenerv3.Listener)
	}
	for k, v := range c.snap.Clusters {
		out.Clusters[k] = proto.Clone(v).(*clusterv3.Cluster)
	}
	for k, v := range c.snap.Routes {
		out.Routes[k] = proto.Clone(v).(*routev3.RouteConfiguration)
	}
	return out
}

// WaitFor waits until cond holds for what istiod has sent, checking after
// every response, and returns when the last response arrived — the one
// that made cond true, unless others followed before the check.
func (c *Client) WaitFor(ctx context.Context, timeout time.Duration, cond func(Snapshot) bool) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		updated, err, last := c.updated, c.err, c.last
		c.mu.Unlock()
		if err != nil {
			return time.Time{}, fmt.Errorf("xds stream: %w", err)
		}
		if cond(c.Snapshot()) {
			return last, nil
		}
		select {
		case <-updated:
		case <-deadline:
			return time.Time{}, fmt.Errorf("condition not met within %v", timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// HCMs returns the HTTP connection managers of every filter chain of
// listener name.
func (s Snapshot) HCMs(name string) []*hcmv3.HttpConnectionManager {
	var out []*hcmv3.HttpConnectionManager
	for _, fc := range s.Listeners[name].GetFilterChains() {
		if hcm, err := HCMOf(fc); err == nil {
			out = append(out, hcm)
		}
	}
	return out
}

// GatewayHCM returns the HTTP connection manager of listener name.
func (s Snapshot) GatewayHCM(name string) (*hcmv3.HttpConnectionManager, error) {
	l, ok := s.Listeners[name]
	if !ok {
		return nil, fmt.Errorf("no listener %q (have %d)", name, len(s.Listeners))
	}
	for _, fc := range l.GetFilterChains() {
		if hcm, err := HCMOf(fc); err == nil {
			return hcm, nil
		}
	}
	if fc := l.GetDefaultFilterChain(); fc != nil {
		return HCMOf(fc)
	}
	return nil, fmt.Errorf("listener %q has no http connection manager", name)
}
