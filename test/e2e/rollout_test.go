package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The rollout status against real Envoys, one of them NACKing, is
// test/proxy's TestRolloutShowsRealNACK; the MCP test here uses these.

// rolloutBound is how long the status may take to show a proxy's answer:
// istiod's debounce, the tracker's 1 s poll and one status write.
const rolloutBound = 20 * time.Second

// waitRollout waits until the status ConfigMap's rollout satisfies cond.
func waitRollout(ctx context.Context, t *testing.T, what string, cond func(*rollout.Status) bool) *rollout.Status {
	t.Helper()
	var last *rollout.Status
	var lastErr error
	ok := harness.Eventually(ctx, rolloutBound, func() bool {
		cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, controller.StatusName("global-config"), metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false
		}
		text, ok := cm.Data[rollout.StatusKey]
		if !ok {
			lastErr = errors.New("no rollout key yet; summary: " + cm.Data[rollout.SummaryKey])
			return false
		}
		st, err := rollout.Parse(text)
		if err != nil {
			lastErr = err
			return false
		}
		last, lastErr = st, nil
		return st.Version == cm.Data["lastAppliedHash"] && cond(st)
	})
	if !ok {
		t.Fatalf("%s: not within %v (last status %+v, error %v)", what, rolloutBound, last, lastErr)
	}
	return last
}

func proxyOf(st *rollout.Status, name string) rollout.Proxy {
	for _, p := range st.Proxies {
		if p.Name == name {
			return p
		}
	}
	return rollout.Proxy{}
}

func state(st *rollout.Status, name string) rollout.State { return proxyOf(st, name).State }
