package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The failures an SRE plans for, each read from the code of issue 33 and
// each tested here against the controller's sync, a fake API server and a
// fake istiod (mesh) whose proxies answer as told. Each test is named
// after its scenario and fails on the code before the fix.

// policyDoc is a canary document: gzip's minContentLength n, bake time
// bake.
func policyDoc(bake time.Duration, n int, extra string) string {
	return fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n%sgzip:\n  minContentLength: %d\n", bake, extra, n)
}

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// rig is a controller with a rollout tracker asking the fake istiod, on a
// clock the test moves.
type rig struct {
	t     *testing.T
	f     *fixture
	m     *mesh
	tr    *rollout.Tracker
	cfg   Config
	clock time.Time
	mu    sync.Mutex
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, clock: t0}
	r.tr = rollout.NewTracker(nil, &rollout.Client{}, time.Minute)
	r.cfg = Config{Rollout: r.tr, RootNamespace: testNS, Now: r.now}
	r.f = newFixture(t, r.cfg)
	r.m = newMesh(t, r.f)
	r.tr.Source = rollout.Static{r.m.srv.URL}
	return r
}

func (r *rig) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	r.clock = r.clock.Add(d)
	r.mu.Unlock()
}

// restart is a new leadership term: a new controller and tracker on the
// same cluster.
func (r *rig) restart(sources ...string) {
	r.tr = rollout.NewTracker(nil, &rollout.Client{}, time.Minute)
	if len(sources) == 0 {
		sources = []string{r.m.srv.URL}
	}
	r.tr.Source = rollout.Static(sources)
	r.cfg.Rollout = r.tr
	f := r.f
	f.ctrl = New(withNames(r.cfg), f.kube, f.istio, f.KubeInf.Core().V1().ConfigMaps(), f.IstioInf.Networking().V1alpha3().EnvoyFilters(),
		f.recorder, f.metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.ctrl.st = state{}
}

func withNames(cfg Config) Config {
	cfg.Namespace, cfg.Name, cfg.FieldManager = testNS, testName, "globalconfig"
	return cfg
}

// tick is one round: the controller syncs and writes, istiod loads the
// set and the proxies answer a push of it, the controller reads that.
func (r *rig) tick() {
	r.t.Helper()
	r.sync()
	r.f.deliver()
	r.m.answer(r.tr)
	r.sync()
	r.f.deliver()
}

func (r *rig) sync() {
	r.t.Helper()
	if err := r.f.sync(); err != nil {
		r.t.Fatalf("sync: %v", err)
	}
}

// sees is the gzip minContentLength a proxy labelled canary=v gets from
// the live EnvoyFilters: "100", "200", "" for none, "100+200" for both.
func (r *rig) sees(v string) string {
	r.t.Helper()
	list, err := r.f.istio.NetworkingV1alpha3().EnvoyFilters("").List(r.f.ctx, metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return minOf(versionsOf(list.Items, map[string]string{"istio": "ingressgateway", "globalconfig.io/canary": v})["gzip"])
}

var minRe = regexp.MustCompile(`min_content_length"\s*value:\s*\{\s*number_value:\s*(\d+)`)

func minOf(versions []string) string {
	var out []string
	for _, v := range versions {
		if m := minRe.FindStringSubmatch(v); m != nil {
			out = append(out, m[1])
		}
	}
	return strings.Join(out, "+")
}

// raw is the status as JSON, for fields any version may have.
func (r *rig) raw() map[string]any {
	r.t.Helper()
	cm, err := r.f.kube.CoreV1().ConfigMaps(testNS).Get(r.f.ctx, status.ConfigMapName(testName), metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(cm.Data[status.Key]), &out); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// phase is the status's state and canary phase.
func (r *rig) phase() (state, phase, message string) {
	r.t.Helper()
	s := r.f.status()
	if s.Canary != nil {
		return string(s.State), string(s.Canary.Phase), s.Canary.Message + " " + s.Message
	}
	return string(s.State), "", s.Message
}

// start applies docA directly (the first set) and starts the phase of
// docB, checking each proxy's version.
func (r *rig) start(docA, docB string) {
	r.t.Helper()
	r.f.putConfig(docA)
	r.tick()
	r.tick()
	r.f.putConfig(docB)
	r.tick()
	if st, ph, msg := r.phase(); st != "Canary" || ph != "Canary" {
		r.t.Fatalf("the phase did not start: %s %s %s", st, ph, msg)
	}
}

// Scenario 1: "no stable set means promote". The last good copy deleted
// or no longer rendering, and the leader restarting mid-phase: the change
// never reaches the other proxies without the canaries' ACK; with no way
// to know the stable set at all, the leader holds and says why.
func TestNoStableSetNeverPromotes(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(r *rig)
		// held: nothing exact is left (the live EnvoyFilters are gone too)
		held bool
	}{
		{name: "the last good copy deleted", lose: func(r *rig) {
			_ = r.f.kube.CoreV1().ConfigMaps(testNS).Delete(r.f.ctx, LastGoodName(testName), metav1.DeleteOptions{})
		}},
		{name: "the last good copy no longer renders", lose: func(r *rig) {
			cm, err := r.f.kube.CoreV1().ConfigMaps(testNS).Get(r.f.ctx, LastGoodName(testName), metav1.GetOptions{})
			if err != nil {
				r.t.Fatal(err)
			}
			cm.Data[document.DataKey] = "gizp: {}\n"
			if _, err := r.f.kube.CoreV1().ConfigMaps(testNS).Update(r.f.ctx, cm, metav1.UpdateOptions{}); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "nothing exact left", held: true, lose: func(r *rig) {
			_ = r.f.kube.CoreV1().ConfigMaps(testNS).Delete(r.f.ctx, LastGoodName(testName), metav1.DeleteOptions{})
			list, _ := r.f.istio.NetworkingV1alpha3().EnvoyFilters(testNS).List(r.f.ctx, metav1.ListOptions{})
			for _, ef := range list.Items {
				if strings.HasSuffix(ef.Name, "-canary") {
					continue // the canaries keep theirs; the others' are gone
				}
				_ = r.f.istio.NetworkingV1alpha3().EnvoyFilters(testNS).Delete(r.f.ctx, ef.Name, metav1.DeleteOptions{})
			}
			r.f.deliver()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			cn := r.m.gateway("gw-c", "true")
			r.m.gateway("gw-s", "false")
			r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
			r.m.change(func() { cn.answer = "silent" }) // the canary never takes the change
			if s, c := r.sees("false"), r.sees("true"); s != "100" || c != "200" {
				t.Fatalf("in the phase: the stable proxy sees %q, the canary %q", s, c)
			}
			tc.lose(r)
			r.restart()
			for range 4 {
				r.advance(15 * time.Second)
				r.tick()
				if s := r.sees("false"); s == "200" || strings.Contains(s, "+") {
					st, ph, msg := r.phase()
					t.Fatalf("the stable proxy got the change without the canary's ACK (%q): %s %s %s", s, st, ph, msg)
				}
			}
			st, ph, msg := r.phase()
			switch {
			case tc.held && st != "Held":
				t.Errorf("want held, saying why: %s %s %s", st, ph, msg)
			case tc.held && !strings.Contains(msg, "known nowhere"):
				t.Errorf("the status does not say why it holds: %s", msg)
			case !tc.held && ph != "RolledBack":
				t.Errorf("want the silent canary's change rolled back: %s %s %s", st, ph, msg)
			}
		})
	}
}

// Scenario 2: "canaries that can't be seen don't count". The canaries are
// those known at the start plus those that connect; none is ever left out
// of the judgement (the 201st by name NACKs); one that disconnects counts
// as not ACKed; and nothing is promoted while an istiod does not answer.
func TestInvisibleCanariesCount(t *testing.T) {
	t.Run("the canaries past the first 200 by name", func(t *testing.T) {
		r := newRig(t)
		var last *meshProxy
		for i := range 201 {
			last = r.m.gateway(fmt.Sprintf("gw-%03d", i), "true")
		}
		r.m.gateway("gw-stable", "false")
		r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
		r.m.change(func() { last.answer = "LDS: cache_time_ms must not be set" })
		r.tick()
		r.advance(31 * time.Second)
		r.tick()
		if _, ph, msg := r.phase(); ph != "RolledBack" || !strings.Contains(msg, "gw-200.istio-system") {
			t.Errorf("want rolled back on gw-200's NACK: %s %s", ph, msg)
		}
		if s := r.sees("false"); s != "100" {
			t.Errorf("the stable proxy sees %q", s)
		}
	})
	t.Run("a canary that disconnects", func(t *testing.T) {
		r := newRig(t)
		r.m.gateway("gw-c1", "true")
		c2 := r.m.gateway("gw-c2", "true")
		r.m.gateway("gw-s", "false")
		r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
		r.m.change(func() { c2.gone = true }) // crashed
		r.tick()
		r.advance(31 * time.Second)
		r.tick()
		if _, ph, msg := r.phase(); ph != "RolledBack" || !strings.Contains(msg, "gw-c2.istio-system") {
			t.Errorf("want rolled back, gw-c2 not ACKed: %s %s", ph, msg)
		}
		if s := r.sees("false"); s != "100" {
			t.Errorf("the stable proxy sees %q", s)
		}
	})
	t.Run("an istiod that does not answer", func(t *testing.T) {
		r := newRig(t)
		r.m.gateway("gw-c", "true")
		r.m.gateway("gw-s", "false")
		r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
		r.restart(r.m.srv.URL, "http://127.0.0.1:1") // a second istiod, its canaries unseen
		for range 3 {
			r.advance(20 * time.Second)
			r.tick()
			if s := r.sees("false"); s != "100" {
				st, ph, msg := r.phase()
				t.Fatalf("promoted while an istiod did not answer (%q): %s %s %s", s, st, ph, msg)
			}
		}
		if _, ph, msg := r.phase(); ph != "Canary" || !strings.Contains(msg, "not every istiod answered") {
			t.Errorf("want the phase waiting, saying why: %s %s", ph, msg)
		}
	})
}

// Scenario 3: "an ACK is not proof of receipt". A canary relabelled
// mid-phase still reports the labels it connected with, but istiod gives
// it the stable copy: its ACK proves nothing and does not count.
func TestACKWithoutTheCanaryCopyDoesNotCount(t *testing.T) {
	r := newRig(t)
	cn := r.m.gateway("gw-c", "true")
	r.m.gateway("gw-s", "false")
	r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
	r.m.mu.Lock()
	cn.labels["globalconfig.io/canary"] = "false" // relabelled: istiod selects by this now
	r.m.mu.Unlock()
	r.tick()
	r.advance(31 * time.Second)
	r.tick()
	if _, ph, msg := r.phase(); ph == "Promoted" {
		t.Errorf("promoted on an ACK of a configuration without the canary copy: %s", msg)
	}
	if s := r.sees("false"); s != "100" {
		t.Errorf("the stable proxies got the change: %q", s)
	}
}

// Scenario 4: "the canaries may not represent the change". Canaries that
// are all gateways don't represent a change that reaches sidecars too: the
// phase does not start, and the status names what is missing.
func TestCanariesMustRepresentTheChange(t *testing.T) {
	r := newRig(t)
	r.m.gateway("gw-c", "true")
	r.m.gateway("gw-s", "false")
	r.m.mu.Lock()
	r.m.proxies = append(r.m.proxies, &meshProxy{name: "shop-1.shop", kind: "sidecar", version: "1.31.0",
		connected: map[string]string{"app": "shop", "globalconfig.io/canary": "false"}, labels: map[string]string{"app": "shop", "globalconfig.io/canary": "false"}})
	r.m.mu.Unlock()
	any := "target:\n  context: ANY\n"
	r.f.putConfig(policyDoc(30*time.Second, 100, any))
	r.tick()
	r.tick()
	r.f.putConfig(policyDoc(30*time.Second, 200, any))
	r.tick()
	r.advance(31 * time.Second)
	r.tick()
	st, ph, msg := r.phase()
	if st == "Canary" || ph == "Promoted" || !strings.Contains(msg, "sidecars") {
		t.Errorf("want the phase held, naming the sidecars no canary represents: %s %s %s", st, ph, msg)
	}
	if s := r.sees("false"); s != "100" {
		t.Errorf("the other proxies got the change: %q", s)
	}
}

// Scenario 5: "transitions are not atomic". Every write of every
// transition, one at a time, leaves each labelled proxy exactly one
// version of each item; a write the API server refuses as permanent (a
// quota, a policy engine) during a phase is retried until the phase is
// whole, and the half-applied state is reported meanwhile.
func TestTransitionsAreAtomic(t *testing.T) {
	r := newRig(t)
	r.m.gateway("gw-c", "true")
	r.m.gateway("gw-s", "false")
	// Watch every write as the API server makes it.
	w, err := r.f.istio.Tracker().Watch(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}, testNS)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]*clientnetworking.EnvoyFilter{}
	var violations []string
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			ef := ev.Object.(*clientnetworking.EnvoyFilter)
			mu.Lock()
			if ev.Type == watch.Deleted {
				delete(live, ef.Name)
			} else {
				live[ef.Name] = ef
			}
			var list []*clientnetworking.EnvoyFilter
			for _, l := range live {
				list = append(list, l)
			}
			for _, v := range []string{"true", "false"} {
				got := versionsOf(list, map[string]string{"istio": "ingressgateway", "globalconfig.io/canary": v})
				for _, item := range []string{"gzip", "headers"} {
					if n := len(got[item]); n != 1 && len(live) > 1 {
						violations = append(violations, fmt.Sprintf("after %s %s: a proxy labelled %s has %d versions of %s", ev.Type, ef.Name, v, n, item))
					}
				}
			}
			mu.Unlock()
		}
	}()
	two := func(n int) string { return policyDoc(30*time.Second, n, "headers:\n  disableXEnvoyHeaders: true\n") }
	r.f.putConfig(two(100))
	r.tick()
	mu.Lock()
	violations = nil // the first set goes out as it is
	mu.Unlock()
	// Starting: the API server refuses one write as permanent.
	refused := 1
	r.f.istio.PrependReactor("patch", "envoyfilters", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refused > 0 && strings.HasPrefix(a.(k8stesting.PatchAction).GetName(), "globalconfig-gzip") {
			refused--
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.istio.io", Resource: "envoyfilters"}, a.(k8stesting.PatchAction).GetName(), errors.New("denied by policy engine"))
		}
		return false, nil, nil
	})
	r.f.putConfig(two(200))
	// The worker retries what failed, as it would in a term.
	ctx, cancel := context.WithCancel(r.f.ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.f.ctrl.Run(ctx)
	}()
	complete := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r.sees("true") == "200" && r.sees("false") == "100" {
			complete = true
			break
		}
	}
	cancel()
	<-stopped
	if !complete {
		t.Errorf("the refused write was not retried: canaries see %q, the others %q", r.sees("true"), r.sees("false"))
	}
	r.f.deliver()
	r.tick()
	r.advance(31 * time.Second)
	r.tick() // promoted
	r.tick()
	if s := r.sees("false"); s != "200" {
		t.Errorf("not promoted: the others see %q", s)
	}
	w.Stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Errorf("%d intermediate states gave a proxy neither version of an item or both, e.g. %s", len(violations), violations[0])
	}
}

