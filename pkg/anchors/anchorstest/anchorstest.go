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

// HealthCheck is a team's EnvoyFilter, not globalconfig's, as a manifest:
// a health check placed by op (INSERT_AFTER, INSERT_BEFORE, MERGE...)
// against globalconfig's local_ratelimit (the localRateLimit item), in
// namespace, at priority 100, so istiod applies it after every item;
// extra is more of its spec (a workloadSelector), indented by two spaces.
func HealthCheck(op, namespace, extra string) string {
	return `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: user-anchored-healthcheck
  namespace: ` + namespace + `
spec:
  priority: 100
` + extra + `
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
      operation: ` + op + `
      value:
        name: envoy.filters.http.health_check
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck
          pass_through_mode: false
`
}

// UserAnchoredHealthCheck is the EnvoyFilter:
// istio-system/user-anchored-healthcheck, inserted after local_ratelimit.
var UserAnchoredHealthCheck = HealthCheck("INSERT_AFTER", "istio-system", "")

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
