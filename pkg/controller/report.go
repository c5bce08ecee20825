package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/facts"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// report tells what a sync did: metrics, Events on the ConfigMap and the
// status. applyErr is the delivery error, returned after it is reported.
func (c *Controller) report(ctx context.Context, cm *corev1.ConfigMap, d decide.Decision, writes []string, applyErr error) error {
	st := c.statusOf(d)
	c.reportDependents(st)
	switch {
	case !d.Valid():
		c.metrics.ConfigValid.Set(0)
		c.warnInvalid(cm, d)
	default:
		c.metrics.ConfigValid.Set(1)
		c.st.warned = ""
	}
	if applyErr != nil {
		c.event(cm, corev1.EventTypeWarning, "ApplyFailed", "applying the EnvoyFilters failed: %v", applyErr)
		st.State = status.ApplyFailed
		st.Message = c.scrub("applying the EnvoyFilters failed: " + applyErr.Error())
		if err := c.writeStatus(ctx, st); err != nil {
			c.log.Warn("status not written", "err", c.scrub(err.Error()))
		}
		return applyErr
	}
	if c.st.applied != nil {
		c.metrics.ManagedFilters.Set(float64(len(c.st.applied.Set)))
		if d.Valid() {
			c.metrics.LastApply.SetToCurrentTime()
		}
	}
	c.reportAdmission(ctx, cm, st)
	c.reportRollout(cm, st)
	c.reportRefusal(st, d)
	c.reportMembers(cm, st)
	c.reportStages(cm, st)
	if len(writes) > 0 {
		// The item diff says why, the writes what: a drift repair has no
		// item change but writes.
		why := d.Diff.String()
		if !d.Valid() {
			why = "kept the last good set"
		}
		c.event(cm, corev1.EventTypeNormal, "Applied", "%s: %s", why, strings.Join(writes, "; "))
		c.log.Info("converged", "items", why, "writes", writes)
	}
	return c.writeStatus(ctx, st)
}

// notInEffect picks the warnings that say an item is not in effect
// because its service has no cluster (facts.NotInEffect): each with the
// service's key and what that means for traffic.
func notInEffect(warnings []status.Problem) []status.Problem {
	var out []status.Problem
	for _, w := range warnings {
		if consequence, ok := facts.NotInEffect(w.Message); ok {
			out = append(out, status.Problem{Path: w.Path, Message: consequence})
		}
	}
	return out
}

// notInEffectMessage says which items are not in effect and what that
// means for traffic, for the status' message.
func notInEffectMessage(items []status.Problem) string {
	parts := make([]string, len(items))
	for i, p := range items {
		item, _, _ := strings.Cut(p.Path, ".")
		parts[i] = fmt.Sprintf("%s is not in effect, its service (%s) has no cluster at the proxies: %s", item, p.Path, p.Message)
	}
	return strings.Join(parts, "; ")
}

// statusOf is the status for decision d: a new object, built from d, what
// the term applied and the status last written (for the applied set's
// time and change, which outlive the sync that made them).
func (c *Controller) statusOf(d decide.Decision) *status.Status {
	st := status.New(status.Applied)
	st.Sink = c.cfg.Sink
	st.Clusters = c.clustersStatus()
	st.Warnings = status.Problems(d.Warnings, c.scrub)
	if d.Valid() {
		st.NotInEffect = notInEffect(st.Warnings)
	}
	if !d.Valid() {
		st.State = status.Invalid
		st.Errors = status.Problems(d.Problems, c.scrub)
		st.Message = "the document was rejected; the last good EnvoyFilters are kept"
	}
	if r := c.st.canary.record; r != nil {
		st.Canary = r
		switch {
		case d.Valid() && d.Rollout != nil && d.Rollout.Hold:
			st.State = status.Held
			st.Message = "the change is held: " + d.Rollout.Why
		case d.Source == decide.Held:
			st.State = status.Held
			st.Message = fmt.Sprintf("the change (%s) is held, every proxy keeps the set before it: %s", strings.Join(r.Items, ", "), r.Waiting)
		case d.Source == decide.Canary:
			st.State = status.Canary
			st.Message = fmt.Sprintf("the change (%s) reaches the proxies labelled %s=true only, until the bake time %s is over and %s of them ACKed with the canary copy",
				strings.Join(r.Items, ", "), r.Label, r.BakeTime, r.Needed)
			if r.Waiting != "" {
				st.Message += "; waiting: " + r.Waiting
			}
		case d.Source == decide.Document && !r.Direct() && r.Phase == canary.Promoted && r.Confirmed == nil && r.Of(d.Document):
			if r.Waiting != "" {
				st.Message = r.Waiting
			}
		case d.Source == decide.RolledBack:
			st.State = status.RolledBack
			st.Message = "the change was rolled back on every proxy; the document is rejected until it changes"
			if r.Direct() {
				st.Message = "the proxies refused the change (NACK), so every proxy was given the last good set again; the document is rejected until it changes"
			}
			st.Errors = []status.Problem{{Message: c.scrub("rolled back: " + r.Message)}}
		}
	} else if d.Valid() && d.Rollout != nil && d.Rollout.Hold {
		st.State = status.Held
		st.Message = "the change is held: " + d.Rollout.Why
	}
	if len(st.NotInEffect) > 0 {
		st.Message = strings.TrimPrefix(st.Message+"; "+notInEffectMessage(st.NotInEffect), "; ")
	}
	if c.st.halfApplied != "" {
		st.Message = strings.TrimPrefix(st.Message+"; "+c.st.halfApplied+" (retrying)", "; ")
	}
	st.LastGood = c.lastGoodStatus()
	if a := c.st.applied; a != nil {
		st.Applied = c.appliedSet(a)
	} else if prev := c.st.status; prev != nil {
		st.Applied = prev.Applied
	}
	if c.cfg.MCPNack != nil {
		st.MCPNack = c.scrub(c.cfg.MCPNack())
	}
	return st
}

