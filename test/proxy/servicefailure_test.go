package proxy

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/facts"
	"github.com/globalconfig/globalconfig/test/harness"
)

// Each item that sends to a service, at both Envoys, while that service
// fails in one of three ways: no Service or ServiceEntry has its host (so
// istiod builds no cluster), a ServiceEntry with no endpoints (a cluster
// with no host in it), or an endpoint that refuses connections. What the
// gateway does with the item's listener and with a request is what the
// item's docs and warnings say.

// A service failure mode, made for one host and port.
type serviceFailure struct {
	name string
	// make puts host:port in that state.
	make func(ctx context.Context, t *testing.T, host string, port uint32)
}

var serviceFailures = []serviceFailure{
	{"missing", func(context.Context, *testing.T, string, uint32) {}},
	{"no-endpoints", func(ctx context.Context, t *testing.T, host string, port uint32) {
		serviceEntry(ctx, t, host, port)
	}},
	{"refused", func(ctx context.Context, t *testing.T, host string, port uint32) {
		serviceEntry(ctx, t, host, port, closedPort(t))
	}},
}

// serviceEntry puts host:port (gRPC) in the mesh with endpoints at the
// loopback ports (none: a cluster with no host), until the test ends.
func serviceEntry(ctx context.Context, t *testing.T, host string, port uint32, loopbackPorts ...int) {
	t.Helper()
	if err := cluster.CreateServiceEntry(ctx, host, port, "GRPC", loopbackPorts...); err != nil {
		t.Fatalf("service entry %s: %v", host, err)
	}
	t.Cleanup(func() {
		_ = cluster.Istio.NetworkingV1().ServiceEntries(ns).Delete(context.Background(), host, metav1.DeleteOptions{})
	})
}

// closedPort is a loopback port nothing listens on: connections to it are
// refused.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// serviceItem is one item, in one of its failure settings, sending to a
// service.
type serviceItem struct {
	name string
	port uint32
	// doc is the item's document sending to host:port.
	doc func(host string, port uint32) string
}

var serviceItems = []serviceItem{
	{"globalratelimit-allow", rateLimitPort, func(h string, p uint32) string {
		return fmt.Sprintf("globalRateLimit:\n  service: %s\n  port: %d\n  limits:\n    failing-%s:\n      requests: 1\n      unit: day\n", h, p, runID)
	}},
	{"globalratelimit-deny", rateLimitPort, func(h string, p uint32) string {
		return fmt.Sprintf("globalRateLimit:\n  service: %s\n  port: %d\n  failureMode: deny\n  limits:\n    failing-%s:\n      requests: 1\n      unit: day\n", h, p, runID)
	}},
	{"extauth-deny", 4180, func(h string, p uint32) string {
		return fmt.Sprintf("extAuth:\n  service: %s\n  port: %d\n", h, p)
	}},
	{"extauth-allow", 4180, func(h string, p uint32) string {
		return fmt.Sprintf("extAuth:\n  service: %s\n  port: %d\n  failureMode: allow\n", h, p)
	}},
	{"extauth-grpc", 9000, func(h string, p uint32) string {
		return fmt.Sprintf("extAuth:\n  service: %s\n  port: %d\n  protocol: grpc\n", h, p)
	}},
	{"extproc-deny", 9000, func(h string, p uint32) string {
		return fmt.Sprintf("extProc:\n  service: %s\n  port: %d\n  failureStatus: 503\n", h, p)
	}},
	{"extproc-allow", 9000, func(h string, p uint32) string {
		return fmt.Sprintf("extProc:\n  service: %s\n  port: %d\n  failureMode: allow\n", h, p)
	}},
	{"tracing-zipkin", 9411, func(h string, p uint32) string {
		return fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  zipkin:\n    service: %s\n    port: %d\n", h, p)
	}},
	{"tracing-opentelemetry", 4317, func(h string, p uint32) string {
		return fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  opentelemetry:\n    service: %s\n    port: %d\n", h, p)
	}},
	{"tracing-opentelemetry-http", 4318, func(h string, p uint32) string {
		return fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  opentelemetry:\n    service: %s\n    port: %d\n    protocol: http\n", h, p)
	}},
	{"tracing-skywalking", 11800, func(h string, p uint32) string {
		return fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  skywalking:\n    service: %s\n    port: %d\n", h, p)
	}},
	{"tracing-datadog", 8126, func(h string, p uint32) string {
		return fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  datadog:\n    service: %s\n    port: %d\n", h, p)
	}},
}

