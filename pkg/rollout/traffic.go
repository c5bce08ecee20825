package rollout

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The traffic gate of a canary phase reads the proxies' own Envoy
// statistics, the counters Prometheus already scrapes from every pod:
// istio-agent serves Envoy's statistics merged with its own on the pod's
// port 15020 (/stats/prometheus). Where a proxy's statistics are is a
// StatsSource's business: PodStats reads a pod's address from the pods the
// controller watches; StaticStats names an address per proxy (proxies
// outside Kubernetes, tests).

// Counters are one proxy's traffic counters, as its statistics say now
// (since Envoy started).
type Counters struct {
	// Requests is the requests its HTTP connection managers answered
	// (downstream_rq_completed), Server5xx those answered 5xx.
	Requests, Server5xx float64
	// Routed are the requests the router filter handled (rq_total);
	// LocalReplies those answered before the router (Requests less
	// Routed); Local says they could be counted (the router's counter is
	// there).
	Routed       float64
	LocalReplies float64
	Local        bool
	// ConnectFailures are the upstream connections that failed to open,
	// over every cluster but the bootstrap's own (istiod, SDS, the
	// agent's).
	ConnectFailures float64
}

// ignoredManagers are HTTP connection managers that serve no mesh traffic:
// Envoy's admin, istio-agent's statistics and health listeners.
var ignoredManagers = []string{"admin", "stats", "agent"}

// ignoredClusters are the bootstrap's own clusters.
var ignoredClusters = []string{"xds-grpc", "sds-grpc", "prometheus_stats", "agent"}

// ParseStats reads Counters from Envoy's statistics in Prometheus' text
// format, as Envoy's admin (/stats/prometheus) and istio-agent's merged
// endpoint serve them. It reads Envoy's own counters (envoy_http_…,
// envoy_cluster_…), which istio-proxy exports when its stats matcher
// includes them (docs/rollout.md says how); without them it falls back
// to Istio's standard istio_requests_total, which counts 5xx responses
// and connection failures (response flags UF, URX) but not local replies.
func ParseStats(body []byte) (Counters, error) {
	var c Counters
	var istio Counters
	rqTotal, envoyHTTP, istioSeen := 0.0, false, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(raw) == 0 || raw[0] == '#' {
			continue
		}
		end := bytes.IndexAny(raw, "{ ")
		if end < 0 || !interesting(raw[:end]) {
			continue
		}
		name, labels, value, ok := promLine(string(raw))
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "envoy_http_"):
			if slices.Contains(ignoredManagers, labels.get("envoy_http_conn_manager_prefix")) {
				continue
			}
			switch {
			case strings.HasSuffix(name, "downstream_rq_completed"):
				c.Requests += value
				envoyHTTP = true
			case strings.HasSuffix(name, "downstream_rq_xx"):
				if labels.get("envoy_response_code_class") == "5" {
					c.Server5xx += value
				}
			case strings.HasSuffix(name, "_rq_total") && !strings.HasSuffix(name, "downstream_rq_total"):
				rqTotal += value
				c.Local = true
			}
		case strings.HasPrefix(name, "envoy_cluster_") && strings.HasSuffix(name, "upstream_cx_connect_fail"):
			if !slices.Contains(ignoredClusters, labels.get("envoy_cluster_name")) {
				c.ConnectFailures += value
			}
		case name == "istio_requests_total":
			istioSeen = true
			istio.Requests += value
			if strings.HasPrefix(labels.get("response_code"), "5") {
				istio.Server5xx += value
			}
			if f := labels.get("response_flags"); strings.Contains(f, "UF") || strings.Contains(f, "URX") {
				istio.ConnectFailures += value
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Counters{}, fmt.Errorf("read statistics: %w", err)
	}
	switch {
	case envoyHTTP:
		if c.Local {
			c.Routed = rqTotal
			c.LocalReplies = max(0, c.Requests-rqTotal)
		}
		return c, nil
	case istioSeen:
		return istio, nil
	}
	return Counters{}, errors.New("no request counters in the statistics: neither Envoy's http downstream_rq_completed nor istio_requests_total (docs/rollout.md: wiring the traffic gate)")
}