// reportRefusal keeps the status from saying Applied while proxies refuse
// the set it describes (state NACKed, saying why the set stays), and says
// why a Direct change is neither rolled back nor promoted when the
// tracker can't tell.
func (c *Controller) reportRefusal(st *status.Status, d decide.Decision) {
	if st.State != status.Applied {
		return
	}
	var msgs []string
	r := st.Rollout
	if rec := c.st.canary.record; rec != nil && rec.Direct() && rec.Phase == canary.Kept && rec.Document == d.Document && d.Source == decide.Document &&
		(r == nil || r.NACKed > 0 || r.Synced == 0) {
		// The proxies refused this very set before it was kept: not
		// Applied until one of them takes it and none refuses it.
		st.State = status.NACKed
		if rec.Restored == canary.RestoredRefused {
			msgs = append(msgs, "the proxies refused the restored last good set as well, so the refusal is not this change's "+
				"(another EnvoyFilter, or an Envoy older than the output assumes): the document is kept until it changes")
		} else {
			// Kept on the blame: it named only others' EnvoyFilters.
			msgs = append(msgs, c.scrub(rec.Message))
		}
	}
	if r != nil && r.NACKed > 0 {
		st.State = status.NACKed
		msgs = append(msgs, fmt.Sprintf("%d of %d %s refuse%s this set (NACK) and keep%s %s previous configuration; a proxy like %s that starts now gets no listener",
			r.NACKed, r.Selected, plural(r.Selected, "proxy", "proxies"), plural(r.NACKed, "s", ""), plural(r.NACKed, "s", ""),
			plural(r.NACKed, "its", "their"), plural(r.NACKed, "it", "them")))
	}
	if d.Rollout != nil && d.Rollout.Waiting != "" {
		msgs = append(msgs, d.Rollout.Waiting)
	}
	if len(msgs) > 0 {
		if len(st.NotInEffect) > 0 {
			// A zipkin collector without its cluster is both.
			msgs = append(msgs, notInEffectMessage(st.NotInEffect))
		}
		st.Message = strings.Join(msgs, "; ")
	}
}

