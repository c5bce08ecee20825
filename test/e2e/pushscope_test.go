package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// The push-scope fleet: gateways in their own namespace, as Istio
// recommends, and sidecars of an application namespace. Bounded: 20 of
// each, pushScopeEdits edits per scope.
const (
	scopeGateways   = 20
	scopeSidecars   = 20
	pushScopeEdits  = 5
	gatewayNS       = "istio-ingress"
	scopeAppNS      = "bench-apps"
	quietPeriod     = 1500 * time.Millisecond
	quietPeriodMax  = 20 * time.Second
	scopeConnectMax = 90 * time.Second
)

// fleet is the connected clients of the push-scope benchmark.
type fleet struct{ gateways, sidecars []*xds.Client }

func (f fleet) all() []*xds.Client { return slices.Concat(f.gateways, f.sidecars) }

func pushes(cs []*xds.Client) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = c.Pushes()
	}
	return out
}

// quiet waits until no client of cs has received a response for
// quietPeriod (istiod debounces for 100 ms, then pushes), bounded by
// quietPeriodMax.
func quiet(ctx context.Context, b *testing.B, cs []*xds.Client) {
	b.Helper()
	deadline := time.Now().Add(quietPeriodMax)
	last, since := pushes(cs), time.Now()
	for time.Since(since) < quietPeriod {
		if time.Now().After(deadline) {
			b.Fatalf("istiod kept pushing for %v", quietPeriodMax)
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if now := pushes(cs); !slices.Equal(now, last) {
			last, since = now, time.Now()
		}
	}
}

func connectFleet(ctx context.Context, b *testing.B) fleet {
	b.Helper()
	_, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scopeAppNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	// The controller may write EnvoyFilters in the gateways' namespace.
	if err := cluster.TargetNamespace(ctx, gatewayNS); err != nil {
		b.Fatal(err)
	}
	var f fleet
	b.Cleanup(func() {
		for _, c := range f.all() {
			c.Close()
		}
	})
	// One at a time, each ready before the next: istiod rate-limits new
	// streams (PILOT_MAX_REQUESTS_PER_SECOND).
	for i := range scopeGateways {
		c, err := xds.Dial(ctx, istiod.GRPCAddr, xds.GatewayNodeIn(gatewayNS, fmt.Sprintf("10.2.0.%d", i+1), "1.31.0"))
		if err != nil {
			b.Fatal(err)
		}
		f.gateways = append(f.gateways, c)
		if _, err := c.WaitFor(ctx, scopeConnectMax, func(s xds.Snapshot) bool { _, err := s.GatewayHCM(listenerName); return err == nil }); err != nil {
			b.Fatalf("gateway %d: %v", i, err)
		}
	}
	for i := range scopeSidecars {
		c, err := xds.Dial(ctx, istiod.GRPCAddr, xds.SidecarNode(scopeAppNS, fmt.Sprintf("10.3.0.%d", i+1), map[string]string{"app": fmt.Sprintf("bench-%d", i)}))
		if err != nil {
			b.Fatal(err)
		}
		f.sidecars = append(f.sidecars, c)
		if _, err := c.WaitFor(ctx, scopeConnectMax, func(s xds.Snapshot) bool { return len(s.HCMs(inboundListener)) > 0 }); err != nil {
			b.Fatalf("sidecar %d: %v", i, err)
		}
	}
	return f
}

// scopeResult is what one scope of edit costs the fleet.
type scopeResult struct {
	name                 string
	sidecarResponses     float64 // per edit, over all sidecars
	sidecarsPushed       float64 // per edit
	gatewayResponses     float64 // per edit, over all gateways
	lastGateway, anyGate []time.Duration
}

// measureScope edits gzip's minContentLength pushScopeEdits times with the
// document's target set to target, through the controller, and counts
// what istiod sends to the fleet.
func measureScope(ctx context.Context, b *testing.B, f fleet, name, target string, base int) scopeResult {
	b.Helper()
	doc := func(v int) string { return target + gzipDoc(v) }
	putConfig(ctx, b, doc(base))
	waitGateways(ctx, b, f, base)
	quiet(ctx, b, f.all())
	cms := cluster.Admin.CoreV1().ConfigMaps(ns)
	r := scopeResult{name: name}
	for k := 1; k <= pushScopeEdits; k++ {
		v := base + k
		before := pushes(f.all())
		cm, err := cms.Get(ctx, "global-config", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cm.Data = map[string]string{"config.yaml": doc(v)}
		start := time.Now()
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		seen := waitGateways(ctx, b, f, v)
		for _, t := range seen {
			r.anyGate = append(r.anyGate, t.Sub(start))
		}
		r.lastGateway = append(r.lastGateway, slices.MaxFunc(seen, func(a, b time.Time) int { return a.Compare(b) }).Sub(start))
		quiet(ctx, b, f.all())
		after := pushes(f.all())
		for i := range after {
			d := float64(after[i] - before[i])
			if i < len(f.gateways) {
				r.gatewayResponses += d
				continue
			}
			r.sidecarResponses += d
			if d > 0 {
				r.sidecarsPushed++
			}
		}
	}
	r.sidecarResponses /= pushScopeEdits
	r.sidecarsPushed /= pushScopeEdits
	r.gatewayResponses /= pushScopeEdits
	return r
}

// waitGateways waits until every gateway has gzip's minContentLength v and
// returns when each got it.
func waitGateways(ctx context.Context, b *testing.B, f fleet, v int) []time.Time {
	b.Helper()
	var seen []time.Time
	for i, c := range f.gateways {
		at, err := c.WaitFor(ctx, effectTimeout, func(s xds.Snapshot) bool {
			return minContentLength(s, "envoy.filters.http.compressor.gzip") == v
		})
		if err != nil {
			b.Fatalf("gateway %d, minContentLength %d: %v", i, v, err)
		}
		seen = append(seen, at)
	}
	return seen
}

// BenchmarkPushScope measures what a gateway-only edit costs the rest of
// the mesh: every EnvoyFilter change makes istiod push to every proxy it
// may concern, and istiod decides that by namespace. An EnvoyFilter in the
// root namespace concerns every sidecar of the mesh; one in the gateways'
// own namespace, only the proxies of that namespace.
func BenchmarkPushScope(b *testing.B) {
	ctx := setup(b)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	f := connectFleet(ctx, b)
	startController(ctx, b)
	root := measureScope(ctx, b, f, "root namespace (`istio-system`, the default target)", "", 1000)
	own := measureScope(ctx, b, f, fmt.Sprintf("the gateways' namespace (`target.namespace: %s`)", gatewayNS),
		fmt.Sprintf("target:\n  namespace: %s\n", gatewayNS), 2000)

	var rows strings.Builder
	for _, r := range []scopeResult{root, own} {
		fmt.Fprintf(&rows, "| %s | %.1f of %d | %.1f | %.1f | %.1f ms / %.1f ms | %.1f ms / %.1f ms |\n", r.name,
			r.sidecarsPushed, scopeSidecars, r.sidecarResponses, r.gatewayResponses,
			harness.Ms(harness.Percentile(r.anyGate, 50)), harness.Ms(harness.Percentile(r.anyGate, 95)),
			harness.Ms(harness.Percentile(r.lastGateway, 50)), harness.Ms(harness.Percentile(r.lastGateway, 95)))
	}
	b.ReportMetric(root.sidecarsPushed, "sidecars-pushed-root")
	b.ReportMetric(own.sidecarsPushed, "sidecars-pushed-own-ns")
	table := fmt.Sprintf(`## Push scope

Written by BenchmarkPushScope: %d gateways (namespace %s) and %d sidecars (namespace %s) on one istiod; a gateway-only gzip edit through the ConfigMap, %d edits per row. Responses are xDS discovery responses (one per resource type a push sends).

| EnvoyFilter namespace | sidecars pushed per edit | sidecar responses per edit | gateway responses per edit | edit → a gateway has it, p50 / p95 | edit → the last gateway has it, p50 / p95 |
|---|---|---|---|---|---|
%s`, scopeGateways, gatewayNS, scopeSidecars, scopeAppNS, pushScopeEdits, rows.String())
	fmt.Println()
	fmt.Print(table)
	if out := os.Getenv("GLOBALCONFIG_BENCH_REPORT"); out != "" {
		if err := harness.WriteReportSection(out, harness.BenchReportTitle, "push scope", table); err != nil {
			b.Fatal(err)
		}
	}
}
