package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
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
type Publisher struct {
	Server          *Server
	ConfigMaps      corelisters.ConfigMapLister
	Namespace, Name string
	PruneOnDelete   bool
	Log             *slog.Logger
	// LastGood reads the stored last good document (the data of
	// controller.LastGoodName's ConfigMap), nil when there is none.
	LastGood func(context.Context) (map[string]string, error)

	renderer *render.Renderer
	metrics  *Metrics
	signal   chan struct{}

	mu      sync.Mutex
	secrets []string
	nack    string

	// touched only by Run's goroutine
	published     bool
	publishedHash string
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

// NewPublisher returns a publisher; give its Observer to the Server and
// call Changed from the ConfigMap informer's handlers.
func NewPublisher(metrics *Metrics) *Publisher {
	return &Publisher{renderer: render.New(), metrics: metrics, signal: make(chan struct{}, 1)}
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
		p.publishOnce()
	}
}

func (p *Publisher) publishOnce() {
	cm, err := p.ConfigMaps.ConfigMaps(p.Namespace).Get(p.Name)
	switch {
	case apierrors.IsNotFound(err):
		switch {
		case p.PruneOnDelete:
			p.publish(nil)
		case !p.published:
			if !p.publishLastGood() {
				p.publish(nil)
			}
		}
	case err != nil:
		p.Log.Error("mcp: read configmap", "err", err)
	default:
		res := p.renderer.FromConfigMap(cm.Data)
		p.mu.Lock()
		p.secrets = res.Secrets
		p.mu.Unlock()
		if !res.Valid() {
			// The controller reports the problems; keep serving the last
			// good set, or start serving the stored one.
			if !p.published {
				p.publishLastGood()
			}
			return
		}
		p.publish(res.Objects)
	}
}

// publishLastGood publishes the stored last good document's set, and
// reports whether there was one that renders.
func (p *Publisher) publishLastGood() bool {
	if p.LastGood == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, err := p.LastGood(ctx)
	if err != nil {
		p.Log.Error("mcp: read the last good document", "err", err)
		return false
	}
	if data == nil {
		return false
	}
	res := p.renderer.FromConfigMap(data)
	if !res.Valid() {
		p.Log.Warn("mcp: the stored last good document no longer renders; ignored", "problems", len(res.Problems))
		return false
	}
	p.Log.Info("mcp: the document is not usable; serving the stored last good one")
	p.publish(res.Objects)
	return true
}

func (p *Publisher) publish(objs []*envoyfilter.Object) {
	hash := render.SetHash(objs)
	if err := p.Server.Publish(hash, objs); err != nil {
		p.Log.Error("mcp: publish", "err", err)
		return
	}
	if !p.published || p.publishedHash != hash {
		p.metrics.Publishes.Inc()
	}
	p.published, p.publishedHash = true, hash
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
