package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The blame of a NACK: when proxies refuse the set the controller
// delivered, and Config.Blame is set (the controller runs with --envoy),
// it names the EnvoyFilters, globalconfig's or anyone else's, that the
// fleet's Envoy refuses. The blame runs Envoy many times, so it is
// sampled and bounded: one proxy per kind (the first NACKing gateway and
// the first NACKing sidecar by name), at most one run per delivered set,
// other EnvoyFilters' specs and kind of proxy, one run at a time on a
// worker of its own (never in the sync), each within BlameTimeout. A
// result re-enqueues the sync, which puts it into the status, an Event
// and, under Direct, the roll-back decision.

// BlameFunc names the EnvoyFilters that make proxy (POD.NAMESPACE) refuse
// its config, given ours, the set the controller delivered (which an MCP
// sink's proxies get from no EnvoyFilter object in the cluster).
type BlameFunc func(ctx context.Context, proxy string, ours []*envoyfilter.Object) (*preflight.Blame, error)

// BlameTimeout bounds one blame. One Envoy run in validate mode of a whole
// gateway's config takes about 80 ms and a search needs a few runs per
// EnvoyFilter that reaches the proxy, so a minute covers a mesh with
// hundreds of them; a Direct change the proxies refuse waits for the
// blame no longer than this before it is rolled back (fail closed).
const BlameTimeout = 60 * time.Second

// blameRecheck is how often, while proxies still refuse the same set, the
// other EnvoyFilters are listed again to see whether their specs changed
// (a new blame is due then), and how long a failed blame stands before it
// is tried again.
const blameRecheck = 30 * time.Second

// maxBlames bounds the blames kept: a term that saw many sets refused.
const maxBlames = 64

// blameSlot is one delivered set and kind of proxy.
type blameSlot struct{ set, kind string }

// blameKey is what a blame is run once for: the slot, the hash of the
// other EnvoyFilters' specs, and whether the proxy runs the binary's
// Envoy release (of a proxy of another release the blame can only fail,
// so it is run again once a proxy of the binary's release refuses).
type blameKey struct {
	blameSlot
	others    string
	ofRelease bool
}

// blameAsk is a blame asked for and not yet run.
type blameAsk struct {
	proxy     string
	ofRelease bool
	ours      []*envoyfilter.Object
}

// blameResult is one blame's answer.
type blameResult struct {
	key   blameKey
	proxy string
	blame *preflight.Blame
	err   error
	// at is when it was found, or when the others were last listed and
	// found unchanged.
	at time.Time
}

// blamer runs the blames, one at a time, on its own goroutine (run).
type blamer struct {
	fn BlameFunc
	// others is the hash of the specs of the EnvoyFilters globalconfig
	// does not manage.
	others func(ctx context.Context) (string, error)
	// found is told of every new result (the controller's Enqueue).
	found func()
	now   func() time.Time
	// timeout bounds one blame (BlameTimeout; tests shorten it).
	timeout time.Duration

	wake chan struct{}

	mu     sync.Mutex
	asks   map[blameSlot]blameAsk
	latest map[blameSlot]*blameResult
	done   map[blameKey]*blameResult
	// runs counts the blames run (tests).
	runs int
}

func newBlamer(fn BlameFunc, others func(context.Context) (string, error), found func(), now func() time.Time) *blamer {
	return &blamer{fn: fn, others: others, found: found, now: now, timeout: BlameTimeout, wake: make(chan struct{}, 1),
		asks: map[blameSlot]blameAsk{}, latest: map[blameSlot]*blameResult{}, done: map[blameKey]*blameResult{}}
}

// ask returns the latest blame of slot, nil while none is known (pending),
// and asks for one when none is known or the last is due a recheck. A
// blame of a proxy of another Envoy release than the binary's is pending
// again once a proxy of the binary's release (ofRelease) refuses. It never
// waits.
func (b *blamer) ask(slot blameSlot, proxy string, ofRelease bool, ours []*envoyfilter.Object) *blameResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.latest[slot]
	better := r != nil && ofRelease && !r.key.ofRelease
	if r != nil && !better && b.now().Sub(r.at) < blameRecheck {
		return r
	}
	if better {
		delete(b.latest, slot)
		r = nil
	}
	if a, asked := b.asks[slot]; !asked || ofRelease && !a.ofRelease {
		b.asks[slot] = blameAsk{proxy: proxy, ofRelease: ofRelease, ours: ours}
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return r
}

