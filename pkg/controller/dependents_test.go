package controller

import (
	"encoding/json"
	"reflect"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/status"
)

// userAnchored is the user EnvoyFilter: a health check inserted
// after globalconfig's local_ratelimit, at priority 100.
const userAnchored = `
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

const docLocalRateLimit = `
localRateLimit:
  maxTokens: 100
  tokensPerFill: 100
  fillInterval: 1s
gzip: {}
`

func envoyFilterOf(t *testing.T, manifest string) *clientnetworking.EnvoyFilter {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	ef := &clientnetworking.EnvoyFilter{}
	if err := json.Unmarshal(b, ef); err != nil {
		t.Fatal(err)
	}
	return ef
}

// The status lists the user's EnvoyFilter as a dependent of localRateLimit
// while both are there, and no longer once either is gone.
func TestStatusListsDependents(t *testing.T) {
	f := newFixture(t, Config{})
	others := istioinformers.NewSharedInformerFactory(f.istio, 0).Networking().V1alpha3().EnvoyFilters()
	if err := f.ctrl.WatchDependents(others); err != nil {
		t.Fatal(err)
	}
	user := envoyFilterOf(t, userAnchored)
	if err := others.Informer().GetStore().Add(user); err != nil {
		t.Fatal(err)
	}
	f.putConfig(docLocalRateLimit)
	f.mustSync()
	f.deliver()
	f.mustSync()
	want := []status.Dependent{{Namespace: "istio-system", Name: "user-anchored-healthcheck", Patch: 0, Operation: "INSERT_AFTER",
		Filter: "envoy.filters.http.local_ratelimit", Item: "localRateLimit"}}
	if got := f.status().Dependents; !reflect.DeepEqual(got, want) {
		t.Fatalf("dependents %+v, want %+v", got, want)
	}

	f.putConfig("gzip: {}\n")
	f.mustSync()
	f.deliver()
	f.mustSync()
	if got := f.status().Dependents; got != nil {
		t.Errorf("with localRateLimit removed, dependents %+v, want none", got)
	}

	f.putConfig(docLocalRateLimit)
	f.mustSync()
	f.deliver()
	f.mustSync()
	if got := f.status().Dependents; len(got) != 1 {
		t.Fatalf("localRateLimit back: dependents %+v, want the user's", got)
	}
	if err := others.Informer().GetStore().Delete(user); err != nil {
		t.Fatal(err)
	}
	f.mustSync()
	if got := f.status().Dependents; got != nil {
		t.Errorf("with the user's EnvoyFilter deleted, dependents %+v, want none", got)
	}
}
