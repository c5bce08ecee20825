package controller

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The blame of a NACK in the controller, with a fake blame function: the
// sampling (one run per set, other EnvoyFilters and kind of proxy, for
// the first refusing proxy by name, off the sync), what the status and the
// Event say, and what a Direct change comes to while the blame is pending
// and once it is known.

// userFilter and oursFilter are the culprits the fake blames name.
var (
	userFilter = preflight.Culprit{Namespace: testNS, Name: "user-anchored-healthcheck"}
	oursFilter = preflight.Culprit{Namespace: testNS, Name: "globalconfig-gzip", Managed: true, Item: "gzip"}
)

const (
	userName     = "istio-system/user-anchored-healthcheck (not managed by globalconfig)"
	combination  = "the combination of " + userName + " and globalconfig's gzip (istio-system/globalconfig-gzip)"
	envoyRefuses = "Error adding/updating listener(s) 0.0.0.0_8080: cache_time_ms must not be set when path_through_mode is disabled"
)

// blameCall is one call of the fake blame.
type blameCall struct {
	proxy string
	set   string // the hash of the set it was given
}

// fakeBlame answers with faults (or err), and records its calls.
type fakeBlame struct {
	mu     sync.Mutex
	faults [][]preflight.Culprit
	err    error
	block  bool // wait until the blame's context ends
	calls  []blameCall
}

func (fb *fakeBlame) fn(ctx context.Context, proxy string, ours []*envoyfilter.Object) (*preflight.Blame, error) {
	fb.mu.Lock()
	fb.calls = append(fb.calls, blameCall{proxy: proxy, set: render.SetHash(ours)})
	faults, err, block := fb.faults, fb.err, fb.block
	fb.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	b := &preflight.Blame{Proxy: preflight.Proxy{Name: proxy}, Envoy: "1.40.0", Outcome: preflight.Blamed, Filters: 3, Runs: 7, Elapsed: 420 * time.Millisecond}
	for _, f := range faults {
		b.Faults = append(b.Faults, preflight.Fault{Filters: f, Message: envoyRefuses})
	}
	return b, nil
}

func (fb *fakeBlame) called() []blameCall {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]blameCall(nil), fb.calls...)
}

