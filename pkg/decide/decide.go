// Package decide is globalconfig's one decision path. From the global
// ConfigMap's data, what a sink delivered last and the stored last good
// document, Decide says what the sink is to deliver: the document's set,
// the last good set kept while the document is invalid, or nothing.
// The controller (the kube sink, or report-only beside MCP) and the MCP
// publisher both call it and hand the decision to their Sink, which only
// delivers. Decide writes nothing and reads only through the function it
// is given.
package decide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Source says where a decision's set comes from.
type Source string

// The sources.
const (
	// Document: the ConfigMap's document is valid; its set.
	Document Source = "document"
	// Kept: the document is invalid; the set this process delivered last.
	Kept Source = "kept"
	// LastGood: the document is invalid (or the ConfigMap is gone) and
	// this process has delivered nothing yet; the stored last good
	// document's set.
	LastGood Source = "lastGood"
	// Pruned: the ConfigMap is gone and PruneOnDelete asks for nothing.
	Pruned Source = "pruned"
	// Empty: the ConfigMap is gone, nothing is stored, and the sink holds
	// nothing yet (Input.Fresh): an empty set, so istiod can start.
	Empty Source = "empty"
	// Canary: the document is valid and its policy asks for canaries;
	// the set is the canary phase's (canary.Pair of the stable set and the
	// document's).
	Canary Source = "canary"
	// Held: the document is valid, its policy asks for canaries, and its
	// phase can't start yet: the set is the stable one, paired.
	Held Source = "held"
	// RolledBack: the document is valid, but its change was rolled back
	// (canary or Direct); the set is the one before it.
	RolledBack Source = "rolledBack"
	// None: nothing to deliver; sinks keep what they have.
	None Source = ""
)

// Applied is what a sink delivered: the set and its section keys.
type Applied struct {
	Set  []*envoyfilter.Object
	Keys map[string]string
}

// Input is what a decision is made of.
type Input struct {
	// Data is the global ConfigMap's data; Missing says the ConfigMap is
	// gone.
	Data    map[string]string
	Missing bool
	// Applied is what this process delivered last; nil before its first
	// delivery (a start).
	Applied *Applied
	// LastGood reads the stored last good document's data (nil when there
	// is none). It is asked only when there is nothing better.
	LastGood func() (map[string]string, error)
	// PruneOnDelete: a missing ConfigMap asks for no EnvoyFilters.
	PruneOnDelete bool
	// Fresh says the sink holds nothing until it first delivers (the MCP
	// sink: istiod waits for its first answer), where the kube sink's
	// EnvoyFilters outlive the process. A fresh sink is given an empty set
	// for a missing ConfigMap when nothing better is stored.
	Fresh bool
	// Rollout, when set, applies a valid document's rollout policy: the
	// canary step (canary.Step) decides what is delivered. Without it, or
	// for a document whose policy has stages across clusters, a valid
	// document's set goes out directly.
	Rollout *Rollout
}

// Rollout is what the canary step needs besides the document: its
// canary.Input, whose Policy, Document and Candidate Decide fills in from
// the document.
type Rollout struct {
	canary.Input
	// LoadStable, when Stable is nil, reads the stable set of a Direct
	// rollout (nil for none). It is asked only when the step may need it:
	// a rollout record is at hand, or the proxies' answers are tracked (a
	// Direct change may be rolled back to it). A canary rollout asks
	// Resolve for the very set it needs instead.
	LoadStable func() (*canary.Set, error)
}

// Decision is what every sink is to deliver, and what to report.
type Decision struct {
	Source Source
	// Set and Keys are what to deliver when Deliver() is true.
	Set  []*envoyfilter.Object
	Keys map[string]string
	// Diff is the document's change from Applied (valid documents only).
	Diff render.Diff
	// Problems is nil when the document is valid (or missing).
	Problems []*fielderr.Error
	// Warnings are the items' warnings on a valid document.
	Warnings []*fielderr.Error
	// Secrets are the document's secret values, to scrub from messages.
	Secrets []string
	// Candidate is a valid document's own set, which Set differs from
	// during a canary phase and after a roll back; Document is the
	// document's hash (DocumentHash).
	Candidate []*envoyfilter.Object
	Document  string
	// Rollout is the canary step's result for a valid document, when
	// Input.Rollout asked for one; Policy is the valid document's rollout
	// policy.
	Rollout *canary.Output
	Policy  canary.Policy
}

// Deliver reports whether the decision asks the sinks for a set (maybe
// empty) rather than to keep what they have.
func (d Decision) Deliver() bool { return d.Source != None }

// Valid reports whether the ConfigMap's document was valid (or missing).
func (d Decision) Valid() bool { return d.Problems == nil }

// Applied is what a sink has once it delivered d.
func (d Decision) Applied() *Applied { return &Applied{Set: d.Set, Keys: d.Keys} }

