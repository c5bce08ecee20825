// Package rollout tells which proxies took the generated EnvoyFilters. It
// asks every istiod, the way `istioctl proxy-status` does, for its sync
// status (/debug/syncz on istiod's HTTP debug port): per connected proxy,
// per xDS type, the nonce last sent, the nonce last ACKed, when it was
// sent, and the message of the last NACK; and for its configuration store
// (/debug/configz), to learn from which push on istiod's pushes carry the
// current set (istiod's nonces carry its push counter). From that it sorts
// the proxies the set reaches into synced, pending, stale and NACKed.
//
// Many clusters are one fleet: with member clusters (Members), it asks
// every istiod of every member, each proxy carries the member of the
// istiod that reports it, each member is judged against the part of the
// set it holds (Generation.Clusters), and a member that does not answer
// is an unreachable istiod of that member: nothing is promoted on its
// proxies' missing answers. With one member, the status names no cluster.
//
// It never writes to the cluster; the controller puts its Status into the
// status ConfigMap, Events and metrics, and asks for a new one whenever
// it publishes a new set. Nothing in here can block applying.
package rollout

import (
	"encoding/json"
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

// MaxListed bounds each list of proxies a Status holds: a ConfigMap holds
// at most 1 MiB. The counts always cover every proxy; NACKed proxies come
// first.
const MaxListed = 200

// ListAll is the largest fleet whose every proxy a Status lists. Beyond
// it, Proxies lists only those that need attention (NACKed and Stale);
// the counts cover the rest, and `globalconfig status --state` and
// `--proxy` say what is listed of whom.
const ListAll = 50

// MaxBytes bounds a Status as JSON (Fit): with the rest of the status
// and the canary record it stays well under a ConfigMap's 1 MiB, and
// readable.
const MaxBytes = 48 << 10

// fitMessage is how long a message stays when Fit must cut.
const fitMessage = 200

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
	// Clusters are the counts per member cluster, sorted by name, when
	// istiods of more than one member were asked; absent with one.
	Clusters []ClusterCount `json:"clusters,omitempty"`
	// Proxies are the proxies the set reaches, NACKed first: every one
	// up to ListAll of them, else only the NACKed and Stale ones; at most
	// MaxListed, and fewer when Fit had to cut. Unlisted counts the rest.
	Proxies  []Proxy `json:"proxies,omitempty"`
	Unlisted int     `json:"unlisted,omitempty"`
	// Canaries are the proxies labelled as canaries, and Unlabelled the
	// names of the proxies without the canary label, while a paired set
	// is tracked (Generation.Label); the tracker keeps every canary, the
	// status lists at most MaxListed of each (CanariesUnlisted counts the
	// rest).
	Canaries           []Proxy  `json:"canaries,omitempty"`
	CanariesUnlisted   int      `json:"canariesUnlisted,omitempty"`
	Unlabelled         []string `json:"unlabelled,omitempty"`
	UnlabelledUnlisted int      `json:"unlabelledUnlisted,omitempty"`
	// Silent are proxies the set reaches that were connected earlier and
	// that no istiod reports now, with when they were last seen; listed
	// for SilentMemory, at most MaxListed; SilentUnlisted counts those
	// left out.
	Silent         []Silent `json:"silent,omitempty"`
	SilentUnlisted int      `json:"silentUnlisted,omitempty"`
	// Unconnected are running pods with an Istio proxy the set reaches
	// that no istiod has reported since this controller started
	// (Tracker.Expected), listed after ConnectGrace, at most MaxListed;
	// UnconnectedUnlisted counts those left out.
	Unconnected         []Unconnected `json:"unconnected,omitempty"`
	UnconnectedUnlisted int           `json:"unconnectedUnlisted,omitempty"`

	// index is every proxy the set reaches, by Key (Lookup); byName,
	// across members, the proxy of each name that stands worst.
	index  map[string]Proxy
	byName map[string]Proxy
	// members are the counts per member by its name, with one member too
	// (Member).
	members map[string]ClusterCount
}

// Member is the counts of the member name as the tracker found them,
// also with one member (where Clusters is omitted); ok is false for a
// member whose istiods were not asked (not a member, or removed). A
// status read back from JSON has them from Clusters only (more than one
// member). A Source that names no member has one member, "".
func (s *Status) Member(name string) (ClusterCount, bool) {
	if s.members == nil {
		for _, c := range s.Clusters {
			if c.Name == name {
				return c, true
			}
		}
		return ClusterCount{}, false
	}
	c, ok := s.members[name]
	return c, ok
}

