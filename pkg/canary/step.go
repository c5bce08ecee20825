package canary

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Phase is where a rollout stands.
type Phase string

// The phases.
const (
	// Held: the change waits for its canary phase to start, which it
	// can't yet (Record.Waiting says why: a proxy without the label, no
	// canary the change reaches, a kind or release of proxy no canary
	// represents, an istiod that did not answer). Every proxy keeps the
	// set before the change; the checks run again on every sync, and the
	// phase starts when they pass, or is rolled back at its timeout.
	Held Phase = "Held"
	// InCanary: the change reaches the canary proxies only.
	InCanary Phase = "Canary"
	// Promoted: the canaries took the change; it reaches every proxy.
	// Until Record.Confirmed every proxy's answer to the promoted set is
	// watched, and a NACK rolls it back.
	Promoted Phase = "Promoted"
	// RolledBack: a canary NACKed the change, did not ACK it with the
	// canary copy within the bake time, or broke traffic (analysis); the
	// phase timed out; a proxy NACKed it after the promotion; or an
	// operator aborted it; or, with strategy Direct, the proxies NACKed
	// it (RollbackOn): every proxy has the previous set again, and the
	// document is rejected until it changes.
	RolledBack Phase = "RolledBack"
	// Kept (strategy Direct only): the proxies refused the set restored
	// after a roll back as well, so the refusal is not the change's; the
	// document's set is delivered again and kept until the document
	// changes.
	Kept Phase = "Kept"
)

// Record is one rollout: the status's "canary" object, read back after a
// restart. A canary rollout always has one; a Direct change has one only
// once the proxies refused it (a change they take leaves none).
type Record struct {
	// Strategy is the rollout's: Canary, or Direct for a Direct change
	// the proxies refused. Records of status version 1 have none: Canary.
	Strategy Strategy `json:"strategy,omitempty"`
	Phase    Phase    `json:"phase"`
	// Document is the hash of the document that started the rollout
	// (DocumentHash); Latest, when set, the document now in force for
	// it: a later edit that changed no EnvoyFilter continues the phase.
	Document string `json:"document"`
	Latest   string `json:"latest,omitempty"`
	// From is the hash of the set every proxy had before (the stable
	// set), To the hash of the document's set.
	From string `json:"from"`
	To   string `json:"to"`
	// Items are the items the change adds, changes or removes.
	Items []string `json:"items"`
	// Label is the canary label, Needed how many canaries must ACK,
	// BakeTime the bake time, PhaseTimeout the phase's longest life and
	// Coverage the canaries it needs (canary rollouts).
	Label        string `json:"label,omitempty"`
	Needed       string `json:"needed,omitempty"`
	BakeTime     string `json:"bakeTime,omitempty"`
	PhaseTimeout string `json:"phaseTimeout,omitempty"`
	Coverage     string `json:"coverage,omitempty"`
	// RollbackOn is a Direct rollout's rule (Policy.RollbackOn).
	RollbackOn RollbackOn `json:"rollbackOn,omitempty"`
	// Restored is, after a Direct roll back, what the proxies did with the
	// restored set, judged once: RestoredTaken (the roll back stands) or
	// RestoredRefused (phase Kept); empty until they answered.
	Restored string `json:"restored,omitempty"`
	// Started is when the rollout began (the edit was first decided on);
	// the phase timeout counts from it. Delivered is when the canary
	// copies were first delivered: the bake time counts from it, across
	// restarts and leaders. Ended is when it was promoted or rolled back;
	// Confirmed, after a promotion, when every proxy had answered for the
	// promoted set without a NACK (the last good copy advances then).
	Started   time.Time  `json:"started"`
	Delivered *time.Time `json:"delivered,omitempty"`
	Ended     *time.Time `json:"ended,omitempty"`
	Confirmed *time.Time `json:"confirmed,omitempty"`
	// Waiting says why the phase neither started nor ended yet when that
	// is not just the bake time: what it waits for.
	Waiting string `json:"waiting,omitempty"`
	// Message says why the rollout ended as it did, naming the proxy and
	// quoting Envoy on a NACK.
	Message string `json:"message,omitempty"`
	// Warning is what the promotion could not judge (too little traffic
	// for the traffic gate).
	Warning string `json:"warning,omitempty"`
	// By is "operator" when `globalconfig rollout promote` or `abort`
	// ended it.
	By string `json:"by,omitempty"`
	// Canaries are the canaries the phase judges, every one of them:
	// those known when it started and those that connected since, with
	// their answers as last seen. None is ever left out.
	Canaries []Answer `json:"canaries,omitempty"`
	// Traffic is the traffic gate's last figures (rollout.analysis).
	Traffic *Traffic `json:"traffic,omitempty"`
	// NACKs are, for a Direct rollout, the proxies that refused the set
	// the rollout ended on (the change; the restored set for Kept), with
	// Envoy's words, at most MaxRecordedNACKs; for a canary rollout rolled
	// back after its promotion, the proxies that refused the promoted set.
	NACKs []Answer `json:"nacks,omitempty"`
}

