package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/test/harness"
)

// benchBlameRuns bounds the blame benchmark: explain runs per gateway.
const benchBlameRuns = 3

// BenchmarkBlame measures `globalconfig explain` on a gateway that NACKs:
// the full example document live, plus three users' EnvoyFilters, two
// that Envoy loads (a buffer filter first in the chain, a MERGE of the
// connection manager's server_name) and the one that inserts a refused
// health check after globalconfig's local_ratelimit filter. Each run is
// the whole command in-process, with the gateway's own Envoy release:
// time to the answer, and how many times Envoy ran.
func BenchmarkBlame(b *testing.B) {
	ctx := setup(b)
	objs := rendered(b, exampleDocument(b))
	buf, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.buffer", &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(1 << 20)})
	if err != nil {
		b.Fatal(err)
	}
	name, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{ServerName: "bench-gateway"})
	if err != nil {
		b.Fatal(err)
	}
	users := []*envoyfilter.Object{handWritten(b, "user-bench-buffer", "", buf), handWritten(b, "user-bench-server-name", "", name), userAnchoredHealthCheck(b)}
	b.Cleanup(func() {
		for _, u := range users {
			deleteObject(context.Background(), b, u)
		}
		applyAll(context.Background(), b, nil)
	})
	mustACK(ctx, b, objs)
	for _, u := range users {
		if err := cluster.Apply(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
	mustNACK(ctx, b, objs)

	type row struct {
		g             *gw
		times         []time.Duration
		filters, runs int
		fault         string
	}
	var rows []row
	b.ResetTimer()
	for _, g := range gateways {
		r := row{g: g}
		for range benchBlameRuns {
			start := time.Now()
			code, js, errs := explainRun(g, g.Binary.Path, "-o", "json")
			r.times = append(r.times, time.Since(start))
			var rep struct {
				Filters int
				Runs    int `json:"envoyRuns"`
				Faults  []struct {
					Filters []struct{ Name string }
				}
			}
			if err := json.Unmarshal([]byte(js), &rep); err != nil || code != cli.ExitBlamedOurs || len(rep.Faults) != 1 || len(rep.Faults[0].Filters) != 2 {
				b.Fatalf("Envoy %s: exit %d, %v, want the combination\n%s\n%s", g.Binary.Version, code, err, js, errs)
			}
			r.filters, r.runs = rep.Filters, rep.Runs
			r.fault = rep.Faults[0].Filters[0].Name + " + " + rep.Faults[0].Filters[1].Name
		}
		rows = append(rows, r)
	}
	b.StopTimer()
	b.ReportMetric(harness.Ms(harness.Percentile(rows[0].times, 50)), "blame-p50-ms")
	b.ReportMetric(float64(rows[0].runs), "envoy-runs")
	table := "| gateway | EnvoyFilters reaching it | Envoy runs | time to the answer, p50 | max | blamed |\n|---|---|---|---|---|---|\n"
	for _, r := range rows {
		table += fmt.Sprintf("| Envoy %s | %d | %d | %.0f ms | %.0f ms | %s |\n", r.g.Binary.Version, r.filters, r.runs,
			harness.Ms(harness.Percentile(r.times, 50)), harness.Ms(slices.Max(r.times)), r.fault)
	}
	fmt.Println()
	fmt.Print(table)
	out := os.Getenv("GLOBALCONFIG_BENCH_REPORT")
	if out == "" {
		return
	}
	body := "## The blame of a NACK (`explain`)\n\nBenchmarkBlame (test/proxy). A gateway with the full example live and three users' EnvoyFilters, " +
		"one of which inserts a health check Envoy refuses after globalconfig's local_ratelimit filter, so every push is NACKed. " +
		fmt.Sprintf("Each of %d runs per gateway is the whole `globalconfig explain -o json` in-process with the gateway's own Envoy release: ", benchBlameRuns) +
		"the EnvoyFilters, Gateways and Services from the API server, istiod's adsz, syncz and config dump, the proxy's config loaded, the base " +
		"(every EnvoyFilter's patches taken off) loaded, and the delta debugging over the EnvoyFilters, each step one Envoy validate run of the " +
		"gateway's whole config. Envoy runs are what one blame needs (the search is deterministic).\n\n- " + harness.RunStamp() + "\n\n" + table
	if err := harness.WriteReportSection(out, harness.BenchReportTitle, "blame", body); err != nil {
		b.Fatal(err)
	}
}
