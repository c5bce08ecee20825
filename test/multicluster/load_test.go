package multicluster

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxyName is the gateway's POD.NAMESPACE, as istiod and the status
// name it.
func (s *site) proxyName() string { return strings.Split(s.Gateway.NodeID, "~")[2] }

// statsArgs point the controller at each site's gateway's own statistics
// (its admin's /stats/prometheus), for rollout.analysis: in a cluster,
// istio-agent serves the same counters on the pod's port 15020.
func statsArgs(of ...*site) string {
	var kv []string
	for _, s := range of {
		kv = append(kv, s.proxyName()+"=http://"+s.Gateway.AdminAddr+"/stats/prometheus")
	}
	return "--rollout-stats-url=" + strings.Join(kv, ",")
}

// load sends real requests through the gateways of sites until it is
// halted: a GET and a POST with a 200-byte body, in turn, every 20 ms
// each, and counts the answers by cluster and status (-1: no answer).
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  map[string]map[int]int
}

// startLoad starts a load through the gateways of of; it halts when t
// ends.
func startLoad(ctx context.Context, t testing.TB, of ...*site) *load {
	l := &load{stop: make(chan struct{}), got: map[string]map[int]int{}}
	body := strings.Repeat("b", 200)
	for _, s := range of {
		l.got[s.Name] = map[int]int{}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// A new connection per request: a kept-alive one stays on the
			// listener configuration it was accepted by.
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				method, b := http.MethodGet, ""
				if i%2 == 1 {
					method, b = http.MethodPost, body
				}
				code := -1
				req, err := http.NewRequestWithContext(ctx, method, s.URL("/echo"), strings.NewReader(b))
				if err == nil {
					if resp, err := client.Do(req); err == nil {
						code = resp.StatusCode
						resp.Body.Close()
					}
				}
				l.mu.Lock()
				l.got[s.Name][code]++
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

// halt stops the load and waits for its requests to end.
func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// reset forgets the answers counted so far.
func (l *load) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name := range l.got {
		l.got[name] = map[int]int{}
	}
}

// count is how many answers the gateway of s gave with status code.
func (l *load) count(s *site, code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got[s.Name][code]
}