// putUserFilter creates (or changes) an EnvoyFilter globalconfig does not
// manage in the fake API (in a namespace of its own, so that the live
// managed set stays what the tests compare).
func putUserFilter(t *testing.T, f *fixture, name string, priority int32) {
	t.Helper()
	ef := &clientnetworking.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: networking.EnvoyFilter{Priority: priority}}
	c := f.istio.NetworkingV1alpha3().EnvoyFilters("team-a")
	if old, err := c.Get(f.ctx, name, metav1.GetOptions{}); err == nil {
		ef.ResourceVersion = old.ResourceVersion
		if _, err := c.Update(f.ctx, ef, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := c.Create(f.ctx, ef, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// refusedChange takes a fleet with blame fb from directA (taken) to
// directB, which both gateways NACK, up to the sync that sees the NACKs.
func refusedChange(t *testing.T, fb *fakeBlame) *fleet {
	fl := newFleet(t, Config{Blame: fb.fn})
	f := fl.f
	putUserFilter(t, f, userFilter.Name, 100)
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	fl.answer("", "")
	f.mustSync()
	f.putConfig(directB)
	f.mustSync()
	f.deliver()
	fl.answer(envoyRefuses, envoyRefuses)
	f.events()
	f.mustSync()
	return fl
}

// While the blame of the refused set is being found, the change is
// neither rolled back nor kept: the status says NACKed, that the blame is
// pending and why nothing is decided; no blame ran in the sync.
func wantPending(t *testing.T, fl *fleet, fb *fakeBlame) {
	t.Helper()
	f := fl.f
	f.wantLive(directB)
	s := f.status()
	if s.State != status.NACKed || s.Canary != nil || !strings.Contains(s.Message, "finding which EnvoyFilter the proxies refuse") {
		t.Fatalf("pending blame: status %s %q, record %+v", s.State, s.Message, s.Canary)
	}
	if len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlamePending || s.Blame[0].Proxy != "gw-a.istio-system" || s.Blame[0].Kind != "gateway" || s.Blame[0].Set != s.Applied.Hash {
		t.Errorf("blame in the status %+v", s.Blame)
	}
	if n := len(fb.called()); n != 0 {
		t.Errorf("the sync ran %d blames itself", n)
	}
	// A resync while it is pending changes nothing.
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a resync while the blame is pending wrote %v", w)
	}
}

// A fault that holds globalconfig's EnvoyFilter together with a user's:
// pending first, then rolled back, the status and the Events naming the
// user's EnvoyFilter as the other half.
func TestDirectBlameCombinationRollsBack(t *testing.T) {
	fb := &fakeBlame{faults: [][]preflight.Culprit{{userFilter, oursFilter}}}
	fl := refusedChange(t, fb)
	f := fl.f
	wantPending(t, fl, fb)
	delivered := f.status().Applied.Hash

	f.ctrl.blamer.drain(f.ctx)
	calls := fb.called()
	if len(calls) != 1 || calls[0].proxy != "gw-a.istio-system" || calls[0].set != delivered {
		t.Fatalf("blame calls %+v: want one, for gw-a.istio-system and set %s", calls, delivered)
	}
	f.mustSync()
	f.wantLive(directA)
	f.deliver()
	s := f.status()
	r := s.Canary
	if s.State != status.RolledBack || r == nil || r.Phase != canary.RolledBack {
		t.Fatalf("status %s %q, record %+v", s.State, s.Message, r)
	}
	other := "the proxies refuse " + combination + ": globalconfig's change fails together with " + userName + " (the other half of the fault)"
	if len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Message, other) || !strings.HasPrefix(s.Errors[0].Message, "rolled back: proxy gw-a.istio-system rejected the change: LDS: ") {
		t.Errorf("errors %+v\nwant %q", s.Errors, other)
	}
	events := f.events()
	if countEvents(events, "Warning NACKBlamed set "+delivered+": gateway gw-a.istio-system refuses "+combination+": globalconfig's change fails together with "+userName) != 1 ||
		countEvents(events, "Envoy on "+combination+": "+envoyRefuses) != 1 {
		t.Errorf("no NACKBlamed Event naming the user's EnvoyFilter as the other half: %q", events)
	}
	if countEvents(events, "Warning RolledBack gzip rolled back on every proxy") != 1 || countEvents(events, "together with "+userName) != 2 {
		t.Errorf("the RolledBack Event should name the other half: %q", events)
	}
	// The blame is announced once, whatever syncs follow.
	for range 3 {
		f.ctrl.blamer.drain(f.ctx)
		f.mustSync()
	}
	if events := f.events(); countEvents(events, "NACKBlamed") != 0 {
		t.Errorf("the blame was announced again: %q", events)
	}
	if n := len(fb.called()); n != 1 {
		t.Errorf("%d blames ran, want 1", n)
	}
}

// A fault of a user's EnvoyFilter alone: the change is not rolled back,
// it is kept (and becomes the last good document), and the status says
// why, naming the culprit.
func TestDirectBlameOfAUserFilterKeepsTheChange(t *testing.T) {
	fb := &fakeBlame{faults: [][]preflight.Culprit{{userFilter}}}
	fl := refusedChange(t, fb)
	f := fl.f
	wantPending(t, fl, fb)
	f.ctrl.blamer.drain(f.ctx)
	f.mustSync()
	f.wantLive(directB)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("keeping the change wrote %v", w)
	}
	f.deliver()
	s := f.status()
	r := s.Canary
	if s.State != status.NACKed || r == nil || !r.Direct() || r.Phase != canary.Kept || r.Restored != "" || len(s.Errors) != 0 {
		t.Fatalf("status %s %q, errors %+v, record %+v", s.State, s.Message, s.Errors, r)
	}
	why := "proxies refuse " + userName + " on its own: rolling back globalconfig's change would not help"
	if !strings.HasPrefix(r.Message, why) || !strings.HasPrefix(s.Message, why) || strings.Contains(s.Message, "restored last good set") {
		t.Errorf("record message %q, status message %q: want %q", r.Message, s.Message, why)
	}
	if len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameBlamed || len(s.Blame[0].Faults) != 1 ||
		s.Blame[0].Faults[0].Fault != userName || s.Blame[0].Faults[0].Message != envoyRefuses || s.Blame[0].Faults[0].Culprits[0].Managed ||
		s.Blame[0].Envoy != "1.40.0" || s.Blame[0].Runs != 7 || s.Blame[0].Elapsed != "420ms" ||
		!strings.Contains(s.Blame[0].Message, "no EnvoyFilter of globalconfig's is to blame, so rolling back globalconfig's change would not help") {
		t.Errorf("blame in the status %+v", s.Blame)
	}
	if f.lastGoodDoc() != directB {
		t.Errorf("last good %q, want the kept document", f.lastGoodDoc())
	}
	events := f.events()
	if countEvents(events, "Warning KeptDespiteNACK gzip delivered again and kept: "+why) != 1 || countEvents(events, "Warning NACKBlamed") != 1 || countEvents(events, "RolledBack") != 0 {
		t.Errorf("events %q", events)
	}
}

