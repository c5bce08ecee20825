// Package status is globalconfig's status contract: what the controller
// last did with the global document, as one typed, versioned object. The
// controller writes it as JSON under one key of the status ConfigMap
// (NAME-status, beside the global ConfigMap); `globalconfig status -o
// json` prints exactly it, and tools and dashboards read it with Read.
// Nothing reads prose back: every field a tool needs is a field here.
//
// docs/status.md documents every field; a test keeps the two in step.
package status

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// Version is the version of the status this package writes. A reader
// refuses another one: a field's meaning may have changed. Version 2
// added the state NACKed (Applied no longer holds while a proxy refuses
// the set) and Direct rollouts' records in Canary. Version 3 added the
// state and canary phase Held (a change waiting for its canary phase to
// start, or for a usable stable set), a promoted canary rollout watched
// until canary.confirmed, and a canary rollout's EnvoyFilters as pairs
// (applied.stable names the set the pairs hold outside a phase). It
// reads versions 1 and 2 too (MinVersion): their fields mean in version
// 3 what they meant there.
const Version = 3

// MinVersion is the oldest version Parse reads.
const MinVersion = 1

// Key is the status ConfigMap's key holding the Status as JSON.
const Key = "status.json"

// ConfigMapName is the name of the status ConfigMap of the global
// ConfigMap name.
func ConfigMapName(name string) string { return name + "-status" }

// State is what the controller did with the document.
type State string

// The states.
const (
	// Applied: the document is valid, its EnvoyFilters are delivered,
	// and no proxy is known to refuse them.
	Applied State = "Applied"
	// NACKed: the document is valid and its EnvoyFilters are delivered,
	// but proxies refused them (rollout.nacked); those keep running their
	// previous configuration. Message says why the set stays.
	NACKed State = "NACKed"
	// Invalid: the document was rejected; the last good set is kept.
	Invalid State = "Invalid"
	// ApplyFailed: the document is valid but delivering its set failed;
	// Message says why, and the sync is retried.
	ApplyFailed State = "ApplyFailed"
	// ConfigMapDeleted: the global ConfigMap is gone; Message says what
	// happened to the EnvoyFilters.
	ConfigMapDeleted State = "ConfigMapDeleted"
	// Canary: the document is valid and its change reaches the canary
	// proxies only (canary.phase Canary).
	Canary State = "Canary"
	// Held: the document is valid, but its change is not delivered yet
	// under a canary rollout: its phase can't start (canary.waiting says
	// why), or no usable stable set is known to start it from or to
	// restore; every proxy keeps what it has, and nothing is promoted.
	Held State = "Held"
	// RolledBack: the document's change was rolled back (a canary NACKed
	// it, did not ACK it within the bake time, or an operator aborted
	// it; or, rolled out directly, the proxies NACKed it); every proxy
	// has the previous set, and the document is rejected until it
	// changes.
	RolledBack State = "RolledBack"
)

