package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The default Direct rollout judged by the proxies' answers, as the
// controller gets them from a fake istiod: a change every proxy refuses
// is rolled back to the last good set, and only a change they took
// replaces the last good document.

const (
	directA = "gzip:\n  chunkSize: 8192\nheaders:\n  disableXEnvoyHeaders: true\n"
	directB = "gzip:\n  chunkSize: 16384\nheaders:\n  disableXEnvoyHeaders: true\n"
	directC = "gzip:\n  chunkSize: 32768\nheaders:\n  disableXEnvoyHeaders: true\n"
	// envoySays is a NACK as istiod reports it.
	envoySays = "Error adding/updating listener(s) 0.0.0.0_8080: cache_time_ms must not be set when path_through_mode is disabled"
)

// fleet is a fake istiod with gateways gw-a, gw-b, … that answer pushes.
type fleet struct {
	f       *fixture
	tracker *rollout.Tracker
	proxies []rollout.ProxySync
	push    int
}

func newFleet(t *testing.T, cfg Config) *fleet {
	fl := &fleet{tracker: rollout.NewTracker(nil, &rollout.Client{}, time.Minute)}
	cfg.Rollout, cfg.RootNamespace = fl.tracker, testNS
	fl.f = newFixture(t, cfg)
	fl.tracker.Source = rollout.Static{fakeIstiod(t, fl.f, &fl.proxies).URL}
	return fl
}

// answer has istiod load the set the API holds (the pushes so far don't
// carry it), then push it: each gateway ACKs ("") or NACKs with the
// message given.
func (fl *fleet) answer(answers ...string) {
	fl.f.t.Helper()
	fl.tracker.Poll(fl.f.ctx)
	fl.push++
	var proxies []rollout.ProxySync
	for i, a := range answers {
		proxies = append(proxies, gatewaySync(fmt.Sprintf("gw-%c.istio-system", 'a'+i), fl.push, a))
	}
	setProxies(&fl.proxies, proxies...)
	fl.tracker.Poll(fl.f.ctx)
}

// lastGoodDoc is the stored last good document.
func (f *fixture) lastGoodDoc() string { f.t.Helper(); return f.lastGood()[document.DataKey] }

// countEvents counts the events whose text contains part.
func countEvents(events []string, part string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e, part) {
			n++
		}
	}
	return n
}

