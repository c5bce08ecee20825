package rollout

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Defaults of the tracker.
const (
	// DefaultTimeout is how long a proxy may take to ACK a new set before
	// it counts as Stale.
	DefaultTimeout = 60 * time.Second
	// FastPoll is the polling period while some proxy is Pending;
	// SlowPoll the period after, which still catches late NACKs and new
	// proxies.
	FastPoll = time.Second
	SlowPoll = 15 * time.Second
)

// Generation is one generated set the controller published.
type Generation struct {
	// Version is the set's hash.
	Version string
	// Since is when it was written or served.
	Since time.Time
	// Scope is which proxies it reaches.
	Scope Scope
}

// Scope says which proxies a set reaches, the way istiod scopes an
// EnvoyFilter: one in the root namespace reaches every proxy, one in
// another namespace only that namespace's proxies; a GATEWAY patch
// reaches gateways, a SIDECAR_* patch sidecars, ANY both. Workload
// selectors are not applied: istiod's sync status carries no labels, and
// istiod pushes a changed EnvoyFilter to every proxy in its scope anyway.
type Scope struct {
	reach []reach
}

type reach struct {
	namespace        string // "" for every namespace
	gateway, sidecar bool
}

// ScopeOf is the scope of objs, with root as Istio's root namespace.
func ScopeOf(objs []*envoyfilter.Object, root string) Scope {
	var s Scope
	for _, o := range objs {
		r := reach{namespace: o.Metadata.Namespace}
		if r.namespace == root {
			r.namespace = ""
		}
		for _, p := range o.Spec.GetConfigPatches() {
			switch p.GetMatch().GetContext() {
			case networking.EnvoyFilter_GATEWAY:
				r.gateway = true
			case networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND:
				r.sidecar = true
			default:
				r.gateway, r.sidecar = true, true
			}
		}
		if (r.gateway || r.sidecar) && !slices.Contains(s.reach, r) {
			s.reach = append(s.reach, r)
		}
	}
	return s
}

// Reaches reports whether the set reaches proxy p.
func (s Scope) Reaches(p ProxySync) bool {
	kind := p.Kind()
	for _, r := range s.reach {
		if r.namespace != "" && r.namespace != p.Namespace() {
			continue
		}
		if (kind == "gateway" && r.gateway) || (kind == "sidecar" && r.sidecar) {
			return true
		}
	}
	return false
}

// Tracker keeps the rollout status of the current generation. Track gives
// it a new one; Run polls istiod; Status reads the result. OnChange, when
// set, is called (from Run's goroutine) whenever the status changes.
type Tracker struct {
	Source  Source
	Client  *Client
	Timeout time.Duration
	// OnChange must not block.
	OnChange func()
	// now is the clock (tests).
	now func() time.Time

	mu     sync.Mutex
	gen    *Generation
	status *Status
	kick   chan struct{}
}

// NewTracker asks src's istiod instances with client.
func NewTracker(src Source, client *Client, timeout time.Duration) *Tracker {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Tracker{Source: src, Client: client, Timeout: timeout, now: time.Now, kick: make(chan struct{}, 1)}
}

// Track starts tracking g, unless it is the generation already tracked.
// It never blocks.
func (t *Tracker) Track(g Generation) {
	t.mu.Lock()
	if t.gen != nil && t.gen.Version == g.Version {
		t.mu.Unlock()
		return
	}
	t.gen = &g
	t.status = nil
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Version is the version tracked, "" before Track.
func (t *Tracker) Version() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen == nil {
		return ""
	}
	return t.gen.Version
}

// Status returns the last status, or nil before the first answer for the
// current generation. The caller must not modify it.
func (t *Tracker) Status() *Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// Run polls until ctx ends: every FastPoll while a proxy is Pending or
// istiod did not answer, every SlowPoll otherwise, and at once after
// Track.
func (t *Tracker) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-t.kick:
		case <-timer.C:
		}
		next := t.Poll(ctx)
		timer.Reset(next)
	}
}

