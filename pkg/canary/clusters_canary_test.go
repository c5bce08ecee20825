package canary_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// The canary inside each stage of a rollout across clusters: what a
// member holds is its set ("set1", "set2"), or, during its stage's
// canary part, "set1+canary" (the previous set with the change's canary
// copies).

// stageMember is one simulated config cluster under strategy Canary.
type stageMember struct {
	down       bool // its API server does not answer
	canaries   int  // its proxies labelled true that the change reaches
	others     int  // its proxies labelled false
	canaryNACK bool // its canaries NACK the canary set
	unmarked   bool // its canaries ACK a configuration without the canary copy
	unlabelled bool // one of its proxies carries no canary label
	broken     bool // its canaries answer 5xx

	holds   string
	history []string // every set it was given, in order, with when
}

type stageSim struct {
	t       *testing.T
	policy  canary.Policy
	members map[string]*stageMember
	rec     *canary.ClusterRecord
	now     time.Time
	labels  []string // every Label an output gave
}

func canaryStaged(stages ...[]string) canary.Policy {
	return canary.Policy{Strategy: canary.Canary, Clusters: stages, BakeTime: secs(20 * time.Second), MinSuccessTime: secs(10 * time.Second)}
}

func newStageSim(t *testing.T, p canary.Policy, names ...string) *stageSim {
	s := &stageSim{t: t, policy: p, members: map[string]*stageMember{}, now: mcT0}
	for _, n := range names {
		s.members[n] = &stageMember{canaries: 1, others: 2, holds: "set1"}
	}
	return s
}

// part is what the record says cluster c holds.
func part(r *canary.ClusterRecord, c string) string {
	if r == nil {
		return ""
	}
	if r.Canaried(c) {
		return r.Holds(c) + "+canary"
	}
	return r.Holds(c)
}

func (s *stageSim) state(name string) canary.ClusterState {
	m := s.members[name]
	if m.down {
		return canary.ClusterState{Error: "dial tcp 127.0.0.1:6443: connect: connection refused"}
	}
	st := canary.ClusterState{Reachable: true, Delivered: s.rec != nil && m.holds == part(s.rec, name)}
	if !st.Delivered {
		return st
	}
	n := m.canaries + m.others
	a := &canary.ClusterAnswers{Selected: n, Synced: n, Complete: true}
	if m.canaryNACK && m.canaries > 0 {
		a.Synced, a.NACKed = m.others, m.canaries
		a.NACKs = []canary.Answer{{Name: "gw-canary-" + name, State: canary.StateNACKed, Message: "LDS: Error adding/updating listener(s) 0.0.0.0_8080: bad"}}
	}
	st.Answers = a
	if strings.HasSuffix(m.holds, "+canary") {
		c := &canary.CanaryAnswers{Canaries: m.canaries, ACKed: m.canaries}
		switch {
		case m.canaryNACK:
			c.ACKed, c.NACKed, c.NACKs = 0, m.canaries, a.NACKs
		case m.unmarked:
			c.ACKed, c.Unproven = 0, []string{"gzip"}
		}
		if m.canaries == 0 {
			c.Unproven = []string{"gzip"}
		}
		if m.unlabelled {
			c.Unlabelled = []string{"gw-0.istio-system"}
		}
		st.Canaries = c
	}
	if s.policy.Analysis != nil {
		v := canary.TrafficVerdict{Known: true, Since: s.now,
			Canary: canary.Figures{Proxies: 1, Read: 1, Requests: 500}, Stable: canary.Figures{Proxies: 2, Read: 2, Requests: 500}}
		if m.broken && strings.HasSuffix(m.holds, "+canary") {
			v.Canary.Server5xx = 400
		}
		st.Traffic = canary.ClusterTrafficOf(v, s.policy.Analysis)
	}
	return st
}

