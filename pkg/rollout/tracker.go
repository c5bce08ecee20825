package rollout

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Defaults of the tracker.
const (
	// DefaultTimeout is how long a proxy may take to ACK a new set before
	// it counts as Stale.
	DefaultTimeout = 60 * time.Second
	// FastPoll is the polling period while some proxy is Pending;
	// SlowPoll the period after, which still catches late NACKs and new
	// proxies.
	FastPoll = time.Second
	SlowPoll = 15 * time.Second
	// DebounceAfter is istiod's quiet period (PILOT_DEBOUNCE_AFTER, 100ms
	// by default): istiod starts the push a change causes no sooner than
	// this after it saw the change, unless changes keep coming for its
	// debounce maximum (then the push carries the change too).
	DebounceAfter = 100 * time.Millisecond
	// WatchEvery is the period of the reads of istiod's store while a new
	// set is on its way there, and WatchFor how long they go on at most.
	WatchEvery = 10 * time.Millisecond
	WatchFor   = 10 * time.Second
	// WatchSlice bounds the watch of one poll, so that the status is
	// refreshed while the store lacks the set.
	WatchSlice = 2 * time.Second
	// BaselineTimeout bounds the reads taken just before a delivery: an
	// istiod that answers slower has no baseline, and delivery goes on.
	BaselineTimeout = time.Second
)

// Generation is one generated set the controller published.
type Generation struct {
	// Version is the set's hash.
	Version string
	// Since is when it was written or served (shown, never compared).
	Since time.Time
	// Scope is which proxies it reaches.
	Scope Scope
	// Contents are the set's EnvoyFilters, namespace/name → content hash
	// (ContentsOf): what an istiod holds once it has loaded the set.
	Contents map[string]string
	// Label, when set, is the canary label: every proxy is sorted by it
	// (Proxy.Track), with its labels read from its pod (Expected), else
	// from istiod's /debug/adsz.
	Label string
	// Markers, with Label, has the tracker read istiod's configuration
	// for every Synced canary (/debug/config_dump), for the canary copies
	// it holds (canary.MarkerKey): Proxy.Markers.
	Markers bool
	// Clusters, when set, is what each member cluster holds: an istiod
	// of member M is judged against Clusters[M] (a member absent from it
	// holds nothing of the set, and its proxies are not reached), and
	// Contents and Scope stand for the whole set. When nil, every istiod
	// is judged against Contents and Scope.
	Clusters map[string]ClusterSet
}

// ClusterSet is the part of a set one member cluster holds
// (target.clusters limits an item to some members), or the set a member
// still holds while a rollout across clusters has not reached it.
type ClusterSet struct {
	// Contents are its EnvoyFilters, namespace/name → content hash
	// (ContentsOf), and Scope which of the member's proxies they reach.
	Contents map[string]string
	Scope    Scope
	// Since is when it was delivered to the member; zero for the
	// Generation's.
	Since time.Time
}

// sameClusters says a and b give every member the same contents.
func sameClusters(a, b map[string]ClusterSet) bool {
	return maps.EqualFunc(a, b, func(x, y ClusterSet) bool { return maps.Equal(x.Contents, y.Contents) }) && (a == nil) == (b == nil)
}

// of is the set the istiods of member cluster hold once they loaded g:
// its contents, scope and time.
func (g Generation) of(cluster string) (map[string]string, Scope, time.Time) {
	if g.Clusters == nil || cluster == "" {
		return g.Contents, g.Scope, g.Since
	}
	cs, ok := g.Clusters[cluster]
	if !ok {
		return map[string]string{}, Scope{}, g.Since
	}
	if cs.Contents == nil {
		cs.Contents = map[string]string{}
	}
	return cs.Contents, cs.Scope, cmp.Or(cs.Since, g.Since)
}

// contentsOf is the contents member cluster holds once it loaded g.
func (g Generation) contentsOf(cluster string) map[string]string {
	c, _, _ := g.of(cluster)
	return c
}

// scopeOf is which of member cluster's proxies g reaches.
func (g Generation) scopeOf(cluster string) Scope {
	_, s, _ := g.of(cluster)
	return s
}

