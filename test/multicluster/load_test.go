package multicluster

import (
	"context"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/test/harness"
)

// proxyName is the gateway's POD.NAMESPACE, as istiod and the status
// name it.
func (s *site) proxyName() string { return strings.Split(s.Gateway.NodeID, "~")[2] }

// statsArgs point the controller at each site's gateway's own statistics
// (its admin's /stats/prometheus), for rollout.analysis: in a cluster,
// istio-agent serves the same counters on the pod's port 15020.
func statsArgs(of ...*site) string {
	var kv []string
	for _, s := range of {
		kv = append(kv, s.proxyName()+"=http://"+s.Gateway.AdminAddr+"/stats/prometheus")
	}
	return "--rollout-stats-url=" + strings.Join(kv, ",")
}

// startLoad sends real requests through the gateways of sites until t
// ends (harness.Load), counted by cluster name.
func startLoad(ctx context.Context, t testing.TB, of ...*site) *harness.Load {
	urls := map[string]string{}
	for _, s := range of {
		urls[s.Name] = s.URL("/echo")
	}
	return harness.StartLoad(ctx, t, urls)
}
