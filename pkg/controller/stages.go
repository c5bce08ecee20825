package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// stagesState is a rollout across clusters (rollout.clusters) as this
// term follows it: the record (kept in the status), the previous set
// (the last good one) and what the last step decided each cluster holds.
type stagesState struct {
	record     *canary.ClusterRecord
	recordRead bool
	// from is the set in force before the change: the stored last good
	// document's (stored only once a rollout completes).
	from *canary.Set
	// out is the last step's output; plan what each cluster is to hold
	// (cluster → set; under strategy Canary, paired by the label), nil
	// when the set goes to every cluster as is; planTo the hash of the
	// document's set the plan was made for.
	out    *canary.ClusterOutput
	plan   map[string]*canary.Set
	planTo string
	// analysis is the staged document's traffic gate (nil: none);
	// watching says the traffic gate follows a stage.
	analysis *canary.Analysis
	watching bool
}

// Clusters are the config clusters: the home cluster, then the members
// by name. Safe for concurrent use.
func (c *Controller) Clusters() []string { return c.known() }

// known are the config clusters: the home cluster, then the members.
func (c *Controller) known() []string {
	targets, _, _ := c.members.snapshot()
	out := []string{c.home.name}
	for _, t := range targets {
		out = append(out, t.name)
	}
	return out
}

// stepStages decides, for a valid staged document's decision d, which
// set each cluster holds now (canary.StepClusters), and keeps the plan
// for the delivery and the record for the status.
func (c *Controller) stepStages(ctx context.Context, d decide.Decision) error {
	ss := &c.st.stages
	if !ss.recordRead {
		if c.st.status != nil {
			ss.record = c.st.status.ClusterRollout
		}
		ss.recordRead = true
	}
	to := &canary.Set{Objects: d.Set, Hash: render.SetHash(d.Set)}
	if ss.from == nil {
		from, _, err := c.lastGoodSet(ctx)
		if err != nil {
			return err
		}
		ss.from = c.directStable(from)
	}
	fromHash := ""
	if ss.from != nil {
		fromHash = ss.from.Hash
	}
	if r := ss.record; r != nil && r.From != "" && r.From != fromHash {
		// The record's previous set is not the stored one: fail closed,
		// every cluster keeps what it has.
		ss.plan, ss.out = map[string]*canary.Set{}, &canary.ClusterOutput{Record: r, Phase: r.Phase,
			Message: "the rollout across clusters is held: its previous set " + r.From + " is not the stored last good one (" + orNone(fromHash) + "), so no cluster can be given it back"}
		return nil
	}
	ss.analysis = d.Policy.Analysis
	in := canary.ClusterInput{Policy: d.Policy, Record: ss.record, Document: d.Document, From: fromHash, To: to.Hash,
		Known: c.known(), Now: c.now(), Clusters: c.clusterStates(to)}
	out := canary.StepClusters(in)
	plan := map[string]*canary.Set{}
	for cluster, hash := range out.Hold {
		var base *canary.Set
		switch {
		case hash == to.Hash:
			base = to
		case ss.from != nil && hash == ss.from.Hash:
			base = ss.from
		default:
			// Another hash (a set an earlier rollout left a cluster
			// with): nothing is written there; the cluster keeps what it
			// has.
			continue
		}
		if out.Label == "" {
			plan[cluster] = base
			continue
		}
		// Under strategy Canary every cluster's set is a pair: its stable
		// copies hold base, its canary copies base too, or, during its
		// stage's canary part, the change. A cluster holding base paired
		// with itself is said to hold base (its status's set is the
		// applied one once it has it); one in a canary part holds the
		// pair's own hash.
		canaried := slices.Contains(out.Canaried, cluster)
		half := base
		if canaried {
			half = to
		}
		objs, err := canary.Pair(base.Objects, half.Objects, out.Label)
		if err != nil {
			return fmt.Errorf("pair the set of cluster %s by %s: %w", cluster, out.Label, err)
		}
		hash := base.Hash
		if canaried {
			hash = render.SetHash(objs)
		}
		plan[cluster] = &canary.Set{Objects: objs, Hash: hash}
	}
	ss.out, ss.record = &out, out.Record
	ss.plan, ss.planTo = plan, to.Hash
	c.watchStageTraffic()
	return nil
}