// Decide makes the decision for in with the renderer r, whose cache of
// built items changes no result. The error is LastGood's.
func Decide(r *render.Renderer, in Input) (Decision, error) {
	if in.Missing {
		switch {
		case in.PruneOnDelete:
			return Decision{Source: Pruned, Keys: map[string]string{}}, nil
		case in.Applied != nil:
			return Decision{}, nil
		}
		d, err := lastGood(r, in, Decision{})
		if err == nil && !d.Deliver() && in.Fresh {
			d = Decision{Source: Empty, Keys: map[string]string{}}
		}
		return d, err
	}
	res := r.FromConfigMap(in.Data)
	if res.Valid() {
		var before map[string]string
		if in.Applied != nil {
			before = in.Applied.Keys
		}
		d := Decision{Source: Document, Set: res.Objects, Keys: res.Keys, Diff: render.Compare(before, res.Keys),
			Warnings: res.Warnings, Secrets: res.Secrets, Candidate: res.Objects, Document: DocumentHash(in.Data), Policy: res.Rollout}
		if in.Rollout != nil && !res.Rollout.Staged() {
			// A rollout across clusters (rollout.clusters) is stepped by
			// the controller, cluster by cluster (canary.StepClusters):
			// the document's set is what its stages roll out.
			return step(d, res.Rollout, in.Rollout, in.Fresh)
		}
		return d, nil
	}
	d := Decision{Problems: res.Problems, Secrets: res.Secrets}
	if in.Applied != nil {
		d.Source, d.Set, d.Keys = Kept, in.Applied.Set, in.Applied.Keys
		return d, nil
	}
	return lastGood(r, in, d)
}

// step hands a valid document's decision d to the canary step. A fresh
// sink that is to hold gets the stable set: it has nothing to keep.
func step(d Decision, policy canary.Policy, ro *Rollout, fresh bool) (Decision, error) {
	in := ro.Input
	in.Policy, in.Document, in.Candidate = policy, d.Document, canary.Set{Objects: d.Candidate, Hash: render.SetHash(d.Candidate)}
	if in.Stable == nil && ro.LoadStable != nil && !policy.Enabled() && (in.Record != nil || in.Tracking) {
		stable, err := ro.LoadStable()
		if err != nil {
			return Decision{}, err
		}
		in.Stable = stable
	}
	out, err := canary.Step(in)
	if err != nil {
		return Decision{}, err
	}
	d.Rollout = &out
	switch {
	case out.Hold && fresh && in.Stable != nil && !policy.Enabled():
		// A Direct roll back whose last good copy lags: a fresh sink has
		// nothing to keep. Under a canary policy a set that is not
		// verified is never served: the sink holds nothing.
		d.Source, d.Set = LastGood, in.Stable.Objects
	case out.Hold:
		d.Source, d.Set = None, nil
	case out.Record != nil && out.Record.Phase == canary.InCanary:
		d.Source, d.Set = Canary, out.Deliver
	case out.Record != nil && out.Record.Phase == canary.Held:
		d.Source, d.Set = Held, out.Deliver
	case out.Record != nil && out.Record.Phase == canary.RolledBack:
		d.Source, d.Set = RolledBack, out.Deliver
	default:
		d.Set = out.Deliver
	}
	return d, nil
}

// DocumentHash names the document in data: a hash of its text.
func DocumentHash(data map[string]string) string {
	sum := sha256.Sum256([]byte(data[document.DataKey]))
	return hex.EncodeToString(sum[:8])
}

// lastGood is d delivering the stored last good document's set, or d
// delivering nothing when there is none or it no longer renders.
func lastGood(r *render.Renderer, in Input, d Decision) (Decision, error) {
	if in.LastGood == nil {
		return d, nil
	}
	data, err := in.LastGood()
	if err != nil || data == nil {
		return d, err
	}
	res := r.FromConfigMap(data)
	if !res.Valid() {
		return d, nil // after an upgrade, say: the copy is ignored
	}
	d.Source, d.Set, d.Keys = LastGood, res.Objects, res.Keys
	return d, nil
}

// Sink delivers decisions: the kube sink applies EnvoyFilter objects, the
// MCP sink serves them to istiod, Discard (report-only) delivers nothing.
// A sink decides nothing.
type Sink interface {
	// Deliver makes the sink's target hold exactly set, and says what it
	// wrote, one entry per write ("created istio-system/globalconfig-gzip").
	Deliver(ctx context.Context, set []*envoyfilter.Object) ([]string, error)
}

// Deliver hands d's set to s when d asks for one.
func Deliver(ctx context.Context, s Sink, d Decision) ([]string, error) {
	if !d.Deliver() {
		return nil, nil
	}
	return s.Deliver(ctx, d.Set)
}

// Discard is the report-only sink: it delivers nothing (the controller
// beside an MCP sink, which istiod reads instead).
type Discard struct{}

// Deliver does nothing.
func (Discard) Deliver(context.Context, []*envoyfilter.Object) ([]string, error) { return nil, nil }