// Status is the status object.
type Status struct {
	// Version is Version.
	Version int   `json:"version"`
	State   State `json:"state"`
	// Message says, for people, what the state means for the proxies.
	Message string `json:"message,omitempty"`
	// Errors are the document's problems (State Invalid), Warnings the
	// items' warnings on a valid document; never nil.
	Errors   []Problem `json:"errors"`
	Warnings []Problem `json:"warnings"`
	// NotInEffect are the items of a valid document that do not do what
	// it says at the proxies because the service they send to has no
	// cluster there: Path is the service's key, Message what that means
	// for traffic, as measured at real Envoys (limits not enforced, every
	// request denied, traces dropped, the listener refused). Message
	// says so too; empty when every item is in effect.
	NotInEffect []Problem `json:"notInEffect,omitempty"`
	// Applied is the set the proxies are to have: the last good
	// document's. Nil until a set was delivered.
	Applied *AppliedSet `json:"applied,omitempty"`
	// Sink is where the set goes: "kube" (EnvoyFilter objects), "mcp"
	// (served to istiod) or "both".
	Sink string `json:"sink"`
	// MCPNack is istiod's last rejection of an MCP push, when it has not
	// accepted a later one (sinks mcp and both).
	MCPNack string `json:"mcpNack,omitempty"`
	// Admission says whether the admission webhook checks edits of the
	// global ConfigMap before they are saved; nil while the ConfigMap is
	// gone.
	Admission *Admission `json:"admission,omitempty"`
	// Rollout is how far the proxies took the applied set; nil while it
	// is not tracked (--rollout=false) or istiod has not answered yet for
	// this set. RolloutSummary is its one line, or why there is none.
	Rollout        *rollout.Status `json:"rollout,omitempty"`
	RolloutSummary string          `json:"rolloutSummary,omitempty"`
	// LastGood is what the controller knows of the stored last good
	// document (the set a roll back restores): nil until it stored or
	// read one.
	LastGood *LastGood `json:"lastGood,omitempty"`
	// Canary is the last canary rollout (rollout.strategy Canary), or
	// the Direct rollout of the document when the proxies refused it
	// (Canary.Strategy Direct); nil when the last change went out
	// directly and was not refused.
	Canary *canary.Record `json:"canary,omitempty"`
	// Clusters are the config clusters the set goes to, while member
	// Secrets exist (or existed since the controller started): the home
	// cluster first, then every member by name, then each member Secret
	// that gives no member. Absent on a single-cluster install.
	Clusters []Cluster `json:"clusters,omitempty"`
	// ClusterRollout is the rollout of the last change across clusters
	// (rollout.clusters): its stages, where it stands, the clusters that
	// failed; nil without stages.
	ClusterRollout *canary.ClusterRecord `json:"clusterRollout,omitempty"`

	// Dependents are the EnvoyFilters globalconfig does not manage whose
	// patches anchor on a filter an item of the applied set inserts
	// (pkg/anchors), on proxies both may reach: removing or moving that
	// item changes or breaks them. Absent when there is none.
	Dependents []Dependent `json:"dependents,omitempty"`

	// Blame names, for the proxies that refuse the applied set (NACK),
	// the EnvoyFilters Envoy refuses: one entry per kind of proxy that
	// refuses it (gateway, sidecar), for the first such proxy by name.
	// Absent while no proxy refuses the set.
	Blame []Blame `json:"blame,omitempty"`
}

// Blame is the blame of one proxy's refusal of a set: which EnvoyFilters,
// globalconfig's or anyone else's, make the fleet's Envoy refuse the
// config istiod builds for it.
type Blame struct {
	// Set is the hash of the set the proxy refused.
	Set string `json:"set"`
	// Proxy is the proxy blamed for (POD.NAMESPACE), Kind its kind
	// (gateway or sidecar).
	Proxy string `json:"proxy"`
	Kind  string `json:"kind"`
	// Outcome is where the blame stands (the Blame* constants).
	Outcome BlameOutcome `json:"outcome"`
	// Message says, for people, what the blame found and what it means
	// for a roll back.
	Message string `json:"message"`
	// Faults are, when Blamed, the smallest sets of EnvoyFilters Envoy
	// refuses: taking one EnvoyFilter of each out makes the config load.
	Faults []Fault `json:"faults,omitempty"`
	// Envoy is the release of the Envoy binary that judged; Runs how many
	// times it ran and Elapsed how long the blame took.
	Envoy   string `json:"envoy,omitempty"`
	Runs    int    `json:"envoyRuns,omitempty"`
	Elapsed string `json:"elapsed,omitempty"`
	// Error says why the blame failed (Outcome Failed), scrubbed of
	// secret values.
	Error string `json:"error,omitempty"`
}

// BlameOutcome is where a blame stands.
type BlameOutcome string

