package controller

import (
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	istionet "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/facts"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
)

const docRateLimit = `
globalRateLimit:
  service: ratelimit.ratelimit.svc.cluster.local
  port: 8081
  limits:
    everyone:
      requests: 20
      unit: minute
`

// While the rate-limit service has no cluster, the status does not look
// green: it says globalRateLimit is not in effect and that no limit is
// enforced (what Envoy 1.40 and 1.39 do, test/proxy TestServiceFailure);
// once its ServiceEntry exists, it says nothing of the kind.
func TestStatusSaysItemNotInEffect(t *testing.T) {
	r := render.New()
	f := newFixture(t, Config{Renderer: r})
	r.SetFacts(&facts.Resolver{Kube: f.kube, Istio: f.istio, TTL: time.Nanosecond})
	f.putConfig(docRateLimit)
	f.mustSync()
	st := f.status()
	if st.State != status.Applied {
		t.Errorf("state %s, want Applied (the EnvoyFilters are delivered)", st.State)
	}
	if len(st.NotInEffect) != 1 || st.NotInEffect[0].Path != "globalRateLimit.service" ||
		st.NotInEffect[0].Message != "no limit is enforced: every request passes unlimited (failureMode allow)" {
		t.Errorf("notInEffect %+v, want globalRateLimit.service: no limit is enforced", st.NotInEffect)
	}
	for _, want := range []string{"globalRateLimit is not in effect", "no limit is enforced: every request passes unlimited"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q does not say %q", st.Message, want)
		}
	}
	if len(st.Warnings) == 0 {
		t.Error("warnings: none, while the rate-limit service is missing")
	}

	se := &istionet.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: "ratelimit", Namespace: "ratelimit"},
		Spec: networkingv1.ServiceEntry{Hosts: []string{"ratelimit.ratelimit.svc.cluster.local"},
			Ports: []*networkingv1.ServicePort{{Number: 8081, Name: "grpc", Protocol: "GRPC"}}},
	}
	if _, err := f.istio.NetworkingV1().ServiceEntries("ratelimit").Create(f.ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mustSync()
	st = f.status()
	if len(st.NotInEffect) != 0 || strings.Contains(st.Message, "not in effect") || len(st.Warnings) != 0 {
		t.Errorf("with the ServiceEntry: notInEffect %+v, message %q, warnings %+v; want none", st.NotInEffect, st.Message, st.Warnings)
	}
}