// ContentsOf is the Contents of the set objs.
func ContentsOf(objs []*envoyfilter.Object) map[string]string {
	out := make(map[string]string, len(objs))
	for _, o := range objs {
		out[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Hash()
	}
	return out
}

// Scope says which proxies a set reaches, the way istiod scopes an
// EnvoyFilter: one in the root namespace reaches every proxy, one in
// another namespace only that namespace's proxies; a GATEWAY patch
// reaches gateways, a SIDECAR_* patch sidecars, ANY both. Workload
// selectors are not applied: istiod's sync status carries no labels, and
// istiod pushes a changed EnvoyFilter to every proxy in its scope anyway.
type Scope struct {
	reach []reach
}

type reach struct {
	namespace        string // "" for every namespace
	gateway, sidecar bool
}

// ScopeOf is the scope of objs, with root as Istio's root namespace.
func ScopeOf(objs []*envoyfilter.Object, root string) Scope {
	var s Scope
	for _, o := range objs {
		r := reach{namespace: o.Metadata.Namespace}
		if r.namespace == root {
			r.namespace = ""
		}
		for _, p := range o.Spec.GetConfigPatches() {
			switch p.GetMatch().GetContext() {
			case networking.EnvoyFilter_GATEWAY:
				r.gateway = true
			case networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND:
				r.sidecar = true
			default:
				r.gateway, r.sidecar = true, true
			}
		}
		if (r.gateway || r.sidecar) && !slices.Contains(s.reach, r) {
			s.reach = append(s.reach, r)
		}
	}
	return s
}

// Namespaces are the namespaces of the proxies the set reaches, sorted;
// nil when it reaches every namespace (an EnvoyFilter in the root
// namespace) or none.
func (s Scope) Namespaces() []string {
	var out []string
	for _, r := range s.reach {
		if r.namespace == "" {
			return nil
		}
		if !slices.Contains(out, r.namespace) {
			out = append(out, r.namespace)
		}
	}
	slices.Sort(out)
	return out
}

// Reaches reports whether the set reaches proxy p.
func (s Scope) Reaches(p ProxySync) bool {
	kind := p.Kind()
	for _, r := range s.reach {
		if r.namespace != "" && r.namespace != p.Namespace() {
			continue
		}
		if (kind == "gateway" && r.gateway) || (kind == "sidecar" && r.sidecar) {
			return true
		}
	}
	return false
}

// Tracker keeps the rollout status of the current generation. Track gives
// it a new one; Run polls istiod; Status reads the result. OnChange, when
// set, is called (from Run's goroutine) whenever the status changes.
type Tracker struct {
	Source  Source
	Client  *Client
	Timeout time.Duration
	// OnChange must not block.
	OnChange func()
	// Expected, when set, lists the proxies that should be connected: one
	// the set reaches that no istiod reports is listed Unconnected, after
	// Grace (ConnectGrace when 0).
	Expected ExpectedSource
	Grace    time.Duration
	// DebounceAfter is istiod's quiet period (DebounceAfter when 0): set
	// it when istiod runs with another PILOT_DEBOUNCE_AFTER.
	DebounceAfter time.Duration
	// Home is the member cluster whose pods Expected lists (an Expected
	// with no Cluster of its own): its pods are matched with that
	// member's proxies only. "" matches them with a proxy of that name in
	// any member (one cluster).
	Home string
	// now is the clock (tests); mono the clock of the intervals measured
	// between reads of istiod (tests).
	now, mono func() time.Time
	// slice is WatchSlice (tests).
	slice time.Duration

	mu     sync.Mutex
	gen    *Generation
	status *Status
	kick   chan struct{}
	// trackedAt is when gen was given, on this process's clock: only
	// elapsed time on one clock is ever measured.
	trackedAt time.Time
	// trackedMono is when gen was given, on mono.
	trackedMono time.Time
	// marks are, per istiod (epKey: its member and address), what its
	// push counters say of gen.
	marks map[string]mark
	// base is, per istiod (epKey), what was read just before the last set
	// its member got was delivered, and what the watch started then found
	// since; delivering is, per member ("" for a delivery to every
	// member), the contents last announced (Delivering).
	base       map[string]based
	delivering map[string]map[string]string
	// seen are the proxies in scope seen connected, by member and name
	// (proxyKey), with when they were last seen (on this process's
	// clock), across generations.
	seen map[string]seenProxy
	// missing are the expected proxies no istiod reported, by member and
	// name, with when this process first found them so (its clock).
	missing map[string]time.Time
	// markers are, for the generation tracked, the canary markers read
	// from istiod's configuration for a Synced canary, by member and
	// connection ID: read once per connection and generation.
	markers map[string]map[string]string
}

// ConnectGrace is how long an expected proxy may stay unconnected, on the
// controller's clock, before it is listed: a pod that just started is
// still connecting.
const ConnectGrace = 30 * time.Second

// seenProxy is a proxy the tracker saw connected, through an istiod of
// member cluster.
type seenProxy struct {
	at      time.Time
	sync    ProxySync
	cluster string
}

// SilentMemory is how long a proxy that disconnected is reported silent;
// after that it is taken as gone for good (scaled down, replaced).
const SilentMemory = time.Hour

// mark is what one istiod's push counters say of a set. istiod numbers
// its pushes (the N of "TIME/N" in every nonce), allocates N before it
// builds the push from its configuration store, and starts a push no
// sooner than its quiet period (DebounceAfter) after the last change it
// saw. So:
//
//   - pushes up to lo were sent before a read of the store that lacked the
//     set: they don't carry it;
//   - pushes after hi were not sent yet when the store was seen holding the
//     set: they carry it;
//   - pushes between (sent before hi was read): when hi was read less
//     than the quiet period after a read of the store that still lacked
//     the set (proven), the set's own push had not started then, so none
//     of them is the set's (an unrelated push that started in the same
//     instant is one of them) and none is counted. Without the proof
//     (istiod answered slower than its quiet period: a loaded istiod) the
//     set's own push may be one of them, and no later push may ever come:
//     they are judged by their send time against the set's time, as
//     pushes are without lo (below), not left uncounted for ever. hi
//     is read half the quiet period after the last read without the set
//     (settle), so that a push istiod started just before it loaded the
//     set has been sent by then.
//
// Without lo (the store already held the set the first time it was
// asked: after a controller restart, or over MCP from another replica), a
// push up to hi is judged by its send time against the set's time.
type mark struct {
	lo, hi           uint64
	loKnown, hiKnown bool
	// proven says hi was read less than DebounceAfter after lackAt.
	proven bool
	// lackAt is when the last read of the store that lacked the set
	// started (the tracker's monotonic clock).
	lackAt time.Time
	// watching says a watch started before the delivery is still reading
	// the store (Delivering).
	watching bool
}

// based is what Delivering read of one istiod just before a set was
// delivered to its member: the mark, for the contents.
type based struct {
	contents map[string]string
	mark     mark
}

// NewTracker asks src's istiod instances with client.
func NewTracker(src Source, client *Client, timeout time.Duration) *Tracker {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Tracker{Source: src, Client: client, Timeout: timeout, now: time.Now, mono: time.Now, kick: make(chan struct{}, 1)}
}

// Track starts tracking g, unless it is the generation already tracked:
// the same Version, and each member the same part of it (Clusters: a
// rollout across clusters that moves a member on to the set is a new
// generation). It never blocks.
func (t *Tracker) Track(g Generation) {
	t.mu.Lock()
	if t.gen != nil && t.gen.Version == g.Version && sameClusters(t.gen.Clusters, g.Clusters) {
		t.mu.Unlock()
		return
	}
	prev, prevMarks := t.gen, t.marks
	t.gen = &g
	t.status = nil
	t.trackedAt, t.trackedMono = t.now(), t.mono()
	t.marks = map[string]mark{}
	for key, b := range t.base {
		if maps.Equal(b.contents, g.contentsOf(clusterOfKey(key))) {
			// Read just before this set was delivered to its member.
			t.marks[key] = b.mark
		}
	}
	if prev != nil && prev.Clusters != nil && g.Clusters != nil {
		// A member whose part did not change (a rollout across clusters
		// moved another member on) keeps what its istiods' counters said
		// of it: its istiods push nothing new for another member's change.
		for key, m := range prevMarks {
			if c := clusterOfKey(key); c != "" && maps.Equal(prev.contentsOf(c), g.contentsOf(c)) {
				t.marks[key] = m
			}
		}
	}
	t.markers = map[string]map[string]string{}
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Version is the version tracked, "" before Track.
func (t *Tracker) Version() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen == nil {
		return ""
	}
	return t.gen.Version
}

// Status returns the last status, or nil before the first answer for the
// current generation. The caller must not modify it.
func (t *Tracker) Status() *Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// Run polls until ctx ends: every FastPoll while a proxy is Pending, no
// proxy is reached yet, or istiod did not answer, every SlowPoll
// otherwise, and at once after Track.
func (t *Tracker) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-t.kick:
		case <-timer.C:
		}
		next := t.Poll(ctx)
		timer.Reset(next)
	}
}

