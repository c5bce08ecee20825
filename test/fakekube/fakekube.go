// Package fakekube helps unit tests drive the controller with client-go's
// fake clientsets, the way kubernetes/sample-controller tests its sync:
// informers that are never started, and caches the test fills itself, so
// each test decides exactly what an informer has "seen" and nothing races.
package fakekube

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// Cluster is a fake API server with informer factories that are never
// started.
type Cluster struct {
	Kube     *fake.Clientset
	Istio    *istiofake.Clientset
	KubeInf  informers.SharedInformerFactory
	IstioInf istioinformers.SharedInformerFactory
	// Version numbers objects as the API server would.
	Version int
}

// New is an empty cluster that takes server-side applies of EnvoyFilters.
func New() *Cluster {
	c := &Cluster{Kube: fake.NewClientset(), Istio: istiofake.NewSimpleClientset()}
	c.KubeInf = informers.NewSharedInformerFactory(c.Kube, 0)
	c.IstioInf = istioinformers.NewSharedInformerFactory(c.Istio, 0)
	ServerSideApply(c.Istio, &c.Version)
	return c
}

// PutConfig writes the ConfigMap namespace/name holding doc to the API and
// to the informer's cache.
func (c *Cluster) PutConfig(t testing.TB, namespace, name, doc string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: map[string]string{document.DataKey: doc}}
	cms := c.Kube.CoreV1().ConfigMaps(namespace)
	if _, err := cms.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.KubeInf.Core().V1().ConfigMaps().Informer().GetStore().Update(cm); err != nil {
		t.Fatal(err)
	}
}

// Annotate sets an annotation of the ConfigMap namespace/name in the API
// and the informer's cache.
func (c *Cluster) Annotate(t testing.TB, namespace, name, key, value string) {
	t.Helper()
	ctx := context.Background()
	cms := c.Kube.CoreV1().ConfigMaps(namespace)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[key] = value
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.KubeInf.Core().V1().ConfigMaps().Informer().GetStore().Update(cm); err != nil {
		t.Fatal(err)
	}
}

// DeleteConfig removes the ConfigMap namespace/name from the API and the
// cache.
func (c *Cluster) DeleteConfig(t testing.TB, namespace, name string) {
	t.Helper()
	if err := c.Kube.CoreV1().ConfigMaps(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	store := c.KubeInf.Core().V1().ConfigMaps().Informer().GetStore()
	if obj, ok, _ := store.GetByKey(namespace + "/" + name); ok {
		_ = store.Delete(obj)
	}
}

// Deliver makes the EnvoyFilter cache show what the API holds, as the
// informer would once its events arrive.
func (c *Cluster) Deliver(t testing.TB) {
	t.Helper()
	list, err := c.Istio.NetworkingV1alpha3().EnvoyFilters("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, ef := range list.Items {
		objs = append(objs, ef)
	}
	if err := c.IstioInf.Networking().V1alpha3().EnvoyFilters().Informer().GetStore().Replace(objs, ""); err != nil {
		t.Fatal(err)
	}
}

// Live returns the content hashes of the EnvoyFilters the API holds in
// namespace, by name.
func (c *Cluster) Live(t testing.TB, namespace string) map[string]string {
	t.Helper()
	return LiveIn(t, c.Istio, namespace)
}

// LiveIn returns the content hashes of the EnvoyFilters istio holds in
// namespace ("" for every namespace), by name.
func LiveIn(t testing.TB, istio *istiofake.Clientset, namespace string) map[string]string {
	t.Helper()
	list, err := istio.NetworkingV1alpha3().EnvoyFilters(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ef := range list.Items {
		h, err := envoyfilter.SpecHash(&ef.Spec)
		if err != nil {
			t.Fatal(err)
		}
		out[ef.Name] = h
	}
	return out
}

// EnvoyFilters is the EnvoyFilter resource.
var EnvoyFilters = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}

// ServerSideApply makes istio's fake clientset take the controller's
// server-side applies of EnvoyFilters, which its object tracker can't: it
// creates or replaces the object, as the API server does, with a new
// resourceVersion from the counter version (shared by the caller) and a
// UID kept across updates.
func ServerSideApply(istio *istiofake.Clientset, version *int) {
	istio.PrependReactor("patch", "envoyfilters", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		ef := &clientnetworking.EnvoyFilter{}
		if err := json.Unmarshal(p.GetPatch(), ef); err != nil {
			return true, nil, err
		}
		*version++
		ef.ResourceVersion = strconv.Itoa(*version)
		tracker := istio.Tracker()
		old, err := tracker.Get(EnvoyFilters, p.GetNamespace(), p.GetName())
		if apierrors.IsNotFound(err) {
			ef.UID = types.UID("uid-" + ef.ResourceVersion)
			return true, ef, tracker.Create(EnvoyFilters, ef, p.GetNamespace())
		}
		ef.UID = old.(*clientnetworking.EnvoyFilter).UID
		return true, ef, tracker.Update(EnvoyFilters, ef, p.GetNamespace())
	})
}
