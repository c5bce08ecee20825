package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

func canaryStatus(phase canary.Phase) *status.Status {
	st := testStatus(testRollout())
	st.State, st.Errors, st.Message = status.Canary, []status.Problem{}, ""
	st.Canary = &canary.Record{
		Phase: phase, Document: "5c7c56257774ce87", From: "484b302941a65608", To: "8394baeae7844241",
		Items: []string{"gzip"}, Label: canary.DefaultLabel, Needed: "100%", BakeTime: "1m0s",
		Started:  time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		Canaries: []canary.Answer{{Name: "gw-canary-0.istio-system", State: "NACKed", Message: nackMessage}, {Name: "gw-canary-1.istio-system", State: "Synced", Received: true}},
	}
	if phase != canary.InCanary {
		ended := st.Canary.Started.Add(5 * time.Second)
		st.Canary.Ended, st.Canary.Message = &ended, "canary gw-canary-0.istio-system rejected the change: "+nackMessage
	}
	return st
}

func TestStatusShowsTheCanary(t *testing.T) {
	c, _ := statusCluster(t, canaryStatus(canary.RolledBack))
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	t.Logf("$ globalconfig status\n%s", out)
	for _, want := range []string{
		"canary rollout: RolledBack (document 5c7c56257774ce87, set 484b302941a65608 → 8394baeae7844241): gzip to proxies labelled globalconfig.io/canary=true first; bake time 1m0s, 100% must ACK with the canary copy; started 2026-03-01T10:00:00Z\n",
		"  RolledBack 2026-03-01T10:00:05Z: canary gw-canary-0.istio-system rejected the change: LDS:",
		"CANARY ", " STATE ", " RECEIVED ", "gw-canary-0.istio-system   NACKed   no         LDS:", "gw-canary-1.istio-system   Synced   yes        -\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if strings.Contains(out, "rollout promote") {
		t.Error("an ended rollout offers promote")
	}
}

func TestStatusShowsSilentProxies(t *testing.T) {
	r := testRollout()
	r.Silent = []rollout.Silent{{Name: "gw-gone.istio-system", Type: "gateway", LastSeen: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}}
	c, _ := statusCluster(t, testStatus(r))
	code, out, _ := runIn(t, c, "status")
	if want := "silent: gateway gw-gone.istio-system, no istiod reports it since 2026-03-01T10:00:00Z ("; code != cli.ExitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d, stdout lacks %q:\n%s", code, want, out)
	}
}

func TestRolloutPromoteAndAbort(t *testing.T) {
	for _, action := range []canary.Action{canary.ActionPromote, canary.ActionAbort} {
		st := canaryStatus(canary.InCanary)
		c, _ := statusCluster(t, st)
		code, out, errs := runIn(t, c, "rollout", string(action))
		if code != cli.ExitOK || errs != "" {
			t.Fatalf("%s: exit %d, stderr %q", action, code, errs)
		}
		if !strings.Contains(out, "document 5c7c56257774ce87 (gzip)") {
			t.Errorf("%s: stdout %q", action, out)
		}
		cm, err := c.kube.CoreV1().ConfigMaps("istio-system").Get(context.Background(), "global-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := cm.Annotations[canary.AnnotationAction]
		if st.Canary.Requested(got) != action {
			t.Errorf("%s: annotation %q asks %q of the rollout", action, got, st.Canary.Requested(got))
		}
		// The same document rolled out again later is another rollout.
		later := *st.Canary
		later.Started = later.Started.Add(time.Hour)
		if a := later.Requested(got); a != "" {
			t.Errorf("%s: the request carries over to a later rollout: %q", action, a)
		}
	}
	// Nothing to promote.
	c, _ := statusCluster(t, canaryStatus(canary.RolledBack))
	if code, _, errs := runIn(t, c, "rollout", "promote"); code != cli.ExitNoRollout || !strings.Contains(errs, "no canary phase in progress (the last one was RolledBack)") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
	c, _ = statusCluster(t, testStatus(nil))
	if code, _, errs := runIn(t, c, "rollout", "abort"); code != cli.ExitNoRollout || !strings.Contains(errs, "(no canary rollout)") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runIn(t, c, "rollout", "pause"); code != cli.ExitUsage || !strings.Contains(errs, "promote") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// A held phase says why, a promotion is watched until confirmed, the
// traffic gate's figures are shown, and a long list of canaries is cut for
// the table but counted.
func TestStatusShowsHeldAndTraffic(t *testing.T) {
	st := canaryStatus(canary.Held)
	st.State, st.Canary.Ended, st.Canary.Message = status.Held, nil, ""
	st.Canary.Waiting = "the canary phase can't start: gzip reaches sidecars, and no canary is one (rollout.coverage Variants)"
	st.Canary.Canaries = nil
	c, _ := statusCluster(t, st)
	_, out, _ := runIn(t, c, "status")
	for _, want := range []string{"ConfigMap istio-system/global-config: Held\n", "  held: the canary phase can't start: gzip reaches sidecars"} {
		if !strings.Contains(out, want) {
			t.Errorf("held: stdout lacks %q:\n%s", want, out)
		}
	}
	st = canaryStatus(canary.Promoted)
	st.Canary.Traffic = &canary.Traffic{Since: st.Canary.Started, Canary: canary.Figures{Proxies: 1, Read: 1, Requests: 240, LocalReplies: 120},
		Stable: canary.Figures{Proxies: 1, Read: 1, Requests: 250}, Verdict: "local replies: the canaries' share 50.0%", Failed: true}
	for i := range 25 {
		st.Canary.Canaries = append(st.Canary.Canaries, canary.Answer{Name: fmt.Sprintf("gw-more-%02d.istio-system", i), State: "Synced", Received: true})
	}
	c, _ = statusCluster(t, st)
	_, out, _ = runIn(t, c, "status")
	for _, want := range []string{"watching every proxy's answer to the promoted set", "traffic since 2026-03-01T10:00:00Z: canaries 240 requests (1 of 1 proxies read), 0 5xx, 120 local replies",
		"  traffic: local replies: the canaries' share 50.0%", "… and 7 more canaries, every one judged"} {
		if !strings.Contains(out, want) {
			t.Errorf("traffic: stdout lacks %q:\n%s", want, out)
		}
	}
}
