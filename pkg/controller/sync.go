package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// state is what the worker remembers between syncs of one term.
type state struct {
	// applied is the last decision delivered: kept (and restored on
	// drift) while the document is invalid. nil before the term has
	// delivered anything.
	applied *decide.Decision
	// secrets are the current document's secret values, scrubbed from
	// every message.
	secrets []string
	// status is the status last written (or read), and statusText its
	// JSON; a status with the same JSON is not written again. status is
	// nil when none was read or written yet; statusRead is set once the
	// term looked. statusRV is the status ConfigMap's resourceVersion as
	// read or written ("" when there is none): every write carries it, so
	// a replica that lost its lease can't overwrite the new leader's.
	status       *status.Status
	statusText   string
	statusRead   bool
	statusRV     string
	statusExists bool
	// admissionWarned is the reason of the last AdmissionNotGuarding
	// Event, "" while admission guards the ConfigMap.
	admissionWarned string
	// warned is the problem list of the last Warning Event, so the same
	// problems are not announced on every resync.
	warned string
	// readLive is set after the term's first successful read of the
	// ConfigMap. That first read goes to the API server, not the cache: a
	// term often begins right after an outage.
	readLive bool
	// rollout is what the rollout reports already announced: NACKs by
	// proxy (with their message) for the tracked version, and the
	// unreachable istiod instances.
	rollout rolloutSeen
	// lastGoodRead is set once the term read the stored last good
	// document, and lastGood is its data (nil for none); lastGoodHash is
	// the set hash it was stored for, lastGoodRV its resourceVersion, and
	// lastGoodProblem what is wrong with it ("" when nothing is).
	lastGoodRead    bool
	lastGood        map[string]string
	lastGoodHash    string
	lastGoodRV      string
	lastGoodProblem string
	// halfApplied says the last delivery failed part-way through a
	// canary phase's transition: what it wrote and what failed.
	// phaseFailed says the last delivery of a canary rollout's set failed:
	// it is retried whatever the API server said.
	halfApplied string
	phaseFailed bool
	// fence says the writes of this delivery are fenced by the status.
	fence bool
	// membersWarned is the member clusters the last MemberNotReached
	// Event named, with their errors ("" when every member was reached).
	membersWarned string
	// stages is the rollout across clusters (stages.go).
	stages stagesState
	// canary is the rollout's state (canary.go).
	canary canaryState
	// blamed are the blames announced by an Event (blame.go).
	blamed map[string]bool
}

