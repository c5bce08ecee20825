// Package canary is globalconfig's safe rollout: a changed item first
// reaches only the canary proxies, a NACK, silence or broken traffic there
// rolls the change back everywhere, and only a change the canaries
// provably received and took reaches the rest of the fleet after the bake
// time. Whatever it can't know (the stable set, an istiod's answer,
// whether a canary really holds the change) holds the change: it never
// promotes on missing information.
//
// The mechanism is istiod's own EnvoyFilter scoping. An EnvoyFilter in the
// root namespace applies to every proxy its workloadSelector matches, and
// a selector can only require labels, never exclude them. So under a
// canary policy every item is delivered as a pair (Pair): its stable copy
// with the selector LABEL=false added (the item's name), and its canary
// copy with LABEL=true (name + "-canary"), which also marks every listener
// it patches with a marker of its content. Outside a phase both copies
// hold the same version; a phase rewrites one copy per item at each
// transition, so every labelled proxy holds exactly one version of every
// item at every moment, with the priorities of the final set: the canaries
// exactly what the whole fleet will get, the others exactly what they had.
//
// The default Direct rollout is judged here too (direct.go): a change
// reaches every proxy at once, and when the proxies refuse it (a NACK, by
// Policy.RollbackOn) it is rolled back to the stable set the same way.
//
// With more than one config cluster, a change can go to the clusters in
// ordered stages, each judged before the next starts (rollout.clusters,
// StepClusters in clusters.go).
//
// Everything here is pure: the controller reads the cluster, istiod and
// the proxies' statistics, calls Step, and delivers what it says.
package canary

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
)

// Key is the document's top-level key of the rollout policy.
const Key = "rollout"

// Strategy is how a change reaches the fleet.
type Strategy string

// The strategies.
const (
	// Direct: every change reaches every proxy at once (the default).
	Direct Strategy = "Direct"
	// Canary: a change reaches the canary proxies first.
	Canary Strategy = "Canary"
)

// Values lists the accepted spellings (used by the decoder and the schema).
func (Strategy) Values() []string { return []string{string(Direct), string(Canary)} }

// RollbackOn is when a Direct change the proxies refuse (NACK) is rolled
// back to the last good set.
type RollbackOn string

// The rules.
const (
	// AllNACK: when every proxy that answered for the change's set NACKed
	// it (the default): a change only some proxies refuse (an older Envoy
	// among newer ones, say) stays, and the status says who refuses it.
	AllNACK RollbackOn = "AllNACK"
	// AnyNACK: as soon as one proxy NACKed it.
	AnyNACK RollbackOn = "AnyNACK"
)

// Values lists the accepted spellings (used by the decoder and the schema).
func (RollbackOn) Values() []string { return []string{string(AllNACK), string(AnyNACK)} }

// Interface guards.
var (
	_ items.Enum = Strategy("")
	_ items.Enum = RollbackOn("")
	_ items.Enum = Coverage("")
	_ items.Enum = InsufficientTraffic("")
)

// Defaults and bounds of the policy.
const (
	DefaultLabel    = "globalconfig.io/canary"
	DefaultBakeTime = time.Minute
	MinBakeTime     = time.Second
	// MaxBakeTime bounds how long one change may wait: an edit during a
	// canary phase starts over, and a fleet should not wait longer than
	// an operator watches.
	MaxBakeTime = time.Hour
)