func (s *stageSim) step() canary.ClusterOutput {
	s.t.Helper()
	in := canary.ClusterInput{Policy: s.policy, Record: s.rec, Document: "doc2", From: "set1", To: "set2",
		Now: s.now, Clusters: map[string]canary.ClusterState{}}
	for n := range s.members {
		in.Known = append(in.Known, n)
		in.Clusters[n] = s.state(n)
	}
	out := canary.StepClusters(in)
	s.labels = append(s.labels, out.Label)
	s.rec = nil
	if out.Record != nil {
		b, err := json.Marshal(out.Record)
		if err != nil {
			s.t.Fatal(err)
		}
		if err := json.Unmarshal(b, &s.rec); err != nil {
			s.t.Fatal(err)
		}
	}
	for n, m := range s.members {
		h, ok := out.Hold[n]
		if !ok {
			s.t.Fatalf("no set for known cluster %s", n)
		}
		if slices.Contains(out.Canaried, n) {
			h += "+canary"
		}
		if s.rec != nil && part(s.rec, n) != h {
			s.t.Errorf("%s: the output gives %s, the record %s", n, h, part(s.rec, n))
		}
		if m.down || m.holds == h {
			continue
		}
		m.holds = h
		m.history = append(m.history, h+"@"+s.now.Sub(mcT0).String())
	}
	return out
}

func (s *stageSim) run(dt, limit time.Duration) canary.ClusterOutput {
	s.t.Helper()
	end := s.now.Add(limit)
	out := s.step()
	for out.Phase == canary.Progressing && s.now.Before(end) {
		s.now = s.now.Add(dt)
		out = s.step()
	}
	return out
}

func TestStageCanariesFirstThenStageThenNextStage(t *testing.T) {
	s := newStageSim(t, canaryStaged([]string{"a"}, []string{"b"}), "a", "b")
	out := s.step()
	if out.Label != canary.DefaultLabel || !out.StageStarted || s.rec.StagePhase != canary.StageCanaries {
		t.Fatalf("first step: label %q, stage started %v, record %+v", out.Label, out.StageStarted, s.rec)
	}
	if !slices.Equal(out.Canaried, []string{"a"}) || out.Hold["a"] != "set1" || out.Hold["b"] != "set1" {
		t.Errorf("the rollout starts with a's canaries only: canaried %v, hold %v", out.Canaried, out.Hold)
	}
	var passedAt time.Duration
	for s.now.Before(mcT0.Add(10*time.Minute)) && out.Phase == canary.Progressing {
		s.now = s.now.Add(2 * time.Second)
		out = s.step()
		if out.StageStarted && out.Stage == 1 && !strings.Contains(out.Message, "stage 2 of 2 (b) started 2026-11-28T12:00:34Z: its clusters are given the change, their proxies labelled globalconfig.io/canary=true first") {
			t.Errorf("b's stage started: %q", out.Message)
		}
		if out.CanariesPassed && out.Stage == 0 {
			passedAt = s.now.Sub(mcT0)
			if s.rec.StagePhase != canary.StageWhole || s.rec.CanariesPassed == nil {
				t.Errorf("after a's canaries passed: %+v", s.rec)
			}
		}
	}
	if out.Phase != canary.Complete {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	// a: its canaries at 0s, ACKed from 2s, baked 20s; the whole of a at
	// 22s, ACKed from 24s, minSuccessTime 10s; b's canaries at 34s, then
	// the whole of b 20s after they ACKed.
	if passedAt != 22*time.Second {
		t.Errorf("a's canaries passed at %s, want 22s (ACKed at 2s, bakeTime 20s)", passedAt)
	}
	if want := []string{"set1+canary@0s", "set2@22s"}; !slices.Equal(s.members["a"].history, want) {
		t.Errorf("a was given %v, want %v", s.members["a"].history, want)
	}
	if want := []string{"set1+canary@34s", "set2@56s"}; !slices.Equal(s.members["b"].history, want) {
		t.Errorf("b was given %v, want %v: its canaries only after a passed, then the rest", s.members["b"].history, want)
	}
	for _, l := range s.labels {
		if l != canary.DefaultLabel {
			t.Errorf("an output paired by %q, want every one by %s", l, canary.DefaultLabel)
		}
	}
	if s.rec.StagePhase != "" || s.rec.Label != canary.DefaultLabel || s.rec.BakeTime != "20s" || s.rec.Needed != "100%" {
		t.Errorf("complete record: %+v", s.rec)
	}
}

func TestStageCanaryFaultsRollBack(t *testing.T) {
	analysis := canaryStaged([]string{"a"}, []string{"b"})
	analysis.Analysis = &canary.Analysis{}
	for _, tc := range []struct {
		name   string
		policy canary.Policy
		fault  func(a, b *stageMember)
		why    string
		at     time.Duration // the rollout ends no sooner
	}{
		{"a canary NACK in the first stage", canaryStaged([]string{"a"}, []string{"b"}), func(a, _ *stageMember) { a.canaryNACK = true },
			"cluster a failed: canary gw-canary-a rejected the change: LDS: Error adding/updating listener(s) 0.0.0.0_8080: bad (1 of 1 canaries NACKed)", 0},
		{"canaries that break traffic", analysis, func(a, _ *stageMember) { a.broken = true },
			"cluster a failed: its canaries broke traffic: 5xx responses: its proxies' share 80.0%", 0},
		{"no canary in the first stage's cluster: held, then the deadline", canaryStaged([]string{"a"}, []string{"b"}), func(a, _ *stageMember) { a.canaries = 0 },
			"cluster a failed: its canaries did not pass within progressDeadline 10m0s: no proxy labelled globalconfig.io/canary=true that the change reaches", 10 * time.Minute},
		{"canaries without the canary copy", canaryStaged([]string{"a"}, []string{"b"}), func(a, _ *stageMember) { a.unmarked = true },
			"0 of 1 canaries ACKed the canary copy, 1 needed", 10 * time.Minute},
		{"a proxy without the label", canaryStaged([]string{"a"}, []string{"b"}), func(a, _ *stageMember) { a.unlabelled = true },
			"proxy gw-0.istio-system carries no globalconfig.io/canary label", 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStageSim(t, tc.policy, "a", "b")
			tc.fault(s.members["a"], s.members["b"])
			out := s.run(2*time.Second, time.Hour)
			if out.Phase != canary.ClustersRolledBack || !out.Ended {
				t.Fatalf("phase %s: %s", out.Phase, out.Message)
			}
			if !strings.Contains(out.Message, tc.why) || !strings.Contains(out.Message, "never given the change: b") {
				t.Errorf("message %q\nlacks %q, or that b never got the change", out.Message, tc.why)
			}
			if got := s.rec.Ended.Sub(mcT0); got < tc.at {
				t.Errorf("ended after %s, not before %s", got, tc.at)
			}
			// a: its canaries, then its previous set back; its other
			// proxies never had the change. b: nothing at all.
			if want := []string{"set1+canary@0s", "set1@" + s.rec.Ended.Sub(mcT0).String()}; !slices.Equal(s.members["a"].history, want) {
				t.Errorf("a was given %v, want %v", s.members["a"].history, want)
			}
			if len(s.members["b"].history) != 0 || s.members["b"].holds != "set1" {
				t.Errorf("b was given %v", s.members["b"].history)
			}
		})
	}
}

