package canary_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// member is one simulated config cluster: what its API server holds, and
// how its istiods and proxies answer for the set it holds.
type member struct {
	down      bool // its API server does not answer: nothing is written
	mute      bool // its istiods do not answer
	proxies   int  // proxies its istiods report (0: none)
	nack      bool // its proxies NACK the change
	nackHash  string
	broken    bool // its proxies answer the change with 5xx
	little    bool // its proxies answer too few requests to judge
	noFigures bool // its statistics can't be read

	holds    string      // the set its API server holds
	gotTo    []time.Time // when it was given each To, in order
	everHeld map[string]bool
}

// fleetSim plays the controller around StepClusters: it reads the members,
// steps, stores the record through JSON (as the status ConfigMap does)
// and delivers to each member the set the output says, as far as its API
// server answers.
type fleetSim struct {
	t        *testing.T
	policy   canary.Policy
	doc      string
	from, to string
	members  map[string]*member
	rec      *canary.ClusterRecord
	now      time.Time
	last     canary.ClusterOutput
}

var mcT0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func newFleet(t *testing.T, p canary.Policy, names ...string) *fleetSim {
	f := &fleetSim{t: t, policy: p, doc: "doc2", from: "set1", to: "set2", members: map[string]*member{}, now: mcT0}
	for _, n := range names {
		f.members[n] = &member{proxies: 2, holds: "set1", everHeld: map[string]bool{"set1": true}}
	}
	return f
}