// run works through the asks until ctx ends.
func (b *blamer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		b.drain(ctx)
	}
}

// drain runs every blame asked for, one at a time.
func (b *blamer) drain(ctx context.Context) {
	for ctx.Err() == nil {
		b.mu.Lock()
		slots := make([]blameSlot, 0, len(b.asks))
		for s := range b.asks {
			slots = append(slots, s)
		}
		if len(slots) == 0 {
			b.mu.Unlock()
			return
		}
		slices.SortFunc(slots, func(x, y blameSlot) int { return strings.Compare(x.set+x.kind, y.set+y.kind) })
		slot := slots[0]
		a := b.asks[slot]
		b.mu.Unlock()
		b.one(ctx, slot, a)
		b.mu.Lock()
		delete(b.asks, slot)
		b.mu.Unlock()
	}
}

// one runs the blame of slot, unless the other EnvoyFilters are as they
// were for a blame already found.
func (b *blamer) one(ctx context.Context, slot blameSlot, a blameAsk) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	others, err := b.others(ctx)
	if err != nil {
		b.store(&blameResult{key: blameKey{blameSlot: slot, ofRelease: a.ofRelease}, proxy: a.proxy, err: fmt.Errorf("list the EnvoyFilters: %w", err), at: b.now()}, false)
		return
	}
	key := blameKey{blameSlot: slot, others: others, ofRelease: a.ofRelease}
	b.mu.Lock()
	if r := b.done[key]; r != nil {
		// The same set, kind and other EnvoyFilters: the same answer.
		r.at = b.now()
		changed := b.latest[slot] != r
		b.latest[slot] = r
		b.mu.Unlock()
		if changed && b.found != nil {
			b.found()
		}
		return
	}
	// Pending until the new blame is found: the old one was of other
	// EnvoyFilters.
	delete(b.latest, slot)
	b.runs++
	b.mu.Unlock()
	blame, err := b.fn(ctx, a.proxy, a.ours)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("the blame did not finish within %s: %w", b.timeout, err)
	}
	if err == nil && blame == nil {
		err = errors.New("the blame gave no answer")
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return // the term ended: asked again by the next
	}
	b.store(&blameResult{key: key, proxy: a.proxy, blame: blame, err: err, at: b.now()}, err == nil)
}

// store keeps r as the latest blame of its slot (and, found, as the
// answer for its key), and tells found.
func (b *blamer) store(r *blameResult, found bool) {
	b.mu.Lock()
	if len(b.done) >= maxBlames {
		clear(b.done)
	}
	if len(b.latest) >= maxBlames {
		clear(b.latest)
	}
	if found {
		b.done[r.key] = r
	}
	b.latest[r.key.blameSlot] = r
	b.mu.Unlock()
	if b.found != nil {
		b.found()
	}
}

// othersHash is the hash of the specs of the home cluster's EnvoyFilters
// that globalconfig does not manage, by namespace and name.
func (c *Controller) othersHash(ctx context.Context) (string, error) {
	list, err := c.istio.NetworkingV1alpha3().EnvoyFilters(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var lines []string
	for _, o := range list.Items {
		if o.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue {
			continue
		}
		h, err := envoyfilter.SpecHash(&o.Spec)
		if err != nil {
			return "", fmt.Errorf("envoyfilter %s/%s: %w", o.Namespace, o.Name, err)
		}
		lines = append(lines, o.Namespace+"/"+o.Name+" "+h)
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8]), nil
}

// refusing are, for each kind of proxy that refuses the set st is about,
// sorted by kind, the proxy to blame: the first such proxy by name that
// runs the Envoy release envoy ("1.40") of the blame's binary, else the
// first by name (whose blame then says the binary is of another
// release). A blame by another release could name the wrong EnvoyFilter,
// so a proxy of the binary's own release is taken first.
func refusing(st *rollout.Status, envoy string) []refuser {
	first, ofRelease := map[string]string{}, map[string]string{}
	for _, p := range st.Proxies {
		if p.State != rollout.NACKed {
			continue
		}
		if n, ok := first[p.Type]; !ok || p.Key() < n {
			first[p.Type] = p.Key()
		}
		if v, err := preflight.EnvoyOfProxy(p.IstioVersion); err == nil && envoy != "" && v.String() == envoy {
			if n, ok := ofRelease[p.Type]; !ok || p.Key() < n {
				ofRelease[p.Type] = p.Key()
			}
		}
	}
	out := make([]refuser, 0, len(first))
	for kind, name := range first {
		r := refuser{kind: kind, proxy: name}
		if n, ok := ofRelease[kind]; ok {
			r.proxy, r.ofRelease = n, true
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b refuser) int { return strings.Compare(a.kind, b.kind) })
	return out
}