// Poll asks istiod once, updates the status and says when to ask again.
// It does nothing before the first Track.
func (t *Tracker) Poll(ctx context.Context) time.Duration {
	t.mu.Lock()
	gen, marks := t.gen, maps.Clone(t.marks)
	t.mu.Unlock()
	if gen == nil {
		return SlowPoll
	}
	answers, multi := t.ask(ctx, *gen, marks)
	t.mu.Lock()
	if t.gen == gen {
		for i, a := range answers {
			// A watch (Delivering) may have found more meanwhile.
			key := epKey(a.cluster, a.address)
			if cur, ok := t.marks[key]; !ok || cur == marks[key] {
				t.marks[key] = a.mark
			} else {
				answers[i].mark = cur
			}
		}
	}
	t.mu.Unlock()
	st := t.evaluate(*gen, answers, multi)
	t.mu.Lock()
	if t.gen != gen {
		// A newer generation arrived meanwhile; its poll is due.
		t.mu.Unlock()
		return 0
	}
	changed := !reflect.DeepEqual(st, t.status)
	t.status = st
	t.mu.Unlock()
	if changed && t.OnChange != nil {
		t.OnChange()
	}
	for _, a := range answers {
		// The store still lacks the set: watch on at once, within WatchFor.
		if a.err == nil && !a.mark.hiKnown && a.mark.loKnown && !a.mark.watching && t.mono().Sub(t.trackedMonoOf()) < WatchFor {
			return WatchEvery
		}
	}
	// No proxy reached yet is a fleet still connecting as often as an
	// empty one: a gateway that connects just after the set is counted
	// within FastPoll, not SlowPoll.
	if st.Pending > 0 || len(st.Unreachable()) > 0 || len(st.Istiod) == 0 || st.Selected == 0 {
		return FastPoll
	}
	return SlowPoll
}

// Fleet is which proxies a set of scope would make canaries, and which
// carry no canary label, asked of every istiod now.
type Fleet struct {
	Canaries, Unlabelled []string
}

// Fleet asks every istiod which connected proxies scope reaches carry the
// canary label label as "true", and which carry it as neither "true" nor
// "false". The error names every istiod that did not answer. Across
// members, each proxy is named MEMBER/POD.NAMESPACE (FleetProxy.Key).
func (t *Tracker) Fleet(ctx context.Context, label string, scope Scope) (Fleet, error) {
	all, err := t.Proxies(ctx)
	var f Fleet
	for _, p := range all {
		if p.Istiod == "" || !scope.Reaches(p.sync()) {
			continue
		}
		switch p.Labels[label] {
		case "true":
			f.Canaries = append(f.Canaries, p.Key())
		case "false":
		default:
			f.Unlabelled = append(f.Unlabelled, p.Key())
		}
	}
	slices.Sort(f.Canaries)
	slices.Sort(f.Unlabelled)
	return f, err
}

// FleetProxy is one proxy of the mesh: connected to an istiod asked, or
// only known by its pod (Expected) when none reports it.
type FleetProxy struct {
	// Name is POD.NAMESPACE.
	Name string
	// Kind is "gateway" or "sidecar"; IstioVersion what it reports ("" for
	// a pod no istiod reports).
	Kind, IstioVersion string
	// Labels are its pod's current labels when the pod is known (istiod
	// selects by them), else those it connected with (/debug/adsz).
	Labels map[string]string
	// Istiod is the istiod it is connected to, "" for a pod no istiod
	// asked reports (another revision's, or not connected yet).
	Istiod string
	// Cluster is the member cluster of that istiod (of the pod, for one
	// no istiod reports), "" when istiod is asked in one cluster only.
	Cluster string
}

// Key is MEMBER/POD.NAMESPACE across members, else POD.NAMESPACE.
func (p FleetProxy) Key() string { return qualified(p.Cluster, p.Name) }

// qualified is name with its member: MEMBER/POD.NAMESPACE, or name alone
// when it has none.
func qualified(cluster, name string) string {
	if cluster == "" {
		return name
	}
	return cluster + "/" + name
}

func (p FleetProxy) sync() ProxySync { return syncOf(p.Kind, p.Name) }

