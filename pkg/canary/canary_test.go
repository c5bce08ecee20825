package canary_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

func set(t *testing.T, doc string) canary.Set {
	t.Helper()
	res := render.New().FromConfigMap(map[string]string{document.DataKey: doc})
	if !res.Valid() {
		t.Fatalf("%s: %v", doc, res.Problems)
	}
	return canary.Set{Objects: res.Objects, Hash: render.SetHash(res.Objects)}
}

func pair(t *testing.T, stable, canarySet canary.Set) []*envoyfilter.Object {
	t.Helper()
	out, err := canary.Pair(stable.Objects, canarySet.Objects, canary.DefaultLabel)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isMarker(p string) bool { return strings.Contains(p, canary.MarkerKey+"/") }

// applies says what istiod gives a proxy with labels: every EnvoyFilter
// whose workload selector's labels the proxy all carries, item → its
// patches without the canary markers ("TWICE" for an item it gets twice;
// an item whose copy holds only markers is left out).
func applies(objs []*envoyfilter.Object, labels map[string]string) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		sel := o.Spec.GetWorkloadSelector().GetLabels()
		ok := true
		for k, v := range sel {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		p := patchesOf(o)
		if _, dup := out[o.Item()]; dup {
			out[o.Item()] = "TWICE"
			continue
		}
		out[o.Item()] = p
	}
	for k, v := range out {
		if v == "" {
			delete(out, k)
		}
	}
	return out
}

func patchesOf(o *envoyfilter.Object) string {
	var b strings.Builder
	for _, p := range o.Spec.GetConfigPatches() {
		if s := p.String(); !isMarker(s) {
			b.WriteString(s)
		}
	}
	return b.String()
}

func want(objs []*envoyfilter.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		out[o.Item()] = patchesOf(o)
	}
	return out
}

func labelled(v string) map[string]string {
	return map[string]string{"istio": "ingressgateway", canary.DefaultLabel: v}
}

// The paired set gives a canary exactly the candidate's version of every
// item and every other labelled proxy exactly the stable version, each
// item once, for items added, changed, removed and left alone; every
// canary copy carries its marker; an unlabelled proxy gets nothing. Taken
// apart, the pair gives back both sets exactly.
func TestPairGivesEachProxyOneVersion(t *testing.T) {
	stable := set(t, "gzip: {}\nheaders:\n  disableXEnvoyHeaders: true\ndownstream:\n  idleTimeout: 60\n")
	candidate := set(t, "gzip:\n  minContentLength: 2048\nhardening:\n  mergeSlashes: true\ndownstream:\n  idleTimeout: 60\n")
	if got := canary.Changed(stable.Objects, candidate.Objects); !slices.Equal(got, []string{"gzip", "hardening", "headers"}) {
		t.Fatalf("changed: %v", got)
	}
	split := pair(t, stable, candidate)
	if got, w := applies(split, labelled("true")), want(candidate.Objects); !maps.Equal(got, w) {
		t.Errorf("a canary gets %v\nwant the candidate %v", keys(got), keys(w))
	}
	if got, w := applies(split, labelled("false")), want(stable.Objects); !maps.Equal(got, w) {
		t.Errorf("a stable proxy gets %v\nwant the stable set %v", keys(got), keys(w))
	}
	if got := keys(applies(split, map[string]string{"istio": "ingressgateway"})); len(got) != 0 {
		t.Errorf("an unlabelled proxy gets %v, want nothing", got)
	}
	names := map[string]*envoyfilter.Object{}
	for _, o := range split {
		names[o.Metadata.Name] = o
	}
	for _, n := range []string{"globalconfig-gzip", "globalconfig-gzip-canary", "globalconfig-headers", "globalconfig-headers-canary",
		"globalconfig-hardening-canary", "globalconfig-downstream", "globalconfig-downstream-canary"} {
		if names[n] == nil {
			t.Errorf("no %s among %v", n, slices.Sorted(maps.Keys(names)))
		}
	}
	if names["globalconfig-hardening"] != nil {
		t.Error("an item the stable set lacks has a stable copy")
	}
	// The markers: the candidate's content, or "removed".
	for item, wantMarker := range map[string]string{"gzip": byName(candidate, "globalconfig-gzip").Hash(), "headers": canary.MarkerRemoved} {
		o := names["globalconfig-"+item+"-canary"]
		if s := o.Spec.String(); !strings.Contains(s, canary.MarkerKey+"/"+item) || !strings.Contains(s, wantMarker) {
			t.Errorf("%s lacks its marker %s: %s", o.Metadata.Name, wantMarker, s)
		}
	}
	if render.SetHash(split) == stable.Hash || render.SetHash(split) == candidate.Hash {
		t.Error("the paired set has the hash of another set")
	}
	s, c, paired, err := canary.Unpair(split, "")
	if err != nil || !paired || render.SetHash(s) != stable.Hash || render.SetHash(c) != candidate.Hash {
		t.Errorf("taken apart: %v paired %v, stable %s (want %s), canary %s (want %s)", err, paired, render.SetHash(s), stable.Hash, render.SetHash(c), candidate.Hash)
	}
	if s, c, paired, _ := canary.Unpair(stable.Objects, canary.DefaultLabel); paired || render.SetHash(s) != stable.Hash || render.SetHash(c) != stable.Hash {
		t.Error("an unpaired set is not both halves")
	}
	if canary.SetHash(split) != render.SetHash(split) {
		t.Error("canary.SetHash and render.SetHash disagree")
	}
	// An item that already selects on the label can't be paired.
	own := set(t, "gzip:\n  target:\n    selector: {globalconfig.io/canary: \"true\"}\n")
	if _, err := canary.Pair(stable.Objects, own.Objects, canary.DefaultLabel); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a target selecting on the canary label: %v", err)
	}
}