// refuser is the proxy of one kind a blame is for.
type refuser struct {
	kind, proxy string
	// ofRelease says it runs the blame binary's Envoy release.
	ofRelease bool
}

// blames are the blames of the proxies that refuse the set the tracker's
// status st is about, when that is the set this term delivered: asked for
// when not known yet (status.BlamePending), or status.BlameOff without a
// blame function. Nil when no proxy refuses it.
func (c *Controller) blames(st *rollout.Status) []status.Blame {
	if st == nil || st.NACKed == 0 || c.st.applied == nil || render.SetHash(c.st.applied.Set) != st.Version {
		return nil
	}
	var out []status.Blame
	for _, rf := range refusing(st, c.cfg.BlameEnvoy) {
		kind, proxy := rf.kind, rf.proxy
		b := status.Blame{Set: st.Version, Proxy: proxy, Kind: kind}
		if c.blamer == nil {
			b.Outcome = status.BlameOff
			b.Message = "the controller runs without --envoy: run it with --envoy (the fleet's Envoy binary, istio-proxy's) to name the EnvoyFilter these proxies refuse, ours or another's"
			out = append(out, b)
			continue
		}
		r := c.blamer.ask(blameSlot{set: st.Version, kind: kind}, proxy, rf.ofRelease, c.st.applied.Set)
		out = append(out, c.blameStatus(b, r))
	}
	return out
}

// blameStatus is r as the status shows it (b names the set, proxy and
// kind asked about); a nil r is pending.
func (c *Controller) blameStatus(b status.Blame, r *blameResult) status.Blame {
	switch {
	case r == nil:
		b.Outcome = status.BlamePending
		b.Message = fmt.Sprintf("finding which EnvoyFilter %s %s refuses (within %s)", b.Kind, b.Proxy, BlameTimeout)
		return b
	case r.err != nil:
		b.Proxy = r.proxy
		b.Outcome, b.Error = status.BlameFailed, c.scrub(r.err.Error())
		b.Message = fmt.Sprintf("could not name the EnvoyFilter %s %s refuses: %s", b.Kind, b.Proxy, b.Error)
		return b
	}
	bl := r.blame
	b.Proxy = r.proxy
	b.Outcome, b.Envoy, b.Runs, b.Elapsed = status.BlameOutcome(bl.Outcome), bl.Envoy, bl.Runs, bl.Elapsed.Round(time.Millisecond).String()
	for _, f := range bl.Faults {
		sf := status.Fault{Fault: f.String(), Message: c.scrub(oneLine(f.Message))}
		for _, cu := range f.Filters {
			sf.Culprits = append(sf.Culprits, status.Culprit{Namespace: cu.Namespace, Name: cu.Name, Managed: cu.Managed, Item: cu.Item})
		}
		b.Faults = append(b.Faults, sf)
	}
	b.Message = c.scrub(blameMessage(b, bl))
	return b
}

// blameMessage says what bl found, and what it means for a roll back.
func blameMessage(b status.Blame, bl *preflight.Blame) string {
	who := b.Kind + " " + b.Proxy
	switch bl.Outcome {
	case preflight.NotReproduced:
		return fmt.Sprintf("Envoy %s accepts the config istiod builds for %s now: the NACK is not reproduced (already fixed, or the proxy's Envoy is another build), and no EnvoyFilter is blamed", bl.Envoy, who)
	case preflight.BaseRejected:
		msg := fmt.Sprintf("Envoy %s refuses the config of %s even without any EnvoyFilter: no EnvoyFilter is to blame, and rolling back would not help; Envoy: %s", bl.Envoy, who, oneLine(bl.Rejected))
		if len(bl.Inexact) > 0 {
			msg += "; the config without EnvoyFilters is not exact: " + strings.Join(bl.Inexact, "; ")
		}
		return msg
	}
	faults := make([]string, len(b.Faults))
	for i, f := range b.Faults {
		faults[i] = f.Fault
	}
	msg := fmt.Sprintf("%s refuses %s", who, strings.Join(faults, "; and "))
	switch other := othersOf(bl); {
	case !bl.Ours():
		msg += ": no EnvoyFilter of globalconfig's is to blame, so rolling back globalconfig's change would not help; fix or remove that EnvoyFilter"
	case other != "":
		msg += ": globalconfig's change fails together with " + other + " (the other half of the fault); fix either"
	default:
		msg += ": globalconfig's change is to blame"
	}
	return msg
}