// Scenario 6: "the rollback target is not checked". A hand-edited last
// good copy is not the set the phase started from: a roll back restores
// the set the proxies had, not the copy. A last good copy that can't be
// written is an error the status and an Event say, not a log line.
func TestRollbackTargetIsChecked(t *testing.T) {
	t.Run("a hand-edited copy", func(t *testing.T) {
		r := newRig(t)
		cn := r.m.gateway("gw-c", "true")
		r.m.gateway("gw-s", "false")
		r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
		cm, err := r.f.kube.CoreV1().ConfigMaps(testNS).Get(r.f.ctx, LastGoodName(testName), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[document.DataKey] = policyDoc(30*time.Second, 999, "")
		if _, err := r.f.kube.CoreV1().ConfigMaps(testNS).Update(r.f.ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r.restart()
		r.m.change(func() { cn.answer = "LDS: cache_time_ms must not be set" })
		r.tick()
		r.tick()
		if _, ph, msg := r.phase(); ph != "RolledBack" {
			t.Errorf("want rolled back: %s %s", ph, msg)
		}
		if s, c := r.sees("false"), r.sees("true"); s != "100" || c != "100" {
			t.Errorf("restored: the stable proxies see %q, the canaries %q; want the set before the change (100)", s, c)
		}
	})
	t.Run("a copy that can't be written", func(t *testing.T) {
		r := newRig(t)
		r.m.gateway("gw-c", "true")
		r.m.gateway("gw-s", "false")
		refused := 0
		r.f.kube.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if v := a.GetVerb(); (v == "patch" || v == "update" || v == "create") && nameOf(a) == LastGoodName(testName) {
				refused++
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, LastGoodName(testName), errors.New("quota exceeded"))
			}
			return false, nil, nil
		})
		r.f.putConfig(policyDoc(30*time.Second, 100, ""))
		_ = r.f.sync()
		_ = r.f.sync()
		events := strings.Join(r.f.events(), "\n")
		raw, _ := json.Marshal(r.raw())
		if refused == 0 || !strings.Contains(events, "LastGoodNotStored") || !strings.Contains(string(raw), "quota exceeded") {
			t.Errorf("a failed write of the last good copy (%d refused) is not reported: events %q, status %s", refused, events, raw)
		}
	})
}

