package webhook

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// DefaultEnvoyTimeout bounds the Envoy check of one review (`run
// --envoy-timeout`): the API server waits timeoutSeconds for the whole
// review (5 s in deploy/, at most 30 s, 10 s when unset) and, with
// failurePolicy Ignore, admits the edit unchecked after that. One load of
// a gateway's configuration takes about 80 ms; naming the items after a
// refusal takes one more per item.
const DefaultEnvoyTimeout = 3 * time.Second

// verdictCacheSize is how many rendered sets keep Envoy's verdict: the
// same set reviewed again (a server-side dry run, then the apply; an edit
// re-applied after a refusal) is not loaded again.
const verdictCacheSize = 16

// EnvoyCheck is the webhook's last judge (`run --envoy`): the output of an
// edit that changes the rendered set is loaded into the fleet's own Envoy
// binary in validate mode, as `globalconfig validate --envoy` does
// (pkg/envoycheck), and the edit is refused with Envoy's message and the
// items Envoy refuses on their own. A check that can't give a verdict
// (the binary crashed, was killed or ran out of time) admits the edit on
// globalconfig's own validation, with a warning: see Handler.
type EnvoyCheck struct {
	Binary *envoybin.Binary
	// Timeout bounds one review's Envoy runs, waiting for another
	// review's included.
	Timeout time.Duration

	// one Envoy at a time: each takes a core and about 64 MiB.
	sem      chan struct{}
	mu       sync.Mutex
	verdicts map[string]*envoycheck.Report // by render.SetHash
	order    []string                      // oldest first
	runs     atomic.Int64
	metrics  envoyMetrics
}

// The results the checks counter counts.
const (
	EnvoyAccepted  = "accepted"  // Envoy loaded the edit's output
	EnvoyRejected  = "rejected"  // Envoy refused it: the edit was denied
	EnvoyFailed    = "failed"    // no verdict (crash, timeout): admitted with a warning
	EnvoyUnchanged = "unchanged" // the edit changes no EnvoyFilter: not loaded
)

type envoyMetrics struct {
	checks   *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewEnvoyCheck opens the Envoy binary at path and makes sure it can
// validate a configuration here (it runs, its temporary file can be
// written): a missing or broken binary is an error at start, not at the
// first review. reg, when set, gets its metrics.
func NewEnvoyCheck(ctx context.Context, path string, timeout time.Duration, reg prometheus.Registerer) (*EnvoyCheck, error) {
	bin, err := envoybin.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	if _, err := envoyfilter.ParseVersion(bin.Version); err != nil {
		return nil, fmt.Errorf("envoy %s: version %q: %w", path, bin.Version, err)
	}
	probe, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bin.Validate(probe, []byte(`{"node":{"id":"globalconfig","cluster":"globalconfig"}}`)); err != nil {
		return nil, fmt.Errorf("envoy %s can't validate a configuration here: %w", path, err)
	}
	if timeout <= 0 {
		timeout = DefaultEnvoyTimeout
	}
	c := &EnvoyCheck{
		Binary: bin, Timeout: timeout,
		sem:      make(chan struct{}, 1),
		verdicts: map[string]*envoycheck.Report{},
		metrics: envoyMetrics{
			checks: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "globalconfig_webhook_envoy_checks_total",
				Help: "Reviews by the admission webhook's Envoy check (--envoy), by result: accepted, rejected (denied), failed (no verdict: admitted with a warning), unchanged (the edit changes no EnvoyFilter: not loaded).",
			}, []string{"result"}),
			duration: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name:    "globalconfig_webhook_envoy_check_duration_seconds",
				Help:    "Time of each Envoy check the admission webhook ran (its count is the checks run; a set checked before reuses its verdict).",
				Buckets: []float64{.05, .1, .2, .5, 1, 2, 3, 5, 10},
			}),
		},
	}
	for _, r := range []string{EnvoyAccepted, EnvoyRejected, EnvoyFailed, EnvoyUnchanged} {
		c.metrics.checks.WithLabelValues(r)
	}
	if reg != nil {
		for _, m := range []prometheus.Collector{c.metrics.checks, c.metrics.duration} {
			if err := reg.Register(m); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// Istio is the Istio release whose proxies run this Envoy ("1.32").
func (c *EnvoyCheck) Istio() string {
	v, _ := envoyfilter.ParseVersion(c.Binary.Version)
	return envoyfilter.IstioForEnvoy(v).String()
}

// Runs is how many checks have loaded a set into Envoy (a check is one
// Envoy run per group of proxies the set reaches, more to name refused
// items).
func (c *EnvoyCheck) Runs() int64 { return c.runs.Load() }

// check loads objs into Envoy, or returns the verdict on the same set
// from before. The error is a check that gave no verdict.
func (c *EnvoyCheck) check(ctx context.Context, objs []*envoyfilter.Object) (*envoycheck.Report, error) {
	key := render.SetHash(objs)
	if rep := c.cached(key); rep != nil {
		return rep, nil
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another review's Envoy check: %w", ctx.Err())
	}
	if rep := c.cached(key); rep != nil { // that review checked the same set
		return rep, nil
	}
	c.runs.Add(1)
	start := time.Now()
	rep, err := envoycheck.Check(ctx, c.Binary, objs)
	c.metrics.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	if !unnamed(rep) {
		c.remember(key, rep)
	}
	return rep, nil
}

func (c *EnvoyCheck) cached(key string) *envoycheck.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verdicts[key]
}

func (c *EnvoyCheck) remember(key string, rep *envoycheck.Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.verdicts[key]; ok {
		return
	}
	c.verdicts[key] = rep
	c.order = append(c.order, key)
	if len(c.order) > verdictCacheSize {
		delete(c.verdicts, c.order[0])
		c.order = c.order[1:]
	}
}

func unnamed(rep *envoycheck.Report) bool {
	for _, r := range rep.Results {
		if r.Unnamed {
			return true
		}
	}
	return false
}

// EnvoyRefusalPrefix starts the denial of an edit the fleet's Envoy
// refuses.
const EnvoyRefusalPrefix = "globalconfig: the fleet's Envoy refuses this edit: "

// refusal words rep's refusals for the user: Envoy's own message, quoted,
// per context, and the items it refuses on their own.
func refusal(rep *envoycheck.Report, secrets []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%senvoy %s (--envoy; a proxy of Istio %s) loaded what it renders in validate mode and said:", EnvoyRefusalPrefix, rep.Envoy, strings.TrimSuffix(rep.Istio, ".0"))
	for _, r := range rep.Results {
		if r.Rejected == "" {
			continue
		}
		fmt.Fprintf(&b, "\n%s configuration: %q", r.Proxies(), render.Scrub(r.Rejected, secrets))
		switch {
		case r.Unnamed:
			b.WriteString("\n(the check ran out of time before naming the items Envoy refuses on their own)")
		case len(r.Items) > 0:
			fmt.Fprintf(&b, "\nrefused on their own: %s", strings.Join(r.Items, ", "))
		default:
			b.WriteString("\nno item is refused on its own: only their combination")
		}
	}
	return b.String()
}

// EnvoyFailedWarning starts the warning on an edit admitted without
// Envoy's verdict.
const EnvoyFailedWarning = "globalconfig: admitted on globalconfig's own validation only: the Envoy check (--envoy) gave no verdict: "