// The blame outcomes: the search's own (preflight.Outcome) and where the
// controller stands with it.
const (
	// BlameBlamed: Faults name the EnvoyFilters Envoy refuses.
	BlameBlamed BlameOutcome = "Blamed"
	// BlameNotReproduced: Envoy accepts the config istiod builds for the
	// proxy now; nothing is blamed.
	BlameNotReproduced BlameOutcome = "NotReproduced"
	// BlameBaseRejected: Envoy refuses the config even without any
	// EnvoyFilter; no EnvoyFilter is to blame.
	BlameBaseRejected BlameOutcome = "BaseRejected"
	// BlamePending: the blame is being found.
	BlamePending BlameOutcome = "Pending"
	// BlameFailed: the blame failed (Error says why).
	BlameFailed BlameOutcome = "Failed"
	// BlameOff: the controller runs without --envoy, so it names no
	// EnvoyFilter.
	BlameOff BlameOutcome = "Off"
)

// Fault is one smallest set of EnvoyFilters Envoy refuses together.
type Fault struct {
	// Fault names it as a user reads it: one EnvoyFilter, or "the
	// combination of A and B".
	Fault string `json:"fault"`
	// Message is Envoy's refusal of the config with exactly these
	// EnvoyFilters.
	Message string `json:"message"`
	// Culprits are its EnvoyFilters.
	Culprits []Culprit `json:"culprits"`
}

// Culprit is one EnvoyFilter a fault names.
type Culprit struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Managed says globalconfig manages it; Item is then its item.
	Managed bool   `json:"managedByGlobalconfig"`
	Item    string `json:"item,omitempty"`
}

// Cluster is one config cluster the controller delivers to.
type Cluster struct {
	// Name is the cluster's name (the home cluster's --cluster-name, a
	// member's from its Secret): what target.clusters names. Empty for a
	// member Secret that names no cluster.
	Name string `json:"name,omitempty"`
	// Home says this is the cluster the controller runs in.
	Home bool `json:"home,omitempty"`
	// Secret is the member Secret, namespace/name.
	Secret string `json:"secret,omitempty"`
	// Reachable says the last delivery to the cluster succeeded.
	Reachable bool `json:"reachable"`
	// Error says why the last delivery failed (naming the verb and the
	// resource the API server refused), why the Secret gives no member,
	// or that nothing was delivered yet.
	Error string `json:"error,omitempty"`
	// Set is the hash of the set the cluster holds (its part of it:
	// target.clusters), Objects how many EnvoyFilters that part has, and
	// Since when the cluster got it.
	Set     string     `json:"set,omitempty"`
	Objects int        `json:"objects"`
	Since   *time.Time `json:"since,omitempty"`
}

// LastGood is the stored last good document as the controller knows it.
type LastGood struct {
	// Hash is the hash of the set it renders to, as the controller
	// stored it (or found it stored).
	Hash string `json:"hash"`
	// Problem says why the stored copy is not the one it should be: its
	// write failed, it no longer renders, or it renders to another set
	// than the one it was stored for (a hand edit, a stale copy); the
	// controller then takes the set it needs from the live EnvoyFilters
	// when they hold it exactly, and holds otherwise.
	Problem string `json:"problem,omitempty"`
}

// Admission is whether the admission webhook guards the document.
type Admission struct {
	// Guarded: the webhook configuration sends every CREATE and UPDATE of
	// the global ConfigMap to globalconfig's webhook (which admits edits
	// while it is down: failurePolicy Ignore).
	Guarded bool `json:"guarded"`
	// Reason says why not, when not.
	Reason string `json:"reason,omitempty"`
}

