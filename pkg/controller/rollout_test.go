package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// fakeIstiod serves /debug/syncz (*proxies) and /debug/configz (the
// EnvoyFilters the fixture's API holds, as istiod's store would).
func fakeIstiod(t *testing.T, f *fixture, proxies *[]rollout.ProxySync) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/configz" {
			list, err := f.istio.NetworkingV1alpha3().EnvoyFilters("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Error(err)
			}
			var out []map[string]any
			for _, ef := range list.Items {
				out = append(out, map[string]any{"kind": "EnvoyFilter", "metadata": map[string]any{
					"name": ef.Name, "namespace": ef.Namespace, "labels": ef.Labels, "annotations": ef.Annotations}})
			}
			_ = json.NewEncoder(w).Encode(out)
			return
		}
		fakeIstiodMu.Lock()
		answer := slices.Clone(*proxies)
		fakeIstiodMu.Unlock()
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeIstiodMu guards the proxies a fake istiod answers with: the tracker
// reads them from its own goroutines (the look before a delivery) while a
// test changes them (setProxies).
var fakeIstiodMu sync.Mutex

// setProxies makes the fake istiod answer with ps from now on.
func setProxies(dst *[]rollout.ProxySync, ps ...rollout.ProxySync) {
	fakeIstiodMu.Lock()
	defer fakeIstiodMu.Unlock()
	*dst = ps
}

// gatewaySync is a gateway that ACKed push n, or NACKed its listeners with
// lastError.
func gatewaySync(name string, n int, lastError string) rollout.ProxySync {
	nonce := fmt.Sprintf("2026-11-23T09:13:00Z/%d0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", n)
	p := rollout.ProxySync{ProxyID: "router~10.0.0.1~" + name + "~istio-system.svc.cluster.local", IstioVersion: "1.31.0",
		Resources: map[string]rollout.ResourceSync{}}
	for _, u := range []string{rollout.ListenerType, rollout.ClusterType, rollout.RouteType} {
		p.Resources[u] = rollout.ResourceSync{Sent: nonce, Acked: nonce}
	}
	if lastError != "" {
		p.Resources[rollout.ListenerType] = rollout.ResourceSync{Sent: nonce, LastError: lastError}
	}
	return p
}

// The controller hands each new set to the tracker, and puts what the
// tracker learns into the status (secrets scrubbed), one Warning Event per
// NACK, and the metrics; an unreachable istiod is said to be one.
func TestSyncReportsRollout(t *testing.T) {
	var proxies []rollout.ProxySync
	tracker := rollout.NewTracker(rollout.Static{"http://127.0.0.1:1"}, &rollout.Client{}, time.Minute)
	f := newFixture(t, Config{Rollout: tracker, RootNamespace: testNS})
	istiod := fakeIstiod(t, f, &proxies)
	tracker.Source = rollout.Static{istiod.URL, "http://127.0.0.1:1"}
	f.putConfig(docV1 + "tracing:\n  enable: true\n  skywalking: {service: sw.default.svc.cluster.local, port: 11800, access_token: s3cr3t}\n")
	f.mustSync()
	s := f.status()
	if tracker.Version() != s.Applied.Hash || s.RolloutSummary != WaitingForIstiod || s.Rollout != nil {
		t.Fatalf("the tracker should follow the applied set %q (tracks %q); summary %q", s.Applied.Hash, tracker.Version(), s.RolloutSummary)
	}

	// istiod holds the set (its configz is the API's) after push 4; push
	// 5 carries it.
	setProxies(&proxies, gatewaySync("gw-a.istio-system", 4, ""), gatewaySync("gw-b.istio-system", 4, ""))
	tracker.Poll(f.ctx)
	setProxies(&proxies,
		gatewaySync("gw-a.istio-system", 5, ""),
		gatewaySync("gw-b.istio-system", 5, "Error adding/updating listener(s) 0.0.0.0_80: token s3cr3t refused"),
	)
	tracker.Poll(f.ctx)
	f.deliver()
	f.mustSync()
	s = f.status()
	st := s.Rollout
	if st == nil || st.Version != s.Applied.Hash || st.Synced != 1 || st.NACKed != 1 {
		t.Fatalf("rollout %+v", st)
	}
	if text, _ := s.Marshal(); strings.Contains(text, "s3cr3t") || !strings.Contains(st.Proxies[0].Message, "token [redacted] refused") {
		t.Errorf("the NACK message should be in the status, scrubbed: %q", st.Proxies[0].Message)
	}
	if !strings.HasPrefix(s.RolloutSummary, "2 proxies: 1 NACKed, 1 Synced; 1 of 2 istiod unreachable") {
		t.Errorf("summary %q", s.RolloutSummary)
	}
	events := f.events()
	want := []string{"Warning ProxyRejected gateway gw-b.istio-system", "Warning IstiodUnreachable rollout status unknown for one istiod: http://127.0.0.1:1"}
	for _, w := range want {
		if !containsPrefix(events, w) {
			t.Errorf("no event %q among %q", w, events)
		}
	}
	for _, e := range events {
		if strings.Contains(e, "s3cr3t") {
			t.Errorf("an event leaks the secret: %q", e)
		}
	}
	if n := testutil.ToFloat64(f.metrics.RolloutProxies.WithLabelValues("NACKed")); n != 1 {
		t.Errorf("nacked proxies metric %v", n)
	}
	if n := testutil.ToFloat64(f.metrics.IstiodUnreachable); n != 1 {
		t.Errorf("unreachable istiod metric %v", n)
	}

	// The same NACK is announced once.
	f.mustSync()
	if events := f.events(); len(events) != 0 {
		t.Errorf("a resync announced again: %q", events)
	}
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