// Direct reports whether r is a Direct rollout's record.
func (r *Record) Direct() bool { return r.Strategy == Direct }

// ID names the rollout: its document and when it started.
func (r *Record) ID() string {
	return r.Document + "@" + strconv.FormatInt(r.Started.UnixMilli(), 10)
}

// Request is the AnnotationAction value asking a for the rollout r.
func (r *Record) Request(a Action) string { return string(a) + "/" + r.ID() }

// Requested is the action an AnnotationAction value asks for r, "" when
// it asks nothing of r.
func (r *Record) Requested(annotation string) Action {
	a, id, ok := strings.Cut(annotation, "/")
	if !ok || id != r.ID() || (Action(a) != ActionPromote && Action(a) != ActionAbort) {
		return ""
	}
	return Action(a)
}

// Of reports whether r is the rollout of the document doc (the one that
// started it, or the latest that continued it).
func (r *Record) Of(doc string) bool { return r.Document == doc || (r.Latest != "" && r.Latest == doc) }

// Bake is the record's bake time (0 when it has none).
func (r *Record) Bake() time.Duration {
	d, _ := time.ParseDuration(r.BakeTime)
	return d
}

// Timeout is the record's phase timeout: its own, else PhaseTimeoutFactor
// bake times (a record of an earlier release).
func (r *Record) Timeout() time.Duration {
	if d, err := time.ParseDuration(r.PhaseTimeout); err == nil && d > 0 {
		return d
	}
	return PhaseTimeoutFactor * r.Bake()
}

// Answer is one canary proxy's answer to the canary set.
type Answer struct {
	Name string `json:"name"`
	// State is the rollout state: Synced, Pending, Stale or NACKed; or
	// Unseen when no istiod asked reports the proxy now.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Received says istiod's configuration for the proxy holds the canary
	// copy of every changed item that reaches it: only a Synced canary
	// that received the change counts as having ACKed it.
	Received bool `json:"received,omitempty"`
}

// ACKed reports whether a counts as an ACK of the change.
func (a Answer) ACKed() bool { return a.State == StateSynced && a.Received }

// The states of an Answer that decide.
const (
	StateSynced  = "Synced"
	StateNACKed  = "NACKed"
	StatePending = "Pending"
	// StateUnseen: no istiod asked reports the proxy: it stopped,
	// crashed or disconnected, is connected to an istiod that can't be
	// asked (another revision's, one that did not answer), or was never
	// connected. It counts as not ACKed.
	StateUnseen = "Unseen"
)

// Set is a set of EnvoyFilters with its hash.
type Set struct {
	Objects []*envoyfilter.Object
	Hash    string
}

// Seen is what istiod says of one proxy the delivered set reaches.
type Seen struct {
	FleetProxy
	// State is the rollout state (Synced, Pending, Stale, NACKed).
	State   string
	Message string
	// Markers are the canary copies istiod's configuration for the proxy
	// holds: item → the content of the marker (MarkerKey); nil when it
	// was not read (the proxy is no canary, or not Synced yet).
	Markers map[string]string
}

// Verdict is what istiod says of the set delivered last: for a paired set
// what each canary (and each proxy the phase knows as one) answered and
// which proxies carry no canary label; for every set the count of the
// proxies it reaches by state, which a Direct rollout and the watch after
// a promotion are judged by. Known is false until istiod answered for
// the set.
type Verdict struct {
	Known bool
	// Canaries are the proxies istiod reports that carry the canary label
	// as true (every one of them), and Proxy finds any proxy it reports by
	// name (nil: none is known).
	Canaries []Seen
	Proxy    func(name string) (Seen, bool)
	// Silent are the proxies no istiod reports any more, by name, with
	// when they were last seen.
	Silent map[string]time.Time
	// Unlabelled are the proxies the set reaches that carry no canary
	// label.
	Unlabelled []string
	// Version is the hash of the set the answers are about: a change is
	// judged only by the answers about its own set.
	Version string
	// Since is when that set was delivered.
	Since time.Time
	// The proxies the set reaches, by state (all of them, listed or not).
	Synced, Pending, Stale, NACKed int
	// NACKs are the proxies that NACKed it, with Envoy's words (at most
	// MaxRecordedNACKs).
	NACKs []Answer
	// Partial says some istiod did not answer, or none was found: the
	// answers of its proxies are missing. Unreachable names them.
	Partial     bool
	Unreachable []string
}