// stageCanaries says whether some cluster holds its stage's canary part:
// the tracker then reads the canaries' configuration for the canary
// copies.
func (c *Controller) stageCanaries() bool {
	out := c.st.stages.out
	return out != nil && len(out.Canaried) > 0
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// clusterStates is what the controller knows of each cluster for a
// stage step about the set to: its last delivery, and the tracker's
// answers about the set the cluster holds (during its stage's canary
// part, about its canaries too).
func (c *Controller) clusterStates(to *canary.Set) map[string]canary.ClusterState {
	targets, _, _ := c.members.snapshot()
	all := append([]*clusterTarget{c.home}, targets...)
	var r *rollout.Status
	if t := c.cfg.Rollout; t != nil {
		r = t.Status()
	}
	ss := &c.st.stages
	out := map[string]canary.ClusterState{}
	for _, t := range all {
		if t.set == "" && t.err == nil {
			// Nothing delivered there this term yet (a new leader, a new
			// member): known nothing of, it does not pass, and a bake it
			// was in keeps its stamp until the first delivery says more.
			continue
		}
		// The cluster holds what the last step planned for it, for this
		// very change (the change itself, or under strategy Canary its
		// pair; the canary part's during it).
		want := to.Hash
		if p, ok := ss.plan[t.name]; ok && ss.planTo == to.Hash && ss.out != nil && ss.out.Label != "" {
			want = p.Hash
		}
		s := canary.ClusterState{Reachable: t.err == nil && t.set != "", Delivered: t.err == nil && t.set == want}
		if t.err != nil {
			s.Error = c.scrub(t.err.Error())
		}
		if r != nil && r.Version == c.trackedVersion() {
			if m, ok := r.Member(t.name); ok {
				a := &canary.ClusterAnswers{Selected: m.Selected, Synced: m.Synced, Pending: m.Pending, Stale: m.Stale, NACKed: m.NACKed,
					Complete: m.Istiod > 0 && m.Unreachable == 0}
				for _, i := range r.Istiod {
					if (i.Cluster == t.name || (i.Cluster == "" && len(all) == 1)) && i.Error != "" {
						a.Unanswered = append(a.Unanswered, i.Name())
					}
				}
				for _, p := range r.Proxies {
					if p.State == rollout.NACKed && (p.Cluster == t.name || p.Cluster == "") && len(a.NACKs) < canary.MaxRecordedNACKs {
						a.NACKs = append(a.NACKs, canary.Answer{Name: p.Name, State: string(p.State), Message: p.Message})
					}
				}
				s.Answers = a
				s.Canaries = c.stageCanaryAnswers(r, t.name, to)
			}
		}
		if tr := c.stageTraffic(t.name); tr != nil {
			s.Traffic = tr
		}
		out[t.name] = s
	}
	return out
}

// stageCanaryAnswers are, for cluster name in its stage's canary part,
// its istiods' answers about its canaries: those the tracker reports
// labelled true, with the canary copies their configuration holds,
// judged against the change from the cluster's previous set; nil
// outside a canary part, or when the previous set is not known here
// (fail closed: the canaries are not judged).
func (c *Controller) stageCanaryAnswers(r *rollout.Status, name string, to *canary.Set) *canary.CanaryAnswers {
	ss := &c.st.stages
	rec := ss.record
	if rec == nil || rec.To != to.Hash || !rec.Canaried(name) || ss.planTo != to.Hash {
		return nil
	}
	var prev *canary.Set
	switch h := rec.Holds(name); {
	case ss.from != nil && h == ss.from.Hash:
		prev = ss.from
	case h == to.Hash:
		prev = to
	default:
		return nil
	}
	mine := func(cluster string) bool { return cluster == name || cluster == "" }
	var seen []canary.Seen
	for _, p := range r.Canaries {
		if mine(p.Cluster) {
			seen = append(seen, c.seen(p))
		}
	}
	var unlabelled []string
	for _, key := range r.Unlabelled {
		cluster, proxy, ok := strings.Cut(key, "/")
		if !ok {
			cluster, proxy = "", key
		}
		if mine(cluster) {
			unlabelled = append(unlabelled, proxy)
		}
	}
	return canary.CanariesOf(seen, unlabelled, forCluster(prev.Objects, name), forCluster(to.Objects, name), rec.Label, c.root())
}

// stageKey names the traffic watch of the stage in progress of r (and
// of its canary part).
func stageKey(r *canary.ClusterRecord) string {
	return fmt.Sprintf("clusters/%s/%s/%d%s", r.Document, r.To, r.Stage, r.StagePhase)
}

// stageTraffic is the traffic gate's word on cluster name while its
// stage is watched (rollout.analysis): the stage's proxies that took the
// change against those of the clusters still on the previous set, one
// verdict for the whole stage; nil when there is none.
func (c *Controller) stageTraffic(name string) *canary.ClusterTraffic {
	g, r := c.cfg.Traffic, c.st.stages.record
	if g == nil || r == nil || r.Phase != canary.Progressing || r.Stage >= len(r.Stages) || !slices.Contains(r.Stages[r.Stage], name) || c.st.stages.analysis == nil {
		return nil
	}
	res, ok := g.Result(stageKey(r))
	if !ok {
		return nil
	}
	v := canary.TrafficVerdict{Known: res.Canary.Read > 0, Since: res.Since, Canary: figures(res.Canary), Stable: figures(res.Stable)}
	if res.Canary.Read < res.Canary.Proxies && len(res.Errors) > 0 {
		v.Known = false
		v.Why = fmt.Sprintf("the statistics of %d of %d proxies of the stage could not be read: %s", res.Canary.Proxies-res.Canary.Read, res.Canary.Proxies, c.scrub(res.Errors[0]))
	}
	return canary.ClusterTrafficOf(v, c.st.stages.analysis)
}

// watchStageTraffic points the traffic gate at the stage in progress
// (rollout.analysis): its clusters' proxies that ACKed the change, and a
// sample of the proxies of the clusters still on the previous set. The
// proxies are those the rollout status lists (every one up to
// rollout.ListAll).
func (c *Controller) watchStageTraffic() {
	g, t, ss := c.cfg.Traffic, c.cfg.Rollout, &c.st.stages
	if g == nil || t == nil {
		return
	}
	r := ss.record
	if r == nil || r.Phase != canary.Progressing || r.Stage >= len(r.Stages) || ss.analysis == nil {
		if ss.watching {
			g.Watch(nil)
			ss.watching = false
		}
		return
	}
	st := t.Status()
	if st == nil {
		return
	}
	stage := r.Stages[r.Stage]
	w := &rollout.TrafficWatch{Key: stageKey(r)}
	var stable []string
	canaries := r.StagePhase == canary.StageCanaries && r.Label != ""
	for _, p := range st.Proxies {
		switch {
		case canaries && r.Canaried(p.Cluster) && p.Track == rollout.TrackCanary:
			// The canary part: the stage's canaries that took the canary
			// copies against every proxy still on the previous set, the
			// stage's other proxies included.
			if p.State == rollout.Synced {
				w.Canaries = append(w.Canaries, p.Key())
			}
		case !canaries && slices.Contains(stage, p.Cluster) && p.State == rollout.Synced:
			w.Canaries = append(w.Canaries, p.Key())
		case p.Cluster != "" && r.Holds(p.Cluster) != r.To:
			stable = append(stable, p.Key())
		}
	}
	w.Stable = rollout.StableSample(stable, rollout.MaxStableSample)
	g.Watch(w)
	ss.watching = true
}

// trackedVersion is the version the tracker follows, "" without one.
func (c *Controller) trackedVersion() string {
	if t := c.cfg.Rollout; t != nil {
		return t.Version()
	}
	return ""
}

// partFor is the set cluster name is to hold, and whether it is to be
// delivered at all: under a rollout across clusters the plan's, else set.
func (c *Controller) partFor(name string, set []*envoyfilter.Object) ([]*envoyfilter.Object, string, bool) {
	if plan := c.st.stages.plan; plan != nil {
		s, ok := plan[name]
		if !ok {
			return nil, "", false
		}
		return s.Objects, s.Hash, true
	}
	return set, render.SetHash(set), true
}

// clusterGeneration is, with members, what each cluster holds, for the
// tracker: each is judged against its own part (nil with no member).
func (c *Controller) clusterGeneration(set []*envoyfilter.Object) map[string]rollout.ClusterSet {
	targets, _, _ := c.members.snapshot()
	if len(targets) == 0 && c.st.stages.plan == nil {
		return nil
	}
	out := map[string]rollout.ClusterSet{}
	for _, t := range append([]*clusterTarget{c.home}, targets...) {
		objs, _, ok := c.partFor(t.name, set)
		if !ok {
			if t.heldSet == nil {
				continue
			}
			objs = t.heldSet
		}
		mine := forCluster(objs, t.name)
		out[t.name] = rollout.ClusterSet{Contents: rollout.ContentsOf(mine), Scope: rollout.ScopeOf(mine, c.root())}
	}
	return out
}

// stagedHeld says whether every cluster of the plan holds what it is to.
func (c *Controller) stagedHeld() bool {
	targets, _, _ := c.members.snapshot()
	for _, t := range append([]*clusterTarget{c.home}, targets...) {
		if s, ok := c.st.stages.plan[t.name]; ok && t.set != s.Hash {
			return false
		}
	}
	return true
}

// stagesComplete says whether a staged document's set may be stored as
// the last good one: its rollout across clusters completed and every
// cluster holds what the plan says. Always true for a document without
// stages.
func (c *Controller) stagesComplete(staged bool) bool {
	if !staged {
		return true
	}
	out := c.st.stages.out
	return out != nil && out.Complete && c.stagedHeld()
}

// stagesStored notes, after a sync of a staged document, that a stored
// last good copy is the document's set: the previous set of its next
// change. While the rollout is in progress, a sync is asked for again
// shortly: its bake and deadline pass without any event.
func (c *Controller) stagesStored(d decide.Decision) {
	ss := &c.st.stages
	if ss.out == nil {
		return
	}
	if c.stagesComplete(true) && c.st.lastGoodHash == render.SetHash(d.Candidate) {
		ss.from = &canary.Set{Objects: d.Candidate, Hash: c.st.lastGoodHash}
	}
	if ss.out.Phase == canary.Progressing {
		c.enqueueAfter(stagePoll)
	}
}

// stagePoll is how often a rollout across clusters is stepped while it
// is in progress.
const stagePoll = 2 * time.Second

// reportStages puts the rollout across clusters into the status (the
// record; RolledBack when it was rolled back, its one line in the
// message) and records an Event for each step that started a stage,
// failed a cluster or ended the rollout.
func (c *Controller) reportStages(cm *corev1.ConfigMap, st *status.Status) {
	ss := &c.st.stages
	st.ClusterRollout = ss.record
	out := ss.out
	if out == nil {
		return
	}
	switch {
	case st.State != status.Applied && st.State != status.NACKed:
	case out.Phase == canary.ClustersRolledBack:
		st.State, st.Message = status.RolledBack, out.Message
	case out.Message != "":
		st.Message = joinMessage(out.Message, st.Message)
	}
	for _, f := range out.Failed {
		c.event(cm, corev1.EventTypeWarning, "ClusterFailed", "cluster %s failed in stage %d: %s", f.Cluster, f.Stage+1, f.Reason)
	}
	if out.CanariesPassed && !out.Ended {
		c.event(cm, corev1.EventTypeNormal, "StageCanariesPassed", "stage %d: %s", out.Stage+1, out.Message)
	}
	switch {
	case out.Ended && out.Phase == canary.ClustersRolledBack:
		c.event(cm, corev1.EventTypeWarning, "RolledBack", "the rollout across clusters was rolled back: %s", out.Message)
	case out.Ended && out.Complete:
		c.event(cm, corev1.EventTypeNormal, "RolledOut", "the rollout across clusters is complete: %s", out.Message)
	case out.StageStarted:
		c.event(cm, corev1.EventTypeNormal, "StageStarted", "stage %d started: %s", out.Stage+1, out.Message)
	}
	// Each step's news is told once.
	out.Failed, out.Ended, out.StageStarted, out.CanariesPassed = nil, false, false, false
}

func joinMessage(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}
