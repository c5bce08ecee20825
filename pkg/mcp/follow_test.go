package mcp

import (
	"context"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

const (
	followA = "rollout:\n  strategy: Canary\n  bakeTime: 30s\ngzip:\n  minContentLength: 100\n"
	followB = "rollout:\n  strategy: Canary\n  bakeTime: 30s\ngzip:\n  minContentLength: 200\n"
)

func objects(t *testing.T, doc string) []*envoyfilter.Object {
	t.Helper()
	res := render.New().FromConfigMap(map[string]string{document.DataKey: doc})
	if !res.Valid() {
		t.Fatal(res.Problems)
	}
	return res.Objects
}

// follower is a publisher of followB whose elected controller's record is
// rec and whose last good copy is lastGood.
func follower(t *testing.T, rec *canary.Record, lastGood string) *Publisher {
	p := publisherWith(t, followB, lastGood)
	p.Rollout = func(context.Context) (*canary.Record, map[string]string, error) {
		if lastGood == "" {
			return rec, nil, nil
		}
		return rec, map[string]string{document.DataKey: lastGood}, nil
	}
	return p
}

func recordOf(t *testing.T, phase canary.Phase, started time.Time) *canary.Record {
	return &canary.Record{Strategy: canary.Canary, Phase: phase, Document: decide.DocumentHash(map[string]string{document.DataKey: followB}),
		From: render.SetHash(objects(t, followA)), To: render.SetHash(objects(t, followB)), Items: []string{"gzip"},
		Label: canary.DefaultLabel, Needed: "100%", BakeTime: "30s", Started: started.UTC()}
}

func servedVersion(p *Publisher) string {
	v, _, ok := p.Server.Snapshot()
	if !ok {
		return ""
	}
	return v
}

// Scenario 1 of issue 33, at an MCP follower: "no stable set means
// promote". A follower whose last good copy is missing, or no longer
// renders, never serves the candidate to its istiod while the elected
// controller's record says the change was rolled back or is still on the
// canaries: it holds what it serves.
func TestFollowerWithoutStableSetNeverServesTheCandidate(t *testing.T) {
	cand := objects(t, followB)
	for name, c := range map[string]struct {
		phase    canary.Phase
		lastGood string
	}{
		"rolled back, no last good copy":             {canary.RolledBack, ""},
		"rolled back, a copy that no longer renders": {canary.RolledBack, "gizp: {}\n"},
		"in the phase, no last good copy":            {canary.InCanary, ""},
	} {
		t.Run(name, func(t *testing.T) {
			p := follower(t, recordOf(t, c.phase, time.Now()), c.lastGood)
			p.Sync()
			got := servedVersion(p)
			for _, bad := range []string{render.SetHash(cand), pairedHash(t, cand, cand)} {
				if got == bad {
					t.Fatalf("the follower serves the candidate (%s) while the record says %s", got, c.phase)
				}
			}
		})
	}
}

func pairedHash(t *testing.T, stable, cand []*envoyfilter.Object) string {
	objs, err := canary.Split(stable, cand, canary.DefaultLabel)
	if err != nil {
		t.Fatal(err)
	}
	return render.SetHash(objs)
}

// Scenario 10 of issue 33, at an MCP follower: "no fencing". An in-canary
// record far older than its phase could last (its bake time, its timeout
// and a grace) was left by a controller that no longer decides: the
// follower stops serving the canary set and serves the stable one.
func TestFollowerDistrustsAStaleCanaryRecord(t *testing.T) {
	a, b := objects(t, followA), objects(t, followB)
	fresh := follower(t, recordOf(t, canary.InCanary, time.Now()), followA)
	fresh.Sync()
	if got, want := servedVersion(fresh), pairedHash(t, a, b); got != want {
		t.Fatalf("a fresh in-canary record: serves %s, want the canary set %s", got, want)
	}
	stale := follower(t, recordOf(t, canary.InCanary, time.Now().Add(-2*time.Hour)), followA)
	stale.Sync()
	if got, want := servedVersion(stale), pairedHash(t, a, a); got != want {
		t.Errorf("a record 2 h old of a 30 s bake: serves %s, want the stable set %s (the canary set is %s)", got, want, pairedHash(t, a, b))
	}
}