// What each gateway did, per item and failure mode, at Envoy 1.40.0 and
// 1.39.3 alike: whether it refused the listener (it then keeps the
// listeners it had, without any of the document's items, and a proxy
// that starts gets none), and the status of a request.
type serviceOutcome struct {
	refused bool
	status  int
	// says is what the item's warning (and the status) says of traffic
	// while the service has no cluster: the "missing" mode's outcome.
	says string
}

// serviceOutcomes are keyed by item setting, then failure mode; a mode
// left out is the item's "*" entry.
var serviceOutcomes = map[string]map[string]serviceOutcome{
	// A limit of 1 a day: three requests pass, the limit is not enforced.
	"globalratelimit-allow": {"*": {status: 200, says: "no limit is enforced: every request passes unlimited"}},
	// Envoy's own failure status, 500.
	"globalratelimit-deny": {"*": {status: 500, says: "every request is denied with 500"}},
	"extauth-deny":         {"*": {status: 503, says: "every request that is not opted out (skip) is denied with 503"}},
	"extauth-allow":        {"*": {status: 200, says: "every request passes unchecked"}},
	"extauth-grpc":         {"*": {status: 503, says: "is denied with 503"}},
	"extproc-deny":         {"*": {status: 503, says: "every request is answered with 503"}},
	"extproc-allow":        {"*": {status: 200, says: "every request passes unprocessed"}},
	// The request is served, by the listener before the change when the
	// gateway refused it.
	"tracing-zipkin":             {"missing": {refused: true, status: 200, says: "Envoy refuses every listener that sends to it"}, "*": {status: 200}},
	"tracing-datadog":            {"missing": {refused: true, status: 200, says: "Envoy refuses every listener that sends to it"}, "*": {status: 200}},
	"tracing-opentelemetry":      {"*": {status: 200, says: "requests are served, but their traces are dropped"}},
	"tracing-opentelemetry-http": {"*": {status: 200, says: "requests are served, but their traces are dropped"}},
	"tracing-skywalking":         {"*": {status: 200, says: "requests are served, but their traces are dropped"}},
}

// Every item that sends to a service is measured here: a new one must say
// what the proxies do without its service, and TestServiceFailure must
// show it at the Envoys.
func TestEveryServiceItemMeasured(t *testing.T) {
	measured := map[string]bool{}
	for _, it := range serviceItems {
		measured[strings.SplitN(it.name, "-", 2)[0]] = true
	}
	for _, r := range items.All() {
		if _, ok := r.NewItem().(items.ServiceUser); ok && !measured[strings.ToLower(r.Name)] {
			t.Errorf("%s sends to a service, but TestServiceFailure does not show what the proxies do when it is missing, has no endpoints or refuses connections: add it to serviceItems and serviceOutcomes", r.Name)
		}
	}
}