// Policy is the document's rollout section.
type Policy struct {
	Strategy    Strategy       `json:"strategy,omitempty" doc:"Direct (default): a change reaches every proxy at once. Canary: it reaches the canary proxies first, and the rest only after they took it (with clusters: inside each stage)."`
	CanaryLabel string         `json:"canaryLabel,omitempty" doc:"Workload label that sorts the proxies: \"true\" on the canaries, \"false\" on every other proxy the EnvoyFilters reach (default globalconfig.io/canary). No target.selector may name it."`
	CanaryAcks  Acks           `json:"canaryAcks,omitempty" doc:"How many canary proxies must ACK before the change is promoted: a count (2) or a percentage (\"50%\"); default \"100%\". Any NACK rolls back."`
	BakeTime    *items.Seconds `json:"bakeTime,omitempty" doc:"How long the change stays on the canaries before it is promoted or rolled back: seconds or a duration, 1s to 1h (default 1m)."`
	RollbackOn  RollbackOn     `json:"rollbackOn,omitempty" doc:"Direct only: when a change the proxies refuse (NACK) is rolled back to the last good set. AllNACK (default): when every proxy that answered for it NACKed it. AnyNACK: when any proxy NACKed it."`
	// Coverage and PhaseTimeout are canary rollouts' only; Analysis is
	// theirs and a rollout across clusters'.
	Coverage     Coverage       `json:"coverage,omitempty" doc:"Canary only: which canaries a change needs before its phase starts. Variants (default): for every changed item, a canary of each proxy kind (gateway, sidecar) and each release variant of the item that any proxy it reaches runs. Kinds: of each proxy kind. Items: at least one canary the item reaches (never less)."`
	PhaseTimeout *items.Seconds `json:"phaseTimeout,omitempty" doc:"Canary only: the longest a phase may last, from the edit, waiting to start, baking and waiting for answers included; past it the change is rolled back. Seconds or a duration, at least bakeTime, at most 3h (default 3 × bakeTime)."`
	Analysis     *Analysis      `json:"analysis,omitempty" doc:"Canary, or Direct with clusters: the traffic gate. The canaries' own Envoy statistics over the bake time against the stable proxies' (with clusters: a stage's proxies over minSuccessTime against those still on the previous set): more errors roll back. Without it a phase or a stage is judged by ACKs and NACKs alone."`
	// Clusters, MinSuccessTime, ProgressDeadline and MaxFailures are the
	// rollout across clusters (clusters.go): Direct inside each cluster,
	// or under strategy Canary each stage's canaries first.
	Clusters         [][]string     `json:"clusters,omitempty" doc:"The rollout across clusters, ordered stages of cluster names ([[canary-cluster], [eu-west-1, us-east-1]]): a stage's clusters get the change only when every earlier stage passed (every proxy of its clusters ACKed it, for minSuccessTime, and with analysis its traffic was judged). Each name once, at most 16 stages and 64 names; clusters no stage names form an implicit last stage. With strategy Canary, inside each stage the proxies labelled canaryLabel=true of its clusters get the change first, and the rest of the stage once they ACKed it for bakeTime."`
	MinSuccessTime   *items.Seconds `json:"minSuccessTime,omitempty" doc:"With clusters: a stage's bake, how long every proxy of its clusters must have ACKed the change (and, with analysis, over which their traffic is judged) before the next stage starts: seconds or a duration, 0s to 1h (default 0s; at least 1s with analysis)."`
	ProgressDeadline *items.Seconds `json:"progressDeadline,omitempty" doc:"With clusters: the longest one stage may take from its start until it passes; a cluster of the stage that has not passed by then fails. Seconds or a duration, at least minSuccessTime, 10s to 3h (default 10m)."`
	MaxFailures      int            `json:"maxFailures,omitempty" doc:"With clusters: how many clusters may fail (a NACK, broken traffic, not passing by progressDeadline, unreachable included) over the whole rollout while it goes on, each given the previous set back (default 0: the first failure stops the rollout, and every cluster it reached gets the previous set back). From 0 to 64."`
}

// Coverage is which canaries a change needs before its phase starts.
type Coverage string

// The coverages, from the strictest.
const (
	// CoverVariants: every changed item needs a canary of each proxy kind
	// and each of its release variants that some proxy it reaches runs.
	CoverVariants Coverage = "Variants"
	// CoverKinds: a canary of each proxy kind the item reaches.
	CoverKinds Coverage = "Kinds"
	// CoverItems: at least one canary the item reaches; the floor, which
	// no setting lowers: a change no canary receives is never promoted.
	CoverItems Coverage = "Items"
)

// Values lists the accepted spellings (used by the decoder and the schema).
func (Coverage) Values() []string {
	return []string{string(CoverVariants), string(CoverKinds), string(CoverItems)}
}

// Covers is the coverage, its default filled in.
func (p Policy) Covers() Coverage {
	if p.Coverage == "" {
		return CoverVariants
	}
	return p.Coverage
}

// MaxPhaseTimeout bounds a phase's age: three of the longest bake times.
const MaxPhaseTimeout = 3 * MaxBakeTime

// PhaseTimeoutFactor is the default phase timeout in bake times.
const PhaseTimeoutFactor = 3

// Timeout is the phase timeout, its default (PhaseTimeoutFactor bake
// times) filled in.
func (p Policy) Timeout() time.Duration {
	if p.PhaseTimeout == nil {
		return PhaseTimeoutFactor * p.Bake()
	}
	return p.PhaseTimeout.Duration
}

// Enabled reports whether p asks for canaries.
func (p Policy) Enabled() bool { return p.Strategy == Canary }

// Label is the canary label, its default filled in.
func (p Policy) Label() string {
	if p.CanaryLabel == "" {
		return DefaultLabel
	}
	return p.CanaryLabel
}

// Rollback is the Direct rollback rule, its default filled in.
func (p Policy) Rollback() RollbackOn {
	if p.RollbackOn == "" {
		return AllNACK
	}
	return p.RollbackOn
}

