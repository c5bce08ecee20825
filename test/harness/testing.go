package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// TestContext fails t when the suite's setup failed (setupErr), and gives
// it a context bounded to five minutes.
func TestContext(t testing.TB, suite string, setupErr error) context.Context {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("%s setup: %v", suite, setupErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// RunController runs the controller binary bin, without leader election,
// until t ends; then it removes the global ConfigMap, its status, its last
// good copy and the EnvoyFilters it made, and logs the controller's output
// if t failed.
func (c *Cluster) RunController(t testing.TB, bin string, args ...string) *Controller {
	t.Helper()
	ctl, err := c.StartController(bin, "controller-"+strings.ReplaceAll(t.Name(), "/", "-"), append([]string{"--leader-elect=false"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctl.Kill()
		if t.Failed() {
			t.Logf("controller log:\n%s", ctl.Log(5000))
		}
		bg := context.Background()
		_ = c.Admin.CoreV1().ConfigMaps(Namespace).Delete(bg, ConfigMapName, metav1.DeleteOptions{})
		_ = c.Admin.CoreV1().ConfigMaps(Namespace).Delete(bg, status.ConfigMapName(ConfigMapName), metav1.DeleteOptions{})
		_ = c.Admin.CoreV1().ConfigMaps(Namespace).Delete(bg, controller.LastGoodName(ConfigMapName), metav1.DeleteOptions{})
		_ = c.Istio.NetworkingV1alpha3().EnvoyFilters(Namespace).DeleteCollection(bg, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	})
	return ctl
}

// CreateLoopbackService puts a server listening on 127.0.0.1:loopbackPort
// in the mesh as host:port (HTTP), with a ServiceEntry in Namespace: the
// outbound cluster gets the name a Service would give it.
func (c *Cluster) CreateLoopbackService(ctx context.Context, host string, port uint32, loopbackPort int) error {
	return c.CreateServiceEntry(ctx, host, port, "HTTP", loopbackPort)
}

// CreateServiceEntry puts host:port in the mesh with a ServiceEntry in
// Namespace speaking protocol (HTTP, GRPC), its endpoints 127.0.0.1 at
// each of loopbackPorts; none gives a cluster with no endpoint.
func (c *Cluster) CreateServiceEntry(ctx context.Context, host string, port uint32, protocol string, loopbackPorts ...int) error {
	name := strings.ToLower(protocol)
	var endpoints []*networkingv1.WorkloadEntry
	for _, p := range loopbackPorts {
		endpoints = append(endpoints, &networkingv1.WorkloadEntry{Address: "127.0.0.1", Ports: map[string]uint32{name: uint32(p)}})
	}
	se := &clientnetworkingv1.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: host, Namespace: Namespace},
		Spec: networkingv1.ServiceEntry{
			Hosts:      []string{host},
			Location:   networkingv1.ServiceEntry_MESH_INTERNAL,
			Resolution: networkingv1.ServiceEntry_STATIC,
			Ports:      []*networkingv1.ServicePort{{Number: port, Name: name, Protocol: protocol}},
			Endpoints:  endpoints,
		},
	}
	_, err := c.Istio.NetworkingV1().ServiceEntries(Namespace).Create(ctx, se, metav1.CreateOptions{})
	return err
}

// Apply applies an EnvoyFilter object with kubectl, as a user would.
func (c *Cluster) Apply(ctx context.Context, o *envoyfilter.Object) error {
	y, err := o.YAML()
	if err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, y, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply %s: %w: %s", o.Metadata.Name, err, out)
	}
	return nil
}

// PruneManaged deletes globalconfig's EnvoyFilters in every namespace,
// but those in keep (NAMESPACE/NAME).
func (c *Cluster) PruneManaged(ctx context.Context, keep ...string) error {
	list, err := c.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{
		LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil {
		return err
	}
	for _, ef := range list.Items {
		if slices.Contains(keep, ef.Namespace+"/"+ef.Name) {
			continue
		}
		if err := c.Istio.NetworkingV1alpha3().EnvoyFilters(ef.Namespace).Delete(ctx, ef.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	return nil
}
