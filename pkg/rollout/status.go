// Package rollout tells which proxies took the generated EnvoyFilters. It
// asks every istiod, the way `istioctl proxy-status` does, for its sync
// status (/debug/syncz on istiod's HTTP debug port): per connected proxy,
// per xDS type, the nonce last sent, the nonce last ACKed, when it was
// sent, and the message of the last NACK; and for its configuration store
// (/debug/configz), to learn from which push on istiod's pushes carry the
// current set (istiod's nonces carry its push counter). From that it sorts
// the proxies the set reaches into synced, pending, stale and NACKed.
//
// It never writes to the cluster; the controller puts its Status into the
// status ConfigMap, Events and metrics, and asks for a new one whenever
// it publishes a new set. Nothing in here can block applying.
package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is where one proxy stands with the current set.
type State string

// The states, in the order the status lists them.
const (
	// NACKed: the proxy rejected listeners, clusters or routes of a push
	// that carries the set; Envoy keeps running its previous
	// configuration.
	NACKed State = "NACKed"
	// Stale: the proxy has not ACKed a push that carries the set, and the
	// rollout timeout has passed.
	Stale State = "Stale"
	// Pending: as Stale, but still within the rollout timeout.
	Pending State = "Pending"
	// Synced: the proxy ACKed listeners of a push that carries the set,
	// and everything istiod sent it since.
	Synced State = "Synced"
)

// States lists the states in display order.
var States = []State{NACKed, Stale, Pending, Synced}

// MaxListed bounds the proxies a Status lists: a ConfigMap holds at most
// 1 MiB. The counts always cover every proxy; NACKed proxies come first.
const MaxListed = 200

// MaxMessage bounds one NACK message.
const MaxMessage = 1024

// Status is the rollout of one generated set.
type Status struct {
	// Version is the generated set's hash (the status's applied.hash).
	Version string `json:"version"`
	// Since is when the set was written (or served over MCP).
	Since time.Time `json:"since"`
	// Istiod lists every istiod asked, with its error when it did not
	// answer.
	Istiod []Istiod `json:"istiod"`
	// Counts of the proxies the set reaches, by state.
	Selected int `json:"selected"`
	Synced   int `json:"synced"`
	Pending  int `json:"pending"`
	Stale    int `json:"stale"`
	NACKed   int `json:"nacked"`
	// Proxies are the proxies the set reaches, NACKed first, at most
	// MaxListed; Unlisted counts the rest.
	Proxies  []Proxy `json:"proxies,omitempty"`
	Unlisted int     `json:"unlisted,omitempty"`
	// Canaries are the proxies labelled as canaries, and Unlabelled the
	// names of the proxies without the canary label, while a paired set
	// is tracked (Generation.Label); the tracker keeps every canary, the
	// status lists at most MaxListed of each (CanariesUnlisted counts the
	// rest).
	Canaries         []Proxy  `json:"canaries,omitempty"`
	CanariesUnlisted int      `json:"canariesUnlisted,omitempty"`
	Unlabelled       []string `json:"unlabelled,omitempty"`
	// Silent are proxies the set reaches that were connected earlier and
	// that no istiod reports now, with when they were last seen; listed
	// for SilentMemory, at most MaxListed.
	Silent []Silent `json:"silent,omitempty"`
	// Unconnected are running pods with an Istio proxy the set reaches
	// that no istiod has reported since this controller started
	// (Tracker.Expected), listed after ConnectGrace, at most MaxListed.
	Unconnected []Unconnected `json:"unconnected,omitempty"`

	// index is every proxy the set reaches, by name (Lookup).
	index map[string]Proxy
}

