package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// canaryState is what the worker keeps of the rollout in one term.
type canaryState struct {
	// stable is the stable set of a Direct rollout: the last promoted (or
	// directly delivered) one; nil until known. At the start of a term it
	// is the stored last good document's set.
	stable *canary.Set
	// sets are the sets this term knows by hash, exactly: a canary
	// rollout's stable set is taken from here first (resolve).
	sets map[string]*canary.Set
	// record is the current rollout, from the status at the start of a
	// term; recordRead is set once the term took it.
	record     *canary.Record
	recordRead bool
	// inForce is the hash of the set in force outside a phase, as this
	// term last decided it ("" until then: read from the status).
	inForce string
	// announced is the last Held reason announced, so each is announced
	// once.
	announced string
}

// remember keeps s among the sets this term knows exactly.
func (cs *canaryState) remember(s *canary.Set) {
	if s == nil {
		return
	}
	if cs.sets == nil {
		cs.sets = map[string]*canary.Set{}
	}
	if len(cs.sets) > 16 {
		clear(cs.sets) // a term that saw many edits: keep it small
	}
	cs.sets[s.Hash] = s
}

// rolloutInput is the canary step's input for this sync: what the term
// knows of the stable set and the rollout, istiod's verdict on the set
// delivered last, the traffic gate's figures and an operator's action.
func (c *Controller) rolloutInput(ctx context.Context, cm *corev1.ConfigMap) *decide.Rollout {
	cs := &c.st.canary
	if !cs.recordRead {
		if c.st.status != nil {
			cs.record = c.st.status.Canary
		}
		cs.recordRead = true
	}
	in := &decide.Rollout{Input: canary.Input{Stable: cs.stable, Record: cs.record, Now: c.now(), Fleet: c.fleet(ctx),
		Tracking: c.cfg.Rollout != nil, Verdict: c.verdict(), Root: c.root(), InForce: c.inForce(), PairedBy: c.pairedBy(),
		Resolve: func(hash, label string) (*canary.Set, string) { return c.resolve(ctx, hash, label) }, Blame: c.directBlame(cm)}}
	if cs.stable == nil {
		in.LoadStable = func() (*canary.Set, error) { return c.stableFromLastGood(ctx) }
	}
	r := cs.record
	if r == nil || r.Direct() {
		return in
	}
	switch r.Phase {
	case canary.InCanary, canary.Held:
		in.Action = r.Requested(cm.Annotations[canary.AnnotationAction])
		in.Traffic = c.trafficVerdict(r)
	}
	return in
}

func (c *Controller) root() string {
	if c.cfg.RootNamespace == "" {
		return envoyfilter.DefaultNamespace
	}
	return c.cfg.RootNamespace
}

// inForce is the hash of the set every proxy has outside a phase: what
// this term decided last, else what the status the term started from
// says, else what the live EnvoyFilters hold; "" when nothing was ever
// delivered.
func (c *Controller) inForce() string {
	cs := &c.st.canary
	if cs.inForce != "" {
		return cs.inForce
	}
	if st := c.st.status; st != nil {
		if h := inForceOf(st); h != "" {
			return h
		}
	}
	live, err := c.live()
	if err != nil || len(live) == 0 {
		return ""
	}
	stable, _, _, err := canary.Unpair(live, "")
	if err != nil {
		return ""
	}
	return canary.SetHash(stable)
}

// pairedBy is the label the sink's set is paired by: what this term
// delivered, else the live EnvoyFilters.
func (c *Controller) pairedBy() string {
	if c.st.applied != nil {
		return canary.PairedLabel(c.st.applied.Set)
	}
	live, err := c.live()
	if err != nil {
		return ""
	}
	return canary.PairedLabel(live)
}

// inForceOf is what a status says is in force outside a phase.
func inForceOf(st *status.Status) string {
	if r := st.Canary; r != nil {
		switch {
		case r.Direct() && r.Phase == canary.Kept, !r.Direct() && r.Phase == canary.Promoted:
			return r.To
		default:
			return r.From
		}
	}
	if a := st.Applied; a != nil {
		if a.Stable != "" {
			return a.Stable
		}
		return a.Hash // an unpaired set (a status of version 2, or Direct)
	}
	return ""
}

