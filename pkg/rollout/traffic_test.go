package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// envoyStats is what a real Envoy 1.40 gateway's admin answered on
// /stats/prometheus (cut to the lines that count), after 3 GETs routed to
// a backend, 2 POSTs a one-byte body limit answered 413, a direct
// response, and a request to a cluster that refused the connection: its
// HTTP connection manager's stat prefix (outbound_0.0.0.0_8080) is cut at
// the first dot into the tag, the rest left in the name.
const envoyStats = `# TYPE envoy_cluster_upstream_cx_connect_fail counter
envoy_cluster_upstream_cx_connect_fail{envoy_cluster_name="dead"} 1
envoy_cluster_upstream_cx_connect_fail{envoy_cluster_name="xds-grpc"} 7
envoy_cluster_upstream_rq_completed{envoy_cluster_name="backend"} 3
envoy_http_0_0_0_8080_downstream_rq_completed{envoy_http_conn_manager_prefix="outbound_0"} 7
envoy_http_0_0_0_8080_downstream_rq_total{envoy_http_conn_manager_prefix="outbound_0"} 7
envoy_http_0_0_0_8080_downstream_rq_too_large{envoy_http_conn_manager_prefix="outbound_0"} 2
envoy_http_0_0_0_8080_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="outbound_0"} 4
envoy_http_0_0_0_8080_downstream_rq_xx{envoy_response_code_class="4",envoy_http_conn_manager_prefix="outbound_0"} 2
envoy_http_0_0_0_8080_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="outbound_0"} 1
envoy_http_0_0_0_8080_rq_direct_response{envoy_http_conn_manager_prefix="outbound_0"} 1
envoy_http_0_0_0_8080_rq_total{envoy_http_conn_manager_prefix="outbound_0"} 5
envoy_http_downstream_rq_completed{envoy_http_conn_manager_prefix="admin"} 12
envoy_http_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="admin"} 3
envoy_listener_http_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="outbound_0",envoy_listener_address="0.0.0.0_8080"} 1
`

func TestParseStats(t *testing.T) {
	c, err := ParseStats([]byte(envoyStats))
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{Requests: 7, Server5xx: 1, Routed: 5, LocalReplies: 2, Local: true, ConnectFailures: 1}
	if c != want {
		t.Errorf("got %+v\nwant %+v (admin's and the listener's counters left out, istiod's cluster too)", c, want)
	}
	// Istio's standard metric, when Envoy's own counters are not exported.
	istio := `istio_requests_total{reporter="source",response_code="200",response_flags="-"} 90
istio_requests_total{reporter="source",response_code="503",response_flags="UF"} 6
istio_requests_total{reporter="source",response_code="502",response_flags="-"} 4
`
	if c, err := ParseStats([]byte(istio)); err != nil || c != (Counters{Requests: 100, Server5xx: 10, ConnectFailures: 6}) {
		t.Errorf("istio_requests_total: %+v %v", c, err)
	}
	if _, err := ParseStats([]byte("# nothing\nprocess_cpu_seconds_total 3\n")); err == nil || !strings.Contains(err.Error(), "no request counters") {
		t.Errorf("no counters: %v", err)
	}
}

