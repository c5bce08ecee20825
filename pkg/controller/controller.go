// Package controller keeps the cluster's EnvoyFilters equal to what the
// global ConfigMap says, and reports how that went. It is handed its
// clients and informers (see pkg/app for the wiring); informer handlers
// only enqueue one key, and one level-triggered Sync decides the desired
// set, converges the live EnvoyFilters to it and reports: status
// ConfigMap, Events and metrics. It writes nothing when live already
// equals desired.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions/networking/v1alpha3"
	istiolisters "istio.io/client-go/pkg/listers/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
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
	// Sink is where the EnvoyFilters go: "kube" (the default) and "both"
	// deliver EnvoyFilter objects; with "mcp" istiod reads them from the
	// MCP publisher instead, and the controller only reports (status,
	// Events, metrics): its sink is decide.Discard.
	Sink string
	// MCPNack, when set, is istiod's last MCP NACK for the status (sinks
	// mcp and both). It is read on every sync.
	MCPNack func() string
	// Admission says whether the admission webhook guards the global
	// ConfigMap cm; asked on every sync that finds the ConfigMap. Nil
	// means no webhook is served for it.
	Admission func(ctx context.Context, cm *corev1.ConfigMap) status.Admission
	// Rollout, when set, is told every set the controller publishes, and
	// its status goes into the status ConfigMap, Events and metrics. Set
	// its OnChange to the controller's Enqueue.
	Rollout *rollout.Tracker
	// Renderer is the process's renderer, shared with the MCP publisher
	// and the webhook (a new one when nil).
	Renderer *render.Renderer
	// RootNamespace is Istio's root namespace: an EnvoyFilter there
	// reaches every proxy.
	RootNamespace string
	// Now is the controller's clock (time.Now when nil): a canary phase's
	// bake time and timeout are measured on it, against the times its
	// record holds.
	Now func() time.Time
	// Leading, when set, says whether this replica still holds the lease;
	// no write goes out when it does not (the status and the last good
	// copy are also fenced by their resourceVersions).
	Leading func() bool
	// Live, with the sink "mcp", is the set the MCP server serves: where
	// a lost stable set is rebuilt from.
	Live func() []*envoyfilter.Object
	// Traffic, when set, reads the proxies' statistics for a canary
	// phase's traffic gate (rollout.analysis). Set its OnChange to the
	// controller's Enqueue.
	Traffic *rollout.TrafficGate
	// ClusterName is the home cluster's name (members.DefaultHome when
	// empty): what target.clusters and the status call it.
	ClusterName string
	// MembersChanged, when set, is told the member clusters whenever the
	// member Secrets change (after the controller took them on): the
	// renderer's known cluster names, the tracker's istiod sources.
	MembersChanged func([]members.Member)
	// MemberClient builds a member's Istio client (tests: fakes);
	// istioclient.NewForConfig of its REST config when nil.
	MemberClient func(members.Member) (istioclient.Interface, error)
	// Resync is the members' informers' resync period.
	Resync time.Duration
	// Blame, when set (the controller runs with --envoy), names the
	// EnvoyFilters that proxies refusing the delivered set refuse
	// (blame.go): for the status, an Event, and a Direct change's roll
	// back. Nil: the status says --envoy would name them.
	Blame BlameFunc
	// BlameEnvoy is the Envoy minor release of the blame's binary
	// ("1.40"): of the proxies of a kind that refuse a set, the first of
	// that release is blamed for.
	BlameEnvoy string
}

// The sinks Config.Sink names.
const (
	SinkKube = "kube"
	SinkMCP  = "mcp"
	SinkBoth = "both"
)

// queueKey is the one key every event enqueues: the sync is level-triggered
// and always converges everything.
const queueKey = "sync"

// writeMemory is how long the controller remembers an EnvoyFilter it
// wrote, for reading it back before the informer cache shows it.
const writeMemory = time.Minute

