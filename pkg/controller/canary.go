package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// canaryState is what the worker keeps of the rollout in one term.
type canaryState struct {
	// stable is the set every proxy had before the current change: the
	// last promoted (or directly delivered) one; nil until known. At the
	// start of a term it is the stored last good document's set, read
	// only when a canary policy or record asks for it.
	stable *canary.Set
	// record is the current rollout, from the status at the start of a
	// term; recordRead is set once the term took it.
	record     *canary.Record
	recordRead bool
	// deliveredAt is when this term first delivered the canary set of the
	// rollout named key (document/to), on this process's clock: the bake
	// time is measured on it alone, and starts again after a restart.
	deliveredAt time.Time
	key         string
}

// rolloutInput is the canary step's input for this sync: what the term
// knows of the stable set and the rollout, istiod's verdict on the canary
// set, the bake time and an operator's action.
func (c *Controller) rolloutInput(ctx context.Context, cm *corev1.ConfigMap) *decide.Rollout {
	cs := &c.st.canary
	if !cs.recordRead {
		if c.st.status != nil {
			cs.record = c.st.status.Canary
		}
		cs.recordRead = true
	}
	in := &decide.Rollout{Input: canary.Input{Stable: cs.stable, Record: cs.record, Now: c.now(), Fleet: c.fleet(ctx),
		Tracking: c.cfg.Rollout != nil, Verdict: c.verdict()}}
	if cs.stable == nil {
		in.LoadStable = func() (*canary.Set, error) { return c.stableFromLastGood(ctx) }
	}
	r := cs.record
	if r == nil || r.Phase != canary.InCanary {
		return in
	}
	if key := r.Document + "/" + r.To; key == cs.key {
		bake, err := time.ParseDuration(r.BakeTime)
		in.Baked = err != nil || c.now().Sub(cs.deliveredAt) >= bake
	}
	in.Action = r.Requested(cm.Annotations[canary.AnnotationAction])
	return in
}

// stableFromLastGood is the stored last good document's set, remembered
// for the term: nil when none is stored or it no longer renders.
func (c *Controller) stableFromLastGood(ctx context.Context) (*canary.Set, error) {
	data, err := c.lastGoodData(ctx)
	if err != nil || data == nil {
		return nil, err
	}
	// A renderer of its own: rendering the old document must not evict
	// the current one's built items from the shared cache.
	res := render.New().FromConfigMap(data)
	if !res.Valid() {
		return nil, nil
	}
	c.st.canary.stable = &canary.Set{Objects: res.Objects, Hash: render.SetHash(res.Objects)}
	return c.st.canary.stable, nil
}

// fleetTimeout bounds the question, before a canary phase, of which
// proxies carry no canary label.
const fleetTimeout = 2 * time.Second

// fleet asks istiod, before a canary phase starts, which proxies the set
// reaches carry no canary label; nil without a rollout tracker.
func (c *Controller) fleet(ctx context.Context) func(string, []*envoyfilter.Object) canary.Verdict {
	t := c.cfg.Rollout
	if t == nil {
		return nil
	}
	return func(label string, set []*envoyfilter.Object) canary.Verdict {
		ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		defer cancel()
		f, err := t.Fleet(ctx, label, rollout.ScopeOf(set, c.cfg.RootNamespace))
		if err != nil {
			c.log.Warn("could not ask istiod which proxies carry the canary label; the canary phase checks again", "err", err)
			return canary.Verdict{}
		}
		return canary.Verdict{Known: true, Unlabelled: f.Unlabelled}
	}
}

// verdict is what the rollout tracker says of the set delivered last:
// the canaries' answers when that is a canary set, and every proxy's by
// state, which a Direct change is judged by. Unknown until the tracker
// answered for that very set.
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
		Partial: len(st.Istiod) == 0 || len(st.Unreachable()) > 0}
	for _, p := range st.Canaries {
		v.Canaries = append(v.Canaries, canary.Answer{Name: p.Name, State: string(p.State), Message: c.scrub(p.Message)})
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

// afterStep keeps what the canary step decided: the new record, the stable
// set on promotion, the bake clock on a new canary set; and announces a
// phase that began or ended.
func (c *Controller) afterStep(cm *corev1.ConfigMap, d decide.Decision) {
	out := d.Rollout
	if out == nil {
		return
	}
	cs := &c.st.canary
	cs.record = out.Record
	if out.Promote {
		cs.stable = &canary.Set{Objects: d.Candidate, Hash: render.SetHash(d.Candidate)}
	}
	c.afterDirect(cm, out)
	r := out.Record
	if r == nil {
		return
	}
	if r.Phase == canary.InCanary {
		if key := r.Document + "/" + r.To; key != cs.key {
			cs.key, cs.deliveredAt = key, c.now()
		}
		// Come back when the bake time is over, and meanwhile now and
		// then for an operator's action.
		bake, _ := time.ParseDuration(r.BakeTime)
		c.enqueueAfter(min(bake-c.now().Sub(cs.deliveredAt)+10*time.Millisecond, canaryRecheck))
	}
	if out.Started {
		c.metrics.Rollouts.WithLabelValues(string(canary.InCanary)).Inc()
	}
	switch {
	case out.Started && !out.Ended:
		c.event(cm, corev1.EventTypeNormal, "CanaryStarted", "%s reach the proxies labelled %s=true first; bake time %s, %s of them must ACK",
			strings.Join(r.Items, ", "), r.Label, r.BakeTime, r.Needed)
	case out.Ended && r.Phase == canary.Promoted:
		c.metrics.Rollouts.WithLabelValues(string(canary.Promoted)).Inc()
		c.event(cm, corev1.EventTypeNormal, "Promoted", "%s promoted to every proxy: %s", strings.Join(r.Items, ", "), r.Message)
	case out.Ended && r.Phase == canary.RolledBack:
		c.metrics.Rollouts.WithLabelValues(string(canary.RolledBack)).Inc()
		c.event(cm, corev1.EventTypeWarning, "RolledBack", "%s rolled back on every proxy; the document is rejected until it changes: %s", strings.Join(r.Items, ", "), r.Message)
	}
}

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
// action when nothing else wakes it.
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
// label while a canary phase is on.
func (c *Controller) canaryLabel() string {
	if r := c.st.canary.record; r != nil && r.Phase == canary.InCanary && c.st.applied != nil && c.st.applied.Source == decide.Canary {
		return r.Label
	}
	return ""
}
