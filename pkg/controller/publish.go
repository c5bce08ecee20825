package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/manager"
	"github.com/globalconfig/globalconfig/pkg/mcp"
)

// Sink says where the EnvoyFilters go.
type Sink string

// The sinks.
const (
	SinkKube Sink = "kube" // EnvoyFilter objects in the cluster (default)
	SinkMCP  Sink = "mcp"  // served to istiod over MCP only
	SinkBoth Sink = "both"
)

// Kube reports whether the sink writes EnvoyFilter objects.
func (s Sink) Kube() bool { return s == SinkKube || s == SinkBoth }

// MCP reports whether the sink serves istiod over MCP.
func (s Sink) MCP() bool { return s == SinkMCP || s == SinkBoth }

// scrubber holds the current document's secret values and removes them
// from messages; renders on the worker and on the publisher update it.
type scrubber struct {
	mu      sync.Mutex
	secrets []string
}

func (s *scrubber) set(secrets []string) {
	s.mu.Lock()
	s.secrets = append(s.secrets[:0:0], secrets...)
	s.mu.Unlock()
}

func (s *scrubber) scrub(msg string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return manager.Scrub(msg, s.secrets)
}

// mcpObserver turns MCP server events into metrics and remembers the last
// NACK, scrubbed, for the status ConfigMap.
type mcpObserver struct {
	metrics  *Metrics
	scrubber *scrubber
	log      *slog.Logger
	mu       sync.Mutex
	nack     string
}

func (o *mcpObserver) Connected(n int) { o.metrics.MCPConnections.Set(float64(n)) }

func (o *mcpObserver) Acked(typeURL, version string) {
	o.metrics.MCPResponses.WithLabelValues(typeURL, "ack").Inc()
	if typeURL == mcp.EnvoyFilterType {
		o.mu.Lock()
		o.nack = ""
		o.mu.Unlock()
	}
}

func (o *mcpObserver) Nacked(typeURL, version, message string) {
	o.metrics.MCPResponses.WithLabelValues(typeURL, "nack").Inc()
	// istiod's message may quote the configuration.
	message = o.scrubber.scrub(message)
	o.log.Warn("istiod rejected a push (NACK)", "type", typeURL, "version", version, "error", message)
	o.mu.Lock()
	o.nack = fmt.Sprintf("%s version %s: %s", typeURL, version, message)
	o.mu.Unlock()
}

func (o *mcpObserver) lastNack() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nack
}

// publishLoop keeps the MCP server's set equal to the document, on every
// replica, leader or not: each istiod reads its own sidecar. An invalid
// document publishes nothing (istiod keeps the last good set); a missing
// ConfigMap publishes an empty set only when nothing was published yet or
// --prune-on-delete is set.
func (c *Controller) publishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.publishCh:
		}
		cm, err := c.configMaps.ConfigMaps(c.cfg.Namespace).Get(c.cfg.Name)
		switch {
		case apierrors.IsNotFound(err):
			if c.published && !c.cfg.PruneOnDelete {
				continue
			}
			c.publish(nil)
		case err != nil:
			c.log.Error("mcp: read configmap", "err", err)
		default:
			objs, problems := c.render(cm)
			if problems != nil {
				continue // the controller's sync reports them; keep serving the last good set.
			}
			c.publish(objs)
		}
	}
}

func (c *Controller) publish(objs []*envoyfilter.Object) {
	if err := c.mcp.Publish(setHash(objs), objs); err != nil {
		c.log.Error("mcp: publish", "err", err)
		return
	}
	if !c.published || c.publishedHash != setHash(objs) {
		c.metrics.MCPPublishes.Inc()
	}
	c.published, c.publishedHash = true, setHash(objs)
}

// ServeMCP makes the controller publish to server; call it before Start.
func (c *Controller) ServeMCP(server *mcp.Server, observer *mcpObserver) {
	c.mcp, c.mcpObserver = server, observer
	c.publishCh = make(chan struct{}, 1)
}

// NewMCPObserver returns the observer to give the MCP server and ServeMCP.
func (c *Controller) NewMCPObserver() *mcpObserver {
	return &mcpObserver{metrics: c.metrics, scrubber: &c.scrubber, log: c.log}
}

func (c *Controller) signalPublish() {
	if c.publishCh == nil {
		return
	}
	select {
	case c.publishCh <- struct{}{}:
	default:
	}
}