// ClusterCount is the rollout in one member cluster: its istiods, and
// the proxies the set reaches through them, by state.
type ClusterCount struct {
	Name string `json:"name"`
	// Istiod counts its istiods asked (a member whose istiods could not be
	// listed counts one), Unreachable those that did not answer.
	Istiod      int `json:"istiod"`
	Unreachable int `json:"unreachable,omitempty"`
	Selected    int `json:"selected"`
	Synced      int `json:"synced"`
	Pending     int `json:"pending"`
	Stale       int `json:"stale"`
	NACKed      int `json:"nacked"`
}

// HeldUp says what holds the member up, "" when every proxy of it the
// set reaches is Synced and every istiod of it answered. A member with
// no proxy reached (Selected 0) is not held up by this: whether that
// passes a stage is the caller's decision.
func (c ClusterCount) HeldUp() string {
	var parts []string
	for _, st := range []struct {
		n int
		s State
	}{{c.NACKed, NACKed}, {c.Stale, Stale}, {c.Pending, Pending}} {
		if st.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", st.n, st.s))
		}
	}
	if c.Unreachable > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d istiod unreachable", c.Unreachable, c.Istiod))
	}
	return strings.Join(parts, ", ")
}

// worse says p stands worse than q: earlier in States.
func worse(p, q Proxy) bool {
	return slices.Index(States, p.State) < slices.Index(States, q.State)
}