// resolve finds the set of hash exactly: among the sets this term knows,
// in the stored last good copy, or in the live EnvoyFilters' stable or
// canary copies. Nil with why when none holds it.
func (c *Controller) resolve(ctx context.Context, hash, label string) (*canary.Set, string) {
	cs := &c.st.canary
	if s := cs.sets[hash]; s != nil {
		return s, ""
	}
	var whys []string
	lg, why, err := c.lastGoodSet(ctx)
	switch {
	case err != nil:
		whys = append(whys, "the last good copy could not be read: "+err.Error())
	case lg == nil:
		whys = append(whys, why)
	case lg.Hash == hash:
		cs.remember(lg)
		return lg, ""
	default:
		whys = append(whys, fmt.Sprintf("the last good copy %s renders to set %s", LastGoodName(c.cfg.Name), lg.Hash))
		c.st.lastGoodProblem = fmt.Sprintf("stale: it renders to set %s, and the set in force is %s (a hand edit, or a write that failed)", lg.Hash, hash)
	}
	live, err := c.live()
	if err == nil && len(live) > 0 {
		stable, cand, _, err := canary.Unpair(live, label)
		if err == nil {
			for _, half := range [][]*envoyfilter.Object{stable, cand} {
				if s := (&canary.Set{Objects: half, Hash: canary.SetHash(half)}); s.Hash == hash {
					cs.remember(s)
					c.log.Info("the stable set was rebuilt from the live EnvoyFilters", "set", hash)
					return s, ""
				}
			}
			whys = append(whys, fmt.Sprintf("the live EnvoyFilters hold sets %s and %s", canary.SetHash(stable), canary.SetHash(cand)))
		}
	} else if err != nil {
		whys = append(whys, "the live EnvoyFilters could not be read: "+err.Error())
	} else {
		whys = append(whys, "no live EnvoyFilter holds it")
	}
	return nil, fmt.Sprintf("set %s is known nowhere: %s", hash, strings.Join(whys, "; "))
}

// live are the EnvoyFilters the sink holds: the managed objects the
// informer (and this term's own writes) show, or what the MCP server
// serves (Config.Live).
func (c *Controller) live() ([]*envoyfilter.Object, error) {
	if c.cfg.Sink == SinkMCP {
		if c.cfg.Live == nil {
			return nil, nil
		}
		return c.cfg.Live(), nil
	}
	listed, err := c.home.listed()
	if err != nil {
		return nil, err
	}
	out := make([]*envoyfilter.Object, 0, len(listed))
	for _, l := range listed {
		o, err := objectOf(l)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *envoyfilter.Object) int {
		return strings.Compare(a.Metadata.Namespace+"/"+a.Metadata.Name, b.Metadata.Namespace+"/"+b.Metadata.Name)
	})
	return out, nil
}

// objectOf is a live EnvoyFilter as the renderer makes one: its labels and
// annotations globalconfig sets, its content hash computed afresh.
func objectOf(l *clientnetworking.EnvoyFilter) (*envoyfilter.Object, error) {
	spec := l.Spec.DeepCopy()
	hash, err := envoyfilter.SpecHash(spec)
	if err != nil {
		return nil, err
	}
	o := &envoyfilter.Object{APIVersion: envoyfilter.APIVersion, Kind: envoyfilter.Kind, Spec: spec,
		Metadata: envoyfilter.Metadata{Name: l.Name, Namespace: l.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}}}
	for _, k := range []string{envoyfilter.LabelManagedBy, envoyfilter.LabelItem, canary.LabelTrack} {
		if v, ok := l.Labels[k]; ok {
			o.Metadata.Labels[k] = v
		}
	}
	for _, k := range []string{envoyfilter.AnnotationIstioVersions, envoyfilter.AnnotationServiceConfig, envoyfilter.AnnotationClusters} {
		if v, ok := l.Annotations[k]; ok {
			o.Metadata.Annotations[k] = v
		}
	}
	o.Metadata.Annotations[envoyfilter.AnnotationContentHash] = hash
	return o, nil
}