// Problem is one problem (or warning) of the document.
type Problem struct {
	// Path is the dotted path of the key ("gzip.chunkSize"); empty for
	// the document as a whole.
	Path string `json:"path,omitempty"`
	// Line is the key's line in the document, when known.
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// String is the problem as the webhook and Events word it.
func (p Problem) String() string {
	s := p.Message
	if p.Path != "" {
		s = p.Path + ": " + s
	}
	if p.Line > 0 {
		s += fmt.Sprintf(" (%s line %d)", document.DataKey, p.Line)
	}
	return s
}

// Problems are errs as Problems, each with its message passed through
// scrub (secret values out); never nil.
func Problems(errs []*fielderr.Error, scrub func(string) string) []Problem {
	out := make([]Problem, 0, len(errs))
	for _, e := range errs {
		out = append(out, Problem{Path: e.Path, Line: e.Line, Message: scrub(e.Msg)})
	}
	return out
}

// AppliedSet is a delivered EnvoyFilter set.
type AppliedSet struct {
	// Hash names the set (the rollout's version).
	Hash string `json:"hash"`
	// Stable, under a canary rollout, is the hash of the set that every
	// proxy but the canaries has: the set the pairs' stable copies hold
	// (outside a phase the canary copies hold it too); the set a new
	// change starts from.
	Stable string `json:"stable,omitempty"`
	// PairedBy is the canary label the set is paired by (its stable and
	// canary copies select on it); absent for a set that is not paired.
	PairedBy string `json:"pairedBy,omitempty"`
	// Time is when this set was first delivered.
	Time time.Time `json:"time"`
	// EnvoyFilters are the set's objects, in delivery order.
	EnvoyFilters []EnvoyFilter `json:"envoyFilters"`
	// Change is what the change to this set did to the items; empty when
	// unknown (a set restored at start).
	Change Change `json:"change"`
}

// EnvoyFilter is one object of the set.
type EnvoyFilter struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Item is the document item it is built from.
	Item string `json:"item"`
}

// Change is the item diff of a change; the lists are never nil.
type Change struct {
	Added   []string `json:"added"`
	Changed []string `json:"changed"`
	Removed []string `json:"removed"`
}

// Empty reports whether the change names no item.
func (c Change) Empty() bool { return len(c.Added)+len(c.Changed)+len(c.Removed) == 0 }

// Of returns the change to item ("added", "changed" or ""; a removed
// item has no EnvoyFilter).
func (c Change) Of(item string) string {
	switch {
	case slices.Contains(c.Added, item):
		return "added"
	case slices.Contains(c.Changed, item):
		return "changed"
	}
	return ""
}

// New is an empty status of the current version in state.
func New(state State) *Status {
	return &Status{Version: Version, State: state, Errors: []Problem{}, Warnings: []Problem{}}
}

// Marshal is s as the status ConfigMap holds it: indented JSON, so that
// `kubectl get configmap -o yaml` stays readable.
func (s *Status) Marshal() (string, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode status: %w", err)
	}
	return string(b) + "\n", nil
}

// Parse reads a status ConfigMap's Key. Unknown fields and other
// versions are errors.
func Parse(text string) (*Status, error) {
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal([]byte(text), &probe); err != nil {
		return nil, fmt.Errorf("status %s: %w", Key, err)
	}
	switch {
	case probe.Version == nil:
		return nil, fmt.Errorf("status %s: no version", Key)
	case *probe.Version < MinVersion || *probe.Version > Version:
		return nil, fmt.Errorf("status %s: version %d, this globalconfig reads versions %d to %d", Key, *probe.Version, MinVersion, Version)
	}
	s := &Status{}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("status %s: %w", Key, err)
	}
	return s, nil
}

// Read reads the status from a status ConfigMap's data.
func Read(data map[string]string) (*Status, error) {
	text, ok := data[Key]
	if !ok {
		return nil, fmt.Errorf("status: no key %s", Key)
	}
	return Parse(text)
}

// Dependent is one patch of an EnvoyFilter globalconfig does not manage
// that anchors on a filter an item inserts.
type Dependent struct {
	// Namespace and Name are the EnvoyFilter's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Patch is the index of its configPatches entry, Operation that
	// patch's operation (INSERT_BEFORE, INSERT_AFTER, REPLACE or MERGE).
	Patch     int    `json:"patch"`
	Operation string `json:"operation"`
	// Filter is the filter it anchors on, Item the item that inserts it.
	Filter string `json:"filter"`
	Item   string `json:"item"`
	// Note says why it may not find the filter even now (a priority
	// equal to the item's), when it may not.
	Note string `json:"note,omitempty"`
}

// String is the dependent for people, as `globalconfig status` says it.
func (d Dependent) String() string {
	return fmt.Sprintf("%s/%s anchors on %s (%s): removing or moving that item changes or breaks it", d.Namespace, d.Name, d.Filter, d.Item)
}
