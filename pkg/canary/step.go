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
	// InCanary: the change reaches the canary proxies only.
	InCanary Phase = "Canary"
	// Promoted: the canaries took the change; it reaches every proxy.
	Promoted Phase = "Promoted"
	// RolledBack: a canary NACKed the change, or did not ACK it within
	// the bake time, or an operator aborted it; or, with strategy
	// Direct, the proxies NACKed it (RollbackOn): every proxy has the
	// previous set again, and the document is rejected until it changes.
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
	// Document is the hash of the document rolled out (DocumentHash).
	Document string `json:"document"`
	// From is the hash of the set every proxy had before (the stable
	// set), To the hash of the document's set.
	From string `json:"from"`
	To   string `json:"to"`
	// Items are the items the change adds, changes or removes.
	Items []string `json:"items"`
	// Label is the canary label, Needed how many canaries must ACK,
	// BakeTime the bake time (canary rollouts).
	Label    string `json:"label,omitempty"`
	Needed   string `json:"needed,omitempty"`
	BakeTime string `json:"bakeTime,omitempty"`
	// RollbackOn is a Direct rollout's rule (Policy.RollbackOn).
	RollbackOn RollbackOn `json:"rollbackOn,omitempty"`
	// Restored is, after a Direct roll back, what the proxies did with the
	// restored set, judged once: RestoredTaken (the roll back stands) or
	// RestoredRefused (phase Kept); empty until they answered.
	Restored string `json:"restored,omitempty"`
	// Started is when the canary phase began; Ended when it was promoted
	// or rolled back. Shown, never compared with another clock.
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// Message says why the rollout ended as it did, naming the proxy and
	// quoting Envoy on a NACK.
	Message string `json:"message,omitempty"`
	// By is "operator" when `globalconfig rollout promote` or `abort`
	// ended it.
	By string `json:"by,omitempty"`
	// Canaries are the canary proxies and their answers, as last seen.
	Canaries []Answer `json:"canaries,omitempty"`
	// NACKs are, for a Direct rollout, the proxies that refused the set
	// the rollout ended on (the change; the restored set for Kept), with
	// Envoy's words, at most MaxRecordedNACKs.
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