// stableFromLastGood is the stored last good document's set, remembered
// for the term (a Direct rollout's stable set): nil when none is stored,
// it no longer renders, or it does not render to the set it was stored
// for.
func (c *Controller) stableFromLastGood(ctx context.Context) (*canary.Set, error) {
	set, _, err := c.lastGoodSet(ctx)
	if err != nil {
		return nil, err
	}
	if set = c.directStable(set); set == nil {
		return nil, nil
	}
	c.st.canary.stable = set
	return set, nil
}

// fleetTimeout bounds the question, before a canary phase, of which
// proxies the change reaches: every istiod is asked at once, each within
// rollout.RequestTimeout.
const fleetTimeout = 10 * time.Second

// fleet asks every istiod, before a canary phase starts, which proxies
// the change may reach, with their labels, kinds and versions; nil
// without a rollout tracker. An istiod that does not answer in time makes
// the fleet unknown: the phase does not start.
func (c *Controller) fleet(ctx context.Context) func(string) canary.Fleet {
	t := c.cfg.Rollout
	if t == nil {
		return nil
	}
	return func(string) canary.Fleet {
		ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		defer cancel()
		all, err := t.Proxies(ctx)
		if err != nil {
			c.log.Warn("could not ask every istiod which proxies the change reaches; the canary phase does not start", "err", err)
			return canary.Fleet{Why: c.scrub(err.Error())}
		}
		f := canary.Fleet{Known: true, Proxies: make([]canary.FleetProxy, 0, len(all))}
		for _, p := range all {
			f.Proxies = append(f.Proxies, canary.FleetProxy{Name: p.Name, Kind: p.Kind, IstioVersion: p.IstioVersion, Labels: p.Labels, Istiod: p.Istiod})
		}
		return f
	}
}

// verdict is what the rollout tracker says of the set delivered last:
// every canary's answer, with what istiod's configuration for it holds,
// and every proxy's by state. Unknown until the tracker answered for that
// very set.
func (c *Controller) verdict() canary.Verdict {
	t := c.cfg.Rollout
	if t == nil || c.st.applied == nil {
		return canary.Verdict{}
	}
	st := t.Status()
	if st == nil || st.Version != render.SetHash(c.st.applied.Set) {
		return canary.Verdict{}
	}
	v := canary.Verdict{Known: true, Unlabelled: st.Unlabelled, Version: st.Version, Since: st.Since,
		Synced: st.Synced, Pending: st.Pending, Stale: st.Stale, NACKed: st.NACKed,
		Partial: len(st.Istiod) == 0 || len(st.Unreachable()) > 0, Silent: map[string]time.Time{}}
	for _, u := range st.Unreachable() {
		v.Unreachable = append(v.Unreachable, u.Address)
	}
	if len(st.Istiod) == 0 {
		v.Unreachable = append(v.Unreachable, "no istiod found")
	}
	for _, s := range st.Silent {
		v.Silent[s.Name] = s.LastSeen
	}
	for _, p := range st.Canaries {
		v.Canaries = append(v.Canaries, c.seen(p))
	}
	v.Proxy = func(name string) (canary.Seen, bool) {
		p, ok := st.Lookup(name)
		if !ok {
			return canary.Seen{}, false
		}
		return c.seen(p), true
	}
	// NACKed proxies come first in the list.
	for _, p := range st.Proxies {
		if p.State != rollout.NACKed || len(v.NACKs) == canary.MaxRecordedNACKs {
			break
		}
		v.NACKs = append(v.NACKs, canary.Answer{Name: p.Name, State: string(p.State), Message: c.scrub(p.Message)})
	}
	return v
}

func (c *Controller) seen(p rollout.Proxy) canary.Seen {
	return canary.Seen{FleetProxy: canary.FleetProxy{Name: p.Name, Kind: p.Type, IstioVersion: p.IstioVersion, Labels: p.Labels, Istiod: p.Istiod},
		State: string(p.State), Message: c.scrub(p.Message), Markers: p.Markers}
}

