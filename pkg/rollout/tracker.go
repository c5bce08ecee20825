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
	// marks are, per istiod address, what its push counters say of gen.
	marks map[string]mark
	// base is what was read just before the last set was delivered, and
	// what the watch started then found since.
	base *baseline
	// seen are the proxies in scope seen connected, by name, with when
	// they were last seen (on this process's clock), across generations.
	seen map[string]seenProxy
	// missing are the expected proxies no istiod reported, by name, with
	// when this process first found them so (its clock).
	missing map[string]time.Time
	// markers are, for the generation tracked, the canary markers read
	// from istiod's configuration for a Synced canary, by connection ID:
	// read once per connection and generation.
	markers map[string]map[string]string
}

// ConnectGrace is how long an expected proxy may stay unconnected, on the
// controller's clock, before it is listed: a pod that just started is
// still connecting.
const ConnectGrace = 30 * time.Second

// seenProxy is a proxy the tracker saw connected.
type seenProxy struct {
	at   time.Time
	sync ProxySync
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

// baseline is what Delivering read of every istiod just before a set was
// delivered, by istiod address, for the set contents.
type baseline struct {
	contents map[string]string
	marks    map[string]mark
}

// NewTracker asks src's istiod instances with client.
func NewTracker(src Source, client *Client, timeout time.Duration) *Tracker {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Tracker{Source: src, Client: client, Timeout: timeout, now: time.Now, mono: time.Now, kick: make(chan struct{}, 1)}
}

// Track starts tracking g, unless it is the generation already tracked.
// It never blocks.
func (t *Tracker) Track(g Generation) {
	t.mu.Lock()
	if t.gen != nil && t.gen.Version == g.Version {
		t.mu.Unlock()
		return
	}
	t.gen = &g
	t.status = nil
	t.trackedAt, t.trackedMono = t.now(), t.mono()
	t.marks = map[string]mark{}
	if t.base != nil && maps.Equal(t.base.contents, g.Contents) {
		// Read just before this set was delivered.
		t.marks = maps.Clone(t.base.marks)
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
	answers := t.ask(ctx, *gen, marks)
	t.mu.Lock()
	if t.gen == gen {
		for i, a := range answers {
			// A watch (Delivering) may have found more meanwhile.
			if cur, ok := t.marks[a.address]; !ok || cur == marks[a.address] {
				t.marks[a.address] = a.mark
			} else {
				answers[i].mark = cur
			}
		}
	}
	t.mu.Unlock()
	st := t.evaluate(*gen, answers)
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
// "false". The error names every istiod that did not answer.
func (t *Tracker) Fleet(ctx context.Context, label string, scope Scope) (Fleet, error) {
	all, err := t.Proxies(ctx)
	var f Fleet
	for _, p := range all {
		if p.Istiod == "" || !scope.Reaches(p.sync()) {
			continue
		}
		switch p.Labels[label] {
		case "true":
			f.Canaries = append(f.Canaries, p.Name)
		case "false":
		default:
			f.Unlabelled = append(f.Unlabelled, p.Name)
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
}

func (p FleetProxy) sync() ProxySync { return syncOf(p.Kind, p.Name) }

// Proxies asks every istiod at once for its connected proxies with their
// labels, and adds the running pods with a proxy no istiod reports. The
// error names every istiod that did not answer (the list then lacks its
// proxies).
func (t *Tracker) Proxies(ctx context.Context) ([]FleetProxy, error) {
	eps, err := t.Source.Endpoints()
	if err != nil {
		return nil, err
	}
	type reply struct {
		synced    []ProxySync
		connected []Connected
		err       error
	}
	replies := make([]reply, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &replies[i]
			// The sync status says what each proxy is; adsz its labels.
			if r.synced, r.err = t.Client.Syncz(ctx, ep); r.err == nil {
				r.connected, r.err = t.Client.Connected(ctx, ep)
			}
		}()
	}
	wg.Wait()
	pods := t.podsByName()
	var out []FleetProxy
	var failed []string
	seen := map[string]bool{}
	for i, r := range replies {
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("istiod %s: %v", eps[i], r.err))
			continue
		}
		labels := labelsByName(r.connected)
		for _, p := range r.synced {
			name := p.Name()
			if seen[name] {
				continue
			}
			seen[name] = true
			l := labels[name]
			if e, ok := pods[name]; ok && e.Labels != nil {
				l = e.Labels
			}
			out = append(out, FleetProxy{Name: name, Kind: p.Kind(), IstioVersion: p.IstioVersion, Labels: l, Istiod: eps[i]})
		}
	}
	if len(failed) == 0 {
		for _, name := range slices.Sorted(maps.Keys(pods)) {
			if e := pods[name]; !seen[name] {
				out = append(out, FleetProxy{Name: name, Kind: e.Kind, Labels: e.Labels})
			}
		}
	}
	slices.SortFunc(out, func(a, b FleetProxy) int { return cmp.Compare(a.Name, b.Name) })
	if len(failed) > 0 {
		return out, errors.New(strings.Join(failed, "; "))
	}
	return out, nil
}

// podsByName are the expected proxies (running pods with a proxy) by
// name, nil without a source or before it synced.
func (t *Tracker) podsByName() map[string]Expected {
	if t.Expected == nil {
		return nil
	}
	list, ok := t.Expected.Expected()
	if !ok {
		return nil
	}
	out := make(map[string]Expected, len(list))
	for _, e := range list {
		out[e.Name] = e
	}
	return out
}

// answer is one istiod's reply.
type answer struct {
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

// ask asks every istiod at once.
func (t *Tracker) ask(ctx context.Context, gen Generation, marks map[string]mark) []answer {
	eps, err := t.Source.Endpoints()
	if err != nil {
		return []answer{{address: "(discovery)", err: err}}
	}
	out := make([]answer, len(eps))
	pods := t.podsByName()
	defer func() {
		for i := range out {
			out[i].pods = pods
		}
	}()
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = t.askOne(ctx, gen, ep, marks[ep])
		}()
	}
	wg.Wait()
	return out
}

// askOne asks one istiod. Until its store holds the set, each poll reads
// its sync status, then its store (/debug/configz): pushes sent before a
// store without the set don't carry it (lo); then it watches the store
// (watch) until it holds the set, and reads hi. An istiod whose counter
// went back restarted, and its marks are found anew.
func (t *Tracker) askOne(ctx context.Context, gen Generation, ep string, m mark) answer {
	a := answer{address: ep, mark: m}
	// A set in some namespaces is judged on their proxies alone: istiod
	// answers for those only, which keeps each poll small in a large mesh.
	a.proxies, a.err = t.Client.Syncz(ctx, ep, gen.Scope.Namespaces()...)
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
	if a.missing = differs(held, gen.Contents); a.missing != "" {
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
			if a.mark, a.missing, proxies = t.watch(ctx, gen.Contents, gen.Scope.Namespaces(), ep, a.mark, until, nil); a.mark.hiKnown {
				a.proxies = proxies
			}
		}
		return a
	}
	t.settle(ctx, a.mark)
	a.proxies, a.err = t.Client.Syncz(ctx, ep, gen.Scope.Namespaces()...)
	if a.err == nil {
		a.mark.hi, a.mark.hiKnown = maxSent(a.proxies), true
		a.mark.proven = a.mark.loKnown && !a.mark.lackAt.IsZero() && t.mono().Sub(a.mark.lackAt) < t.debounce()
	}
	return a
}

