// Package e2e proves, against a real istiod, that each item changes what a
// gateway proxy receives: a plain xDS client connects as the gateway, and
// the tests assert on the listeners and clusters istiod sends it. It also
// runs istioctl over every generated EnvoyFilter.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

var (
	cluster    *harness.Cluster
	istiod     *harness.Istiod
	gateway    *xds.Client
	sidecar    *xds.Client
	controlBin string
	setupErr   error
)

const (
	ns           = harness.Namespace
	gatewayPort  = 80
	listenerName = "0.0.0.0_80"
	// The gateway's HTTPS server terminates TLS with the certificate of
	// a real kubernetes.io/tls Secret.
	tlsPort         = 443
	tlsListenerName = "0.0.0.0_443"
	tlsSecret       = "gateway-cert"
)

// routeBackend is the Service the test VirtualService routes to, so route
// patches have a route to patch.
var routeBackend = service{namespace: "e2e-backend", name: "web", ports: []int32{8080}}

// The test sidecar's workload: a WorkloadEntry at the sidecar's address
// with its labels, and an HTTP Service selecting it, so istiod gives the
// sidecar an inbound HTTP chain and cluster for the port (inbound|8080||),
// an outbound HTTP listener with its route configuration (0.0.0.0_8080,
// RDS "8080") and an outbound HTTP cluster, besides the catch-all inbound
// chains every sidecar has.
const (
	sidecarIP      = "10.1.1.2"
	storefront     = "storefront"
	storefrontPort = 8080
)

// service is a Service the mesh needs.
type service struct {
	namespace, name string
	ports           []int32
}

// outboundRef finds Istio outbound cluster names in a patch value.
var outboundRef = regexp.MustCompile(`outbound\|(\d+)\|\|([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local`)

// goldenNeeds returns what the golden outputs refer to: the Services of
// every outbound cluster a patch names (Istio builds a cluster only for a
// Service that exists) and every namespace a target names. Nothing here
// knows one item from another.
func goldenNeeds() (services []service, namespaces []string, err error) {
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "*.out.yaml"))
	if err != nil {
		return nil, nil, err
	}
	ports := map[[2]string]map[int32]bool{}
	nsSet := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range outboundRef.FindAllStringSubmatch(string(data), -1) {
			port, _ := strconv.Atoi(m[1])
			key := [2]string{m[3], m[2]}
			if ports[key] == nil {
				ports[key] = map[int32]bool{}
			}
			ports[key][int32(port)] = true
		}
		for _, m := range regexp.MustCompile(`(?m)^  namespace: (\S+)$`).FindAllStringSubmatch(string(data), -1) {
			nsSet[m[1]] = true
		}
	}
	for key, ps := range ports {
		svc := service{namespace: key[0], name: key[1]}
		for p := range ps {
			svc.ports = append(svc.ports, p)
		}
		slices.Sort(svc.ports)
		services = append(services, svc)
	}
	for n := range nsSet {
		namespaces = append(namespaces, n)
	}
	return services, namespaces, nil
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "globalconfig-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	setupErr = func() error {
		var err error
		if controlBin, err = harness.BuildController(dir, raceEnabled); err != nil {
			return err
		}
		if cluster, err = harness.StartCluster(ctx, dir); err != nil {
			return err
		}
		if err := createMesh(ctx); err != nil {
			return err
		}
		if istiod, err = cluster.StartIstiod(ctx, "istiod", ""); err != nil {
			return err
		}
		gateway, err = xds.Dial(ctx, istiod.GRPCAddr, xds.GatewayNode())
		if err != nil {
			return err
		}
		_, err = gateway.WaitFor(ctx, 60*time.Second, func(s xds.Snapshot) bool {
			_, err := s.GatewayHCM(listenerName)
			_, errTLS := s.GatewayHCM(tlsListenerName)
			rc := s.Routes[gatewayRoute]
			return err == nil && errTLS == nil && len(rc.GetVirtualHosts()) > 0 && len(rc.GetVirtualHosts()[0].GetRoutes()) > 0
		})
		if err != nil {
			return fmt.Errorf("gateway listeners %s and %s: %w\n%s", listenerName, tlsListenerName, err, istiod.Log(3000))
		}
		sidecar, err = xds.Dial(ctx, istiod.GRPCAddr, xds.SidecarNode(routeBackend.namespace, sidecarIP, sidecarLabels))
		if err != nil {
			return err
		}
		var last error
		if _, err = sidecar.WaitFor(ctx, 60*time.Second, func(s xds.Snapshot) bool { last = sidecarReady(s); return last == nil }); err != nil {
			return fmt.Errorf("sidecar: %w (last check: %v)\n%s", err, last, istiod.Log(3000))
		}
		return nil
	}()
	if setupErr != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", setupErr)
	}
	code := m.Run()
	for _, c := range []*xds.Client{gateway, sidecar} {
		if c != nil {
			c.Close()
		}
	}
	if istiod != nil {
		istiod.Kill()
	}
	if cluster != nil {
		cluster.Stop()
	}
	return code
}

