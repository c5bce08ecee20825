// Package app wires `globalconfig run` together, the way
// kubernetes/sample-controller's main does: clients, informers, leader
// election, the metrics and health servers, the admission webhook, the MCP
// server and the controller. It is the only package that knows every
// sink; none of them imports another.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/facts"
	"github.com/globalconfig/globalconfig/pkg/mcp"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rlsconfig"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/pkg/webhook"
)

// Sink says where the EnvoyFilters go.
type Sink string

// The sinks.
const (
	SinkKube Sink = controller.SinkKube // EnvoyFilter objects in the cluster (default)
	SinkMCP  Sink = controller.SinkMCP  // served to istiod over MCP only
	SinkBoth Sink = controller.SinkBoth
)

// Kube reports whether the sink writes EnvoyFilter objects.
func (s Sink) Kube() bool { return s == SinkKube || s == SinkBoth }

// MCP reports whether the sink serves istiod over MCP.
func (s Sink) MCP() bool { return s == SinkMCP || s == SinkBoth }

// Options are the flags of `globalconfig run`.
type Options struct {
	Kubeconfig     string
	Controller     controller.Config
	Sink           Sink
	Resync         time.Duration
	MetricsAddr    string
	HealthAddr     string
	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	// MCPAddr, when set, serves the EnvoyFilters to istiod over MCP there.
	MCPAddr string
	// Webhook, when its Addr is set, serves the admission webhook.
	Webhook webhook.Options
	// Rollout says how to follow the proxies' acceptance.
	Rollout RolloutOptions
	// ServiceFacts makes the controller and the webhook look up the
	// Services and ServiceEntries items send to (pkg/facts), in istiod's
	// domain ClusterDomain.
	ServiceFacts  bool
	ClusterDomain string
	// Envoy, when set, is the fleet's Envoy binary: the webhook loads the
	// output of every edit that changes the EnvoyFilters into it, within
	// EnvoyTimeout (webhook.EnvoyCheck).
	Envoy        string
	EnvoyTimeout time.Duration
	// RateLimitConfigAddr, when set, serves the rate-limit service the
	// limits of the set the proxies have (globalRateLimit) over xDS there.
	RateLimitConfigAddr string
	// MemberSecrets watches the member Secrets in the ConfigMap's
	// namespace (pkg/members) and delivers the set to every member
	// cluster they name too (kube sink).
	MemberSecrets bool
}

// RolloutOptions configure rollout tracking: which istiod instances are
// asked for their sync status, and how long proxies may take.
type RolloutOptions struct {
	Enabled bool
	// Istiod is the istiod Service, NAMESPACE/NAME; every ready endpoint
	// of it is asked on DebugPort.
	Istiod    string
	DebugPort int
	// DebugURLs, when set, are asked instead of the Service's endpoints
	// (sidecar mode: http://127.0.0.1:8080).
	DebugURLs []string
	// TokenFile holds a ServiceAccount token with audience istio-ca.
	TokenFile string
	Timeout   time.Duration
	// Debounce is istiod's quiet period (PILOT_DEBOUNCE_AFTER): which
	// pushes carry a set is proven from it (rollout.Tracker).
	Debounce time.Duration
	// RootNamespace is Istio's root namespace.
	RootNamespace string
	// WatchPods watches the pods with an Istio proxy, cluster-wide, to
	// report those that never connect (after ConnectGrace).
	WatchPods    bool
	ConnectGrace time.Duration
	// StatsPort and StatsPath are where a canary phase's traffic gate
	// reads each proxy pod's statistics (istio-agent's merged endpoint);
	// StatsURLs name a proxy's statistics URL directly (POD.NAMESPACE →
	// URL), before its pod.
	StatsPort int
	StatsPath string
	StatsURLs map[string]string
}

// Leader election timing: a dead leader's lease expires after
// LeaseDuration, and a candidate retries every RetryPeriod, so failover
// takes at most about 12 s (the target is 15 s).
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Client rate limits towards the API server.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// RESTConfig loads --kubeconfig, else $KUBECONFIG or ~/.kube/config, else
// the in-cluster config.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "globalconfig"
	limitRate(cfg)
	return cfg, nil
}

