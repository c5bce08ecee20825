package canary_test

import (
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