// AnnotationAction on the global ConfigMap is an operator's request for
// the current canary rollout: "promote/ROLLOUT" or "abort/ROLLOUT",
// ROLLOUT naming the rollout (Record.ID), so a request never carries over
// to a later rollout, even of the same document. Only whoever may edit the global
// ConfigMap can set it; the controller's ServiceAccount only reads that
// ConfigMap. `globalconfig rollout promote` and `abort` set it.
const AnnotationAction = "globalconfig.io/rollout-action"

// Action is an operator's request for one rollout.
type Action string

// The actions.
const (
	ActionPromote Action = "promote"
	ActionAbort   Action = "abort"
)

// DefaultGrace is how long past a canary phase's timeout a follower still
// serves the phase's set as the record says: the elected controller ends
// every phase by its timeout, so a record older than that was left by a
// controller that no longer decides.
const DefaultGrace = 30 * time.Second

// Input is what one step is decided from.
type Input struct {
	Policy Policy
	// Document is the hash of the document's text; Candidate its set.
	Document  string
	Candidate Set
	// Stable is the set every proxy had before the change (the last
	// good one), when the caller knows it; nil when none is known. A
	// canary rollout uses it only when its hash is the one it needs, and
	// asks Resolve otherwise.
	Stable *Set
	// Resolve finds the set of the hash a canary rollout needs (the set
	// in force before a new change, or the one a phase started from):
	// from the last good copy, when it renders to that hash, or from the
	// EnvoyFilters the sinks hold, when their stable copies are exactly
	// it. Nil, with why, when no source is exact: the canary rollout then
	// holds (Output.Hold) and never promotes.
	Resolve func(hash, label string) (*Set, string)
	// InForce is the hash of the set every proxy has outside a phase (the
	// stable set a new change starts from); "" when nothing was ever
	// delivered (the first set goes out directly). When it is "" and
	// Stable is set, Stable's hash is taken.
	InForce string
	// Record is the current rollout, nil when there is none.
	Record *Record
	// Verdict is istiod's word on the set delivered last.
	Verdict Verdict
	// Traffic is the traffic gate's figures for the phase of Record.
	Traffic TrafficVerdict
	// Action is an operator's request for Record's document, "" for none.
	Action Action
	// Fleet, when set, is asked before a canary phase starts which
	// proxies the change reaches, with their labels, kinds and versions
	// (precheck): nil without a rollout tracker, and a phase then starts
	// unchecked.
	Fleet func(label string) Fleet
	// Root is Istio's root namespace: an EnvoyFilter there reaches every
	// proxy.
	Root string
	// Now stamps Started and Ended and is the clock the bake time and the
	// phase timeout are measured on (against the record's Delivered and
	// Started, which another leader may have stamped).
	Now time.Time
	// Tracking says the proxies' answers are tracked (the controller has
	// a rollout tracker), so a Direct change is judged by Verdict: rolled
	// back when the proxies refuse it (Policy.RollbackOn), and stored as
	// the last good document (Promote) only once they took it. Without
	// it a Direct change is promoted as it is delivered.
	Tracking bool
	// Follow makes the step decide nothing of its own: it delivers what
	// Record, written by the one process that decides (the elected
	// controller), says of this document, and holds what it delivers
	// while Record is not about this document yet. MCP publishers, one
	// per istiod, follow the elected controller this way.
	Follow bool
	// Grace is how long past a phase's timeout a follower trusts an
	// in-canary record (DefaultGrace when 0).
	Grace time.Duration
	// PairedBy is the canary label the sinks' set is paired by ("" for a
	// set that is not paired, or none yet). Pairing by another label (the
	// policy turned on, or canaryLabel changed) gives every proxy without
	// that label nothing: it waits until Fleet says every proxy carries
	// it, holding what the sinks have.
	PairedBy string
	// LeaderPairing, for a follower, is how the elected controller's set
	// is paired (its status's applied.pairedBy: a label, or "" for a set
	// that is not paired); LeaderKnown says it is known. A follower with
	// no record about its document serves the document's set paired as
	// the leader's is, so that a pairing the leader holds back (a label
	// some proxy lacks) is held back everywhere.
	LeaderPairing string
	LeaderKnown   bool
	// Blame, when the controller names the EnvoyFilters proxies refuse
	// (it runs with --envoy), is what that blame says of the set the
	// answers are about; nil without a blame: a refused Direct change is
	// then rolled back as the answers alone say.
	Blame *Blame
}

