package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/app"
	"github.com/globalconfig/globalconfig/pkg/facts"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/webhook"
)

// Defaults of `globalconfig run`.
const (
	DefaultConfigMap   = envoyfilter.DefaultNamespace + "/global-config"
	DefaultMetricsAddr = ":9090"
	DefaultHealthAddr  = ":8081"
	DefaultLeaseName   = "globalconfig"
	DefaultResync      = 10 * time.Minute
	// WebhookService is the Service deploy/ puts in front of the webhook.
	WebhookService = "globalconfig-webhook"
	// DefaultIstiod is the istiod Service whose instances report the
	// rollout.
	DefaultIstiod = envoyfilter.DefaultNamespace + "/istiod"
)

// runFlags defines the flags of `run` on fs.
func runFlags(fs *flag.FlagSet) (*app.Options, *string, *string) {
	o := &app.Options{}
	cm := fs.String("configmap", DefaultConfigMap, "the global ConfigMap, NAMESPACE/NAME; its data key config.yaml holds the document")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", DefaultMetricsAddr, `Prometheus metrics address ("0" disables)`)
	fs.StringVar(&o.HealthAddr, "health-addr", DefaultHealthAddr, `/healthz and /readyz address ("0" disables)`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect one writer among replicas with a Lease")
	fs.StringVar(&o.LeaseNamespace, "leader-elect-namespace", "", "namespace of the Lease (default: the ConfigMap's)")
	fs.StringVar(&o.LeaseName, "leader-elect-name", DefaultLeaseName, "name of the Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", app.DefaultLeaseDuration, "how long a lease lasts without renewal")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", app.DefaultRenewDeadline, "how long the leader retries renewing before it gives up")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", app.DefaultRetryPeriod, "how often candidates try to acquire or renew")
	fs.BoolVar(&o.Controller.PruneOnDelete, "prune-on-delete", false, "remove the managed EnvoyFilters when the ConfigMap is deleted (default: keep them)")
	fs.StringVar(&o.Controller.FieldManager, "field-manager", "globalconfig", "server-side apply field manager")
	fs.DurationVar(&o.Resync, "resync", DefaultResync, "informer resync period (a resync that finds nothing to do writes nothing)")
	fs.StringVar(&o.MCPAddr, "mcp-addr", "", "serve the EnvoyFilters to istiod over MCP (ADS) at this address, e.g. 127.0.0.1:15051")
	fs.Func("sink", "where the EnvoyFilters go: kube (EnvoyFilter objects, default), mcp (served to istiod only) or both", func(v string) error {
		switch s := app.Sink(v); s {
		case app.SinkKube, app.SinkMCP, app.SinkBoth:
			o.Sink = s
			return nil
		}
		return fmt.Errorf("must be kube, mcp or both")
	})
	fs.StringVar(&o.Webhook.Addr, "webhook-addr", "", "serve the validating admission webhook for the global ConfigMap at this address, e.g. :9443")
	fs.StringVar(&o.Webhook.Secret, "webhook-secret", "globalconfig-webhook-tls", "Secret (in the ConfigMap's namespace) holding the webhook's TLS certificate")
	fs.StringVar(&o.Webhook.ConfigName, "webhook-config", "globalconfig", "ValidatingWebhookConfiguration whose caBundle the controller keeps")
	fs.Func("webhook-hosts", "comma-separated DNS names or IPs of the webhook certificate (default: the globalconfig-webhook Service's names)", func(v string) error {
		o.Webhook.Hosts = strings.Split(v, ",")
		return nil
	})
	fs.BoolVar(&o.Webhook.ManageCert, "webhook-manage-cert", true, "create and rotate a self-signed CA and certificate and patch the caBundle; false when cert-manager keeps the Secret")
	fs.BoolVar(&o.Rollout.Enabled, "rollout", true, "follow which proxies ACK or NACK each new set, from istiod's sync status (/debug/syncz)")
	fs.StringVar(&o.Rollout.Istiod, "istiod", DefaultIstiod, "the istiod Service, NAMESPACE/NAME: each of its endpoints, ready or not, is asked on --istiod-debug-port, and a canary phase is promoted only once every one answered")
	fs.IntVar(&o.Rollout.DebugPort, "istiod-debug-port", rollout.DefaultDebugPort, "istiod's HTTP debug port (its --httpAddr)")
	fs.Func("istiod-debug-url", "comma-separated istiod debug base URLs to ask instead of the Service's endpoints, e.g. http://127.0.0.1:8080 in sidecar mode", func(v string) error {
		o.Rollout.DebugURLs = strings.Split(v, ",")
		return nil
	})
	fs.StringVar(&o.Rollout.TokenFile, "istiod-token-file", "", "a ServiceAccount token with audience istio-ca, sent to istiod (needed unless istiod is on localhost)")
	fs.DurationVar(&o.Rollout.Timeout, "rollout-timeout", rollout.DefaultTimeout, "how long proxies may take to ACK a new set before they count as Stale")
	fs.DurationVar(&o.Rollout.Debounce, "rollout-debounce", rollout.DebounceAfter, "istiod's quiet period (its PILOT_DEBOUNCE_AFTER): a push sent before it passed since istiod got a new set is not counted as carrying the set")
	fs.BoolVar(&o.Rollout.WatchPods, "rollout-watch-pods", true, "watch the running pods Istio injected (cluster-wide, labels and phase only) to report those whose proxy never connects to istiod; needs list and watch on pods")
	fs.DurationVar(&o.Rollout.ConnectGrace, "rollout-connect-grace", rollout.ConnectGrace, "how long an injected pod's proxy may stay unconnected before the status says so")
	fs.StringVar(&o.Rollout.RootNamespace, "mesh-root-namespace", envoyfilter.DefaultNamespace, "Istio's root namespace (meshConfig.rootNamespace): an EnvoyFilter there reaches every proxy")
	fs.IntVar(&o.Rollout.StatsPort, "rollout-stats-port", rollout.DefaultStatsPort, "the port of each proxy pod's merged statistics (istio-agent's 15020) that a canary phase's traffic gate (rollout.analysis) reads at the pod's address; needs --rollout-watch-pods and the network to reach it; 0 turns it off")
	fs.StringVar(&o.Rollout.StatsPath, "rollout-stats-path", rollout.DefaultStatsPath, "the path of those statistics, in Prometheus' text format")
	fs.Func("rollout-stats-url", "POD.NAMESPACE=URL,…: where the named proxies' statistics are, instead of their pods (proxies outside Kubernetes, tests)", func(v string) error {
		for _, kv := range strings.Split(v, ",") {
			name, url, ok := strings.Cut(kv, "=")
			if !ok || name == "" || url == "" {
				return fmt.Errorf("want POD.NAMESPACE=URL, got %q", kv)
			}
			if o.Rollout.StatsURLs == nil {
				o.Rollout.StatsURLs = map[string]string{}
			}
			o.Rollout.StatsURLs[name] = url
		}
		return nil
	})
	fs.BoolVar(&o.ServiceFacts, "service-facts", true, "look up the Services and ServiceEntries the document's items send to (a collector): refuse a name istiod never resolves as written, warn of one that is missing (its item is not in effect); needs get, list and watch on services and list and watch on serviceentries")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", facts.DefaultDomain, "istiod's domain suffix (its --domain): Services' full host names end in .svc.DOMAIN")
	fs.StringVar(&o.Envoy, "envoy", "", "the fleet's Envoy binary (istio-proxy's, from the istio/proxyv2 image, or an upstream Envoy of the same release): when proxies NACK a set, the controller runs it to name the EnvoyFilter they refuse, ours or another's, in the status and an Event, and a Direct change is rolled back only when that EnvoyFilter is globalconfig's (needs --rollout); with --webhook-addr the webhook also loads the output of every edit that changes the EnvoyFilters into it in validate mode and refuses what Envoy refuses")
	fs.DurationVar(&o.EnvoyTimeout, "envoy-timeout", webhook.DefaultEnvoyTimeout, "how long one review may wait for the Envoy check; keep it under the webhook configuration's timeoutSeconds (5 in deploy/). An edit the check can't judge in time (or that crashes Envoy) is admitted on globalconfig's own validation, with a warning")
	fs.StringVar(&o.RateLimitConfigAddr, "ratelimit-config-addr", "", "serve the rate-limit service (envoyproxy/ratelimit, CONFIG_TYPE=GRPC_XDS_SOTW) the globalRateLimit limits of the set the proxies have, over xDS at this address, e.g. :18000")
	fs.StringVar(&o.Controller.ClusterName, "cluster-name", members.DefaultHome, "the name of the cluster the controller runs in (istiod's CLUSTER_ID there): what target.clusters and the status call it")
	fs.BoolVar(&o.MemberSecrets, "member-secrets", false, "deliver to the member clusters that Secrets labelled "+members.LabelMember+"=true in the ConfigMap's namespace name (kubeconfigs in Istio's remote-secret format), watched at runtime; needs list and watch on secrets there")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	return o, cm, level
}