// Bake is the bake time, its default filled in.
func (p Policy) Bake() time.Duration {
	if p.BakeTime == nil {
		return DefaultBakeTime
	}
	return p.BakeTime.Duration
}

// Ranges implements items.Ranger: the bounds of bakeTime and phaseTimeout,
// which Validate checks and the JSON Schema shows. A key left out takes its
// default; a key written is held to its range, 0 included. (phaseTimeout's
// lower bound is also the bake time, which a schema can't say: validation
// alone checks that.)
func (Policy) Ranges() []items.Range {
	return []items.Range{
		items.DurationRange("bakeTime", MinBakeTime, MaxBakeTime),
		items.DurationRange("phaseTimeout", MinBakeTime, MaxPhaseTimeout),
		items.DurationRange("minSuccessTime", 0, MaxMinSuccessTime),
		items.DurationRange("progressDeadline", MinProgressDeadline, MaxProgressDeadline),
		{Path: "maxFailures", Min: 0, Max: MaxClusterNames, Why: "no rollout names more clusters"},
	}
}

// Validate returns every problem of p, with paths relative to the section.
func (p Policy) Validate() error {
	var errs fielderr.List
	if p.CanaryLabel != "" {
		for _, msg := range validation.IsQualifiedName(p.CanaryLabel) {
			errs.Addf("canaryLabel", "invalid label key: %s", msg)
		}
	}
	items.CheckRanges(&errs, p)
	if d := p.Timeout(); p.PhaseTimeout != nil && d >= MinBakeTime && d <= MaxPhaseTimeout && d < p.Bake() {
		errs.Addf("phaseTimeout", "is %s, shorter than the bake time %s: every phase would be rolled back before it could be promoted", d, p.Bake())
	}
	if !p.Enabled() && (p.CanaryLabel != "" || p.CanaryAcks != (Acks{}) || p.BakeTime != nil ||
		p.Coverage != "" || p.PhaseTimeout != nil || (p.Analysis != nil && len(p.Clusters) == 0)) {
		if p.Staged() {
			errs.Addf("strategy", "is %s, so canaryLabel, canaryAcks, bakeTime, coverage and phaseTimeout do nothing (a rollout across clusters goes %s inside each cluster; analysis judges its stages); remove them", Direct, Direct)
		} else {
			errs.Addf("strategy", "is %s, so canaryLabel, canaryAcks, bakeTime, coverage, phaseTimeout and analysis do nothing; set strategy: Canary or remove them", Direct)
		}
	}
	p.validateStages(&errs)
	if p.Analysis != nil {
		errs.Add("analysis", p.Analysis.Validate())
	}
	if p.Enabled() && p.RollbackOn != "" {
		errs.Addf("rollbackOn", "applies to strategy %s only: a canary rollout rolls back on any canary's NACK; remove it", Direct)
	}
	return errs.Err()
}

// Acks is how many canary proxies must ACK: a count, or a percentage of
// the canaries. The zero value is 100%.
type Acks struct {
	Count   int
	Percent int
}

// MaxCount bounds a count of canaries.
const MaxCount = 10000

// DecodeScalar implements the document decoder's scalar hook.
func (a *Acks) DecodeScalar(tag, value string) error {
	switch tag {
	case "!!int":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > MaxCount {
			return fmt.Errorf("must be a count between 1 and %d or a percentage such as \"50%%\", got %s", MaxCount, value)
		}
		*a = Acks{Count: n}
		return nil
	case "!!str":
		num, ok := strings.CutSuffix(value, "%")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 || n > 100 {
			return fmt.Errorf("must be a percentage between \"1%%\" and \"100%%\" or a count, got %q", value)
		}
		*a = Acks{Percent: n}
		return nil
	}
	return fmt.Errorf("expected a count or a percentage, got %s", items.DescribeTag(tag))
}

// SchemaTypes implements the schema hook.
func (Acks) SchemaTypes() []string { return []string{"integer", "string"} }

func init() {
	items.DeclareLimits[Acks](items.Limits{Minimum: ptr(1), Maximum: ptr(MaxCount), Pattern: `^([1-9]|[1-9][0-9]|100)%$`})
}

func ptr(f float64) *float64 { return &f }

// String writes a as the document does.
func (a Acks) String() string {
	switch {
	case a.Count > 0:
		return strconv.Itoa(a.Count)
	case a.Percent > 0:
		return strconv.Itoa(a.Percent) + "%"
	}
	return "100%"
}

// MarshalJSON writes a as the document does (a section key hashes it).
func (a Acks) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(a.String())), nil }

// Needed is how many of n canaries must ACK: at least one.
func (a Acks) Needed(n int) int {
	switch {
	case a.Count > 0:
		return a.Count
	case a.Percent > 0:
		return max(1, (n*a.Percent+99)/100)
	}
	return max(1, n)
}