// Every proxy refuses the change: every proxy gets the last good set
// again, the status says RolledBack naming a proxy and quoting Envoy, and
// the document stays rejected; the restored set taken, the roll back
// stands whatever comes later; a new edit goes out again.
func TestDirectRollsBackWhenEveryProxyNACKs(t *testing.T) {
	fl := newFleet(t, Config{})
	f := fl.f
	f.putConfig(directA)
	f.mustSync() // the first set: nothing to protect, the last good at once
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	if s := f.status(); s.State != status.Applied || s.Rollout == nil || s.Rollout.Synced != 2 || f.lastGoodDoc() != directA {
		t.Fatalf("the first set: %+v", s)
	}
	f.events()

	f.putConfig(directB)
	f.mustSync()
	f.wantLive(directB)
	f.deliver()
	if s := f.status(); s.State != status.Applied || s.Canary != nil || s.RolloutSummary != WaitingForIstiod || f.lastGoodDoc() != directA {
		t.Fatalf("the change delivered, not judged yet: %+v; last good %q", s, f.lastGoodDoc())
	}
	fl.answer(envoySays, envoySays)
	f.mustSync()
	f.wantLive(directA)
	f.deliver()
	s := f.status()
	r := s.Canary
	if s.State != status.RolledBack || r == nil || !r.Direct() || r.Phase != canary.RolledBack || r.RollbackOn != canary.AllNACK || len(r.NACKs) != 2 {
		t.Fatalf("status %s %q, record %+v", s.State, s.Message, r)
	}
	want := "rolled back: proxy gw-a.istio-system rejected the change: LDS: " + envoySays + "; every proxy that answered NACKed, 2 of 2 (rollbackOn AllNACK)"
	if len(s.Errors) != 1 || s.Errors[0].Message != want {
		t.Errorf("errors %+v\nwant %q", s.Errors, want)
	}
	if !strings.Contains(s.Message, "every proxy was given the last good set again; the document is rejected until it changes") {
		t.Errorf("message %q", s.Message)
	}
	if f.lastGoodDoc() != directA || s.Applied.Hash != r.From {
		t.Errorf("last good %q, applied %s, record from %s", f.lastGoodDoc(), s.Applied.Hash, r.From)
	}
	if events := f.events(); countEvents(events, "Warning RolledBack gzip rolled back on every proxy") != 1 {
		t.Errorf("events %q", events)
	}
	if n := testutil.ToFloat64(f.metrics.DirectRollouts.WithLabelValues("RolledBack")); n != 1 {
		t.Errorf("rolled back %v times", n)
	}

	// The document stays rejected: a resync writes nothing.
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a resync wrote %v", w)
	}
	// The proxies take the restored set: recorded once; a later NACK of it
	// changes nothing.
	fl.answer("", "")
	f.mustSync()
	if s := f.status(); s.State != status.RolledBack || s.Canary.Restored != canary.RestoredTaken || s.Rollout.Synced != 2 {
		t.Errorf("the restored set taken: %s, %+v", s.State, s.Canary)
	}
	fl.answer(envoySays, envoySays)
	f.mustSync()
	if s := f.status(); s.State != status.RolledBack || s.Canary.Phase != canary.RolledBack || len(f.writes()) != 0 {
		t.Errorf("a later NACK of the restored set: %s, %+v, wrote %v", s.State, s.Canary, f.writes())
	}
	f.wantLive(directA)

	// A new edit goes out again, and once taken is the last good.
	f.putConfig(directC)
	f.mustSync()
	f.wantLive(directC)
	f.deliver()
	if s := f.status(); s.State != status.Applied || s.Canary != nil || len(s.Errors) != 0 {
		t.Errorf("a new edit: %s, %+v, %+v", s.State, s.Canary, s.Errors)
	}
	fl.answer("", "")
	f.mustSync()
	if s := f.status(); s.State != status.Applied || f.lastGoodDoc() != directC {
		t.Errorf("the new edit taken: %s; last good %q", s.State, f.lastGoodDoc())
	}
	if n := testutil.ToFloat64(f.metrics.DirectRollouts.WithLabelValues("Promoted")); n != 1 {
		t.Errorf("promoted %v times, want 1 (the edit after the roll back)", n)
	}
}

// Some proxies refuse the change: by default (AllNACK) it stays, the
// status says NACKed (never Applied), and it becomes the last good; with
// rollbackOn AnyNACK it is rolled back.
func TestDirectPartialNACK(t *testing.T) {
	for _, rule := range []string{"", "AllNACK", "AnyNACK"} {
		t.Run("rollbackOn="+rule, func(t *testing.T) {
			policy := ""
			if rule != "" {
				policy = "rollout:\n  rollbackOn: " + rule + "\n"
			}
			fl := newFleet(t, Config{})
			f := fl.f
			f.putConfig(policy + directA)
			f.mustSync()
			f.deliver()
			fl.answer("", "")
			f.mustSync()
			f.putConfig(policy + directB)
			f.mustSync()
			f.deliver()
			fl.answer("", envoySays)
			f.mustSync()
			s := f.status()
			if rule == "AnyNACK" {
				f.wantLive(directA)
				if s.State != status.RolledBack || s.Canary == nil || !strings.Contains(s.Canary.Message, "proxy gw-b.istio-system rejected the change: LDS: "+envoySays+"; 1 of 2 proxies that answered NACKed (rollbackOn AnyNACK)") {
					t.Errorf("status %s, record %+v", s.State, s.Canary)
				}
				if f.lastGoodDoc() != policy+directA {
					t.Errorf("last good %q", f.lastGoodDoc())
				}
				return
			}
			f.wantLive(directB)
			if s.State != status.NACKed || s.Canary != nil || s.Message != "1 of 2 proxies refuses this set (NACK) and keeps its previous configuration; a proxy like it that starts now gets no listener" {
				t.Errorf("status %s %q, record %+v", s.State, s.Message, s.Canary)
			}
			if f.lastGoodDoc() != policy+directB {
				t.Errorf("last good %q: one proxy took the change", f.lastGoodDoc())
			}
		})
	}
}