// Proxies asks every istiod at once for its connected proxies with their
// labels, and adds the running pods with a proxy no istiod reports. The
// error names every istiod that did not answer (the list then lacks its
// proxies), and every member whose istiods could not be listed.
func (t *Tracker) Proxies(ctx context.Context) ([]FleetProxy, error) {
	eps, multi := t.targets()
	if len(eps) == 1 && eps[0].err != nil && eps[0].cluster == "" {
		return nil, eps[0].err
	}
	type reply struct {
		synced    []ProxySync
		connected []Connected
		err       error
	}
	replies := make([]reply, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		if ep.err != nil {
			replies[i].err = ep.err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &replies[i]
			// The sync status says what each proxy is; adsz its labels.
			if r.synced, r.err = t.Client.Syncz(ctx, ep.url); r.err == nil {
				r.connected, r.err = t.Client.Connected(ctx, ep.url)
			}
		}()
	}
	wg.Wait()
	var out []FleetProxy
	var failed []string
	seen, seenName := map[string]bool{}, map[string]bool{}
	// A member whose istiods did not all answer can't tell a pod that is
	// not connected from one connected to the silent istiod.
	failedIn := map[string]bool{}
	list := t.expected()
	pods := map[string]map[string]Expected{}
	shown := func(cluster string) string {
		if multi {
			return cluster
		}
		return ""
	}
	for i, r := range replies {
		if r.err != nil {
			if eps[i].url == discovery {
				failed = append(failed, r.err.Error())
			} else {
				failed = append(failed, fmt.Sprintf("istiod %s: %v", memberAddress(shown(eps[i].cluster), eps[i].url), r.err))
			}
			failedIn[eps[i].cluster] = true
			continue
		}
		labels := labelsByName(r.connected)
		if _, ok := pods[eps[i].cluster]; !ok {
			pods[eps[i].cluster] = t.podsByName(list, eps[i].cluster)
		}
		for _, p := range r.synced {
			name := p.Name()
			if seen[proxyKey(eps[i].cluster, name)] {
				continue
			}
			seen[proxyKey(eps[i].cluster, name)], seenName[name] = true, true
			l := labels[name]
			if e, ok := pods[eps[i].cluster][name]; ok && e.Labels != nil {
				l = e.Labels
			}
			out = append(out, FleetProxy{Name: name, Kind: p.Kind(), IstioVersion: p.IstioVersion, Labels: l, Istiod: eps[i].url, Cluster: shown(eps[i].cluster)})
		}
	}
	if len(failed) == 0 || multi {
		for _, e := range list {
			c := t.clusterOfPod(e)
			if failedIn[c] || c == "" && len(failed) > 0 {
				continue
			}
			if c == "" && seenName[e.Name] {
				continue
			}
			if c != "" && (seen[proxyKey(c, e.Name)] || !slices.ContainsFunc(eps, func(tg target) bool { return tg.cluster == c })) {
				continue
			}
			out = append(out, FleetProxy{Name: e.Name, Kind: e.Kind, Labels: e.Labels, Cluster: shown(c)})
		}
	}
	slices.SortFunc(out, func(a, b FleetProxy) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Cluster, b.Cluster))
	})
	if len(failed) > 0 {
		return out, errors.New(strings.Join(failed, "; "))
	}
	return out, nil
}

// memberAddress is an istiod's address with its member, for messages.
func memberAddress(cluster, address string) string {
	if cluster == "" {
		return address
	}
	return address + " (member " + cluster + ")"
}

// expected are the expected proxies (running pods with a proxy), nil
// without a source or before it synced.
func (t *Tracker) expected() []Expected {
	if t.Expected == nil {
		return nil
	}
	list, ok := t.Expected.Expected()
	if !ok {
		return nil
	}
	return list
}

// clusterOfPod is the member an expected proxy runs in: its own Cluster,
// else Home; "" matches any member.
func (t *Tracker) clusterOfPod(e Expected) string {
	return cmp.Or(e.Cluster, t.Home)
}

// podsByName are the expected proxies (running pods with a proxy) of
// list that run in member cluster, by name; nil for a nil list (no
// source, or before it synced).
func (t *Tracker) podsByName(list []Expected, cluster string) map[string]Expected {
	if list == nil {
		return nil
	}
	out := make(map[string]Expected, len(list))
	for _, e := range list {
		if c := t.clusterOfPod(e); c == "" || cluster == "" || c == cluster {
			out[e.Name] = e
		}
	}
	return out
}

// answer is one istiod's reply.
type answer struct {
	// cluster is its member ("" for a Source that names none).
	cluster string
	address string
	proxies []ProxySync
	err     error
	// mark is what the istiod's push counters say of the set.
	mark mark
	// pods are the expected proxies by name (their current labels).
	pods map[string]Expected
	// missing says, until the istiod holds the set, how its store differs.
	missing string
	// labels are the proxies' labels by name, and conns their connection
	// IDs (Generation.Label only).
	labels map[string]map[string]string
	conns  map[string]string
}

// ask asks every istiod of every member at once. A member whose istiods
// could not be listed is an answer with its error.
func (t *Tracker) ask(ctx context.Context, gen Generation, marks map[string]mark) ([]answer, bool) {
	eps, multi := t.targets()
	out := make([]answer, len(eps))
	pods := map[string]map[string]Expected{}
	list := t.expected()
	for _, ep := range eps {
		if _, ok := pods[ep.cluster]; !ok {
			pods[ep.cluster] = t.podsByName(list, ep.cluster)
		}
	}
	defer func() {
		for i := range out {
			out[i].pods = pods[out[i].cluster]
		}
	}()
	var wg sync.WaitGroup
	for i, ep := range eps {
		if ep.err != nil {
			out[i] = answer{cluster: ep.cluster, address: ep.url, err: ep.err}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = t.askOne(ctx, gen, ep.cluster, ep.url, marks[epKey(ep.cluster, ep.url)])
		}()
	}
	wg.Wait()
	return out, multi
}

// askOne asks one istiod. Until its store holds the set, each poll reads
// its sync status, then its store (/debug/configz): pushes sent before a
// store without the set don't carry it (lo); then it watches the store
// (watch) until it holds the set, and reads hi. An istiod whose counter
// went back restarted, and its marks are found anew.
func (t *Tracker) askOne(ctx context.Context, gen Generation, cluster, ep string, m mark) answer {
	a := answer{cluster: cluster, address: ep, mark: m}
	contents, scope := gen.contentsOf(cluster), gen.scopeOf(cluster)
	// A set in some namespaces is judged on their proxies alone: istiod
	// answers for those only, which keeps each poll small in a large mesh.
	a.proxies, a.err = t.Client.Syncz(ctx, ep, scope.Namespaces()...)
	if a.err != nil {
		return a
	}
	if gen.Label != "" {
		connected, err := t.Client.Connected(ctx, ep)
		if err != nil {
			a.err = err
			return a
		}
		a.labels = labelsByName(connected)
		a.conns = make(map[string]string, len(connected))
		for _, c := range connected {
			a.conns[c.Name()] = c.ConnectionID
		}
	}
	top := maxSent(a.proxies)
	if m.hiKnown && top < m.hi || m.loKnown && top < m.lo {
		a.mark = mark{}
	}
	if a.mark.hiKnown {
		return a
	}
	// A watch started by Delivering is taken over: this poll reads the
	// store itself (and the watch stops).
	a.mark.watching = false
	start := t.mono()
	held, err := t.Client.Configz(ctx, ep)
	if err != nil {
		a.err = err
		return a
	}
	if a.missing = differs(held, contents); a.missing != "" {
		a.mark.lo, a.mark.loKnown, a.mark.lackAt = max(top, a.mark.lo), true, start
		// Watch the store while the set is on its way: a poll a second
		// later would find the set's own push already sent.
		// Only in the first WatchFor after Track, at most WatchSlice a
		// poll: the status is refreshed in between.
		t.mu.Lock()
		until := t.trackedMono.Add(WatchFor)
		t.mu.Unlock()
		if now := t.mono(); now.Before(until) {
			if slice := now.Add(cmp.Or(t.slice, WatchSlice)); slice.Before(until) {
				until = slice
			}
			var proxies []ProxySync
			if a.mark, a.missing, proxies = t.watch(ctx, cluster, cluster, contents, scope.Namespaces(), ep, a.mark, until, nil); a.mark.hiKnown {
				a.proxies = proxies
			}
		}
		return a
	}
	t.settle(ctx, a.mark)
	a.proxies, a.err = t.Client.Syncz(ctx, ep, scope.Namespaces()...)
	if a.err == nil {
		a.mark.hi, a.mark.hiKnown = maxSent(a.proxies), true
		a.mark.proven = a.mark.loKnown && !a.mark.lackAt.IsZero() && t.mono().Sub(a.mark.lackAt) < t.debounce()
	}
	return a
}

