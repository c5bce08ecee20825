package decide_test

import (
	"errors"
	"testing"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

func data(doc string) map[string]string { return map[string]string{document.DataKey: doc} }

// The decision table every sink goes through: the controller's sync (the
// kube sink, or report-only beside MCP) and the MCP publisher call Decide
// with what they delivered last, and deliver what it says.
func TestDecide(t *testing.T) {
	const good, other, bad = "gzip: {}\nheaders: {disableXEnvoyHeaders: true}\n", "gzip: {}\n", "gizp: {}\n"
	r := render.New()
	decided := func(doc string) *decide.Applied {
		d, err := decide.Decide(r, decide.Input{Data: data(doc)})
		if err != nil || d.Source != decide.Document {
			t.Fatalf("%q: %+v, %v", doc, d, err)
		}
		return d.Applied()
	}
	stored := func(doc string) func() (map[string]string, error) {
		return func() (map[string]string, error) {
			if doc == "" {
				return nil, nil
			}
			return data(doc), nil
		}
	}
	for _, c := range []struct {
		name       string
		in         decide.Input
		source     decide.Source
		set        int // EnvoyFilters delivered
		valid      bool
		diff       string
		lastGoodOK bool // LastGood may be asked
	}{
		{name: "a valid document at start", in: decide.Input{Data: data(good), LastGood: stored(other)}, source: decide.Document, set: 2, valid: true, diff: "added gzip, headers"},
		{name: "a valid edit", in: decide.Input{Data: data(other), Applied: decided(good)}, source: decide.Document, set: 1, valid: true, diff: "removed headers"},
		{name: "an invalid edit keeps what was delivered", in: decide.Input{Data: data(bad), Applied: decided(good), LastGood: stored(other)}, source: decide.Kept, set: 2},
		{name: "invalid at start: the stored last good", in: decide.Input{Data: data(bad), LastGood: stored(good)}, source: decide.LastGood, set: 2, lastGoodOK: true},
		{name: "invalid at start, nothing stored: nothing", in: decide.Input{Data: data(bad), LastGood: stored("")}, source: decide.None, lastGoodOK: true},
		{name: "invalid at start, a stored copy that no longer renders: nothing", in: decide.Input{Data: data(bad), LastGood: stored(bad)}, source: decide.None, lastGoodOK: true},
		{name: "ConfigMap gone: keep", in: decide.Input{Missing: true, Applied: decided(good)}, source: decide.None, valid: true},
		{name: "ConfigMap gone at start: the stored last good", in: decide.Input{Missing: true, LastGood: stored(other)}, source: decide.LastGood, set: 1, valid: true, lastGoodOK: true},
		{name: "ConfigMap gone, pruning", in: decide.Input{Missing: true, Applied: decided(good), PruneOnDelete: true}, source: decide.Pruned, valid: true},
		{name: "ConfigMap gone at start, nothing stored: nothing", in: decide.Input{Missing: true, LastGood: stored("")}, source: decide.None, valid: true, lastGoodOK: true},
		{name: "ConfigMap gone at start, nothing stored, a fresh sink: an empty set", in: decide.Input{Missing: true, LastGood: stored(""), Fresh: true}, source: decide.Empty, valid: true, lastGoodOK: true},
		{name: "ConfigMap gone at start, a fresh sink: the stored last good", in: decide.Input{Missing: true, LastGood: stored(other), Fresh: true}, source: decide.LastGood, set: 1, valid: true, lastGoodOK: true},
		{name: "invalid at start, nothing stored, a fresh sink: nothing", in: decide.Input{Data: data(bad), LastGood: stored(""), Fresh: true}, source: decide.None, lastGoodOK: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			if lg := c.in.LastGood; lg != nil {
				c.in.LastGood = func() (map[string]string, error) { asked = true; return lg() }
			}
			d, err := decide.Decide(r, c.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Source != c.source || len(d.Set) != c.set || d.Valid() != c.valid || d.Diff.String() != c.diff && c.valid && c.diff != "" {
				t.Errorf("source %q, %d EnvoyFilters, valid %v, diff %q; want %q, %d, %v, %q", d.Source, len(d.Set), d.Valid(), d.Diff.String(), c.source, c.set, c.valid, c.diff)
			}
			if d.Deliver() != (c.source != decide.None) {
				t.Errorf("Deliver() = %v", d.Deliver())
			}
			if asked && !c.lastGoodOK {
				t.Error("the stored last good document was read although there was something better")
			}
		})
	}
	t.Run("a failing read is an error", func(t *testing.T) {
		_, err := decide.Decide(r, decide.Input{Data: data(bad), LastGood: func() (map[string]string, error) { return nil, errors.New("forbidden") }})
		if err == nil {
			t.Error("no error")
		}
	})
}

// With the proxies' answers tracked, a Direct document's decision reads
// the stable set (a refused change is rolled back to it) and rolls back
// when every proxy that answered refused the change; untracked, it reads
// nothing more than before and the change is promoted as delivered.
func TestDecideDirectRollBack(t *testing.T) {
	const good, bad = "gzip: {}\n", "gzip: {chunkSize: 16384}\n"
	r := render.New()
	stable := r.FromConfigMap(data(good))
	cand := r.FromConfigMap(data(bad))
	for _, tracking := range []bool{false, true} {
		loaded := false
		ro := &decide.Rollout{LoadStable: func() (*canary.Set, error) {
			loaded = true
			return &canary.Set{Objects: stable.Objects, Hash: render.SetHash(stable.Objects)}, nil
		}}
		ro.Tracking = tracking
		ro.Verdict = canary.Verdict{Known: true, Version: render.SetHash(cand.Objects), NACKed: 2,
			NACKs: []canary.Answer{{Name: "gw-a.istio-system", State: canary.StateNACKed, Message: "LDS: refused"}}}
		d, err := decide.Decide(r, decide.Input{Data: data(bad), Rollout: ro})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case loaded != tracking:
			t.Errorf("tracking %v: the stable set read %v", tracking, loaded)
		case !tracking && (d.Source != decide.Document || !d.Rollout.Promote):
			t.Errorf("untracked: %+v", d)
		case tracking && (d.Source != decide.RolledBack || render.SetHash(d.Set) != render.SetHash(stable.Objects) || d.Rollout.Record == nil || !d.Rollout.Record.Direct()):
			t.Errorf("tracked, every proxy NACKed: source %s, record %+v", d.Source, d.Rollout.Record)
		}
	}
}