// A blame that does not finish in time, or fails: rolled back as without
// one (fail closed), the message saying why.
func TestDirectBlameFailedRollsBack(t *testing.T) {
	for name, fb := range map[string]*fakeBlame{
		"timed out": {block: true},
		"failed":    {err: errFake("no istiod has a proxy gw-a.istio-system connected")},
	} {
		t.Run(name, func(t *testing.T) {
			fl := refusedChange(t, fb)
			f := fl.f
			f.ctrl.blamer.timeout = 50 * time.Millisecond
			wantPending(t, fl, fb)
			f.ctrl.blamer.drain(f.ctx)
			f.mustSync()
			f.wantLive(directA)
			s := f.status()
			want := "the blame could not name the EnvoyFilter the proxies refuse (gateway gw-a.istio-system: "
			if fb.block {
				want += "the blame did not finish within 50ms"
			} else {
				want += "no istiod has a proxy gw-a.istio-system connected"
			}
			if s.State != status.RolledBack || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Message, want) {
				t.Errorf("status %s, errors %+v; want %q", s.State, s.Errors, want)
			}
			if events := f.events(); countEvents(events, "Warning NACKBlameFailed set ") != 1 {
				t.Errorf("events %q", events)
			}
		})
	}
}

// Many proxies refuse the set: one blame runs, for the first of them by
// name; resyncs, rechecks and a restart of the term run none again while
// the other EnvoyFilters are unchanged; a change to one of them runs one
// more. Meanwhile the change stays kept (the blame names a user's filter).
func TestBlameRunsOncePerSetOthersAndKind(t *testing.T) {
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	fb := &fakeBlame{faults: [][]preflight.Culprit{{userFilter}}}
	fl := newFleet(t, Config{Blame: fb.fn, Now: clock})
	f := fl.f
	putUserFilter(t, f, userFilter.Name, 100)
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	// Three gateways refuse the first set, listed out of name order.
	fl.tracker.Poll(f.ctx)
	setProxies(&fl.proxies, gatewaySync("gw-c.istio-system", 9, envoyRefuses), gatewaySync("gw-a.istio-system", 9, envoyRefuses),
		gatewaySync("gw-b.istio-system", 9, envoyRefuses), gatewaySync("gw-d.istio-system", 9, ""))
	fl.tracker.Poll(f.ctx)
	for range 3 {
		f.mustSync()
		f.ctrl.blamer.drain(f.ctx)
	}
	calls := fb.called()
	if len(calls) != 1 || calls[0].proxy != "gw-a.istio-system" {
		t.Fatalf("blame calls %+v: want one, for the first refusing gateway by name", calls)
	}
	s := f.status()
	if len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameBlamed || s.Blame[0].Proxy != "gw-a.istio-system" {
		t.Errorf("blame %+v", s.Blame)
	}
	if events := f.events(); countEvents(events, "NACKBlamed") != 1 {
		t.Errorf("events %q: want one NACKBlamed", events)
	}
	// Past the recheck, the others are listed again: unchanged, no run.
	advance(blameRecheck + time.Second)
	f.mustSync()
	f.ctrl.blamer.drain(f.ctx)
	f.mustSync()
	// A new term (another leader's state) asks again: the answer holds.
	f.ctrl.st = state{}
	f.mustSync()
	f.ctrl.blamer.drain(f.ctx)
	f.mustSync()
	if n := len(fb.called()); n != 1 {
		t.Errorf("%d blames ran with nothing changed, want 1", n)
	}
	// Another EnvoyFilter's spec changes: pending, then one more run.
	putUserFilter(t, f, userFilter.Name, 101)
	advance(blameRecheck + time.Second)
	f.mustSync()
	f.ctrl.blamer.drain(f.ctx)
	if s := f.status(); len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameBlamed {
		t.Errorf("blame before the new one is read %+v", s.Blame)
	}
	f.mustSync()
	if n := len(fb.called()); n != 2 {
		t.Errorf("%d blames ran after another EnvoyFilter changed, want 2", n)
	}
}

