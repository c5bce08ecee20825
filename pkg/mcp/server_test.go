package mcp_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/mcp"
)

type recorder struct {
	mu          sync.Mutex
	acks, nacks []string
	connections int
}

func (r *recorder) Connected(n int) { r.mu.Lock(); r.connections = n; r.mu.Unlock() }
func (r *recorder) Acked(typeURL, version string) {
	r.mu.Lock()
	r.acks = append(r.acks, version)
	r.mu.Unlock()
}
func (r *recorder) Nacked(typeURL, version, message string) {
	r.mu.Lock()
	r.nacks = append(r.nacks, version+": "+message)
	r.mu.Unlock()
}

// wait polls cond under the recorder's lock.
func (r *recorder) wait(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatal("the server did not record the answer")
}

func object(name string) *envoyfilter.Object {
	return &envoyfilter.Object{
		Metadata: envoyfilter.Metadata{Name: name, Namespace: "istio-system",
			Labels: map[string]string{envoyfilter.LabelItem: "gzip"}, Annotations: map[string]string{envoyfilter.AnnotationContentHash: "h-" + name}},
		Spec: &networking.EnvoyFilter{Priority: 50},
	}
}

func start(t *testing.T) (*mcp.Server, *recorder, discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient) {
	t.Helper()
	rec := &recorder{}
	srv := mcp.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), rec)
	g := grpc.NewServer()
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return srv, rec, stream
}

// recv waits for one response, or fails after a while.
func recv(t *testing.T, s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient) *discoveryv3.DiscoveryResponse {
	t.Helper()
	ch := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		r, err := s.Recv()
		if err == nil {
			ch <- r
		}
	}()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no response")
		return nil
	}
}

func TestServerProtocol(t *testing.T) {
	srv, rec, stream := start(t)
	if err := srv.Publish("v1", []*envoyfilter.Object{object("globalconfig-gzip")}); err != nil {
		t.Fatal(err)
	}
	// istiod's first requests carry a nonce of its own: they are
	// subscriptions, not ACKs, and every type is answered.
	for _, typeURL := range []string{"networking.istio.io/v1/Gateway", mcp.EnvoyFilterType} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResponseNonce: "2026-11-22T07:00:00Z"}); err != nil {
			t.Fatal(err)
		}
	}
	gw := recv(t, stream)
	if gw.GetTypeUrl() != "networking.istio.io/v1/Gateway" || len(gw.GetResources()) != 0 {
		t.Fatalf("other types get an empty set, got %v", gw)
	}
	ef := recv(t, stream)
	if ef.GetTypeUrl() != mcp.EnvoyFilterType || ef.GetVersionInfo() != "v1" || len(ef.GetResources()) != 1 {
		t.Fatalf("EnvoyFilter response %v", ef)
	}
	res := &mcpv1alpha1.Resource{}
	if err := ef.GetResources()[0].UnmarshalTo(res); err != nil {
		t.Fatal(err)
	}
	body := &networking.EnvoyFilter{}
	if err := res.GetBody().UnmarshalTo(body); err != nil {
		t.Fatal(err)
	}
	if res.GetMetadata().GetName() != "istio-system/globalconfig-gzip" || !res.GetMetadata().GetCreateTime().AsTime().Equal(mcp.CreateTime) ||
		res.GetMetadata().GetVersion() != "h-globalconfig-gzip" || body.GetPriority() != 50 {
		t.Errorf("resource %v", res)
	}

	// ACK, then a NACK of the next push.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: mcp.EnvoyFilterType, VersionInfo: "v1", ResponseNonce: ef.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, func() bool { return len(rec.acks) == 1 })
	if err := srv.Publish("v2", []*envoyfilter.Object{object("globalconfig-gzip"), object("globalconfig-zstd")}); err != nil {
		t.Fatal(err)
	}
	ef2 := recv(t, stream)
	if ef2.GetVersionInfo() != "v2" || len(ef2.GetResources()) != 2 {
		t.Fatalf("push after Publish: %v", ef2)
	}
	// A late answer to the replaced response is ignored.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: mcp.EnvoyFilterType, VersionInfo: "v1", ResponseNonce: ef.GetNonce(), ErrorDetail: &status.Status{Message: "stale"}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: mcp.EnvoyFilterType, VersionInfo: "v1", ResponseNonce: ef2.GetNonce(), ErrorDetail: &status.Status{Message: "bad filter"}}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, func() bool { return len(rec.nacks) == 1 })
	// Publishing the same version again pushes nothing; a new one does.
	if err := srv.Publish("v2", nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish("v3", nil); err != nil {
		t.Fatal(err)
	}
	ef3 := recv(t, stream)
	if ef3.GetVersionInfo() != "v3" || len(ef3.GetResources()) != 0 {
		t.Fatalf("push of an empty set: %v", ef3)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acks) != 1 || rec.acks[0] != "v1" || len(rec.nacks) != 1 || rec.nacks[0] != "v1: bad filter" || rec.connections != 1 {
		t.Errorf("acks %v, nacks %v, connections %d", rec.acks, rec.nacks, rec.connections)
	}
}

func TestSubscriptionWaitsForTheFirstPublish(t *testing.T) {
	srv, _, stream := start(t)
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: mcp.EnvoyFilterType}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		if r, err := stream.Recv(); err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Fatalf("answered before anything was published: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := srv.Publish("v1", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.GetVersionInfo() != "v1" {
			t.Errorf("version %q", r.GetVersionInfo())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no response after the first publish")
	}
}
