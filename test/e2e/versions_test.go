package e2e

import (
	"fmt"
	"testing"
	"time"

	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"

	"github.com/globalconfig/globalconfig/test/xds"
)

// zipkinOf returns the Zipkin tracer config of the gateway's port 80 HCM.
func zipkinOf(s xds.Snapshot) (*tracev3.ZipkinConfig, error) {
	hcm, err := s.GatewayHCM(listenerName)
	if err != nil {
		return nil, err
	}
	z := &tracev3.ZipkinConfig{}
	if err := hcm.GetTracing().GetProvider().GetTypedConfig().UnmarshalTo(z); err != nil {
		return nil, fmt.Errorf("no zipkin tracer: %v", err)
	}
	return z, nil
}

// A document declaring a mixed fleet reaches each proxy in the shape its
// Envoy knows: istiod picks the variant by the proxy's ISTIO_VERSION. A
// 1.27 gateway (Envoy 1.35) gets collector_cluster and collector_endpoint;
// the 1.31 gateway (Envoy 1.39) gets collector_service.
func TestVersionVariantsPerProxy(t *testing.T) {
	ctx := setup(t)
	old, err := xds.Dial(ctx, istiod.GRPCAddr, xds.GatewayNodeIn(ns, "10.1.1.27", "1.27.3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	putConfig(ctx, t, `target:
  istioVersions: ["1.27", "1.31"]
tracing:
  enable: true
  sampling: 42
  zipkin:
    service: zipkin.istio-system.svc.cluster.local
    port: 9411
`)
	startController(ctx, t)
	const zipkinCluster = "outbound|9411||zipkin.istio-system.svc.cluster.local"
	var last error
	if _, err := old.WaitFor(ctx, effectTimeout, func(s xds.Snapshot) bool {
		z, err := zipkinOf(s)
		switch {
		case err != nil:
			last = err
		case z.GetCollectorService() != nil || z.GetCollectorCluster() != zipkinCluster || z.GetCollectorEndpoint() != "/api/v2/spans":
			last = fmt.Errorf("the 1.27 gateway got %v", z)
		default:
			last = nil
		}
		return last == nil
	}); err != nil {
		t.Fatalf("1.27 gateway: %v (last: %v)", err, last)
	}
	waitEffect(ctx, t, "1.31 gateway", func(s xds.Snapshot) error {
		z, err := zipkinOf(s)
		if err != nil {
			return err
		}
		uri := z.GetCollectorService().GetHttpUri()
		if z.GetCollectorCluster() != "" || uri.GetCluster() != zipkinCluster || uri.GetTimeout().AsDuration() != 5*time.Second {
			return fmt.Errorf("the 1.31 gateway got %v", z)
		}
		return nil
	})
	// What both share is emitted once and reaches both.
	for name, c := range map[string]*xds.Client{"1.27": old, "1.31": gateway} {
		hcm, err := c.Snapshot().GatewayHCM(listenerName)
		if err != nil || hcm.GetTracing().GetRandomSampling().GetValue() != 42 {
			t.Errorf("%s gateway: sampling %v, %v", name, hcm.GetTracing().GetRandomSampling(), err)
		}
	}
}