// Poll asks istiod once, updates the status and says when to ask again.
// It does nothing before the first Track.
func (t *Tracker) Poll(ctx context.Context) time.Duration {
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	if gen == nil {
		return SlowPoll
	}
	st := t.evaluate(*gen, t.ask(ctx))
	t.mu.Lock()
	if t.gen != gen {
		// A newer generation arrived meanwhile; its poll is due.
		t.mu.Unlock()
		return 0
	}
	changed := !reflect.DeepEqual(st, t.status)
	t.status = st
	t.mu.Unlock()
	if changed && t.OnChange != nil {
		t.OnChange()
	}
	if st.Pending > 0 || len(st.Unreachable()) > 0 || len(st.Istiod) == 0 {
		return FastPoll
	}
	return SlowPoll
}

// answer is one istiod's reply.
type answer struct {
	address string
	proxies []ProxySync
	err     error
}

// ask asks every istiod at once.
func (t *Tracker) ask(ctx context.Context) []answer {
	eps, err := t.Source.Endpoints()
	if err != nil {
		return []answer{{address: "(discovery)", err: err}}
	}
	out := make([]answer, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps, err := t.Client.Syncz(ctx, ep)
			out[i] = answer{address: ep, proxies: ps, err: err}
		}()
	}
	wg.Wait()
	return out
}

// evaluate sorts the proxies that gen reaches.
func (t *Tracker) evaluate(gen Generation, answers []answer) *Status {
	st := &Status{Version: gen.Version, Since: gen.Since.UTC()}
	// A proxy that moved between istiod instances is reported by the one
	// that sent it listeners last.
	byID := map[string]Proxy{}
	sentAt := map[string]time.Time{}
	for _, a := range answers {
		ist := Istiod{Address: a.address, Proxies: len(a.proxies)}
		if a.err != nil {
			ist.Error = a.err.Error()
		}
		st.Istiod = append(st.Istiod, ist)
		for _, p := range a.proxies {
			if !gen.Scope.Reaches(p) {
				continue
			}
			lds := p.Resources[ListenerType].SentTime
			if prev, ok := sentAt[p.ProxyID]; ok && !lds.After(prev) {
				continue
			}
			sentAt[p.ProxyID] = lds
			byID[p.ProxyID] = t.judge(gen, a.address, p)
		}
	}
	for _, p := range byID {
		st.Selected++
		switch p.State {
		case NACKed:
			st.NACKed++
		case Stale:
			st.Stale++
		case Pending:
			st.Pending++
		case Synced:
			st.Synced++
		}
		st.Proxies = append(st.Proxies, p)
	}
	slices.SortFunc(st.Proxies, func(a, b Proxy) int {
		return cmp.Or(cmp.Compare(slices.Index(States, a.State), slices.Index(States, b.State)), cmp.Compare(a.Name, b.Name))
	})
	if len(st.Proxies) > MaxListed {
		st.Unlisted = len(st.Proxies) - MaxListed
		st.Proxies = st.Proxies[:MaxListed]
	}
	return st
}

// judge decides one proxy's state.
func (t *Tracker) judge(gen Generation, istiod string, p ProxySync) Proxy {
	out := Proxy{Name: p.Name(), Type: p.Kind(), IstioVersion: p.IstioVersion, Istiod: istiod}
	lds, hasLDS := p.Resources[ListenerType]
	if hasLDS && !lds.SentTime.IsZero() {
		sent := lds.SentTime.UTC()
		out.Sent = &sent
	}
	var nacks, unacked []string
	for _, w := range watchedTypes {
		r, ok := p.Resources[w.url]
		if !ok {
			continue
		}
		if r.LastError != "" {
			nacks = append(nacks, w.short+": "+r.LastError)
		}
		if r.Sent != "" && r.Acked != r.Sent {
			unacked = append(unacked, w.short)
		}
	}
	switch {
	case len(nacks) > 0:
		out.State, out.Message = NACKed, truncate(strings.Join(nacks, "; "), MaxMessage)
		return out
	case hasLDS && !lds.SentTime.Before(gen.Since) && len(unacked) == 0:
		out.State = Synced
		return out
	}
	if t.now().Sub(gen.Since) < t.Timeout {
		out.State = Pending
		return out
	}
	out.State = Stale
	switch {
	case !hasLDS || lds.Sent == "":
		out.Message = "istiod has sent it no listeners"
	case lds.SentTime.Before(gen.Since):
		out.Message = fmt.Sprintf("no listeners sent since the set was written (last sent %s)", lds.SentTime.UTC().Format(time.RFC3339))
	default:
		out.Message = "not ACKed after " + t.Timeout.String() + ": " + strings.Join(unacked, ", ")
	}
	return out
}
