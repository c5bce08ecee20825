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

// applies says what istiod gives a proxy with labels: every EnvoyFilter
// whose workload selector's labels the proxy all carries.
func applies(objs []*envoyfilter.Object, labels map[string]string) map[string]string {
	out := map[string]string{} // item → spec hash without the canary label
	for _, o := range objs {
		sel := o.Spec.GetWorkloadSelector().GetLabels()
		ok := true
		for k, v := range sel {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		if _, dup := out[o.Item()]; dup {
			out[o.Item()] = "TWICE"
			continue
		}
		out[o.Item()] = patchesOf(o)
	}
	return out
}

func patchesOf(o *envoyfilter.Object) string {
	var b strings.Builder
	for _, p := range o.Spec.GetConfigPatches() {
		b.WriteString(p.String())
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

// The canary set gives a canary exactly the candidate's version of every
// item and every other labelled proxy exactly the stable version, each
// item once, for items added, changed, removed and left alone; an
// unlabelled proxy gets only the unchanged items, which is why a canary
// phase refuses unlabelled proxies.
func TestSplitGivesEachProxyOneVersion(t *testing.T) {
	stable := set(t, "gzip: {}\nheaders:\n  disableXEnvoyHeaders: true\ndownstream:\n  idleTimeout: 60\n")
	candidate := set(t, "gzip:\n  minContentLength: 2048\nhardening:\n  mergeSlashes: true\ndownstream:\n  idleTimeout: 60\n")
	if got := canary.Changed(stable.Objects, candidate.Objects); !slices.Equal(got, []string{"gzip", "hardening", "headers"}) {
		t.Fatalf("changed: %v", got)
	}
	split, err := canary.Split(stable.Objects, candidate.Objects, canary.DefaultLabel)
	if err != nil {
		t.Fatal(err)
	}
	gw := map[string]string{"istio": "ingressgateway"}
	with := func(v string) map[string]string {
		l := maps.Clone(gw)
		l[canary.DefaultLabel] = v
		return l
	}
	if got, w := applies(split, with("true")), want(candidate.Objects); !maps.Equal(got, w) {
		t.Errorf("a canary gets %v\nwant the candidate %v", keys(got), keys(w))
	}
	if got, w := applies(split, with("false")), want(stable.Objects); !maps.Equal(got, w) {
		t.Errorf("a stable proxy gets %v\nwant the stable set %v", keys(got), keys(w))
	}
	if got := keys(applies(split, gw)); !slices.Equal(got, []string{"downstream"}) {
		t.Errorf("an unlabelled proxy gets %v, want only the unchanged downstream", got)
	}
	names := map[string]bool{}
	for _, o := range split {
		key := o.Metadata.Namespace + "/" + o.Metadata.Name
		if names[key] {
			t.Errorf("two objects named %s", key)
		}
		names[key] = true
	}
	if !names["istio-system/globalconfig-gzip-canary"] || !names["istio-system/globalconfig-gzip"] || !names["istio-system/globalconfig-headers"] || names["istio-system/globalconfig-headers-canary"] {
		t.Errorf("names: %v", names)
	}
	if render.SetHash(split) == stable.Hash || render.SetHash(split) == candidate.Hash {
		t.Error("the canary set has the hash of another set")
	}
	// An item that already selects on the label can't be split.
	own := set(t, "gzip:\n  target:\n    selector: {globalconfig.io/canary: \"true\"}\n")
	if _, err := canary.Split(stable.Objects, own.Objects, canary.DefaultLabel); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a target selecting on the canary label: %v", err)
	}
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func policy() canary.Policy {
	return canary.Policy{Strategy: canary.Canary, BakeTime: secs(30 * time.Second)}
}

func TestStep(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	base := canary.Input{Policy: policy(), Document: "doc1", Candidate: cand, Stable: &stable, Now: t0}

	// Direct without a policy, without a stable set, and when nothing
	// changed.
	for name, in := range map[string]canary.Input{
		"no policy":  with(base, func(in *canary.Input) { in.Policy = canary.Policy{} }),
		"no stable":  with(base, func(in *canary.Input) { in.Stable = nil }),
		"no changes": with(base, func(in *canary.Input) { in.Stable = &cand }),
	} {
		out := step(t, in)
		if out.Record != nil || !out.Promote || render.SetHash(out.Deliver) != cand.Hash {
			t.Errorf("%s: want a direct rollout, got %+v", name, out)
		}
	}

	start := step(t, base)
	r := start.Record
	if !start.Started || r == nil || r.Phase != canary.InCanary || r.From != stable.Hash || r.To != cand.Hash || !slices.Equal(r.Items, []string{"gzip"}) || start.Promote {
		t.Fatalf("start: %+v %+v", start, r)
	}
	if r.Needed != "100%" || r.BakeTime != "30s" || r.Label != canary.DefaultLabel {
		t.Errorf("record: %+v", r)
	}
	split := render.SetHash(start.Deliver)
	in := with(base, func(in *canary.Input) { in.Record = r })
	answers := func(states ...string) canary.Verdict {
		v := canary.Verdict{Known: true}
		for i, s := range states {
			v.Canaries = append(v.Canaries, canary.Answer{Name: "gw-" + string(rune('a'+i)) + ".istio-system", State: s, Message: map[string]string{canary.StateNACKed: "LDS: cache_time_ms must not be set"}[s]})
		}
		return v
	}
	cases := []struct {
		name    string
		change  func(*canary.Input)
		phase   canary.Phase
		deliver string
		message string
	}{
		{"waiting", func(in *canary.Input) { in.Verdict = answers("Pending") }, canary.InCanary, split, ""},
		{"synced but not baked", func(in *canary.Input) { in.Verdict = answers("Synced") }, canary.InCanary, split, ""},
		{"baked", func(in *canary.Input) { in.Verdict, in.Baked = answers("Synced", "Synced"), true }, canary.Promoted, cand.Hash, "2 of 2 canaries ACKed"},
		{"a NACK before the bake time", func(in *canary.Input) { in.Verdict = answers("Synced", "NACKed") }, canary.RolledBack, stable.Hash, "canary gw-b.istio-system rejected the change: LDS: cache_time_ms must not be set"},
		{"silent canary", func(in *canary.Input) { in.Verdict, in.Baked = answers("Synced", "Pending"), true }, canary.RolledBack, stable.Hash, "1 of 2 canaries ACKed within the bake time 30s, 2 needed; not ACKed: gw-b.istio-system"},
		{"half needed", func(in *canary.Input) {
			in.Verdict, in.Baked = answers("Synced", "Pending"), true
			in.Policy.CanaryAcks = canary.Acks{Percent: 50}
		}, canary.Promoted, cand.Hash, "1 of 2"},
		{"no canary at all", func(in *canary.Input) { in.Verdict, in.Baked = canary.Verdict{Known: true}, true }, canary.RolledBack, stable.Hash, "no proxy labelled globalconfig.io/canary=true answered within the bake time 30s"},
		{"istiod silent", func(in *canary.Input) { in.Baked = true }, canary.RolledBack, stable.Hash, "no proxy labelled"},
		{"unlabelled proxy", func(in *canary.Input) {
			in.Verdict = answers("Synced")
			in.Verdict.Unlabelled = []string{"gw-x.prod"}
		}, canary.RolledBack, stable.Hash, "proxy gw-x.prod carries no globalconfig.io/canary label, so it would have lost gzip"},
		{"operator promotes", func(in *canary.Input) { in.Action = canary.ActionPromote }, canary.Promoted, cand.Hash, "promoted by an operator"},
		{"operator aborts", func(in *canary.Input) { in.Action, in.Verdict = canary.ActionAbort, answers("Synced") }, canary.RolledBack, stable.Hash, "aborted by an operator"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := with(in, tc.change)
			out := step(t, in)
			if out.Record == nil || out.Record.Phase != tc.phase || render.SetHash(out.Deliver) != tc.deliver {
				t.Fatalf("got %+v delivering %s, want %s delivering %s", out.Record, render.SetHash(out.Deliver), tc.phase, tc.deliver)
			}
			if !strings.Contains(out.Record.Message, tc.message) {
				t.Errorf("message %q, want %q", out.Record.Message, tc.message)
			}
			if ended := tc.phase != canary.InCanary; out.Ended != ended || out.Promote != (tc.phase == canary.Promoted) || (ended && out.Record.Ended == nil) {
				t.Errorf("ended %v promote %v record %+v", out.Ended, out.Promote, out.Record)
			}
			if in.Record.Phase != canary.InCanary || in.Record.Message != "" {
				t.Error("Step changed its input's record")
			}
			// What ended stays ended for the same document.
			if tc.phase != canary.InCanary {
				again := step(t, with(in, func(in *canary.Input) { in.Record, in.Verdict, in.Action = out.Record, canary.Verdict{}, "" }))
				if again.Record != out.Record || render.SetHash(again.Deliver) != tc.deliver || again.Started || again.Ended {
					t.Errorf("the next sync: %+v", again)
				}
			}
		})
	}

	// After a roll back, a new edit starts a new rollout from the same
	// stable set.
	back := step(t, with(in, func(in *canary.Input) { in.Verdict = answers("NACKed") })).Record
	next := set(t, "gzip:\n  minContentLength: 4096\n")
	out := step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc2", next }))
	if !out.Started || out.Record.From != stable.Hash || out.Record.To != next.Hash {
		t.Errorf("a new edit after a roll back: %+v", out.Record)
	}
	// Reverting the edit to the stable document goes out directly.
	out = step(t, with(base, func(in *canary.Input) { in.Record, in.Document, in.Candidate = back, "doc0", stable }))
	if out.Record != nil || render.SetHash(out.Deliver) != stable.Hash {
		t.Errorf("back to the stable document: %+v", out)
	}
	// A restart that lost the stable set holds what is delivered for a
	// rolled back document, and starts a canary phase again otherwise.
	if out := step(t, with(in, func(in *canary.Input) { in.Record, in.Stable = back, nil })); !out.Hold {
		t.Errorf("rolled back without a stable set: %+v", out)
	}
	// Unlabelled proxies found before the phase: rolled back before
	// anything is delivered; istiod not answering starts the phase.
	var asked string
	pre := step(t, with(base, func(in *canary.Input) {
		in.Fleet = func(label string, set []*envoyfilter.Object) canary.Verdict {
			asked = label + " " + render.SetHash(set)
			return canary.Verdict{Known: true, Unlabelled: []string{"gw-x.prod"}}
		}
	}))
	if asked != canary.DefaultLabel+" "+cand.Hash || pre.Record.Phase != canary.RolledBack || !pre.Started || !pre.Ended ||
		render.SetHash(pre.Deliver) != stable.Hash || !strings.Contains(pre.Record.Message, "proxy gw-x.prod carries no globalconfig.io/canary label") ||
		!strings.Contains(pre.Record.Message, "nothing was delivered") {
		t.Errorf("unlabelled before the phase (asked %q): %+v %+v", asked, pre, pre.Record)
	}
	if out := step(t, with(base, func(in *canary.Input) {
		in.Fleet = func(string, []*envoyfilter.Object) canary.Verdict { return canary.Verdict{} }
	})); out.Record.Phase != canary.InCanary {
		t.Errorf("istiod silent before the phase: %+v", out.Record)
	}
	other := set(t, "gzip:\n  minContentLength: 100\n")
	if out := step(t, with(in, func(in *canary.Input) { in.Stable = &other })); !out.Started || out.Record.From != other.Hash {
		t.Errorf("a canary phase whose stable set changed: %+v", out.Record)
	}
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

func TestPolicyValidation(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rollout:\n  strategy: Canary\n  bakeTime: 2h\n", "rollout.bakeTime: must be between 1s and 1h0m0s, got 2h0m0s"},
		{"rollout:\n  strategy: Canary\n  bakeTime: 500ms\n", "rollout.bakeTime: must be between 1s and 1h0m0s, got 500ms"},
		{"rollout:\n  strategy: Canary\n  canaryAcks: 0\n", "rollout.canaryAcks: must be a count between 1 and 10000"},
		{"rollout:\n  strategy: Canary\n  canaryAcks: 150%\n", "rollout.canaryAcks: must be a percentage between"},
		{"rollout:\n  strategy: Canary\n  canaryLabel: not a label\n", "rollout.canaryLabel: invalid label key"},
		{"rollout:\n  bakeTime: 30s\n", "rollout.strategy: is Direct, so canaryLabel, canaryAcks and bakeTime do nothing"},
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
	if n := (canary.Acks{Count: 2}).Needed(5); n != 2 {
		t.Errorf("a count of 2 needs %d", n)
	}
	if n := (canary.Acks{}).Needed(0); n != 1 {
		t.Errorf("100%% of no canaries needs %d, want 1: never a promotion without an ACK", n)
	}
}

func secs(d time.Duration) items.Seconds { return items.Seconds{Duration: d} }

// A follower serves what the record says of its document and decides
// nothing: it holds while the record is about another document or its
// last good copy lags, and never starts or ends a phase.
func TestFollow(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	in := canary.Input{Policy: policy(), Document: "doc1", Candidate: cand, Stable: &stable, Now: t0, Follow: true, Baked: true}
	rec := func(p canary.Phase, doc, from string) *canary.Record {
		return &canary.Record{Phase: p, Document: doc, From: from, To: cand.Hash, Label: canary.DefaultLabel}
	}
	split, err := canary.Split(stable.Objects, cand.Objects, canary.DefaultLabel)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		record *canary.Record
		hold   bool
		want   string
	}{
		{"no record yet: hold", nil, true, ""},
		{"a record of another document: hold", rec(canary.InCanary, "doc0", stable.Hash), true, ""},
		{"in the phase: the canary set", rec(canary.InCanary, "doc1", stable.Hash), false, render.SetHash(split)},
		{"the last good copy lags: hold", rec(canary.InCanary, "doc1", "other"), true, ""},
		{"promoted", rec(canary.Promoted, "doc1", stable.Hash), false, cand.Hash},
		{"rolled back", rec(canary.RolledBack, "doc1", stable.Hash), false, stable.Hash},
	} {
		out := step(t, with(in, func(in *canary.Input) {
			in.Record = tc.record
			in.Verdict = canary.Verdict{Known: true, Canaries: []canary.Answer{{Name: "c", State: canary.StateNACKed}}}
		}))
		if out.Hold != tc.hold || (!tc.hold && render.SetHash(out.Deliver) != tc.want) || out.Started || out.Ended || out.Record != tc.record {
			t.Errorf("%s: %+v", tc.name, out)
		}
	}
	if out := step(t, with(in, func(in *canary.Input) { in.Policy = canary.Policy{} })); out.Hold || render.SetHash(out.Deliver) != cand.Hash {
		t.Errorf("without a policy: %+v", out)
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
