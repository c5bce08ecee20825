package facts_test

import (
	"strings"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
	istionet "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/facts"
)

func TestResolver(t *testing.T) {
	kube := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "zipkin", Namespace: "istio-system"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9411}}},
	})
	istio := istiofake.NewSimpleClientset(&istionet.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: "otel", Namespace: "observability"},
		Spec: networkingv1.ServiceEntry{Hosts: []string{"otel.example.com", "*.collectors.example.com"},
			Ports: []*networkingv1.ServicePort{{Number: 4317, Name: "grpc", Protocol: "GRPC"}}},
	})
	r := &facts.Resolver{Kube: kube, Istio: istio}
	for _, c := range []struct {
		host         string
		port         uint32
		refuse, warn bool
		msg          string
	}{
		{host: "zipkin.istio-system.svc.cluster.local", port: 9411},
		{host: "otel.example.com", port: 4317},
		{host: "zipkin.istio-system.svc.cluster.local", port: 9412, warn: true, msg: "Service istio-system/zipkin has no port 9412 (it has 9411), so istiod builds no cluster outbound|9412||zipkin.istio-system.svc.cluster.local"},
		{host: "jaeger.istio-system.svc.cluster.local", port: 9411, warn: true, msg: "no Service jaeger in namespace istio-system"},
		{host: "zipkin.istio-system", port: 9411, refuse: true, msg: `"zipkin.istio-system" is a Service's short name: istiod names this Service's cluster after zipkin.istio-system.svc.cluster.local`},
		{host: "zipkin.istio-system.svc.cluster", port: 9411, refuse: true, msg: "write zipkin.istio-system.svc.cluster.local"},
		{host: "zipkin.istio-system.svc.corp.local", port: 9411, refuse: true, msg: "in the domain corp.local, but istiod's is cluster.local"},
		{host: "a.collectors.example.com", port: 4317, warn: true, msg: "no Service and no ServiceEntry has the host a.collectors.example.com"},
		{host: "otel.example.com", port: 4318, warn: true, msg: "the ServiceEntry of otel.example.com has no port 4318 (it has 4317)"},
		{host: "zipkin.elsewhere", port: 9411, warn: true, msg: "no Service and no ServiceEntry"},
	} {
		f := r.Service(items.ServiceRef{Host: c.host, Port: c.port})
		if f.Refuse != c.refuse || f.Warn != c.warn || !strings.Contains(f.Msg, c.msg) {
			t.Errorf("%s:%d: %+v, want refuse=%v warn=%v %q", c.host, c.port, f, c.refuse, c.warn, c.msg)
		}
	}
}
