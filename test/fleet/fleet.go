// Package fleet holds many lightweight proxies in one process: each opens
// an ADS stream to istiod as a gateway or a sidecar would, subscribes to
// clusters and listeners, ACKs every response at once, and records when a
// response carrying a watched marker arrived. Nothing is decoded: a
// marker is a byte string searched for in the responses' resources, so a
// thousand proxies cost little more than their streams. It is the fleet of
// the scale figures (make bench-fleet) and of the fleet integration test.
package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs the proxies subscribe to.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// DefaultClusterID is the CLUSTER_ID proxies report when Options names
// none: istiod's own default cluster ID.
const DefaultClusterID = "Kubernetes"

// Kind is a proxy's kind.
type Kind string

// The kinds.
const (
	Gateway Kind = "gateway"
	Sidecar Kind = "sidecar"
)

// Options say what fleet to hold.
type Options struct {
	// Addr is istiod's plaintext gRPC address.
	Addr string
	// Gateways and Sidecars are how many of each; Namespaces how many
	// namespaces the sidecars spread over.
	Gateways, Sidecars, Namespaces int
	// GatewayNamespace is the gateways' namespace (default istio-ingress,
	// the layout Istio recommends: an EnvoyFilter there reaches its
	// gateways and pushes no sidecar of another namespace).
	GatewayNamespace string
	// CanaryShare is the share of gateways labelled
	// globalconfig.io/canary=true (the rest =false), 0 to 1.
	CanaryShare float64
	// Versions are the Istio versions the proxies report, spread evenly
	// ("1.31.0"); default one, 1.31.0.
	Versions []string
	// GatewayRoutes and SidecarRoutes are the route configurations each
	// kind subscribes to (RDS), as Envoy does for the listeners' routes:
	// "http.80" for a gateway's port 80 server, a port number for a
	// sidecar's outbound HTTP routes.
	GatewayRoutes, SidecarRoutes []string
	// ClusterID is the CLUSTER_ID every proxy reports, the cluster its
	// pod runs in (the Name of the cluster whose istiod Addr is); default
	// DefaultClusterID. A fleet per cluster puts proxies in several.
	ClusterID string
	// Connect bounds the time to connect every proxy.
	Connect time.Duration
	// Seed makes the mix repeatable.
	Seed uint64
}

// Proxy is one connected proxy.
type Proxy struct {
	Name, Namespace, Version string
	// Cluster is the CLUSTER_ID it reports.
	Cluster string
	Kind    Kind
	Canary  bool
	routes  []string
	node    *corev3.Node
	conn    *grpc.ClientConn
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel  context.CancelFunc
	fleet   *Fleet

	mu     sync.Mutex
	pushes map[string]int // responses by type
	bytes  int64          // resource bytes received
	last   map[string]int // the last response's resource bytes, by type
	// accepted is the version of the last response ACKed, by type; nacks
	// counts the responses refused (Fleet.Refuse).
	accepted map[string]string
	nacks    int
	err      error
}

// Fleet is the connected proxies.
type Fleet struct {
	Proxies []*Proxy

	mu       sync.Mutex
	markers  map[string]*watch // marker → who saw it, when
	refusals []*refusal
}

// watch is one marker's arrivals: the time each proxy ACKed a response
// carrying it (the first one).
type watch struct {
	marker []byte
	start  time.Time
	seen   map[*Proxy]time.Time
	done   chan struct{}
	want   func(*Proxy) bool
	count  int // proxies want selects
}

// Start connects the fleet. A proxy that can't connect fails the start.
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if len(o.Versions) == 0 {
		o.Versions = []string{"1.31.0"}
	}
	if o.Namespaces < 1 {
		o.Namespaces = 1
	}
	if o.GatewayNamespace == "" {
		o.GatewayNamespace = "istio-ingress"
	}
	if o.Connect == 0 {
		o.Connect = 2 * time.Minute
	}
	if o.ClusterID == "" {
		o.ClusterID = DefaultClusterID
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed+1))
	f := &Fleet{markers: map[string]*watch{}}
	canaries := int(float64(o.Gateways)*o.CanaryShare + 0.5)
	if o.CanaryShare > 0 && canaries == 0 {
		canaries = 1
	}
	for i := range o.Gateways {
		p := &Proxy{Kind: Gateway, Namespace: o.GatewayNamespace, Cluster: o.ClusterID, Version: o.Versions[i%len(o.Versions)], Canary: i < canaries, routes: o.GatewayRoutes}
		p.Name = fmt.Sprintf("gw-%d", i)
		p.node = node(p, ip(1, i), map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway",
			"globalconfig.io/canary": fmt.Sprint(p.Canary)})
		f.Proxies = append(f.Proxies, p)
	}
	for i := range o.Sidecars {
		ns := fmt.Sprintf("team-%d", rng.IntN(o.Namespaces))
		p := &Proxy{Kind: Sidecar, Namespace: ns, Cluster: o.ClusterID, Version: o.Versions[i%len(o.Versions)], routes: o.SidecarRoutes}
		p.Name = fmt.Sprintf("app-%d", i)
		p.node = node(p, ip(2, i), map[string]any{"app": fmt.Sprintf("app-%d", i%50), "version": "v1"})
		f.Proxies = append(f.Proxies, p)
	}
	cctx, cancel := context.WithTimeout(ctx, o.Connect)
	defer cancel()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for _, p := range f.Proxies {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := p.connect(ctx, o.Addr, f); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		}()
		if cctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		f.Close()
		return nil, err
	}
	if cctx.Err() != nil {
		f.Close()
		return nil, fmt.Errorf("connecting %d proxies took over %s", len(f.Proxies), o.Connect)
	}
	return f, nil
}

