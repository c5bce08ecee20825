package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/globalconfig/globalconfig/pkg/mcp"
	"github.com/globalconfig/globalconfig/pkg/webhook"
)

// Options are the flags of `globalconfig run`.
type Options struct {
	Kubeconfig     string
	Config         Config
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
	// client-go's default of 5 requests/s would queue the three writes of
	// one edit (EnvoyFilter, status, Event) behind each other. The
	// controller's traffic is bounded by edits anyway.
	cfg.QPS, cfg.Burst = ClientQPS, ClientBurst
	return cfg, nil
}

// Run runs the controller until ctx ends or leadership is lost.
func Run(ctx context.Context, opts Options, log *slog.Logger) error {
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
	metrics := NewMetrics()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(opts.Config.Namespace)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "globalconfig"})

	ctrl := New(opts.Config, kube, istio, recorder, metrics, log)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.MCPAddr != "" {
		// Listen first: istiod refuses to start while its config source
		// doesn't answer, so the port must be open as soon as possible.
		ln, err := net.Listen("tcp", opts.MCPAddr)
		if err != nil {
			return fmt.Errorf("mcp: listen %s: %w", opts.MCPAddr, err)
		}
		observer := ctrl.NewMCPObserver()
		server := mcp.NewServer(log, observer)
		g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
		server.Register(g)
		go func() {
			if err := g.Serve(ln); err != nil {
				log.Error("mcp server stopped", "err", err)
			}
		}()
		defer g.Stop()
		ctrl.ServeMCP(server, observer)
		log.Info("serving EnvoyFilters over MCP", "addr", ln.Addr().String(), "sink", string(opts.Config.Sink))
	}
	var hook *webhook.Server
	if opts.Webhook.Addr != "" {
		// Every replica serves the webhook, leader or not.
		if hook, err = webhook.Start(ctx, kube, opts.Webhook, log); err != nil {
			return err
		}
	}
	servers, err := serve(ctx, opts, metrics, ctrl, hook, log)
	if err != nil {
		return err
	}
	defer servers()

	if err := ctrl.Start(ctx); err != nil {
		return err
	}
	log.Info("caches synced", "configmap", opts.Config.Namespace+"/"+opts.Config.Name)

	if !opts.LeaderElect {
		metrics.Leader.Set(1)
		ctrl.Run(ctx)
		return nil
	}
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
	// A lost lease (say, during an API server outage) ends the term, not
	// the process: the replica goes back to being a candidate, its caches
	// warm, and a new term starts from a fresh state.
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
					metrics.Leader.Set(1)
					ctrl.Run(ctx)
				},
				OnStoppedLeading: func() {
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

// serve starts the metrics and health servers; the returned func stops them.
func serve(ctx context.Context, opts Options, metrics *Metrics, ctrl *Controller, hook *webhook.Server, log *slog.Logger) (func(), error) {
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
	mm.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
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