// trafficVerdict is the traffic gate's figures for the phase of r.
func (c *Controller) trafficVerdict(r *canary.Record) canary.TrafficVerdict {
	g := c.cfg.Traffic
	if g == nil {
		return canary.TrafficVerdict{Why: "the controller reads no proxy's statistics (run with --rollout: the traffic gate needs the rollout tracker)"}
	}
	res, ok := g.Result(r.ID())
	if !ok {
		return canary.TrafficVerdict{}
	}
	v := canary.TrafficVerdict{Known: res.Canary.Read > 0, Since: res.Since, Canary: figures(res.Canary), Stable: figures(res.Stable)}
	if res.Canary.Read < res.Canary.Proxies && len(res.Errors) > 0 {
		v.Known = false
		v.Why = fmt.Sprintf("the statistics of %d of %d canaries could not be read: %s", res.Canary.Proxies-res.Canary.Read, res.Canary.Proxies, c.scrub(res.Errors[0]))
	}
	return v
}

func figures(g rollout.TrafficGroup) canary.Figures {
	return canary.Figures{Proxies: g.Proxies, Read: g.Read, Requests: g.Requests, Server5xx: g.Server5xx, LocalReplies: g.LocalReplies, ConnectFailures: g.ConnectFailures}
}

// afterStep keeps what the canary step decided: the new record (stamped
// with when its canary copies were first delivered), the set in force,
// the stable set on promotion; points the traffic gate at the phase; and
// announces a phase that was held, began or ended.
func (c *Controller) afterStep(cm *corev1.ConfigMap, d decide.Decision) {
	out := d.Rollout
	if out == nil {
		return
	}
	cs := &c.st.canary
	r := out.Record
	if r != nil && r.Phase == canary.InCanary && r.Delivered == nil && !r.Direct() {
		rr := *r
		t := c.now().UTC()
		rr.Delivered = &t
		r = &rr
		out.Record = r
	}
	cs.record = r
	cand := &canary.Set{Objects: d.Candidate, Hash: render.SetHash(d.Candidate)}
	cs.remember(cand)
	switch {
	case out.Hold:
	case r == nil || r.Direct() && r.Phase == canary.Kept || !r.Direct() && r.Phase == canary.Promoted:
		cs.inForce = cand.Hash
	default:
		cs.inForce = r.From
	}
	if out.Promote {
		cs.stable = cand
	}
	c.afterDirect(cm, out)
	c.watchTraffic(d)
	if out.Hold && out.Why != "" && !out.Held {
		// Held with nothing to deliver (no exact stable set, a pairing
		// the proxies' labels don't allow yet): said once per reason.
		if out.Why != cs.announced {
			cs.announced = out.Why
			c.event(cm, corev1.EventTypeWarning, "CanaryHeld", "the change is held, every proxy keeps what it has: %s", out.Why)
		}
		c.enqueueAfter(canaryRecheck)
	}
	if r == nil || r.Direct() {
		return
	}
	switch r.Phase {
	case canary.InCanary:
		// Come back when the bake time is over, and meanwhile now and
		// then for an operator's action and the traffic gate.
		left := r.Bake() - c.now().Sub(*r.Delivered)
		c.enqueueAfter(min(left+10*time.Millisecond, canaryRecheck))
	case canary.Held:
		c.enqueueAfter(canaryRecheck)
	case canary.Promoted:
		if r.Confirmed == nil {
			c.enqueueAfter(canaryRecheck)
		}
	}
	if out.Held {
		c.metrics.Rollouts.WithLabelValues(string(canary.Held)).Inc()
		c.event(cm, corev1.EventTypeWarning, "CanaryHeld", "%s: %s; every proxy keeps the set before the change (rolled back after the phase timeout %s)",
			strings.Join(r.Items, ", "), r.Waiting, r.Timeout())
	}
	if out.Started {
		c.metrics.Rollouts.WithLabelValues(string(canary.InCanary)).Inc()
		c.event(cm, corev1.EventTypeNormal, "CanaryStarted", "%s reach the %d proxies labelled %s=true first; bake time %s, %s of them must ACK with the canary copy",
			strings.Join(r.Items, ", "), len(r.Canaries), r.Label, r.BakeTime, r.Needed)
	}
	switch {
	case out.Ended && r.Phase == canary.Promoted:
		c.metrics.Rollouts.WithLabelValues(string(canary.Promoted)).Inc()
		if r.Warning != "" {
			c.event(cm, corev1.EventTypeWarning, "Promoted", "%s promoted to every proxy: %s; %s", strings.Join(r.Items, ", "), r.Message, r.Warning)
		} else {
			c.event(cm, corev1.EventTypeNormal, "Promoted", "%s promoted to every proxy: %s", strings.Join(r.Items, ", "), r.Message)
		}
	case out.Ended && r.Phase == canary.RolledBack:
		c.metrics.Rollouts.WithLabelValues(string(canary.RolledBack)).Inc()
		c.event(cm, corev1.EventTypeWarning, "RolledBack", "%s rolled back on every proxy; the document is rejected until it changes: %s", strings.Join(r.Items, ", "), r.Message)
	case out.Confirmed:
		c.metrics.Rollouts.WithLabelValues("Confirmed").Inc()
	}
}

