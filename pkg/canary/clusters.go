package canary

import (
	"fmt"
	"github.com/globalconfig/globalconfig/envoyfilter"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// The rollout across clusters (rollout.clusters): one change, from the set
// every config cluster held (From) to the document's set (To), goes to the
// clusters in ordered stages. A stage's clusters get To only once every
// earlier stage passed: every proxy of its clusters ACKed To (the
// tracker's answers from every istiod of the cluster), continuously for
// minSuccessTime, and, with rollout.analysis, their traffic was judged at
// the end of that bake. A cluster fails on a NACK, on broken traffic, or
// when it has not passed by its stage's progressDeadline (an unreachable
// cluster, an istiod that does not answer, a proxy still pending: fail
// closed). Up to maxFailures failed clusters are each given their
// previous set back and the rollout goes on; one more, and every cluster
// the rollout reached gets its previous set back, and the later stages
// never get the change.
//
// As Step, StepClusters is pure: the controller reads the members, the
// tracker and the traffic, calls it, delivers to each cluster the set
// ClusterOutput.Hold names, and stores the ClusterRecord in the status so
// that a restart or another leader continues where it was.
//
// Inside each cluster the change goes Direct (every proxy at once), or,
// under strategy Canary, to the canaries first: the stage in progress has
// two parts (StagePhase). In the first (StageCanaries) its clusters hold
// their previous set paired with the change's canary copies, so only
// their proxies labelled LABEL=true have the change; the part passes when
// every cluster of the stage has, continuously for bakeTime, canaryAcks of
// its canaries ACKed with the canary copy, every changed item proven on
// one of them, and (with analysis) its canaries' traffic judged. In the
// second (StageWhole) the stage's clusters hold the change paired with
// itself, and the stage is judged as under Direct. Every cluster's set is
// then paired by the label (ClusterOutput.Label), the stages before and
// after included, as a canary policy pairs a single cluster's.

// Bounds and defaults of the rollout across clusters.
const (
	// MaxStages bounds the stages: each may take up to progressDeadline
	// (at most 3h), so 16 stages can keep one change in flight for two
	// days, longer than anyone watches a rollout; and the status lists
	// every stage, within its size bound.
	MaxStages = 16
	// MaxClusterNames bounds the names in all the stages: the record in
	// the status lists each one, with its failure, and the tracker asks
	// every istiod of every cluster every few seconds.
	MaxClusterNames = 64
	// DefaultProgressDeadline is a stage's longest life by default.
	DefaultProgressDeadline = 10 * time.Minute
	// MinProgressDeadline leaves time for a push to reach the proxies
	// and for the tracker to read their answers (it asks every few
	// seconds).
	MinProgressDeadline = 10 * time.Second
	// MaxProgressDeadline is the canary phase's own ceiling.
	MaxProgressDeadline = MaxPhaseTimeout
	// MaxMinSuccessTime is the bake time's own ceiling.
	MaxMinSuccessTime = MaxBakeTime
	// MinAnalysisWindow is the shortest minSuccessTime with analysis:
	// a stage's traffic is judged over minSuccessTime, and a window of
	// 0s judges none.
	MinAnalysisWindow = MinBakeTime
	// MaxReasonLength bounds a failure's reason in the record (a NACK
	// quotes Envoy, one line per listener).
	MaxReasonLength = 400
	// MaxClusterRecordBytes bounds a ClusterRecord as JSON for the
	// largest rollout (64 clusters of 63-character names, every one
	// failed or warned with the longest reason): it sits in the status
	// ConfigMap beside the rollout status (rollout.MaxBytes, 48 KiB)
	// and the canary record, well under the ConfigMap's 1 MiB.
	MaxClusterRecordBytes = 64 << 10
)

// Staged reports whether p rolls a change out across clusters.
func (p Policy) Staged() bool { return len(p.Clusters) > 0 }

// SuccessTime is minSuccessTime, its default (0s) filled in.
func (p Policy) SuccessTime() time.Duration {
	if p.MinSuccessTime == nil {
		return 0
	}
	return p.MinSuccessTime.Duration
}

// Deadline is progressDeadline, its default filled in.
func (p Policy) Deadline() time.Duration {
	if p.ProgressDeadline == nil {
		return DefaultProgressDeadline
	}
	return p.ProgressDeadline.Duration
}

// validateStages adds the problems of the keys of the rollout across
// clusters to errs (Validate calls it): the ones a document shows
// without knowing the clusters.
func (p Policy) validateStages(errs *fielderr.List) {
	if !p.Staged() {
		for _, k := range []struct {
			key string
			set bool
		}{
			{"minSuccessTime", p.MinSuccessTime != nil},
			{"progressDeadline", p.ProgressDeadline != nil},
			{"maxFailures", p.MaxFailures != 0},
		} {
			if k.set {
				errs.Addf(k.key, "applies to a rollout across clusters only, and clusters names none: set clusters or remove it")
			}
		}
		return
	}
	if p.Enabled() {
		// Inside each stage the canaries come first, judged by their ACKs
		// of the canary copy for bakeTime; coverage (which needs a
		// precheck of the fleet) and phaseTimeout (progressDeadline bounds
		// each part of a stage) are a single cluster's.
		if p.Coverage != "" {
			errs.Addf("coverage", "applies to a canary rollout in one cluster only: with clusters each cluster's canaries must hold the canary copy of every changed item, and no kind or release is checked; remove coverage, or clusters")
		}
		if p.PhaseTimeout != nil {
			errs.Addf("phaseTimeout", "applies to a canary rollout in one cluster only: with clusters progressDeadline bounds each part of a stage (its canaries, then the whole stage); remove phaseTimeout, or clusters")
		}
		if d := p.Deadline(); d >= MinProgressDeadline && d <= MaxProgressDeadline && p.Bake() >= MinBakeTime && p.Bake() <= MaxBakeTime && d < p.Bake() {
			errs.Addf("progressDeadline", "is %s%s, shorter than bakeTime %s: every stage's canaries would fail before they could pass", d, defaulted(p.ProgressDeadline == nil), p.Bake())
		}
	}
	if p.RollbackOn == AllNACK {
		errs.Addf("rollbackOn", "is %s, which a rollout across clusters can't follow: a stage passes only when every proxy of its clusters ACKed, so a cluster fails at its first NACK (%s); remove rollbackOn", AllNACK, AnyNACK)
	}
	if n := len(p.Clusters); n > MaxStages {
		errs.Addf("clusters", "has %d stages, at most %d: each may take up to progressDeadline, and the status lists every one; put more clusters in each stage", n, MaxStages)
	}
	first := map[string]string{}
	total := 0
	for i, stage := range p.Clusters {
		if len(stage) == 0 {
			errs.Addf(fmt.Sprintf("clusters[%d]", i), "is an empty stage: name at least one cluster in it, or remove it")
		}
		for j, name := range stage {
			total++
			path := fmt.Sprintf("clusters[%d][%d]", i, j)
			if err := envoyfilter.ValidateClusterName(name); err != nil {
				errs.Addf(path, "%v", err)
				continue
			}
			if at, dup := first[name]; dup {
				errs.Addf(path, "names %s again (first at %s): a cluster is in one stage only", name, at)
				continue
			}
			first[name] = path
		}
	}
	if total > MaxClusterNames {
		errs.Addf("clusters", "names %d clusters, at most %d: the status lists each one", total, MaxClusterNames)
	}
	if p.Analysis != nil && p.SuccessTime() < MinAnalysisWindow {
		errs.Addf("minSuccessTime", "is %s, and analysis judges a stage's traffic over minSuccessTime: with analysis it must be at least %s", p.SuccessTime(), MinAnalysisWindow)
	}
	if d, s := p.Deadline(), p.SuccessTime(); d >= MinProgressDeadline && d <= MaxProgressDeadline && s <= MaxMinSuccessTime && d < s {
		if p.ProgressDeadline != nil {
			errs.Addf("progressDeadline", "is %s, shorter than minSuccessTime %s: every stage would fail before it could pass", d, s)
		} else {
			errs.Addf("minSuccessTime", "is %s, longer than progressDeadline (default %s): every stage would fail before it could pass; set progressDeadline to at least %s", s, d, s)
		}
	}
}

func defaulted(d bool) string {
	if d {
		return " (the default)"
	}
	return ""
}

// ValidateClusters refuses the names of clusters that are not among known
// (the home cluster and the members, as the controller knows them), with
// paths relative to the section ("clusters[1][0]") and the known names
// listed, sorted. The controller and the webhook call it with the
// clusters they know; Validate can't, as a document doesn't know them.
func (p Policy) ValidateClusters(known []string) error {
	var errs fielderr.List
	sorted := slices.Clone(known)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	list := strings.Join(sorted, ", ")
	if list == "" {
		list = "none"
	}
	for i, stage := range p.Clusters {
		for j, name := range stage {
			if !slices.Contains(sorted, name) {
				errs.Addf(fmt.Sprintf("clusters[%d][%d]", i, j), "names cluster %q, which is neither the home cluster nor a member; the known clusters are %s", name, list)
			}
		}
	}
	return errs.Err()
}

// Stages are p's stages as a rollout follows them: the names of known
// clusters only (a stage left empty is dropped), and an implicit last
// stage of the known clusters that no stage names, sorted. Without
// clusters, one stage of every known cluster.
func (p Policy) Stages(known []string) [][]string {
	named := map[string]bool{}
	var out [][]string
	for _, stage := range p.Clusters {
		var s []string
		for _, name := range stage {
			if slices.Contains(known, name) && !named[name] {
				s = append(s, name)
			}
			named[name] = true
		}
		if len(s) > 0 {
			out = append(out, s)
		}
	}
	var rest []string
	for _, name := range known {
		if !named[name] && !slices.Contains(rest, name) {
			rest = append(rest, name)
		}
	}
	if len(rest) > 0 {
		slices.Sort(rest)
		out = append(out, rest)
	}
	return out
}

// ClusterPhase is where a rollout across clusters stands.
type ClusterPhase string

// The phases.
const (
	// Progressing: a stage is in progress (Record.Stage).
	Progressing ClusterPhase = "Progressing"
	// Complete: every stage passed; every cluster holds To but those
	// that failed within maxFailures, which hold their previous set.
	Complete ClusterPhase = "Complete"
	// ClustersRolledBack: more clusters failed than maxFailures allows;
	// every cluster holds its previous set, and the document is rejected
	// until it changes.
	ClustersRolledBack ClusterPhase = "RolledBack"
)

// StagePhase is the part of the stage in progress under strategy Canary.
type StagePhase string

// The parts of a stage.
const (
	// StageCanaries: the stage's clusters hold their previous set with
	// the change's canary copies: only their proxies labelled LABEL=true
	// have the change.
	StageCanaries StagePhase = "Canaries"
	// StageWhole: the stage's canaries passed, and every proxy of its
	// clusters has the change.
	StageWhole StagePhase = "Whole"
)

// ClusterRecord is one rollout across clusters, kept in the status beside
// the canary record and read back after a restart or by a new leader. Its
// stages and settings are fixed when it starts: an edit that changes no
// EnvoyFilter (To stays) continues it as it began.
type ClusterRecord struct {
	Phase ClusterPhase `json:"phase"`
	// Document is the hash of the document that started the rollout.
	Document string `json:"document"`
	// From is the set the clusters held before (the last good set), To
	// the document's set.
	From string `json:"from"`
	To   string `json:"to"`
	// Previous are the clusters whose set before the rollout is not From,
	// with the hash of the one they held: a cluster an interrupted
	// rollout's passed stage had reached (its set), or one that failed an
	// earlier rollout within maxFailures (the set it was given back).
	Previous map[string]string `json:"previous,omitempty"`
	// Stages are the stages as resolved when the rollout started (the
	// implicit last stage included); a cluster that became known later
	// joins the last stage if it has not started, else a stage of its own
	// after it. Stage is the index of the stage in progress (len(Stages)
	// once Complete).
	Stages [][]string `json:"stages"`
	Stage  int        `json:"stage"`
	// Started is when the rollout began, StageStarted when the stage in
	// progress began (progressDeadline counts from it), Passing, for each
	// cluster of it, when it was first seen passing (every proxy ACKed,
	// every istiod answered) without a break since (its minSuccessTime
	// counts from it), Passed when each stage before the one in progress
	// passed, Ended when the rollout completed or was rolled back.
	Started      time.Time            `json:"started"`
	StageStarted time.Time            `json:"stageStarted"`
	Passing      map[string]time.Time `json:"passing,omitempty"`
	Passed       []time.Time          `json:"passed,omitempty"`
	Ended        *time.Time           `json:"ended,omitempty"`
	// The policy the rollout follows, as it was when it started.
	MinSuccessTime   string `json:"minSuccessTime"`
	ProgressDeadline string `json:"progressDeadline"`
	MaxFailures      int    `json:"maxFailures"`
	Analysis         bool   `json:"analysis,omitempty"`
	Insufficient     string `json:"insufficientTraffic,omitempty"`
	// Label is, under strategy Canary, the canary label: every cluster's
	// set is paired by it, and inside each stage the change reaches the
	// proxies labelled LABEL=true first. Needed is canaryAcks (per
	// cluster), BakeTime how long a cluster's canaries must have ACKed
	// before the stage's other proxies get the change. All three are
	// empty for a rollout that goes Direct inside each cluster.
	Label    string `json:"label,omitempty"`
	Needed   string `json:"needed,omitempty"`
	BakeTime string `json:"bakeTime,omitempty"`
	// StagePhase is, with Label, the part of the stage in progress;
	// CanariesPassed when its canaries passed and every proxy of its
	// clusters was given the change (that part's progressDeadline counts
	// from it).
	StagePhase     StagePhase `json:"stagePhase,omitempty"`
	CanariesPassed *time.Time `json:"canariesPassed,omitempty"`
	// Failed are the clusters that failed, in order, with why.
	Failed []ClusterFailure `json:"failed,omitempty"`
	// Warnings are what a stage passed without judging (too little
	// traffic, analysis.insufficientTraffic Promote), one per cluster.
	Warnings []string `json:"warnings,omitempty"`
	// Why says in one line where the rollout stands, naming the clusters
	// that hold it up, or why it ended as it did.
	Why string `json:"why"`
}

// ClusterFailure is one cluster that failed a rollout.
type ClusterFailure struct {
	Cluster string `json:"cluster"`
	// Stage is the index of its stage (0 for the first; messages count
	// stages from 1).
	Stage  int       `json:"stage"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// SuccessTime is the record's minSuccessTime.
func (r *ClusterRecord) SuccessTime() time.Duration {
	d, _ := time.ParseDuration(r.MinSuccessTime)
	return d
}

// Deadline is the record's progressDeadline (the default for a record
// without one).
func (r *ClusterRecord) Deadline() time.Duration {
	if d, err := time.ParseDuration(r.ProgressDeadline); err == nil && d > 0 {
		return d
	}
	return DefaultProgressDeadline
}

// Bake is the record's canaries' bake time (0 without a label).
func (r *ClusterRecord) Bake() time.Duration {
	d, _ := time.ParseDuration(r.BakeTime)
	return d
}

// needed is how many of n canaries of one cluster must ACK.
func (r *ClusterRecord) needed(n int) int {
	var a Acks
	tag := "!!int"
	if strings.HasSuffix(r.Needed, "%") {
		tag = "!!str"
	}
	if a.DecodeScalar(tag, r.Needed) != nil {
		a = Acks{} // every one
	}
	return a.Needed(n)
}

// canaryPart reports whether the stage in progress is in its canary
// part.
func (r *ClusterRecord) canaryPart() bool {
	return r.Phase == Progressing && r.Label != "" && r.StagePhase == StageCanaries
}

// partStarted is when the part of the stage in progress began: its
// progressDeadline counts from it.
func (r *ClusterRecord) partStarted() time.Time {
	if r.Label != "" && r.StagePhase == StageWhole && r.CanariesPassed != nil {
		return *r.CanariesPassed
	}
	return r.StageStarted
}

// Canaried reports whether cluster holds, under r, its previous set
// (Holds) with the change's canary copies: a cluster of the stage in
// progress during its canary part. Followers (MCP servers) deliver by it.
func (r *ClusterRecord) Canaried(cluster string) bool {
	return r.canaryPart() && r.stageOf(cluster) == r.Stage && !r.failed(cluster)
}

// previous is the set cluster held before the rollout.
func (r *ClusterRecord) previous(cluster string) string {
	if h, ok := r.Previous[cluster]; ok {
		return h
	}
	return r.From
}

// failed reports whether cluster failed the rollout.
func (r *ClusterRecord) failed(cluster string) bool {
	return slices.ContainsFunc(r.Failed, func(f ClusterFailure) bool { return f.Cluster == cluster })
}

// stageOf is the index of cluster's stage, -1 for none.
func (r *ClusterRecord) stageOf(cluster string) int {
	for i, s := range r.Stages {
		if slices.Contains(s, cluster) {
			return i
		}
	}
	return -1
}

// Holds is the hash of the set cluster must hold under r: To once its
// stage started (every stage, once Complete), else, and after a roll back
// or its own failure, the set it held before. During a stage's canary
// part its clusters hold the set before, with To's canary copies
// (Canaried). A cluster r does not list
// holds From while r is in progress (its stage is added at the next
// step), and To once r is Complete (a member added later is brought to
// the current set). Followers (MCP servers) deliver by it.
func (r *ClusterRecord) Holds(cluster string) string {
	switch {
	case r.Phase == ClustersRolledBack || r.failed(cluster):
		return r.previous(cluster)
	case r.Phase == Complete:
		return r.To
	case r.Canaried(cluster):
		return r.previous(cluster)
	}
	if i := r.stageOf(cluster); i >= 0 && i <= r.Stage {
		return r.To
	}
	return r.previous(cluster)
}

// Reached is when cluster's stage started (the start of the rollout for
// the first stage), and false while it has not: when the cluster was
// given To (under a canary policy, to its canaries), unless it failed
// since (then it holds its previous set).
func (r *ClusterRecord) Reached(cluster string) (time.Time, bool) {
	i := r.stageOf(cluster)
	switch {
	case i < 0 || i > r.Stage || i > len(r.Passed):
		return time.Time{}, false
	case i == 0:
		return r.Started, true
	}
	return r.Passed[i-1], true
}

// settled is the set cluster holds that the rollout r proved or did not
// touch: To in a stage that passed (every stage, once Complete), the set
// before otherwise. A rollout that starts over starts from it.
func (r *ClusterRecord) settled(cluster string) string {
	switch {
	case r.Phase == ClustersRolledBack || r.failed(cluster):
		return r.previous(cluster)
	case r.Phase == Complete:
		return r.To
	}
	if i := r.stageOf(cluster); i >= 0 && i < r.Stage {
		return r.To
	}
	return r.previous(cluster)
}

// ClusterAnswers are the rollout tracker's counts for the proxies of one
// cluster (those reported by its istiods) about that cluster's part of
// To as delivered.
type ClusterAnswers struct {
	// The proxies the set reaches, by state (Selected is all of them).
	Selected, Synced, Pending, Stale, NACKed int
	// Complete says every istiod of the cluster answered (and at least
	// one was found); Unanswered names those that did not.
	Complete   bool
	Unanswered []string
	// NACKs are proxies that NACKed, with Envoy's words (a few).
	NACKs []Answer
}

// ClusterTraffic is the traffic gate's word on one cluster's proxies
// (rollout.analysis), judged by the same rules as a canary phase's
// (ClusterTrafficOf): the cluster's proxies since they received To
// against the proxies still on the previous set.
type ClusterTraffic struct {
	// Known: the figures were read; Why says what failed when not.
	Known bool
	Why   string
	// Failed: the cluster broke the rules; Insufficient: its proxies
	// answered fewer than analysis.minRequests.
	Failed, Insufficient bool
	// Verdict says it in one line.
	Verdict string
}

// ClusterTrafficOf judges v (the cluster's proxies since they received To
// as Canary, a sample of those still on the previous set as Stable) under
// a, by the rules of a canary phase; the verdict names the cluster's
// proxies "its proxies".
func ClusterTrafficOf(v TrafficVerdict, a *Analysis) *ClusterTraffic {
	if !v.Known {
		return &ClusterTraffic{Why: v.Why}
	}
	t := v.report(a, "its proxies", "the previous set's proxies")
	return &ClusterTraffic{Known: true, Failed: t.Failed, Insufficient: t.Insufficient, Verdict: t.Verdict}
}

// ClusterState is what the controller knows of one cluster now.
type ClusterState struct {
	// Reachable says its API server answered the last request; Error
	// says why not (or the last error of a write).
	Reachable bool
	Error     string
	// Delivered says the cluster holds its part of To: its API server
	// took every write of it.
	Delivered bool
	// Answers are the tracker's counts for its proxies about To; nil
	// when the tracker has none.
	Answers *ClusterAnswers
	// Traffic is the traffic gate's word on it (with analysis); nil
	// when there are no figures. During a stage's canary part, the word
	// on its canaries.
	Traffic *ClusterTraffic
	// Canaries are, during a stage's canary part, its istiods' answers
	// about its canaries (CanariesOf); nil when the tracker has none.
	Canaries *CanaryAnswers
}

// CanaryAnswers are what the istiods of one cluster say of its canaries
// during a stage's canary part: the proxies labelled LABEL=true that a
// changed item reaches.
type CanaryAnswers struct {
	// Canaries counts them; ACKed those Synced whose configuration (as
	// istiod holds it for them) has the canary copy of every changed item
	// that reaches them; NACKed those that refused the canary set, the
	// first of them in NACKs.
	Canaries, ACKed, NACKed int
	NACKs                   []Answer
	// NotACKed names canaries that did not ACK with the canary copy,
	// with why (a few).
	NotACKed []string
	// Unproven are the changed items no ACKed canary holds the canary
	// copy of: a change no canary received is never given to the rest.
	Unproven []string
	// Unlabelled are the cluster's proxies the set reaches that carry no
	// canary label: they get none of globalconfig's EnvoyFilters.
	Unlabelled []string
}

// CanariesOf judges one cluster's canaries for a stage's canary part:
// canaries are the proxies its istiods report labelled label=true (with
// the markers of their configuration), prev the cluster's set before the
// change and to the change's; root is Istio's root namespace.
func CanariesOf(canaries []Seen, unlabelled []string, prev, to []*envoyfilter.Object, label, root string) *CanaryAnswers {
	changed := Changed(prev, to)
	objs := changedObjects(prev, to, changed)
	cand := byItem(to)
	out := &CanaryAnswers{Unlabelled: slices.Clone(unlabelled)}
	proven := map[string]bool{}
	for _, p := range canaries {
		need := required(objs, p.FleetProxy, label, root)
		if len(need) == 0 {
			continue // no changed item reaches it
		}
		out.Canaries++
		why := ""
		switch p.State {
		case StateNACKed:
			out.NACKed++
			if len(out.NACKs) < MaxRecordedNACKs {
				out.NACKs = append(out.NACKs, Answer{Name: p.Name, State: p.State, Message: p.Message})
			}
			why = "NACKed"
		case StateSynced:
			var missing []string
			for _, item := range need {
				if p.Markers[item] != markerOf(cand, item) {
					missing = append(missing, item)
				}
			}
			if len(missing) > 0 {
				why = "ACKed a configuration without the canary copy of " + strings.Join(missing, ", ")
				break
			}
			out.ACKed++
			for _, item := range need {
				proven[item] = true
			}
		default:
			why = strings.ToLower(p.State)
		}
		if why != "" && len(out.NotACKed) < 5 {
			out.NotACKed = append(out.NotACKed, p.Name+" ("+why+")")
		}
	}
	for _, item := range changed {
		if !proven[item] {
			out.Unproven = append(out.Unproven, item)
		}
	}
	return out
}

// ClusterInput is what one step of a rollout across clusters is decided
// from.
type ClusterInput struct {
	Policy Policy
	// Record is the rollout across clusters at hand (from the status);
	// nil when there is none.
	Record *ClusterRecord
	// Document is the hash of the document; From the hash of the set in
	// force before it (the last good set, "" when nothing was ever
	// delivered); To the hash of the document's set.
	Document string
	From, To string
	// Known are the clusters: the home cluster and the members.
	Known []string
	// Now is the clock the bake and the deadline are measured on.
	Now time.Time
	// Clusters is what the controller knows of each known cluster; a
	// cluster missing here is one it knows nothing of yet (fail closed:
	// it does not pass), as at the start of a leadership term before the
	// first delivery: its stamp in Passing is kept, so that a bake a
	// restart interrupts for one sync goes on from the first stamp when
	// the cluster is known again and still passing.
	Clusters map[string]ClusterState
}

// ClusterOutput is what a step decided.
type ClusterOutput struct {
	// Record is the rollout to store (nil when a change went to every
	// cluster at once: nothing to protect, or no stages).
	Record *ClusterRecord
	// Hold is, for each known cluster, the hash of the set it must hold
	// now: To, or the set it held before (ClusterRecord.Holds). A cluster
	// never holds To before its stage started. When the controller can't
	// build the set of a hash for a cluster, it writes nothing there and
	// keeps what the cluster has.
	Hold map[string]string
	// Label, under strategy Canary, is the canary label every cluster's
	// set is paired by (canary.Pair); "" for sets delivered as they are.
	// Canaried are the clusters whose set is paired with To's canary
	// copies (Pair(Hold, To)) rather than with itself, sorted: those of
	// the stage in progress during its canary part.
	Label    string
	Canaried []string
	// Phase is the rollout's phase (Complete for a change that went
	// everywhere at once).
	Phase ClusterPhase
	// Message says where the rollout stands, naming the clusters that
	// hold it up.
	Message string
	// StageStarted says this step started a stage (Stage names it);
	// Failed are the clusters that failed in this step; Ended says this
	// step completed or rolled back the rollout. Complete says the
	// document's set is in force as far as the rollout goes: store it as
	// the last good one.
	StageStarted bool
	Stage        int
	Failed       []ClusterFailure
	Ended        bool
	Complete     bool
	// CanariesPassed says this step ended the canary part of the stage
	// in progress: every proxy of its clusters is given the change.
	CanariesPassed bool
}

// Holding lists the clusters Hold gives the set hash, sorted.
func (o ClusterOutput) Holding(hash string) []string {
	var out []string
	for c, h := range o.Hold {
		if h == hash {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// StepClusters decides one sync of a rollout across clusters.
//
//   - No stages in the policy, or, without a record, nothing delivered
//     before (From "") or nothing changed (From == To): every cluster
//     holds To at once, and no record is kept. With a record of another
//     change, a return to From goes stage by stage like any change.
//   - A record of To: it goes on (a rolled back one stays rolled back
//     while the document is the same; the same set from an edited
//     document is a new attempt).
//   - A new To, a record of another change at hand: the new rollout
//     starts over from the clusters' settled sets: a cluster whose stage
//     of the old rollout passed keeps that rollout's set as its previous
//     one (it proved it); every other cluster goes back to the set it
//     held before, until the new rollout's stage reaches it.
func StepClusters(in ClusterInput) ClusterOutput {
	known := slices.Clone(in.Known)
	slices.Sort(known)
	known = slices.Compact(known)
	r := in.Record
	if r != nil && r.To == in.To && (r.Phase != ClustersRolledBack || r.Document == in.Document) && in.Policy.Staged() {
		rec := copyRecord(r)
		rec.Stage = max(rec.Stage, 0) // a record edited by hand
		if rec.Phase != Progressing {
			// An ended rollout's sets are paired as the policy says now.
			out := outputOf(rec, known, ClusterOutput{})
			out.Label = labelOfPolicy(in.Policy)
			return out
		}
		return progress(in, rec, known)
	}
	if !in.Policy.Staged() || (r == nil && (in.From == "" || in.From == in.To)) {
		out := ClusterOutput{Hold: map[string]string{}, Phase: Complete, Complete: true, Label: labelOfPolicy(in.Policy)}
		for _, c := range known {
			out.Hold[c] = in.To
		}
		out.Message = "the change went to every cluster at once"
		return out
	}
	now := in.Now.UTC()
	rec := &ClusterRecord{
		Phase: Progressing, Document: in.Document, From: in.From, To: in.To,
		Stages: in.Policy.Stages(known), Started: now, StageStarted: now,
		MinSuccessTime: in.Policy.SuccessTime().String(), ProgressDeadline: in.Policy.Deadline().String(),
		MaxFailures: in.Policy.MaxFailures, Analysis: in.Policy.Analysis != nil,
	}
	if a := in.Policy.Analysis; a != nil {
		rec.Insufficient = string(a.OnInsufficient())
	}
	if p := in.Policy; p.Enabled() {
		rec.Label, rec.Needed, rec.BakeTime, rec.StagePhase = p.Label(), p.CanaryAcks.String(), p.Bake().String(), StageCanaries
	}
	if r != nil {
		for _, c := range known {
			if h := r.settled(c); h != in.From {
				if rec.Previous == nil {
					rec.Previous = map[string]string{}
				}
				rec.Previous[c] = h
			}
		}
	}
	out := progress(in, rec, known)
	if rec.Phase == Progressing {
		out.StageStarted, out.Stage = true, rec.Stage
	}
	return out
}

func copyRecord(r *ClusterRecord) *ClusterRecord {
	c := *r
	c.Stages = make([][]string, len(r.Stages))
	for i, s := range r.Stages {
		c.Stages[i] = slices.Clone(s)
	}
	c.Passed = slices.Clone(r.Passed)
	c.Failed = slices.Clone(r.Failed)
	c.Warnings = slices.Clone(r.Warnings)
	c.Passing = maps.Clone(r.Passing)
	c.Previous = maps.Clone(r.Previous)
	return &c
}

// labelOfPolicy is the label p pairs sets by: its canary label under
// strategy Canary, else none.
func labelOfPolicy(p Policy) string {
	if p.Enabled() {
		return p.Label()
	}
	return ""
}

// outputOf fills o's holdings and phase from rec.
func outputOf(rec *ClusterRecord, known []string, o ClusterOutput) ClusterOutput {
	o.Record, o.Phase, o.Message, o.Label = rec, rec.Phase, rec.Why, rec.Label
	o.Hold = make(map[string]string, len(known))
	for _, c := range known {
		o.Hold[c] = rec.Holds(c)
		if rec.Canaried(c) {
			o.Canaried = append(o.Canaried, c)
		}
	}
	o.Complete = rec.Phase == Complete
	return o
}

// adopt adds the known clusters rec does not list: to its last stage when
// that has not started, else to a stage of their own after it.
func adopt(rec *ClusterRecord, known []string) {
	var extra []string
	for _, c := range known {
		if rec.stageOf(c) < 0 {
			extra = append(extra, c)
		}
	}
	if len(extra) == 0 {
		return
	}
	if last := len(rec.Stages) - 1; last > rec.Stage {
		rec.Stages[last] = append(rec.Stages[last], extra...)
		slices.Sort(rec.Stages[last])
		return
	}
	rec.Stages = append(rec.Stages, extra)
}

// verdict is one cluster's standing in its stage.
type verdict struct {
	cluster string
	fail    string // why it failed now ("" for not)
	wait    string // why it has not passed ("" once it passes)
}

// judgeCluster is what st says of cluster for a stage that is not baked
// yet: failed (a NACK, broken traffic), waiting (why), or passing.
func judgeCluster(name string, st ClusterState, ok bool) verdict {
	v := verdict{cluster: name}
	a := st.Answers
	switch {
	case !ok:
		v.wait = "the controller knows nothing of it yet"
		return v
	case a != nil && a.NACKed > 0:
		first, msg := "a proxy", ""
		if len(a.NACKs) > 0 {
			first, msg = "proxy "+a.NACKs[0].Name, ": "+oneLine(a.NACKs[0].Message)
		}
		v.fail = fmt.Sprintf("%s rejected the change%s (%d of %d proxies NACKed)", first, msg, a.NACKed, a.Selected)
		return v
	case st.Traffic != nil && st.Traffic.Known && st.Traffic.Failed:
		v.fail = "its proxies broke traffic: " + st.Traffic.Verdict
		return v
	case !st.Reachable:
		why := st.Error
		if why == "" {
			why = "no answer"
		}
		v.wait = "unreachable: " + oneLine(why)
	case !st.Delivered:
		v.wait = "its API server has not taken the change yet"
		if st.Error != "" {
			v.wait += ": " + oneLine(st.Error)
		}
	case a == nil:
		v.wait = "its istiods have not answered for the change yet"
	case !a.Complete:
		v.wait = "not every istiod of it answered"
		if len(a.Unanswered) > 0 {
			v.wait += " (" + names(a.Unanswered) + ")"
		}
	case a.Selected == 0:
		v.wait = "its istiods report no proxy the change reaches, so none ACKed it"
	case a.Synced < a.Selected:
		v.wait = fmt.Sprintf("%d of %d proxies ACKed (%d pending, %d stale)", a.Synced, a.Selected, a.Pending, a.Stale)
	}
	return v
}

// judgeCanaries is what st says of cluster in its stage's canary part,
// before its canaries baked: failed (a canary's NACK, or any proxy's of
// the canary set; its canaries broke traffic), waiting (why: as
// judgeCluster for what it can't know, and until canaryAcks of its
// canaries ACKed with the canary copy and every changed item is proven
// on one), or passing. A cluster with no canary the change reaches
// waits, as a single cluster's canary phase is held until one exists:
// the change is never given to a stage's other proxies untested.
func judgeCanaries(name string, st ClusterState, ok bool, rec *ClusterRecord) verdict {
	v := verdict{cluster: name}
	c := st.Canaries
	switch {
	case ok && c != nil && c.NACKed > 0:
		first, msg := "a canary", ""
		if len(c.NACKs) > 0 {
			first, msg = "canary "+c.NACKs[0].Name, ": "+oneLine(c.NACKs[0].Message)
		}
		v.fail = fmt.Sprintf("%s rejected the change%s (%d of %d canaries NACKed)", first, msg, c.NACKed, c.Canaries)
		return v
	case ok && st.Traffic != nil && st.Traffic.Known && st.Traffic.Failed:
		v.fail = "its canaries broke traffic: " + st.Traffic.Verdict
		return v
	}
	if v = judgeCluster(name, st, ok); v.fail != "" {
		v.fail = strings.Replace(v.fail, "rejected the change", "rejected the canary set", 1)
		return v
	}
	if v.wait != "" && (st.Answers == nil || !st.Answers.Complete || !st.Delivered || !st.Reachable) {
		return v
	}
	v.wait = ""
	need := 0
	if c != nil {
		need = rec.needed(c.Canaries)
	}
	switch {
	case c == nil:
		v.wait = "its istiods have not said which of its proxies are canaries yet"
	case len(c.Unlabelled) > 0:
		v.wait = fmt.Sprintf("%s no %s label and get none of globalconfig's EnvoyFilters; label every proxy %s=true or =false", proxies(c.Unlabelled), rec.Label, rec.Label)
	case c.Canaries == 0:
		v.wait = fmt.Sprintf("no proxy labelled %s=true that the change reaches: its canaries can't be given the change first, so the stage's other proxies are not either", rec.Label)
	case c.ACKed < need:
		v.wait = fmt.Sprintf("%d of %d canaries ACKed the canary copy, %d needed", c.ACKed, c.Canaries, need)
		if len(c.NotACKed) > 0 {
			v.wait += "; not ACKed: " + strings.Join(c.NotACKed, ", ")
		}
	case len(c.Unproven) > 0:
		v.wait = "no canary ACKed a configuration holding the canary copy of " + strings.Join(c.Unproven, ", ")
	}
	return v
}

// progress is one step of a rollout in progress: judge the stage's
// clusters, fail them, roll back beyond the budget, pass the stage (and
// start the next one: one stage per step, as its clusters need the
// delivery first), complete.
func progress(in ClusterInput, rec *ClusterRecord, known []string) ClusterOutput {
	now := in.Now.UTC()
	out := ClusterOutput{}
	adopt(rec, known)
	fail := func(c, why string) {
		f := ClusterFailure{Cluster: c, Stage: rec.Stage, At: now, Reason: clip(oneLine(why), MaxReasonLength)}
		rec.Failed = append(rec.Failed, f)
		out.Failed = append(out.Failed, f)
		delete(rec.Passing, c)
	}
	for rec.Stage < len(rec.Stages) {
		canaries := rec.canaryPart()
		bake, baking, what := rec.SuccessTime(), "every proxy ACKed", "minSuccessTime"
		if canaries {
			bake, baking, what = rec.Bake(), "its canaries ACKed", "bakeTime"
		}
		live := rec.live(known)
		var waits []verdict
		var warnings []string
		for _, c := range live {
			st, ok := in.Clusters[c]
			v := judgeCluster(c, st, ok)
			if canaries {
				v = judgeCanaries(c, st, ok, rec)
			}
			switch {
			case v.fail != "":
				fail(c, v.fail)
				continue
			case v.wait != "":
				if ok {
					delete(rec.Passing, c)
				}
				waits = append(waits, v)
				continue
			}
			if rec.Passing == nil {
				rec.Passing = map[string]time.Time{}
			}
			since, seen := rec.Passing[c]
			if !seen {
				since = now
				rec.Passing[c] = now
			}
			if now.Sub(since) < bake {
				waits = append(waits, verdict{cluster: c, wait: fmt.Sprintf("%s since %s; baking until %s (%s %s)",
					baking, since.Format(time.RFC3339), since.Add(bake).Format(time.RFC3339), what, bake)})
				continue
			}
			if !rec.Analysis {
				continue
			}
			// Baked: its traffic is judged now, over the bake.
			switch t := st.Traffic; {
			case t == nil || !t.Known:
				why := "the traffic gate has no figures for it yet"
				if t != nil && t.Why != "" {
					why = "its traffic can't be judged: " + oneLine(t.Why)
				}
				if canaries {
					why = strings.Replace(why, "its traffic", "its canaries' traffic", 1)
				}
				waits = append(waits, verdict{cluster: c, wait: why + "; nothing passes on missing figures"})
			case t.Insufficient && rec.Insufficient == string(RollBackWithout):
				fail(c, "too little traffic to judge "+them3(canaries)+": "+t.Verdict+" (analysis.insufficientTraffic RollBack)")
			case t.Insufficient:
				warnings = append(warnings, clip(c+": "+them4(canaries)+" on the ACKs alone, too little traffic to judge "+them3(canaries)+": "+t.Verdict, MaxReasonLength))
			}
		}
		if len(rec.Failed) > rec.MaxFailures {
			return rollBack(rec, known, now, out)
		}
		if len(waits) > 0 {
			if now.Before(rec.partStarted().Add(rec.Deadline())) {
				rec.Why = waiting(rec, waits)
				return outputOf(rec, known, out)
			}
			for _, v := range waits {
				what := "did not pass"
				if canaries {
					what = "its canaries did not pass"
				}
				fail(v.cluster, fmt.Sprintf("%s within progressDeadline %s: %s", what, rec.Deadline(), v.wait))
			}
			if len(rec.Failed) > rec.MaxFailures {
				return rollBack(rec, known, now, out)
			}
			// Every cluster left failed within the budget: the stage is
			// over, and the rollout goes on.
		}
		rec.Warnings = append(rec.Warnings, warnings...)
		if canaries && len(rec.live(known)) > 0 {
			// The stage's canaries passed: every proxy of its clusters
			// gets the change now, judged from the next step on, once
			// delivered.
			t := now
			rec.StagePhase, rec.CanariesPassed, rec.Passing = StageWhole, &t, nil
			out.CanariesPassed, out.Stage = true, rec.Stage
			rec.Why = fmt.Sprintf("stage %d of %d (%s): its canaries passed %s; every proxy of its clusters is given the change", rec.Stage+1, len(rec.Stages),
				names(rec.Stages[rec.Stage]), now.Format(time.RFC3339))
			if len(rec.Failed) > 0 {
				rec.Why += "; " + failedSummary(rec)
			}
			return outputOf(rec, known, out)
		}
		rec.Passed = append(rec.Passed, now)
		rec.Stage++
		rec.StageStarted, rec.Passing, rec.CanariesPassed = now, nil, nil
		if rec.Label != "" {
			rec.StagePhase = StageCanaries
		}
		if rec.Stage < len(rec.Stages) && len(rec.live(known)) > 0 {
			// The next stage's clusters get To now (their canaries first,
			// under a canary policy): they are judged from the next step
			// on, once delivered.
			out.StageStarted, out.Stage = true, rec.Stage
			rec.Why = fmt.Sprintf("stage %d of %d (%s) started %s: its clusters are given the change", rec.Stage+1, len(rec.Stages),
				names(rec.Stages[rec.Stage]), now.Format(time.RFC3339))
			if rec.Label != "" {
				rec.Why += fmt.Sprintf(", their proxies labelled %s=true first", rec.Label)
			}
			if len(rec.Failed) > 0 {
				rec.Why += "; " + failedSummary(rec)
			}
			return outputOf(rec, known, out)
		}
		// A stage with no cluster left to judge (every one gone or
		// failed) passes at once.
	}
	t := now
	rec.Phase, rec.Ended, rec.Passing, rec.StagePhase, rec.CanariesPassed = Complete, &t, nil, "", nil
	rec.Why = fmt.Sprintf("every stage passed (%d)", len(rec.Stages))
	if len(rec.Failed) > 0 {
		rec.Why += fmt.Sprintf("; %s, within maxFailures %d: they hold the set they held before", failedSummary(rec), rec.MaxFailures)
	}
	out.Ended = true
	return outputOf(rec, known, out)
}

// live are the clusters of the stage in progress still judged: known,
// and not failed.
func (r *ClusterRecord) live(known []string) []string {
	var out []string
	for _, c := range r.Stages[r.Stage] {
		if slices.Contains(known, c) && !r.failed(c) {
			out = append(out, c)
		}
	}
	return out
}

// rollBack ends rec: every cluster gets the set it held before.
func rollBack(rec *ClusterRecord, known []string, now time.Time, out ClusterOutput) ClusterOutput {
	t := now
	rec.Phase, rec.Ended, rec.Passing = ClustersRolledBack, &t, nil
	last := rec.Failed[len(rec.Failed)-1]
	var never []string
	for _, s := range rec.Stages[min(rec.Stage+1, len(rec.Stages)):] {
		never = append(never, s...)
	}
	rec.Why = fmt.Sprintf("cluster %s failed: %s; %d failed, more than maxFailures %d: every cluster the rollout reached was given its previous set back",
		last.Cluster, last.Reason, len(rec.Failed), rec.MaxFailures)
	if len(never) > 0 {
		rec.Why += "; never given the change: " + names(never)
	}
	out.Ended = true
	return outputOf(rec, known, out)
}

// waiting says why the stage in progress has not passed yet, naming
// the clusters that hold it up.
func waiting(rec *ClusterRecord, waits []verdict) string {
	parts := make([]string, 0, min(len(waits), 10)+1)
	for _, v := range waits[:min(len(waits), 10)] {
		parts = append(parts, v.cluster+": "+clip(v.wait, MaxReasonLength/2))
	}
	if len(waits) > 10 {
		parts = append(parts, fmt.Sprintf("and %d more", len(waits)-10))
	}
	part := ""
	if rec.canaryPart() {
		part = fmt.Sprintf(", its proxies labelled %s=true only,", rec.Label)
	}
	msg := fmt.Sprintf("stage %d of %d (%s)%s waits for %s; a cluster that has not passed fails at %s (progressDeadline %s)",
		rec.Stage+1, len(rec.Stages), names(rec.Stages[rec.Stage]), part, strings.Join(parts, "; "),
		rec.partStarted().Add(rec.Deadline()).Format(time.RFC3339), rec.Deadline())
	if len(rec.Failed) > 0 {
		msg += "; " + failedSummary(rec)
	}
	return msg
}

// them3 names what a stage's traffic gate judges: a cluster's canaries,
// or the cluster.
func them3(canaries bool) string {
	if canaries {
		return "its canaries"
	}
	return "it"
}

func them4(canaries bool) string {
	if canaries {
		return "its canaries passed"
	}
	return "passed"
}

// failedSummary names the failed clusters.
func failedSummary(rec *ClusterRecord) string {
	var cs []string
	for _, f := range rec.Failed {
		cs = append(cs, f.Cluster)
	}
	return fmt.Sprintf("failed: %s (%d of maxFailures %d)", names(cs), len(rec.Failed), rec.MaxFailures)
}

// clip cuts s to at most n bytes, at a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