// Stable are the names of the proxies on the stable track (labelled
// false) that answered for the set, sorted; across members, each is
// MEMBER/POD.NAMESPACE (Proxy.Key).
func (s *Status) Stable() []string {
	var out []string
	for key, p := range s.index {
		if p.Track == TrackStable && p.State == Synced {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// Lookup is the proxy that the set reaches, listed or not, named name:
// POD.NAMESPACE, or MEMBER/POD.NAMESPACE across members. Across members,
// a name alone that two members' proxies have is the one of them that
// stands worst (NACKed before Stale before Pending before Synced): an ACK
// in one member never answers for a proxy of the same name in another.
func (s *Status) Lookup(name string) (Proxy, bool) {
	if s.index != nil {
		if p, ok := s.index[name]; ok {
			return p, true
		}
		p, ok := s.byName[name]
		return p, ok
	}
	var out Proxy
	found := false
	for _, p := range s.Proxies {
		if p.Key() == name {
			return p, true
		}
		if p.Name == name && (!found || worse(p, out)) {
			out, found = p, true
		}
	}
	return out, found
}

// Unconnected is a proxy that should be connected and never was.
type Unconnected struct {
	Name string `json:"name"`
	// Cluster is its pod's member cluster, across members.
	Cluster string `json:"cluster,omitempty"`
	Type    string `json:"type"`
	// Since is when its pod started (the API server's clock).
	Since time.Time `json:"since"`
}

// Silent is a proxy that stopped answering: disconnected from every
// istiod.
type Silent struct {
	Name string `json:"name"`
	// Cluster is the member cluster of the istiod it was connected to,
	// across members.
	Cluster string `json:"cluster,omitempty"`
	Type    string `json:"type"`
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

// Name is the istiod for messages: its address, with its member across
// members ("http://10.0.0.12:8080 (member b)"), or "member b" for a
// member whose istiods could not be listed.
func (i Istiod) Name() string {
	if i.Address == discovery && i.Cluster != "" {
		return "member " + i.Cluster
	}
	return memberAddress(i.Cluster, i.Address)
}

// Istiod is one istiod instance asked.
type Istiod struct {
	// Address is its debug port's base URL, or "(discovery)" for a
	// listing of istiods that failed.
	Address string `json:"address"`
	// Cluster is its member cluster, when istiods of more than one member
	// are asked.
	Cluster string `json:"cluster,omitempty"`
	// Proxies connected to it.
	Proxies int `json:"proxies"`
	// Error says why it could not be asked ("" when it answered).
	Error string `json:"error,omitempty"`
}

// Proxy is one proxy the set reaches.
type Proxy struct {
	// Name is the pod's name.namespace, as istioctl proxy-status shows it.
	Name string `json:"name"`
	// Cluster is the member cluster of the istiod that reports it (its
	// config cluster), when istiods of more than one member are asked.
	Cluster      string `json:"cluster,omitempty"`
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
	// conn is its connection ID, acked the listeners' nonce it ACKed,
	// member the member of its istiod (whether shown in Cluster or not).
	conn, acked, member string
}

// Key is MEMBER/POD.NAMESPACE across members, else POD.NAMESPACE.
func (p Proxy) Key() string { return qualified(p.Cluster, p.Name) }

// markerKey names what istiod's configuration for the proxy was read at:
// its member, connection and the push it ACKed.
func (p Proxy) markerKey() string { return p.member + "\x00" + p.conn + "\x00" + p.acked }

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

// Proxy is the listed proxy named name ("gw-0.istio-system", or
// "b/gw-0.istio-system" across members: Key), or the zero Proxy.
func (s *Status) Proxy(name string) Proxy {
	for _, p := range s.Proxies {
		if p.Name == name || p.Key() == name {
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
	if n := len(s.Silent) + s.SilentUnlisted; n > 0 {
		fmt.Fprintf(&b, "; %d silent", n)
	}
	if n := len(s.Unconnected) + s.UnconnectedUnlisted; n > 0 {
		fmt.Fprintf(&b, "; %d never connected", n)
	}
	if u := s.Unreachable(); len(u) > 0 {
		fmt.Fprintf(&b, "; %d of %d istiod unreachable", len(u), len(s.Istiod))
	}
	if len(s.Istiod) == 0 {
		b.WriteString("; no istiod found")
	}
	var held []string
	for _, c := range s.Clusters {
		if h := c.HeldUp(); h != "" {
			held = append(held, c.Name+" ("+h+")")
		}
	}
	if len(held) > 0 {
		fmt.Fprintf(&b, "; held up in %s", strings.Join(held, ", "))
	}
	return b.String()
}

// Written is the copy of s a status holds: every message scrubbed, at
// most MaxListed canaries (the canary record holds every one), and cut to
// MaxBytes (Fit). s is left as it is: the tracker shares it.
func (s *Status) Written(scrub func(string) string) *Status {
	out := *s
	if n := len(out.Canaries); n > MaxListed {
		out.Canaries, out.CanariesUnlisted = out.Canaries[:MaxListed], n-MaxListed
	}
	out.Canaries = slices.Clone(out.Canaries)
	for i := range out.Canaries {
		out.Canaries[i].Message = scrub(out.Canaries[i].Message)
	}
	out.Proxies = slices.Clone(s.Proxies)
	for i := range out.Proxies {
		out.Proxies[i].Message = scrub(out.Proxies[i].Message)
	}
	out.Clusters = slices.Clone(s.Clusters)
	out.Istiod = slices.Clone(s.Istiod)
	for i := range out.Istiod {
		out.Istiod[i].Error = scrub(out.Istiod[i].Error)
	}
	out.Unlabelled = slices.Clone(s.Unlabelled)
	out.Silent = slices.Clone(s.Silent)
	out.Unconnected = slices.Clone(s.Unconnected)
	out.Fit(MaxBytes)
	return &out
}

// Fit cuts s until it is at most max bytes as JSON: messages first (to
// fitMessage characters, the first listed proxy's kept whole, and every
// istiod's error), then the
// longest list by half, from its end (NACKed proxies come first, so they
// go last), counting what it leaves out. The counts by state are never
// cut. It reports whether it cut anything.
func (s *Status) Fit(max int) bool {
	size := func() int {
		b, err := json.Marshal(s)
		if err != nil {
			return 0
		}
		return len(b)
	}
	if size() <= max {
		return false
	}
	for i := range s.Proxies {
		if i > 0 {
			s.Proxies[i].Message = cutMessage(s.Proxies[i].Message)
		}
	}
	for i := range s.Canaries {
		s.Canaries[i].Message = cutMessage(s.Canaries[i].Message)
	}
	for i := range s.Istiod {
		s.Istiod[i].Error = cutMessage(s.Istiod[i].Error)
	}
	for size() > max {
		lens := []int{len(s.Proxies), len(s.Canaries), len(s.Unlabelled), len(s.Silent), len(s.Unconnected)}
		longest := slices.Index(lens, slices.Max(lens))
		n := lens[longest]
		if n == 0 {
			break
		}
		keep := n / 2
		switch longest {
		case 0:
			s.Proxies, s.Unlisted = s.Proxies[:keep], s.Unlisted+n-keep
		case 1:
			s.Canaries, s.CanariesUnlisted = s.Canaries[:keep], s.CanariesUnlisted+n-keep
		case 2:
			s.Unlabelled, s.UnlabelledUnlisted = s.Unlabelled[:keep], s.UnlabelledUnlisted+n-keep
		case 3:
			s.Silent, s.SilentUnlisted = s.Silent[:keep], s.SilentUnlisted+n-keep
		case 4:
			s.Unconnected, s.UnconnectedUnlisted = s.Unconnected[:keep], s.UnconnectedUnlisted+n-keep
		}
	}
	return true
}

func cutMessage(m string) string {
	if r := []rune(m); len(r) > fitMessage {
		return string(r[:fitMessage-1]) + "…"
	}
	return m
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