func byName(s canary.Set, name string) *envoyfilter.Object {
	for _, o := range s.Objects {
		if o.Metadata.Name == name {
			return o
		}
	}
	return nil
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func policy() canary.Policy {
	return canary.Policy{Strategy: canary.Canary, BakeTime: secs(30 * time.Second)}
}

func with(in canary.Input, f func(*canary.Input)) canary.Input {
	f(&in)
	return in
}

func step(t *testing.T, in canary.Input) canary.Output {
	t.Helper()
	out, err := canary.Step(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func secs(d time.Duration) *items.Seconds { return &items.Seconds{Duration: d} }

// gateway is a proxy of the fleet: a gateway of Istio 1.31.0 labelled v.
func gateway(name, v string) canary.FleetProxy {
	return canary.FleetProxy{Name: name + ".istio-system", Kind: "gateway", IstioVersion: "1.31.0", Labels: labelled(v), Istiod: "http://istiod:8080"}
}

// fleetOf is a known fleet.
func fleetOf(ps ...canary.FleetProxy) func(string) canary.Fleet {
	return func(string) canary.Fleet { return canary.Fleet{Known: true, Proxies: ps} }
}

// canarySeen is a canary as istiod reports it: state, and the markers its
// configuration holds.
func canarySeen(name, state string, markers map[string]string) canary.Seen {
	return canary.Seen{FleetProxy: gateway(name, "true"), State: state, Markers: markers,
		Message: map[string]string{canary.StateNACKed: "LDS: cache_time_ms must not be set"}[state]}
}

// stepFixture is a canary change from stable to cand of gzip, over two
// canaries and a stable gateway.
type stepFixture struct {
	stable, cand  canary.Set
	base          canary.Input
	split, steady string
	marker        map[string]string
	record        *canary.Record
	in            canary.Input // base with the phase started and delivered at t0
}

func newStepFixture(t *testing.T) *stepFixture {
	f := &stepFixture{stable: set(t, "gzip: {}\n"), cand: set(t, "gzip:\n  minContentLength: 2048\n")}
	f.base = canary.Input{Policy: policy(), Document: "doc1", Candidate: f.cand, Stable: &f.stable, InForce: f.stable.Hash, Now: t0, Tracking: true, PairedBy: canary.DefaultLabel,
		Root: "istio-system", Fleet: fleetOf(gateway("gw-a", "true"), gateway("gw-b", "true"), gateway("gw-s", "false"))}
	f.split = render.SetHash(pair(t, f.stable, f.cand))
	f.steady = render.SetHash(pair(t, f.cand, f.cand))
	f.marker = map[string]string{"gzip": byName(f.cand, "globalconfig-gzip").Hash()}
	start := step(t, f.base)
	r := *start.Record
	delivered := t0
	r.Delivered = &delivered
	f.record = &r
	f.in = with(f.base, func(in *canary.Input) { in.Record = f.record })
	return f
}

// answers is istiod's word on the canary set: each canary's state, and
// the canary copy in its configuration when it ACKed.
func (f *stepFixture) answers(states ...string) canary.Verdict {
	v := canary.Verdict{Known: true, Version: f.split}
	for i, s := range states {
		var markers map[string]string
		if s == canary.StateSynced {
			markers = f.marker
		}
		v.Canaries = append(v.Canaries, canarySeen("gw-"+string(rune('a'+i)), s, markers))
		switch s {
		case canary.StateSynced:
			v.Synced++
		case canary.StateNACKed:
			v.NACKed++
		default:
			v.Pending++
		}
	}
	v.Synced++ // the stable gateway
	return v
}

func TestStep(t *testing.T) {
	f := newStepFixture(t)
	stable, cand, base := f.stable, f.cand, f.base
	// Direct without a policy; under a policy, the first set and a set
	// that changes nothing go out directly, paired.
	if out := step(t, with(base, func(in *canary.Input) { in.Policy, in.Tracking = canary.Policy{}, false })); out.Record != nil || !out.Promote || render.SetHash(out.Deliver) != cand.Hash {
		t.Errorf("no policy: %+v", out)
	}
	for name, in := range map[string]canary.Input{
		"the first set":   with(base, func(in *canary.Input) { in.Stable, in.InForce = nil, "" }),
		"nothing changed": with(base, func(in *canary.Input) { in.InForce = cand.Hash }),
	} {
		if out := step(t, in); out.Record != nil || !out.Promote || render.SetHash(out.Deliver) != f.steady {
			t.Errorf("%s: want the set paired, directly: %+v", name, out)
		}
	}

	r := f.record
	if r.Phase != canary.InCanary || r.From != stable.Hash || r.To != cand.Hash || !slices.Equal(r.Items, []string{"gzip"}) ||
		r.Needed != "100%" || r.BakeTime != "30s" || r.PhaseTimeout != "1m30s" || r.Coverage != "Variants" || r.Label != canary.DefaultLabel {
		t.Fatalf("start: %+v", r)
	}
	if len(r.Canaries) != 2 || r.Canaries[0].Name != "gw-a.istio-system" || r.Canaries[1].State != canary.StatePending {
		t.Errorf("the canaries known at the start: %+v", r.Canaries)
	}
	baked := t0.Add(31 * time.Second)
	cases := []struct {
		name    string
		change  func(*canary.Input)
		phase   canary.Phase
		deliver string
		message string
	}{
		{"waiting", func(in *canary.Input) { in.Verdict = f.answers("Pending", "Pending") }, canary.InCanary, f.split, ""},
		{"synced but not baked", func(in *canary.Input) { in.Verdict = f.answers("Synced", "Synced") }, canary.InCanary, f.split, ""},
		{"baked", func(in *canary.Input) { in.Verdict, in.Now = f.answers("Synced", "Synced"), baked }, canary.Promoted, f.steady, "2 of 2 canaries ACKed the canary copy"},
		{"a NACK before the bake time", func(in *canary.Input) { in.Verdict = f.answers("Synced", "NACKed") }, canary.RolledBack, f.stablePair(t), "canary gw-b.istio-system rejected the change: LDS: cache_time_ms must not be set"},
		{"silent canary", func(in *canary.Input) { in.Verdict, in.Now = f.answers("Synced", "Pending"), baked }, canary.RolledBack, f.stablePair(t),
			"1 of 2 canaries ACKed the canary copy within the bake time 30s, 2 needed; not ACKed: gw-b.istio-system"},
		{"half needed", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced", "Pending"), baked
			in.Policy.CanaryAcks = canary.Acks{Percent: 50}
		}, canary.Promoted, f.steady, "1 of 2"},
		{"an ACK without the canary copy", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced", "Synced"), baked
			in.Verdict.Canaries[1].Markers = nil
		}, canary.RolledBack, f.stablePair(t), "1 of 2 canaries ACKed the canary copy"},
		{"a canary known at the start no istiod reports", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced"), baked
		}, canary.RolledBack, f.stablePair(t), "not ACKed: gw-b.istio-system"},
		{"an istiod did not answer", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced", "Synced"), baked
			in.Verdict.Partial, in.Verdict.Unreachable = true, []string{"http://istiod-2:8080"}
		}, canary.InCanary, f.split, ""},
		{"a proxy that is no canary NACKs", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced", "Synced"), baked
			in.Verdict.NACKed++
			in.Verdict.NACKs = []canary.Answer{{Name: "gw-s.istio-system", State: canary.StateNACKed, Message: "LDS: refused"}}
		}, canary.InCanary, f.split, ""},
		{"unlabelled proxy", func(in *canary.Input) {
			in.Verdict, in.Now = f.answers("Synced", "Synced"), baked
			in.Verdict.Unlabelled = []string{"gw-x.prod"}
		}, canary.InCanary, f.split, ""},
		{"istiod silent", func(in *canary.Input) { in.Now = baked }, canary.InCanary, f.split, ""},
		{"the phase timeout", func(in *canary.Input) { in.Now = t0.Add(91 * time.Second) }, canary.RolledBack, f.stablePair(t),
			"the canary phase did not end within the phase timeout 1m30s"},
		{"operator promotes", func(in *canary.Input) { in.Action = canary.ActionPromote }, canary.Promoted, f.steady, "promoted by an operator"},
		{"operator aborts", func(in *canary.Input) { in.Action, in.Verdict = canary.ActionAbort, f.answers("Synced") }, canary.RolledBack, f.stablePair(t), "aborted by an operator"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := with(f.in, tc.change)
			out := step(t, in)
			if out.Record == nil || out.Record.Phase != tc.phase || render.SetHash(out.Deliver) != tc.deliver {
				t.Fatalf("got %+v delivering %s, want %s delivering %s", out.Record, render.SetHash(out.Deliver), tc.phase, tc.deliver)
			}
			if !strings.Contains(out.Record.Message, tc.message) {
				t.Errorf("message %q, want %q", out.Record.Message, tc.message)
			}
			if ended := tc.phase != canary.InCanary; out.Ended != ended || out.Promote || (ended && out.Record.Ended == nil) {
				t.Errorf("ended %v promote %v record %+v", out.Ended, out.Promote, out.Record)
			}
			if in.Record.Phase != canary.InCanary || in.Record.Message != "" {
				t.Error("Step changed its input's record")
			}
			if tc.phase == canary.InCanary && in.Now.Equal(baked) && in.Action == "" && out.Record.Waiting == "" {
				t.Errorf("baked, yet neither promoted nor saying why: %+v", out.Record)
			}
			// What ended stays ended for the same document.
			if tc.phase == canary.RolledBack {
				again := step(t, with(in, func(in *canary.Input) { in.Record, in.Verdict, in.Action = out.Record, canary.Verdict{}, "" }))
				if again.Record != out.Record || render.SetHash(again.Deliver) != tc.deliver || again.Started || again.Ended {
					t.Errorf("the next sync: %+v", again)
				}
			}
		})
	}

	// A promotion is watched: a NACK of the promoted set rolls it back; every
	// answer in without one confirms it, and only then is the document
	// stored as the last good one.
	promoted := step(t, with(f.in, func(in *canary.Input) { in.Verdict, in.Now = f.answers("Synced", "Synced"), baked })).Record
	after := with(f.in, func(in *canary.Input) { in.Record, in.Now = promoted, baked.Add(time.Second) })
	if out := step(t, after); out.Promote || out.Record != promoted || render.SetHash(out.Deliver) != f.steady {
		t.Errorf("promoted, no answer yet: %+v", out)
	}
	nacked := step(t, with(after, func(in *canary.Input) {
		in.Verdict = canary.Verdict{Known: true, Version: f.steady, Synced: 2, NACKed: 1,
			NACKs: []canary.Answer{{Name: "gw-s.istio-system", State: canary.StateNACKed, Message: "LDS: refused"}}}
	}))
	if r := nacked.Record; r.Phase != canary.RolledBack || !strings.Contains(r.Message, "after the promotion proxy gw-s.istio-system rejected the change: LDS: refused") ||
		render.SetHash(nacked.Deliver) != f.stablePair(t) || nacked.Promote || len(r.NACKs) != 1 {
		t.Errorf("a NACK after the promotion: %+v %+v", nacked, r)
	}
	confirmed := step(t, with(after, func(in *canary.Input) { in.Verdict = canary.Verdict{Known: true, Version: f.steady, Synced: 3} }))
	if r := confirmed.Record; r.Phase != canary.Promoted || r.Confirmed == nil || !confirmed.Promote || !confirmed.Confirmed {
		t.Errorf("every answer in: %+v %+v", confirmed, r)
	}

	// After a roll back, a new edit starts a new rollout from the same
	// stable set; reverting the edit changes nothing.
	back := step(t, with(f.in, func(in *canary.Input) { in.Verdict = f.answers("NACKed") })).Record
	next := set(t, "gzip:\n  minContentLength: 4096\n")
	out := step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc2", next }))
	if !out.Started || out.Record.From != stable.Hash || out.Record.To != next.Hash {
		t.Errorf("a new edit after a roll back: %+v", out.Record)
	}
	out = step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc0", stable }))
	if out.Record != nil || render.SetHash(out.Deliver) != render.SetHash(pair(t, stable, stable)) {
		t.Errorf("back to the stable document: %+v", out)
	}
}

