package controller

import (
	"encoding/json"
	"reflect"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
	"github.com/globalconfig/globalconfig/pkg/status"
)

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
	user := envoyFilterOf(t, anchorstest.UserAnchoredHealthCheck)
	if err := others.Informer().GetStore().Add(user); err != nil {
		t.Fatal(err)
	}
	f.putConfig(anchorstest.LocalRateLimit)
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

	f.putConfig(anchorstest.LocalRateLimit)
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
