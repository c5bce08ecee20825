package preflight

import (
	"strings"
	"time"
)

// The blame for a proxy that refuses its config (NACK): which
// EnvoyFilters, globalconfig's or anyone else's, make a real Envoy of the
// fleet's release refuse the config istiod builds for it. The search
// takes every EnvoyFilter's patches off the proxy's config (the base),
// then applies subsets of them the way istiod does and loads each result
// into the Envoy in validate mode, until it holds the smallest sets that
// fail.

// Outcome is what the blame found.
type Outcome string

// The outcomes.
const (
	// Blamed: Envoy refuses the proxy's config and accepts the base; the
	// faults name the EnvoyFilters.
	Blamed Outcome = "Blamed"
	// NotReproduced: Envoy accepts the config istiod builds for the proxy
	// now: the NACK is not reproduced (already fixed, or an Envoy of
	// another build), and nothing is blamed.
	NotReproduced Outcome = "NotReproduced"
	// BaseRejected: Envoy refuses the proxy's config even without any
	// EnvoyFilter: no EnvoyFilter is to blame.
	BaseRejected Outcome = "BaseRejected"
)

// Culprit is one EnvoyFilter a fault names.
type Culprit struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Managed says globalconfig manages it; Item is then its item.
	Managed bool   `json:"managedByGlobalconfig"`
	Item    string `json:"item,omitempty"`
}

// Fault is one smallest set of EnvoyFilters that Envoy refuses together:
// with any one of them taken out, the set loads. One filter is a fault of
// its own; more are a combination (a user's filter anchored on ours).
type Fault struct {
	Filters []Culprit `json:"filters"`
	// Message is Envoy's refusal of the base with exactly these filters.
	Message string `json:"message"`
}

// Blame is the answer for one proxy.
type Blame struct {
	Proxy   Proxy   `json:"proxy"`
	Envoy   string  `json:"envoy"` // the binary's release
	Outcome Outcome `json:"outcome"`
	// Rejected is Envoy's refusal of the proxy's whole config.
	Rejected string `json:"rejected,omitempty"`
	// Faults, when Blamed, in istiod's order of their first EnvoyFilter:
	// each is a smallest failing set of what the ones found before it
	// left, and with every fault's filters taken out the config loads
	// (unless the search stopped at MaxFaults, which Notes say).
	Faults []Fault `json:"faults,omitempty"`
	// Filters is how many EnvoyFilters reach the proxy; Runs how many
	// times Envoy was run; Elapsed the time to the answer.
	Filters int           `json:"filters"`
	Runs    int           `json:"envoyRuns"`
	Elapsed time.Duration `json:"elapsed"`
	// Inexact lists where the base is not exactly the config without the
	// EnvoyFilters (a REPLACE or REMOVE can't be undone); Notes and
	// Removed are as a Prediction's and a Verdict's.
	Inexact []string `json:"inexact,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Ours reports whether a fault names an EnvoyFilter globalconfig manages.
func (b *Blame) Ours() bool {
	for _, f := range b.Faults {
		for _, c := range f.Filters {
			if c.Managed {
				return true
			}
		}
	}
	return false
}

// String names c as a user reads it: "globalconfig's localRateLimit
// (istio-system/globalconfig-localratelimit)" or
// "istio-system/user-healthcheck (not managed by globalconfig)".
func (c Culprit) String() string {
	if c.Managed {
		return "globalconfig's " + c.Item + " (" + c.Namespace + "/" + c.Name + ")"
	}
	return c.Namespace + "/" + c.Name + " (not managed by globalconfig)"
}

// String names the fault: one EnvoyFilter, or "the combination of A and
// B".
func (f Fault) String() string {
	names := make([]string, len(f.Filters))
	for i, c := range f.Filters {
		names[i] = c.String()
	}
	switch len(names) {
	case 0:
		return "no EnvoyFilter"
	case 1:
		return names[0]
	}
	return "the combination of " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