func (f *stepFixture) stablePair(t *testing.T) string {
	return render.SetHash(pair(t, f.stable, f.stable))
}

// Scenario 1 (issue 33), "no stable set means promote", at the step:
// without a usable stable set the step holds what the sinks have and
// never promotes, whether a phase is under way, was rolled back, or a new
// change would start one.
func TestNoStableSetHolds(t *testing.T) {
	f := newStepFixture(t)
	gone := func(in *canary.Input) {
		in.Stable = nil
		in.Resolve = func(hash, label string) (*canary.Set, string) {
			return nil, "the last good copy is missing, and the live EnvoyFilters hold other sets"
		}
	}
	baked := t0.Add(31 * time.Second)
	for name, in := range map[string]canary.Input{
		"a phase under way":     with(f.in, func(in *canary.Input) { gone(in); in.Now, in.Verdict = baked, f.answers("Synced", "Synced") }),
		"a phase rolled back":   with(f.in, func(in *canary.Input) { gone(in); in.Record = rolledBack(f.record) }),
		"a new change":          with(f.base, gone),
		"an operator's promote": with(f.in, func(in *canary.Input) { gone(in); in.Action = canary.ActionPromote }),
	} {
		out := step(t, in)
		if !out.Hold || out.Promote || out.Deliver != nil || !strings.Contains(out.Why, "the last good copy is missing") {
			t.Errorf("%s: want a hold saying why: %+v", name, out)
		}
	}
	// The stable set found again (rebuilt from the live EnvoyFilters): the
	// phase goes on from it.
	found := with(f.in, func(in *canary.Input) {
		in.Stable = nil
		in.Resolve = func(hash, _ string) (*canary.Set, string) {
			if hash == f.stable.Hash {
				return &f.stable, ""
			}
			return nil, "no"
		}
	})
	if out := step(t, found); out.Hold || render.SetHash(out.Deliver) != f.split {
		t.Errorf("rebuilt: %+v", out)
	}
}

