package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/fleet"
	"github.com/globalconfig/globalconfig/test/harness"
)

// canaryPolicy is the rollout section of the fleet's canary phases.
func canaryPolicy(bake time.Duration) string {
	return fmt.Sprintf("rollout:\n  strategy: Canary\n  bakeTime: %s\n", bake)
}

func canaries(p *fleet.Proxy) bool { return p.Kind == fleet.Gateway && p.Canary }
func stable(p *fleet.Proxy) bool   { return p.Kind == fleet.Gateway && !p.Canary }

// phaseResult is one canary phase over a fleet, timed from the edit.
type phaseResult struct {
	// canaryLast is when the last canary ACKed the change; stableFirst
	// and stableLast when the first and the last other gateway did (0
	// after a roll back: none did).
	canaryLast, stableFirst, stableLast time.Duration
	// ended is when the status first showed the phase ended.
	ended  time.Duration
	record *canary.Record
}

// runPhase edits the document to doc, which carries marker, and follows
// its canary phase to its end: promoted (and every gateway took it), or,
// with refuse, NACKed by every canary and rolled back (and no other
// gateway ever took it).
func runPhase(ctx context.Context, f *fleet.Fleet, doc, marker string, refuse bool, bound time.Duration) (phaseResult, error) {
	var res phaseResult
	f.Watch(marker, fleet.Gateways)
	defer f.Unwatch(marker)
	if refuse {
		defer f.Refuse(marker, canaries)()
	}
	want := canary.Promoted
	if refuse {
		want = canary.RolledBack
	}
	hash := decide.DocumentHash(map[string]string{document.DataKey: doc})
	start := time.Now()
	if err := cluster.PutConfig(ctx, doc); err != nil {
		return res, err
	}
	var last *status.Status
	if !harness.Eventually(ctx, bound, func() bool {
		st, err := cluster.Status(ctx)
		if err == nil {
			last = st
		}
		return err == nil && st.Canary != nil && st.Canary.Of(hash) && st.Canary.Phase == want
	}) {
		return res, fmt.Errorf("the phase did not end %s within %s; last record %+v", want, bound, last.Canary)
	}
	res.ended, res.record = time.Since(start), last.Canary
	gateways := 0
	for _, p := range f.Proxies {
		if fleet.Gateways(p) {
			gateways++
		}
	}
	if !refuse && !harness.Eventually(ctx, bound, func() bool { return len(f.When(marker)) == gateways }) {
		return res, fmt.Errorf("promoted, but %d of %d gateways took the change", len(f.When(marker)), gateways)
	}
	if refuse {
		time.Sleep(2 * time.Second) // istiod's debounce, and a push that would follow
	}
	for p, at := range f.When(marker) {
		d := at.Sub(start)
		switch {
		case canaries(p):
			res.canaryLast = max(res.canaryLast, d)
		case res.stableFirst == 0 || d < res.stableFirst:
			res.stableFirst = d
			fallthrough
		default:
			res.stableLast = max(res.stableLast, d)
		}
	}
	return res, nil
}

// A canary phase over a fleet: the first set goes everywhere; a good
// change reaches the canaries first and every other gateway only after
// the bake time, and is promoted with every canary judged; a change the
// canaries refuse is rolled back, and no other gateway ever takes it.
func TestFleetCanary(t *testing.T) {
	ctx := setup(t)
	gws := size("GLOBALCONFIG_FLEET_GATEWAYS", 60)
	f := startFleet(ctx, t, gws, 0, 0.05)
	n := 0
	for _, p := range f.Proxies {
		if canaries(p) {
			n++
		}
	}
	const bake = 3 * time.Second
	policy := canaryPolicy(bake)
	runController(ctx, t, f, policy+exampleWith(t, "edge-canary-1"), "edge-canary-1")

	res, err := runPhase(ctx, f, policy+exampleWith(t, "edge-canary-2"), "edge-canary-2", false, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted: canaries took it by %s, the other gateways from %s to %s, the phase ended at %s",
		res.canaryLast, res.stableFirst, res.stableLast, res.ended)
	if res.stableFirst < res.canaryLast+bake/2 {
		t.Errorf("a gateway that is no canary took the change at %s, the last canary at %s: before the bake time (%s)", res.stableFirst, res.canaryLast, bake)
	}
	judged := 0
	for _, a := range res.record.Canaries {
		if a.ACKed() {
			judged++
		}
	}
	if len(res.record.Canaries) != n || judged != n {
		t.Errorf("the record judged %d canaries, %d of them ACKed with the canary copy; the fleet has %d", len(res.record.Canaries), judged, n)
	}

	res, err = runPhase(ctx, f, policy+exampleWith(t, "edge-canary-3"), "edge-canary-3", true, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rolled back at %s: %s", res.ended, res.record.Message)
	if res.stableFirst != 0 {
		t.Errorf("a gateway that is no canary took the refused change at %s", res.stableFirst)
	}
	if !slices.ContainsFunc(res.record.Canaries, func(a canary.Answer) bool { return a.State == canary.StateNACKed }) {
		t.Errorf("the record of the roll back shows no NACKed canary: %+v", res.record.Canaries)
	}
	refused := 0
	for _, p := range f.Proxies {
		if canaries(p) && p.NACKs() > 0 {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no canary refused the change: the test proved nothing")
	}
	if err := f.Err(); err != nil {
		t.Error(err)
	}
}