// Output is what to deliver, and the rollout record to keep.
type Output struct {
	// Deliver is the set every sink is to hold.
	Deliver []*envoyfilter.Object
	// Record is the rollout (nil when the change went out directly).
	Record *Record
	// Promote says the document's set is now the stable set: store the
	// document as the last good one.
	Promote bool
	// Hold says to deliver nothing and keep what the sinks hold: the set
	// to deliver is not known here. Why says why.
	Hold bool
	Why  string
	// Started and Ended say the step began or ended a canary phase; Held
	// that it began holding one; Confirmed that a promotion was
	// confirmed.
	Started, Ended, Held, Confirmed bool
	// Direct is the phase a Direct change reached in this step: Promoted
	// (the proxies took it), RolledBack or Kept; empty when the step
	// decided nothing of the kind.
	Direct Phase
	// Waiting says why a Direct change is neither rolled back nor
	// promoted yet when the answers can't tell (an istiod did not
	// answer, no proxy answered); empty otherwise.
	Waiting string
	// Distrusted says a follower no longer serves an in-canary record as
	// it says, and why (the record outlived its phase timeout).
	Distrusted string
}

// Step decides one sync of a valid document: go direct, hold, start or
// continue a canary phase, promote, or roll back.
func Step(in Input) (Output, error) {
	if in.Follow {
		return follow(in)
	}
	r := in.Record
	if r != nil && r.Direct() && r.Document == in.Document && r.To == in.Candidate.Hash {
		return directRecorded(in), nil
	}
	if in.Policy.Enabled() {
		return canaryStep(in)
	}
	if in.Stable == nil || in.Stable.Hash == in.Candidate.Hash {
		// Nothing to protect, or nothing changed: direct.
		return Output{Deliver: in.Candidate.Objects, Record: keep(r, in), Promote: true}, nil
	}
	return direct(in), nil
}

// inForce is the hash of the set in force outside a phase, "" for none.
func (in Input) inForce() string {
	if in.InForce == "" && in.Stable != nil {
		return in.Stable.Hash
	}
	return in.InForce
}

// repairing says why set, paired by label, can't be delivered yet: the
// sinks' set is paired by another label (or none), and some proxy it
// reaches carries no label (or istiod can't say); "" when it can.
func (in Input) repairing(label string, set []*envoyfilter.Object) string {
	if in.PairedBy == label || in.Fleet == nil || in.inForce() == "" {
		return ""
	}
	f := in.Fleet(label)
	if !f.Known {
		return "the EnvoyFilters are to be paired by " + label + ", and not every istiod said which proxies carry it (" + f.Why + "): every proxy keeps what it has"
	}
	if why := unlabelledIn(f, label, set, in.Root); why != "" {
		return "the EnvoyFilters are to be paired by " + label + ": " + why + "; until then every proxy keeps what it has"
	}
	return ""
}

// resolve is the set of hash, or why it is not known.
func (in Input) resolve(hash string) (*Set, string) {
	if in.Stable != nil && in.Stable.Hash == hash {
		return in.Stable, ""
	}
	if in.Resolve != nil {
		return in.Resolve(hash, in.Policy.Label())
	}
	if in.Stable != nil {
		return nil, fmt.Sprintf("the stored last good set is %s, not %s", in.Stable.Hash, hash)
	}
	return nil, fmt.Sprintf("the set %s is not known here", hash)
}

// hold is the output of a step that can't know what to deliver.
func hold(r *Record, why string) Output {
	return Output{Record: r, Hold: true, Why: why}
}

// continuing is r when it is the rollout of this change under this policy
// (a copy when a later edit that changed no EnvoyFilter continues it),
// else nil.
func continuing(r *Record, in Input) *Record {
	if r == nil || r.Direct() || r.To != in.Candidate.Hash || r.Label != in.Policy.Label() {
		return nil
	}
	if r.Of(in.Document) {
		return r
	}
	switch r.Phase {
	case Held, InCanary, Promoted:
		// The edit changed no EnvoyFilter: the phase goes on.
		c := *r
		c.Latest = in.Document
		return &c
	}
	return nil // a rolled back change edited again: a new attempt
}

