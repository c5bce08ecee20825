// Package controller keeps the cluster's EnvoyFilters equal to what the
// global ConfigMap says. Informers watch exactly one ConfigMap and the
// EnvoyFilters globalconfig owns; their handlers only enqueue one key; one
// level-triggered sync renders the desired set and converges live to it,
// writing nothing when live already equals desired.
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	istiolisters "istio.io/client-go/pkg/listers/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/manager"
	"github.com/globalconfig/globalconfig/pkg/mcp"
)

// Config is what the controller needs to know besides its clients.
type Config struct {
	// Namespace and Name of the global ConfigMap.
	Namespace, Name string
	// FieldManager names the controller's server-side apply manager.
	FieldManager string
	// PruneOnDelete removes the managed EnvoyFilters when the ConfigMap is
	// deleted; by default they are kept.
	PruneOnDelete bool
	// Resync is the informers' periodic resync; a resync that finds
	// nothing to do writes nothing.
	Resync time.Duration
	// Sink says where EnvoyFilters go; empty means SinkKube.
	Sink Sink
}

// StatusName is the name of the status ConfigMap of the ConfigMap name.
func StatusName(name string) string { return name + "-status" }

// queueKey is the one key every event enqueues: the sync is level-triggered
// and always converges everything.
const queueKey = "sync"

// Controller converges EnvoyFilters to the global ConfigMap.
type Controller struct {
	cfg      Config
	kube     kubernetes.Interface
	istio    istioclient.Interface
	log      *slog.Logger
	metrics  *Metrics
	recorder record.EventRecorder

	kubeInformers  informers.SharedInformerFactory
	istioInformers istioinformers.SharedInformerFactory
	configMaps     corelisters.ConfigMapLister
	envoyFilters   istiolisters.EnvoyFilterLister
	synced         []cache.InformerSynced

	// queue is the work queue of the current leadership term; nil while
	// not leading, so followers' informers only keep their caches warm.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]

	// st is touched only by the single worker, and starts afresh with every
	// leadership term: another leader may have written in between.
	st state

	// MCP publishing, on every replica; published and publishedHash are
	// touched only by publishLoop.
	mcp           *mcp.Server
	mcpObserver   *mcpObserver
	publishCh     chan struct{}
	published     bool
	publishedHash string

	// scrubber removes the document's secret values from messages.
	scrubber scrubber

	// gone holds the UIDs of managed EnvoyFilters the informer saw deleted,
	// so a create of ours that was deleted before the cache showed it is
	// told apart from one the cache hasn't shown yet.
	gone sync.Map
}

// state is what the worker remembers between syncs.
type state struct {
	// lastGood is the desired set of the last valid document: kept (and
	// restored on drift) while the document is invalid.
	lastGood []*envoyfilter.Object
	haveGood bool
	// pending remembers writes the informer cache has not shown yet:
	// object key → the resourceVersion the cache showed before an update or
	// delete (while the cache still shows it, the write stands), or
	// "uid:<uid>" for a create (it stands until the cache shows the object,
	// or the informer reports that uid deleted).
	pending map[string]string
	// status is the data last written to (or read from) the status
	// ConfigMap; a status equal to it is not written again.
	status     map[string]string
	statusRead bool
	// warned is the problem list of the last Warning Event, so the same
	// problems are not announced on every resync.
	warned string
	// synced is set after the term's first successful sync. That first
	// sync reads the ConfigMap from the API server, not the cache: a term
	// often begins right after an outage, while the informer is still in
	// its reconnect backoff.
	synced bool
}