// watch reads the store of the istiod at ep (of member cluster) every
// WatchEvery, until deadline, until it holds contents, then reads its
// sync status for hi. announced is the member the set was announced for
// (Delivering: "" for every member): the watch ends when the tracker
// moved on from the set (stale).
// m is what was read before (lo, lackAt); the mark returned says whether
// hi was read within istiod's quiet period after the last read of a store
// without the set (proven), and missing how the store still differs when
// it never held the set. stop, when set, ends it early.
func (t *Tracker) watch(ctx context.Context, cluster, announced string, contents map[string]string, namespaces []string, ep string, m mark, deadline time.Time, stop func() bool) (mark, string, []ProxySync) {
	m.watching = false
	missing := "not read"
	for {
		start := t.mono()
		held, err := t.Client.Configz(ctx, ep)
		if err == nil {
			if missing = differs(held, contents); missing == "" {
				break
			}
			m.lackAt = start
		}
		if !start.Before(deadline) || t.stale(cluster, announced, contents) || stop != nil && stop() {
			return m, missing, nil
		}
		select {
		case <-ctx.Done():
			return m, missing, nil
		case <-time.After(WatchEvery):
		}
	}
	t.settle(ctx, m)
	proxies, err := t.Client.Syncz(ctx, ep, namespaces...)
	if err != nil {
		return m, "its sync status was not read after it loaded the set: " + err.Error(), nil
	}
	m.hi, m.hiKnown = maxSent(proxies), true
	m.proven = m.loKnown && !m.lackAt.IsZero() && t.mono().Sub(m.lackAt) < t.debounce()
	return m, "", proxies
}

// settle waits, before hi is read, until half istiod's quiet period has
// passed since the last look at a store without the set: a push istiod
// started just before it loaded the set is sent by then (it is up to
// hi, not counted), and the set's own push, which starts no sooner than
// the quiet period after, is not.
func (t *Tracker) settle(ctx context.Context, m mark) {
	if !m.loKnown || m.lackAt.IsZero() {
		return
	}
	wait := m.lackAt.Add(t.debounce() / 2).Sub(t.mono())
	if wait <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
}

// stale says the tracker moved on from the set contents of member
// cluster: neither tracked nor about to be delivered (announced: the
// member it was announced for, "" for every member).
func (t *Tracker) stale(cluster, announced string, contents map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.delivering[announced]
	return (t.gen == nil || !maps.Equal(t.gen.contentsOf(cluster), contents)) && (!ok || !maps.Equal(d, contents))
}

func (t *Tracker) trackedMonoOf() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trackedMono
}

func (t *Tracker) debounce() time.Duration {
	if t.DebounceAfter > 0 {
		return t.DebounceAfter
	}
	return DebounceAfter
}

// Delivering is told of a set just before it is delivered (written as
// EnvoyFilters, or served over MCP), with the scope of its proxies, to
// every member alike. It reads every istiod's store at once (within
// BaselineTimeout): every push sent before a store without the set does
// not carry it. Then, while delivery goes on, it watches each store
// (watch) until it holds the set, and reads which pushes were sent by
// then; Track of the same contents takes what it found. A set already
// tracked or being delivered is not read again. It returns when the
// baseline is read, never waiting for the watch. It announces one set to
// every member, and drops what DeliveringTo read for each: where members
// get different parts of a set, call DeliveringTo for each instead.
func (t *Tracker) Delivering(ctx context.Context, set []*envoyfilter.Object, scope Scope) {
	t.delivery(ctx, "", ContentsOf(set), scope)()
}

// StartDelivering is Delivering in two steps, so that the stores are
// read while the set is written rather than before: it returns once the
// set is announced and the time of the look taken, and read reads the
// stores. Call read at the same time as the delivery (it must begin after
// StartDelivering returned, which it does) and wait for both. A store read
// after the set reached it holds the set, and then no baseline is needed;
// one read before lacks it, and every push sent before the look began
// lacks it too. ctx must last until read returns.
func (t *Tracker) StartDelivering(ctx context.Context, set []*envoyfilter.Object, scope Scope) (read func()) {
	return t.delivery(ctx, "", ContentsOf(set), scope)
}

// DeliveringTo is Delivering of the part of a set one member gets, just
// before it is delivered to that member: only that member's istiods are
// read. The controller calls it before each member's delivery, with the
// objects that member gets (and Track's Generation.Clusters holds the
// same contents for it).
func (t *Tracker) DeliveringTo(ctx context.Context, cluster string, set []*envoyfilter.Object, scope Scope) {
	t.delivery(ctx, cluster, ContentsOf(set), scope)()
}

// StartDeliveringTo is DeliveringTo in two steps, as StartDelivering is.
func (t *Tracker) StartDeliveringTo(ctx context.Context, cluster string, set []*envoyfilter.Object, scope Scope) (read func()) {
	return t.delivery(ctx, cluster, ContentsOf(set), scope)
}

