// Package anchorstest holds what the tests of dependents share, at every
// level from pkg/anchors to a real istiod: the EnvoyFilter of a
// team, anchored on a filter globalconfig inserts, and a document whose
// set inserts it.
package anchorstest

import (
	"encoding/json"
	"fmt"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

// UserAnchoredHealthCheck is a team's EnvoyFilter, not globalconfig's: a
// health check inserted after globalconfig's local_ratelimit (the
// localRateLimit item), at priority 100, so istiod applies it after every
// item.
const UserAnchoredHealthCheck = `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: user-anchored-healthcheck
  namespace: istio-system
spec:
  priority: 100
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: GATEWAY
      listener:
        filterChain:
          filter:
            name: envoy.filters.network.http_connection_manager
            subFilter:
              name: envoy.filters.http.local_ratelimit
    patch:
      operation: INSERT_AFTER
      value:
        name: envoy.filters.http.health_check
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck
          pass_through_mode: false
`

// LocalRateLimit is a document whose set inserts local_ratelimit, beside
// gzip.
const LocalRateLimit = `
localRateLimit:
  maxTokens: 100
  tokensPerFill: 100
  fillInterval: 1s
gzip: {}
`

// EnvoyFilter is UserAnchoredHealthCheck as the client's object.
func EnvoyFilter() (*clientnetworking.EnvoyFilter, error) {
	b, err := yaml.YAMLToJSON([]byte(UserAnchoredHealthCheck))
	if err != nil {
		return nil, fmt.Errorf("anchorstest: %w", err)
	}
	ef := &clientnetworking.EnvoyFilter{}
	if err := json.Unmarshal(b, ef); err != nil {
		return nil, fmt.Errorf("anchorstest: %w", err)
	}
	return ef, nil
}
