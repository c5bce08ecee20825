package harness

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Load sends real requests through gateways until it is halted: a GET and
// a POST with a 200-byte body, in turn, every 20 ms to each, and counts
// the answers by gateway and status (-1: no answer). Each request opens a
// new connection: a kept-alive one stays on the listener configuration it
// was accepted by, and would not show a change.
type Load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  map[string]map[int]int
}

// StartLoad starts a load to urls (a gateway's name → the URL to send
// to); it halts when t ends.
func StartLoad(ctx context.Context, t testing.TB, urls map[string]string) *Load {
	l := &Load{stop: make(chan struct{}), got: map[string]map[int]int{}}
	body := strings.Repeat("b", 200)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for name, url := range urls {
		l.got[name] = map[int]int{}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
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
				if req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(b)); err == nil {
					if resp, err := client.Do(req); err == nil {
						code = resp.StatusCode
						resp.Body.Close()
					}
				}
				l.mu.Lock()
				l.got[name][code]++
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.Halt)
	return l
}

// Halt stops the load and waits for its requests to end.
func (l *Load) Halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// Reset forgets the answers counted so far.
func (l *Load) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name := range l.got {
		l.got[name] = map[int]int{}
	}
}

// Count is how many answers the gateway name gave with status code.
func (l *Load) Count(name string, code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got[name][code]
}

// Answers are the answers the gateway name gave, by status, as a copy.
func (l *Load) Answers(name string) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.got[name])
}
