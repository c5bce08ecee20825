package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The blame of a NACK reads in `globalconfig status`: for each kind of
// proxy, what it found, each fault with Envoy's words, and what judged.
func TestStatusTextBlame(t *testing.T) {
	st := testStatus(testRollout())
	st.State, st.Errors = status.NACKed, []status.Problem{}
	user := "istio-system/user-anchored-healthcheck (not managed by globalconfig)"
	fault := "the combination of " + user + " and globalconfig's localRateLimit (istio-system/globalconfig-local-rate-limit)"
	st.Blame = []status.Blame{
		{Set: "0123456789abcdef", Proxy: "gw-a.istio-system", Kind: "gateway", Outcome: status.BlameBlamed,
			Message: "gateway gw-a.istio-system refuses " + fault + ": globalconfig's change fails together with " + user + " (the other half of the fault); fix either",
			Faults: []status.Fault{{Fault: fault, Message: "cache_time_ms must not be set when path_through_mode is disabled",
				Culprits: []status.Culprit{{Namespace: "istio-system", Name: "user-anchored-healthcheck"}, {Namespace: "istio-system", Name: "globalconfig-local-rate-limit", Managed: true, Item: "localRateLimit"}}}},
			Envoy: "1.40.0", Runs: 5, Elapsed: "612ms"},
		{Set: "0123456789abcdef", Proxy: "web-1.shop", Kind: "sidecar", Outcome: status.BlameFailed, Error: "the blame did not finish within 1m0s",
			Message: "could not name the EnvoyFilter sidecar web-1.shop refuses: the blame did not finish within 1m0s"},
	}
	c, _ := statusCluster(t, st)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	t.Logf("$ globalconfig status\n%s", out)
	for _, want := range []string{
		"blame of the NACK (gateway gw-a.istio-system, set 0123456789abcdef): Blamed: gateway gw-a.istio-system refuses " + fault + ": globalconfig's change fails together with " + user + " (the other half of the fault); fix either\n",
		"  " + fault + ": Envoy: cache_time_ms must not be set when path_through_mode is disabled\n",
		"  judged by Envoy 1.40.0: 5 runs in 612ms\n",
		"blame of the NACK (sidecar web-1.shop, set 0123456789abcdef): Failed: could not name the EnvoyFilter sidecar web-1.shop refuses: the blame did not finish within 1m0s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

// A Direct change kept on the blame (never rolled back) does not read as
// one whose restored set was refused.
func TestStatusTextKeptOnTheBlame(t *testing.T) {
	st := testStatus(nil)
	st.State, st.Errors = status.NACKed, []status.Problem{}
	ended := time.Date(2026, 3, 1, 10, 0, 3, 0, time.UTC)
	st.Canary = &canary.Record{Strategy: canary.Direct, Phase: canary.Kept, Document: "5c7c56257774ce87", From: "484b302941a65608", To: "8394baeae7844241",
		Items: []string{"gzip"}, RollbackOn: canary.AllNACK, Started: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), Ended: &ended,
		Message: "proxies refuse istio-system/user-broken-healthcheck (not managed by globalconfig) on its own: rolling back globalconfig's change would not help"}
	c, _ := statusCluster(t, st)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(out, "  never rolled back: the blame named only EnvoyFilters globalconfig does not manage; the document is kept until it changes\n") ||
		strings.Contains(out, "restored last good set was refused") {
		t.Errorf("stdout:\n%s", out)
	}
}