// othersOf names the EnvoyFilters not managed by globalconfig that a fault
// naming one of ours holds too.
func othersOf(bl *preflight.Blame) string {
	var names []string
	for _, f := range bl.Faults {
		if !slices.ContainsFunc(f.Filters, func(c preflight.Culprit) bool { return c.Managed }) {
			continue
		}
		for _, c := range f.Filters {
			if n := c.String(); !c.Managed && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return strings.Join(names, " and ")
}

// oneLine is Envoy's message on one line (it puts one line per refused
// listener).
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// directBlame is the blame Direct's judgement of the set delivered last
// takes: nil without a blame function or while no proxy refuses the set;
// pending while the blame of any kind of proxy that refuses it is; else
// every kind's blame together (ours when any names ours, failed when any
// failed). A blame found is announced here (once): the decision it leads
// to may leave the status about another set.
func (c *Controller) directBlame(cm *corev1.ConfigMap) *canary.Blame {
	if c.blamer == nil || c.cfg.Rollout == nil {
		return nil
	}
	st := c.cfg.Rollout.Status()
	bs := c.blames(st)
	if len(bs) == 0 {
		return nil
	}
	c.announceBlames(cm, bs)
	out := &canary.Blame{Set: st.Version}
	var culprits, others, notBlamed, errs []string
	for _, b := range bs {
		r := c.blamer.latestOf(blameSlot{set: st.Version, kind: b.Kind})
		switch b.Outcome {
		case status.BlamePending:
			out.Pending = true
		case status.BlameFailed:
			errs = append(errs, b.Kind+" "+b.Proxy+": "+b.Error)
		case status.BlameBlamed:
			for _, f := range b.Faults {
				if !slices.Contains(culprits, f.Fault) {
					culprits = append(culprits, f.Fault)
				}
			}
			if r != nil && r.blame != nil && r.blame.Ours() {
				out.Ours = true
				if o := othersOf(r.blame); o != "" && !slices.Contains(others, o) {
					others = append(others, o)
				}
			}
			if len(b.Faults) == 0 {
				notBlamed = append(notBlamed, b.Kind+" "+b.Proxy+": the blame named no fault")
			}
		default:
			notBlamed = append(notBlamed, b.Message)
		}
	}
	out.Culprits, out.Others = strings.Join(culprits, "; and "), strings.Join(others, " and ")
	out.NotBlamed, out.Err = strings.Join(notBlamed, "; "), strings.Join(errs, "; ")
	return out
}

// latestOf is the latest blame of slot, nil when none is known.
func (b *blamer) latestOf(slot blameSlot) *blameResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest[slot]
}

// announceBlames records a Warning Event for every blame found, once per
// blame (set, kind, other EnvoyFilters and what it found), not per sync.
func (c *Controller) announceBlames(cm *corev1.ConfigMap, bs []status.Blame) {
	for _, b := range bs {
		if b.Outcome == status.BlamePending || b.Outcome == status.BlameOff {
			continue
		}
		key := b.Set + "/" + b.Kind + "/" + string(b.Outcome) + "/" + b.Message
		if c.blamer != nil {
			if r := c.blamer.latestOf(blameSlot{set: b.Set, kind: b.Kind}); r != nil {
				key += "/" + r.key.others
			}
		}
		if c.st.blamed == nil {
			c.st.blamed = map[string]bool{}
		}
		if c.st.blamed[key] {
			continue
		}
		if len(c.st.blamed) >= maxBlames {
			clear(c.st.blamed)
		}
		c.st.blamed[key] = true
		reason := "NACKBlamed"
		if b.Outcome == status.BlameFailed {
			reason = "NACKBlameFailed"
		}
		msg := fmt.Sprintf("set %s: %s", b.Set, b.Message)
		for _, f := range b.Faults {
			msg += fmt.Sprintf("; Envoy on %s: %s", f.Fault, f.Message)
		}
		c.event(cm, corev1.EventTypeWarning, reason, "%s", msg)
	}
}
