package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// The rollout status against real Envoys, one of them NACKing, is
// test/proxy's TestRolloutShowsRealNACK; the MCP test here uses these.

// rolloutBound is how long the status may take to show a proxy's answer:
// istiod's debounce, the tracker's 1 s poll and one status write.
const rolloutBound = 20 * time.Second

// waitRollout waits until the status ConfigMap's rollout satisfies cond.
func waitRollout(ctx context.Context, t *testing.T, what string, cond func(*rollout.Status) bool) *rollout.Status {
	t.Helper()
	st, err := cluster.WaitRollout(ctx, rolloutBound, cond)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return st
}