func runCommand(args []string, env Env) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	opts, cm, level := runFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	ns, name, ok := strings.Cut(*cm, "/")
	if !ok || ns == "" || name == "" || fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "globalconfig run: --configmap must be NAMESPACE/NAME, got %q\n", *cm)
		return ExitUsage
	}
	opts.Controller.Namespace, opts.Controller.Name = ns, name
	if opts.Sink == "" {
		opts.Sink = app.SinkKube
	}
	if opts.Sink.MCP() != (opts.MCPAddr != "") {
		fmt.Fprintf(env.Stderr, "globalconfig run: --sink mcp and --sink both need --mcp-addr, and --mcp-addr needs one of them (got --sink %s)\n", opts.Sink)
		return ExitUsage
	}
	if opts.Envoy != "" && opts.Webhook.Addr == "" && !opts.Rollout.Enabled {
		fmt.Fprintf(env.Stderr, "globalconfig run: --envoy names the EnvoyFilter proxies refuse, which needs --rollout, or checks the webhook's edits, which needs --webhook-addr; with --rollout=false and no --webhook-addr it would do nothing\n")
		return ExitUsage
	}
	if opts.EnvoyTimeout <= 0 {
		fmt.Fprintf(env.Stderr, "globalconfig run: --envoy-timeout must be positive, got %v\n", opts.EnvoyTimeout)
		return ExitUsage
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = ns
	}
	opts.Webhook.Namespace = ns
	if len(opts.Webhook.Hosts) == 0 {
		opts.Webhook.Hosts = []string{WebhookService + "." + ns + ".svc", WebhookService + "." + ns + ".svc.cluster.local"}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig run: --log-level: %v\n", err)
		return ExitUsage
	}
	log := slog.New(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, *opts, log); err != nil {
		log.Error("exiting", "err", err)
		return ExitRun
	}
	return ExitOK
}