// New builds a controller. Start the informers with Start, then run the
// worker with Run (on the elected leader only).
func New(cfg Config, kube kubernetes.Interface, istio istioclient.Interface, recorder record.EventRecorder, metrics *Metrics, log *slog.Logger) *Controller {
	if cfg.Sink == "" {
		cfg.Sink = SinkKube
	}
	c := &Controller{
		cfg: cfg, kube: kube, istio: istio, log: log, metrics: metrics, recorder: recorder,
	}
	// Exactly one ConfigMap: a field selector on its name, so the cache
	// never holds the namespace's other ConfigMaps.
	c.kubeInformers = informers.NewSharedInformerFactoryWithOptions(kube, cfg.Resync,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Name).String()
		}))
	// Only the EnvoyFilters globalconfig owns, in every namespace a target
	// may name.
	c.istioInformers = istioinformers.NewSharedInformerFactoryWithOptions(istio, cfg.Resync,
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue
		}))
	cmInformer := c.kubeInformers.Core().V1().ConfigMaps()
	efInformer := c.istioInformers.Networking().V1alpha3().EnvoyFilters()
	c.configMaps = cmInformer.Lister()
	c.envoyFilters = efInformer.Lister()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueue() },
		UpdateFunc: func(any, any) { c.enqueue() },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				c.gone.Store(m.GetUID(), struct{}{})
			}
			c.enqueue()
		},
	}
	publish := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.signalPublish() },
		UpdateFunc: func(any, any) { c.signalPublish() },
		DeleteFunc: func(any) { c.signalPublish() },
	}
	if _, err := cmInformer.Informer().AddEventHandler(publish); err != nil {
		panic(fmt.Sprintf("controller: add event handler: %v", err))
	}
	for _, inf := range []cache.SharedIndexInformer{cmInformer.Informer(), efInformer.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			// Only fails on a stopped informer, which a new one is not.
			panic(fmt.Sprintf("controller: add event handler: %v", err))
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c
}

// Start runs the informers until ctx ends and waits for their caches.
func (c *Controller) Start(ctx context.Context) error {
	c.kubeInformers.Start(ctx.Done())
	c.istioInformers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("informer caches did not sync")
	}
	if c.mcp != nil {
		go c.publishLoop(ctx)
		c.signalPublish()
	}
	return nil
}

// HasSynced reports whether the informer caches are filled.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

func (c *Controller) enqueue() {
	if q := c.queue.Load(); q != nil {
		(*q).Add(queueKey)
	}
}

// Run processes changes until ctx ends: one leadership term. Call it only
// while leading; it starts from a fresh state and converges at once.
func (c *Controller) Run(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		// Transient API errors retry from 100 ms, doubling up to 10 s, so
		// an API server outage is ridden out without spinning.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "globalconfig"})
	c.st = state{pending: map[string]string{}}
	c.queue.Store(&q)
	defer c.queue.Store(nil)
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	q.Add(queueKey) // converge once at start, whatever happens next.
	for c.processNext(ctx, q) {
	}
}

func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	err := c.Sync(ctx)
	switch {
	case err == nil:
		q.Forget(key)
	case ctx.Err() != nil:
		// The term ended mid-sync; the next leader converges.
	case isPermanent(err):
		// Retrying can't help until something changes, and a change
		// enqueues anyway; the resync retries eventually.
		c.log.Error("sync failed; not retrying until the next change", "err", c.scrubber.scrub(err.Error()))
		q.Forget(key)
	default:
		c.log.Warn("sync failed; retrying with backoff", "err", c.scrubber.scrub(err.Error()), "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
	}
	return true
}

// isPermanent tells API errors that a retry will not fix.
func isPermanent(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err)
}

// Sync reads the ConfigMap, decides the desired EnvoyFilters and converges.
func (c *Controller) Sync(ctx context.Context) (err error) {
	start := time.Now()
	result := "unchanged"
	defer func() {
		if err != nil {
			result = "error"
			c.metrics.ReconcileErrors.Inc()
		}
		c.metrics.Reconciles.WithLabelValues(result).Inc()
		c.metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}()
	if err := c.readStatus(ctx); err != nil {
		return err
	}
	cm, err := c.configMap(ctx)
	if apierrors.IsNotFound(err) {
		return c.syncDeleted(ctx, &result)
	}
	if err != nil {
		return fmt.Errorf("read configmap: %w", err)
	}

	desired, problems := c.render(cm)
	if problems != nil {
		result = "invalid"
		c.metrics.ConfigValid.Set(0)
		c.warn(cm, problems)
		if !c.st.haveGood {
			// Nothing applied by this process yet: the live EnvoyFilters are
			// the last good state; leave them all as they are.
			return c.writeStatus(ctx, c.statusWith(problems))
		}
		// Keep the last good set, restoring it if someone deleted or
		// edited a part of it meanwhile.
		desired = c.st.lastGood
	} else {
		c.metrics.ConfigValid.Set(1)
		c.st.warned = ""
	}
	var changes []string
	if c.cfg.Sink.Kube() {
		if changes, err = c.converge(ctx, desired); err != nil {
			c.event(cm, corev1.EventTypeWarning, "ApplyFailed", "applying the EnvoyFilters failed: %v", err)
			status := c.statusWith(problems)
			status["state"] = "ApplyFailed"
			status["message"] = c.scrubber.scrub("applying the EnvoyFilters failed: " + err.Error())
			if serr := c.writeStatus(ctx, status); serr != nil {
				c.log.Warn("status not written", "err", c.scrubber.scrub(serr.Error()))
			}
			return err
		}
	}
	if problems == nil {
		c.st.lastGood, c.st.haveGood = desired, true
		c.metrics.LastApply.SetToCurrentTime()
	}
	c.metrics.ManagedFilters.Set(float64(len(desired)))
	if len(changes) > 0 {
		if result != "invalid" {
			result = "applied"
		}
		c.event(cm, corev1.EventTypeNormal, "Applied", "%s", strings.Join(changes, "; "))
		c.log.Info("converged", "changes", changes)
	}
	return c.writeStatus(ctx, c.statusWith(problems))
}