// appliedSet is the status of the set a delivered: its time and change
// are those of the status last written when that already names the set
// (a resync, or a set an earlier term delivered).
func (c *Controller) appliedSet(a *decide.Decision) *status.AppliedSet {
	set := &status.AppliedSet{Hash: render.SetHash(a.Set), EnvoyFilters: make([]status.EnvoyFilter, 0, len(a.Set))}
	for _, o := range a.Set {
		set.EnvoyFilters = append(set.EnvoyFilters, status.EnvoyFilter{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Item: o.Item()})
	}
	if label := canary.PairedLabel(a.Set); label != "" {
		if stable, _, _, err := canary.Unpair(a.Set, label); err == nil {
			set.Stable, set.PairedBy = render.SetHash(stable), label
		}
	}
	if prev := c.st.status; prev != nil && prev.Applied != nil && prev.Applied.Hash == set.Hash {
		set.Time, set.Change = prev.Applied.Time, prev.Applied.Change
		if set.Stable == "" {
			set.Stable, set.PairedBy = prev.Applied.Stable, prev.Applied.PairedBy
		}
		return set
	}
	set.Time = time.Now().UTC()
	set.Change = status.Change{Added: nonNil(a.Diff.Added), Changed: nonNil(a.Diff.Changed), Removed: nonNil(a.Diff.Removed)}
	return set
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// NoWebhook is the admission reason when the controller serves no
// admission webhook (sidecar mode, or a run without --webhook-addr).
const NoWebhook = "globalconfig serves no admission webhook here (run with --webhook-addr): a bad edit is saved, and only found when the controller reads it"

// reportAdmission puts into st whether the admission webhook guards cm,
// and records a Warning Event each time the reason it does not changes
// (not again after a restart: the status written before says it).
func (c *Controller) reportAdmission(ctx context.Context, cm *corev1.ConfigMap, st *status.Status) {
	a := status.Admission{Reason: NoWebhook}
	if c.cfg.Admission != nil {
		a = c.cfg.Admission(ctx, cm)
	}
	a.Reason = c.scrub(a.Reason)
	st.Admission = &a
	if a.Guarded {
		c.st.admissionWarned = ""
		return
	}
	if prev := c.st.status; c.st.admissionWarned == "" && prev != nil && prev.Admission != nil && !prev.Admission.Guarded {
		// Announced by an earlier term (or replica): its status says so.
		c.st.admissionWarned = prev.Admission.Reason
	}
	if a.Reason != c.st.admissionWarned {
		c.st.admissionWarned = a.Reason
		c.event(cm, corev1.EventTypeWarning, "AdmissionNotGuarding", "edits of this ConfigMap are not checked before they are saved: %s", a.Reason)
	}
}

// warnInvalid records a Warning Event with every problem, once per
// distinct list.
func (c *Controller) warnInvalid(cm *corev1.ConfigMap, d decide.Decision) {
	text := render.Describe(d.Problems, "; ")
	c.log.Warn("document rejected; keeping the last good EnvoyFilters", "problems", len(d.Problems), "first", d.Problems[0].Error())
	if text == c.st.warned {
		return
	}
	c.st.warned = text
	c.event(cm, corev1.EventTypeWarning, "InvalidConfig", "%d problem(s), last good EnvoyFilters kept: %s", len(d.Problems), text)
}

// event records an Event on the ConfigMap. Messages carry paths and
// problems; API errors quoted in them are scrubbed of secret values.
func (c *Controller) event(cm *corev1.ConfigMap, eventType, reason, format string, args ...any) {
	c.recorder.Event(cm, eventType, reason, c.scrub(fmt.Sprintf(format, args...)))
	c.metrics.APIWrites.WithLabelValues("create", "events").Inc()
}

func (c *Controller) scrub(msg string) string { return render.Scrub(msg, c.st.secrets) }

// readStatus loads the status once per term, so a restart that finds
// the same state writes nothing. A status this version can't read (an
// older globalconfig's) is replaced at the next write.
func (c *Controller) readStatus(ctx context.Context) error {
	if c.st.statusRead {
		return nil
	}
	cm, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, status.ConfigMapName(c.cfg.Name), metav1.GetOptions{})
	c.st.statusRV, c.st.statusExists = "", false
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read status configmap: %w", err)
	default:
		c.st.statusRV, c.st.statusExists = cm.ResourceVersion, true
		st, err := status.Read(cm.Data)
		if err != nil {
			c.log.Info("the status will be rewritten", "reason", err.Error())
			break
		}
		c.st.status, c.st.statusText = st, cm.Data[status.Key]
	}
	c.st.statusRead = true
	return nil
}

// writeStatus applies the status ConfigMap unless it already holds st.
func (c *Controller) writeStatus(ctx context.Context, st *status.Status) error {
	text, err := st.Marshal()
	if err != nil {
		return err
	}
	if text == c.st.statusText {
		return nil
	}
	if err := c.fenced(); err != nil {
		return err
	}
	// The write holds only on the status as this term read or wrote it
	// (a server-side apply carrying its resourceVersion): a replica that
	// lost its lease can't overwrite the new leader's.
	written, err := c.applyConfigMap(ctx, status.ConfigMapName(c.cfg.Name), c.st.statusRV, nil, map[string]string{status.Key: text})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Written by another since: read it again before the next write.
			c.st.statusRead = false
		}
		return fmt.Errorf("write status configmap: %w", err)
	}
	c.metrics.APIWrites.WithLabelValues("apply", "configmaps").Inc()
	c.st.status, c.st.statusText, c.st.statusRV, c.st.statusExists = st, text, written.ResourceVersion, true
	return nil
}

// applyConfigMap server-side applies one of the controller's ConfigMaps
// (the status, the last good copy) with data and annotations, holding on
// rv: the API server refuses it (Conflict) when the object's
// resourceVersion is no longer rv. An empty rv applies unconditionally
// (the object is not there yet).
func (c *Controller) applyConfigMap(ctx context.Context, name, rv string, annotations, data map[string]string) (*corev1.ConfigMap, error) {
	apply := applycorev1.ConfigMap(name, c.cfg.Namespace).
		WithLabels(map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}).
		WithData(data)
	if annotations != nil {
		apply = apply.WithAnnotations(annotations)
	}
	if rv != "" {
		apply = apply.WithResourceVersion(rv)
	}
	return c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: c.cfg.FieldManager, Force: true})
}