// createMesh creates the ingress Gateway and the collector services.
func createMesh(ctx context.Context) error {
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ns},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"istio": "ingressgateway"},
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: gatewayPort, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}, {
				Port:  &networkingv1.Port{Number: tlsPort, Name: "https", Protocol: "HTTPS"},
				Hosts: []string{"*"},
				Tls:   &networkingv1.ServerTLSSettings{Mode: networkingv1.ServerTLSSettings_SIMPLE, CredentialName: tlsSecret},
			}},
		},
	}
	cert, key, err := harness.SelfSigned("gateway.e2e.example")
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tlsSecret, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key},
	}
	if _, err := cluster.Admin.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create secret: %w", err)
	}
	if _, err := cluster.Istio.NetworkingV1().Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gateway: %w", err)
	}
	// A route through the gateway, so route patches have something to patch.
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress-routes", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{"*"},
			Gateways: []string{"ingress"},
			Http: []*networkingv1.HTTPRoute{{
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
					Host: routeBackend.name + "." + routeBackend.namespace + ".svc.cluster.local", Port: &networkingv1.PortSelector{Number: uint32(routeBackend.ports[0])},
				}}},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create virtual service: %w", err)
	}
	services, namespaces, err := goldenNeeds()
	if err != nil {
		return err
	}
	services = append(services, routeBackend)
	for _, svc := range services {
		namespaces = append(namespaces, svc.namespace)
	}
	for _, name := range namespaces {
		_, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := createWorkload(ctx); err != nil {
		return err
	}
	for _, b := range services {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: b.namespace}}
		for _, p := range b.ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("tcp-%d", p), Port: p})
		}
		if _, err := cluster.Admin.CoreV1().Services(b.namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create service %s: %w", b.name, err)
		}
	}
	return nil
}

// createWorkload creates the test sidecar's workload: the Service
// storefront (HTTP port 8080, selecting app: storefront) and a
// WorkloadEntry at the sidecar's address with its labels, which istiod
// finds by the address of the connecting proxy.
func createWorkload(ctx context.Context) error {
	namespace := routeBackend.namespace
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: storefront, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Selector: sidecarLabels,
			Ports: []corev1.ServicePort{{
				Name: "http", Port: storefrontPort, TargetPort: intstr.FromInt32(storefrontPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
	if _, err := cluster.Admin.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s: %w", storefront, err)
	}
	we := &clientnetworkingv1.WorkloadEntry{
		ObjectMeta: metav1.ObjectMeta{Name: storefront, Namespace: namespace},
		Spec:       networkingv1.WorkloadEntry{Address: sidecarIP, Labels: sidecarLabels},
	}
	if _, err := cluster.Istio.NetworkingV1().WorkloadEntries(namespace).Create(ctx, we, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create workload entry %s: %w", storefront, err)
	}
	return nil
}

func setup(t testing.TB) context.Context { t.Helper(); return harness.TestContext(t, "e2e", setupErr) }