// The restored set is refused too: the refusal is not the change's, so
// the document goes out again and is kept, for good: no flapping however
// the proxies answer after.
func TestDirectKeepsTheDocumentWhenTheNACKPersists(t *testing.T) {
	fl := newFleet(t, Config{})
	f := fl.f
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	f.putConfig(directB)
	f.mustSync()
	f.deliver()
	other := "Error adding/updating listener(s) 0.0.0.0_8080: a hand-written filter Envoy refuses"
	fl.answer(other, other)
	f.mustSync()
	f.wantLive(directA)
	f.deliver()
	f.events()
	fl.answer(other, other)
	f.mustSync()
	f.wantLive(directB)
	f.deliver()
	s := f.status()
	r := s.Canary
	if s.State != status.NACKed || r == nil || r.Phase != canary.Kept || r.Restored != canary.RestoredRefused || len(s.Errors) != 0 {
		t.Fatalf("status %s %q, errors %+v, record %+v", s.State, s.Message, s.Errors, r)
	}
	if !strings.HasPrefix(s.Message, "the proxies refused the restored last good set as well, so the refusal is not this change's") ||
		!strings.Contains(r.Message, "proxy gw-a.istio-system refused the restored last good set as well: LDS: "+other) {
		t.Errorf("message %q, record message %q", s.Message, r.Message)
	}
	if f.lastGoodDoc() != directB {
		t.Errorf("last good %q, want the kept document", f.lastGoodDoc())
	}
	if events := f.events(); countEvents(events, "Warning KeptDespiteNACK gzip delivered again and kept") != 1 {
		t.Errorf("events %q", events)
	}
	if n := testutil.ToFloat64(f.metrics.DirectRollouts.WithLabelValues("Kept")); n != 1 {
		t.Errorf("kept %v times", n)
	}
	// However the proxies answer now, the document stays.
	for _, answers := range [][]string{{other, other}, {"", other}, {"", ""}} {
		fl.answer(answers...)
		f.mustSync()
		if w := f.writes(); len(w) != 0 {
			t.Errorf("answers %q: wrote %v", answers, w)
		}
		if s := f.status(); s.Canary == nil || s.Canary.Phase != canary.Kept {
			t.Errorf("answers %q: record %+v", answers, s.Canary)
		}
	}
	// The cause removed, every proxy takes it: Applied.
	if s := f.status(); s.State != status.Applied || s.Message != "" {
		t.Errorf("every proxy took the kept document: %s %q", s.State, s.Message)
	}
}