func TestStageCanaryHeldWhileNoCanaryThenGoesOn(t *testing.T) {
	// No canary in a: its stage waits, saying why, and goes on as soon as
	// one is labelled (the single cluster's rule: held, not skipped).
	s := newStageSim(t, canaryStaged([]string{"a"}, []string{"b"}), "a", "b")
	s.members["a"].canaries = 0
	s.step()
	s.now = s.now.Add(2 * time.Second)
	out := s.step()
	if out.Phase != canary.Progressing || !strings.Contains(out.Message, "stage 1 of 2 (a), its proxies labelled globalconfig.io/canary=true only, waits for a: no proxy labelled globalconfig.io/canary=true") {
		t.Fatalf("message %q", out.Message)
	}
	s.now = s.now.Add(time.Minute)
	s.step()
	if s.members["a"].holds != "set1+canary" || s.members["b"].holds != "set1" {
		t.Fatalf("held: a holds %s, b %s", s.members["a"].holds, s.members["b"].holds)
	}
	s.members["a"].canaries = 1
	out = s.run(2*time.Second, 10*time.Minute)
	if out.Phase != canary.Complete || s.members["b"].holds != "set2" {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
}

func TestStageCanaryRecordSurvivesARestart(t *testing.T) {
	s := newStageSim(t, canaryStaged([]string{"a"}, []string{"b"}), "a", "b")
	s.step()
	s.now = s.now.Add(2 * time.Second)
	s.step() // a's canaries passing since 12:00:02
	// A new leader 19 s later with only the stored record (the sim keeps
	// its JSON) and a policy edited since: the canaries' bake counts from
	// the first leader's stamp, with the rollout's own bakeTime, and a
	// holds its canary part meanwhile (nothing written).
	s.policy.BakeTime = secs(time.Hour)
	s.now = mcT0.Add(21 * time.Second)
	out := s.step()
	if out.CanariesPassed || s.rec.StagePhase != canary.StageCanaries || s.members["a"].holds != "set1+canary" {
		t.Fatalf("before the bake's end: %s", out.Message)
	}
	s.now = mcT0.Add(22 * time.Second)
	out = s.step()
	if !out.CanariesPassed || s.members["a"].holds != "set2" || s.rec.BakeTime != "20s" {
		t.Fatalf("the new leader did not continue the bake: %s (a holds %s)", out.Message, s.members["a"].holds)
	}
	// Another restart in the whole part: it goes on to b's canaries.
	s.now = mcT0.Add(24 * time.Second)
	s.step()
	s.now = mcT0.Add(34 * time.Second)
	out = s.step()
	if !out.StageStarted || out.Stage != 1 || s.members["b"].holds != "set1+canary" {
		t.Fatalf("b's canaries: %s (b holds %s)", out.Message, s.members["b"].holds)
	}
}

func TestStageCanaryFailureWithinMaxFailures(t *testing.T) {
	// b's canary NACKs within the budget: b gets its previous set back,
	// c (the same stage) goes on to its whole part alone.
	p := canaryStaged([]string{"a"}, []string{"b", "c"})
	p.MaxFailures = 1
	s := newStageSim(t, p, "a", "b", "c")
	s.members["b"].canaryNACK = true
	out := s.run(2*time.Second, time.Hour)
	if out.Phase != canary.Complete || len(s.rec.Failed) != 1 || s.rec.Failed[0].Cluster != "b" {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	if s.members["b"].holds != "set1" || s.members["c"].holds != "set2" || s.members["a"].holds != "set2" {
		t.Errorf("holding a %s, b %s, c %s", s.members["a"].holds, s.members["b"].holds, s.members["c"].holds)
	}
	if h := s.members["b"].history; slices.ContainsFunc(h, func(x string) bool { return strings.HasPrefix(x, "set2@") }) {
		t.Errorf("b's other proxies got the change its canary refused: %v", h)
	}
}

func TestStageCanaryPolicyValidation(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rollout:\n  clusters: [[a]]\n  strategy: Canary\n  coverage: Kinds\n", "rollout.coverage: applies to a canary rollout in one cluster only"},
		{"rollout:\n  clusters: [[a]]\n  strategy: Canary\n  phaseTimeout: 5m\n", "rollout.phaseTimeout: applies to a canary rollout in one cluster only"},
		{"rollout:\n  clusters: [[a]]\n  strategy: Canary\n  bakeTime: 20m\n", "rollout.progressDeadline: is 10m0s (the default), shorter than bakeTime 20m0s"},
	} {
		_, err := document.Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
	doc, err := document.Parse([]byte("rollout:\n  clusters: [[a], [b]]\n  strategy: Canary\n  canaryAcks: 1\n  bakeTime: 30s\n  minSuccessTime: 10s\n  analysis: {}\n"))
	if err != nil {
		t.Fatalf("strategy Canary with clusters: %v", err)
	}
	if p := doc.Rollout; !p.Staged() || !p.Enabled() || p.Bake() != 30*time.Second {
		t.Errorf("policy %+v", p)
	}
}

// TestCanariesOf judges one cluster's canaries by the canary copy in
// their configuration, as a single cluster's phase does.
func TestCanariesOf(t *testing.T) {
	f := newStepFixture(t)
	gz := map[string]string{"gzip": byName(f.cand, "globalconfig-gzip").Hash()}
	for _, tc := range []struct {
		name     string
		seen     []canary.Seen
		acked    int
		nacked   int
		unproven []string
	}{
		{"every canary ACKed the canary copy", []canary.Seen{canarySeen("gw-a", canary.StateSynced, gz), canarySeen("gw-b", canary.StateSynced, gz)}, 2, 0, nil},
		{"an ACK without the canary copy proves nothing", []canary.Seen{canarySeen("gw-a", canary.StateSynced, map[string]string{"gzip": "old"})}, 0, 0, []string{"gzip"}},
		{"a NACK", []canary.Seen{canarySeen("gw-a", canary.StateNACKed, nil), canarySeen("gw-b", canary.StateSynced, gz)}, 1, 1, nil},
		{"pending", []canary.Seen{canarySeen("gw-a", canary.StatePending, nil)}, 0, 0, []string{"gzip"}},
		{"no canary", nil, 0, 0, []string{"gzip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := canary.CanariesOf(tc.seen, nil, f.stable.Objects, f.cand.Objects, canary.DefaultLabel, "istio-system")
			if got.Canaries != len(tc.seen) || got.ACKed != tc.acked || got.NACKed != tc.nacked || !slices.Equal(got.Unproven, tc.unproven) {
				t.Errorf("got %+v", got)
			}
			if tc.nacked > 0 && (len(got.NACKs) != 1 || got.NACKs[0].Message == "") {
				t.Errorf("NACKs %+v", got.NACKs)
			}
		})
	}
}

// TestStageBakeSurvivesAStepThatKnowsNothing: a new leader knows nothing
// of the clusters until its first delivery; the step it takes then
// neither passes a cluster nor restarts its bake, and the next one, the
// cluster known and still passing, continues from the first stamp.
func TestStageBakeSurvivesAStepThatKnowsNothing(t *testing.T) {
	for _, p := range []canary.Policy{canaryStaged([]string{"a"}, []string{"b"}), func() canary.Policy {
		p := staged([]string{"a"}, []string{"b"})
		p.MinSuccessTime = secs(20 * time.Second)
		return p
	}()} {
		name := "Direct inside each cluster"
		if p.Enabled() {
			name = "canaries first"
		}
		t.Run(name, func(t *testing.T) {
			known := []string{"a", "b"}
			in := canary.ClusterInput{Policy: p, Document: "doc2", From: "set1", To: "set2", Known: known, Now: mcT0}
			passing := canary.ClusterState{Reachable: true, Delivered: true, Answers: &canary.ClusterAnswers{Selected: 2, Synced: 2, Complete: true},
				Canaries: &canary.CanaryAnswers{Canaries: 1, ACKed: 1}}
			in.Clusters = map[string]canary.ClusterState{"a": passing, "b": {Reachable: true}}
			out := canary.StepClusters(in) // a passing from 12:00:00
			in.Record = out.Record
			if _, ok := out.Record.Passing["a"]; !ok {
				t.Fatalf("a not passing: %s", out.Message)
			}
			// A restart 21 s later: nothing known yet.
			in.Now, in.Clusters = mcT0.Add(21*time.Second), map[string]canary.ClusterState{}
			out = canary.StepClusters(in)
			in.Record = out.Record
			if out.Stage != 0 || out.CanariesPassed || out.StageStarted || !out.Record.Passing["a"].Equal(mcT0) {
				t.Fatalf("a step that knows nothing moved on or dropped the stamp: %s, passing %v", out.Message, out.Record.Passing)
			}
			if !strings.Contains(out.Message, "a: the controller knows nothing of it yet") {
				t.Errorf("message %q", out.Message)
			}
			// Known again, still passing: baked since 12:00:00.
			in.Now, in.Clusters = mcT0.Add(22*time.Second), map[string]canary.ClusterState{"a": passing, "b": {Reachable: true}}
			out = canary.StepClusters(in)
			if !out.CanariesPassed && !out.StageStarted {
				t.Errorf("the bake started over after the restart: %s", out.Message)
			}
			// A cluster known and not passing drops its stamp (the bake
			// needs no break).
			in.Record = canary.StepClusters(canary.ClusterInput{Policy: p, Document: "doc2", From: "set1", To: "set2", Known: known, Now: mcT0,
				Clusters: map[string]canary.ClusterState{"a": passing}}).Record
			in.Now, in.Clusters = mcT0.Add(5*time.Second), map[string]canary.ClusterState{"a": {Reachable: true}}
			if out := canary.StepClusters(in); len(out.Record.Passing) != 0 {
				t.Errorf("a cluster known not to pass kept its stamp: %v", out.Record.Passing)
			}
		})
	}
}