// limitRate sets the controller's rate limits on a client's config, the
// home cluster's and every member's alike: client-go's default of 5
// requests/s would queue the writes of one edit (EnvoyFilters, status,
// Event) behind each other, and a member's full set of EnvoyFilters
// behind its first ten. The controller's traffic is bounded by edits
// anyway.
func limitRate(cfg *rest.Config) { cfg.QPS, cfg.Burst = ClientQPS, ClientBurst }

// Run runs `globalconfig run` until ctx ends.
func Run(ctx context.Context, opts Options, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var envoyBin *envoybin.Binary
	if opts.Envoy != "" && opts.Webhook.Addr != "" {
		// A binary that can't check is an error now, not at the first edit.
		check, err := webhook.NewEnvoyCheck(ctx, opts.Envoy, opts.EnvoyTimeout, reg)
		if err != nil {
			return fmt.Errorf("--envoy: %w", err)
		}
		opts.Webhook.Envoy, envoyBin = check, check.Binary
		log.Info("admission loads each edit's EnvoyFilters into Envoy", "envoy", check.Binary.Path,
			"version", check.Binary.Version, "istio", check.Istio(), "timeout", check.Timeout)
	} else if opts.Envoy != "" {
		// For the blame only: a binary that can't run is an error now,
		// not at the first NACK.
		bin, err := openEnvoy(ctx, opts.Envoy)
		if err != nil {
			return fmt.Errorf("--envoy: %w", err)
		}
		envoyBin = bin
	}
	restCfg, err := RESTConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	istio, err := istioclient.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("istio client: %w", err)
	}
	// The informers' own clients wait out a refused connection instead of
	// failing into the reflector's backoff (see reconnect.go).
	watchCfg := rest.CopyConfig(restCfg)
	watchCfg.Wrap(waitForReconnect)
	watchKube, err := kubernetes.NewForConfig(watchCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	watchIstio, err := istioclient.NewForConfig(watchCfg)
	if err != nil {
		return fmt.Errorf("istio client: %w", err)
	}

	metrics := controller.NewMetrics(reg)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Exactly one ConfigMap: a field selector on its name, so the cache
	// never holds the namespace's other ConfigMaps.
	cfg := opts.Controller
	if opts.Sink == "" {
		opts.Sink = SinkKube
	}
	// One renderer for the process: the controller, the MCP publisher
	// and the webhook decide through the same cache of built items.
	renderer := render.New()
	var resolver *facts.Resolver
	var clusterFacts *facts.Clusters
	if opts.ServiceFacts {
		resolver = &facts.Resolver{Kube: kube, Istio: istio, Domain: opts.ClusterDomain}
		renderer.SetFacts(resolver)
		if opts.MemberSecrets {
			// Every member's Services and ServiceEntries too.
			clusterFacts = &facts.Clusters{Home: resolver, HomeName: homeName(cfg)}
			renderer.SetFacts(clusterFacts)
		}
	}
	cfg.Renderer = renderer
	opts.Webhook.Renderer = renderer
	kubeInformers := informers.NewSharedInformerFactoryWithOptions(watchKube, opts.Resync,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Name).String()
		}))
	// Only the EnvoyFilters globalconfig owns, in every namespace a target
	// may name.
	istioInformers := istioinformers.NewSharedInformerFactoryWithOptions(watchIstio, opts.Resync,
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue
		}))
	configMaps := kubeInformers.Core().V1().ConfigMaps()

	var publisher *mcp.Publisher
	var mcpSynced []cache.InformerSynced
	if opts.Sink.MCP() {
		// Listen first: istiod refuses to start while its config source
		// doesn't answer, so the port must be open as soon as possible.
		ln, err := net.Listen("tcp", opts.MCPAddr)
		if err != nil {
			return fmt.Errorf("mcp: listen %s: %w", opts.MCPAddr, err)
		}
		publisher = mcp.NewPublisher(mcp.NewMetrics(reg), renderer)
		publisher.ConfigMaps, publisher.Namespace, publisher.Name = configMaps.Lister(), cfg.Namespace, cfg.Name
		publisher.PruneOnDelete, publisher.Log = cfg.PruneOnDelete, log
		// The istiod beside this replica is in the home cluster: items
		// limited to other clusters are not served to it.
		publisher.Cluster = homeName(cfg)
		publisher.LastGood = func(ctx context.Context) (map[string]string, error) {
			return controller.ReadLastGood(ctx, kube, cfg.Namespace, cfg.Name)
		}
		publisher.Server = mcp.NewServer(log, publisher.Observer())
		g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
		publisher.Server.Register(g)
		go func() {
			if err := g.Serve(ln); err != nil {
				log.Error("mcp server stopped", "err", err)
			}
		}()
		defer g.Stop()
		if _, err := configMaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { publisher.Changed() },
			UpdateFunc: func(any, any) { publisher.Changed() },
			DeleteFunc: func(any) { publisher.Changed() },
		}); err != nil {
			return err
		}
		cfg.MCPNack = publisher.LastNack
		// The canary rollout the elected controller decides: its status
		// and the last good copy, one ConfigMap each, watched by name.
		var byName []informers.SharedInformerFactory
		for _, name := range []string{status.ConfigMapName(cfg.Name), controller.LastGoodName(cfg.Name)} {
			f := informers.NewSharedInformerFactoryWithOptions(watchKube, opts.Resync, informers.WithNamespace(cfg.Namespace),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) {
					o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
				}))
			if _, err := f.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { publisher.Changed() },
				UpdateFunc: func(any, any) { publisher.Changed() },
				DeleteFunc: func(any) { publisher.Changed() },
			}); err != nil {
				return err
			}
			byName = append(byName, f)
			mcpSynced = append(mcpSynced, f.Core().V1().ConfigMaps().Informer().HasSynced)
		}
		statusCMs, lastGoodCMs := byName[0].Core().V1().ConfigMaps().Lister(), byName[1].Core().V1().ConfigMaps().Lister()
		publisher.Rollout = func(context.Context) (*canary.Record, map[string]string, error) {
			var rec *canary.Record
			switch cm, err := statusCMs.ConfigMaps(cfg.Namespace).Get(status.ConfigMapName(cfg.Name)); {
			case err == nil:
				if st, err := status.Read(cm.Data); err == nil {
					rec = st.Canary
				}
			case !apierrors.IsNotFound(err):
				return nil, nil, err
			}
			switch cm, err := lastGoodCMs.ConfigMaps(cfg.Namespace).Get(controller.LastGoodName(cfg.Name)); {
			case err == nil:
				return rec, cm.Data, nil
			case apierrors.IsNotFound(err):
				return rec, nil, nil
			default:
				return nil, nil, err
			}
		}
		publisher.Pairing = func(context.Context) (string, bool) {
			cm, err := statusCMs.ConfigMaps(cfg.Namespace).Get(status.ConfigMapName(cfg.Name))
			if err != nil {
				return "", false
			}
			st, err := status.Read(cm.Data)
			if err != nil || st.Applied == nil {
				return "", false
			}
			return st.Applied.PairedBy, true
		}
		for _, f := range byName {
			f.Start(ctx.Done())
			defer f.Shutdown()
		}
		log.Info("serving EnvoyFilters over MCP", "addr", ln.Addr().String(), "sink", string(opts.Sink))
	}
	cfg.Sink = string(opts.Sink)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(cfg.Namespace)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "globalconfig"})
	tracker, endpointInformers, err := newTracker(opts.Rollout, watchKube, opts.Resync)
	if err == nil && tracker != nil {
		tracker.DebounceAfter = opts.Rollout.Debounce
		if opts.MemberSecrets {
			// One tracker for every config cluster: the home cluster's
			// istiods as before, each member's added as it comes.
			ms := &rollout.Members{}
			ms.Set(homeName(cfg), tracker.Source)
			tracker.Source, tracker.Home = ms, homeName(cfg)
			tracker.Client.ClusterID = homeName(cfg)
		}
	}
	if err == nil && tracker != nil && opts.Rollout.WatchPods {
		pods := newPodSource(watchKube, opts.Resync)
		tracker.Expected, tracker.Grace = pods, opts.Rollout.ConnectGrace
		pods.start(ctx)
	}
	if err != nil {
		return err
	}
	cfg.Rollout, cfg.RootNamespace = tracker, opts.Rollout.RootNamespace
	if envoyBin != nil && tracker != nil {
		// The blame of a NACK: which EnvoyFilter the proxies refuse.
		cfg.Blame, cfg.BlameEnvoy = blameLive(tracker, kube, istio, envoyBin, opts.Rollout.RootNamespace, homeName(cfg)), envoyBin.Minor()
		log.Info("the controller names the EnvoyFilter proxies refuse when they NACK", "envoy", envoyBin.Path, "version", envoyBin.Version)
	}
	if tracker != nil {
		tracker.Client.Read = metrics.RolloutRead
		// The traffic gate of canary phases: each proxy's own statistics,
		// on its pod or where --rollout-stats-url says.
		var src rollout.StatsSources
		if len(opts.Rollout.StatsURLs) > 0 {
			src = append(src, rollout.StaticStats(opts.Rollout.StatsURLs))
		}
		if pods, ok := tracker.Expected.(*podSource); ok && opts.Rollout.StatsPort > 0 {
			src = append(src, rollout.PodStats{Pods: pods, Port: opts.Rollout.StatsPort, Path: opts.Rollout.StatsPath})
		}
		cfg.Traffic = rollout.NewTrafficGate(src)
	}
	if publisher != nil && opts.Sink == SinkMCP {
		// A lost stable set is rebuilt from what the MCP server serves.
		cfg.Live = publisher.Served
	}
	// Writes go out only while this replica leads.
	var leading atomic.Bool
	if opts.LeaderElect {
		cfg.Leading = leading.Load
	}
	if opts.Webhook.Addr != "" {
		// Is the webhook this process serves the one the API server calls
		// for the global ConfigMap?
		cfg.Admission = func(ctx context.Context, cm *corev1.ConfigMap) status.Admission {
			return webhook.Guard(ctx, kube, opts.Webhook.ConfigName, cm)
		}
	}
	cfg.Resync = opts.Resync
	var follow *memberFollower
	if opts.MemberSecrets {
		follow = &memberFollower{ctx: ctx, facts: clusterFacts, domain: opts.ClusterDomain, log: log, running: map[string]runningMember{},
			rollout: opts.Rollout, resync: opts.Resync}
		if tracker != nil {
			follow.istiods, _ = tracker.Source.(*rollout.Members)
		}
		cfg.MembersChanged = follow.changed
	}
	ctrl := controller.New(cfg, kube, istio, configMaps, istioInformers.Networking().V1alpha3().EnvoyFilters(), recorder, metrics, log)
	// The EnvoyFilters of others, in every namespace (a factory of its
	// own: the controller's stays limited to globalconfig's objects):
	// those anchored on an item's filter are the status' dependents, and
	// the webhook warns when an edit takes such a filter away.
	otherInformers := istioinformers.NewSharedInformerFactoryWithOptions(watchIstio, opts.Resync,
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = controller.OthersSelector }))
	others := otherInformers.Networking().V1alpha3().EnvoyFilters()
	if err := ctrl.WatchDependents(others); err != nil {
		return err
	}
	opts.Webhook.RootNamespace = opts.Rollout.RootNamespace
	opts.Webhook.Others = func(context.Context) ([]anchors.Other, error) {
		if !others.Informer().HasSynced() {
			return nil, errors.New("the EnvoyFilter cache has not synced yet")
		}
		list, err := others.Lister().List(labels.Everything())
		return controller.OthersOf(list), err
	}
	// target.clusters and rollout.clusters name the home cluster and the
	// members, as they are at each render.
	renderer.SetClusters(ctrl.Clusters)
	if opts.MemberSecrets {
		if !opts.Sink.Kube() {
			return fmt.Errorf("--member-secrets needs the kube sink: over MCP, each member's istiod reads its config source itself (docs/operations.md#multi-cluster)")
		}
		follow.enqueue = ctrl.Enqueue
		w := members.NewWatcher(kube, cfg.Namespace, ctrl.HomeName(), opts.Resync)
		w.Log = log
		w.OnChange = func(ms []members.Member, problems []members.Problem) {
			for _, m := range ms {
				limitRate(m.Config)
			}
			ctrl.SetMembers(ctx, ms, problems)
		}
		go w.Run(ctx)
	}
	if resolver != nil {
		// A Service or ServiceEntry the document's items send to that
		// comes or goes is in the status within seconds.
		if err := resolver.Watch(ctx, watchKube, watchIstio, ctrl.Enqueue); err != nil {
			return err
		}
	}
	if opts.RateLimitConfigAddr != "" {
		stop, err := serveRateLimitConfig(opts, publisher, istioInformers, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if tracker != nil && publisher != nil {
		// The tracker reads which pushes istiod sent before the set it
		// serves reached it (rollout.Tracker.Delivering).
		before := publisher.BeforeDeliver
		publisher.BeforeDeliver = func(set []*envoyfilter.Object) {
			if before != nil {
				before(set)
			}
			tracker.Delivering(ctx, set, rollout.ScopeOf(set, opts.Rollout.RootNamespace))
		}
	}
	if tracker != nil {
		tracker.OnChange = ctrl.Enqueue
		go tracker.Run(ctx)
		cfg.Traffic.OnChange = ctrl.Enqueue
		go cfg.Traffic.Run(ctx)
	}

	var hook *webhook.Server
	if opts.Webhook.Addr != "" {
		// Every replica serves the webhook, leader or not.
		if tracker != nil {
			root := opts.Rollout.RootNamespace
			opts.Webhook.Fleet = func(ctx context.Context, label string, set []*envoyfilter.Object) ([]string, []string, error) {
				f, err := tracker.Fleet(ctx, label, rollout.ScopeOf(set, root))
				return f.Canaries, f.Unlabelled, err
			}
		}
		if hook, err = webhook.Start(ctx, kube, opts.Webhook, log); err != nil {
			return err
		}
	}
	stopServers, err := serve(opts, reg, ctrl, hook, log)
	if err != nil {
		return err
	}
	defer stopServers()

	kubeInformers.Start(ctx.Done())
	istioInformers.Start(ctx.Done())
	otherInformers.Start(ctx.Done())
	synced := append([]cache.InformerSynced{ctrl.HasSynced}, mcpSynced...)
	if endpointInformers != nil {
		endpointInformers.Start(ctx.Done())
		synced = append(synced, endpointInformers.Discovery().V1().EndpointSlices().Informer().HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("informer caches did not sync")
	}
	log.Info("caches synced", "configmap", cfg.Namespace+"/"+cfg.Name)
	if publisher != nil {
		go publisher.Run(ctx)
	}

	if !opts.LeaderElect {
		metrics.Leader.Set(1)
		ctrl.Run(ctx)
		return nil
	}
	return lead(ctx, opts, kube, metrics, ctrl, &leading, log)
}

// podSource lists the proxies that should be connected from an informer
// on the pods Istio injected, cluster-wide, keeping only what
// rollout.ExpectedFromPods reads. Startup never waits for it: until it
// has synced (or while RBAC refuses it) nothing is called unconnected.
type podSource struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
}

func newPodSource(kube kubernetes.Interface, resync time.Duration) *podSource {
	f := informers.NewSharedInformerFactoryWithOptions(kube, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = rollout.LabelCanonicalName }),
		informers.WithTransform(func(obj any) (any, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return obj, nil
			}
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, ResourceVersion: p.ResourceVersion,
					DeletionTimestamp: p.DeletionTimestamp, Annotations: map[string]string{rollout.AnnotationTemplates: p.Annotations[rollout.AnnotationTemplates]}},
				Status: corev1.PodStatus{Phase: p.Status.Phase, StartTime: p.Status.StartTime, PodIP: p.Status.PodIP},
			}, nil
		}))
	return &podSource{informer: f.Core().V1().Pods().Informer(), factory: f}
}