// When the tracker can't tell (istiod does not answer, no proxy
// answered), nothing is rolled back and nothing is promoted, and the
// status says why.
func TestDirectWithoutAnswers(t *testing.T) {
	for _, c := range []struct {
		name string
		// istiod: "" answers with no proxy, "down" does not answer,
		// "partial" is one istiod that answers and one that does not.
		istiod string
		want   string
	}{
		{"istiod down", "down", "not every istiod answered, so whether the proxies took the change is not known"},
		{"no proxy", "", "no proxy the set reaches has answered for it"},
		{"one of two istiod NACKed, the other down", "partial", "2 proxies NACKed the change, but not every istiod answered: nothing is rolled back on missing answers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fl := newFleet(t, Config{})
			f := fl.f
			f.putConfig(directA)
			f.mustSync() // the first set is stored at once
			f.deliver()
			switch c.istiod {
			case "down":
				fl.tracker.Source = rollout.Static{"http://127.0.0.1:1"}
			case "partial":
				fl.tracker.Source = append(fl.tracker.Source.(rollout.Static), "http://127.0.0.1:1")
			}
			f.putConfig(directB)
			f.mustSync()
			f.deliver()
			if c.istiod == "partial" {
				fl.answer(envoySays, envoySays)
			} else {
				fl.answer()
			}
			f.mustSync()
			f.wantLive(directB)
			s := f.status()
			if s.Canary != nil || s.State == status.RolledBack || !strings.Contains(s.Message, c.want) {
				t.Errorf("status %s %q, record %+v", s.State, s.Message, s.Canary)
			}
			if s.State == status.Applied && c.istiod == "partial" {
				t.Error("Applied while proxies NACK")
			}
			if f.lastGoodDoc() != directA {
				t.Errorf("last good %q: promoted without answers", f.lastGoodDoc())
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("wrote %v", w)
			}
		})
	}
}

// A change every proxy takes costs what it did before the rollback rule:
// one EnvoyFilter write, the last good copy written once (when the first
// ACK is in, not at delivery), no rollout record, and no status write
// beyond the ones the rollout's progress makes anyway.
func TestDirectTakenWritesAsBefore(t *testing.T) {
	fl := newFleet(t, Config{})
	f := fl.f
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	f.kube.ClearActions()
	f.putConfig(directB)
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"apply globalconfig-gzip"}) {
		t.Errorf("the edit wrote %v", w)
	}
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	writes := map[string]int{}
	for _, a := range f.kube.Actions() {
		switch w := a.(type) {
		case k8stesting.PatchAction:
			writes[w.GetName()]++
		case k8stesting.UpdateAction:
			writes[w.GetObject().(metav1.Object).GetName()]++
		case k8stesting.CreateAction:
			writes[w.GetObject().(metav1.Object).GetName()]++
		}
	}
	delete(writes, testName) // the edit itself
	// The status: once for the edit, once when the answers came in.
	if writes[LastGoodName(testName)] != 1 || writes[status.ConfigMapName(testName)] != 2 || len(writes) != 2 {
		t.Errorf("configmap writes %v", writes)
	}
	if s := f.status(); s.State != status.Applied || s.Canary != nil || f.lastGoodDoc() != directB {
		t.Errorf("status %s, record %+v, last good %q", s.State, s.Canary, f.lastGoodDoc())
	}
}

// A restart changes nothing: a change delivered but not judged yet is
// judged when the answers come to the new term, and a roll back is read
// back from the status and the last good copy, writing nothing.
func TestDirectAcrossRestarts(t *testing.T) {
	fl := newFleet(t, Config{})
	f := fl.f
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	f.putConfig(directB)
	f.mustSync()
	f.deliver()
	f.ctrl.st = state{} // a new term, the change not judged yet
	f.mustSync()
	if w := f.writes(); len(w) != 0 || f.lastGoodDoc() != directA {
		t.Fatalf("the restart wrote %v; last good %q", w, f.lastGoodDoc())
	}
	fl.answer(envoySays, envoySays)
	f.mustSync()
	f.wantLive(directA)
	f.deliver()
	if s := f.status(); s.State != status.RolledBack || s.Canary == nil || !s.Canary.Direct() {
		t.Fatalf("after the restart: %s %+v", s.State, s.Canary)
	}
	f.ctrl.st = state{} // and again, rolled back
	f.kube.ClearActions()
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("the restart wrote %v", w)
	}
	for _, a := range f.kube.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("the restart made a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if s := f.status(); s.State != status.RolledBack || s.Canary.Phase != canary.RolledBack {
		t.Errorf("after the second restart: %s %+v", s.State, s.Canary)
	}
	f.wantLive(directA)
}