// interesting reports whether ParseStats reads the metric name.
func interesting(name []byte) bool {
	switch {
	case bytes.HasPrefix(name, []byte("envoy_http_")):
		return bytes.HasSuffix(name, []byte("downstream_rq_completed")) || bytes.HasSuffix(name, []byte("downstream_rq_xx")) ||
			bytes.HasSuffix(name, []byte("_rq_total")) && !bytes.HasSuffix(name, []byte("downstream_rq_total"))
	case bytes.HasPrefix(name, []byte("envoy_cluster_")):
		return bytes.HasSuffix(name, []byte("upstream_cx_connect_fail"))
	}
	return string(name) == "istio_requests_total"
}

// promLine splits one sample line, name{labels} value [timestamp], into
// its name, its labels as written (between the braces) and its value.
func promLine(line string) (name string, labels promLabels, value float64, ok bool) {
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], promLabels(line[i+1:j]), line[j+1:]
	} else {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return "", "", 0, false
		}
		name, rest = line[:i], line[i:]
	}
	rest = strings.TrimSpace(rest)
	if k := strings.IndexByte(rest, ' '); k >= 0 {
		rest = rest[:k]
	}
	v, err := strconv.ParseFloat(rest, 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// promLabels are a sample's labels as written: key="value",…
type promLabels string

// get is the value of label key ("" when absent); values are read as
// written, escapes and all (none of the values read here has any).
func (l promLabels) get(key string) string {
	s := string(l)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return ""
		}
		k := strings.TrimSpace(strings.TrimPrefix(s[:eq], ","))
		i := eq + 2
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		if k == key {
			return s[eq+2 : min(i, len(s))]
		}
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
	return ""
}

// StatsSource says where a proxy's statistics are.
type StatsSource interface {
	// StatsURL is the URL of the proxy's statistics in Prometheus' text
	// format; ok is false when the source does not know the proxy.
	StatsURL(name string) (url string, ok bool)
}

// DefaultStatsPort and DefaultStatsPath are istio-agent's merged
// statistics on every pod with a proxy.
const (
	DefaultStatsPort = 15020
	DefaultStatsPath = "/stats/prometheus"
)

// PodStats finds a proxy's statistics on its pod: http://POD_IP:Port/Path,
// the pod's address read from the pods the controller watches (Pods).
// Across members, a proxy named MEMBER/POD.NAMESPACE (Status.Stable) is
// found when MEMBER is its pod's Cluster, else Home (the tracker's Home);
// a proxy of another member is not (its pods are not watched).
type PodStats struct {
	Pods ExpectedSource
	Port int
	Path string
	Home string
}

// StatsURL implements StatsSource.
func (s PodStats) StatsURL(name string) (string, bool) {
	if s.Pods == nil {
		return "", false
	}
	list, ok := s.Pods.Expected()
	if !ok {
		return "", false
	}
	for _, e := range list {
		c := cmp.Or(e.Cluster, s.Home)
		if (e.Name == name || c != "" && qualified(c, e.Name) == name) && e.IP != "" {
			return "http://" + net.JoinHostPort(e.IP, strconv.Itoa(s.Port)) + s.Path, true
		}
	}
	return "", false
}

// StaticStats names each proxy's statistics URL (POD.NAMESPACE → URL).
type StaticStats map[string]string

// StatsURL implements StatsSource.
func (s StaticStats) StatsURL(name string) (string, bool) {
	u, ok := s[name]
	if !ok {
		// A member's proxy (member/POD.NAMESPACE) named by its pod alone.
		if _, pod, found := strings.Cut(name, "/"); found {
			u, ok = s[pod]
		}
	}
	return u, ok
}

// StatsSources asks each source in turn.
type StatsSources []StatsSource

// StatsURL implements StatsSource.
func (s StatsSources) StatsURL(name string) (string, bool) {
	for _, src := range s {
		if src == nil {
			continue
		}
		if u, ok := src.StatsURL(name); ok {
			return u, true
		}
	}
	return "", false
}

