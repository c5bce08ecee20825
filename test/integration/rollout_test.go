package integration

import (
	"context"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// endpointSlice is a slice of Service svc with addresses, ready or not.
func endpointSlice(name, svc string, ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, a := range slices.Sorted(func(yield func(string) bool) {
		for a := range ready {
			if !yield(a) {
				return
			}
		}
	}) {
		r := ready[a]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &r}})
	}
	return s
}

// The controller finds every istiod instance, ready or not (one that is
// not ready may still serve proxies), from the istiod Service's
// EndpointSlices (as its ServiceAccount, with deploy/'s RBAC),
// asks each one, reports those that don't answer as unreachable, and
// follows the slices as they change. (test/e2e proves the answers of a
// real istiod; no istiod runs here, and a slice can't name loopback.)
func TestRolloutFindsIstiodInstances(t *testing.T) {
	f := setup(t)
	slicesAPI := cluster.Admin.DiscoveryV1().EndpointSlices(ns)
	for _, s := range []*discoveryv1.EndpointSlice{
		endpointSlice("istiod-a", "istiod", map[string]bool{"192.0.2.10": true, "192.0.2.11": false}),
		endpointSlice("istiod-b", "istiod", map[string]bool{"192.0.2.12": true}),
		endpointSlice("other-a", "other", map[string]bool{"192.0.2.99": true}),
	} {
		if _, err := slicesAPI.Create(f.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = slicesAPI.Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
	}
	f.put("gzip:\n  chunkSize: 8192\n")
	f.start("rollout", "--leader-elect=false", "--rollout=true", "--istiod="+ns+"/istiod", "--istiod-debug-port=18080")

	// instances waits until the status lists exactly want, each
	// unreachable: within a few polls, each bounded by the request
	// timeout.
	instances := func(want ...string) {
		t.Helper()
		var last *status.Status
		if !harness.Eventually(f.ctx, 4*rollout.RequestTimeout, func() bool {
			s, err := f.readStatus()
			if err != nil {
				return false
			}
			last = s
			st := s.Rollout
			if st == nil || s.Applied == nil || st.Version != s.Applied.Hash || len(st.Istiod) != len(want) {
				return false
			}
			for i, ist := range st.Istiod {
				if ist.Address != want[i] || ist.Error == "" {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("the status should list the istiod instances %v, unreachable; last: %+v", want, last)
		}
	}
	instances("http://192.0.2.10:18080", "http://192.0.2.11:18080", "http://192.0.2.12:18080")
	if len(f.events("IstiodUnreachable")) == 0 {
		t.Error("no IstiodUnreachable event")
	}
	if err := slicesAPI.Delete(f.ctx, "istiod-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	instances("http://192.0.2.10:18080", "http://192.0.2.11:18080")
}