// The gate reads each watched proxy from its own baseline: what a canary
// served before the phase is not the phase's; a counter that went back
// (Envoy restarted) counts from zero; statistics that can't be read are
// named.
func TestTrafficGate(t *testing.T) {
	var mu sync.Mutex
	counters := map[string][4]int{} // requests, 5xx, routed, connect failures
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c, ok := counters[strings.TrimPrefix(r.URL.Path, "/")]
		mu.Unlock()
		if !ok {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "envoy_http_downstream_rq_completed{envoy_http_conn_manager_prefix=\"gw\"} %d\n", c[0])
		fmt.Fprintf(w, "envoy_http_downstream_rq_xx{envoy_response_code_class=\"5\",envoy_http_conn_manager_prefix=\"gw\"} %d\n", c[1])
		fmt.Fprintf(w, "envoy_http_rq_total{envoy_http_conn_manager_prefix=\"gw\"} %d\n", c[2])
		fmt.Fprintf(w, "envoy_cluster_upstream_cx_connect_fail{envoy_cluster_name=\"outbound|80||b\"} %d\n", c[3])
	}))
	defer srv.Close()
	set := func(name string, c [4]int) {
		mu.Lock()
		counters[name] = c
		mu.Unlock()
	}
	src := StaticStats{"c.ns": srv.URL + "/c", "s.ns": srv.URL + "/s", "gone.ns": srv.URL + "/gone"}
	g := NewTrafficGate(src)
	ctx := context.Background()
	set("c", [4]int{1000, 10, 1000, 0})
	set("s", [4]int{5000, 50, 5000, 0})
	g.Watch(&TrafficWatch{Key: "phase-1", Canaries: []string{"c.ns"}, Stable: []string{"s.ns", "gone.ns"}})
	if _, ok := g.Result("phase-1"); ok {
		t.Error("figures before any read")
	}
	g.Read(ctx)
	set("c", [4]int{1100, 10, 1050, 2})
	set("s", [4]int{5200, 52, 5200, 0})
	g.Read(ctx)
	res, ok := g.Result("phase-1")
	if !ok || res.Canary != (TrafficGroup{Proxies: 1, Read: 1, Requests: 100, LocalReplies: 50, ConnectFailures: 2}) ||
		res.Stable != (TrafficGroup{Proxies: 2, Read: 1, Requests: 200, Server5xx: 2}) || len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "gone.ns") {
		t.Errorf("figures %+v", res)
	}
	// The canary's Envoy restarted: its counters start again from zero.
	set("c", [4]int{30, 3, 30, 0})
	g.Read(ctx)
	set("c", [4]int{40, 4, 40, 0})
	g.Read(ctx)
	if res, _ := g.Result("phase-1"); res.Canary.Requests != 140 || res.Canary.Server5xx != 4 || res.Canary.ConnectFailures != 2 {
		t.Errorf("after a restart: %+v", res.Canary)
	}
	// Another phase drops what was read.
	g.Watch(&TrafficWatch{Key: "phase-2", Canaries: []string{"c.ns"}})
	if _, ok := g.Result("phase-1"); ok {
		t.Error("the figures of an earlier phase")
	}
	if names := StableSample([]string{"a", "b", "c", "d", "e"}, 3); len(names) != 3 || strings.Join(names, ",") != strings.Join(StableSample([]string{"e", "d", "c", "b", "a"}, 3), ",") {
		t.Errorf("the sample depends on the order: %v", names)
	}
}

func TestMarkers(t *testing.T) {
	dump := `{"configs":[{"dynamic_listeners":[{"name":"0.0.0.0_8080","active_state":{"listener":{"metadata":{"filter_metadata":{
		"globalconfig.io/canary/gzip":{"content":"abc"},"globalconfig.io/canary/headers":{"content":"removed"},"other":{"x":"y"}}}}}}]}]}`
	m := Markers([]byte(dump))
	if len(m) != 2 || m["gzip"] != "abc" || m["headers"] != "removed" {
		t.Errorf("markers %v", m)
	}
	if len(Markers([]byte(`{"configs":[]}`))) != 0 {
		t.Error("markers in a dump without any")
	}
}

// BenchmarkParseStats reads a gateway's statistics of a realistic size:
// 40 HTTP connection managers and 400 clusters, each with its counters.
func BenchmarkParseStats(b *testing.B) {
	var sb strings.Builder
	for i := range 40 {
		for _, s := range []string{"downstream_rq_completed", "downstream_rq_total", "rq_total", "rq_direct_response", "downstream_cx_total", "downstream_rq_http1_total"} {
			fmt.Fprintf(&sb, "envoy_http_%s{envoy_http_conn_manager_prefix=\"outbound_%d\"} %d\n", s, i, i*100)
		}
		for class := 1; class <= 5; class++ {
			fmt.Fprintf(&sb, "envoy_http_downstream_rq_xx{envoy_response_code_class=\"%d\",envoy_http_conn_manager_prefix=\"outbound_%d\"} %d\n", class, i, i)
		}
	}
	for i := range 400 {
		for _, s := range []string{"upstream_cx_connect_fail", "upstream_rq_total", "upstream_rq_completed", "upstream_cx_total", "upstream_cx_active", "membership_healthy"} {
			fmt.Fprintf(&sb, "envoy_cluster_%s{envoy_cluster_name=\"outbound|80||svc-%d.ns.svc.cluster.local\"} %d\n", s, i, i)
		}
	}
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		if _, err := ParseStats(body); err != nil {
			b.Fatal(err)
		}
	}
}