// TrafficWatch is what the traffic gate reads for one phase: Key names the
// phase; Canaries are the canaries that received the change (each is
// read from its first read on: its baseline), Stable a sample of the
// other proxies the phase reaches, read from their first read on.
type TrafficWatch struct {
	Key      string
	Canaries []string
	Stable   []string
}

// TrafficGroup is one group's figures: the sum over its proxies of what
// each answered since its baseline.
type TrafficGroup struct {
	Proxies, Read                                      int
	Requests, Server5xx, LocalReplies, ConnectFailures float64
}

// TrafficResult is the gate's figures for one phase.
type TrafficResult struct {
	Key            string
	Canary, Stable TrafficGroup
	// Since is when the first canary's baseline was read.
	Since time.Time
	// Errors are the statistics that could not be read, one line each
	// (at most MaxListed).
	Errors []string
}

// MaxStableSample bounds the stable proxies the traffic gate reads: a
// sample is enough for a share, and a fleet of 10,000 is not read every
// few seconds.
const MaxStableSample = 50

// StableSample is a deterministic sample of n names (by a hash of each
// name, so the sample is spread over the fleet and stays the same from
// poll to poll).
func StableSample(names []string, n int) []string {
	if len(names) <= n {
		return slices.Clone(names)
	}
	type h struct {
		name string
		sum  uint64
	}
	hs := make([]h, len(names))
	for i, name := range names {
		f := fnv.New64a()
		f.Write([]byte(name))
		hs[i] = h{name, f.Sum64()}
	}
	slices.SortFunc(hs, func(a, b h) int {
		switch {
		case a.sum < b.sum:
			return -1
		case a.sum > b.sum:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	out := make([]string, n)
	for i := range n {
		out[i] = hs[i].name
	}
	slices.Sort(out)
	return out
}

// TrafficGate reads the statistics of a phase's proxies every Interval
// while a phase is watched (Watch), and keeps the figures (Result).
// OnChange, when set, is called after each read; it must not block.
type TrafficGate struct {
	Source   StatsSource
	HTTP     *http.Client
	Interval time.Duration
	OnChange func()

	mu        sync.Mutex
	watch     *TrafficWatch
	baselines map[string]Counters // by proxy, for the watched phase
	current   map[string]Counters
	// carried is, per proxy, what it served in the phase before its
	// Envoy restarted (its counters went back to zero).
	carried map[string]TrafficGroup
	errs    map[string]string
	since   time.Time
	kick    chan struct{}
	now     func() time.Time
}

// DefaultTrafficInterval is how often the gate reads statistics during a
// phase.
const DefaultTrafficInterval = 2 * time.Second

// NewTrafficGate reads statistics from src.
func NewTrafficGate(src StatsSource) *TrafficGate {
	return &TrafficGate{Source: src, HTTP: &http.Client{Timeout: 2 * time.Second}, Interval: DefaultTrafficInterval,
		kick: make(chan struct{}, 1), now: time.Now}
}

// Watch makes w the phase read; a watch of another phase (or none, nil)
// drops the figures of the one before. It never blocks.
func (g *TrafficGate) Watch(w *TrafficWatch) {
	g.mu.Lock()
	changed := false
	switch {
	case w == nil:
		changed = g.watch != nil
		g.watch = nil
	case g.watch == nil || g.watch.Key != w.Key:
		g.watch = w
		g.baselines, g.current, g.errs, g.since = map[string]Counters{}, map[string]Counters{}, map[string]string{}, time.Time{}
		g.carried = map[string]TrafficGroup{}
		changed = true
	default:
		changed = !slices.Equal(g.watch.Canaries, w.Canaries) || !slices.Equal(g.watch.Stable, w.Stable)
		g.watch = w
	}
	g.mu.Unlock()
	if changed {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// Result is the figures for the phase key, false before any were read.
func (g *TrafficGate) Result(key string) (TrafficResult, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.watch
	if w == nil || w.Key != key {
		return TrafficResult{}, false
	}
	res := TrafficResult{Key: key, Since: g.since}
	add := func(grp *TrafficGroup, names []string) {
		grp.Proxies = len(names)
		for _, n := range names {
			cur, ok := g.current[n]
			if !ok {
				continue
			}
			grp.Read++
			d := delta(g.baselines[n], cur)
			c := g.carried[n]
			grp.Requests += d.Requests + c.Requests
			grp.Server5xx += d.Server5xx + c.Server5xx
			grp.LocalReplies += d.LocalReplies + c.LocalReplies
			grp.ConnectFailures += d.ConnectFailures + c.ConnectFailures
		}
	}
	add(&res.Canary, w.Canaries)
	add(&res.Stable, w.Stable)
	for _, n := range append(slices.Clone(w.Canaries), w.Stable...) {
		if e, ok := g.errs[n]; ok && len(res.Errors) < MaxListed {
			res.Errors = append(res.Errors, n+": "+e)
		}
	}
	return res, res.Canary.Read > 0 || len(res.Errors) > 0
}

// Run reads while a phase is watched, until ctx ends.
func (g *TrafficGate) Run(ctx context.Context) {
	interval := g.Interval
	if interval <= 0 {
		interval = DefaultTrafficInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		case <-tick.C:
		}
		if g.Read(ctx) && g.OnChange != nil {
			g.OnChange()
		}
	}
}

// Read reads every watched proxy's statistics once; false when nothing is
// watched.
func (g *TrafficGate) Read(ctx context.Context) bool {
	g.mu.Lock()
	w := g.watch
	g.mu.Unlock()
	if w == nil {
		return false
	}
	names := append(slices.Clone(w.Canaries), w.Stable...)
	type got struct {
		c   Counters
		err error
	}
	results := make([]got, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i].c, results[i].err = g.readOne(ctx, name)
		}()
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watch == nil || g.watch.Key != w.Key {
		return false
	}
	now := g.now()
	for i, name := range names {
		r := results[i]
		if r.err != nil {
			g.errs[name] = r.err.Error()
			continue
		}
		delete(g.errs, name)
		base, ok := g.baselines[name]
		switch {
		case !ok:
			g.baselines[name] = r.c
			if g.since.IsZero() && slices.Contains(w.Canaries, name) {
				g.since = now
			}
		case r.c.Requests < base.Requests || r.c.Server5xx < base.Server5xx || r.c.ConnectFailures < base.ConnectFailures:
			// Envoy restarted: its counters count from zero again, all of
			// it within the phase; what it served before is kept.
			if prev, ok := g.current[name]; ok {
				d, c := delta(base, prev), g.carried[name]
				g.carried[name] = TrafficGroup{Requests: c.Requests + d.Requests, Server5xx: c.Server5xx + d.Server5xx,
					LocalReplies: c.LocalReplies + d.LocalReplies, ConnectFailures: c.ConnectFailures + d.ConnectFailures}
			}
			g.baselines[name] = Counters{Local: r.c.Local}
		}
		g.current[name] = r.c
	}
	return true
}

func (g *TrafficGate) readOne(ctx context.Context, name string) (Counters, error) {
	if g.Source == nil {
		return Counters{}, errors.New("no statistics source (--rollout-stats-port, --rollout-stats-url)")
	}
	u, ok := g.Source.StatsURL(name)
	if !ok {
		return Counters{}, errors.New("no address for its statistics: its pod is not known (--rollout-watch-pods) and --rollout-stats-url does not name it")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Counters{}, err
	}
	hc := g.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Counters{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
	if err != nil {
		return Counters{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Counters{}, fmt.Errorf("%s answered %s", u, resp.Status)
	}
	return ParseStats(body)
}

// delta is what a proxy served from base to cur.
func delta(base, cur Counters) TrafficGroup {
	d := TrafficGroup{Requests: cur.Requests - base.Requests, Server5xx: cur.Server5xx - base.Server5xx,
		ConnectFailures: cur.ConnectFailures - base.ConnectFailures}
	if cur.Local {
		// Counted on the deltas: a request in flight is routed before it
		// is completed, never the other way round.
		d.LocalReplies = max(0, d.Requests-(cur.Routed-base.Routed))
	}
	return d
}
