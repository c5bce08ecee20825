package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
)

// The search's bounds: a NACK is one fault in nearly every incident, and
// each Envoy run of a gateway's whole config costs about a tenth of a
// second of a core.
const (
	// MaxFaults is how many faults a blame names; past them it says
	// that more may remain.
	MaxFaults = 4
	// MaxBlameRuns is how many times one blame runs Envoy at most.
	MaxBlameRuns = 64
)

// BoundError: the search ran Envoy MaxBlameRuns times without an answer.
type BoundError struct {
	Proxy string
	Runs  int
	// Faults are those found before the bound.
	Faults []Fault
}

func (e *BoundError) Error() string {
	s := fmt.Sprintf("blame of proxy %s: Envoy ran %d times, the bound, before the search ended", e.Proxy, e.Runs)
	if len(e.Faults) > 0 {
		names := make([]string, len(e.Faults))
		for i, f := range e.Faults {
			names[i] = f.String()
		}
		s += "; found so far: " + strings.Join(names, "; ")
	}
	return s + "; take out the EnvoyFilters you suspect and run it again"
}

// BlameConfig finds the EnvoyFilters to blame for Envoy refusing
// in.Current, the config istiod builds for in.Proxy with every
// EnvoyFilter applied; in.Live are globalconfig's EnvoyFilters and
// in.Others everyone else's (in.Desired is ignored). bin must be of the
// Envoy release the proxy runs (CheckRelease).
//
// The base is in.Current with the patches of every EnvoyFilter that
// reaches the proxy taken off (undo; what can't be undone exactly is
// listed in Inexact). When Envoy refuses in.Current and accepts the base,
// the faults are found by delta debugging over the EnvoyFilters: the
// config of a set is the base with the set's patches applied as istiod
// applies them, in its order (an insert anchored on a filter the set
// lacks is skipped, as istiod skips it); chunks are taken out while the
// set still fails, down to single EnvoyFilters, which leaves a set that
// loads with any one of its EnvoyFilters taken out. That fault is
// recorded with Envoy's refusal of exactly it, taken out, and the search
// repeats on the rest while the rest fails, up to MaxFaults.
func BlameConfig(ctx context.Context, bin *envoybin.Binary, in Input) (*Blame, error) {
	return blameWithin(ctx, bin, in, MaxBlameRuns)
}

