package preflight

import (
	"context"
	"reflect"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/api/networking/v1"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A classic ingress gateway: its Service maps 80 to 8080 and 443 to 8443,
// so its RDS names carry 8080 and 8443, and istiod matches a route
// configuration's portNumber against the Gateway's server ports 80 and
// 443; a server port no Service has is kept.
func TestGatewayPortMap(t *testing.T) {
	labels := map[string]string{"istio": "ingressgateway"}
	kube := kubefake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-ingressgateway", Namespace: "istio-system"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "http2", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
			{Name: "named", Port: 7000, TargetPort: intstr.FromString("admin")},
		}},
	}, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "istio-system"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "other"}, Ports: []corev1.ServicePort{{Port: 9000, TargetPort: intstr.FromInt32(1)}}},
	})
	istio := istiofake.NewSimpleClientset()
	// Created, not seeded: the fake's tracker files a seeded v1 Gateway
	// where a List does not find it.
	if _, err := istio.NetworkingV1().Gateways("apps").Create(context.Background(), &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "apps"},
		Spec: networkingv1.Gateway{Selector: labels, Servers: []*networkingv1.Server{
			{Port: &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}},
			{Port: &networkingv1.Port{Number: 443, Name: "https", Protocol: "HTTPS"}, Hosts: []string{"*"}},
			{Port: &networkingv1.Port{Number: 9000, Name: "extra", Protocol: "HTTP"}, Hosts: []string{"*"}},
			{Port: &networkingv1.Port{Number: 7000, Name: "admin", Protocol: "HTTP"}, Hosts: []string{"*"}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	px := Proxy{Name: "gw-1.istio-system", Namespace: "istio-system", Labels: labels, Type: "router"}
	ports, unresolved, err := GatewayPorts(context.Background(), kube, istio, px)
	if err != nil {
		t.Fatal(err)
	}
	if want := (PortMap{8080: {80}, 8443: {443}, 9000: {9000}}); !reflect.DeepEqual(ports, want) {
		t.Errorf("port map %v, want %v", ports, want)
	}
	if len(unresolved) != 1 {
		t.Errorf("unresolved %q, want the named target port", unresolved)
	}
	match := func(port uint32) Patch {
		return Patch{CP: &networking.EnvoyFilter_EnvoyConfigObjectPatch{Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
			Context: networking.EnvoyFilter_GATEWAY,
			ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{RouteConfiguration: &networking.EnvoyFilter_RouteConfigurationMatch{
				PortNumber: port}},
		}}}
	}
	for _, c := range []struct {
		route string
		port  uint32
		want  bool
	}{
		{"http.8080", 80, true},
		{"http.8080", 8080, false},
		{"https.8443.https.gw.apps", 443, true},
		{"https.8443.https.gw.apps", 8443, false},
		{"http.9000", 9000, true},
		{"http.5000", 5000, true}, // no Gateway server: the port itself
	} {
		if got := routeMatch(networking.EnvoyFilter_GATEWAY, ports, &routev3.RouteConfiguration{Name: c.route}, match(c.port)); got != c.want {
			t.Errorf("route %s, portNumber %d: match %v, want %v", c.route, c.port, got, c.want)
		}
	}
}