// configMap reads the global ConfigMap: from the API server on the term's
// first sync, from the informer cache after.
func (c *Controller) configMap(ctx context.Context) (*corev1.ConfigMap, error) {
	if c.st.synced {
		return c.configMaps.ConfigMaps(c.cfg.Namespace).Get(c.cfg.Name)
	}
	cm, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, c.cfg.Name, metav1.GetOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		c.st.synced = true
	}
	return cm, err
}

// render parses the ConfigMap and builds the desired set; problems is nil
// when the document is valid.
func (c *Controller) render(cm *corev1.ConfigMap) ([]*envoyfilter.Object, []*fielderr.Error) {
	objs, secrets, problems := manager.Render(cm.Data)
	if problems == nil {
		c.scrubber.set(secrets)
	}
	return objs, problems
}

// syncDeleted handles a missing ConfigMap: keep everything (default) or
// prune every managed EnvoyFilter.
func (c *Controller) syncDeleted(ctx context.Context, result *string) error {
	status := map[string]string{"state": "ConfigMapDeleted"}
	if !c.cfg.PruneOnDelete {
		status["message"] = "the ConfigMap is gone; the EnvoyFilters are kept (run with --prune-on-delete to remove them)"
		for k, v := range c.st.status {
			if k == "lastAppliedHash" || k == "lastAppliedTime" || k == "envoyFilters" {
				status[k] = v
			}
		}
		return c.writeStatus(ctx, status)
	}
	changes, err := c.converge(ctx, nil)
	if err != nil {
		return err
	}
	if len(changes) > 0 {
		*result = "applied"
		c.log.Info("ConfigMap deleted; pruned", "changes", changes)
	}
	c.st.lastGood, c.st.haveGood = nil, true
	c.metrics.ManagedFilters.Set(0)
	status["message"] = "the ConfigMap is gone; the EnvoyFilters were removed (--prune-on-delete)"
	return c.writeStatus(ctx, status)
}

func objectKey(namespace, name string) string { return namespace + "/" + name }

// converge makes the live managed EnvoyFilters equal to desired and says
// what it did. It writes nothing when they already are.
func (c *Controller) converge(ctx context.Context, desired []*envoyfilter.Object) ([]string, error) {
	live, err := c.envoyFilters.List(labels.SelectorFromSet(labels.Set{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}))
	if err != nil {
		return nil, fmt.Errorf("list envoyfilters: %w", err)
	}
	liveByKey := map[string]liveFilter{}
	for _, l := range live {
		liveByKey[objectKey(l.Namespace, l.Name)] = liveFilter{l}
	}
	var changes []string
	want := map[string]bool{}
	for _, d := range desired {
		key := objectKey(d.Metadata.Namespace, d.Metadata.Name)
		want[key] = true
		l, exists := liveByKey[key]
		if exists && l.equals(d) {
			delete(c.st.pending, key)
			continue
		}
		if c.writeStands(key, l, exists) {
			continue // our write is not in the cache yet.
		}
		body, err := applyBody(d)
		if err != nil {
			return changes, err
		}
		force := true
		applied, err := c.istio.NetworkingV1alpha3().EnvoyFilters(d.Metadata.Namespace).Patch(ctx, d.Metadata.Name,
			"application/apply-patch+yaml", body, metav1.PatchOptions{FieldManager: c.cfg.FieldManager, Force: &force})
		if err != nil {
			return changes, fmt.Errorf("apply envoyfilter %s: %w", key, err)
		}
		c.metrics.APIWrites.WithLabelValues("apply", "envoyfilters").Inc()
		if exists {
			c.st.pending[key] = l.ResourceVersion
		} else {
			c.st.pending[key] = createdMark + string(applied.UID)
		}
		verb := "created"
		if exists {
			verb = "updated"
		}
		changes = append(changes, verb+" "+key)
	}
	keys := make([]string, 0, len(liveByKey))
	for k := range liveByKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		l := liveByKey[key]
		if want[key] {
			continue
		}
		if c.writeStands(key, l, true) {
			continue // deleted; the cache hasn't seen it yet.
		}
		uid := l.UID
		err := c.istio.NetworkingV1alpha3().EnvoyFilters(l.Namespace).Delete(ctx, l.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return changes, fmt.Errorf("delete envoyfilter %s: %w", key, err)
		}
		c.metrics.APIWrites.WithLabelValues("delete", "envoyfilters").Inc()
		c.st.pending[key] = l.ResourceVersion
		changes = append(changes, "deleted "+key)
	}
	// Forget pending marks of objects that are neither wanted nor live,
	// and deletion notes no pending create can need any more.
	creates := false
	for key, mark := range c.st.pending {
		if _, live := liveByKey[key]; !live && !want[key] {
			delete(c.st.pending, key)
			continue
		}
		creates = creates || strings.HasPrefix(mark, createdMark)
	}
	if !creates {
		c.gone.Clear()
	}
	return changes, nil
}