func nameOf(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.PatchAction:
		return a.GetName()
	case k8stesting.UpdateAction:
		return a.GetObject().(metav1.Object).GetName()
	case k8stesting.CreateAction:
		return a.GetObject().(metav1.Object).GetName()
	}
	return ""
}

// Scenario 7: "the label pre-check fails open when istiod is slow". An
// istiod that takes 3 s to say which proxies carry the label (one
// doesn't), or that fails to say: the phase does not start.
func TestSlowIstiodDoesNotStartThePhase(t *testing.T) {
	for name, set := range map[string]func(m *mesh){
		"slow":    func(m *mesh) { m.adszDelay = 3 * time.Second },
		"failing": func(m *mesh) { m.adszFails = true },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.m.gateway("gw-c", "true")
			r.m.gateway("gw-s", "false")
			r.m.gateway("gw-x", "") // carries no canary label
			r.m.proxies[2].connected = map[string]string{"istio": "ingressgateway"}
			r.m.proxies[2].labels = map[string]string{"istio": "ingressgateway"}
			r.f.putConfig(policyDoc(30*time.Second, 100, ""))
			r.tick()
			r.m.mu.Lock()
			set(r.m)
			r.m.mu.Unlock()
			r.f.putConfig(policyDoc(30*time.Second, 200, ""))
			r.sync()
			r.f.deliver()
			st, ph, msg := r.phase()
			if st == "Canary" || ph == "Canary" {
				t.Errorf("the phase started without knowing which proxies carry the label: %s %s %s", st, ph, msg)
			}
			if c := r.sees("true"); c == "200" {
				t.Errorf("the canaries got the change")
			}
		})
	}
}

