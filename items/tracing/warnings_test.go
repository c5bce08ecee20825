package tracing

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
)

// serviceName with zipkin is a warning: zipkin names the service after the
// proxy's service cluster (test/proxy's TestTracingToZipkin sees it at a
// real Envoy); with another provider it is used and says nothing.
func TestServiceNameWithZipkinWarns(t *testing.T) {
	zipkin := &Tracing{ServiceName: "edge", Zipkin: &Zipkin{Backend: Backend{Service: "zipkin.istio-system.svc.cluster.local", Port: items.Port(9411)}}}
	err := zipkin.Warnings()
	if err == nil || !strings.Contains(err.Error(), "serviceName") || !strings.Contains(err.Error(), "zipkin does not use it") {
		t.Errorf("zipkin with serviceName: %v", err)
	}
	if err := (&Tracing{Zipkin: zipkin.Zipkin}).Warnings(); err != nil {
		t.Errorf("zipkin without serviceName: %v", err)
	}
	if err := (&Tracing{ServiceName: "edge", Datadog: &Datadog{Backend{Service: "datadog-agent.monitoring.svc.cluster.local", Port: items.Port(8126)}}}).Warnings(); err != nil {
		t.Errorf("datadog with serviceName: %v", err)
	}
}