// createdMark prefixes the pending mark of a create: the new object's uid.
const createdMark = "uid:"

// writeStands reports whether a write of ours to key is still on its way
// into the informer cache, so the cache's view must not be acted on yet.
func (c *Controller) writeStands(key string, l liveFilter, exists bool) bool {
	mark, ok := c.st.pending[key]
	if !ok {
		return false
	}
	if uid, created := strings.CutPrefix(mark, createdMark); created {
		if exists {
			return false // the cache shows an object; compare it.
		}
		if _, deleted := c.gone.LoadAndDelete(types.UID(uid)); deleted {
			delete(c.st.pending, key) // created, then deleted by someone: restore.
			return false
		}
		return true
	}
	return exists && l.ResourceVersion == mark
}

// statusWith builds the status data for the current state.
func (c *Controller) statusWith(problems []*fielderr.Error) map[string]string {
	status := map[string]string{}
	for k, v := range c.st.status {
		status[k] = v
	}
	status["state"] = "Applied"
	status["errors"] = ""
	delete(status, "message")
	if problems != nil {
		status["state"] = "Invalid"
		status["errors"] = manager.Describe(problems, "\n")
		status["message"] = "the document was rejected; the last good EnvoyFilters are kept"
	}
	if c.st.haveGood {
		names := make([]string, 0, len(c.st.lastGood))
		for _, o := range c.st.lastGood {
			names = append(names, objectKey(o.Metadata.Namespace, o.Metadata.Name))
		}
		hash := setHash(c.st.lastGood)
		if status["lastAppliedHash"] != hash {
			status["lastAppliedHash"] = hash
			status["lastAppliedTime"] = time.Now().UTC().Format(time.RFC3339)
		}
		status["envoyFilters"] = strings.Join(names, "\n")
	}
	if c.mcp != nil {
		status["sink"] = string(c.cfg.Sink)
		status["mcpNack"] = c.mcpObserver.lastNack()
	}
	return status
}

// setHash identifies a desired set: the names and content hashes of its
// objects. Equal documents give equal hashes, whatever their formatting.
func setHash(objs []*envoyfilter.Object) string {
	h := sha256.New()
	for _, o := range objs {
		fmt.Fprintf(h, "%s/%s=%s\n", o.Metadata.Namespace, o.Metadata.Name, o.Hash())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// warn records a Warning Event with every problem, once per distinct list.
func (c *Controller) warn(cm *corev1.ConfigMap, problems []*fielderr.Error) {
	text := manager.Describe(problems, "; ")
	c.log.Warn("document rejected; keeping the last good EnvoyFilters", "problems", len(problems), "first", problems[0].Error())
	if text == c.st.warned {
		return
	}
	c.st.warned = text
	c.event(cm, corev1.EventTypeWarning, "InvalidConfig", "%d problem(s), last good EnvoyFilters kept: %s", len(problems), text)
}

// event records an Event on the ConfigMap. Messages carry paths and
// problems; API errors quoted in them are scrubbed of secret values.
func (c *Controller) event(cm *corev1.ConfigMap, eventType, reason, format string, args ...any) {
	c.recorder.Event(cm, eventType, reason, c.scrubber.scrub(fmt.Sprintf(format, args...)))
	c.metrics.APIWrites.WithLabelValues("create", "events").Inc()
}