// Scenario 8: "a phase can last forever". Neither a new leadership term
// nor an edit that changes no EnvoyFilter restarts the bake time; and a
// phase that can't end is rolled back at its timeout.
func TestPhaseIsBounded(t *testing.T) {
	t.Run("restarts and comment edits don't restart the bake", func(t *testing.T) {
		r := newRig(t)
		cn := r.m.gateway("gw-c", "true")
		r.m.gateway("gw-s", "false")
		docB := policyDoc(30*time.Second, 200, "")
		r.start(policyDoc(30*time.Second, 100, ""), docB)
		_ = cn
		for i := range 2 {
			r.advance(12 * time.Second)
			r.restart()
			r.f.putConfig(fmt.Sprintf("# edit %d\n", i) + docB)
			r.tick()
		}
		r.advance(7 * time.Second) // 31 s since the canaries got the change
		r.tick()
		if _, ph, msg := r.phase(); ph != "Promoted" {
			t.Errorf("31 s after the canaries got it, through 2 restarts and 2 comment edits: %s %s", ph, msg)
		}
	})
	t.Run("a phase that can't end is rolled back at its timeout", func(t *testing.T) {
		r := newRig(t)
		r.m.gateway("gw-c", "true")
		r.m.gateway("gw-s", "false")
		docB := policyDoc(30*time.Second, 200, "")
		r.start(policyDoc(30*time.Second, 100, ""), docB)
		r.restart(r.m.srv.URL, "http://127.0.0.1:1") // an istiod that never answers: no promotion
		for i := range 8 {
			r.advance(10 * time.Second)
			r.f.putConfig(fmt.Sprintf("# edit %d\n", i) + docB)
			r.tick()
		}
		r.advance(11 * time.Second)
		r.tick()
		if _, ph, msg := r.phase(); ph != "RolledBack" || !strings.Contains(msg, "phase timeout") {
			t.Errorf("100 s into a phase of a 30 s bake: %s %s", ph, msg)
		}
		if s := r.sees("false"); s != "100" {
			t.Errorf("the stable proxies see %q", s)
		}
	})
}