// refusing picks, per kind, the first refusing proxy by name that runs
// the blame binary's Envoy release, else the first by name.
func TestRefusingSamplesOnePerKind(t *testing.T) {
	st := &rollout.Status{Proxies: []rollout.Proxy{
		{Name: "web-2.shop", Type: "sidecar", State: rollout.NACKed, IstioVersion: "1.31.1"},
		{Name: "gw-c.istio-system", Type: "gateway", State: rollout.NACKed, IstioVersion: "1.31.0"},
		{Name: "gw-b.istio-system", Type: "gateway", State: rollout.NACKed, IstioVersion: "1.30.2"},
		{Name: "web-1.shop", Type: "sidecar", State: rollout.NACKed, IstioVersion: "1.30.2"},
		{Name: "gw-a.istio-system", Type: "gateway", State: rollout.Synced, IstioVersion: "1.31.0"},
		{Name: "gw-d.istio-system", Type: "gateway", State: rollout.NACKed, IstioVersion: "1.31.0"},
	}}
	for envoy, want := range map[string][]refuser{
		"":     {{"gateway", "gw-b.istio-system", false}, {"sidecar", "web-1.shop", false}},
		"1.39": {{"gateway", "gw-c.istio-system", true}, {"sidecar", "web-2.shop", true}},
		"1.38": {{"gateway", "gw-b.istio-system", true}, {"sidecar", "web-1.shop", true}},
		"1.36": {{"gateway", "gw-b.istio-system", false}, {"sidecar", "web-1.shop", false}},
	} {
		if got := refusing(st, envoy); !slices.Equal(got, want) {
			t.Errorf("binary of Envoy %q: refusing %v, want %v", envoy, got, want)
		}
	}
}

