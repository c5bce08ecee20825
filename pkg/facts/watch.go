package facts

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	networkingv1 "istio.io/api/networking/v1"
	istionet "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// MaxWatchedServices bounds the Services a Resolver watches one by one:
// a document names a few; past the bound, lookups fall back to reads
// cached for the TTL.
const MaxWatchedServices = 64

// watcher holds the informers of a watching Resolver.
type watcher struct {
	ctx      context.Context
	kube     kubernetes.Interface
	onChange func()

	mu       sync.Mutex
	services map[string]cache.SharedIndexInformer // "ns/name"
	hosts    map[string]bool                      // the hosts asked about
	entries  cache.SharedIndexInformer
}

// Watch makes r answer from informers instead of reads cached for the
// TTL, and call onChange (which must not block) when a Service or a
// ServiceEntry it was asked about comes, goes or changes: a status then
// follows the cluster within seconds, without polling. Each Service is
// watched by its own name, from the first time it is asked about (a
// document names a few); ServiceEntries, which no field selects by host,
// are watched in every namespace, each kept as its hosts and ports only.
// Until an informer has synced, r reads as without Watch. The informers
// end with ctx. Call Watch once, before r is used.
func (r *Resolver) Watch(ctx context.Context, kube kubernetes.Interface, istio istioclient.Interface, onChange func()) error {
	w := &watcher{ctx: ctx, kube: kube, onChange: onChange, services: map[string]cache.SharedIndexInformer{}, hosts: map[string]bool{}}
	f := istioinformers.NewSharedInformerFactory(istio, 0)
	w.entries = f.Networking().V1().ServiceEntries().Informer()
	if err := w.entries.SetTransform(entryPorts); err != nil {
		return fmt.Errorf("watch service entries: %w", err)
	}
	if _, err := w.entries.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.entryChanged(obj) },
		UpdateFunc: func(old, obj any) { w.entryChanged(old, obj) },
		DeleteFunc: func(obj any) { w.entryChanged(obj) },
	}); err != nil {
		return fmt.Errorf("watch service entries: %w", err)
	}
	f.Start(ctx.Done())
	r.mu.Lock()
	r.w = w
	r.mu.Unlock()
	return nil
}

// entryPorts keeps what the Resolver reads of a ServiceEntry: its hosts
// and ports.
func entryPorts(obj any) (any, error) {
	se, ok := obj.(*istionet.ServiceEntry)
	if !ok {
		return obj, nil
	}
	out := &istionet.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: se.Name, Namespace: se.Namespace, ResourceVersion: se.ResourceVersion}}
	out.Spec.Hosts = se.Spec.GetHosts()
	for _, p := range se.Spec.GetPorts() {
		out.Spec.Ports = append(out.Spec.Ports, &networkingv1.ServicePort{Number: p.GetNumber()})
	}
	return out, nil
}

// entryChanged calls onChange when one of the ServiceEntries names a host
// the Resolver was asked about.
func (w *watcher) entryChanged(objs ...any) {
	for _, obj := range objs {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		se, ok := obj.(*istionet.ServiceEntry)
		if !ok {
			w.onChange() // unknown: ask again
			return
		}
		w.mu.Lock()
		asked := slices.ContainsFunc(se.Spec.GetHosts(), func(h string) bool { return w.hosts[h] })
		w.mu.Unlock()
		if asked {
			w.onChange()
			return
		}
	}
}

// ask records that host was asked about.
func (w *watcher) ask(host string) {
	w.mu.Lock()
	w.hosts[host] = true
	w.mu.Unlock()
}

// entryMap is every ServiceEntry's host and ports, from the informer; ok
// is false until it has synced.
func (w *watcher) entryMap() (map[string][]uint32, bool) {
	if !w.entries.HasSynced() {
		return nil, false
	}
	out := map[string][]uint32{}
	for _, obj := range w.entries.GetStore().List() {
		se := obj.(*istionet.ServiceEntry)
		for _, h := range se.Spec.GetHosts() {
			for _, p := range se.Spec.GetPorts() {
				out[h] = append(out[h], p.GetNumber())
			}
		}
	}
	return out, true
}

// service is Service ns/name's ports from its informer, started at the
// first call; ok is false until it has synced, or past
// MaxWatchedServices.
func (w *watcher) service(ns, name string) (ports []uint32, found, ok bool) {
	key := ns + "/" + name
	w.mu.Lock()
	inf, started := w.services[key]
	if !started && len(w.services) < MaxWatchedServices {
		inf = w.watchService(ns, name)
		w.services[key] = inf
	}
	w.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return nil, false, false
	}
	obj, exists, err := inf.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, false, err == nil
	}
	for _, p := range obj.(*corev1.Service).Spec.Ports {
		ports = append(ports, uint32(p.Port))
	}
	return ports, true, true
}

// watchService starts an informer on the one Service ns/name. Its first
// sync calls onChange too: the Service may have gone between the read
// that answered before it and the informer's list, which no event tells.
func (w *watcher) watchService(ns, name string) cache.SharedIndexInformer {
	f := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := f.Core().V1().Services().Informer()
	var synced atomic.Bool
	changed := func(any) {
		if synced.Load() {
			w.onChange()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(old, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		return nil
	}
	f.Start(w.ctx.Done())
	go func() {
		if cache.WaitForCacheSync(w.ctx.Done(), inf.HasSynced) {
			synced.Store(true)
			w.onChange()
		}
	}()
	return inf
}