// Scenario 9: "target.selector on the canary label passes validation,
// then makes every sync fail with no status and no Event". It is refused:
// the document is Invalid, with the path, and the proxies keep their set.
func TestTargetSelectorOnTheCanaryLabel(t *testing.T) {
	r := newRig(t)
	r.m.gateway("gw-c", "true")
	r.f.putConfig(policyDoc(30*time.Second, 100, ""))
	r.tick()
	r.f.putConfig(policyDoc(30*time.Second, 200, "target:\n  selector: {globalconfig.io/canary: \"true\"}\n"))
	if err := r.f.sync(); err != nil {
		t.Fatalf("the sync failed: %v", err)
	}
	s := r.f.status()
	if s.State != status.Invalid || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Path, "target.selector") {
		t.Errorf("status %s, errors %+v", s.State, s.Errors)
	}
	if events := strings.Join(r.f.events(), "\n"); !strings.Contains(events, "InvalidConfig") {
		t.Errorf("no InvalidConfig Event: %q", events)
	}
}

// Scenario 10: "no fencing". A replica that lost its lease, its sync still
// in flight, can't overwrite what the new leader wrote: its EnvoyFilter,
// status and last good writes carry the resourceVersions it read, and are
// refused.
func TestDeposedLeaderCannotOverwrite(t *testing.T) {
	r := newRig(t)
	// The API server refuses an apply whose resourceVersion is not the
	// object's, as a real one does.
	r.f.istio.PrependReactor("patch", "envoyfilters", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		p := a.(k8stesting.PatchAction)
		if json.Unmarshal(p.GetPatch(), &body) != nil || body.Metadata.ResourceVersion == "" {
			return false, nil, nil
		}
		old, err := r.f.istio.Tracker().Get(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}, p.GetNamespace(), p.GetName())
		if err == nil && old.(*clientnetworking.EnvoyFilter).ResourceVersion != body.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "networking.istio.io", Resource: "envoyfilters"}, p.GetName(), errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	cn := r.m.gateway("gw-c", "true")
	r.m.gateway("gw-s", "false")
	r.start(policyDoc(30*time.Second, 100, ""), policyDoc(30*time.Second, 200, ""))
	r.tick() // the canary ACKed
	deposed := r.f.ctrl
	// A new leader takes over, and the canary NACKs: rolled back.
	r.restart()
	r.m.change(func() { cn.answer = "LDS: cache_time_ms must not be set" })
	r.tick()
	r.tick()
	if _, ph, msg := r.phase(); ph != "RolledBack" {
		t.Fatalf("the new leader did not roll back: %s %s", ph, msg)
	}
	before := r.raw()
	// The deposed leader's sync, after the bake time, on what it knew: the
	// canary's ACK. It would promote.
	r.advance(31 * time.Second)
	err := deposed.Sync(r.f.ctx)
	after := r.raw()
	if fmt.Sprint(after["state"]) != fmt.Sprint(before["state"]) || fmt.Sprint(after["canary"]) != fmt.Sprint(before["canary"]) {
		t.Errorf("the deposed leader overwrote the status (its sync: %v): %v, was %v", err, after["state"], before["state"])
	}
	if s := r.sees("false"); s != "100" {
		t.Errorf("the deposed leader promoted the change to the stable proxies (%q); its sync: %v", s, err)
	}
	if lg, _ := r.f.kube.CoreV1().ConfigMaps(testNS).Get(r.f.ctx, LastGoodName(testName), metav1.GetOptions{}); lg == nil || strings.Contains(lg.Data[document.DataKey], "200") {
		t.Error("the deposed leader stored the change as the last good document")
	}
	if err == nil {
		t.Error("the deposed leader's sync went through")
	}
}
