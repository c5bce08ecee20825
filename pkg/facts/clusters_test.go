package facts

import (
	"context"
	"strings"
	"testing"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
)

func resolverWith(services ...*corev1.Service) *Resolver {
	kube := fake.NewSimpleClientset()
	for _, s := range services {
		_, _ = kube.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	}
	return &Resolver{Kube: kube, Istio: istiofake.NewSimpleClientset()}
}

func rls() *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ratelimit", Namespace: "rl"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8081}}}}
}

func TestClustersNameTheMemberThatLacksAService(t *testing.T) {
	ref := items.ServiceRef{Path: "globalRateLimit.service", Host: "ratelimit.rl.svc.cluster.local", Port: 8081, Missing: "no limit is enforced"}
	c := &Clusters{Home: resolverWith(rls()), HomeName: "a"}
	if f := c.Service(ref); f.Warn || f.Refuse {
		t.Fatalf("no members, the Service at home: %+v, want no warning", f)
	}
	c.Set("b", resolverWith(rls()))
	c.Set("c", resolverWith())
	f := c.Service(ref)
	if !f.Warn || !strings.Contains(f.Msg, "in cluster c: no Service ratelimit in namespace rl") || strings.Contains(f.Msg, "cluster b") || strings.Contains(f.Msg, "cluster a") {
		t.Fatalf("member c lacks the Service: %+v, want a warning naming c only", f)
	}
	if cons, ok := NotInEffect(f.Msg); !ok || cons != "no limit is enforced" {
		t.Errorf("NotInEffect(%q) = %q, %v", f.Msg, cons, ok)
	}
	c.Set("c", nil)
	if f := c.Service(ref); f.Warn {
		t.Errorf("member c removed: %+v, want no warning", f)
	}
}