func rolledBack(r *canary.Record) *canary.Record {
	c := *r
	c.Phase = canary.RolledBack
	return &c
}

// A phase that can't start is held (the stable set delivered, paired) and
// checked again on every step; it starts once the checks pass, and is
// rolled back at its timeout.
func TestHeldUntilTheChecksPass(t *testing.T) {
	f := newStepFixture(t)
	unlabelled := with(f.base, func(in *canary.Input) {
		in.Fleet = fleetOf(gateway("gw-a", "true"), canary.FleetProxy{Name: "gw-x.prod", Kind: "gateway", IstioVersion: "1.31.0", Labels: map[string]string{"istio": "ingressgateway"}})
	})
	held := step(t, unlabelled)
	r := held.Record
	if r.Phase != canary.Held || !held.Held || held.Started || render.SetHash(held.Deliver) != f.stablePair(t) ||
		!strings.Contains(r.Waiting, "proxy gw-x.prod carries no globalconfig.io/canary label") {
		t.Fatalf("unlabelled: %+v %+v", held, r)
	}
	again := step(t, with(unlabelled, func(in *canary.Input) { in.Record, in.Now = r, t0.Add(5*time.Second) }))
	if again.Record.Phase != canary.Held || again.Held || !again.Record.Started.Equal(t0) {
		t.Errorf("held again, the same reason: %+v", again)
	}
	unknown := step(t, with(f.base, func(in *canary.Input) {
		in.Fleet = func(string) canary.Fleet {
			return canary.Fleet{Why: "istiod http://istiod-2:8080: context deadline exceeded"}
		}
	}))
	if unknown.Record.Phase != canary.Held || !strings.Contains(unknown.Record.Waiting, "not every istiod said which proxies the change reaches (istiod http://istiod-2:8080: context deadline exceeded)") {
		t.Errorf("istiod silent before the phase: %+v", unknown.Record)
	}
	started := step(t, with(f.base, func(in *canary.Input) { in.Record, in.Now = r, t0.Add(10*time.Second) }))
	if started.Record.Phase != canary.InCanary || !started.Started || !started.Record.Started.Equal(t0) || render.SetHash(started.Deliver) != f.split {
		t.Errorf("the checks pass: %+v %+v", started, started.Record)
	}
	// Paired by another label (or none), a held phase keeps what the sinks
	// have: pairing by a label some proxy lacks would take everything
	// from it.
	if out := step(t, with(unlabelled, func(in *canary.Input) { in.PairedBy = "example.com/old" })); !out.Hold || out.Deliver != nil || out.Record.Phase != canary.Held {
		t.Errorf("held, paired by another label: %+v", out)
	}
	timedOut := step(t, with(unlabelled, func(in *canary.Input) { in.Record, in.Now = r, t0.Add(91*time.Second) }))
	if timedOut.Record.Phase != canary.RolledBack || !strings.Contains(timedOut.Record.Message, "could not start within the phase timeout 1m30s: proxy gw-x.prod carries no") {
		t.Errorf("held past the timeout: %+v", timedOut.Record)
	}
}

// Turning the policy on, or changing canaryLabel, pairs every item by the
// label: it waits, holding what the sinks have, until every proxy the set
// reaches carries the label.
func TestPairingByANewLabelWaitsForTheLabels(t *testing.T) {
	cand := set(t, "gzip: {}\n")
	in := canary.Input{Policy: policy(), Document: "d", Candidate: cand, InForce: cand.Hash, Now: t0, Root: "istio-system",
		Fleet: fleetOf(gateway("gw-a", "true"), canary.FleetProxy{Name: "gw-x.prod", Kind: "gateway", IstioVersion: "1.31.0", Labels: map[string]string{"istio": "ingressgateway"}})}
	for _, by := range []string{"", "example.com/old"} {
		out := step(t, with(in, func(in *canary.Input) { in.PairedBy = by }))
		if !out.Hold || out.Deliver != nil || !strings.Contains(out.Why, "proxy gw-x.prod carries no globalconfig.io/canary label") {
			t.Errorf("paired by %q: %+v", by, out)
		}
	}
	if out := step(t, with(in, func(in *canary.Input) { in.Fleet = fleetOf(gateway("gw-a", "true"), gateway("gw-b", "false")) })); out.Hold || len(out.Deliver) != 2 {
		t.Errorf("every proxy labelled: %+v", out)
	}
	if out := step(t, with(in, func(in *canary.Input) { in.PairedBy = canary.DefaultLabel })); out.Hold || len(out.Deliver) != 2 {
		t.Errorf("paired by the label already: %+v", out)
	}
}

