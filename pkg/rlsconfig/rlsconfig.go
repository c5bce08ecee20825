// Package rlsconfig gives a rate-limit service (envoyproxy/ratelimit) the
// limits of the set the proxies have. The globalRateLimit item's
// EnvoyFilter carries its service's configuration
// (envoyfilter.AnnotationServiceConfig); every set — the document's, a
// canary split (both copies), the last good one after a rollback — is read
// the same way, so the service always holds the limits of exactly the
// descriptors the proxies send. The controller serves them over xDS
// (state-of-the-world ADS, the reference service's CONFIG_TYPE=GRPC_XDS_SOTW),
// so an edit reaches the service in milliseconds, without a restart; Files
// writes them in the service's own file format, for `globalconfig render`
// and its config checker.
package rlsconfig

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/ads"
)

// TypeURL is the type the reference rate-limit service asks its
// configuration by.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Configs are the rate-limit service configurations set carries, one per
// domain, sorted by domain. Copies of one item (a canary split) merge:
// their descriptors are named by each limit's definition, so the old and
// the new limit stand side by side and each proxy gets its own.
func Configs(set []*envoyfilter.Object) ([]*rlsv3.RateLimitConfig, error) {
	byDomain := map[string]*rlsv3.RateLimitConfig{}
	for _, o := range set {
		m, err := o.ServiceConfig()
		if err != nil {
			return nil, err
		}
		cfg, ok := m.(*rlsv3.RateLimitConfig)
		if !ok {
			continue
		}
		merged, ok := byDomain[cfg.GetDomain()]
		if !ok {
			merged = &rlsv3.RateLimitConfig{Name: cfg.GetDomain(), Domain: cfg.GetDomain()}
			byDomain[cfg.GetDomain()] = merged
		}
		merged.Descriptors = mergeDescriptors(merged.Descriptors, cfg.GetDescriptors())
	}
	out := make([]*rlsv3.RateLimitConfig, 0, len(byDomain))
	for _, d := range slices.Sorted(maps.Keys(byDomain)) {
		out = append(out, byDomain[d])
	}
	return out, nil
}

// mergeDescriptors adds to list the descriptors of more it lacks, by key
// and value; equal ones (the same limit in two copies) are kept once.
func mergeDescriptors(list, more []*rlsv3.RateLimitDescriptor) []*rlsv3.RateLimitDescriptor {
	for _, d := range more {
		i := slices.IndexFunc(list, func(e *rlsv3.RateLimitDescriptor) bool {
			return e.GetKey() == d.GetKey() && e.GetValue() == d.GetValue()
		})
		if i < 0 {
			list = append(list, proto.Clone(d).(*rlsv3.RateLimitDescriptor))
			continue
		}
		list[i].Descriptors = mergeDescriptors(list[i].Descriptors, d.GetDescriptors())
	}
	slices.SortFunc(list, func(a, b *rlsv3.RateLimitDescriptor) int {
		return cmp.Or(strings.Compare(a.GetKey(), b.GetKey()), strings.Compare(a.GetValue(), b.GetValue()))
	})
	return list
}

// Resources packs cfgs for xDS, and names their version: a hash of them.
func Resources(cfgs []*rlsv3.RateLimitConfig) ([]*anypb.Any, string, error) {
	h := sha256.New()
	out := make([]*anypb.Any, 0, len(cfgs))
	for _, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			return nil, "", fmt.Errorf("pack %s: %w", c.GetDomain(), err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		if err != nil {
			return nil, "", err
		}
		h.Write(b)
		out = append(out, a)
	}
	return out, hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Server serves a set's rate-limit service configurations over xDS.
type Server struct {
	*ads.Server
	log  *slog.Logger
	last string
}

// NewServer returns a server with nothing published: the service waits
// for the first Publish (the reference service starts only once it has a
// configuration).
func NewServer(log *slog.Logger) *Server {
	return &Server{Server: ads.New(log, nil, TypeURL), log: log}
}

// Publish serves the configurations set carries, and returns their
// version; a set that carries none serves none.
func (s *Server) Publish(set []*envoyfilter.Object) (string, error) {
	cfgs, err := Configs(set)
	if err != nil {
		return "", err
	}
	res, version, err := Resources(cfgs)
	if err != nil {
		return "", err
	}
	if version != s.last {
		s.log.Info("rate-limit service configuration", "version", version, "domains", len(cfgs))
		s.last = version
	}
	s.PublishResources(version, res)
	return version, nil
}

// The service's file format (envoyproxy/ratelimit's YAML), field by field.
type (
	fileConfig struct {
		Domain      string           `json:"domain"`
		Descriptors []fileDescriptor `json:"descriptors"`
	}
	fileDescriptor struct {
		Key         string           `json:"key"`
		Value       string           `json:"value,omitempty"`
		RateLimit   *fileLimit       `json:"rate_limit,omitempty"`
		Descriptors []fileDescriptor `json:"descriptors,omitempty"`
		ShadowMode  bool             `json:"shadow_mode,omitempty"`
	}
	fileLimit struct {
		Unit            string `json:"unit"`
		RequestsPerUnit uint32 `json:"requests_per_unit"`
	}
)

// Files writes cfgs in the service's file format, one YAML file per
// domain, named after it: what `globalconfig render` shows, and what the
// service's config checker reads.
func Files(cfgs []*rlsv3.RateLimitConfig) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, c := range cfgs {
		b, err := yaml.Marshal(fileConfig{Domain: c.GetDomain(), Descriptors: fileDescriptors(c.GetDescriptors())})
		if err != nil {
			return nil, err
		}
		out[c.GetDomain()+".yaml"] = b
	}
	return out, nil
}

func fileDescriptors(ds []*rlsv3.RateLimitDescriptor) []fileDescriptor {
	var out []fileDescriptor
	for _, d := range ds {
		f := fileDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: fileDescriptors(d.GetDescriptors()), ShadowMode: d.GetShadowMode()}
		if rl := d.GetRateLimit(); rl != nil {
			f.RateLimit = &fileLimit{Unit: strings.ToLower(rl.GetUnit().String()), RequestsPerUnit: rl.GetRequestsPerUnit()}
		}
		out = append(out, f)
	}
	return out
}