// ip is a node address of block b: 10.b.x.y, never loopback (istiod would
// take a node at 127.0.0.1 for the API server's endpoint).
func ip(b, i int) string { return fmt.Sprintf("10.%d.%d.%d", 10+b, (i/250)%250, i%250+1) }

func node(p *Proxy, addr string, labels map[string]any) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION": p.Version, "NAMESPACE": p.Namespace, "CLUSTER_ID": p.Cluster, "LABELS": labels,
	})
	kind := "sidecar"
	if p.Kind == Gateway {
		kind = "router"
	}
	return &corev3.Node{Id: fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", kind, addr, p.Name, p.Namespace, p.Namespace), Metadata: md}
}

func (p *Proxy) connect(ctx context.Context, addr string, f *Fleet) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		conn.Close()
		return fmt.Errorf("%s: open ADS stream: %w", p.Name, err)
	}
	p.conn, p.stream, p.cancel, p.fleet = conn, stream, cancel, f
	p.pushes, p.last, p.accepted = map[string]int{}, map[string]int{}, map[string]string{}
	types := []string{ClusterType, ListenerType}
	if len(p.routes) > 0 {
		types = append(types, RouteType)
	}
	for i, typeURL := range types {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL}
		if i == 0 {
			req.Node = p.node
		}
		if typeURL == RouteType {
			req.ResourceNames = p.routes
		}
		if err := stream.Send(req); err != nil {
			p.Close()
			return fmt.Errorf("%s: subscribe: %w", p.Name, err)
		}
	}
	go p.recv()
	return nil
}

func (p *Proxy) recv() {
	for {
		resp, err := p.stream.Recv()
		if err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
		var n int64
		for _, r := range resp.GetResources() {
			n += int64(len(r.GetValue()))
		}
		p.mu.Lock()
		p.pushes[resp.GetTypeUrl()]++
		p.bytes += n
		p.last[resp.GetTypeUrl()] = int(n)
		p.mu.Unlock()
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() == RouteType {
			ack.ResourceNames = p.routes
		}
		if m := p.fleet.refuses(p, resp); m != "" {
			// A NACK, as Envoy sends one: the version it keeps, the
			// nonce it answers, and why.
			p.mu.Lock()
			ack.VersionInfo = p.accepted[resp.GetTypeUrl()]
			p.nacks++
			p.mu.Unlock()
			ack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "fleet proxy " + p.ID() + " refuses " + m}
		} else {
			p.mu.Lock()
			p.accepted[resp.GetTypeUrl()] = resp.GetVersionInfo()
			p.mu.Unlock()
		}
		if err := p.stream.Send(ack); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
		if ack.ErrorDetail == nil {
			p.fleet.saw(p, resp, time.Now())
		}
	}
}

// Refuse makes the proxies want selects NACK every response that carries
// marker, from now on; it returns a function that undoes it.
func (f *Fleet) Refuse(marker string, want func(*Proxy) bool) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &refusal{marker: []byte(marker), want: want}
	f.refusals = append(f.refusals, r)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.refusals = slices.DeleteFunc(f.refusals, func(x *refusal) bool { return x == r })
	}
}

type refusal struct {
	marker []byte
	want   func(*Proxy) bool
}

// refuses is the marker of a refusal resp carries for p, "" for none.
func (f *Fleet) refuses(p *Proxy, resp *discoveryv3.DiscoveryResponse) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.refusals {
		if !r.want(p) {
			continue
		}
		for _, res := range resp.GetResources() {
			if bytes.Contains(res.GetValue(), r.marker) {
				return string(r.marker)
			}
		}
	}
	return ""
}

// NACKs counts the responses p refused.
func (p *Proxy) NACKs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nacks
}

// saw records the watched markers resp carries, ACKed at t.
func (f *Fleet) saw(p *Proxy, resp *discoveryv3.DiscoveryResponse, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.markers {
		if _, ok := w.seen[p]; ok || !w.want(p) {
			continue
		}
		for _, r := range resp.GetResources() {
			if bytes.Contains(r.GetValue(), w.marker) {
				w.seen[p] = t
				if len(w.seen) == w.count {
					close(w.done)
				}
				break
			}
		}
	}
}