// delivery announces contents for member cluster ("" for every member)
// and takes the time of the look; read reads the baseline of its istiods.
func (t *Tracker) delivery(ctx context.Context, cluster string, contents map[string]string, scope Scope) (read func()) {
	nothing := func() {}
	t.mu.Lock()
	if t.gen != nil && maps.Equal(t.gen.contentsOf(cluster), contents) {
		t.mu.Unlock()
		return nothing
	}
	if d, ok := t.delivering[cluster]; ok && maps.Equal(d, contents) {
		t.mu.Unlock()
		return nothing
	}
	if t.delivering == nil {
		t.delivering = map[string]map[string]string{}
	}
	if cluster == "" {
		// Announced to every member: only this set's baselines stand.
		t.base, t.delivering = map[string]based{}, map[string]map[string]string{}
	}
	t.delivering[cluster] = contents
	t.mu.Unlock()
	all, _ := t.targets()
	var eps []target
	for _, tg := range all {
		if tg.err == nil && (cluster == "" || tg.cluster == cluster) {
			eps = append(eps, tg)
		}
	}
	t.mu.Lock()
	for key := range t.base {
		if cluster != "" && clusterOfKey(key) == cluster {
			delete(t.base, key) // read again below, or none: the store holds the set
		}
	}
	t.mu.Unlock()
	namespaces := scope.Namespaces()
	// Every push sent so far was sent before this look (lo): its value is
	// not needed, as no push up to hi counts. Taken before the delivery
	// begins, so a store read while the set is written that still lacks
	// it lacked it then too.
	start := t.mono()
	return func() { t.readBaseline(ctx, cluster, contents, namespaces, eps, start) }
}

// readBaseline reads the stores of eps, the istiods of cluster, at once:
// each that lacks contents gets a baseline (lacking since start) and a
// watch until it holds them.
func (t *Tracker) readBaseline(ctx context.Context, cluster string, contents map[string]string, namespaces []string, eps []target, start time.Time) {
	marks := make([]*mark, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, BaselineTimeout)
			defer cancel()
			held, err := t.Client.Configz(ctx, ep.url)
			if err != nil || differs(held, contents) == "" {
				return // no baseline: the store holds the set already
			}
			marks[i] = &mark{loKnown: true, lackAt: start, watching: true}
		}()
	}
	wg.Wait()
	t.mu.Lock()
	if t.base == nil {
		t.base = map[string]based{}
	}
	for i, m := range marks {
		if m != nil {
			t.base[epKey(eps[i].cluster, eps[i].url)] = based{contents: contents, mark: *m}
		}
	}
	t.mu.Unlock()
	for i, m := range marks {
		if m == nil {
			continue
		}
		ep := eps[i]
		key := epKey(ep.cluster, ep.url)
		go func() {
			// Delivery ends the sync's context; the watch is bounded by
			// WatchFor and ends when another set comes.
			ctx, cancel := context.WithTimeout(context.Background(), WatchFor+RequestTimeout)
			defer cancel()
			// A poll of the set tracked takes the watch over.
			takenOver := func() bool {
				t.mu.Lock()
				defer t.mu.Unlock()
				cur, ok := t.marks[key]
				return t.gen != nil && maps.Equal(t.gen.contentsOf(ep.cluster), contents) && ok && !cur.watching
			}
			found, _, _ := t.watch(ctx, ep.cluster, cluster, contents, namespaces, ep.url, *m, t.mono().Add(WatchFor), takenOver)
			t.mu.Lock()
			if b, ok := t.base[key]; ok && maps.Equal(b.contents, contents) {
				t.base[key] = based{contents: contents, mark: found}
			}
			kick := false
			if t.gen != nil && maps.Equal(t.gen.contentsOf(ep.cluster), contents) {
				if cur, ok := t.marks[key]; ok && cur.watching {
					t.marks[key], kick = found, true
				}
			}
			t.mu.Unlock()
			if kick {
				select {
				case t.kick <- struct{}{}:
				default:
				}
			}
		}()
	}
}

// differs says how held (an istiod's store) differs from want, "" when it
// holds exactly want.
func differs(held, want map[string]string) string {
	for _, key := range slices.Sorted(maps.Keys(want)) {
		switch h, ok := held[key]; {
		case !ok:
			return key + " is missing"
		case h != want[key]:
			return key + " has other content"
		}
	}
	for _, key := range slices.Sorted(maps.Keys(held)) {
		if _, ok := want[key]; !ok {
			return key + " is still there"
		}
	}
	return ""
}