// Controller converges EnvoyFilters to the global ConfigMap.
type Controller struct {
	cfg      Config
	kube     kubernetes.Interface
	istio    istioclient.Interface
	log      *slog.Logger
	metrics  *Metrics
	recorder record.EventRecorder
	renderer *render.Renderer
	// sink delivers the decisions: kubeSink, or decide.Discard for the
	// sink "mcp".
	sink decide.Sink

	configMaps   corelisters.ConfigMapLister
	envoyFilters istiolisters.EnvoyFilterLister
	// others lists the EnvoyFilters globalconfig does not manage, nil
	// unless WatchDependents was called (dependents.go).
	others istiolisters.EnvoyFilterLister
	// home is the home cluster as a delivery target: its EnvoyFilter
	// cache, with the objects our own applies returned.
	home *clusterTarget
	// members are the member clusters (clusters.go).
	members memberSet
	synced  []cache.InformerSynced

	// queue is the work queue of the current leadership term; nil while
	// not leading, so followers' informers only keep their caches warm.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]

	// blamer runs the blames (nil without Config.Blame); its results
	// outlive a term, as they hold for their set whoever leads.
	blamer *blamer

	// st is touched only by the single worker, and starts afresh with every
	// leadership term: another leader may have written in between.
	st state
}

// New builds a controller on informers the caller starts: one for the
// global ConfigMap (ideally restricted to its name) and one for the
// EnvoyFilters labelled as globalconfig's. Run the worker with Run, on the
// elected leader only.
func New(cfg Config, kube kubernetes.Interface, istio istioclient.Interface,
	configMaps coreinformers.ConfigMapInformer, envoyFilters istioinformers.EnvoyFilterInformer,
	recorder record.EventRecorder, metrics *Metrics, log *slog.Logger) *Controller {
	c := &Controller{
		cfg: cfg, kube: kube, istio: istio, log: log, metrics: metrics, recorder: recorder,
		renderer:     cfg.Renderer,
		configMaps:   configMaps.Lister(),
		envoyFilters: envoyFilters.Lister(),
	}
	c.home = newClusterTarget(c.homeName(), istio, envoyFilters.Informer())
	if c.renderer == nil {
		c.renderer = render.New()
	}
	if c.cfg.Sink == "" {
		c.cfg.Sink = SinkKube
	}
	if cfg.Blame != nil {
		c.blamer = newBlamer(cfg.Blame, c.othersHash, c.Enqueue, c.now)
	}
	c.sink = kubeSink{c}
	if c.cfg.Sink == SinkMCP {
		c.sink = decide.Discard{}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Enqueue() },
		UpdateFunc: func(any, any) { c.Enqueue() },
		DeleteFunc: func(any) { c.Enqueue() },
	}
	for _, inf := range []cache.SharedIndexInformer{configMaps.Informer(), envoyFilters.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			// Only fails on a stopped informer, which a new one is not.
			panic(fmt.Sprintf("controller: add event handler: %v", err))
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c
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

// Enqueue asks for a sync; it does nothing while not leading.
func (c *Controller) Enqueue() {
	if q := c.queue.Load(); q != nil {
		(*q).Add(queueKey)
	}
}

// Run processes changes until ctx ends: one leadership term. Call it only
// while leading, after the caches synced; it starts from a fresh state
// and converges at once.
func (c *Controller) Run(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		// Transient API errors retry from 100 ms, doubling up to 10 s, so
		// an API server outage is ridden out without spinning.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "globalconfig"})
	c.st = state{}
	c.queue.Store(&q)
	defer c.queue.Store(nil)
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	if c.blamer != nil {
		go c.blamer.run(ctx) // one blame at a time, off the sync
	}
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
	case errors.Is(err, errNotLeading):
		c.log.Warn("sync stopped: this replica no longer leads")
		q.Forget(key)
	case isPermanent(err) && !c.inPhase():
		// Retrying can't help until something changes, and a change
		// enqueues anyway; the resync retries eventually.
		c.log.Error("sync failed; not retrying until the next change", "err", c.scrub(err.Error()))
		q.Forget(key)
	default:
		// Transient, or refused during a canary phase (a quota, a policy
		// engine): a phase never stays half-applied, so its writes are
		// retried whatever the API server said.
		c.log.Warn("sync failed; retrying with backoff", "err", c.scrub(err.Error()), "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
	}
	return true
}

// isPermanent tells API errors that a retry will not fix.
func isPermanent(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err)
}