// canaryStep is Step under a canary policy.
func canaryStep(in Input) (Output, error) {
	label := in.Policy.Label()
	cand := in.Candidate
	if r := continuing(in.Record, in); r != nil {
		switch r.Phase {
		case RolledBack:
			stable, why := in.resolve(r.From)
			if stable == nil {
				return hold(r, "the change was rolled back, and the set to restore is not usable: "+why), nil
			}
			set, err := Pair(stable.Objects, stable.Objects, label)
			return Output{Deliver: set, Record: r}, err
		case Promoted:
			if r.Confirmed != nil {
				set, err := Pair(cand.Objects, cand.Objects, label)
				return Output{Deliver: set, Record: r, Promote: true}, err
			}
			return watch(in, r)
		case Held, InCanary:
			stable, why := in.resolve(r.From)
			if stable == nil {
				rr := *r
				rr.Waiting = "the set the phase started from is not usable (" + why + "): every proxy keeps what it has, and nothing is promoted"
				return hold(&rr, rr.Waiting), nil
			}
			if r.Phase == Held {
				return start(in, r, stable, false)
			}
			return judge(in, r, stable)
		}
	}
	from := in.inForce()
	if from == "" || from == cand.Hash {
		// The first set (nothing on the proxies to protect, no previous set
		// to roll back to), or nothing changed: as it is, paired.
		set, err := Pair(cand.Objects, cand.Objects, label)
		if why := in.repairing(label, set); why != "" {
			return hold(keep(in.Record, in), why), err
		}
		return Output{Deliver: set, Record: keep(in.Record, in), Promote: true}, err
	}
	stable, why := in.resolve(from)
	if stable == nil {
		return hold(in.Record, "no usable stable set to start a canary phase from ("+why+"): every proxy keeps what it has, and the change waits"), nil
	}
	rec := &Record{
		Strategy: Canary, Phase: Held, Document: in.Document, From: stable.Hash, To: cand.Hash,
		Items: Changed(stable.Objects, cand.Objects), Label: label, Needed: in.Policy.CanaryAcks.String(),
		BakeTime: in.Policy.Bake().String(), PhaseTimeout: in.Policy.Timeout().String(), Coverage: string(in.Policy.Covers()),
		Started: in.Now.UTC(),
	}
	return start(in, rec, stable, true)
}

// start checks a phase before it starts (precheck): it starts when the
// checks pass, else it is held with why, and rolled back at its timeout.
func start(in Input, r *Record, stable *Set, first bool) (Output, error) {
	rec := *r
	label, cand := rec.Label, in.Candidate
	held := func(why string) (Output, error) {
		set, err := Pair(stable.Objects, stable.Objects, label)
		rec.Phase, rec.Waiting = Held, "the canary phase can't start: "+why
		out := Output{Deliver: set, Record: &rec, Held: first || r.Waiting != rec.Waiting}
		if in.PairedBy != label {
			// Not paired by this label yet: pairing now would take the
			// items from every proxy without it. Keep what the sinks have.
			out.Deliver, out.Hold, out.Why = nil, true, rec.Waiting
		}
		return out, err
	}
	switch {
	case in.Action == ActionAbort:
		return end(in, &rec, stable, RolledBack, "operator", "aborted by an operator (globalconfig rollout abort) before the canary phase started")
	case in.Now.Sub(rec.Started) >= rec.Timeout():
		return end(in, &rec, stable, RolledBack, "", "the canary phase could not start within the phase timeout %s: %s", rec.Timeout(), strings.TrimPrefix(rec.Waiting, "the canary phase can't start: "))
	}
	var canaries []string
	if in.Fleet != nil {
		var why string
		canaries, why = precheck(in.Fleet(label), label, Coverage(rec.Coverage), stable.Objects, cand.Objects, rec.Items, in.Root)
		if why != "" {
			return held(why)
		}
	}
	set, err := Pair(stable.Objects, cand.Objects, label)
	if err != nil {
		return Output{}, err
	}
	rec.Phase, rec.Waiting, rec.Canaries = InCanary, "", nil
	for _, name := range canaries {
		rec.Canaries = append(rec.Canaries, Answer{Name: name, State: StatePending})
	}
	return Output{Deliver: set, Record: &rec, Started: true}, nil
}

// end ends r in phase p: promoted (the candidate, paired, watched until
// confirmed) or rolled back (the stable set, paired).
func end(in Input, r *Record, stable *Set, p Phase, by, format string, args ...any) (Output, error) {
	r.Phase, r.By, r.Message, r.Waiting = p, by, fmt.Sprintf(format, args...), ""
	t := in.Now.UTC()
	r.Ended = &t
	if p == Promoted {
		set, err := Pair(in.Candidate.Objects, in.Candidate.Objects, r.Label)
		return Output{Deliver: set, Record: r, Ended: true}, err
	}
	set, err := Pair(stable.Objects, stable.Objects, r.Label)
	return Output{Deliver: set, Record: r, Ended: true}, err
}