// The warning of a service that has no cluster says, for each item,
// what TestServiceFailure measured at the gateways (the status'
// notInEffect repeats it).
func TestServiceFailureWarningsSayWhatEnvoyDoes(t *testing.T) {
	r := &facts.Resolver{Kube: kubefake.NewClientset(), Istio: istiofake.NewSimpleClientset()}
	for _, it := range serviceItems {
		want, ok := serviceOutcomes[it.name]["missing"]
		if !ok {
			want = serviceOutcomes[it.name]["*"]
		}
		d, err := document.ParseFile([]byte(it.doc("absent.failing.svc.cluster.local", it.port)))
		if err != nil {
			t.Fatalf("%s: %v", it.name, err)
		}
		var said []string
		for _, sec := range d.Sections {
			su, ok := sec.Item.(items.ServiceUser)
			if !ok {
				continue
			}
			for _, ref := range su.Services() {
				f := r.Service(ref)
				consequence, ok := facts.NotInEffect(f.Msg)
				if !f.Warn || !ok {
					t.Errorf("%s: %+v, want a warning that the item is not in effect", it.name, f)
				}
				said = append(said, consequence)
			}
		}
		if len(said) != 1 || !strings.Contains(said[0], want.says) {
			t.Errorf("%s: the warning says %q, want %q (measured: listener refused %v, status %d)", it.name, said, want.says, want.refused, want.status)
		}
	}
}

func TestServiceFailure(t *testing.T) {
	ctx := setup(t)
	for _, it := range serviceItems {
		for _, m := range serviceFailures {
			t.Run(it.name+"/"+m.name, func(t *testing.T) {
				want, ok := serviceOutcomes[it.name][m.name]
				if !ok {
					want = serviceOutcomes[it.name]["*"]
				}
				// From a set every gateway loaded: a refusal of the case
				// before would be counted for this one.
				applyAll(ctx, t, nil)
				host := fmt.Sprintf("%s-%s.failing.svc.cluster.local", it.name, m.name)
				m.make(ctx, t, host, it.port)
				if m.name != "missing" {
					for _, g := range gateways {
						waitCluster(ctx, t, g, fmt.Sprintf("outbound|%d||%s", it.port, host))
					}
				}
				loaded := applyAll(ctx, t, rendered(t, it.doc(host, it.port)))
				for _, l := range loaded {
					if l.nacked != want.refused {
						t.Errorf("Envoy %s: refused the listener: %v (%s), want %v", l.gw.Binary.Version, l.nacked, l.message, want.refused)
					}
					for i := range 3 {
						r, err := get(ctx, l.gw.url("/echo"), nil)
						if err != nil {
							t.Fatalf("Envoy %s, request %d: %v", l.gw.Binary.Version, i+1, err)
						}
						if r.status != want.status {
							t.Errorf("Envoy %s, request %d: status %d, want %d", l.gw.Binary.Version, i+1, r.status, want.status)
						}
					}
				}
				if strings.HasPrefix(it.name, "tracing-") && m.name != "missing" {
					// The requests' spans are dropped: each tracer's report
					// (sent at its flush interval, 5 s at most) fails at the
					// collector's cluster.
					for _, g := range gateways {
						reportsFail(ctx, t, g, fmt.Sprintf("cluster.outbound|%d||%s;.", it.port, host))
					}
				}
			})
		}
	}
}

// reportsFail waits until g's cluster (its statistics' prefix) counts a
// call that found no endpoint or whose connection was refused.
func reportsFail(ctx context.Context, t *testing.T, g *gw, prefix string) {
	t.Helper()
	var n int64
	if !harness.Eventually(ctx, 15*time.Second, func() bool {
		n = statSum(ctx, t, g, prefix, ".upstream_cx_none_healthy") + statSum(ctx, t, g, prefix, ".upstream_cx_connect_fail")
		return n > 0
	}) {
		t.Errorf("Envoy %s: no failed report counted at %s within 15 s", g.Binary.Version, prefix)
	}
}

// waitCluster waits until g has the cluster name.
func waitCluster(ctx context.Context, t *testing.T, g *gw, name string) {
	t.Helper()
	if !harness.Eventually(ctx, 30*time.Second, func() bool {
		st, err := g.Stats(ctx)
		if err != nil {
			return false
		}
		_, ok := st["cluster."+name+";.update_attempt"]
		if !ok {
			for k := range st {
				if strings.HasPrefix(k, "cluster."+name+";.") {
					return true
				}
			}
		}
		return ok
	}) {
		t.Fatalf("gateway %s has no cluster %s", g.name, name)
	}
}