// Sync reads the ConfigMap, decides the desired EnvoyFilters, converges
// the live ones to them and reports.
func (c *Controller) Sync(ctx context.Context) (err error) {
	start := time.Now()
	result := "unchanged"
	defer func() {
		if err != nil {
			result = "error"
			c.metrics.ReconcileErrors.Inc()
		}
		c.metrics.Reconciles.WithLabelValues(result).Inc()
		c.metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	}()
	if err := c.readStatus(ctx); err != nil {
		return err
	}
	cm, err := c.configMap(ctx)
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return fmt.Errorf("read configmap: %w", err)
	}

	in := decide.Input{Missing: missing, PruneOnDelete: c.cfg.PruneOnDelete}
	if !missing {
		in.Data = cm.Data
	}
	if c.st.applied != nil {
		in.Applied = c.st.applied.Applied()
	}
	// Read at most once a term (lastGoodData remembers it): asked when the
	// term starts on an invalid document or without one.
	in.LastGood = func() (map[string]string, error) { return c.lastGoodData(ctx) }
	if !missing {
		in.Rollout = c.rolloutInput(ctx, cm)
	}
	d, err := decide.Decide(c.renderer, in)
	if err != nil {
		return err
	}
	// A rollout across clusters: the stage stepper decides, not Direct's
	// judgement of the whole fleet (Decide leaves such a document's set
	// as it is). An invalid document keeps the last plan.
	staged := !missing && d.Valid() && d.Policy.Staged()
	if !missing && d.Valid() && !staged {
		c.st.stages = stagesState{recordRead: true}
	}
	if staged && d.Source == decide.Document {
		if err := c.stepStages(ctx, d); err != nil {
			return err
		}
	}
	if d.Valid() && !missing {
		c.st.secrets = d.Secrets
	}
	if !d.Valid() {
		result = "invalid"
	}
	// An invalid document with nothing to keep delivers nothing: the live
	// EnvoyFilters are the last good state.
	writes, err := c.deliver(ctx, d)
	c.st.phaseFailed = err != nil && d.Rollout != nil && d.Policy.Enabled()
	switch {
	case err != nil:
		if len(writes) > 0 && d.Rollout != nil && d.Policy.Enabled() {
			// Some objects of the transition were written, others not:
			// each proxy still holds one version of every item (a pair
			// changes one copy per item), but the phase is half-applied
			// until the rest is written. Retried with backoff.
			c.st.halfApplied = fmt.Sprintf("the transition to set %s is half-applied: %s; then %v", render.SetHash(d.Set), strings.Join(writes, "; "), err)
			c.event(cm, corev1.EventTypeWarning, "HalfApplied", "%s; retrying", c.st.halfApplied)
		}
	case d.Source == decide.Document || d.Source == decide.LastGood || d.Source == decide.Pruned ||
		d.Source == decide.Canary || d.Source == decide.RolledBack || d.Source == decide.Held:
		if c.st.halfApplied != "" {
			c.event(cm, corev1.EventTypeNormal, "Completed", "the transition to set %s is complete: %s", render.SetHash(d.Set), strings.Join(writes, "; "))
			c.st.halfApplied = ""
		} else if c.st.applied == nil && len(writes) > 0 && d.Rollout != nil && d.Policy.Enabled() && c.inPhase() {
			// The term's first delivery found the phase's EnvoyFilters
			// half-written (a leader that stopped mid-transition).
			c.event(cm, corev1.EventTypeWarning, "HalfApplied", "found the canary phase's EnvoyFilters half-applied at the start of this leadership term, and completed them: %s", strings.Join(writes, "; "))
		}
		c.st.applied = &d
		c.afterStep(cm, d)
	case d.Rollout != nil && d.Rollout.Hold:
		c.afterStep(cm, d)
	}
	if len(writes) > 0 && result != "invalid" {
		result = "applied"
	}
	if missing {
		return c.reportDeleted(ctx, d, writes, err)
	}
	if rerr := c.report(ctx, cm, d, writes, err); rerr != nil {
		return rerr
	}
	// After the status: the copy is for the next start. During a canary
	// phase, and until its promotion is confirmed, the copy stays the
	// stable document: it is what a restart rolls back to. A copy that
	// can't be written is an error, retried, and the status says so.
	if d.Source == decide.Document && (d.Rollout == nil || d.Rollout.Promote) && c.stagesComplete(staged) {
		if err := c.storeLastGood(ctx, cm, d.Candidate); err != nil {
			if !errors.Is(err, errNotLeading) {
				c.event(cm, corev1.EventTypeWarning, "LastGoodNotStored", "the last good copy %s could not be written, so a roll back would restore an older set: %v", LastGoodName(c.cfg.Name), err)
			}
			return err
		}
	}
	if staged && d.Source == decide.Document {
		c.stagesStored(d)
	}
	if d.Deliver() {
		// A member the set did not reach is retried with backoff: one
		// that comes back converges without an edit.
		return c.membersErr()
	}
	return nil
}