// judge continues a canary phase: roll back on a canary's NACK, a canary
// that breaks traffic, an operator's abort or the phase timeout; promote
// on an operator's promote or, after the bake time, when enough canaries
// ACKed with the canary copy, every changed item was received by one,
// every istiod answered and the traffic allows it; else keep the phase.
func judge(in Input, r *Record, stable *Set) (Output, error) {
	rec := *r
	cand := in.Candidate
	set, err := Pair(stable.Objects, cand.Objects, rec.Label)
	if err != nil {
		return Output{}, err
	}
	objs := changedObjects(stable.Objects, cand.Objects, rec.Items)
	v := in.Verdict
	known := v.Known && v.Version == setHash(set)
	if known {
		rec.Canaries = answers(in, &rec, objs)
	}
	acked, proven := 0, map[string]bool{}
	var nacked *Answer
	var notACKed []string
	for i, a := range rec.Canaries {
		switch {
		case a.State == StateNACKed && nacked == nil:
			nacked = &rec.Canaries[i]
		case a.ACKed():
			acked++
			for _, item := range rec.Items {
				if p, ok := lookup(v, a.Name); ok && p.Markers[item] == markerOf(byItem(cand.Objects), item) {
					proven[item] = true
				}
			}
		}
		if !a.ACKed() {
			notACKed = append(notACKed, a.Name)
		}
	}
	needed := in.Policy.CanaryAcks.Needed(len(rec.Canaries))
	baked := rec.Delivered != nil && in.Now.Sub(*rec.Delivered) >= rec.Bake()
	age := in.Now.Sub(rec.Started)
	tv := in.Traffic
	if in.Policy.Analysis != nil && tv.Known {
		rec.Traffic = tv.Report(in.Policy.Analysis)
	}
	waiting := func(why string) (Output, error) {
		rec.Waiting = why
		return Output{Deliver: set, Record: &rec}, nil
	}
	switch {
	case in.Action == ActionAbort:
		return end(in, &rec, stable, RolledBack, "operator", "aborted by an operator (globalconfig rollout abort)")
	case in.Action == ActionPromote:
		return end(in, &rec, stable, Promoted, "operator", "promoted by an operator (globalconfig rollout promote) with %d of %d canaries ACKed", acked, len(rec.Canaries))
	case nacked != nil:
		return end(in, &rec, stable, RolledBack, "", "canary %s rejected the change: %s", nacked.Name, nacked.Message)
	case rec.Traffic != nil && rec.Traffic.Failed:
		return end(in, &rec, stable, RolledBack, "", "the canaries broke traffic: %s", rec.Traffic.Verdict)
	case age >= rec.Timeout():
		why := rec.Waiting
		if why == "" {
			why = "it was still baking"
		}
		return end(in, &rec, stable, RolledBack, "", "the canary phase did not end within the phase timeout %s: %s", rec.Timeout(), why)
	case !baked:
		rec.Waiting = ""
		return Output{Deliver: set, Record: &rec}, nil
	case !known:
		return waiting("istiod has not answered for the canary set yet")
	case v.Partial:
		return waiting("not every istiod answered (" + strings.Join(v.Unreachable, ", ") + "): their canaries' answers are missing, and nothing is promoted on missing answers")
	case len(v.Unlabelled) > 0:
		return waiting(fmt.Sprintf("%s no %s label and get none of globalconfig's EnvoyFilters; label every proxy %s=true or =false",
			proxies(v.Unlabelled), rec.Label, rec.Label))
	}
	if n := v.NACKed - countNACKed(rec.Canaries); n > 0 {
		return waiting(fmt.Sprintf("%s that %s no canary refuse%s the canary set (%s): the set before the change is not the one they refuse, but nothing is promoted while proxies refuse configuration",
			them2(n), isAre(n), plural(n, "s", ""), nackNames(v.NACKs, rec.Canaries)))
	}
	switch {
	case len(rec.Canaries) == 0:
		return end(in, &rec, stable, RolledBack, "", "no proxy labelled %s=true answered within the bake time %s", rec.Label, rec.BakeTime)
	case acked < needed:
		return end(in, &rec, stable, RolledBack, "", "%d of %d canaries ACKed the canary copy within the bake time %s, %d needed; not ACKed: %s",
			acked, len(rec.Canaries), rec.BakeTime, needed, names(notACKed))
	}
	var unproven []string
	for _, item := range rec.Items {
		if !proven[item] {
			unproven = append(unproven, item)
		}
	}
	if len(unproven) > 0 {
		return end(in, &rec, stable, RolledBack, "", "no canary ACKed a configuration holding the canary copy of %s within the bake time %s, so the change would be promoted untested",
			strings.Join(unproven, ", "), rec.BakeTime)
	}
	if a := in.Policy.Analysis; a != nil {
		switch {
		case !tv.Known:
			why := "the traffic gate has no figures yet"
			if tv.Why != "" {
				why = "the canaries' traffic can't be judged: " + tv.Why
			}
			return waiting(why + "; nothing is promoted on missing figures")
		case rec.Traffic.Insufficient && a.OnInsufficient() == RollBackWithout:
			return end(in, &rec, stable, RolledBack, "", "too little traffic to judge the canaries: %s (analysis.insufficientTraffic RollBack)", rec.Traffic.Verdict)
		case rec.Traffic.Insufficient:
			rec.Warning = "promoted on the ACKs alone: too little traffic to judge the canaries: " + rec.Traffic.Verdict
		}
	}
	msg := fmt.Sprintf("%d of %d canaries ACKed the canary copy within the bake time %s", acked, len(rec.Canaries), rec.BakeTime)
	if rec.Traffic != nil && !rec.Traffic.Insufficient {
		msg += "; traffic: " + rec.Traffic.Verdict
	}
	return end(in, &rec, stable, Promoted, "", "%s", msg)
}

