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

	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// mesh is a fake istiod over the fixture's API server, closer to a real
// one than fakeIstiod: its store is the API's EnvoyFilters; each proxy has
// the labels it connected with (/debug/adsz) and the labels istiod
// selects by now; /debug/config_dump?proxyID= gives a proxy the listener
// metadata of every EnvoyFilter whose selector its current labels match,
// as istiod's EnvoyFilter patches would; and each proxy answers every push
// as it is told to (ACK, NACK, silence). It never depends on the code
// under test: it reads only the API server.
type mesh struct {
	t   *testing.T
	f   *fixture
	srv *httptest.Server

	mu      sync.Mutex
	proxies []*meshProxy
	push    int
	// adszDelay delays /debug/adsz, adszFails makes it answer 500.
	adszDelay time.Duration
	adszFails bool
}

// meshProxy is one proxy connected to the fake istiod.
type meshProxy struct {
	name    string // POD.NAMESPACE
	kind    string // router or sidecar
	version string
	// connected are the labels it connected with (adsz); labels those
	// istiod selects by now.
	connected, labels map[string]string
	// answer is "" (ACK), "silent" (no answer), or a NACK message.
	answer string
	// gone: disconnected, no istiod reports it.
	gone bool
	// answered is the last push it answered, and nacked whether it NACKed it.
	answered int
}

func newMesh(t *testing.T, f *fixture) *mesh {
	m := &mesh{t: t, f: f}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

// gateway adds a gateway of Istio 1.31.0 labelled canary=v.
func (m *mesh) gateway(name, v string) *meshProxy {
	labels := map[string]string{"istio": "ingressgateway", "globalconfig.io/canary": v}
	p := &meshProxy{name: name + ".istio-system", kind: "router", version: "1.31.0", connected: labels, labels: cloneLabels(labels)}
	m.mu.Lock()
	m.proxies = append(m.proxies, p)
	m.mu.Unlock()
	return p
}

func cloneLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[k] = v
	}
	return out
}

func (m *mesh) nonce(n int) string {
	return fmt.Sprintf("2026-11-23T09:13:00Z/%d0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", n)
}

// answer has the tracker see istiod load the set the API holds, then every
// connected proxy answer one push that carries it.
func (m *mesh) answer(tr *rollout.Tracker) {
	tr.Poll(m.f.ctx)
	m.mu.Lock()
	m.push++
	for _, p := range m.proxies {
		if p.answer != "silent" {
			p.answered = m.push
		}
	}
	m.mu.Unlock()
	tr.Poll(m.f.ctx)
}

// change changes the fake's proxies under its lock: the tracker asks it
// from goroutines of its own.
func (m *mesh) change(fn func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn()
}

func (m *mesh) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	delay, fails := m.adszDelay, m.adszFails
	m.mu.Unlock()
	switch r.URL.Path {
	case "/debug/configz":
		var out []map[string]any
		for _, ef := range m.envoyFilters() {
			out = append(out, map[string]any{"kind": "EnvoyFilter", "metadata": map[string]any{
				"name": ef.Name, "namespace": ef.Namespace, "labels": ef.Labels, "annotations": ef.Annotations}})
		}
		_ = json.NewEncoder(w).Encode(out)
	case "/debug/syncz":
		m.mu.Lock()
		var out []rollout.ProxySync
		for _, p := range m.proxies {
			if p.gone {
				continue
			}
			sent := m.nonce(max(m.push, 1))
			ps := rollout.ProxySync{ProxyID: p.kind + "~10.0.0.1~" + p.name + "~istio-system.svc.cluster.local", ProxyType: p.kind, IstioVersion: p.version,
				Resources: map[string]rollout.ResourceSync{}}
			for _, u := range []string{rollout.ListenerType, rollout.ClusterType, rollout.RouteType} {
				rs := rollout.ResourceSync{Sent: sent, Acked: m.nonce(max(p.answered, 1))}
				if p.answer != "" && p.answer != "silent" && u == rollout.ListenerType && p.answered == m.push {
					rs.Acked, rs.LastError = "", p.answer
				}
				ps.Resources[u] = rs
			}
			out = append(out, ps)
		}
		m.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
	case "/debug/adsz":
		if delay > 0 {
			time.Sleep(delay)
		}
		if fails {
			http.Error(w, "adsz is down", http.StatusInternalServerError)
			return
		}
		m.mu.Lock()
		var clients []map[string]any
		for _, p := range m.proxies {
			if !p.gone {
				clients = append(clients, map[string]any{"connectionId": p.name + "-1", "metadata": map[string]any{"LABELS": p.connected}})
			}
		}
		m.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"clients": clients})
	case "/debug/config_dump":
		id := strings.TrimSuffix(r.URL.Query().Get("proxyID"), "-1")
		m.mu.Lock()
		var p *meshProxy
		for _, q := range m.proxies {
			if q.name == id && !q.gone {
				p = q
			}
		}
		var labels map[string]string
		if p != nil {
			labels = cloneLabels(p.labels)
		}
		m.mu.Unlock()
		if p == nil {
			http.Error(w, "no such proxy", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(m.dump(labels))
	default:
		http.NotFound(w, r)
	}
}

func (m *mesh) envoyFilters() []*clientnetworking.EnvoyFilter {
	list, err := m.f.istio.NetworkingV1alpha3().EnvoyFilters("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		m.t.Error(err)
		return nil
	}
	return list.Items
}

// dump is istiod's config dump for a gateway with labels: one listener
// whose filter_metadata holds what the listener MERGE patches of every
// EnvoyFilter selecting it set.
func (m *mesh) dump(labels map[string]string) map[string]any {
	md := map[string]any{}
	for _, ef := range m.envoyFilters() {
		ok := true
		for k, v := range ef.Spec.GetWorkloadSelector().GetLabels() {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		for _, cp := range ef.Spec.GetConfigPatches() {
			if cp.GetApplyTo() != networking.EnvoyFilter_LISTENER || cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_MERGE {
				continue
			}
			fm := cp.GetPatch().GetValue().GetFields()["metadata"].GetStructValue().GetFields()["filter_metadata"].GetStructValue()
			for k, v := range fm.GetFields() {
				md[k] = v.AsInterface()
			}
		}
	}
	return map[string]any{"configs": []any{map[string]any{"dynamic_listeners": []any{map[string]any{"name": "0.0.0.0_8080",
		"active_state": map[string]any{"listener": map[string]any{"metadata": map[string]any{"filter_metadata": md}}}}}}}}
}

// versionOf is the version of item a proxy with labels gets from the API's
// EnvoyFilters: the content of every EnvoyFilter of the item whose
// selector it matches, less the canary markers, joined ("" for none; two
// versions joined by "+").
func versionsOf(efs []*clientnetworking.EnvoyFilter, labels map[string]string) map[string][]string {
	out := map[string][]string{}
	for _, ef := range efs {
		ok := true
		for k, v := range ef.Spec.GetWorkloadSelector().GetLabels() {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		var b strings.Builder
		for _, cp := range ef.Spec.GetConfigPatches() {
			if s := cp.String(); !strings.Contains(s, "globalconfig.io/canary/") {
				b.WriteString(s)
			}
		}
		if b.Len() == 0 {
			continue // a copy that holds only markers: the item taken away
		}
		item := ef.Labels["globalconfig.io/item"]
		out[item] = append(out[item], b.String())
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}