// The status follows the rate-limit service's ServiceEntry: deleted, it
// says within 5 s that globalRateLimit is not in effect and that no limit
// is enforced (what TestServiceFailure measured), not Applied with no
// warning; created again, it says nothing of the kind within 5 s. The
// controller watches the ServiceEntry; it does not poll.
func TestStatusFollowsRateLimitService(t *testing.T) {
	ctx := setup(t)
	const host = "ratelimit-status.failing.svc.cluster.local"
	create := func() {
		t.Helper()
		serviceEntry(ctx, t, host, rateLimitPort, rls.GRPCPort)
	}
	create()
	startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	putConfig(ctx, t, fmt.Sprintf("globalRateLimit:\n  service: %s\n  port: %d\n  limits:\n    status-%s:\n      requests: 20\n      unit: minute\n", host, rateLimitPort, runID))
	// inEffect waits up to bound for the status to say whether
	// globalRateLimit is in effect, and returns how long it took.
	inEffect := func(want bool, bound time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		var last string
		if !harness.Eventually(ctx, bound, func() bool {
			st, err := cluster.Status(ctx)
			if err != nil {
				last = err.Error()
				return false
			}
			last = fmt.Sprintf("state %s, message %q, notInEffect %+v, warnings %+v", st.State, st.Message, st.NotInEffect, st.Warnings)
			if st.State != "Applied" || st.Applied == nil {
				return false
			}
			if want {
				return len(st.NotInEffect) == 0 && len(st.Warnings) == 0 && !strings.Contains(st.Message, "not in effect")
			}
			return len(st.NotInEffect) == 1 && st.NotInEffect[0].Path == "globalRateLimit.service" &&
				st.NotInEffect[0].Message == "no limit is enforced: every request passes unlimited (failureMode allow)" &&
				strings.Contains(st.Message, "globalRateLimit is not in effect") && strings.Contains(st.Message, "no limit is enforced") &&
				len(st.Warnings) == 1 && strings.Contains(st.Warnings[0].Message, "outbound|8081||"+host)
		}) {
			t.Fatalf("the status does not say globalRateLimit is in effect=%v within %s: %s", want, bound, last)
		}
		return time.Since(start)
	}
	inEffect(true, 30*time.Second)
	if err := cluster.Istio.NetworkingV1().ServiceEntries(ns).Delete(ctx, host, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("ServiceEntry deleted: the status said globalRateLimit is not in effect after %s", inEffect(false, 5*time.Second).Round(time.Millisecond))
	create()
	t.Logf("ServiceEntry created: the status said it is in effect again after %s", inEffect(true, 5*time.Second).Round(time.Millisecond))
}

// A zipkin collector that has no cluster: the gateways refuse the
// listener, and the status says both that they refuse the set and that
// tracing is not in effect, with what that means (the listener refused),
// not only the NACK.
func TestStatusZipkinCollectorMissing(t *testing.T) {
	ctx := setup(t)
	const host = "zipkin-status.failing.svc.cluster.local"
	startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr)
	putConfig(ctx, t, fmt.Sprintf("tracing:\n  enable: true\n  sampling: 100\n  zipkin:\n    service: %s\n    port: 9411\n", host))
	var last string
	if !harness.Eventually(ctx, 60*time.Second, func() bool {
		st, err := cluster.Status(ctx)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("state %s, message %q, notInEffect %+v", st.State, st.Message, st.NotInEffect)
		return st.State != "Applied" && strings.Contains(st.Message, "NACK") &&
			strings.Contains(st.Message, "tracing is not in effect") && strings.Contains(st.Message, "Envoy refuses every listener that sends to it") &&
			len(st.NotInEffect) == 1 && st.NotInEffect[0].Path == "tracing.zipkin.service"
	}) {
		t.Fatalf("the status does not say the gateways refuse the set and tracing is not in effect: %s", last)
	}
	t.Log(last)
}