func (s *podSource) start(ctx context.Context) { s.factory.Start(ctx.Done()) }

// Expected implements rollout.ExpectedSource.
func (s *podSource) Expected() ([]rollout.Expected, bool) {
	if !s.informer.HasSynced() {
		return nil, false
	}
	var pods []*corev1.Pod
	for _, obj := range s.informer.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return rollout.ExpectedFromPods(pods), true
}

// newTracker builds the rollout tracker of o (nil when disabled), with
// the informers of istiod's EndpointSlices it needs, which the caller
// starts (nil when o names static URLs).
func newTracker(o RolloutOptions, kube kubernetes.Interface, resync time.Duration) (*rollout.Tracker, informers.SharedInformerFactory, error) {
	if !o.Enabled {
		return nil, nil, nil
	}
	client := &rollout.Client{HTTP: &http.Client{}, TokenFile: o.TokenFile}
	if len(o.DebugURLs) > 0 {
		return rollout.NewTracker(rollout.Static(o.DebugURLs), client, o.Timeout), nil, nil
	}
	ns, name, ok := strings.Cut(o.Istiod, "/")
	if !ok || ns == "" || name == "" {
		return nil, nil, fmt.Errorf("--istiod must be NAMESPACE/NAME, got %q", o.Istiod)
	}
	// Only the Service's slices, in its namespace.
	f := informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = discoveryv1.LabelServiceName + "=" + name
		}))
	src := rollout.ServiceEndpoints{Lister: f.Discovery().V1().EndpointSlices().Lister(), Namespace: ns, Name: name, Port: o.DebugPort}
	return rollout.NewTracker(src, client, o.Timeout), f, nil
}