// Scenario 3 and 4 (issue 33) at the step: a change that no canary
// receives, or whose kinds and release variants of proxy no canary
// represents, does not start.
func TestPrecheck(t *testing.T) {
	sidecar := func(name, v string) canary.FleetProxy {
		return canary.FleetProxy{Name: name + ".shop", Kind: "sidecar", IstioVersion: "1.31.0", Labels: map[string]string{"app": "shop", canary.DefaultLabel: v}, Istiod: "http://istiod:8080"}
	}
	old := func(name, v string) canary.FleetProxy {
		p := gateway(name, v)
		p.IstioVersion = "1.27.3"
		return p
	}
	zipkin := func(n int) string {
		return fmt.Sprintf("target:\n  istioVersions: [\"1.27\", \"1.31\"]\ntracing:\n  enable: true\n  sampling: %d\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\n", n)
	}
	for _, tc := range []struct {
		name, from, to string
		fleet          []canary.FleetProxy
		coverage       canary.Coverage
		want           string
	}{
		{"a target no canary matches", "gzip: {}\n", "gzip:\n  minContentLength: 4096\n  target:\n    selector: {gateway: stable-only}\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), {Name: "gw-s.istio-system", Kind: "gateway", IstioVersion: "1.31.0", Labels: map[string]string{"istio": "ingressgateway", "gateway": "stable-only", canary.DefaultLabel: "false"}, Istiod: "http://istiod:8080"}},
			"", "gzip reaches no proxy labelled globalconfig.io/canary=true (it reaches gateways labelled gateway=stable-only), so the change would be promoted untested"},
		{"sidecars and only gateway canaries", "gzip: {}\n", "target:\n  context: ANY\ngzip:\n  minContentLength: 4096\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), gateway("gw-s", "false"), sidecar("app-1", "false")}, "",
			"gzip reaches sidecars, and no canary is one (rollout.coverage Variants)"},
		{"sidecars covered", "gzip: {}\n", "target:\n  context: ANY\ngzip:\n  minContentLength: 4096\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), sidecar("app-0", "true"), sidecar("app-1", "false")}, "", ""},
		{"kinds: sidecars still needed", "gzip: {}\n", "target:\n  context: ANY\ngzip:\n  minContentLength: 4096\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), sidecar("app-1", "false")}, canary.CoverKinds, "gzip reaches sidecars, and no canary is one"},
		{"items: one canary is enough", "gzip: {}\n", "target:\n  context: ANY\ngzip:\n  minContentLength: 4096\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), sidecar("app-1", "false")}, canary.CoverItems, ""},
		{"a canary known by its pod only is no coverage", "gzip: {}\n", "target:\n  context: ANY\ngzip:\n  minContentLength: 4096\n",
			[]canary.FleetProxy{gateway("gw-c", "true"), sidecar("app-1", "false"),
				{Name: "app-0.shop", Kind: "sidecar", Labels: map[string]string{"app": "shop", canary.DefaultLabel: "true"}}}, "", "gzip reaches sidecars, and no canary is one"},
		{"a release variant no canary runs", zipkin(10), zipkin(20),
			[]canary.FleetProxy{gateway("gw-c", "true"), gateway("gw-s", "false"), old("gw-old", "false")}, "",
			"tracing reaches gateways of Istio 1.27.3, and no canary is one"},
		{"kinds: a release variant is not needed", zipkin(10), zipkin(20),
			[]canary.FleetProxy{gateway("gw-c", "true"), gateway("gw-s", "false"), old("gw-old", "false")}, canary.CoverKinds, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := set(t, tc.from), set(t, tc.to)
			p := policy()
			p.Coverage = tc.coverage
			out := step(t, canary.Input{Policy: p, Document: "d", Candidate: to, Stable: &from, Now: t0, Root: "istio-system", Fleet: fleetOf(tc.fleet...)})
			switch {
			case tc.want == "" && out.Record.Phase != canary.InCanary:
				t.Errorf("did not start: %s", out.Record.Waiting)
			case tc.want != "" && (out.Record.Phase != canary.Held || !strings.Contains(out.Record.Waiting, tc.want)):
				t.Errorf("got %s %q, want held: %q", out.Record.Phase, out.Record.Waiting, tc.want)
			}
		})
	}
}

// Scenario 8 (issue 33) at the step: an edit that changes no EnvoyFilter
// continues the phase (the same start, the same bake), and the phase is
// bounded by its timeout.
func TestEditThatChangesNoEnvoyFilterContinuesThePhase(t *testing.T) {
	f := newStepFixture(t)
	out := step(t, with(f.in, func(in *canary.Input) { in.Document, in.Now = "doc1-comment", t0.Add(20*time.Second) }))
	r := out.Record
	if out.Started || r.Phase != canary.InCanary || !r.Started.Equal(t0) || r.Delivered == nil || !r.Delivered.Equal(t0) || r.Latest != "doc1-comment" || r.Document != "doc1" {
		t.Fatalf("a comment edit mid-phase: %+v %+v", out, r)
	}
	done := step(t, with(f.in, func(in *canary.Input) {
		in.Record, in.Document, in.Now, in.Verdict = r, "doc1-comment", t0.Add(31*time.Second), f.answers("Synced", "Synced")
	}))
	if done.Record.Phase != canary.Promoted {
		t.Errorf("promoted after the bake time from the first delivery: %+v", done.Record)
	}
}

// A follower serves what the record says of its document and decides
// nothing: it holds while the record is about another document or its
// stable set is not known, serves the stable set for a record that
// outlived its phase timeout, and never starts or ends a phase.
func TestFollow(t *testing.T) {
	f := newStepFixture(t)
	stable, cand := f.stable, f.cand
	in := canary.Input{Policy: policy(), Document: "doc1", Candidate: cand, Stable: &stable, InForce: stable.Hash, Now: t0, Follow: true, PairedBy: canary.DefaultLabel}
	rec := func(p canary.Phase, doc, from string) *canary.Record {
		return &canary.Record{Strategy: canary.Canary, Phase: p, Document: doc, From: from, To: cand.Hash, Label: canary.DefaultLabel, BakeTime: "30s", Started: t0}
	}
	for _, tc := range []struct {
		name   string
		record *canary.Record
		now    time.Time
		hold   bool
		want   string
	}{
		{"no record yet: hold", nil, t0, true, ""},
		{"a record of another document: hold", rec(canary.InCanary, "doc0", stable.Hash), t0, true, ""},
		{"held: the stable set", rec(canary.Held, "doc1", stable.Hash), t0, false, f.stablePair(t)},
		{"in the phase: the canary set", rec(canary.InCanary, "doc1", stable.Hash), t0, false, f.split},
		{"the stable set is not known: hold", rec(canary.InCanary, "doc1", "other"), t0, true, ""},
		{"promoted", rec(canary.Promoted, "doc1", stable.Hash), t0, false, f.steady},
		{"rolled back", rec(canary.RolledBack, "doc1", stable.Hash), t0, false, f.stablePair(t)},
		{"rolled back, the stable set is not known: hold", rec(canary.RolledBack, "doc1", "other"), t0, true, ""},
		{"a phase past its timeout and the grace: the stable set", rec(canary.InCanary, "doc1", stable.Hash), t0.Add(90*time.Second + canary.DefaultGrace + time.Second), false, f.stablePair(t)},
	} {
		out := step(t, with(in, func(in *canary.Input) {
			in.Record, in.Now = tc.record, tc.now
			in.Verdict = canary.Verdict{Known: true, Canaries: []canary.Seen{canarySeen("c", canary.StateNACKed, nil)}}
		}))
		if out.Hold != tc.hold || (!tc.hold && render.SetHash(out.Deliver) != tc.want) || out.Started || out.Ended || out.Record != tc.record {
			t.Errorf("%s: %+v", tc.name, out)
		}
	}
	if out := step(t, with(in, func(in *canary.Input) { in.InForce = cand.Hash })); out.Hold || render.SetHash(out.Deliver) != f.steady {
		t.Errorf("no record, the document's set in force: %+v", out)
	}
	if out := step(t, with(in, func(in *canary.Input) { in.Policy = canary.Policy{} })); out.Hold || render.SetHash(out.Deliver) != cand.Hash {
		t.Errorf("without a policy: %+v", out)
	}
}

// The traffic gate's rules: a ceiling, a ratio above a floor, and too
// little traffic.
func TestTrafficReport(t *testing.T) {
	a := &canary.Analysis{LocalReplies: true}
	fig := func(req, e5, local float64) canary.Figures {
		return canary.Figures{Proxies: 1, Read: 1, Requests: req, Server5xx: e5, LocalReplies: local}
	}
	for _, tc := range []struct {
		name        string
		c, s        canary.Figures
		failed, few bool
		want        string
	}{
		{"quiet", fig(50, 0, 0), fig(500, 0, 0), false, true, "the canaries answered 50 requests"},
		{"healthy", fig(200, 1, 0), fig(2000, 10, 0), false, false, "5xx responses: the canaries' share 0.5% (1 of 200 requests)"},
		{"413 for every POST", fig(200, 0, 100), fig(2000, 0, 0), true, false, "local replies: the canaries' share 50.0% (100 of 200 requests), the stable proxies' 0.0% (0 of 2000), above the ceiling 5.0%"},
		{"twice the stable share", fig(1000, 40, 0), fig(1000, 10, 0), true, false, "more than 2 times theirs"},
		{"a flaky backend everywhere", fig(1000, 45, 0), fig(1000, 40, 0), false, false, "4.5%"},
		{"noise", fig(1000, 5, 0), fig(1000, 0, 0), false, false, "0.5%"},
		{"one stray local reply", fig(178, 0, 1), fig(177, 0, 0), false, false, "0.6%"},
		{"two stray local replies", fig(178, 0, 2), fig(177, 0, 0), false, false, "1.1%"},
		{"a few errors, more than twice theirs", fig(200, 6, 0), fig(200, 2, 0), true, false, "more than 2 times theirs"},
	} {
		r := canary.TrafficVerdict{Known: true, Canary: tc.c, Stable: tc.s, Since: t0}.Report(a)
		if r.Failed != tc.failed || r.Insufficient != tc.few || !strings.Contains(r.Verdict, tc.want) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
	// Local replies are judged only when asked.
	if r := (canary.TrafficVerdict{Known: true, Canary: fig(200, 0, 100), Stable: fig(200, 0, 0)}).Report(&canary.Analysis{}); r.Failed {
		t.Errorf("local replies judged without localReplies: %+v", r)
	}
}
func TestPolicyValidation(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rollout:\n  strategy: Canary\n  bakeTime: 2h\n", "rollout.bakeTime: must be between 1s and 1h0m0s, got 2h0m0s"},
		{"rollout:\n  strategy: Canary\n  bakeTime: 500ms\n", "rollout.bakeTime: must be between 1s and 1h0m0s, got 500ms"},
		{"rollout:\n  strategy: Canary\n  canaryAcks: 0\n", "rollout.canaryAcks: must be a count between 1 and 10000"},
		{"rollout:\n  strategy: Canary\n  canaryAcks: 150%\n", "rollout.canaryAcks: must be a percentage between"},
		{"rollout:\n  strategy: Canary\n  canaryLabel: not a label\n", "rollout.canaryLabel: invalid label key"},
		{"rollout:\n  bakeTime: 30s\n", "rollout.strategy: is Direct, so canaryLabel, canaryAcks, bakeTime, coverage, phaseTimeout and analysis do nothing"},
		{"rollout:\n  analysis: {}\n", "rollout.strategy: is Direct"},
		{"rollout:\n  strategy: Canary\n  bakeTime: 2m\n  phaseTimeout: 1m\n", "rollout.phaseTimeout: is 1m0s, shorter than the bake time 2m0s"},
		{"rollout:\n  strategy: Canary\n  phaseTimeout: 4h\n", "rollout.phaseTimeout: must be between 1s and 3h0m0s"},
		{"rollout:\n  strategy: Canary\n  coverage: kinds\n", `rollout.coverage: unknown value "kinds"; did you mean "Kinds"?`},
		{"rollout:\n  strategy: Canary\n  analysis: {maxRatio: 0.5}\n", "rollout.analysis.maxRatio: must be between 1 and 100, got 0.5"},
		{"rollout:\n  strategy: Canary\n  analysis: {maxShare: 5}\n", `rollout.analysis.maxShare: expected a percentage such as "5%"`},
		{"rollout:\n  strategy: Canary\n  analysis: {maxShare: \"150%\"}\n", `rollout.analysis.maxShare: must be a percentage from "0%" to "100%"`},
		{"rollout:\n  strategy: Canary\n  analysis: {insufficientTraffic: Wait}\n", "rollout.analysis.insufficientTraffic: must be one of Promote, RollBack"},
		{"rollout:\n  strategy: canary\n", `rollout.strategy: unknown value "canary"; did you mean "Canary"?`},
		{"rollout:\n  strategy: Canary\n  bake: 30s\n", "rollout.bake"},
		{"rollout:\n  strategy: Canary\n  rollbackOn: AnyNACK\n", "rollout.rollbackOn: applies to strategy Direct only"},
		{"rollout:\n  rollbackOn: anyNack\n", `rollout.rollbackOn: unknown value "anyNack"; did you mean "AnyNACK"?`},
	} {
		_, err := document.Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
	doc, err := document.Parse([]byte("rollout:\n  strategy: Canary\n  canaryAcks: \"50%\"\n  bakeTime: 90\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := doc.Rollout; !p.Enabled() || p.Bake() != 90*time.Second || p.CanaryAcks.Needed(3) != 2 || p.Label() != canary.DefaultLabel {
		t.Errorf("policy: %+v", p)
	}
	for text, want := range map[string]canary.RollbackOn{"rollout:\n  rollbackOn: AnyNACK\n": canary.AnyNACK, "rollout:\n  strategy: Direct\n": canary.AllNACK, "gzip: {}\n": canary.AllNACK} {
		doc, err := document.Parse([]byte(text))
		if err != nil || doc.Rollout.Enabled() || doc.Rollout.Rollback() != want {
			t.Errorf("%q: %v, rollbackOn %q, want %q", text, err, doc.Rollout.Rollback(), want)
		}
	}
	doc, err = document.Parse([]byte("rollout:\n  strategy: Canary\n  bakeTime: 20s\n  analysis:\n    maxShare: \"0.5%\"\n    localReplies: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := doc.Rollout; p.Timeout() != time.Minute || p.Covers() != canary.CoverVariants || p.Analysis.Ceiling() != 0.005 || p.Analysis.Ratio() != 2 ||
		p.Analysis.Minimum() != 100 || p.Analysis.OnInsufficient() != canary.PromoteAnyway || !p.Analysis.LocalReplies {
		t.Errorf("defaults: %+v %+v", p, p.Analysis)
	}
	if n := (canary.Acks{Count: 2}).Needed(5); n != 2 {
		t.Errorf("a count of 2 needs %d", n)
	}
	if n := (canary.Acks{}).Needed(0); n != 1 {
		t.Errorf("100%% of no canaries needs %d, want 1: never a promotion without an ACK", n)
	}
}

// verdict is istiod's word on the set hash: every proxy that answered,
// by state, NACKed ones first with Envoy's words.
func verdict(hash string, synced, pending, nacked int) canary.Verdict {
	v := canary.Verdict{Known: true, Version: hash, Since: t0.Add(-time.Second), Synced: synced, Pending: pending, NACKed: nacked}
	for i := range nacked {
		v.NACKs = append(v.NACKs, canary.Answer{Name: fmt.Sprintf("gw-%d.istio-system", i), State: canary.StateNACKed,
			Message: "LDS: Error adding/updating listener(s) 0.0.0.0_8080: cache_time_ms must not be set"})
	}
	return v
}

// A Direct change goes out at once, as always, and is judged by the
// proxies' answers to its own set: taken, it becomes the last good
// document; refused by the rule, every proxy gets the stable set again
// and the document is rejected; without the answers, neither.
func TestDirect(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	base := canary.Input{Document: "doc1", Candidate: cand, Stable: &stable, Now: t0, Tracking: true}
	anyNACK := canary.Policy{RollbackOn: canary.AnyNACK}
	for _, tc := range []struct {
		name    string
		policy  canary.Policy
		verdict canary.Verdict
		// want: "" (delivered, undecided), Promoted or RolledBack
		want    canary.Phase
		waiting string
	}{
		{name: "no answer yet", verdict: canary.Verdict{}},
		{name: "answers about the set before", verdict: verdict(stable.Hash, 0, 0, 2)},
		{name: "pending", verdict: verdict(cand.Hash, 0, 2, 0)},
		{name: "every proxy ACKed", verdict: verdict(cand.Hash, 2, 0, 0), want: canary.Promoted},
		{name: "one ACK is enough under AllNACK", verdict: verdict(cand.Hash, 1, 3, 0), want: canary.Promoted},
		{name: "every proxy NACKed", verdict: verdict(cand.Hash, 0, 0, 2), want: canary.RolledBack},
		{name: "partial NACK: stays under AllNACK", verdict: verdict(cand.Hash, 1, 0, 1), want: canary.Promoted},
		{name: "partial NACK under AnyNACK", policy: anyNACK, verdict: verdict(cand.Hash, 1, 0, 1), want: canary.RolledBack},
		{name: "one NACK, the rest pending, under AnyNACK", policy: anyNACK, verdict: verdict(cand.Hash, 0, 3, 1), want: canary.RolledBack},
		{name: "one NACK, the rest pending: wait under AllNACK", verdict: verdict(cand.Hash, 0, 3, 1)},
		{name: "every ACK in under AnyNACK", policy: anyNACK, verdict: verdict(cand.Hash, 2, 0, 0), want: canary.Promoted},
		{name: "ACKs with some pending under AnyNACK: wait", policy: anyNACK, verdict: verdict(cand.Hash, 2, 1, 0)},
		{name: "NACKs, but an istiod did not answer", verdict: with2(verdict(cand.Hash, 0, 0, 2), func(v *canary.Verdict) { v.Partial = true }),
			waiting: "2 proxies NACKed the change, but not every istiod answered: nothing is rolled back on missing answers"},
		{name: "no istiod answered", verdict: with2(verdict(cand.Hash, 0, 0, 0), func(v *canary.Verdict) { v.Partial = true }),
			waiting: "not every istiod answered, so whether the proxies took the change is not known"},
		{name: "no proxy answered in time", verdict: with2(verdict(cand.Hash, 0, 0, 0), func(v *canary.Verdict) { v.Stale = 2 }),
			waiting: "no proxy the set reaches has answered for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := step(t, with(base, func(in *canary.Input) { in.Policy, in.Verdict = tc.policy, tc.verdict }))
			switch tc.want {
			case "":
				if out.Record != nil || out.Promote || out.Hold || out.Direct != "" || render.SetHash(out.Deliver) != cand.Hash {
					t.Errorf("want the change delivered, undecided: %+v", out)
				}
				if !strings.Contains(out.Waiting, tc.waiting) || (tc.waiting == "") != (out.Waiting == "") {
					t.Errorf("waiting %q, want %q", out.Waiting, tc.waiting)
				}
			case canary.Promoted:
				if out.Record != nil || !out.Promote || out.Direct != canary.Promoted || render.SetHash(out.Deliver) != cand.Hash {
					t.Errorf("want the change promoted: %+v", out)
				}
			case canary.RolledBack:
				r := out.Record
				if r == nil || !r.Direct() || r.Phase != canary.RolledBack || out.Promote || out.Direct != canary.RolledBack || render.SetHash(out.Deliver) != stable.Hash {
					t.Fatalf("want a roll back: %+v %+v", out, r)
				}
				if r.From != stable.Hash || r.To != cand.Hash || r.Document != "doc1" || !slices.Equal(r.Items, []string{"gzip"}) ||
					r.RollbackOn != tc.policy.Rollback() || r.Ended == nil || !r.Started.Equal(tc.verdict.Since) || len(r.NACKs) != tc.verdict.NACKed {
					t.Errorf("record %+v", r)
				}
				if !strings.HasPrefix(r.Message, "proxy gw-0.istio-system rejected the change: LDS: Error adding/updating listener(s) 0.0.0.0_8080: cache_time_ms must not be set; ") {
					t.Errorf("message %q", r.Message)
				}
			}
		})
	}
	// Without a tracker a Direct change is promoted as it goes out.
	if out := step(t, with(base, func(in *canary.Input) { in.Tracking = false })); !out.Promote || out.Record != nil || out.Direct != "" {
		t.Errorf("untracked: %+v", out)
	}
}

func with2(v canary.Verdict, f func(*canary.Verdict)) canary.Verdict {
	f(&v)
	return v
}

// After a Direct roll back the document stays rejected, and the restored
// set is judged once: taken, the roll back stands for good; refused too,
// the document is kept for good. Neither depends on later answers, so a
// document is rolled back at most once and kept at most once.
func TestDirectAfterRollBack(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	base := canary.Input{Document: "doc1", Candidate: cand, Stable: &stable, Now: t0, Tracking: true}
	back := step(t, with(base, func(in *canary.Input) { in.Verdict = verdict(cand.Hash, 0, 0, 2) })).Record
	in := with(base, func(in *canary.Input) { in.Record = back })

	for name, v := range map[string]canary.Verdict{
		"no answer about the restored set": {},
		"the change's NACKs, still":        verdict(cand.Hash, 0, 0, 2),
		"the restored set pending":         verdict(stable.Hash, 0, 2, 0),
	} {
		out := step(t, with(in, func(in *canary.Input) { in.Verdict = v }))
		if out.Record != back || render.SetHash(out.Deliver) != stable.Hash || out.Promote || out.Direct != "" {
			t.Errorf("%s: %+v", name, out)
		}
	}
	// Taken: recorded, and not judged again.
	taken := step(t, with(in, func(in *canary.Input) { in.Verdict = verdict(stable.Hash, 2, 0, 0) }))
	if r := taken.Record; r.Phase != canary.RolledBack || r.Restored != canary.RestoredTaken || render.SetHash(taken.Deliver) != stable.Hash || taken.Direct != "" || back.Restored != "" {
		t.Fatalf("the restored set taken: %+v %+v", taken, r)
	}
	later := step(t, with(in, func(in *canary.Input) { in.Record, in.Verdict = taken.Record, verdict(stable.Hash, 0, 0, 2) }))
	if later.Record != taken.Record || render.SetHash(later.Deliver) != stable.Hash {
		t.Errorf("a later NACK of the restored set changed a settled roll back: %+v", later)
	}
	// Refused too: the refusal is not the change's; the document is kept.
	kept := step(t, with(in, func(in *canary.Input) { in.Verdict = verdict(stable.Hash, 0, 0, 2) }))
	r := kept.Record
	if r == nil || r.Phase != canary.Kept || r.Restored != canary.RestoredRefused || !kept.Promote || kept.Direct != canary.Kept || render.SetHash(kept.Deliver) != cand.Hash {
		t.Fatalf("the restored set refused: %+v %+v", kept, r)
	}
	for _, want := range []string{"proxy gw-0.istio-system refused the restored last good set as well: LDS", "the refusal is not this change's", "so the document is kept", "(it was rolled back because proxy gw-0.istio-system rejected the change"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("message %q lacks %q", r.Message, want)
		}
	}
	for name, v := range map[string]canary.Verdict{"NACKed still": verdict(cand.Hash, 0, 0, 2), "taken now": verdict(cand.Hash, 2, 0, 0), "unknown": {}} {
		again := step(t, with(in, func(in *canary.Input) { in.Record, in.Verdict = r, v }))
		if again.Record != r || render.SetHash(again.Deliver) != cand.Hash || !again.Promote || again.Direct != "" {
			t.Errorf("kept, %s: %+v", name, again)
		}
	}
	// A restart that lost the stable set holds; one without a tracker
	// keeps the roll back as it is.
	if out := step(t, with(in, func(in *canary.Input) { in.Stable = nil })); !out.Hold {
		t.Errorf("rolled back without a stable set: %+v", out)
	}
	if out := step(t, with(in, func(in *canary.Input) { in.Tracking, in.Verdict = false, verdict(stable.Hash, 0, 0, 2) })); out.Record != back || render.SetHash(out.Deliver) != stable.Hash {
		t.Errorf("untracked: %+v", out)
	}
	// A new edit goes out again, judged afresh; the old record goes.
	next := set(t, "gzip:\n  minContentLength: 4096\n")
	out := step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc2", next }))
	if out.Record != nil || render.SetHash(out.Deliver) != next.Hash || out.Promote {
		t.Errorf("a new edit after a roll back: %+v", out)
	}
	// Back to the stable document: nothing changes.
	out = step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc0", stable }))
	if out.Record != nil || render.SetHash(out.Deliver) != stable.Hash || !out.Promote {
		t.Errorf("back to the stable document: %+v", out)
	}
}

// A follower serves what the elected controller's Direct record says:
// the change until the controller decided, the restored set after a roll
// back (holding while its last good copy lags), the change once kept.
func TestFollowDirect(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	in := canary.Input{Document: "doc1", Candidate: cand, Stable: &stable, Now: t0, Follow: true}
	rec := func(p canary.Phase, doc, from string) *canary.Record {
		return &canary.Record{Strategy: canary.Direct, Phase: p, Document: doc, From: from, To: cand.Hash}
	}
	for _, tc := range []struct {
		name   string
		record *canary.Record
		hold   bool
		want   string
	}{
		{"no record: the change", nil, false, cand.Hash},
		{"a record of another document: the change", rec(canary.RolledBack, "doc0", stable.Hash), false, cand.Hash},
		{"rolled back: the restored set", rec(canary.RolledBack, "doc1", stable.Hash), false, stable.Hash},
		{"rolled back, the last good copy lags: hold", rec(canary.RolledBack, "doc1", "other"), true, ""},
		{"kept: the change", rec(canary.Kept, "doc1", stable.Hash), false, cand.Hash},
	} {
		out := step(t, with(in, func(in *canary.Input) {
			in.Record = tc.record
			in.Verdict = verdict(cand.Hash, 0, 0, 2)
		}))
		if out.Hold != tc.hold || (!tc.hold && render.SetHash(out.Deliver) != tc.want) || out.Direct != "" || out.Record != tc.record {
			t.Errorf("%s: %+v", tc.name, out)
		}
	}
}
