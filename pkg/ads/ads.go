// Package ads is a state-of-the-world aggregated discovery (ADS) server of
// one resource type: it serves its subscribers the resources last
// published, answers every other type with an empty list (so a client
// that subscribes to many types, as istiod does, becomes ready), and pushes
// each new publication to every stream at once. The MCP sink serves istiod
// its EnvoyFilters with it (pkg/mcp), and the rate-limit service gets its
// configuration from it (pkg/rlsconfig).
package ads

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// noncePrefix marks the nonces this server sends. istiod's first request of
// a type already carries a nonce of its own (a timestamp); only nonces with
// this prefix acknowledge a response of ours.
const noncePrefix = "globalconfig-"

// Observer hears about what the clients do with the pushes. It may be nil.
type Observer interface {
	Connected(n int)
	Acked(typeURL, version string)
	Nacked(typeURL, version, message string)
}

// Server is the ADS server.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	log      *slog.Logger
	observer Observer
	nonce    atomic.Uint64
	// typeURL is the type served; every other is answered empty.
	typeURL string

	mu        sync.Mutex
	version   string
	resources []*anypb.Any
	published bool
	streams   map[*stream]struct{}
}

// New returns a server of resources of typeURL with nothing published
// yet: subscribers wait until the first PublishResources.
func New(log *slog.Logger, observer Observer, typeURL string) *Server {
	return &Server{log: log, observer: observer, typeURL: typeURL, streams: map[*stream]struct{}{}}
}

// Register adds the server to g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// PublishResources makes res the served resources, under version, and
// pushes them to every connected client. Publishing the version already
// served does nothing.
func (s *Server) PublishResources(version string, res []*anypb.Any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.published && s.version == version {
		return
	}
	s.version, s.resources, s.published = version, res, true
	for st := range s.streams {
		st.notify()
	}
}

// Snapshot is what the server serves: the version and the resources last
// published, ok false before the first publication.
func (s *Server) Snapshot() (version string, res []*anypb.Any, ok bool) { return s.snapshot() }

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
		if version == sentVer && sentNonce[s.typeURL] != "" {
			return nil
		}
		nonce, err := s.send(srv, s.typeURL, version, res)
		if err != nil {
			return err
		}
		sentNonce[s.typeURL], sentVer = nonce, version
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
			// A nonce of ours acknowledges a response; on a stream that has
			// had none of this type yet it is a client's memory of another
			// stream (a server restarted): a subscription.
			if strings.HasPrefix(nonce, noncePrefix) && sentNonce[typeURL] != "" {
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
			if typeURL == s.typeURL {
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
	s.log.Info("ads connections", "type", s.typeURL, "connected", n)
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
		s.log.Warn("a client rejected a push (NACK)", "type", typeURL, "version", version)
		return
	}
	s.observer.Nacked(typeURL, version, message)
}