// lead runs the controller whenever this replica holds the Lease. A lost
// lease (say, during an API server outage) ends the term, not the
// process: the replica goes back to being a candidate, its caches warm,
// and a new term starts from a fresh state.
func lead(ctx context.Context, opts Options, kube kubernetes.Interface, metrics *controller.Metrics, ctrl *controller.Controller, leading *atomic.Bool, log *slog.Logger) error {
	id, err := os.Hostname()
	if err != nil {
		id = "globalconfig"
	}
	id += "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaseNamespace, Name: opts.LeaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			ReleaseOnCancel: true,
			LeaseDuration:   opts.LeaseDuration,
			RenewDeadline:   opts.RenewDeadline,
			RetryPeriod:     opts.RetryPeriod,
			Name:            opts.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					log.Info("leading", "identity", id)
					leading.Store(true)
					metrics.Leader.Set(1)
					ctrl.Run(ctx)
				},
				OnStoppedLeading: func() {
					leading.Store(false)
					metrics.Leader.Set(0)
					if ctx.Err() == nil {
						log.Warn("lost the lease; standing as a candidate again")
					}
				},
				OnNewLeader: func(identity string) {
					if identity != id {
						log.Info("following", "leader", identity)
					}
				},
			},
		})
	}
	return nil
}

// serve starts the metrics and health servers; the returned func stops
// them.
// serveRateLimitConfig serves the rate-limit service the limits of the set
// the proxies have: what this replica serves istiod (MCP sink), or the
// EnvoyFilters in the cluster (kube sink), so every replica serves the
// same, leader or not.
func serveRateLimitConfig(opts Options, publisher *mcp.Publisher, istioInformers istioinformers.SharedInformerFactory, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", opts.RateLimitConfigAddr)
	if err != nil {
		return nil, fmt.Errorf("rate-limit config: listen %s: %w", opts.RateLimitConfigAddr, err)
	}
	srv := rlsconfig.NewServer(log)
	g := grpc.NewServer()
	srv.Register(g)
	go func() {
		if err := g.Serve(ln); err != nil {
			log.Error("rate-limit config server stopped", "err", err)
		}
	}()
	publish := func(set []*envoyfilter.Object) {
		if _, err := srv.Publish(set); err != nil {
			log.Error("rate-limit config", "err", err)
		}
	}
	if publisher != nil {
		publisher.BeforeDeliver = publish
	} else {
		efs := istioInformers.Networking().V1alpha3().EnvoyFilters()
		fromCluster := func() {
			list, err := efs.Lister().List(labels.Everything())
			if err != nil {
				log.Error("rate-limit config: list EnvoyFilters", "err", err)
				return
			}
			set := make([]*envoyfilter.Object, 0, len(list))
			for _, ef := range list {
				set = append(set, &envoyfilter.Object{Metadata: envoyfilter.Metadata{
					Name: ef.Name, Namespace: ef.Namespace, Labels: ef.Labels, Annotations: ef.Annotations,
				}})
			}
			publish(set)
		}
		if _, err := efs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { fromCluster() },
			UpdateFunc: func(any, any) { fromCluster() },
			DeleteFunc: func(any) { fromCluster() },
		}); err != nil {
			g.Stop()
			return nil, err
		}
	}
	log.Info("serving the rate-limit service its configuration over xDS", "addr", ln.Addr().String())
	return g.Stop, nil
}

