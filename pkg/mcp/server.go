// Package mcp serves the generated EnvoyFilters to istiod as a config
// source: an ADS (state-of-the-world) gRPC server (pkg/ads) that istiod
// reads through its mesh config `configSources: [{address: xds://HOST:PORT}, ...]`.
//
// istiod asks for every Pilot config type by `group/version/kind`; the
// server answers EnvoyFilter with the complete current set (istiod deletes
// whatever is missing) and every other type with an empty set, so istiod
// becomes ready. Each new set is pushed to every connected istiod at once;
// that push is what makes istiod recompute and push to its proxies.
package mcp

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/ads"
)

// EnvoyFilterType is the type URL istiod asks EnvoyFilters by.
const EnvoyFilterType = "networking.istio.io/v1alpha3/EnvoyFilter"

// CreateTime is the creation time every served EnvoyFilter carries. istiod
// orders EnvoyFilters of equal priority by creation time, then name; a
// constant keeps that order stable across restarts (the priorities of the
// items already differ).
var CreateTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Observer hears about what istiod does with the pushes. It may be nil.
type Observer = ads.Observer

// Server is the MCP server: an ADS server of EnvoyFilters.
type Server struct {
	*ads.Server
}

// NewServer returns a server with nothing published yet; istiod's requests
// for EnvoyFilters wait until the first Publish.
func NewServer(log *slog.Logger, observer Observer) *Server {
	return &Server{ads.New(log, observer, EnvoyFilterType)}
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
	s.PublishResources(version, res)
	return nil
}

// Served is what the server serves, read back from its MCP resources:
// each EnvoyFilter's namespace/name and content hash; nil before the
// first Publish.
func (s *Server) Served() (map[string]string, error) {
	_, res, ok := s.Snapshot()
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