// Without a blame function the status says --envoy would name the
// EnvoyFilter; with one, a change the proxies took in part is promoted
// as before while its blame is still pending, and the blame's words
// reach the status scrubbed of the document's secrets.
func TestBlameOffAndScrubbed(t *testing.T) {
	secretDoc := directA + "tracing:\n  enable: true\n  skywalking: {service: sw.default.svc.cluster.local, port: 11800, access_token: s3cr3t}\n"
	t.Run("off", func(t *testing.T) {
		fl := newFleet(t, Config{})
		f := fl.f
		f.putConfig(directA)
		f.mustSync()
		f.deliver()
		fl.answer("", envoyRefuses)
		f.mustSync()
		s := f.status()
		if len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameOff || s.Blame[0].Proxy != "gw-b.istio-system" || !strings.Contains(s.Blame[0].Message, "run it with --envoy") {
			t.Errorf("blame %+v", s.Blame)
		}
	})
	t.Run("scrubbed", func(t *testing.T) {
		fb := &fakeBlame{faults: [][]preflight.Culprit{{oursFilter}}}
		fl := newFleet(t, Config{Blame: fb.fn})
		f := fl.f
		f.putConfig(directA)
		f.mustSync()
		f.deliver()
		fl.answer("", "")
		f.mustSync()
		f.putConfig(secretDoc)
		f.mustSync()
		f.deliver()
		fl.answer("", envoyRefuses+": token s3cr3t")
		f.mustSync()
		if s := f.status(); s.Canary != nil || f.lastGoodDoc() != secretDoc || len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlamePending {
			t.Fatalf("a change one proxy took, blame pending: %+v, blame %+v", s.Canary, s.Blame)
		}
		fb.mu.Lock()
		fb.faults = nil
		fb.err = errFake("envoy refused token s3cr3t")
		fb.mu.Unlock()
		f.ctrl.blamer.drain(f.ctx)
		f.mustSync()
		s := f.status()
		text, _ := s.Marshal()
		if len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameFailed || strings.Contains(text, "s3cr3t") || !strings.Contains(s.Blame[0].Error, "token [redacted]") {
			t.Errorf("blame %+v", s.Blame)
		}
		for _, e := range f.events() {
			if strings.Contains(e, "s3cr3t") {
				t.Errorf("an event leaks the secret: %q", e)
			}
		}
	})
}

// A blame of a proxy of another Envoy release than the binary's (the only
// one that refused so far) is run again once a proxy of the binary's
// release refuses: pending meanwhile, then once for that proxy, and never
// again.
func TestBlamePrefersTheBinarysRelease(t *testing.T) {
	fb := &fakeBlame{faults: [][]preflight.Culprit{{userFilter}}}
	fl := newFleet(t, Config{Blame: fb.fn, BlameEnvoy: "1.39"}) // Istio 1.31's Envoy
	f := fl.f
	f.putConfig(directA)
	f.mustSync()
	f.deliver()
	older := gatewaySync("gw-a.istio-system", 9, envoyRefuses)
	older.IstioVersion = "1.30.2" // Envoy 1.38
	fl.tracker.Poll(f.ctx)
	setProxies(&fl.proxies, older, gatewaySync("gw-b.istio-system", 8, ""))
	fl.tracker.Poll(f.ctx)
	f.mustSync()
	f.ctrl.blamer.drain(f.ctx)
	f.mustSync()
	if calls := fb.called(); len(calls) != 1 || calls[0].proxy != "gw-a.istio-system" {
		t.Fatalf("blame calls %+v: want gw-a, the only refusing gateway", calls)
	}
	setProxies(&fl.proxies, older, gatewaySync("gw-b.istio-system", 9, envoyRefuses))
	fl.tracker.Poll(f.ctx)
	f.mustSync()
	if s := f.status(); len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlamePending || s.Blame[0].Proxy != "gw-b.istio-system" {
		t.Errorf("a gateway of the binary's release refuses too: blame %+v, want pending for gw-b", s.Blame)
	}
	for range 3 {
		f.ctrl.blamer.drain(f.ctx)
		f.mustSync()
	}
	if calls := fb.called(); len(calls) != 2 || calls[1].proxy != "gw-b.istio-system" {
		t.Errorf("blame calls %+v: want one more, for gw-b", calls)
	}
	if s := f.status(); len(s.Blame) != 1 || s.Blame[0].Outcome != status.BlameBlamed || s.Blame[0].Proxy != "gw-b.istio-system" {
		t.Errorf("blame %+v", s.Blame)
	}
}