// Watch starts watching for marker in what the proxies want selects
// receive, from now: Wait returns when each of them ACKed a response
// carrying it.
func (f *Fleet) Watch(marker string, want func(*Proxy) bool) {
	w := &watch{marker: []byte(marker), start: time.Now(), seen: map[*Proxy]time.Time{}, done: make(chan struct{}), want: want}
	for _, p := range f.Proxies {
		if want(p) {
			w.count++
		}
	}
	if w.count == 0 {
		close(w.done)
	}
	f.mu.Lock()
	f.markers[marker] = w
	f.mu.Unlock()
}

// When is when each proxy the marker's watch selects ACKed a response
// carrying it, so far (nil when marker is not watched).
func (f *Fleet) When(marker string) map[*Proxy]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.markers[marker]
	if !ok {
		return nil
	}
	return maps.Clone(w.seen)
}

// Unwatch stops watching marker.
func (f *Fleet) Unwatch(marker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.markers, marker)
}

// Arrivals are when each proxy ACKed a watched marker, since a start.
type Arrivals []time.Duration

// Quantile is the q-quantile of a, 0 for none.
func (a Arrivals) Quantile(q float64) time.Duration {
	if len(a) == 0 {
		return 0
	}
	s := append(Arrivals(nil), a...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

// Wait waits until every proxy the marker's watch selects ACKed it, and
// returns each one's arrival, measured from start. It stops watching.
func (f *Fleet) Wait(ctx context.Context, marker string, start time.Time) (Arrivals, error) {
	f.mu.Lock()
	w, ok := f.markers[marker]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("marker %q is not watched", marker)
	}
	defer func() {
		f.mu.Lock()
		delete(f.markers, marker)
		f.mu.Unlock()
	}()
	select {
	case <-w.done:
	case <-ctx.Done():
		f.mu.Lock()
		n := len(w.seen)
		f.mu.Unlock()
		return nil, fmt.Errorf("%d of %d proxies took %q: %w", n, w.count, marker, ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(Arrivals, 0, len(w.seen))
	for _, t := range w.seen {
		out = append(out, t.Sub(start))
	}
	return out, nil
}

// Pushes is how many responses of typeURL the proxies kind selects got,
// in all.
func (f *Fleet) Pushes(typeURL string, want func(*Proxy) bool) int {
	n := 0
	for _, p := range f.Proxies {
		if want(p) {
			p.mu.Lock()
			n += p.pushes[typeURL]
			p.mu.Unlock()
		}
	}
	return n
}

// Counts is how many responses of typeURL each proxy got so far: what
// WaitPushed compares with.
func (f *Fleet) Counts(typeURL string) map[*Proxy]int {
	out := make(map[*Proxy]int, len(f.Proxies))
	for _, p := range f.Proxies {
		p.mu.Lock()
		out[p] = p.pushes[typeURL]
		p.mu.Unlock()
	}
	return out
}

// WaitPushed waits until every proxy want selects got a response of
// typeURL after before (Counts), and says when the last one did.
func (f *Fleet) WaitPushed(ctx context.Context, typeURL string, want func(*Proxy) bool, before map[*Proxy]int) (time.Time, error) {
	for {
		left := 0
		for _, p := range f.Proxies {
			if !want(p) {
				continue
			}
			p.mu.Lock()
			if p.pushes[typeURL] <= before[p] {
				left++
			}
			p.mu.Unlock()
		}
		if left == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d proxies got no %s push: %w", left, typeURL, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Quiet waits until no proxy got any response for quiet, and returns
// when the last response arrived (as far as counting every 50ms tells).
func (f *Fleet) Quiet(ctx context.Context, quiet time.Duration) error {
	total := func() int {
		n := 0
		for _, p := range f.Proxies {
			p.mu.Lock()
			for _, c := range p.pushes {
				n += c
			}
			p.mu.Unlock()
		}
		return n
	}
	last, since := total(), time.Now()
	for time.Since(since) < quiet {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if now := total(); now != last {
			last, since = now, time.Now()
		}
	}
	return nil
}

// LastBytes is the resource bytes of the last response of typeURL p got.
func (p *Proxy) LastBytes(typeURL string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[typeURL]
}

// Err is the first stream that failed, nil while every one runs.
func (f *Fleet) Err() error {
	var errs []error
	for _, p := range f.Proxies {
		p.mu.Lock()
		if p.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, p.err))
		}
		p.mu.Unlock()
		if len(errs) > 0 {
			break
		}
	}
	return errors.Join(errs...)
}

// Close ends every stream.
func (f *Fleet) Close() {
	for _, p := range f.Proxies {
		p.Close()
	}
}

// Close ends the proxy's stream.
func (p *Proxy) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	if p.conn != nil {
		p.conn.Close()
	}
}

// ID is the name istiod's debug endpoints know the proxy by, POD.NAMESPACE.
func (p *Proxy) ID() string { return p.Name + "." + p.Namespace }

// Gateways and Sidecars select proxies by kind; All every one.
func Gateways(p *Proxy) bool { return p.Kind == Gateway }
func Sidecars(p *Proxy) bool { return p.Kind == Sidecar }
func All(*Proxy) bool        { return true }