func serve(opts Options, reg *prometheus.Registry, ctrl *controller.Controller, hook *webhook.Server, log *slog.Logger) (func(), error) {
	var servers []*http.Server
	start := func(addr string, h http.Handler) error {
		if addr == "" || addr == "0" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("server stopped", "addr", addr, "err", err)
			}
		}()
		return nil
	}
	mm := http.NewServeMux()
	mm.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hm := http.NewServeMux()
	hm.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	hm.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ctrl.HasSynced() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		if hook != nil && !hook.Ready() {
			http.Error(w, "webhook has no certificate yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
	}
	if err := start(opts.MetricsAddr, mm); err != nil {
		stop()
		return nil, err
	}
	if err := start(opts.HealthAddr, hm); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func homeName(cfg controller.Config) string {
	if cfg.ClusterName != "" {
		return cfg.ClusterName
	}
	return members.DefaultHome
}

// memberFollower keeps what the process reads of each member cluster
// besides its EnvoyFilters (the controller's): its Services and
// ServiceEntries for the items' service facts. Each member's watches run
// until it goes or its Secret changes.
type memberFollower struct {
	ctx context.Context
	// istiods are the tracker's members (nil without rollout tracking):
	// each member's istiods are found from the member's own istiod
	// Service EndpointSlices (as --istiod names it), or are the URLs of
	// its Secret's annotation.
	istiods *rollout.Members
	rollout RolloutOptions
	resync  time.Duration
	facts   *facts.Clusters
	domain  string
	log     *slog.Logger
	enqueue func()
	running map[string]runningMember
}

type runningMember struct {
	fingerprint string
	stop        context.CancelFunc
}

// changed is controller.Config.MembersChanged: called from the member
// Secrets' watcher, one call at a time.
func (f *memberFollower) changed(ms []members.Member) {
	want := map[string]members.Member{}
	for _, m := range ms {
		want[m.Name] = m
	}
	for name, r := range f.running {
		if m, ok := want[name]; !ok || m.Fingerprint != r.fingerprint {
			r.stop()
			delete(f.running, name)
			if f.facts != nil {
				f.facts.Set(name, nil)
			}
			if f.istiods != nil {
				f.istiods.Remove(name)
			}
		}
	}
	for _, m := range ms {
		if _, ok := f.running[m.Name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(f.ctx)
		f.running[m.Name] = runningMember{fingerprint: m.Fingerprint, stop: cancel}
		kube, err := kubernetes.NewForConfig(m.Config)
		if err != nil {
			f.log.Error("member cluster: kubernetes client", "cluster", m.Name, "err", err)
			continue
		}
		if f.istiods != nil {
			f.trackIstiods(ctx, m, kube)
		}
		if f.facts == nil {
			continue
		}
		istio, err := istioclient.NewForConfig(m.Config)
		if err != nil {
			f.log.Error("member cluster: istio client", "cluster", m.Name, "err", err)
			continue
		}
		r := &facts.Resolver{Kube: kube, Istio: istio, Domain: f.domain}
		if err := r.Watch(ctx, kube, istio, func() {
			if f.enqueue != nil {
				f.enqueue()
			}
		}); err != nil {
			f.log.Error("member cluster: watch its Services and ServiceEntries", "cluster", m.Name, "err", err)
		}
		f.facts.Set(m.Name, r)
	}
}

// trackIstiods adds member m's istiods to the tracker: its annotation's
// URLs, or every endpoint of its istiod Service, from an informer on the
// member's EndpointSlices that runs while it is a member.
func (f *memberFollower) trackIstiods(ctx context.Context, m members.Member, kube kubernetes.Interface) {
	if len(m.DebugURLs) > 0 {
		f.istiods.Set(m.Name, rollout.Static(m.DebugURLs))
		return
	}
	o := f.rollout
	o.DebugURLs = nil // the home cluster's, never a member's
	t, inf, err := newTracker(o, kube, f.resync)
	if err != nil || t == nil || inf == nil {
		f.log.Error("member cluster: its istiods can't be found", "cluster", m.Name, "err", err)
		return
	}
	inf.Start(ctx.Done())
	f.istiods.Set(m.Name, t.Source)
}