// Stable are the names of the proxies on the stable track (labelled
// false) that answered for the set, sorted.
func (s *Status) Stable() []string {
	var out []string
	for name, p := range s.index {
		if p.Track == TrackStable && p.State == Synced {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Lookup is the proxy named name that the set reaches, listed or not.
func (s *Status) Lookup(name string) (Proxy, bool) {
	if s.index != nil {
		p, ok := s.index[name]
		return p, ok
	}
	for _, p := range s.Proxies {
		if p.Name == name {
			return p, true
		}
	}
	return Proxy{}, false
}

// Unconnected is a proxy that should be connected and never was.
type Unconnected struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Since is when its pod started (the API server's clock).
	Since time.Time `json:"since"`
}

// Silent is a proxy that stopped answering: disconnected from every
// istiod.
type Silent struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// LastSeen is when the controller last saw it connected (its own
	// clock).
	LastSeen time.Time `json:"lastSeen"`
}

// Track is where a proxy stands in a canary phase.
type Track string

// The tracks.
const (
	TrackCanary     Track = "canary"
	TrackStable     Track = "stable"
	TrackUnlabelled Track = "unlabelled"
)

// Istiod is one istiod instance asked.
type Istiod struct {
	Address string `json:"address"`
	// Proxies connected to it.
	Proxies int `json:"proxies"`
	// Error says why it could not be asked ("" when it answered).
	Error string `json:"error,omitempty"`
}

// Proxy is one proxy the set reaches.
type Proxy struct {
	// Name is the pod's name.namespace, as istioctl proxy-status shows it.
	Name         string `json:"name"`
	Type         string `json:"type"`
	IstioVersion string `json:"istioVersion,omitempty"`
	// Istiod is the address of the istiod it is connected to.
	Istiod string `json:"istiod"`
	State  State  `json:"state"`
	// Message is, for a NACK, the xDS type and Envoy's rejection message,
	// scrubbed of the document's secret values; for Stale, what is
	// missing.
	Message string `json:"message,omitempty"`
	// Sent is when istiod last sent the proxy listeners.
	Sent *time.Time `json:"sent,omitempty"`
	// Track is the proxy's canary label, while a paired set is tracked.
	Track Track `json:"track,omitempty"`
	// Labels are the labels its track was read from (its pod's, else
	// those it connected with), and Markers the canary copies istiod's
	// configuration for it holds (Generation.Markers): kept in memory for
	// the controller's judgement, never written.
	Labels  map[string]string `json:"-"`
	Markers map[string]string `json:"-"`
	// conn is its connection ID, acked the listeners' nonce it ACKed.
	conn, acked string
}

// Count returns the count of state s.
func (s *Status) Count(st State) int {
	switch st {
	case NACKed:
		return s.NACKed
	case Stale:
		return s.Stale
	case Pending:
		return s.Pending
	case Synced:
		return s.Synced
	}
	return 0
}

// Proxy is the proxy named name ("gw-0.istio-system"), or the zero Proxy.
func (s *Status) Proxy(name string) Proxy {
	for _, p := range s.Proxies {
		if p.Name == name {
			return p
		}
	}
	return Proxy{}
}

// Unreachable returns the istiod instances that did not answer.
func (s *Status) Unreachable() []Istiod {
	var out []Istiod
	for _, i := range s.Istiod {
		if i.Error != "" {
			out = append(out, i)
		}
	}
	return out
}

// Summary is one line for people: "2 proxies: 1 Synced, 1 NACKed".
func (s *Status) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d prox%s", s.Selected, plural(s.Selected, "y", "ies"))
	sep := ": "
	for _, st := range States {
		if n := s.Count(st); n > 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, n, st)
			sep = ", "
		}
	}
	if n := len(s.Silent); n > 0 {
		fmt.Fprintf(&b, "; %d silent", n)
	}
	if n := len(s.Unconnected); n > 0 {
		fmt.Fprintf(&b, "; %d never connected", n)
	}
	if u := s.Unreachable(); len(u) > 0 {
		fmt.Fprintf(&b, "; %d of %d istiod unreachable", len(u), len(s.Istiod))
	}
	if len(s.Istiod) == 0 {
		b.WriteString("; no istiod found")
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
