package canary_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// A refused Direct change judged with the blame of the refusal: nothing
// is decided while the blame of the refused set is being found; a blame
// that names only others' EnvoyFilters keeps the change (rolling it back
// would not help); one that names ours, alone or with a user's, rolls it
// back and names the other half; one that failed or named nothing rolls
// back as without a blame (fail closed), saying why.
func TestDirectWithBlame(t *testing.T) {
	stable := set(t, "gzip: {}\n")
	cand := set(t, "gzip:\n  minContentLength: 2048\n")
	refusedIn := canary.Input{Document: "doc1", Candidate: cand, Stable: &stable, Now: t0, Tracking: true, Verdict: verdict(cand.Hash, 0, 0, 2)}
	const (
		user     = "istio-system/user-anchored-healthcheck (not managed by globalconfig)"
		ours     = "globalconfig's localRateLimit (istio-system/globalconfig-local-rate-limit)"
		combined = "the combination of " + user + " and " + ours
	)
	for _, tc := range []struct {
		name  string
		blame *canary.Blame
		// want: "" (delivered, undecided), RolledBack or Kept
		want canary.Phase
		// says are parts of the record's message (or of Waiting)
		says []string
	}{
		{name: "the blame of the refused set is pending", blame: &canary.Blame{Set: cand.Hash, Pending: true},
			says: []string{"finding which EnvoyFilter the proxies refuse"}},
		{name: "only a blame of another set is known", blame: &canary.Blame{Set: stable.Hash, Culprits: user},
			says: []string{"finding which EnvoyFilter the proxies refuse"}},
		{name: "a user's EnvoyFilter alone", blame: &canary.Blame{Set: cand.Hash, Culprits: user}, want: canary.Kept,
			says: []string{"proxies refuse " + user + " on its own: rolling back globalconfig's change would not help", "so the document is kept until it changes",
				"(proxy gw-0.istio-system rejected the change: LDS: "}},
		{name: "ours together with a user's", blame: &canary.Blame{Set: cand.Hash, Ours: true, Culprits: combined, Others: user}, want: canary.RolledBack,
			says: []string{"proxy gw-0.istio-system rejected the change: LDS: ", "; the proxies refuse " + combined + ": globalconfig's change fails together with " + user + " (the other half of the fault)"}},
		{name: "ours alone", blame: &canary.Blame{Set: cand.Hash, Ours: true, Culprits: ours}, want: canary.RolledBack,
			says: []string{"; the proxies refuse " + ours}},
		{name: "the blame failed", blame: &canary.Blame{Set: cand.Hash, Err: "the blame did not finish within 1m0s"}, want: canary.RolledBack,
			says: []string{"the blame could not name the EnvoyFilter the proxies refuse (the blame did not finish within 1m0s), so the change is rolled back"}},
		{name: "the blame failed after naming a user's filter", blame: &canary.Blame{Set: cand.Hash, Culprits: user, Err: "envoy crashed"}, want: canary.RolledBack,
			says: []string{"(envoy crashed), so the change is rolled back"}},
		{name: "the blame named nothing", blame: &canary.Blame{Set: cand.Hash, NotBlamed: "Envoy 1.40.0 accepts the config istiod builds now"}, want: canary.RolledBack,
			says: []string{"the blame named no EnvoyFilter (Envoy 1.40.0 accepts the config istiod builds now), so the change is rolled back"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := step(t, with(refusedIn, func(in *canary.Input) { in.Blame = tc.blame }))
			text := out.Waiting
			switch tc.want {
			case "":
				if out.Record != nil || out.Promote || out.Hold || out.Direct != "" || render.SetHash(out.Deliver) != cand.Hash {
					t.Fatalf("want the change delivered, undecided: %+v", out)
				}
			case canary.RolledBack:
				r := out.Record
				if r == nil || r.Phase != canary.RolledBack || out.Promote || out.Direct != canary.RolledBack || render.SetHash(out.Deliver) != stable.Hash {
					t.Fatalf("want a roll back: %+v %+v", out, r)
				}
				text = r.Message
			case canary.Kept:
				r := out.Record
				if r == nil || !r.Direct() || r.Phase != canary.Kept || !out.Promote || out.Direct != canary.Kept || render.SetHash(out.Deliver) != cand.Hash ||
					r.From != stable.Hash || r.To != cand.Hash || len(r.NACKs) != 2 || r.Ended == nil {
					t.Fatalf("want the change kept: %+v %+v", out, r)
				}
				text = r.Message
				// Kept for good: the next step keeps delivering it.
				again := step(t, with(refusedIn, func(in *canary.Input) { in.Record, in.Blame = r, nil }))
				if again.Record != r || !again.Promote || render.SetHash(again.Deliver) != cand.Hash {
					t.Errorf("the next step after a kept change: %+v", again)
				}
			}
			for _, want := range tc.says {
				if !strings.Contains(text, want) {
					t.Errorf("%q lacks %q", text, want)
				}
			}
		})
	}
	// The blame matters only for a refused change: a taken one is
	// promoted whatever a pending blame (of an earlier NACK) says.
	taken := step(t, with(refusedIn, func(in *canary.Input) {
		in.Verdict, in.Blame = verdict(cand.Hash, 2, 0, 0), &canary.Blame{Set: cand.Hash, Pending: true}
	}))
	if !taken.Promote || taken.Direct != canary.Promoted || taken.Waiting != "" {
		t.Errorf("a taken change with a pending blame: %+v", taken)
	}
	// Without a blame the refused change is rolled back as the answers say.
	plain := step(t, refusedIn)
	if plain.Direct != canary.RolledBack || strings.Contains(plain.Record.Message, "blame") {
		t.Errorf("without a blame: %+v", plain)
	}
}
