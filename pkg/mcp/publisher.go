package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Publisher keeps a Server's set equal to the global ConfigMap's document.
// It runs on every replica, leader or not: each istiod reads its own
// sidecar. An invalid document publishes nothing, so istiod keeps the last
// good set. A publisher that has published nothing yet (it just started)
// publishes the stored last good document instead (LastGood), so an istiod
// starting beside it is served at once; without one, a missing ConfigMap
// publishes an empty set, and an invalid document waits for a valid one.
// A missing ConfigMap publishes an empty set when PruneOnDelete is set.
// What to publish is decided by decide.Decide, as for the kube sink.
type Publisher struct {
	Server          *Server
	ConfigMaps      corelisters.ConfigMapLister
	Namespace, Name string
	PruneOnDelete   bool
	Log             *slog.Logger
	// LastGood reads the stored last good document (the data of
	// controller.LastGoodName's ConfigMap), nil when there is none.
	LastGood func(context.Context) (map[string]string, error)
	// Rollout, when set, reads the canary rollout the elected controller
	// decided (the status's canary record, nil for none) and the stored
	// last good document's data: a document with a canary policy is
	// served as that record says (decide.Rollout.Follow), so every istiod
	// gets the same canary set as the kube sink.
	Rollout func(context.Context) (*canary.Record, map[string]string, error)
	// BeforeDeliver, when set, is handed every set just before it is
	// published: a service the set's patches call gets its configuration
	// first (pkg/rlsconfig).
	BeforeDeliver func(set []*envoyfilter.Object)
	// Grace is how long past its phase timeout an in-canary record is
	// still followed (canary.DefaultGrace when 0): a record that old was
	// left by a controller that no longer decides, and the set before the
	// change is served instead.
	Grace time.Duration
	// Now is the publisher's clock (time.Now when nil).
	Now func() time.Time
	// Cluster, when set, is the config cluster of the istiod this
	// replica serves: an item limited to other clusters
	// (target.clusters) is not served to it.
	Cluster string
	// Pairing, when set, reads how the elected controller's set is paired
	// (the status's applied.pairedBy; ok false when there is no status):
	// a document with no record yet is served paired the same way.
	Pairing func(context.Context) (label string, ok bool)

	renderer *render.Renderer
	metrics  *Metrics
	signal   chan struct{}

	mu      sync.Mutex
	secrets []string
	nack    string

	// served is the set last published, for Served.
	served atomic.Pointer[[]*envoyfilter.Object]

	// touched only by Run's goroutine
	published     bool
	publishedHash string
	applied       *decide.Applied
	// stable is the last good document's set, and stableText its text.
	stable     *canary.Set
	stableText string
}

// Metrics are the MCP server's Prometheus metrics.
type Metrics struct {
	Connections prometheus.Gauge
	Responses   *prometheus.CounterVec
	Publishes   prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "globalconfig_mcp_connections",
			Help: "istiods connected to the MCP server.",
		}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "globalconfig_mcp_responses_total",
			Help: "istiod's answers to MCP pushes by type and result (ack or nack).",
		}, []string{"type", "result"}),
		Publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "globalconfig_mcp_publishes_total",
			Help: "New EnvoyFilter sets published to the MCP server.",
		}),
	}
	reg.MustRegister(m.Connections, m.Responses, m.Publishes)
	return m
}

// NewPublisher returns a publisher deciding with renderer r (the
// process's; a new one when nil); give its Observer to the Server and call
// Changed from the ConfigMap informer's handlers.
func NewPublisher(metrics *Metrics, r *render.Renderer) *Publisher {
	if r == nil {
		r = render.New()
	}
	return &Publisher{renderer: r, metrics: metrics, signal: make(chan struct{}, 1)}
}

// Changed asks for the ConfigMap to be read and published again.
func (p *Publisher) Changed() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// Run publishes on every Changed until ctx ends, starting with one
// publish.
func (p *Publisher) Run(ctx context.Context) {
	p.Changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.signal:
		}
		p.Sync()
	}
}

// Sync reads the ConfigMap, decides and publishes what the decision asks
// for; Run calls it on every Changed.
func (p *Publisher) Sync() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := decide.Input{Applied: p.applied, PruneOnDelete: p.PruneOnDelete, Fresh: !p.published}
	if p.LastGood != nil {
		in.LastGood = func() (map[string]string, error) { return p.LastGood(ctx) }
	}
	cm, err := p.ConfigMaps.ConfigMaps(p.Namespace).Get(p.Name)
	switch {
	case apierrors.IsNotFound(err):
		in.Missing = true
	case err != nil:
		p.Log.Error("mcp: read configmap", "err", err)
		return
	default:
		in.Data = cm.Data
	}
	if !in.Missing && p.Rollout != nil {
		if in.Rollout, err = p.follow(ctx); err != nil {
			p.Log.Error("mcp: read the canary rollout", "err", err)
			return
		}
	}
	d, err := decide.Decide(p.renderer, in)
	if err != nil {
		p.Log.Error("mcp: read the last good document", "err", err)
	}
	if r := d.Rollout; r != nil && r.Distrusted != "" {
		p.Log.Warn("mcp: not following the elected controller's canary phase", "reason", r.Distrusted)
	} else if r != nil && r.Hold && r.Why != "" {
		p.Log.Info("mcp: holding what it serves", "reason", r.Why)
	}
	p.mu.Lock()
	p.secrets = d.Secrets
	p.mu.Unlock()
	if d.Source == decide.LastGood {
		p.Log.Info("mcp: the document is not usable; serving the stored last good one")
	}
	// An invalid document with nothing to keep delivers nothing: the
	// controller reports the problems, and istiod keeps the last good set
	// (or waits for a valid one).
	if d.Deliver() && p.BeforeDeliver != nil {
		p.BeforeDeliver(d.Set)
	}
	if _, err := decide.Deliver(ctx, serverSink{p}, d); err != nil {
		p.Log.Error("mcp: publish", "err", err)
		return
	}
	if d.Deliver() {
		p.applied = d.Applied()
	}
}

