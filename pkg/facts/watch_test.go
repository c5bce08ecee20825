package facts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	istionet "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/facts"
)

// A watching Resolver follows a ServiceEntry and a Service the document
// names as they come and go: each change calls onChange, and the next
// answer says it, with no TTL to wait out (the TTL here is an hour).
func TestWatchFollowsServicesAndEntries(t *testing.T) {
	// The fake Istio clientset sends no bookmark for a watch list, so
	// its informers would wait for one; the API server sends it.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kube, istio := fake.NewClientset(), istiofake.NewSimpleClientset()
	changed := make(chan struct{}, 100)
	r := &facts.Resolver{Kube: kube, Istio: istio, TTL: time.Hour}
	if err := r.Watch(ctx, kube, istio, func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	rls := items.ServiceRef{Path: "service", Host: "ratelimit.example.com", Port: 8081, Missing: "no limit is enforced"}
	svc := items.ServiceRef{Path: "service", Host: "zipkin.istio-system.svc.cluster.local", Port: 9411}
	// answer waits for onChange, then until the answer is want (the
	// informer's store is written before its handlers run).
	answer := func(ref items.ServiceRef, warn bool, msg string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no change reported within 5 s", ref.Host)
		}
		var f items.ServiceFact
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if f = r.Service(ref); f.Warn == warn && strings.Contains(f.Msg, msg) {
				return
			}
		}
		t.Fatalf("%s: %+v, want warn=%v %q", ref.Host, f, warn, msg)
	}
	drain := func() {
		for {
			select {
			case <-changed:
			default:
				return
			}
		}
	}

	if f := r.Service(rls); !f.Warn || !strings.Contains(f.Msg, "the item is not in effect: no limit is enforced") {
		t.Fatalf("no ServiceEntry: %+v", f)
	}
	if f := r.Service(svc); !f.Warn {
		t.Fatalf("no Service: %+v", f)
	}
	time.Sleep(200 * time.Millisecond) // the informers' first sync
	drain()

	se := &istionet.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: "ratelimit", Namespace: "ratelimit"},
		Spec:       networkingv1.ServiceEntry{Hosts: []string{rls.Host}, Ports: []*networkingv1.ServicePort{{Number: 8081, Name: "grpc", Protocol: "GRPC"}}},
	}
	if _, err := istio.NetworkingV1().ServiceEntries("ratelimit").Create(ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	answer(rls, false, "")
	if err := istio.NetworkingV1().ServiceEntries("ratelimit").Delete(ctx, "ratelimit", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	answer(rls, true, "no limit is enforced")

	// A ServiceEntry of another host is no change.
	drain()
	other := se.DeepCopy()
	other.Name, other.Spec.Hosts = "other", []string{"other.example.com"}
	if _, err := istio.NetworkingV1().ServiceEntries("ratelimit").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Error("a ServiceEntry of a host nobody asked about was reported as a change")
	case <-time.After(300 * time.Millisecond):
	}

	if _, err := kube.CoreV1().Services("istio-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "zipkin", Namespace: "istio-system"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9411}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	answer(svc, false, "")
	if err := kube.CoreV1().Services("istio-system").Delete(ctx, "zipkin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	answer(svc, true, "no Service zipkin in namespace istio-system")
}