// evaluate sorts the proxies that gen reaches.
// With multi (istiods of more than one member asked), every istiod and
// proxy carries its member, and the counts are kept per member too.
func (t *Tracker) evaluate(gen Generation, answers []answer, multi bool) *Status {
	st := &Status{Version: gen.Version, Since: gen.Since.UTC()}
	// A proxy that moved between istiod instances of its member is
	// reported by the one that sent it listeners last; proxies of two
	// members are two proxies, whatever their names.
	byID := map[string]Proxy{}
	sentAt := map[string]time.Time{}
	var synced []seenProxy
	t.mu.Lock()
	elapsed := t.now().Sub(t.trackedAt)
	t.mu.Unlock()
	counts := map[string]*ClusterCount{}
	count := func(cluster string) *ClusterCount {
		c, ok := counts[cluster]
		if !ok {
			c = &ClusterCount{Name: cluster}
			counts[cluster] = c
		}
		return c
	}
	for _, a := range answers {
		ist := Istiod{Address: a.address, Proxies: len(a.proxies)}
		if multi {
			ist.Cluster = a.cluster
		}
		c := count(a.cluster)
		c.Istiod++
		if a.err != nil {
			ist.Error = a.err.Error()
			c.Unreachable++
		}
		st.Istiod = append(st.Istiod, ist)
		scope := gen.scopeOf(a.cluster)
		for _, p := range a.proxies {
			if !scope.Reaches(p) {
				continue
			}
			id := proxyKey(a.cluster, p.ProxyID)
			lds := p.Resources[ListenerType].SentTime
			if prev, ok := sentAt[id]; ok && !lds.After(prev) {
				continue
			}
			sentAt[id] = lds
			byID[id] = t.judge(gen, a, elapsed, p, multi)
			synced = append(synced, seenProxy{sync: p, cluster: a.cluster})
		}
	}
	t.silent(st, gen, answers, synced, multi)
	if gen.Label != "" && gen.Markers {
		t.readMarkers(gen, answers, byID)
	}
	st.index = make(map[string]Proxy, len(byID))
	if multi {
		st.byName = map[string]Proxy{}
	}
	for _, p := range byID {
		st.index[p.Key()] = p
		if multi {
			// By its name alone, the proxy of that name that stands worst.
			if q, ok := st.byName[p.Name]; !ok || worse(p, q) {
				st.byName[p.Name] = p
			}
		}
		c := count(p.member)
		c.Selected++
		switch p.State {
		case NACKed:
			c.NACKed++
		case Stale:
			c.Stale++
		case Pending:
			c.Pending++
		case Synced:
			c.Synced++
		}
		switch p.Track {
		case TrackCanary:
			st.Canaries = append(st.Canaries, p)
		case TrackUnlabelled:
			st.Unlabelled = append(st.Unlabelled, p.Key())
		}
		st.Selected++
		switch p.State {
		case NACKed:
			st.NACKed++
		case Stale:
			st.Stale++
		case Pending:
			st.Pending++
		case Synced:
			st.Synced++
		}
		st.Proxies = append(st.Proxies, p)
	}
	slices.SortFunc(st.Proxies, func(a, b Proxy) int {
		return cmp.Or(cmp.Compare(slices.Index(States, a.State), slices.Index(States, b.State)), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Cluster, b.Cluster))
	})
	slices.SortFunc(st.Canaries, func(a, b Proxy) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Cluster, b.Cluster)) })
	st.members = make(map[string]ClusterCount, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		st.members[name] = *counts[name]
		if multi {
			st.Clusters = append(st.Clusters, *counts[name])
		}
	}
	slices.Sort(st.Unlabelled)
	// Canaries stay whole (the controller judges every one and cuts the
	// list it shows to MaxListed); Unlabelled is cut.
	if n := len(st.Unlabelled); n > MaxListed {
		st.Unlabelled, st.UnlabelledUnlisted = st.Unlabelled[:MaxListed], n-MaxListed
	}
	if len(st.Proxies) > ListAll {
		st.Proxies = slices.DeleteFunc(st.Proxies, func(p Proxy) bool { return p.State != NACKed && p.State != Stale })
	}
	st.Proxies = st.Proxies[:min(len(st.Proxies), MaxListed)]
	st.Unlisted = st.Selected - len(st.Proxies)
	return st
}

// silent records the proxies now connected as seen, and lists in st those
// gen reaches that were seen before and that no istiod reports now, with
// when they were last seen.
// While some istiod of a member did not answer, that member's proxies
// can't be told from silent ones, so none of them is listed.
func (t *Tracker) silent(st *Status, gen Generation, answers []answer, now []seenProxy, multi bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.now()
	if t.seen == nil {
		t.seen = map[string]seenProxy{}
	}
	for _, p := range now {
		p.at = at
		t.seen[proxyKey(p.cluster, p.sync.Name())] = p
	}
	// A member no longer asked (its Secret removed) is no longer managed:
	// its proxies are forgotten, not silent.
	asked := map[string]bool{}
	for _, a := range answers {
		asked[a.cluster] = true
	}
	for key, p := range t.seen {
		if !asked[p.cluster] && !asked[""] {
			delete(t.seen, key)
		}
	}
	failed := map[string]bool{}
	for _, a := range answers {
		if a.err != nil {
			if !multi || a.cluster == "" {
				return
			}
			failed[a.cluster] = true
		}
	}
	shown := func(cluster string) string {
		if multi {
			return cluster
		}
		return ""
	}
	for _, key := range slices.SortedFunc(maps.Keys(t.seen), func(a, b string) int {
		return cmp.Or(cmp.Compare(nameOfKey(a), nameOfKey(b)), cmp.Compare(a, b))
	}) {
		p := t.seen[key]
		reaches := !failed[p.cluster] && gen.scopeOf(p.cluster).Reaches(p.sync)
		switch {
		case at.Sub(p.at) > SilentMemory:
			delete(t.seen, key)
		case p.at.Before(at) && reaches && len(st.Silent) < MaxListed:
			st.Silent = append(st.Silent, Silent{Name: nameOfKey(key), Cluster: shown(p.cluster), Type: p.sync.Kind(), LastSeen: p.at.UTC()})
		case p.at.Before(at) && reaches:
			st.SilentUnlisted++
		}
	}
	t.unconnected(st, gen, at, now, multi, failed, asked)
}

// unconnected lists in st the expected proxies gen reaches that no istiod
// reports and that were never seen connected (those are Silent), once
// they have been missing for ConnectGrace; none of a member whose
// istiods did not all answer (failed), or that is not asked.
func (t *Tracker) unconnected(st *Status, gen Generation, at time.Time, now []seenProxy, multi bool, failed, asked map[string]bool) {
	if t.Expected == nil {
		return
	}
	expected, ok := t.Expected.Expected()
	if !ok {
		return
	}
	connected, connectedName := map[string]bool{}, map[string]bool{}
	for _, p := range now {
		connected[proxyKey(p.cluster, p.sync.Name())], connectedName[p.sync.Name()] = true, true
	}
	seenName := map[string]bool{}
	for key := range t.seen {
		seenName[nameOfKey(key)] = true
	}
	missing := map[string]time.Time{}
	for _, e := range expected {
		c := t.clusterOfPod(e)
		key := proxyKey(c, e.Name)
		if c == "" && (connectedName[e.Name] || seenName[e.Name]) || c != "" && (connected[key] || t.seen[key].sync.ProxyID != "") {
			continue // connected now, or silent
		}
		if failed[c] || c == "" && len(failed) > 0 {
			if first, ok := t.missing[key]; ok {
				missing[key] = first // can't tell now: keep when it was first missed
			}
			continue
		}
		if c != "" && !asked[c] && !asked[""] || !gen.scopeOf(c).Reaches(e.sync()) {
			continue
		}
		first, ok := t.missing[key]
		if !ok {
			first = at
		}
		missing[key] = first
		grace := t.Grace
		if grace <= 0 {
			grace = ConnectGrace
		}
		u := Unconnected{Name: e.Name, Type: e.Kind, Since: e.Since}
		if multi {
			u.Cluster = c
		}
		switch {
		case at.Sub(first) < grace:
		case len(st.Unconnected) < MaxListed:
			st.Unconnected = append(st.Unconnected, u)
		default:
			st.UnconnectedUnlisted++
		}
	}
	t.missing = missing
	slices.SortFunc(st.Unconnected, func(a, b Unconnected) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Cluster, b.Cluster))
	})
}