// blameWithin is BlameConfig with a bound of maxRuns Envoy runs.
func blameWithin(ctx context.Context, bin *envoybin.Binary, in Input, maxRuns int) (*Blame, error) {
	start := time.Now()
	if err := CheckRelease(bin, in.Proxy); err != nil {
		return nil, err
	}
	kind, err := KindOf(in.Proxy.Type)
	if err != nil {
		return nil, err
	}
	if in.Current == nil {
		return nil, fmt.Errorf("blame of proxy %s: no current config", in.Proxy.Name)
	}
	b := &Blame{Proxy: in.Proxy, Envoy: bin.Version, Notes: slices.Clone(in.Notes)}
	managed := map[string]Filter{}
	for _, f := range in.Live {
		managed[f.key()] = f
	}
	all := append(slices.Clone(in.Live), in.Others...)
	patches, notes, err := Select(in.Proxy, in.RootNamespace, all)
	if err != nil {
		return nil, fmt.Errorf("blame of proxy %s: %w", in.Proxy.Name, err)
	}
	b.Notes = append(b.Notes, notes...)
	// The EnvoyFilters that reach the proxy, in istiod's order.
	var order []string
	for _, p := range patches {
		if !slices.Contains(order, p.Filter) {
			order = append(order, p.Filter)
		}
	}
	b.Filters = len(order)

	s := &search{ctx: ctx, bin: bin, kind: kind, ports: in.Proxy.Ports, patches: patches, proxy: in.Proxy.Name, maxRuns: maxRuns, tried: map[string]string{}}
	defer func() { b.Runs, b.Elapsed = s.runs, time.Since(start) }()

	msg, removed, err := s.load(in.Current)
	if err != nil {
		return nil, err
	}
	b.Removed = removed
	if msg == "" {
		b.Outcome = NotReproduced
		return b, nil
	}
	b.Rejected = msg

	s.base = in.Current.clone()
	b.Inexact = undo(s.base, kind, in.Proxy.Ports, patches, nil, nil)
	msg, err = s.fails(nil)
	if err != nil {
		return nil, err
	}
	if msg != "" && len(b.Inexact) > 0 {
		// A MERGE hides the value istiod built, and the base has the
		// field unset (a listener's address): try the base that keeps
		// what every MERGE set, whose MERGEs are then no longer taken
		// out.
		inexact, kept, ok, err := s.keepMerges(in.Current)
		if err != nil {
			return nil, err
		}
		if ok {
			b.Inexact = append(inexact, fmt.Sprintf("the config without EnvoyFilters is refused with what their MERGEs set unset (%s), so the base keeps what these MERGEs set and the search never takes them out: %s", msg, strings.Join(kept, ", ")))
			msg = ""
			order = slices.DeleteFunc(order, func(f string) bool {
				return !slices.ContainsFunc(s.patches, func(p Patch) bool { return p.Filter == f })
			})
		}
	}
	if msg != "" {
		b.Outcome = BaseRejected
		b.Rejected = msg
		return b, nil
	}
	b.Outcome = Blamed

	rest := order
	for len(b.Faults) < MaxFaults {
		msg, err := s.fails(rest)
		if err != nil {
			return nil, s.bounded(err, b)
		}
		if msg == "" && len(b.Faults) == 0 {
			// The base with every EnvoyFilter applied again loads, and
			// the proxy's config does not: they differ where the base
			// is not exact.
			return nil, fmt.Errorf("blame of proxy %s: Envoy refuses its config (%s) but loads it rebuilt from the config without EnvoyFilters, so what it refuses is in what can't be taken off exactly: %s",
				in.Proxy.Name, b.Rejected, orNone(append(b.Inexact, s.aborted...)))
		}
		if msg == "" {
			break
		}
		fault, msg, err := s.minimize(rest, msg)
		if err != nil {
			return nil, s.bounded(err, b)
		}
		b.Faults = append(b.Faults, Fault{Filters: culprits(fault, managed), Message: msg})
		rest = slices.DeleteFunc(slices.Clone(rest), func(f string) bool { return slices.Contains(fault, f) })
	}
	// Faults in istiod's order of their first EnvoyFilter, whatever
	// order the search found them in.
	first := func(f Fault) int {
		i := len(order)
		for _, c := range f.Filters {
			if j := slices.Index(order, c.Namespace+"/"+c.Name); j >= 0 && j < i {
				i = j
			}
		}
		return i
	}
	slices.SortStableFunc(b.Faults, func(x, y Fault) int { return first(x) - first(y) })
	if len(b.Faults) == MaxFaults {
		if msg, err := s.fails(rest); err == nil && msg != "" {
			b.Notes = append(b.Notes, fmt.Sprintf("the search stops at %d faults: Envoy still refuses the config without them (%s)", MaxFaults, msg))
		}
	}
	b.Inexact = append(b.Inexact, s.aborted...)
	return b, nil
}

// keepMerges makes the base cur with only the inserts, removes and
// replaces undone, and the search's patches those: ok when Envoy loads
// that base. kept names the EnvoyFilters whose MERGEs stay.
func (s *search) keepMerges(cur *Config) (inexact, kept []string, ok bool, err error) {
	var others []Patch
	for _, p := range s.patches {
		if isMerge(p.op()) {
			if !slices.Contains(kept, p.Filter) {
				kept = append(kept, p.Filter)
			}
			continue
		}
		others = append(others, p)
	}
	if len(kept) == 0 {
		return nil, nil, false, nil
	}
	base := cur.clone()
	inexact = undo(base, s.kind, s.ports, others, nil, nil)
	all, prevBase, prevTried := s.patches, s.base, s.tried
	s.base, s.patches, s.tried = base, others, map[string]string{}
	msg, err := s.fails(nil)
	if err != nil || msg != "" {
		s.base, s.patches, s.tried = prevBase, all, prevTried
		return nil, nil, false, err
	}
	return inexact, kept, true, nil
}