// watchTraffic points the traffic gate at the phase d delivers: its
// canaries that received the change, and a sample of the other proxies.
func (c *Controller) watchTraffic(d decide.Decision) {
	g, t := c.cfg.Traffic, c.cfg.Rollout
	if g == nil {
		return
	}
	r := c.st.canary.record
	if r == nil || r.Direct() || r.Phase != canary.InCanary || d.Rollout == nil || d.Source != decide.Canary || t == nil || !trafficAsked(d) {
		g.Watch(nil)
		return
	}
	w := &rollout.TrafficWatch{Key: r.ID()}
	for _, a := range r.Canaries {
		if a.ACKed() {
			w.Canaries = append(w.Canaries, a.Name)
		}
	}
	if st := t.Status(); st != nil {
		w.Stable = rollout.StableSample(st.Stable(), rollout.MaxStableSample)
	}
	g.Watch(w)
}

// trafficAsked reports whether d's document has a traffic gate.
func trafficAsked(d decide.Decision) bool { return d.Policy.Analysis != nil }

// afterDirect counts and announces what a Direct change came to: taken
// (counted only: the Applied Event said it), rolled back or kept.
func (c *Controller) afterDirect(cm *corev1.ConfigMap, out *canary.Output) {
	if out.Direct == "" {
		return
	}
	c.metrics.DirectRollouts.WithLabelValues(string(out.Direct)).Inc()
	r := out.Record
	switch {
	case r == nil:
	case out.Direct == canary.RolledBack:
		c.event(cm, corev1.EventTypeWarning, "RolledBack", "%s rolled back on every proxy, which got the last good set again; the document is rejected until it changes: %s",
			strings.Join(r.Items, ", "), r.Message)
	case out.Direct == canary.Kept:
		c.event(cm, corev1.EventTypeWarning, "KeptDespiteNACK", "%s delivered again and kept: %s", strings.Join(r.Items, ", "), r.Message)
	}
}

// canaryRecheck is how often a canary phase looks for an operator's
// action, a held phase checks again, and a promotion looks for answers,
// when nothing else wakes them.
const canaryRecheck = 2 * time.Second

// enqueueAfter asks for a sync after d; it does nothing while not leading.
func (c *Controller) enqueueAfter(d time.Duration) {
	if q := c.queue.Load(); q != nil {
		(*q).AddAfter(queueKey, max(d, 0))
	}
}

// now is the controller's clock.
func (c *Controller) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

// canaryLabel is the label the tracker sorts proxies by: the canary
// label whenever the applied set is paired.
func (c *Controller) canaryLabel() string {
	if c.st.applied == nil || !c.st.applied.Policy.Enabled() {
		return ""
	}
	if c.st.applied.Rollout == nil {
		// A rollout across clusters under strategy Canary pairs every
		// cluster's set by the label it follows.
		if out := c.st.stages.out; out != nil && c.st.applied.Policy.Staged() {
			return out.Label
		}
		return ""
	}
	return c.st.applied.Policy.Label()
}

// inPhase reports whether a canary phase is under way: its writes are
// retried whatever the API server answered.
func (c *Controller) inPhase() bool {
	if c.st.phaseFailed {
		return true
	}
	r := c.st.canary.record
	return r != nil && !r.Direct() && (r.Phase == canary.InCanary || r.Phase == canary.Held || r.Phase == canary.Promoted && r.Confirmed == nil)
}