// watch is a promoted change until every proxy answered for the promoted
// set: a NACK rolls it back to the set the phase started from; every
// answer in without one confirms it, and the last good copy advances.
func watch(in Input, r *Record) (Output, error) {
	rec := *r
	set, err := Pair(in.Candidate.Objects, in.Candidate.Objects, rec.Label)
	if err != nil {
		return Output{}, err
	}
	v := in.Verdict
	if !in.Tracking {
		// Nothing tells the proxies' answers: confirmed as delivered.
		t := in.Now.UTC()
		rec.Confirmed = &t
		return Output{Deliver: set, Record: &rec, Promote: true, Confirmed: true}, nil
	}
	if !v.Known || v.Version != setHash(set) {
		return Output{Deliver: set, Record: r}, nil
	}
	if v.NACKed > 0 {
		stable, why := in.resolve(rec.From)
		first := "a proxy"
		msg := ""
		if len(v.NACKs) > 0 {
			first, msg = "proxy "+v.NACKs[0].Name, ": "+oneLine(v.NACKs[0].Message)
		}
		if stable == nil {
			rec.Waiting = fmt.Sprintf("%s rejected the promoted change%s, and the set before it can't be restored (%s)", first, msg, why)
			return Output{Deliver: set, Record: &rec}, nil
		}
		rec.NACKs = slices.Clone(v.NACKs[:min(len(v.NACKs), MaxRecordedNACKs)])
		return end(in, &rec, stable, RolledBack, "", "after the promotion %s rejected the change%s; %d of %d proxies NACKed the promoted set (the canaries did not represent them)",
			first, msg, v.NACKed, v.Synced+v.Pending+v.Stale+v.NACKed)
	}
	if v.Partial || v.Pending > 0 {
		return Output{Deliver: set, Record: r}, nil
	}
	t := in.Now.UTC()
	rec.Confirmed, rec.Waiting = &t, ""
	return Output{Deliver: set, Record: &rec, Promote: true, Confirmed: true}, nil
}

