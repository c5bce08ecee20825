package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// coincidentRounds is how many edits TestDirectCoincidentPush makes, each
// with the unrelated EnvoyFilter applied at another offset before it.
const coincidentRounds = 10

// An unrelated EnvoyFilter (a hand-written one that Envoy takes alone)
// applied in the same instant as an edit that every gateway refuses with
// it: istiod pushes the unrelated change just before the edit reaches its
// store, or both in one push, and the gateways ACK the first and NACK the
// edit's. Under Direct with rollbackOn AllNACK, every round ends rolled
// back: the ACK of the unrelated push is never taken for the edit's. The
// unrelated EnvoyFilter is applied 0 to 180 ms before each edit (istiod's
// quiet period is 100 ms: before it both changes fall in one push, after
// it in two), at the real Envoy 1.40.0 and 1.39.3 gateways.
//
// On a quiet 2-core machine this did not reproduce the fault of the
// tracker before Delivering (40 rounds at 0 to 180 ms, all rolled back
// there too; the fault was seen under a full test run's load). The
// coincidence itself is pinned in pkg/rollout (TestCoincidentPushIsNotTheSets,
// TestPushInFlightWhenTheSetLands), which fail on that tracker.
func TestDirectCoincidentPush(t *testing.T) {
	ctx := setup(t)
	prune(ctx, t, nil)
	_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.DeleteOptions{})
	base := "downstream:\n  idleTimeout: 180\n" + gzipAbove(100)
	putConfig(ctx, t, base)
	startController(ctx, t, "--istiod-debug-url=http://"+istiod.HTTPAddr, "--rollout-timeout=15s")
	waitStatus(ctx, t, "the first set applied and taken", canaryBound, func(s *status.Status) bool {
		return s.State == status.Applied && s.Canary == nil && s.Rollout != nil && s.Rollout.Synced == 2
	})
	lastGood := func() string {
		cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return cm.Data[document.DataKey]
	}

	// The unrelated EnvoyFilter is written with one API call (kubectl's
	// own start would blur the offset).
	poison := poisonAfterRateLimit(t)
	y, err := poison.YAML()
	if err != nil {
		t.Fatal(err)
	}
	body, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	efs := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(poison.Metadata.Namespace)
	force := true
	t.Cleanup(func() { deleteObject(context.Background(), t, poison) })

	outcomes := map[string]int{}
	for i := range coincidentRounds {
		// Each round starts without the unrelated EnvoyFilter, on the last
		// good set, the previous round's restored set taken.
		deleteObject(ctx, t, poison)
		doc := base + fmt.Sprintf("localRateLimit:\n  maxTokens: %d\n  tokensPerFill: 1000\n  fillInterval: 1s\n", 1000+i)
		hash := decide.DocumentHash(map[string]string{document.DataKey: doc})
		offset := time.Duration(i) * 20 * time.Millisecond
		if _, err := efs.Patch(ctx, poison.Metadata.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "coincident-test", Force: &force}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(offset)
		putConfig(ctx, t, doc)
		outcome := ""
		waitStatus(ctx, t, fmt.Sprintf("round %d: a verdict", i), directBound, func(s *status.Status) bool {
			switch {
			case s.Canary != nil && s.Canary.Direct() && s.Canary.Document == hash && (s.Canary.Phase == canary.RolledBack || s.Canary.Phase == canary.Kept):
				outcome = string(s.Canary.Phase) + "/" + string(s.State)
			case lastGood() == doc:
				outcome = "taken/" + string(s.State)
			default:
				return false
			}
			return true
		})
		outcomes[outcome]++
		t.Logf("round %d, the unrelated EnvoyFilter %v before the edit: %s", i, offset, outcome)
		if outcome != string(canary.RolledBack)+"/"+string(status.RolledBack) {
			t.Errorf("round %d (the unrelated EnvoyFilter %v before the edit): %s, want RolledBack: an ACK of the unrelated push was taken for the edit's", i, offset, outcome)
			break
		}
		waitStatus(ctx, t, fmt.Sprintf("round %d: the restored set taken", i), directBound, func(s *status.Status) bool {
			return directPhase(doc, canary.RolledBack, status.RolledBack)(s) && s.Canary.Restored == canary.RestoredTaken
		})
	}
	t.Logf("outcomes of %d rounds: %v", coincidentRounds, outcomes)
}
