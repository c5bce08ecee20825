package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// rolloutSeen is what the rollout reports already announced.
type rolloutSeen struct {
	version string
	// nacks are proxy → message of the NACKs announced for version.
	nacks map[string]string
	// unreachable is the sorted list of istiod addresses last reported
	// unreachable.
	unreachable string
}

// WaitingForIstiod is the rollout summary until istiod first answers for
// the current set.
const WaitingForIstiod = "waiting for istiod's sync status"

// reportRollout hands the applied set to the rollout tracker and puts the
// tracker's latest status into status, Events and metrics. It never
// waits: the tracker polls on its own and enqueues a sync when its status
// changes.
func (c *Controller) reportRollout(cm *corev1.ConfigMap, st *status.Status) {
	t := c.cfg.Rollout
	if t == nil || c.st.applied == nil || st.Applied == nil {
		return
	}
	hash := st.Applied.Hash
	// With members, each cluster is judged against its own part: what
	// target.clusters and a rollout across clusters give it.
	clusters := c.clusterGeneration(c.st.applied.Set)
	if hash != t.Version() || clusters != nil {
		label := c.canaryLabel()
		t.Track(rollout.Generation{Version: hash, Since: st.Applied.Time, Scope: rollout.ScopeOf(c.st.applied.Set, c.cfg.RootNamespace),
			Contents: rollout.ContentsOf(c.st.applied.Set), Label: label, Markers: label != "" && (c.st.applied.Source == decide.Canary || c.stageCanaries()),
			Clusters: clusters})
	}
	r := t.Status()
	if r == nil || r.Version != hash {
		st.RolloutSummary = WaitingForIstiod
		return
	}
	st.Blame = c.blames(r)
	r = r.Written(c.scrub) // a copy: the tracker's status is shared
	st.Rollout, st.RolloutSummary = r, r.Summary()
	c.announceBlames(cm, st.Blame)
	for _, s := range rollout.States {
		c.metrics.RolloutProxies.WithLabelValues(string(s)).Set(float64(r.Count(s)))
	}
	unreachable := r.Unreachable()
	c.metrics.IstiodUnreachable.Set(float64(len(unreachable)))
	c.announceRollout(cm, r, unreachable)
}

// announceRollout records a Warning Event for every proxy that NACKed the
// current set (once per proxy and message) and whenever the set of
// unreachable istiod instances changes.
func (c *Controller) announceRollout(cm *corev1.ConfigMap, st *rollout.Status, unreachable []rollout.Istiod) {
	seen := &c.st.rollout
	if seen.version != st.Version {
		seen.version, seen.nacks = st.Version, map[string]string{}
	}
	for _, p := range st.Proxies {
		if p.State != rollout.NACKed || seen.nacks[p.Name] == p.Message {
			continue
		}
		seen.nacks[p.Name] = p.Message
		c.event(cm, corev1.EventTypeWarning, "ProxyRejected", "%s %s (Istio %s, via %s) rejected the EnvoyFilters of set %s: %s",
			p.Type, p.Name, p.IstioVersion, p.Istiod, st.Version, p.Message)
	}
	var addrs []string
	for _, u := range unreachable {
		addrs = append(addrs, u.Address+": "+u.Error)
	}
	slices.Sort(addrs)
	if now := strings.Join(addrs, "; "); now != seen.unreachable {
		seen.unreachable = now
		if now != "" {
			c.event(cm, corev1.EventTypeWarning, "IstiodUnreachable", "rollout status unknown for %s: %s", plural(len(addrs), "one istiod", fmt.Sprintf("%d istiod instances", len(addrs))), now)
		}
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