func (f *fleetSim) known() []string {
	var out []string
	for n := range f.members {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (f *fleetSim) state(name string) canary.ClusterState {
	m := f.members[name]
	if m.down {
		return canary.ClusterState{Error: "dial tcp 127.0.0.1:6443: connect: connection refused"}
	}
	st := canary.ClusterState{Reachable: true, Delivered: m.holds == f.to}
	switch {
	case !st.Delivered:
		// The tracker's answers are about To only.
	case m.mute:
		st.Answers = &canary.ClusterAnswers{Unanswered: []string{"istiod-" + name}}
	case m.nack && (m.nackHash == "" || m.nackHash == f.to):
		st.Answers = &canary.ClusterAnswers{Selected: m.proxies, NACKed: m.proxies, Complete: true,
			NACKs: []canary.Answer{{Name: "gw-" + name, State: canary.StateNACKed, Message: "LDS: Error adding/updating listener(s) 0.0.0.0_8080: bad"}}}
	default:
		st.Answers = &canary.ClusterAnswers{Selected: m.proxies, Synced: m.proxies, Complete: true}
	}
	if f.policy.Analysis != nil && st.Delivered {
		v := canary.TrafficVerdict{Known: !m.noFigures, Why: "timeout reading 10.0.0.1:15020", Since: f.now,
			Canary: canary.Figures{Proxies: 2, Read: 2, Requests: 500}, Stable: canary.Figures{Proxies: 2, Read: 2, Requests: 500}}
		if m.broken {
			v.Canary.Server5xx = 400
		}
		if m.little {
			v.Canary.Requests = 3
		}
		st.Traffic = canary.ClusterTrafficOf(v, f.policy.Analysis)
	}
	return st
}

// step is one sync at the sim's clock.
func (f *fleetSim) step() canary.ClusterOutput {
	f.t.Helper()
	in := canary.ClusterInput{Policy: f.policy, Record: f.rec, Document: f.doc, From: f.from, To: f.to,
		Known: f.known(), Now: f.now, Clusters: map[string]canary.ClusterState{}}
	for n := range f.members {
		in.Clusters[n] = f.state(n)
	}
	out := canary.StepClusters(in)
	if r := out.Record; r != nil {
		// Never a cluster in a later stage before its stage starts; a
		// follower (an MCP server) serving by the record agrees.
		for i, stage := range r.Stages {
			for _, c := range stage {
				if _, known := f.members[c]; !known {
					continue
				}
				if out.Hold[c] != r.Holds(c) {
					f.t.Errorf("%s: the output gives %s, the record %s", c, out.Hold[c], r.Holds(c))
				}
				if r.Phase == canary.Progressing && i > r.Stage && out.Hold[c] == f.to {
					f.t.Errorf("%s of stage %d is given the change while stage %d is in progress", c, i, r.Stage)
				}
			}
		}
	}
	for n, m := range f.members {
		h, ok := out.Hold[n]
		if !ok {
			f.t.Fatalf("no set for known cluster %s in %v", n, out.Hold)
		}
		if m.down || m.holds == h {
			continue
		}
		m.holds = h
		m.everHeld[h] = true
		if h == f.to {
			m.gotTo = append(m.gotTo, f.now)
		}
	}
	f.rec = nil
	if out.Record != nil {
		b, err := json.Marshal(out.Record)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := json.Unmarshal(b, &f.rec); err != nil {
			f.t.Fatal(err)
		}
	}
	f.last = out
	return out
}

// run steps every dt until the rollout ends or limit passes.
func (f *fleetSim) run(dt, limit time.Duration) canary.ClusterOutput {
	f.t.Helper()
	end := f.now.Add(limit)
	out := f.step()
	for out.Phase == canary.Progressing && f.now.Before(end) {
		f.now = f.now.Add(dt)
		out = f.step()
	}
	return out
}

func (f *fleetSim) holding() map[string]string {
	out := map[string]string{}
	for n, m := range f.members {
		out[n] = m.holds
	}
	return out
}

func staged(stages ...[]string) canary.Policy {
	return canary.Policy{Clusters: stages}
}

func TestClusterStagesPassInOrder(t *testing.T) {
	p := staged([]string{"eu"}, []string{"us"})
	p.MinSuccessTime = secs(30 * time.Second)
	f := newFleet(t, p, "eu", "us", "ap", "home")
	out := f.step()
	if out.Record == nil || !out.StageStarted || out.Stage != 0 {
		t.Fatalf("a new change starts stage 0: %+v", out)
	}
	if want := [][]string{{"eu"}, {"us"}, {"ap", "home"}}; !slices.EqualFunc(f.rec.Stages, want, slices.Equal) {
		t.Errorf("stages %v, want %v (the clusters no stage names last, sorted)", f.rec.Stages, want)
	}
	if got := out.Holding("set2"); !slices.Equal(got, []string{"eu"}) {
		t.Errorf("after the first step %v hold the change, want eu only", got)
	}
	out = f.run(5*time.Second, 10*time.Minute)
	if out.Phase != canary.Complete || !out.Complete || !out.Ended {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	for n, m := range f.members {
		if m.holds != "set2" || len(m.gotTo) != 1 {
			t.Errorf("%s holds %s, given the change %d times", n, m.holds, len(m.gotTo))
		}
	}
	eu, us, ap := f.members["eu"].gotTo[0], f.members["us"].gotTo[0], f.members["ap"].gotTo[0]
	if us.Sub(eu) < 30*time.Second || ap.Sub(us) < 30*time.Second || !f.members["home"].gotTo[0].Equal(ap) {
		t.Errorf("given the change at eu %s, us %s, ap %s, home %s: each stage starts after the one before baked 30s",
			eu.Format(time.TimeOnly), us.Format(time.TimeOnly), ap.Format(time.TimeOnly), f.members["home"].gotTo[0].Format(time.TimeOnly))
	}
	if len(f.rec.Passed) != 3 || f.rec.Stage != 3 || f.rec.Ended == nil {
		t.Errorf("record: %+v", f.rec)
	}
	for n, m := range f.members {
		if at, ok := f.rec.Reached(n); !ok || !at.Equal(m.gotTo[0]) {
			t.Errorf("%s reached at %s (%v), given the change at %s", n, at, ok, m.gotTo[0])
		}
	}
	// A resync of the complete rollout writes nothing new.
	again := f.step()
	if again.Phase != canary.Complete || again.Ended || again.StageStarted || len(again.Holding("set2")) != 4 {
		t.Errorf("resync: %+v", again)
	}
}

func TestClusterFailureRollsBackReachedStages(t *testing.T) {
	analysis := staged([]string{"a"}, []string{"b"})
	analysis.MinSuccessTime = secs(20 * time.Second)
	analysis.Analysis = &canary.Analysis{}
	for _, tc := range []struct {
		name   string
		policy canary.Policy
		fault  func(a, b *member)
		why    []string
		// at: the rollout ends no sooner than this after it started.
		at time.Duration
	}{
		{"a NACK in the first stage", staged([]string{"a"}, []string{"b"}), func(a, _ *member) { a.nack = true },
			[]string{"cluster a failed: proxy gw-a rejected the change: LDS: Error adding/updating listener(s) 0.0.0.0_8080: bad", "never given the change: b"}, 0},
		{"broken traffic in the first stage", analysis, func(a, _ *member) { a.broken = true },
			[]string{"cluster a failed: its proxies broke traffic: 5xx responses: its proxies' share 80.0% (400 of 500 requests), the previous set's proxies' 0.0%", "never given the change: b"}, 0},
		{"istiods that never answer: the deadline", staged([]string{"a"}, []string{"b"}), func(a, _ *member) { a.mute = true },
			[]string{"cluster a failed: did not pass within progressDeadline 10m0s: not every istiod of it answered (istiod-a)", "never given the change: b"}, 10 * time.Minute},
		{"an unreachable member past the deadline", staged([]string{"a"}, []string{"b"}), func(a, _ *member) { a.down = true },
			[]string{"cluster a failed: did not pass within progressDeadline 10m0s: unreachable: dial tcp 127.0.0.1:6443: connect: connection refused"}, 10 * time.Minute},
		{"a member without a proxy: nothing ACKed", staged([]string{"a"}, []string{"b"}), func(a, _ *member) { a.proxies = 0 },
			[]string{"did not pass within progressDeadline 10m0s: its istiods report no proxy the change reaches"}, 10 * time.Minute},
		{"too little traffic, insufficientTraffic RollBack", func() canary.Policy {
			p := analysis
			p.Analysis = &canary.Analysis{InsufficientTraffic: canary.RollBackWithout}
			return p
		}(), func(a, _ *member) { a.little = true },
			[]string{"cluster a failed: too little traffic to judge it: its proxies answered 3 requests"}, 20 * time.Second},
		{"figures that can't be read, past the deadline", analysis, func(a, _ *member) { a.noFigures = true },
			[]string{"cluster a failed: did not pass within progressDeadline 10m0s: its traffic can't be judged: timeout reading 10.0.0.1:15020"}, 10 * time.Minute},
		{"a NACK in the second stage restores the first", staged([]string{"a"}, []string{"b"}), func(_, b *member) { b.nack = true },
			[]string{"cluster b failed: proxy gw-b rejected the change"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, tc.policy, "a", "b")
			tc.fault(f.members["a"], f.members["b"])
			out := f.run(5*time.Second, time.Hour)
			if out.Phase != canary.ClustersRolledBack || !out.Ended || out.Complete {
				t.Fatalf("phase %s: %s", out.Phase, out.Message)
			}
			for _, w := range tc.why {
				if !strings.Contains(out.Message, w) {
					t.Errorf("message %q\nlacks %q", out.Message, w)
				}
			}
			if age := f.rec.Ended.Sub(f.rec.Started); age < tc.at || (tc.at == 0 && age > 30*time.Second) {
				t.Errorf("rolled back %s after the start, want at %s", age, tc.at)
			}
			if f.members["a"].down {
				f.members["a"].down = false
				f.step()
			}
			for n, m := range f.members {
				if m.holds != "set1" {
					t.Errorf("%s holds %s after the roll back, want set1", n, m.holds)
				}
			}
			if tc.name != "a NACK in the second stage restores the first" && f.members["b"].everHeld["set2"] {
				t.Error("b, a later stage, was given the change")
			}
			// Rolled back stays rolled back while the document is the same.
			if again := f.step(); again.Phase != canary.ClustersRolledBack || again.Ended || len(again.Holding("set1")) != 2 {
				t.Errorf("resync after the roll back: %+v", again)
			}
		})
	}
}

func TestClusterFailuresWithinMaxFailures(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"}, []string{"c"})
	p.MaxFailures = 1
	f := newFleet(t, p, "a", "b", "c")
	f.members["b"].nack = true
	out := f.run(5*time.Second, time.Hour)
	if out.Phase != canary.Complete || !out.Complete {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	if got, want := f.holding(), map[string]string{"a": "set2", "b": "set1", "c": "set2"}; !equalMaps(got, want) {
		t.Errorf("holding %v, want %v: the failed cluster gets its previous set back, the rollout goes on", got, want)
	}
	if len(f.rec.Failed) != 1 || f.rec.Failed[0].Cluster != "b" || f.rec.Failed[0].Stage != 1 || !strings.Contains(f.rec.Failed[0].Reason, "proxy gw-b rejected the change") {
		t.Errorf("failed: %+v", f.rec.Failed)
	}
	if !strings.Contains(out.Message, "failed: b (1 of maxFailures 1)") {
		t.Errorf("message %q", out.Message)
	}
	// The next change starts from set2, the last good set, except in b,
	// which keeps set1 until its stage: it never gets set2 on the way.
	f.doc, f.from, f.to = "doc3", "set2", "set3"
	f.members["b"].nack = false
	f.step()
	if got, want := f.holding(), map[string]string{"a": "set3", "b": "set1", "c": "set2"}; !equalMaps(got, want) {
		t.Errorf("holding %v, want %v", got, want)
	}
	if want := map[string]string{"b": "set1"}; !equalMaps(f.rec.Previous, want) {
		t.Errorf("previous %v, want %v", f.rec.Previous, want)
	}
	if out := f.run(5*time.Second, time.Hour); out.Phase != canary.Complete || !equalMaps(f.holding(), map[string]string{"a": "set3", "b": "set3", "c": "set3"}) {
		t.Errorf("phase %s, holding %v", out.Phase, f.holding())
	}
	// A second failure is one too many: everything the rollout reached
	// goes back, c never gets it.
	f = newFleet(t, p, "a", "b", "c")
	f.members["a"].nack, f.members["b"].nack = true, true
	out = f.run(5*time.Second, time.Hour)
	if out.Phase != canary.ClustersRolledBack || f.members["c"].everHeld["set2"] || f.members["a"].holds != "set1" || f.members["b"].holds != "set1" {
		t.Errorf("phase %s, holding %v, c given the change: %v", out.Phase, f.holding(), f.members["c"].everHeld["set2"])
	}
	if !strings.Contains(out.Message, "2 failed, more than maxFailures 1") {
		t.Errorf("message %q", out.Message)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestClusterUnreachableHoldsItsStage(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"}, []string{"c"})
	f := newFleet(t, p, "a", "b", "c")
	f.members["b"].down = true
	f.step() // a gets it
	f.now = f.now.Add(5 * time.Second)
	if out := f.step(); out.Stage != 1 || !out.StageStarted {
		t.Fatalf("stage 1 did not start: %+v", out)
	}
	for i := 0; i < 50; i++ { // 5 minutes of syncs, within the deadline
		f.now = f.now.Add(6 * time.Second)
		f.step()
	}
	out := f.last
	if out.Phase != canary.Progressing || f.rec.Stage != 1 || len(f.rec.Failed) != 0 {
		t.Fatalf("phase %s, stage %d: %s", out.Phase, f.rec.Stage, out.Message)
	}
	for _, w := range []string{"stage 2 of 3 (b) waits for b: unreachable: dial tcp 127.0.0.1:6443: connect: connection refused", "fails at 2026-11-28T12:10:05Z"} {
		if !strings.Contains(out.Message, w) {
			t.Errorf("message %q\nlacks %q", out.Message, w)
		}
	}
	if f.members["c"].everHeld["set2"] || f.members["b"].holds != "set1" {
		t.Errorf("c was given the change while b held its stage, or b holds %s", f.members["b"].holds)
	}
	// b comes back: it converges without an edit, and the rollout goes on.
	f.members["b"].down = false
	out = f.run(5*time.Second, time.Hour)
	if out.Phase != canary.Complete || f.members["b"].holds != "set2" || f.members["c"].holds != "set2" {
		t.Errorf("phase %s holding %v: %s", out.Phase, f.holding(), out.Message)
	}
}

func TestClusterMinSuccessTimeHoldsARecentACK(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"})
	p.MinSuccessTime = secs(time.Minute)
	f := newFleet(t, p, "a", "b")
	f.step() // a given the change
	f.now = f.now.Add(time.Second)
	f.step() // a ACKed: passing since now
	acked := f.now
	f.now = acked.Add(59 * time.Second)
	out := f.step()
	if f.members["b"].everHeld["set2"] || out.Stage != 0 {
		t.Fatalf("b was given the change 59s after a ACKed, with minSuccessTime 1m: %s", out.Message)
	}
	if !strings.Contains(out.Message, "a: every proxy ACKed since 2026-11-28T12:00:01Z; baking until 2026-11-28T12:01:01Z (minSuccessTime 1m0s)") {
		t.Errorf("message %q", out.Message)
	}
	// A proxy that stops ACKing restarts the bake.
	f.members["a"].proxies = 3
	f.members["a"].mute = true
	f.now = acked.Add(60 * time.Second)
	if out := f.step(); f.members["b"].everHeld["set2"] {
		t.Fatalf("b was given the change while a's istiods did not answer: %s", out.Message)
	}
	f.members["a"].mute = false
	f.now = acked.Add(61 * time.Second)
	f.step()
	f.now = acked.Add(61*time.Second + 59*time.Second)
	f.step()
	if f.members["b"].everHeld["set2"] {
		t.Fatal("b was given the change before a baked again for 1m")
	}
	f.now = acked.Add(121 * time.Second)
	if out := f.step(); !f.members["b"].everHeld["set2"] || out.Stage != 1 {
		t.Fatalf("b not given the change after a baked 1m: %s", out.Message)
	}
}

func TestClusterRecordSurvivesARestart(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"})
	p.MinSuccessTime = secs(time.Minute)
	f := newFleet(t, p, "a", "b")
	f.step()
	f.now = f.now.Add(2 * time.Second)
	f.step() // a passing since 12:00:02
	// A new leader, 61 s later, with nothing but the stored record (the
	// sim keeps only its JSON) and a policy edited since: the record's
	// bake counts, from the first leader's stamp.
	f.policy.MinSuccessTime = secs(time.Hour)
	f.now = mcT0.Add(63 * time.Second)
	out := f.step()
	if out.Stage != 1 || !f.members["b"].everHeld["set2"] {
		t.Fatalf("the new leader did not continue the bake: %s", out.Message)
	}
	if f.rec.MinSuccessTime != "1m0s" {
		t.Errorf("record's minSuccessTime %s, want the rollout's own 1m0s", f.rec.MinSuccessTime)
	}
}

func TestClusterNewDocumentMidRollout(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"}, []string{"c"})
	f := newFleet(t, p, "a", "b", "c")
	f.members["b"].mute = true // b's stage holds
	for i := 0; i < 5; i++ {
		f.step()
		f.now = f.now.Add(5 * time.Second)
	}
	if f.rec.Stage != 1 || f.members["b"].holds != "set2" {
		t.Fatalf("stage %d, b holds %s", f.rec.Stage, f.members["b"].holds)
	}
	// A new document: set3.
	f.doc, f.to = "doc3", "set3"
	f.members["b"].mute = false
	out := f.step()
	if f.rec.To != "set3" || f.rec.Stage != 0 || !out.StageStarted {
		t.Fatalf("record %+v", f.rec)
	}
	// a's stage had passed: a keeps set2 as its previous set and gets
	// set3; b's stage had not: b goes back to set1; c never had set2.
	if got, want := f.holding(), map[string]string{"a": "set3", "b": "set1", "c": "set1"}; !equalMaps(got, want) {
		t.Errorf("holding %v, want %v", got, want)
	}
	if want := map[string]string{"a": "set2"}; !equalMaps(f.rec.Previous, want) {
		t.Errorf("previous %v, want %v", f.rec.Previous, want)
	}
	// set3 is refused in a: a gets back set2, the set it proved.
	f.members["a"].nack, f.members["a"].nackHash = true, "set3"
	out = f.run(5*time.Second, time.Hour)
	if out.Phase != canary.ClustersRolledBack {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	if got, want := f.holding(), map[string]string{"a": "set2", "b": "set1", "c": "set1"}; !equalMaps(got, want) {
		t.Errorf("holding %v after the roll back, want %v", got, want)
	}
	// The same set from an edited document is a new attempt.
	f.doc = "doc3-edited"
	f.members["a"].nack = false
	out = f.step()
	if out.Phase != canary.Progressing || f.rec.Document != "doc3-edited" || f.members["a"].holds != "set3" {
		t.Errorf("a new attempt: phase %s, record %+v", out.Phase, f.rec)
	}
}

func TestClusterMembersComeAndGo(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"})
	f := newFleet(t, p, "a", "b")
	f.members["b"].mute = true
	f.step()
	f.now = f.now.Add(5 * time.Second)
	f.step() // stage b, held
	// A member added now has no stage: it joins a stage of its own after
	// b's, and holds the set before until then.
	f.members["new"] = &member{proxies: 1, holds: "", everHeld: map[string]bool{}}
	f.now = f.now.Add(5 * time.Second)
	f.step()
	if want := [][]string{{"a"}, {"b"}, {"new"}}; !slices.EqualFunc(f.rec.Stages, want, slices.Equal) {
		t.Errorf("stages %v, want %v", f.rec.Stages, want)
	}
	if f.members["new"].holds != "set1" {
		t.Errorf("the new member holds %q, want set1 until its stage", f.members["new"].holds)
	}
	// b's Secret removed: b is no longer judged, the rollout goes on.
	delete(f.members, "b")
	out := f.run(5*time.Second, time.Hour)
	if out.Phase != canary.Complete || f.members["new"].holds != "set2" {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	// After the rollout a member added is brought to the current set.
	f.members["late"] = &member{proxies: 1, holds: "", everHeld: map[string]bool{}}
	f.step()
	if f.members["late"].holds != "set2" {
		t.Errorf("a member added after the rollout holds %q, want set2", f.members["late"].holds)
	}
}

func TestClusterInsufficientTrafficPasses(t *testing.T) {
	p := staged([]string{"a"}, []string{"b"})
	p.MinSuccessTime = secs(10 * time.Second)
	p.Analysis = &canary.Analysis{}
	f := newFleet(t, p, "a", "b")
	f.members["a"].little = true
	out := f.run(5*time.Second, time.Hour)
	if out.Phase != canary.Complete {
		t.Fatalf("phase %s: %s", out.Phase, out.Message)
	}
	if len(f.rec.Warnings) != 1 || !strings.HasPrefix(f.rec.Warnings[0], "a: passed on the ACKs alone, too little traffic to judge it: its proxies answered 3 requests") {
		t.Errorf("warnings %q", f.rec.Warnings)
	}
}

func TestClusterNoStagesGoesEverywhere(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy canary.Policy
		from   string
	}{
		{"no clusters in the policy", canary.Policy{}, "set1"},
		{"the first set", staged([]string{"a"}), ""},
		{"nothing changed", staged([]string{"a"}), "set2"},
	} {
		f := newFleet(t, tc.policy, "a", "b")
		f.from = tc.from
		out := f.step()
		if out.Record != nil || !out.Complete || len(out.Holding("set2")) != 2 {
			t.Errorf("%s: %+v", tc.name, out)
		}
	}
}

func TestClusterPolicyValidation(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"rollout:\n  clusters: [[a], []]\n", "rollout.clusters[1]: is an empty stage"},
		{"rollout:\n  clusters: [[a, b], [c, a]]\n", "rollout.clusters[1][1]: names a again (first at clusters[0][0]): a cluster is in one stage only"},
		{"rollout:\n  clusters: [[\"a,b\"]]\n", `rollout.clusters[0][0]: cluster name "a,b" must be letters, digits`},
		{"rollout:\n  clusters: [[a]]\n  rollbackOn: AllNACK\n", "rollout.rollbackOn: is AllNACK, which a rollout across clusters can't follow"},
		{"rollout:\n  clusters: [[a]]\n  bakeTime: 1m\n", "rollout.strategy: is Direct, so canaryLabel, canaryAcks, bakeTime, coverage and phaseTimeout do nothing (a rollout across clusters"},
		{"rollout:\n  clusters: [[a]]\n  analysis: {}\n", "rollout.minSuccessTime: is 0s, and analysis judges a stage's traffic over minSuccessTime: with analysis it must be at least 1s"},
		{"rollout:\n  clusters: [[a]]\n  minSuccessTime: 2h\n", "rollout.minSuccessTime: must be between 0s and 1h0m0s, got 2h0m0s"},
		{"rollout:\n  clusters: [[a]]\n  minSuccessTime: 20m\n", "rollout.minSuccessTime: is 20m0s, longer than progressDeadline (default 10m0s)"},
		{"rollout:\n  clusters: [[a]]\n  minSuccessTime: 5m\n  progressDeadline: 1m\n", "rollout.progressDeadline: is 1m0s, shorter than minSuccessTime 5m0s"},
		{"rollout:\n  clusters: [[a]]\n  progressDeadline: 5s\n", "rollout.progressDeadline: must be between 10s and 3h0m0s, got 5s"},
		{"rollout:\n  clusters: [[a]]\n  maxFailures: 65\n", "rollout.maxFailures: must be between 0 and 64, got 65"},
		{"rollout:\n  clusters: [[a]]\n  maxFailures: -1\n", "rollout.maxFailures: must be between 0 and 64, got -1"},
		{"rollout:\n  minSuccessTime: 10s\n", "rollout.minSuccessTime: applies to a rollout across clusters only"},
		{"rollout:\n  maxFailures: 1\n", "rollout.maxFailures: applies to a rollout across clusters only"},
		{"rollout:\n  clusters: [a]\n", "rollout.clusters[0]: expected a list"},
		{"rollout:\n  clusters: [[a],[b],[c],[d],[e],[f],[g],[h],[i],[j],[k],[l],[m],[n],[o],[p],[q]]\n", "rollout.clusters: has 17 stages, at most 16"},
		{"rollout:\n  clusters: [[" + strings.Repeat("c,", 64) + "z]]\n", "rollout.clusters: names 65 clusters, at most 64"},
	} {
		_, err := document.Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
	doc, err := document.Parse([]byte("rollout:\n  clusters: [[a], [b, c]]\n  minSuccessTime: 30\n  progressDeadline: 5m\n  maxFailures: 1\n  rollbackOn: AnyNACK\n  analysis: {minRequests: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := doc.Rollout; !p.Staged() || p.SuccessTime() != 30*time.Second || p.Deadline() != 5*time.Minute || p.MaxFailures != 1 {
		t.Errorf("policy %+v", p)
	}
	if p := (canary.Policy{Clusters: [][]string{{"a"}}}); p.SuccessTime() != 0 || p.Deadline() != 10*time.Minute {
		t.Errorf("defaults: %s, %s", p.SuccessTime(), p.Deadline())
	}
	err = doc.Rollout.ValidateClusters([]string{"c", "Kubernetes", "a"})
	if err == nil || err.Error() != `clusters[1][0]: names cluster "b", which is neither the home cluster nor a member; the known clusters are Kubernetes, a, c` {
		t.Errorf("unknown cluster: %v", err)
	}
	if err := doc.Rollout.ValidateClusters([]string{"a", "b", "c"}); err != nil {
		t.Errorf("known clusters: %v", err)
	}
	if got := doc.Rollout.Stages([]string{"z", "c", "a", "home"}); !slices.EqualFunc(got, [][]string{{"a"}, {"c"}, {"home", "z"}}, slices.Equal) {
		t.Errorf("stages %v: b is not known, home and z come last", got)
	}
	// A single-cluster document's policy is as it was.
	doc, err = document.Parse([]byte("gzip: {}\n"))
	if err != nil || doc.Rollout.Staged() {
		t.Errorf("no rollout section: %v, staged %v", err, doc.Rollout.Staged())
	}
}

// TestClusterRecordSize holds the record of the largest rollout, every
// cluster failed with the longest reason and warned, to a size the status
// ConfigMap carries beside the rest.
func TestClusterRecordSize(t *testing.T) {
	var known []string
	var stages [][]string
	for i := range canary.MaxClusterNames {
		name := fmt.Sprintf("%s-%02d", strings.Repeat("c", 60), i) // 63 characters
		known = append(known, name)
		if i < canary.MaxStages {
			stages = append(stages, []string{name})
		} else {
			stages[i%canary.MaxStages] = append(stages[i%canary.MaxStages], name)
		}
	}
	p := canary.Policy{Clusters: stages, MaxFailures: canary.MaxClusterNames, MinSuccessTime: secs(time.Second), Analysis: &canary.Analysis{}}
	in := canary.ClusterInput{Policy: p, Document: "d", From: "f", To: "t", Known: known, Now: mcT0, Clusters: map[string]canary.ClusterState{}}
	long := strings.Repeat("listener 0.0.0.0_8080: a reason Envoy gives at length; ", 40)
	var out canary.ClusterOutput
	for step := 0; step < 3*canary.MaxStages && (out.Record == nil || out.Phase == canary.Progressing); step++ {
		for i, c := range known {
			st := canary.ClusterState{Reachable: true, Delivered: true, Answers: &canary.ClusterAnswers{Selected: 1, Synced: 1, Complete: true}}
			if i%2 == 0 {
				st.Answers = &canary.ClusterAnswers{Selected: 1, NACKed: 1, Complete: true, NACKs: []canary.Answer{{Name: "gw", Message: long}}}
			} else {
				st.Traffic = &canary.ClusterTraffic{Known: true, Insufficient: true, Verdict: long}
			}
			in.Clusters[c] = st
		}
		out = canary.StepClusters(in)
		in.Record = out.Record
		in.Now = in.Now.Add(2 * time.Second)
	}
	if out.Phase != canary.Complete || len(out.Record.Failed) != canary.MaxClusterNames/2 || len(out.Record.Warnings) != canary.MaxClusterNames/2 {
		t.Fatalf("phase %s, %d failed, %d warnings", out.Phase, len(out.Record.Failed), len(out.Record.Warnings))
	}
	b, err := json.Marshal(out.Record)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > canary.MaxClusterRecordBytes {
		t.Errorf("the record is %d bytes, over %d", len(b), canary.MaxClusterRecordBytes)
	}
	t.Logf("%d bytes", len(b))
}

// BenchmarkStepClusters is one sync of a rollout across 64 clusters in 16
// stages, the first stage baking, every other cluster answered.
func BenchmarkStepClusters(b *testing.B) {
	var known []string
	var stages [][]string
	for i := range canary.MaxClusterNames {
		name := fmt.Sprintf("cluster-%02d", i)
		known = append(known, name)
		if i < canary.MaxStages {
			stages = append(stages, []string{name})
		} else {
			stages[i%canary.MaxStages] = append(stages[i%canary.MaxStages], name)
		}
	}
	p := canary.Policy{Clusters: stages, MinSuccessTime: secs(time.Hour)}
	in := canary.ClusterInput{Policy: p, Document: "d", From: "f", To: "t", Known: known, Now: mcT0, Clusters: map[string]canary.ClusterState{}}
	for _, c := range known {
		in.Clusters[c] = canary.ClusterState{Reachable: true, Delivered: true, Answers: &canary.ClusterAnswers{Selected: 100, Synced: 100, Complete: true}}
	}
	in.Record = canary.StepClusters(in).Record
	in.Now = in.Now.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if out := canary.StepClusters(in); out.Phase != canary.Progressing {
			b.Fatal(out.Message)
		}
	}
}