// Answer is one canary proxy's answer to the canary set.
type Answer struct {
	Name string `json:"name"`
	// State is the rollout state: Synced, Pending, Stale or NACKed.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// The states of an Answer that decide.
const (
	StateSynced = "Synced"
	StateNACKed = "NACKed"
)

// Set is a set of EnvoyFilters with its hash.
type Set struct {
	Objects []*envoyfilter.Object
	Hash    string
}

// Verdict is what istiod says of the set delivered last: for a canary
// set the canary proxies' answers and the proxies the set reaches that
// carry no canary label; for every set the count of the proxies it
// reaches by state, which a Direct rollout is judged by. Known is false
// until istiod answered for the set.
type Verdict struct {
	Known      bool
	Canaries   []Answer
	Unlabelled []string
	// Version is the hash of the set the answers are about: a Direct
	// change is judged only by the answers about its own set.
	Version string
	// Since is when that set was delivered.
	Since time.Time
	// The proxies the set reaches, by state (all of them, listed or not).
	Synced, Pending, Stale, NACKed int
	// NACKs are the proxies that NACKed it, with Envoy's words (at most
	// as many as the rollout status lists).
	NACKs []Answer
	// Partial says some istiod did not answer, or none was found: the
	// answers of its proxies are missing.
	Partial bool
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

// Input is what one step is decided from.
type Input struct {
	Policy Policy
	// Document is the hash of the document's text; Candidate its set.
	Document  string
	Candidate Set
	// Stable is the set every proxy had before the change (the last
	// promoted one); nil when none is known (nothing applied yet).
	Stable *Set
	// Record is the current rollout, nil when there is none.
	Record *Record
	// Verdict is istiod's word on the canary set of Record.
	Verdict Verdict
	// Baked says the bake time has passed since this process delivered
	// the canary set (on this process's clock).
	Baked bool
	// Action is an operator's request for Record's document, "" for none.
	Action Action
	// Fleet, when set, is asked before a canary phase starts which proxies
	// the set reaches carry no canary label (Verdict.Unlabelled): with
	// any, the change is rolled back before anything is delivered, as
	// they would get neither version of a changed item.
	Fleet func(label string, candidate []*envoyfilter.Object) Verdict
	// Now stamps Started and Ended.
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
	// Hold says to deliver nothing and keep what the sinks hold: the
	// document was rolled back and the set before it is not known here.
	Hold bool
	// Started and Ended say the step began or ended a canary phase.
	Started, Ended bool
	// Direct is the phase a Direct change reached in this step: Promoted
	// (the proxies took it), RolledBack or Kept; empty when the step
	// decided nothing of the kind.
	Direct Phase
	// Waiting says why a Direct change is neither rolled back nor
	// promoted yet when the answers can't tell (an istiod did not
	// answer, no proxy answered); empty otherwise.
	Waiting string
}

// Step decides one sync of a valid document: go direct, start or continue
// a canary phase, promote, or roll back.
func Step(in Input) (Output, error) {
	if in.Follow {
		return follow(in)
	}
	r := in.Record
	if r != nil && r.Document == in.Document && r.To == in.Candidate.Hash {
		if r.Direct() {
			return directRecorded(in), nil
		}
		switch r.Phase {
		case RolledBack:
			// The document stays rejected until it changes.
			if in.Stable == nil {
				return Output{Record: r, Hold: true}, nil
			}
			return Output{Deliver: in.Stable.Objects, Record: r}, nil
		case Promoted:
			return Output{Deliver: in.Candidate.Objects, Record: r, Promote: true}, nil
		case InCanary:
			if in.Stable == nil || in.Stable.Hash != r.From {
				// The stable set is not the one this phase started from
				// (lost after a restart): the phase can't be resumed
				// exactly; start it again.
				break
			}
			return judge(in)
		}
	}
	if in.Stable == nil || in.Stable.Hash == in.Candidate.Hash {
		// Nothing to protect, or nothing changed: direct.
		return Output{Deliver: in.Candidate.Objects, Record: keep(r, in), Promote: true}, nil
	}
	if !in.Policy.Enabled() {
		return direct(in), nil
	}
	split, err := Split(in.Stable.Objects, in.Candidate.Objects, in.Policy.Label())
	if err != nil {
		return Output{}, err
	}
	rec := &Record{
		Strategy: Canary, Phase: InCanary, Document: in.Document, From: in.Stable.Hash, To: in.Candidate.Hash,
		Items: Changed(in.Stable.Objects, in.Candidate.Objects), Label: in.Policy.Label(),
		Needed: in.Policy.CanaryAcks.String(), BakeTime: in.Policy.Bake().String(), Started: in.Now.UTC(),
	}
	if in.Fleet != nil {
		if v := in.Fleet(rec.Label, in.Candidate.Objects); v.Known && len(v.Unlabelled) > 0 {
			rec.Phase, rec.Ended = RolledBack, &rec.Started
			rec.Message = unlabelledMessage(v.Unlabelled, rec) + " (found before the canary phase began; nothing was delivered)"
			return Output{Deliver: in.Stable.Objects, Record: rec, Started: true, Ended: true}, nil
		}
	}
	return Output{Deliver: split, Record: rec, Started: true}, nil
}

// follow is Step for a follower: the set Record says for this document.
func follow(in Input) (Output, error) {
	direct := Output{Deliver: in.Candidate.Objects, Record: in.Record}
	r := in.Record
	if r != nil && r.Direct() && r.Document == in.Document && r.To == in.Candidate.Hash {
		return followDirect(in), nil
	}
	if !in.Policy.Enabled() || in.Stable == nil || in.Stable.Hash == in.Candidate.Hash {
		return direct, nil
	}
	if r == nil || r.Document != in.Document || r.To != in.Candidate.Hash {
		return Output{Record: r, Hold: true}, nil
	}
	switch r.Phase {
	case Promoted:
		return direct, nil
	case RolledBack:
		return Output{Deliver: in.Stable.Objects, Record: r}, nil
	}
	if r.From != in.Stable.Hash {
		return Output{Record: r, Hold: true}, nil // the last good copy is not updated yet
	}
	split, err := Split(in.Stable.Objects, in.Candidate.Objects, r.Label)
	if err != nil {
		return Output{}, err
	}
	return Output{Deliver: split, Record: r}, nil
}

// keep is the record to show after a direct rollout: the previous one when
// it is about this very set (a resync), none otherwise.
func keep(r *Record, in Input) *Record {
	if r != nil && r.To == in.Candidate.Hash && r.Phase == Promoted {
		return r
	}
	return nil
}

// judge continues a canary phase: roll back on a NACK, an unlabelled
// proxy or an operator's abort; promote on an operator's promote or, after
// the bake time, when enough canaries ACKed; else keep the canary set.
func judge(in Input) (Output, error) {
	r := *in.Record
	if in.Verdict.Known {
		r.Canaries = in.Verdict.Canaries
	}
	split, err := Split(in.Stable.Objects, in.Candidate.Objects, r.Label)
	if err != nil {
		return Output{}, err
	}
	synced := 0
	var nacked []Answer
	for _, a := range r.Canaries {
		switch a.State {
		case StateSynced:
			synced++
		case StateNACKed:
			nacked = append(nacked, a)
		}
	}
	needed := in.Policy.CanaryAcks.Needed(len(r.Canaries))
	end := func(p Phase, by, format string, args ...any) (Output, error) {
		r.Phase, r.By, r.Message = p, by, fmt.Sprintf(format, args...)
		t := in.Now.UTC()
		r.Ended = &t
		if p == Promoted {
			return Output{Deliver: in.Candidate.Objects, Record: &r, Promote: true, Ended: true}, nil
		}
		return Output{Deliver: in.Stable.Objects, Record: &r, Ended: true}, nil
	}
	switch {
	case in.Action == ActionAbort:
		return end(RolledBack, "operator", "aborted by an operator (globalconfig rollout abort)")
	case in.Action == ActionPromote:
		return end(Promoted, "operator", "promoted by an operator (globalconfig rollout promote) with %d of %d canaries synced", synced, len(r.Canaries))
	case len(nacked) > 0:
		return end(RolledBack, "", "canary %s rejected the change: %s", nacked[0].Name, nacked[0].Message)
	case in.Verdict.Known && len(in.Verdict.Unlabelled) > 0:
		return end(RolledBack, "", "%s", unlabelledMessage(in.Verdict.Unlabelled, &r))
	case !in.Baked:
		return Output{Deliver: split, Record: &r}, nil
	case len(r.Canaries) == 0:
		return end(RolledBack, "", "no proxy labelled %s=true answered within the bake time %s", r.Label, r.BakeTime)
	case synced < needed:
		var silent []string
		for _, a := range r.Canaries {
			if a.State != StateSynced {
				silent = append(silent, a.Name)
			}
		}
		return end(RolledBack, "", "%d of %d canaries ACKed within the bake time %s, %d needed; not ACKed: %s", synced, len(r.Canaries), r.BakeTime, needed, strings.Join(silent, ", "))
	}
	return end(Promoted, "", "%d of %d canaries ACKed within the bake time %s", synced, len(r.Canaries), r.BakeTime)
}

// unlabelledMessage says why unlabelled proxies stop a rollout.
func unlabelledMessage(unlabelled []string, r *Record) string {
	return fmt.Sprintf("%s no %s label, so %s would have lost %s during the canary phase; label every proxy %s=true or =false",
		proxies(unlabelled), r.Label, them(len(unlabelled)), strings.Join(r.Items, ", "), r.Label)
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

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "they"
}