// judge decides one proxy's state from what its istiod (a) says, elapsed
// since the set was tracked. The proxy is Synced when it ACKed listeners
// from a push that carries the set and everything sent since; NACKed when
// it rejected such a push. Which pushes carry the set is decided by
// istiod's push counter and its store (see mark).
func (t *Tracker) judge(gen Generation, a answer, elapsed time.Duration, p ProxySync, multi bool) Proxy {
	out := Proxy{Name: p.Name(), Type: p.Kind(), IstioVersion: p.IstioVersion, Istiod: a.address, member: a.cluster}
	if multi {
		out.Cluster = a.cluster
	}
	_, _, setSince := gen.of(a.cluster)
	if gen.Label != "" {
		out.Labels = a.labels[out.Name]
		if e, ok := a.pods[out.Name]; ok && e.Labels != nil {
			out.Labels = e.Labels
		}
		out.conn = a.conns[out.Name]
		switch out.Labels[gen.Label] {
		case "true":
			out.Track = TrackCanary
		case "false":
			out.Track = TrackStable
		default:
			out.Track = TrackUnlabelled
		}
	}
	lds, hasLDS := p.Resources[ListenerType]
	out.acked = lds.Acked
	if hasLDS && !lds.SentTime.IsZero() {
		sent := lds.SentTime.UTC()
		out.Sent = &sent
	}
	m := a.mark
	after := func(nonce string, sent time.Time) bool {
		n, ok := PushCounter(nonce)
		switch {
		case !ok || !m.hiKnown:
			return false
		case n > m.hi:
			return true
		case m.loKnown && m.proven:
			// Sent before hi was read: never the set's (see mark).
			return false
		}
		// Without lo, or unproven (istiod answered slower than its quiet
		// period, so the set's own push may be one of them): by send time.
		return !sent.IsZero() && !sent.Before(setSince)
	}
	var nacks, earlier, unacked []string
	for _, w := range watchedTypes {
		r, ok := p.Resources[w.url]
		if !ok {
			continue
		}
		if r.LastError != "" {
			if after(r.Sent, r.SentTime) {
				nacks = append(nacks, w.short+": "+r.LastError)
			} else {
				earlier = append(earlier, w.short)
			}
		}
		if r.Sent != "" && r.Acked != r.Sent {
			unacked = append(unacked, w.short)
		}
	}
	switch {
	case len(nacks) > 0:
		out.State, out.Message = NACKed, truncate(strings.Join(nacks, "; "), MaxMessage)
		return out
	case hasLDS && lds.Acked == lds.Sent && after(lds.Acked, lds.SentTime) && len(unacked) == 0:
		out.State = Synced
		return out
	}
	switch {
	case !m.hiKnown:
		out.Message = "istiod " + memberAddress(out.Cluster, a.address) + " has not loaded the set (" + a.missing + ")"
	case !hasLDS || lds.Sent == "":
		out.Message = "istiod has sent it no listeners"
	case !after(lds.Sent, lds.SentTime):
		out.Message = "no listeners sent since istiod loaded the set"
	case len(earlier) > 0:
		out.Message = "rejected an earlier push (" + strings.Join(earlier, ", ") + "); waiting for its answer to this one"
	default:
		out.Message = "not ACKed: " + strings.Join(unacked, ", ")
	}
	if elapsed < t.Timeout {
		out.State = Pending
		return out
	}
	out.State = Stale
	out.Message += "; after " + t.Timeout.String()
	return out
}

// readMarkers reads, for every Synced canary of gen whose markers are not
// known yet for this generation, istiod's configuration for it, and puts
// the canary copies it holds into its Proxy (Markers). A configuration
// that can't be read leaves the proxy without markers: its ACK does not
// count until it is read.
func (t *Tracker) readMarkers(gen Generation, answers []answer, byID map[string]Proxy) {
	t.mu.Lock()
	cache := t.markers
	t.mu.Unlock()
	if cache == nil {
		cache = map[string]map[string]string{}
	}
	type todo struct{ id, key string }
	var reads []todo
	for id, p := range byID {
		if p.Track != TrackCanary || p.State != Synced || p.conn == "" {
			continue
		}
		// Read again after every push the proxy ACKs: a relabelled proxy
		// gets another configuration from istiod, in a new push.
		key := p.markerKey()
		if m, ok := cache[key]; ok {
			p.Markers = m
			byID[id] = p
			continue
		}
		reads = append(reads, todo{id, key})
	}
	got := make([]map[string]string, len(reads))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, r := range reads {
		p := byID[r.id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
			defer cancel()
			if dump, err := t.Client.ConfigDump(ctx, p.Istiod, p.conn); err == nil {
				got[i] = Markers(dump)
			}
		}()
	}
	wg.Wait()
	for i, r := range reads {
		if got[i] == nil {
			continue // not read: its ACK does not count until it is
		}
		cache[r.key] = got[i]
		p := byID[r.id]
		p.Markers = got[i]
		byID[r.id] = p
	}
	// Keep only what this round used: the cache never outgrows the
	// canaries.
	keep := make(map[string]map[string]string, len(byID))
	for _, p := range byID {
		key := p.markerKey()
		if m, ok := cache[key]; ok {
			keep[key] = m
		}
	}
	t.mu.Lock()
	if t.gen != nil && t.gen.Version == gen.Version {
		t.markers = keep
	}
	t.mu.Unlock()
}

// MarkerKey is canary.MarkerKey: the listener metadata key prefix of the
// canary copies' markers.
const MarkerKey = "globalconfig.io/canary"

// Markers are the canary markers in a configuration dump: item → the
// marker's content, from every listener's filter_metadata whose key is
// MarkerKey + "/" + item.
func Markers(dump []byte) map[string]string {
	out := map[string]string{}
	if !bytes.Contains(dump, []byte(MarkerKey+"/")) {
		return out
	}
	var doc any
	if err := json.Unmarshal(dump, &doc); err != nil {
		return out
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if item, ok := strings.CutPrefix(k, MarkerKey+"/"); ok {
					if m, ok := c.(map[string]any); ok {
						if content, ok := m["content"].(string); ok {
							out[item] = content
						}
					}
					continue
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}