// deliver hands d to the sink, unless this replica no longer leads. Under
// a canary rollout the first write is fenced by the status: an update of the status ConfigMap with the content and the
// resourceVersion this term last read or wrote, which changes nothing but
// is refused (Conflict) once another replica wrote the status since. A
// replica that lost its lease mid-sync so touches no proxy.
func (c *Controller) deliver(ctx context.Context, d decide.Decision) ([]string, error) {
	if !d.Deliver() {
		return nil, nil
	}
	if err := c.fenced(); err != nil {
		return nil, err
	}
	// A canary rollout's writes are fenced by the status (converge).
	c.st.fence = d.Rollout != nil && d.Policy.Enabled()
	targets, _, _ := c.members.snapshot()
	var look sync.WaitGroup
	if t := c.cfg.Rollout; t != nil && len(targets) == 0 && c.st.stages.plan == nil {
		// Which pushes istiod sent before the set reached it: none of them
		// carries it (over MCP the publisher, which serves the set, tells
		// the tracker too; the first to tell it reads). istiod's store is
		// read while the set is written, not before: the look's time is
		// taken first. With members, each cluster's istiods are read as
		// its own part is written.
		look.Go(t.StartDelivering(ctx, d.Set, rollout.ScopeOf(d.Set, c.cfg.RootNamespace)))
	}
	writes, err := decide.Deliver(ctx, c.sink, d)
	look.Wait()
	return writes, err
}

// fenceStatus checks, by a write that changes nothing, that the status is
// still what this term last read or wrote.
func (c *Controller) fenceStatus(ctx context.Context) error {
	if !c.st.statusExists || c.st.statusText == "" {
		return nil
	}
	written, err := c.applyConfigMap(ctx, status.ConfigMapName(c.cfg.Name), c.st.statusRV, nil, map[string]string{status.Key: c.st.statusText})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			c.st.statusRead = false
			return fmt.Errorf("the status was written by another replica since this one read it, so this one no longer leads: %w", err)
		}
		return fmt.Errorf("fence on the status configmap: %w", err)
	}
	c.st.statusRV = written.ResourceVersion
	return nil
}

// configMap reads the global ConfigMap: from the API server on the term's
// first sync, from the informer cache after.
func (c *Controller) configMap(ctx context.Context) (*corev1.ConfigMap, error) {
	if c.st.readLive {
		return c.configMaps.ConfigMaps(c.cfg.Namespace).Get(c.cfg.Name)
	}
	cm, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, c.cfg.Name, metav1.GetOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		c.st.readLive = true
	}
	return cm, err
}

// reportDeleted reports a sync that found the ConfigMap gone: its
// EnvoyFilters are kept (by default), or were removed (PruneOnDelete).
func (c *Controller) reportDeleted(ctx context.Context, d decide.Decision, writes []string, deliverErr error) error {
	if deliverErr != nil {
		return deliverErr
	}
	st := status.New(status.ConfigMapDeleted)
	st.Sink = c.cfg.Sink
	st.Message = "the ConfigMap is gone; the EnvoyFilters are kept (run with --prune-on-delete to remove them)"
	switch {
	case d.Source == decide.Pruned:
		st.Message = "the ConfigMap is gone; the EnvoyFilters were removed (--prune-on-delete)"
		c.metrics.ManagedFilters.Set(0)
	case c.st.applied != nil:
		st.Applied = c.appliedSet(c.st.applied)
	case c.st.status != nil:
		st.Applied = c.st.status.Applied
	}
	if len(writes) > 0 {
		c.log.Info("ConfigMap deleted", "source", string(d.Source), "writes", writes)
	}
	return c.writeStatus(ctx, st)
}

// kubeSink is the kube sink: EnvoyFilter objects in the home cluster and
// in every member (clusters.go).
type kubeSink struct{ c *Controller }

func (k kubeSink) Deliver(ctx context.Context, set []*envoyfilter.Object) ([]string, error) {
	return k.c.deliverClusters(ctx, set)
}

// converge makes the live managed EnvoyFilters of cluster t equal to
// desired and says what it wrote. It writes nothing when they already
// are.
func (c *Controller) converge(ctx context.Context, t *clusterTarget, desired []*envoyfilter.Object) ([]string, error) {
	planned, err := c.planFor(t, desired)
	if err != nil {
		return nil, err
	}
	if len(planned) > 0 && c.st.fence {
		if err := c.fenceStatus(ctx); err != nil {
			return nil, err
		}
		c.st.fence = false // once per delivery, before its first write
	}
	return c.write(ctx, t, planned)
}