// watch reads the store of the istiod at ep every WatchEvery, until
// deadline, until it holds contents, then reads its sync status for hi.
// m is what was read before (lo, lackAt); the mark returned says whether
// hi was read within istiod's quiet period after the last read of a store
// without the set (proven), and missing how the store still differs when
// it never held the set. stop, when set, ends it early.
func (t *Tracker) watch(ctx context.Context, contents map[string]string, namespaces []string, ep string, m mark, deadline time.Time, stop func() bool) (mark, string, []ProxySync) {
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
		if !start.Before(deadline) || t.stale(contents) || stop != nil && stop() {
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

// stale says the tracker moved on from the set contents: neither tracked
// nor about to be delivered.
func (t *Tracker) stale(contents map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return (t.gen == nil || !maps.Equal(t.gen.Contents, contents)) && (t.base == nil || !maps.Equal(t.base.contents, contents))
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
// EnvoyFilters, or served over MCP), with the scope of its proxies. It
// reads every istiod's store at once (within BaselineTimeout): every push
// sent before a store without the set does not carry it. Then, while delivery goes on, it watches each store
// (watch) until it holds the set, and reads which pushes were sent by
// then; Track of the same contents takes what it found. A set already
// tracked or being delivered is not read again. It returns when the
// baseline is read, never waiting for the watch.
func (t *Tracker) Delivering(ctx context.Context, set []*envoyfilter.Object, scope Scope) {
	contents := ContentsOf(set)
	t.mu.Lock()
	if t.gen != nil && maps.Equal(t.gen.Contents, contents) || t.base != nil && maps.Equal(t.base.contents, contents) {
		t.mu.Unlock()
		return
	}
	base := &baseline{contents: contents, marks: map[string]mark{}}
	t.base = base
	t.mu.Unlock()
	eps, err := t.Source.Endpoints()
	if err != nil {
		return
	}
	namespaces := scope.Namespaces()
	marks := make([]*mark, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, BaselineTimeout)
			defer cancel()
			// Every push sent so far was sent before this look (lo): its
			// value is not needed, as no push up to hi counts.
			start := t.mono()
			held, err := t.Client.Configz(ctx, ep)
			if err != nil || differs(held, contents) == "" {
				return // no baseline: the store holds the set already
			}
			marks[i] = &mark{loKnown: true, lackAt: start, watching: true}
		}()
	}
	wg.Wait()
	t.mu.Lock()
	for i, m := range marks {
		if m != nil {
			base.marks[eps[i]] = *m
		}
	}
	t.mu.Unlock()
	for i, m := range marks {
		if m == nil {
			continue
		}
		go func() {
			// Delivery ends the sync's context; the watch is bounded by
			// WatchFor and ends when another set comes.
			ctx, cancel := context.WithTimeout(context.Background(), WatchFor+RequestTimeout)
			defer cancel()
			// A poll of the set tracked takes the watch over.
			takenOver := func() bool {
				t.mu.Lock()
				defer t.mu.Unlock()
				cur, ok := t.marks[eps[i]]
				return t.gen != nil && maps.Equal(t.gen.Contents, contents) && ok && !cur.watching
			}
			found, _, _ := t.watch(ctx, contents, namespaces, eps[i], *m, t.mono().Add(WatchFor), takenOver)
			t.mu.Lock()
			base.marks[eps[i]] = found
			kick := false
			if t.gen != nil && maps.Equal(t.gen.Contents, contents) {
				if cur, ok := t.marks[eps[i]]; ok && cur.watching {
					t.marks[eps[i]], kick = found, true
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
func (t *Tracker) evaluate(gen Generation, answers []answer) *Status {
	st := &Status{Version: gen.Version, Since: gen.Since.UTC()}
	// A proxy that moved between istiod instances is reported by the one
	// that sent it listeners last.
	byID := map[string]Proxy{}
	sentAt := map[string]time.Time{}
	var synced []ProxySync
	t.mu.Lock()
	elapsed := t.now().Sub(t.trackedAt)
	t.mu.Unlock()
	for _, a := range answers {
		ist := Istiod{Address: a.address, Proxies: len(a.proxies)}
		if a.err != nil {
			ist.Error = a.err.Error()
		}
		st.Istiod = append(st.Istiod, ist)
		for _, p := range a.proxies {
			if !gen.Scope.Reaches(p) {
				continue
			}
			lds := p.Resources[ListenerType].SentTime
			if prev, ok := sentAt[p.ProxyID]; ok && !lds.After(prev) {
				continue
			}
			sentAt[p.ProxyID] = lds
			byID[p.ProxyID] = t.judge(gen, a, elapsed, p)
			synced = append(synced, p)
		}
	}
	t.silent(st, gen, answers, synced)
	if gen.Label != "" && gen.Markers {
		t.readMarkers(gen, answers, byID)
	}
	st.index = make(map[string]Proxy, len(byID))
	for _, p := range byID {
		st.index[p.Name] = p
		switch p.Track {
		case TrackCanary:
			st.Canaries = append(st.Canaries, p)
		case TrackUnlabelled:
			st.Unlabelled = append(st.Unlabelled, p.Name)
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
		return cmp.Or(cmp.Compare(slices.Index(States, a.State), slices.Index(States, b.State)), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(st.Canaries, func(a, b Proxy) int { return cmp.Compare(a.Name, b.Name) })
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
// While some istiod did not answer, its proxies can't be told from silent
// ones, so none is listed.
func (t *Tracker) silent(st *Status, gen Generation, answers []answer, now []ProxySync) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.now()
	if t.seen == nil {
		t.seen = map[string]seenProxy{}
	}
	for _, p := range now {
		t.seen[p.Name()] = seenProxy{at: at, sync: p}
	}
	for _, a := range answers {
		if a.err != nil {
			return
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.seen)) {
		p := t.seen[name]
		switch {
		case at.Sub(p.at) > SilentMemory:
			delete(t.seen, name)
		case p.at.Before(at) && gen.Scope.Reaches(p.sync) && len(st.Silent) < MaxListed:
			st.Silent = append(st.Silent, Silent{Name: name, Type: p.sync.Kind(), LastSeen: p.at.UTC()})
		case p.at.Before(at) && gen.Scope.Reaches(p.sync):
			st.SilentUnlisted++
		}
	}
	t.unconnected(st, gen, at, now)
}

// unconnected lists in st the expected proxies gen reaches that no istiod
// reports and that were never seen connected (those are Silent), once
// they have been missing for ConnectGrace.
func (t *Tracker) unconnected(st *Status, gen Generation, at time.Time, now []ProxySync) {
	if t.Expected == nil {
		return
	}
	expected, ok := t.Expected.Expected()
	if !ok {
		return
	}
	connected := map[string]bool{}
	for _, p := range now {
		connected[p.Name()] = true
	}
	missing := map[string]time.Time{}
	for _, e := range expected {
		if connected[e.Name] || !gen.Scope.Reaches(e.sync()) {
			continue
		}
		if _, silent := t.seen[e.Name]; silent {
			continue
		}
		first, ok := t.missing[e.Name]
		if !ok {
			first = at
		}
		missing[e.Name] = first
		grace := t.Grace
		if grace <= 0 {
			grace = ConnectGrace
		}
		switch {
		case at.Sub(first) < grace:
		case len(st.Unconnected) < MaxListed:
			st.Unconnected = append(st.Unconnected, Unconnected{Name: e.Name, Type: e.Kind, Since: e.Since})
		default:
			st.UnconnectedUnlisted++
		}
	}
	t.missing = missing
	slices.SortFunc(st.Unconnected, func(a, b Unconnected) int { return strings.Compare(a.Name, b.Name) })
}

// judge decides one proxy's state from what its istiod (a) says, elapsed
// since the set was tracked. The proxy is Synced when it ACKed listeners
// from a push that carries the set and everything sent since; NACKed when
// it rejected such a push. Which pushes carry the set is decided by
// istiod's push counter and its store (see mark).
func (t *Tracker) judge(gen Generation, a answer, elapsed time.Duration, p ProxySync) Proxy {
	out := Proxy{Name: p.Name(), Type: p.Kind(), IstioVersion: p.IstioVersion, Istiod: a.address}
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
		return !sent.IsZero() && !sent.Before(gen.Since)
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
		out.Message = "istiod " + a.address + " has not loaded the set (" + a.missing + ")"
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
		key := p.conn + "\x00" + p.acked
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
		key := p.conn + "\x00" + p.acked
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