// bounded makes the run bound's error carry the faults found so far.
func (s *search) bounded(err error, b *Blame) error {
	var be *BoundError
	if errors.As(err, &be) {
		be.Faults = b.Faults
	}
	return err
}

// culprits names the filters of a fault: everyone else's first, then
// globalconfig's, each in istiod's order.
func culprits(fault []string, managed map[string]Filter) []Culprit {
	var theirs, ours []Culprit
	for _, key := range fault {
		ns, name, _ := strings.Cut(key, "/")
		if f, ok := managed[key]; ok {
			ours = append(ours, Culprit{Namespace: ns, Name: name, Managed: true, Item: f.Item})
		} else {
			theirs = append(theirs, Culprit{Namespace: ns, Name: name})
		}
	}
	return append(theirs, ours...)
}

// search runs Envoy on the base with sets of EnvoyFilters applied.
type search struct {
	ctx     context.Context
	bin     *envoybin.Binary
	kind    Kind
	ports   PortMap
	patches []Patch
	proxy   string
	base    *Config
	runs    int
	maxRuns int
	// tried is Envoy's answer per set already loaded ("" accepted).
	tried   map[string]string
	aborted []string
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none is listed"
	}
	return strings.Join(s, "; ")
}

func setKey(set []string) string { return strings.Join(set, "\n") }

// load runs Envoy on c, within the bound.
func (s *search) load(c *Config) (string, []string, error) {
	if s.runs >= s.maxRuns {
		return "", nil, &BoundError{Proxy: s.proxy, Runs: s.runs}
	}
	s.runs++
	msg, removed, err := load(s.ctx, s.bin, s.kind, c)
	if err != nil {
		return "", nil, fmt.Errorf("blame of proxy %s: %w", s.proxy, err)
	}
	return msg, removed, nil
}

// fails is Envoy's refusal of the base with the patches of set's
// EnvoyFilters applied in istiod's order; "" when it loads.
func (s *search) fails(set []string) (string, error) {
	key := setKey(set)
	if msg, ok := s.tried[key]; ok {
		return msg, nil
	}
	var ps []Patch
	for _, p := range s.patches {
		if slices.Contains(set, p.Filter) {
			ps = append(ps, p)
		}
	}
	c, err := Apply(s.base, s.kind, s.ports, ps)
	if err != nil {
		return "", fmt.Errorf("blame of proxy %s: %w", s.proxy, err)
	}
	for _, a := range c.aborted {
		if !slices.Contains(s.aborted, a) {
			s.aborted = append(s.aborted, a)
		}
	}
	msg, _, err := s.load(c)
	if err != nil {
		return "", err
	}
	s.tried[key] = msg
	return msg, nil
}

// minimize takes chunks out of set, which Envoy refuses with msg, while
// the rest still fails, halving the chunks until they are single
// EnvoyFilters: what remains fails and loads with any one taken out.
func (s *search) minimize(set []string, msg string) ([]string, string, error) {
	n := 2
	for len(set) > 1 {
		if n > len(set) {
			n = len(set)
		}
		reduced := false
		for _, chunk := range chunks(set, n) {
			rest := slices.DeleteFunc(slices.Clone(set), func(f string) bool { return slices.Contains(chunk, f) })
			m, err := s.fails(rest)
			if err != nil {
				return nil, "", err
			}
			if m != "" {
				set, msg, reduced = rest, m, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if n == len(set) {
				break
			}
			n = min(2*n, len(set))
		}
	}
	return set, msg, nil
}

// chunks splits set into n parts of nearly equal size, in order.
func chunks(set []string, n int) [][]string {
	out := make([][]string, 0, n)
	for i := range n {
		lo, hi := i*len(set)/n, (i+1)*len(set)/n
		if hi > lo {
			out = append(out, set[lo:hi])
		}
	}
	return out
}