// follow is the canary step's input of a follower: the elected
// controller's record and the last good document's set.
func (p *Publisher) follow(ctx context.Context) (*decide.Rollout, error) {
	rec, data, err := p.Rollout(ctx)
	if err != nil {
		return nil, err
	}
	text, ok := data[document.DataKey]
	switch {
	case !ok:
		p.stable, p.stableText = nil, ""
	case p.stable == nil || text != p.stableText:
		// A renderer of its own: the old document must not evict the
		// current one's built items from the shared cache.
		p.stable, p.stableText = nil, text
		if res := render.New().FromConfigMap(data); res.Valid() {
			p.stable = &canary.Set{Objects: res.Objects, Hash: render.SetHash(res.Objects)}
		}
	}
	in := canary.Input{Follow: true, Stable: p.stable, Record: rec, Now: p.now(), Grace: p.Grace, Resolve: p.resolve}
	if p.applied != nil {
		in.PairedBy = canary.PairedLabel(p.applied.Set)
	}
	if p.Pairing != nil {
		in.LeaderPairing, in.LeaderKnown = p.Pairing(ctx)
	}
	return &decide.Rollout{Input: in}, nil
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// resolve finds the set of hash a followed rollout needs when the last
// good copy is not it: in what this server serves (a paired set's stable
// or canary copies), exactly, or nowhere.
func (p *Publisher) resolve(hash, label string) (*canary.Set, string) {
	why := fmt.Sprintf("the last good copy is not set %s", hash)
	if p.stable == nil {
		why = "no last good copy renders here"
	}
	if p.applied == nil {
		return nil, why + ", and this server serves nothing yet"
	}
	stable, cand, _, err := canary.Unpair(p.applied.Set, label)
	if err != nil {
		return nil, why + ": " + err.Error()
	}
	for _, half := range [][]*envoyfilter.Object{stable, cand} {
		if s := (&canary.Set{Objects: half, Hash: canary.SetHash(half)}); s.Hash == hash {
			return s, ""
		}
	}
	return nil, why + ", and this server serves neither"
}

// serverSink is the MCP sink: it serves the set to every istiod.
type serverSink struct{ p *Publisher }

func (s serverSink) Deliver(_ context.Context, objs []*envoyfilter.Object) ([]string, error) {
	p := s.p
	hash := render.SetHash(objs)
	if p.published && p.publishedHash == hash {
		return nil, nil
	}
	if p.Cluster != "" {
		objs = envoyfilter.ForCluster(objs, p.Cluster)
	}
	if err := p.Server.Publish(hash, objs); err != nil {
		return nil, err
	}
	p.metrics.Publishes.Inc()
	p.published, p.publishedHash = true, hash
	p.served.Store(&objs)
	return []string{fmt.Sprintf("served %d EnvoyFilters as set %s", len(objs), hash)}, nil
}

// Served is the set the server serves now (nil before it served one).
func (p *Publisher) Served() []*envoyfilter.Object {
	if s := p.served.Load(); s != nil {
		return *s
	}
	return nil
}

// LastNack is istiod's last rejection of an EnvoyFilter push, scrubbed of
// secrets; empty once a later push was accepted.
func (p *Publisher) LastNack() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nack
}

// Observer returns the observer to give NewServer: it counts istiod's
// answers and remembers the last NACK.
func (p *Publisher) Observer() Observer { return observer{p} }

type observer struct{ p *Publisher }

func (o observer) Connected(n int) { o.p.metrics.Connections.Set(float64(n)) }

func (o observer) Acked(typeURL, version string) {
	o.p.metrics.Responses.WithLabelValues(typeURL, "ack").Inc()
	if typeURL == EnvoyFilterType {
		o.p.mu.Lock()
		o.p.nack = ""
		o.p.mu.Unlock()
	}
}

func (o observer) Nacked(typeURL, version, message string) {
	o.p.metrics.Responses.WithLabelValues(typeURL, "nack").Inc()
	o.p.mu.Lock()
	// istiod's message may quote the configuration.
	message = render.Scrub(message, o.p.secrets)
	o.p.nack = fmt.Sprintf("%s version %s: %s", typeURL, version, message)
	o.p.mu.Unlock()
	o.p.Log.Warn("istiod rejected a push (NACK)", "type", typeURL, "version", version, "error", message)
}
