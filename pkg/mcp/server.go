// Package mcp serves the generated EnvoyFilters to istiod as a config
// source: an ADS (state-of-the-world) gRPC server that istiod reads through
// its mesh config `configSources: [{address: xds://HOST:PORT}, ...]`.
//
// istiod asks for every Pilot config type by `group/version/kind`; the
// server answers EnvoyFilter with the complete current set (istiod deletes
// whatever is missing) and every other type with an empty set, so istiod
// becomes ready. Each new set is pushed to every connected istiod at once;
// that push is what makes istiod recompute and push to its proxies.
package mcp

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// EnvoyFilterType is the type URL istiod asks EnvoyFilters by.
const EnvoyFilterType = "networking.istio.io/v1alpha3/EnvoyFilter"

// CreateTime is the creation time every served EnvoyFilter carries. istiod
// orders EnvoyFilters of equal priority by creation time, then name; a
// constant keeps that order stable across restarts (the priorities of the
// items already differ).
var CreateTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// noncePrefix marks the nonces this server sends. istiod's first request of
// a type already carries a nonce of its own (a timestamp); only nonces with
// this prefix acknowledge a response of ours.
const noncePrefix = "globalconfig-"

// Observer hears about what istiod does with the pushes. It may be nil.
type Observer interface {
	Connected(n int)
	Acked(typeURL, version string)
	Nacked(typeURL, version, message string)
}

// Server is the MCP (ADS) server.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	log      *slog.Logger
	observer Observer
	nonce    atomic.Uint64

	mu        sync.Mutex
	version   string
	resources []*anypb.Any
	published bool
	streams   map[*stream]struct{}
}

// NewServer returns a server with nothing published yet; istiod's requests
// for EnvoyFilters wait until the first Publish.
func NewServer(log *slog.Logger, observer Observer) *Server {
	return &Server{log: log, observer: observer, streams: map[*stream]struct{}{}}
}

// Register adds the server to g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// Resources turns EnvoyFilters into MCP resources.
func Resources(objs []*envoyfilter.Object) ([]*anypb.Any, error) {
	out := make([]*anypb.Any, 0, len(objs))
	for _, o := range objs {
		body, err := anypb.New(o.Spec)
		if err != nil {
			return nil, fmt.Errorf("pack %s: %w", o.Metadata.Name, err)
		}
		res, err := anypb.New(&mcpv1alpha1.Resource{
			Metadata: &mcpv1alpha1.Metadata{
				Name:        o.Metadata.Namespace + "/" + o.Metadata.Name,
				CreateTime:  timestamppb.New(CreateTime),
				Version:     o.Hash(),
				Labels:      o.Metadata.Labels,
				Annotations: o.Metadata.Annotations,
			},
			Body: body,
		})
		if err != nil {
			return nil, fmt.Errorf("pack %s: %w", o.Metadata.Name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// Publish makes objs the served set, under version, and pushes it to every
// connected istiod. Publishing the version already served does nothing.
func (s *Server) Publish(version string, objs []*envoyfilter.Object) error {
	res, err := Resources(objs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.published && s.version == version {
		return nil
	}
	s.version, s.resources, s.published = version, res, true
	for st := range s.streams {
		st.notify()
	}
	return nil
}

// Served is what the server serves, read back from its MCP resources:
// each EnvoyFilter's namespace/name and content hash; nil before the
// first Publish.
func (s *Server) Served() (map[string]string, error) {
	_, res, ok := s.snapshot()
	if !ok {
		return nil, nil
	}
	objs := map[string]string{}
	for _, a := range res {
		r := &mcpv1alpha1.Resource{}
		if err := a.UnmarshalTo(r); err != nil {
			return nil, fmt.Errorf("mcp: unpack a served resource: %w", err)
		}
		objs[r.GetMetadata().GetName()] = r.GetMetadata().GetVersion()
	}
	return objs, nil
}

func (s *Server) snapshot() (string, []*anypb.Any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.resources, s.published
}

// stream is one connected istiod.
type stream struct {
	changed chan struct{}
}

func (st *stream) notify() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

// DeltaAggregatedResources is not served: istiod's config source client
// uses state of the world.
func (s *Server) DeltaAggregatedResources(discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return status.Error(codes.Unimplemented, "globalconfig serves state-of-the-world ADS only")
}

// StreamAggregatedResources serves one istiod.
func (s *Server) StreamAggregatedResources(srv discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	st := &stream{changed: make(chan struct{}, 1)}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	n := len(s.streams)
	s.mu.Unlock()
	s.connected(n)
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		n := len(s.streams)
		s.mu.Unlock()
		s.connected(n)
	}()

	reqs := make(chan *discoveryv3.DiscoveryRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-srv.Context().Done():
				return
			}
		}
	}()

	var (
		subscribed bool                  // to EnvoyFilters
		sentNonce  = map[string]string{} // type → nonce of our last response
		sentVer    string                // EnvoyFilter version last sent
	)
	// sendFilters sends the current set; until the first Publish there is
	// none, and istiod waits (a reconnecting istiod keeps what it has).
	sendFilters := func() error {
		version, res, ok := s.snapshot()
		if !ok {
			return nil
		}
		if version == sentVer && sentNonce[EnvoyFilterType] != "" {
			return nil
		}
		nonce, err := s.send(srv, EnvoyFilterType, version, res)
		if err != nil {
			return err
		}
		sentNonce[EnvoyFilterType], sentVer = nonce, version
		return nil
	}
	for {
		select {
		case err := <-recvErr:
			if errors.Is(err, srv.Context().Err()) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-srv.Context().Done():
			return nil
		case <-st.changed:
			if subscribed {
				if err := sendFilters(); err != nil {
					return err
				}
			}
		case req := <-reqs:
			typeURL := req.GetTypeUrl()
			nonce := req.GetResponseNonce()
			if strings.HasPrefix(nonce, noncePrefix) {
				if nonce != sentNonce[typeURL] {
					continue // an answer to a response we have since replaced
				}
				if d := req.GetErrorDetail(); d != nil {
					s.nacked(typeURL, req.GetVersionInfo(), d.GetMessage())
				} else {
					s.acked(typeURL, req.GetVersionInfo())
				}
				continue
			}
			// A subscription (istiod's own nonce, or none).
			if typeURL == EnvoyFilterType {
				subscribed = true
				sentNonce[typeURL] = ""
				if err := sendFilters(); err != nil {
					return err
				}
				continue
			}
			n, err := s.send(srv, typeURL, "empty", nil)
			if err != nil {
				return err
			}
			sentNonce[typeURL] = n
		}
	}
}

func (s *Server) send(srv discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer, typeURL, version string, res []*anypb.Any) (string, error) {
	nonce := fmt.Sprintf("%s%d", noncePrefix, s.nonce.Add(1))
	if err := srv.Send(&discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Resources: res, Nonce: nonce}); err != nil {
		return "", fmt.Errorf("send %s: %w", typeURL, err)
	}
	return nonce, nil
}

func (s *Server) connected(n int) {
	s.log.Info("mcp connections", "connected", n)
	if s.observer != nil {
		s.observer.Connected(n)
	}
}

func (s *Server) acked(typeURL, version string) {
	if s.observer != nil {
		s.observer.Acked(typeURL, version)
	}
}

func (s *Server) nacked(typeURL, version, message string) {
	if s.observer == nil {
		// The message may quote the configuration; only an observer that
		// knows the secrets to scrub gets it.
		s.log.Warn("istiod rejected a push (NACK)", "type", typeURL, "version", version)
		return
	}
	s.observer.Nacked(typeURL, version, message)
}