// answers are the phase's canaries as istiod reports them now: every one
// known to the record, and every proxy labelled a canary that a changed
// item reaches and that connected since. A known canary no istiod
// reports is Unseen; a Synced one counts only once istiod's
// configuration for it holds the canary copy of every changed item that
// reaches it.
func answers(in Input, r *Record, objs map[string]*envoyfilter.Object) []Answer {
	v := in.Verdict
	cand := byItem(in.Candidate.Objects)
	names := make([]string, 0, len(r.Canaries))
	for _, a := range r.Canaries {
		names = append(names, a.Name)
	}
	for _, p := range v.Canaries {
		if slices.Contains(names, p.Name) || len(names) >= MaxCanaries {
			continue
		}
		if len(required(objs, p.FleetProxy, r.Label, in.Root)) > 0 {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	out := make([]Answer, 0, len(names))
	for _, name := range names {
		p, ok := lookup(v, name)
		if !ok {
			a := Answer{Name: name, State: StateUnseen, Message: "no istiod asked reports it: stopped, disconnected, or connected to another revision's istiod"}
			if at, silent := v.Silent[name]; silent {
				a.Message = "silent: no istiod reports it since " + at.UTC().Format(time.RFC3339)
			} else if v.Partial {
				a.Message = "not reported: an istiod did not answer (" + strings.Join(v.Unreachable, ", ") + ")"
			}
			out = append(out, a)
			continue
		}
		a := Answer{Name: name, State: p.State, Message: p.Message}
		if p.State == StateSynced {
			var missing []string
			need := required(objs, p.FleetProxy, r.Label, in.Root)
			for _, item := range need {
				if p.Markers[item] != markerOf(cand, item) {
					missing = append(missing, item)
				}
			}
			switch {
			case p.Labels[r.Label] != ValueCanary:
				a.Message = fmt.Sprintf("ACKed, but it is no longer labelled %s=true: its configuration holds no canary copy", r.Label)
			case len(need) == 0:
				a.Message = "ACKed, but no changed item reaches it now (its labels changed?)"
			case len(missing) > 0:
				a.Message = "ACKed, but istiod's configuration for it lacks the canary copy of " + strings.Join(missing, ", ")
			default:
				a.Received = true
			}
		}
		out = append(out, a)
	}
	return out
}

func lookup(v Verdict, name string) (Seen, bool) {
	if v.Proxy != nil {
		return v.Proxy(name)
	}
	for _, p := range v.Canaries {
		if p.Name == name {
			return p, true
		}
	}
	return Seen{}, false
}

func countNACKed(as []Answer) int {
	n := 0
	for _, a := range as {
		if a.State == StateNACKed {
			n++
		}
	}
	return n
}

// nackNames names the NACKed proxies of nacks that are no canary.
func nackNames(nacks []Answer, canaries []Answer) string {
	var out []string
	for _, n := range nacks {
		if !slices.ContainsFunc(canaries, func(a Answer) bool { return a.Name == n.Name }) {
			out = append(out, n.Name+": "+oneLine(n.Message))
		}
	}
	if len(out) == 0 {
		return "not listed"
	}
	return strings.Join(out[:min(len(out), 3)], "; ")
}

// follow is Step for a follower: the set Record says for this document.
func follow(in Input) (Output, error) {
	r := in.Record
	if r != nil && r.Direct() && r.Document == in.Document && r.To == in.Candidate.Hash {
		return followDirect(in), nil
	}
	if !in.Policy.Enabled() {
		return Output{Deliver: in.Candidate.Objects, Record: r}, nil
	}
	label := in.Policy.Label()
	cand := in.Candidate
	if r != nil && !r.Direct() && r.Of(in.Document) && r.To == cand.Hash && r.Label == label {
		if r.Phase == Promoted {
			set, err := Pair(cand.Objects, cand.Objects, label)
			return Output{Deliver: set, Record: r}, err
		}
		stable, why := in.resolve(r.From)
		if stable == nil {
			return hold(r, "the set the rollout started from is not usable here: "+why), nil
		}
		if r.Phase == InCanary {
			grace := in.Grace
			if grace <= 0 {
				grace = DefaultGrace
			}
			if age := in.Now.Sub(r.Started); age > r.Timeout()+grace {
				set, err := Pair(stable.Objects, stable.Objects, label)
				return Output{Deliver: set, Record: r, Distrusted: fmt.Sprintf("the canary phase began %s ago, past its timeout %s and a grace of %s: the controller that decides it is gone, so the set before the change is served",
					age.Round(time.Second), r.Timeout(), grace)}, err
			}
			set, err := Pair(stable.Objects, cand.Objects, label)
			return Output{Deliver: set, Record: r}, err
		}
		if r.Phase == Held && in.PairedBy != label {
			return hold(r, "the change is held, and what this server serves is not paired by "+label), nil
		}
		set, err := Pair(stable.Objects, stable.Objects, label) // Held, RolledBack
		return Output{Deliver: set, Record: r}, err
	}
	if from := in.inForce(); from == "" || from == cand.Hash {
		switch {
		case !in.LeaderKnown || in.LeaderPairing == label:
		case in.LeaderPairing == "":
			return Output{Deliver: cand.Objects, Record: r}, nil
		default:
			label = in.LeaderPairing
		}
		set, err := Pair(cand.Objects, cand.Objects, label)
		return Output{Deliver: set, Record: r}, err
	}
	return hold(r, "the elected controller has not decided about this document yet"), nil
}

// keep is the record to show after a direct rollout: the previous one when
// it is about this very set (a resync), none otherwise.
func keep(r *Record, in Input) *Record {
	if r != nil && r.To == in.Candidate.Hash && r.Phase == Promoted {
		return r
	}
	return nil
}

func proxies(names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	if len(names) == 1 {
		return "proxy " + names[0] + " carries"
	}
	return "proxies " + strings.Join(names, ", ") + " carry"
}

// names lists names for a message: at most 10, and how many more.
func names(list []string) string {
	if len(list) > 10 {
		return strings.Join(list[:10], ", ") + fmt.Sprintf(" and %d more", len(list)-10)
	}
	return strings.Join(list, ", ")
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "they"
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }
