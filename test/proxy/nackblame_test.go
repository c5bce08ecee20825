package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

// blameBound is how long a Direct change the proxies refuse may take to
// be decided with the blame: directBound, and the blame itself (well
// under a second for these gateways).
const blameBound = directBound + 15*time.Second

// eventsSince are the messages of the global ConfigMap's Events of type
// and reason last seen at or after since, to the second (the API server's
// clock is this machine's; an Event's time has whole seconds).
func eventsSince(ctx context.Context, t *testing.T, since time.Time, eventType, reason string) []string {
	t.Helper()
	list, err := cluster.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if e.Reason == reason && e.Type == eventType && e.InvolvedObject.Name == harness.ConfigMapName && !last.Before(since.Truncate(time.Second)) {
			out = append(out, e.Message)
		}
	}
	return out
}

// anyContains reports whether one of msgs contains every part.
func anyContains(msgs []string, parts ...string) bool {
	for _, m := range msgs {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(m, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// The controller run with --envoy (and no webhook) names the EnvoyFilter
// real gateways of Envoy 1.40 and 1.39 refuse, through a real istiod, and
// Direct decides with it. Once with each release's binary: the controller
// blames the refusing gateway of that release.
//
//  1. A team's EnvoyFilter (priority 100) inserts a health check Envoy
//     refuses after globalconfig's local_ratelimit filter, applied while
//     localRateLimit is off; the edit that turns it on is NACKed by both
//     gateways, blamed as the combination, and rolled back, the status
//     and the Events naming the team's EnvoyFilter as the other half; the
//     gateways ACK the restored set.
//  2. A team's EnvoyFilter Envoy refuses on its own, then an unrelated
//     globalconfig change: the blame names only the team's EnvoyFilter,
//     and the change is kept, not rolled back, the status saying why.
func TestNACKBlameDecidesDirect(t *testing.T) {
	ctx := setup(t)
	for _, judge := range gateways {
		t.Run("envoy-"+judge.Binary.Version, func(t *testing.T) {
			freshStart(ctx, t)
			base := "downstream:\n  idleTimeout: 180\n"
			startFirst(ctx, t, base, "--envoy="+judge.Binary.Path)
			blamed := judge.proxyName()
			user := "istio-system/user-anchored-healthcheck (not managed by globalconfig)"

			t.Run("a combination with ours is rolled back, naming the other half", func(t *testing.T) {
				anchored := userAnchoredHealthCheck(t)
				if err := cluster.Apply(ctx, anchored); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { deleteObject(context.Background(), t, anchored) })
				var ours string
				for _, o := range rendered(t, blameLimitDoc) {
					if o.Item() == "localRateLimit" {
						ours = o.Metadata.Namespace + "/" + o.Metadata.Name
					}
				}
				combination := "the combination of " + user + " and globalconfig's localRateLimit (" + ours + ")"
				doc := base + blameLimitDoc
				edited := time.Now()
				putConfig(ctx, t, doc)
				// Before the decision, the status may show the blame
				// pending (it is not asserted: the blame is quick).
				var sawPending bool
				s := waitStatus(ctx, t, "the roll back", blameBound, func(s *status.Status) bool {
					for _, b := range s.Blame {
						sawPending = sawPending || b.Outcome == status.BlamePending
					}
					return directPhase(doc, canary.RolledBack, status.RolledBack)(s)
				})
				t.Logf("rolled back %v after the edit (the blame seen pending: %v): %s", time.Since(edited).Round(time.Millisecond), sawPending, s.Canary.Message)
				half := "the proxies refuse " + combination + ": globalconfig's change fails together with " + user + " (the other half of the fault)"
				if !strings.Contains(s.Canary.Message, half) || !strings.Contains(s.Canary.Message, "cache_time_ms must not be set") ||
					len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Message, half) {
					t.Errorf("record message %q, errors %+v: want %q", s.Canary.Message, s.Errors, half)
				}
				if !harness.Eventually(ctx, rolloutBound, func() bool {
					return anyContains(eventsSince(ctx, t, edited, corev1.EventTypeWarning, "NACKBlamed"), "gateway "+blamed+" refuses "+combination,
						"globalconfig's change fails together with "+user, "cache_time_ms must not be set")
				}) {
					t.Errorf("no NACKBlamed Event for %s naming the combination: %q", blamed, eventsSince(ctx, t, edited, corev1.EventTypeWarning, "NACKBlamed"))
				}
				if !anyContains(eventsSince(ctx, t, edited, corev1.EventTypeWarning, "RolledBack"), "localRateLimit rolled back on every proxy", half) {
					t.Errorf("no RolledBack Event naming the other half: %q", eventsSince(ctx, t, edited, corev1.EventTypeWarning, "RolledBack"))
				}
				// The restored set loads: both gateways ACK it.
				s = waitStatus(ctx, t, "the restored set taken", directBound, func(s *status.Status) bool {
					return directPhase(doc, canary.RolledBack, status.RolledBack)(s) && s.Canary.Restored == canary.RestoredTaken
				})
				if s.Rollout == nil || s.Rollout.Synced != 2 || s.Rollout.NACKed != 0 {
					t.Errorf("the restored set: rollout %s", s.RolloutSummary)
				}
				for _, g := range gateways {
					if hasHTTPFilter(ctx, t, g, envoyfilter.LocalRateLimit) || len(listenerErrors(ctx, t, g)) != 0 {
						t.Errorf("gateway %s (Envoy %s) is not on the restored set", g.name, g.Binary.Version)
					}
				}
				out := statusText(t)
				t.Logf("$ globalconfig status\n%s", out)
				if !strings.Contains(out, "RolledBack") || !strings.Contains(out, "together with "+user) {
					t.Errorf("globalconfig status does not name the other half")
				}
			})

			t.Run("a user's EnvoyFilter alone: the change is kept", func(t *testing.T) {
				broken := userBrokenHealthCheck(t)
				if err := cluster.Apply(ctx, broken); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { deleteObject(context.Background(), t, broken) })
				brokenName := "istio-system/user-broken-healthcheck (not managed by globalconfig)"
				doc := base + gzipAbove(100)
				edited := time.Now()
				putConfig(ctx, t, doc)
				s := waitStatus(ctx, t, "the change kept on the blame", blameBound, directPhase(doc, canary.Kept, status.NACKed))
				t.Logf("kept %v after the edit: %s", time.Since(edited).Round(time.Millisecond), s.Message)
				why := "proxies refuse " + brokenName + " on its own: rolling back globalconfig's change would not help"
				if !strings.HasPrefix(s.Canary.Message, why) || !strings.HasPrefix(s.Message, why) || s.Canary.Restored != "" || len(s.Errors) != 0 {
					t.Errorf("status message %q, record %+v: want %q, never rolled back", s.Message, s.Canary, why)
				}
				if strings.Contains(s.Canary.Message, "globalconfig's gzip") || strings.Contains(s.Canary.Message, " and globalconfig's ") {
					t.Errorf("the blame names globalconfig's EnvoyFilter: %q", s.Canary.Message)
				}
				var b *status.Blame
				for i := range s.Blame {
					if s.Blame[i].Proxy == blamed {
						b = &s.Blame[i]
					}
				}
				if b == nil || b.Outcome != status.BlameBlamed || len(b.Faults) != 1 || len(b.Faults[0].Culprits) != 1 ||
					b.Faults[0].Culprits[0].Name != "user-broken-healthcheck" || b.Faults[0].Culprits[0].Managed || b.Envoy != judge.Binary.Version || b.Runs == 0 {
					t.Errorf("the status's blame %+v: want %s blamed on the user's EnvoyFilter alone, by Envoy %s", s.Blame, blamed, judge.Binary.Version)
				} else {
					t.Logf("the blame of %s by Envoy %s: %d runs in %s", blamed, b.Envoy, b.Runs, b.Elapsed)
				}
				// The last good copy is written after the status.
				if !harness.Eventually(ctx, rolloutBound, func() bool {
					cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, controller.LastGoodName(harness.ConfigMapName), metav1.GetOptions{})
					return err == nil && cm.Data[document.DataKey] == doc
				}) {
					t.Errorf("the kept document is not the last good one")
				}
				if !anyContains(eventsSince(ctx, t, edited, corev1.EventTypeWarning, "KeptDespiteNACK"), why) {
					t.Errorf("no KeptDespiteNACK Event saying why: %q", eventsSince(ctx, t, edited, corev1.EventTypeWarning, "KeptDespiteNACK"))
				}
				if n := eventsSince(ctx, t, edited, corev1.EventTypeWarning, "RolledBack"); anyContains(n, "gzip rolled back") {
					t.Errorf("rolled back: %q", n)
				}
				out := statusText(t)
				t.Logf("$ globalconfig status\n%s", out)
				if !strings.Contains(out, "blame of the NACK (gateway "+blamed) || !strings.Contains(out, brokenName) || !strings.Contains(out, "never rolled back") {
					t.Errorf("globalconfig status does not show the blame")
				}
			})
		})
	}
}
