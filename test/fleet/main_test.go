package fleet_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The suite runs one API server and one istiod; each test or benchmark
// brings its own fleet, controller and documents.
var (
	cluster    *harness.Cluster
	istiod     *harness.Istiod
	controlBin string
	setupErr   error
	dir        string
)

const ns = harness.Namespace

// services are what the sidecars' namespaces hold: each sidecar gets the
// outbound listeners and clusters of every one, as in a mesh.
const services = 20

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if dir, err = os.MkdirTemp("", "globalconfig-fleet-"); err != nil {
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
		// istiod admits 25 new streams a second by default
		// (PILOT_MAX_REQUESTS_PER_SECOND), which would make connecting a
		// thousand proxies take most of a minute: the figures are about
		// pushes, not about connecting.
		istiod, err = cluster.StartIstiodWith(ctx, harness.IstiodOptions{Name: "istiod", Env: []string{"PILOT_MAX_REQUESTS_PER_SECOND=1000"}})
		return err
	}()
	if setupErr != nil {
		fmt.Fprintln(os.Stderr, "fleet setup:", setupErr)
	}
	code := m.Run()
	if istiod != nil {
		istiod.Kill()
	}
	if cluster != nil {
		cluster.Stop()
	}
	return code
}

// createMesh creates the gateways' Gateway (an HTTP server on port 80:
// listener 0.0.0.0_80) and Services in a few namespaces, and the services
// the full example sends to (its tracing collector, its rate-limit
// service, its auth service), so every cluster its patches name exists.
func createMesh(ctx context.Context) error {
	gw := &clientnetworkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ns},
		Spec: networkingv1.Gateway{
			Selector: map[string]string{"istio": "ingressgateway"},
			Servers: []*networkingv1.Server{{
				Port:  &networkingv1.Port{Number: 80, Name: "http", Protocol: "HTTP"},
				Hosts: []string{"*"},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create gateway: %w", err)
	}
	type svc struct {
		ns, name string
		port     int32
	}
	list := []svc{{"istio-system", "zipkin", 9411}, {"ratelimit", "ratelimit", 8081}, {"oauth2-proxy", "oauth2-proxy", 4180}}
	for i := range services {
		list = append(list, svc{fmt.Sprintf("team-%d", i%5), "api-" + strconv.Itoa(i), 8080})
	}
	made := map[string]bool{"istio-system": true}
	if err := cluster.TargetNamespace(ctx, gatewayNamespace); err != nil {
		return err
	}
	for _, s := range list {
		if !made[s.ns] {
			if _, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			made[s.ns] = true
		}
		obj := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": s.name},
				Ports:    []corev1.ServicePort{{Name: "http", Port: s.port}},
			},
		}
		if _, err := cluster.Admin.CoreV1().Services(s.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create service %s/%s: %w", s.ns, s.name, err)
		}
	}
	return nil
}

func setup(t testing.TB) context.Context {
	t.Helper()
	return harness.TestContext(t, "fleet", setupErr)
}

// resetCluster leaves the cluster as a test found it: no managed
// EnvoyFilters, no status and no last good copy, so that the next test's
// controller starts with nothing applied.
func resetCluster(ctx context.Context) error {
	if err := cluster.PruneManaged(ctx); err != nil {
		return err
	}
	for _, name := range []string{status.ConfigMapName(harness.ConfigMapName), controller.LastGoodName(harness.ConfigMapName)} {
		err := cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