// planFor is what converging cluster t to desired writes.
func (c *Controller) planFor(t *clusterTarget, desired []*envoyfilter.Object) ([]plan.Write, error) {
	live, err := t.live()
	if err != nil {
		return nil, err
	}
	return plan.Writes(desired, live), nil
}

// write makes the planned writes in cluster t, and says what it wrote.
// It touches nothing but t's state, so clusters are written at once.
func (c *Controller) write(ctx context.Context, t *clusterTarget, planned []plan.Write) ([]string, error) {
	var writes []string
	for _, w := range planned {
		switch w.Action {
		case plan.Create, plan.Update:
			if err := c.fenced(); err != nil {
				return writes, err
			}
			var body []byte
			var err error
			if w.Live != nil && w.Live.ResourceVersion != "" {
				// The update holds only on the object as this replica saw
				// it: a write of another (a new leader) fences this one.
				body, err = json.Marshal(withResourceVersion{Object: w.Desired, Metadata: versioned{w.Desired.Metadata, w.Live.ResourceVersion}})
			} else {
				body, err = json.Marshal(w.Desired)
			}
			if err != nil {
				return writes, fmt.Errorf("encode envoyfilter %s: %w", w.Key, err)
			}
			force := true
			applied, err := t.istio.NetworkingV1alpha3().EnvoyFilters(w.Namespace()).Patch(ctx, w.Name(),
				"application/apply-patch+yaml", body, metav1.PatchOptions{FieldManager: c.cfg.FieldManager, Force: &force})
			if err != nil {
				return writes, fmt.Errorf("apply envoyfilter %s: %w", w.Key, err)
			}
			c.metrics.APIWrites.WithLabelValues("apply", "envoyfilters").Inc()
			t.wrote(w.Key, w.Action == plan.Update, applied)
		case plan.Delete:
			if err := c.fenced(); err != nil {
				return writes, err
			}
			uid, rv := w.Live.UID, w.Live.ResourceVersion
			pre := &metav1.Preconditions{UID: &uid}
			if rv != "" {
				pre.ResourceVersion = &rv
			}
			err := t.istio.NetworkingV1alpha3().EnvoyFilters(w.Namespace()).Delete(ctx, w.Name(), metav1.DeleteOptions{Preconditions: pre})
			switch {
			case apierrors.IsNotFound(err):
				// Gone already: deleted by us a moment ago (the cache
				// hasn't seen it yet) or by someone else.
				continue
			case err != nil:
				return writes, fmt.Errorf("delete envoyfilter %s: %w", w.Key, err)
			}
			c.metrics.APIWrites.WithLabelValues("delete", "envoyfilters").Inc()
			t.deleted(w.Key)
		}
		writes = append(writes, w.Action.Past()+" "+w.Key)
	}
	return writes, nil
}

// withResourceVersion is an EnvoyFilter's apply body with the
// resourceVersion it must still have.
type withResourceVersion struct {
	*envoyfilter.Object
	Metadata versioned `json:"metadata"`
}

type versioned struct {
	envoyfilter.Metadata
	ResourceVersion string `json:"resourceVersion"`
}

// olderThan reports whether the cache's resourceVersion cache is older than
// rv. Kubernetes resourceVersions are opaque, but the API server's are
// etcd revisions, integers that grow with every write (the mutation cache
// relies on the same); when either does not parse, the cache is taken as
// not older, and a create may then be applied twice (harmless under
// server-side apply).
func olderThan(cache, rv string) bool {
	c, err1 := strconv.ParseUint(cache, 10, 64)
	r, err2 := strconv.ParseUint(rv, 10, 64)
	return err1 == nil && err2 == nil && c < r
}
