package harness

import (
	"fmt"
	"time"

	healthcheckv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// HealthCheckPatch inserts a health check filter that the proto rules
// accept and Envoy refuses at load ("cache_time_ms must not be set when
// path_through_mode is disabled"): a gateway it reaches NACKs.
func HealthCheckPatch() (envoyfilter.Patch, error) {
	hc := &healthcheckv3.HealthCheck{PassThroughMode: wrapperspb.Bool(false), CacheTime: durationpb.New(5 * time.Second)}
	if err := hc.ValidateAll(); err != nil {
		return envoyfilter.Patch{}, fmt.Errorf("the proto rules refuse it already: %w", err)
	}
	return envoyfilter.InsertHTTPFilter("envoy.filters.http.health_check", hc)
}

// PoisonAfterRateLimit is a hand-written EnvoyFilter (not globalconfig's)
// that inserts HealthCheckPatch's filter after the local rate limit
// filter: harmless while no rate limit is there, refused by every Envoy
// once globalconfig's localRateLimit puts it there.
func PoisonAfterRateLimit() (*envoyfilter.Object, error) {
	p, err := HealthCheckPatch()
	if err != nil {
		return nil, err
	}
	// Applied after every item's EnvoyFilter, so the filter is there.
	o, err := envoyfilter.NewObject("poison", envoyfilter.Placement{Priority: 1000, Insert: envoyfilter.Position{
		Operation: networking.EnvoyFilter_Patch_INSERT_AFTER, Anchor: envoyfilter.LocalRateLimit}},
		envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		return nil, err
	}
	o.Metadata.Name = "hand-written-poison"
	o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "poison"}
	return o, nil
}
