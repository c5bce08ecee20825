package proxy

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// BenchmarkAdmissionControl measures what loadShedding adds to a request
// at the gateway with a healthy backend (p50, p99, against the same
// requests without the item): admission control alone, then with adaptive
// concurrency. The sets are measured in turn, twice each, so that a drift
// of the shared machine falls on all of them.
func BenchmarkAdmissionControl(b *testing.B) {
	ctx := setup(b)
	const (
		n      = 500
		rounds = 3
		// warm are the requests sent after each change and not timed: the
		// first ones after a listener update meet the draining one.
		warm = 50
	)
	measure := func(into *[]time.Duration) { *into = append(*into, getTimes(ctx, b, "/echo", warm, n)...) }
	sets := []struct {
		name, doc string
		took      []time.Duration
	}{
		{name: "without loadShedding"},
		{name: "admissionControl (defaults)", doc: "loadShedding:\n  admissionControl: {}\n"},
		{name: "admissionControl and adaptiveConcurrency (defaults)", doc: "loadShedding:\n  admissionControl: {}\n  adaptiveConcurrency: {}\n"},
	}
	for range rounds {
		for i := range sets {
			mustACK(ctx, b, rendered(b, sets[i].doc))
			measure(&sets[i].took)
		}
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	for i := range sets {
		sort.Slice(sets[i].took, func(a, c int) bool { return sets[i].took[a] < sets[i].took[c] })
	}
	base := sets[0].took
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	b.ReportMetric(float64(q(sets[1].took, 0.5)-q(base, 0.5))/1e6, "added-p50-ms")
	b.ReportMetric(float64(q(sets[1].took, 0.99)-q(base, 0.99))/1e6, "added-p99-ms")
	b.ReportMetric(float64(q(sets[2].took, 0.5)-q(base, 0.5))/1e6, "both-added-p50-ms")
	b.ReportMetric(float64(q(sets[2].took, 0.99)-q(base, 0.99))/1e6, "both-added-p99-ms")
	table := "| | p50 | p99 | added p50 | added p99 |\n|---|---|---|---|---|\n"
	for i, s := range sets {
		added50, added99 := "—", "—"
		if i > 0 {
			added50, added99 = round(q(s.took, 0.5)-q(base, 0.5)).String(), round(q(s.took, 0.99)-q(base, 0.99)).String()
		}
		table += fmt.Sprintf("| %s | %s | %s | %s | %s |\n", s.name, round(q(s.took, 0.5)), round(q(s.took, 0.99)), added50, added99)
	}
	writeEnvoyReport(b, "loadshedding", fmt.Sprintf(`## What load shedding adds to a request

BenchmarkAdmissionControl, %s. Envoy %s gateway, a healthy backend on loopback (nothing is shed), %d sequential GETs of /echo per set and round (after %d untimed ones), one connection a request, %d rounds with the sets in turn.

%s`, harness.RunStamp(), newest.Binary.Version, n, warm, rounds, table))
}
