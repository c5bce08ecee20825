package cli_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// nackMessage is longer than the table shows.
const nackMessage = "LDS: Error adding/updating listener(s) 0.0.0.0_8080: Didn't find a registered implementation for 'envoy.filters.http.compressor.zstd' with type URL: 'envoy.extensions.compression.zstd.compressor.v3.Zstd'"

func testRollout() *rollout.Status {
	since := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	sent := since.Add(2 * time.Second)
	return &rollout.Status{
		Version: "0123456789abcdef",
		Since:   since,
		Istiod: []rollout.Istiod{
			{Address: "10.0.0.5:15014", Proxies: 2},
			{Address: "10.0.0.6:15014", Error: "dial tcp 10.0.0.6:15014: connect: connection refused"},
		},
		Selected: 2, Synced: 1, NACKed: 1,
		Proxies: []rollout.Proxy{
			{Name: "istio-ingressgateway-7c9f8-abcde.istio-system", Type: "router", IstioVersion: "1.30.2", Istiod: "10.0.0.5:15014", State: rollout.NACKed, Message: nackMessage, Sent: &sent},
			{Name: "istio-ingressgateway-7c9f8-fghij.istio-system", Type: "router", IstioVersion: "1.31.1", Istiod: "10.0.0.5:15014", State: rollout.Synced, Sent: &sent},
		},
	}
}

// testStatus is a status as the controller writes it; rollout is left out
// when r is nil.
func testStatus(r *rollout.Status) *status.Status {
	st := status.New(status.Invalid)
	st.Message = "the document was rejected; the last good EnvoyFilters are kept"
	st.Errors = []status.Problem{
		{Path: "gzip.chunkSize", Line: 3, Message: "must be between 4096 and 65536, got 100"},
		{Path: "gizp", Line: 4, Message: `unknown item; did you mean "gzip"?`},
	}
	st.Sink = "kube"
	st.Admission = &status.Admission{Reason: "the ValidatingWebhookConfiguration globalconfig does not exist"}
	st.Applied = &status.AppliedSet{
		Hash: "0123456789abcdef", Time: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		EnvoyFilters: []status.EnvoyFilter{
			{Namespace: "istio-system", Name: "globalconfig-gzip", Item: "gzip"},
			{Namespace: "istio-system", Name: "globalconfig-zstd", Item: "zstd"},
		},
		Change: status.Change{Added: []string{}, Changed: []string{"gzip"}, Removed: []string{"brotli"}},
	}
	if r != nil {
		st.Rollout, st.RolloutSummary = r, r.Summary()
	}
	return st
}

// An item whose service has no cluster is listed as not in effect, with
// what that means for traffic, under the state.
func TestStatusTextNotInEffect(t *testing.T) {
	st := status.New(status.Applied)
	st.Message = "globalRateLimit is not in effect, its service (globalRateLimit.service) has no cluster at the proxies: no limit is enforced: every request passes unlimited (failureMode allow)"
	st.NotInEffect = []status.Problem{{Path: "globalRateLimit.service", Message: "no limit is enforced: every request passes unlimited (failureMode allow)"}}
	c, _ := statusCluster(t, st)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := "ConfigMap istio-system/global-config: Applied, but 1 item is not in effect\nmessage: globalRateLimit is not in effect, its service (globalRateLimit.service) has no cluster at the proxies: no limit is enforced: every request passes unlimited (failureMode allow)\n" +
		"not in effect:\n  globalRateLimit.service: no limit is enforced: every request passes unlimited (failureMode allow)\n"
	if !strings.HasPrefix(out, want) {
		t.Errorf("stdout:\n%s\nwant it to start:\n%s", out, want)
	}
}

// statusCluster is a cluster whose controller wrote st.
func statusCluster(t *testing.T, st *status.Status) (*cluster, string) {
	t.Helper()
	c := newCluster(t, liveDoc)
	text, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "global-config-status", Namespace: "istio-system"}, Data: map[string]string{status.Key: text}}
	if _, err := c.kube.CoreV1().ConfigMaps("istio-system").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, text
}

func TestStatusText(t *testing.T) {
	c, _ := statusCluster(t, testStatus(testRollout()))
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	t.Logf("$ globalconfig status\n%s", out)
	for _, want := range []string{
		"ConfigMap istio-system/global-config: Invalid\n",
		"message: the document was rejected; the last good EnvoyFilters are kept\n",
		"errors:\n  gzip.chunkSize: must be between 4096 and 65536, got 100 (config.yaml line 3)\n  gizp: unknown item; did you mean \"gzip\"? (config.yaml line 4)\n",
		"warnings: none\n",
		"admission: edits are not checked before they are saved: the ValidatingWebhookConfiguration globalconfig does not exist\n",
		"last change: changed gzip; removed brotli (set 0123456789abcdef applied 2026-03-01T10:00:00Z)\n",
		"ITEM   ENVOYFILTER                      LAST CHANGE\n",
		"gzip   istio-system/globalconfig-gzip   changed 2026-03-01T10:00:00Z\n",
		"zstd   istio-system/globalconfig-zstd   -\n",
		"rollout: 2 proxies: 1 NACKed, 1 Synced; 1 of 2 istiod unreachable\n",
		"NAME ", " TYPE ", " ISTIO ", " ISTIOD ", " STATE ", " MESSAGE\n",
		"istiod 10.0.0.6:15014 unreachable: dial tcp 10.0.0.6:15014: connect: connection refused\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	// The NACK row: the message cut to 100 characters.
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "NACKed") && strings.HasPrefix(l, "istio-ingressgateway") {
			row = l
		}
	}
	msg := row[strings.Index(row, "LDS: "):]
	if want := []rune(nackMessage)[:cli.MaxTableMessage-1]; msg != string(want)+"…" {
		t.Errorf("NACK message in the table %q", msg)
	}
}

// -o json prints the status object exactly as the controller wrote it.
func TestStatusJSON(t *testing.T) {
	c, stored := statusCluster(t, testStatus(testRollout()))
	code, out, errs := runIn(t, c, "status", "-o", "json")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !jsonEqual(t, out, stored) {
		t.Errorf("printed:\n%s\nstored:\n%s", out, stored)
	}
	st, err := status.Parse(out)
	if err != nil || st.Version != status.Version || st.Rollout == nil || st.Rollout.Proxies[0].Message != nackMessage {
		t.Errorf("%v: %+v", err, st)
	}
	code, out, _ = runIn(t, c, "status", "-o", "yaml")
	if code != cli.ExitOK || !strings.Contains(out, "state: Invalid\n") || !strings.Contains(out, "  - istioVersion: 1.30.2\n") {
		t.Errorf("exit %d, yaml:\n%s", code, out)
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%v\n%s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

func TestStatusRolloutNotTracked(t *testing.T) {
	c, _ := statusCluster(t, testStatus(nil))
	code, out, _ := runIn(t, c, "status")
	if code != cli.ExitOK || !strings.HasSuffix(out, "\n"+cli.RolloutNotTracked+"\n") {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}
	_, out, _ = runIn(t, c, "status", "-o", "json")
	if strings.Contains(out, `"rollout"`) {
		t.Errorf("json:\n%s", out)
	}
}

// A status of another version (a newer controller's) is refused, not
// misread.
func TestStatusOtherVersion(t *testing.T) {
	c := newCluster(t, liveDoc)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "global-config-status", Namespace: "istio-system"},
		Data: map[string]string{status.Key: `{"version": 4, "state": "Applied"}`}}
	if _, err := c.kube.CoreV1().ConfigMaps("istio-system").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runIn(t, c, "status", "-o", "json")
	if code != cli.ExitNoStatus || out != "" || !strings.Contains(errs, "version 4, this globalconfig reads versions 1 to 3") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// A Direct rollout the proxies refused reads as such: how it ended,
// Envoy's words, and the proxies that refused it.
func TestStatusTextDirectRollBack(t *testing.T) {
	st := testStatus(nil)
	st.State, st.Message, st.Errors = status.RolledBack, "the proxies refused the change (NACK), so every proxy was given the last good set again; the document is rejected until it changes",
		[]status.Problem{{Message: "rolled back: proxy gw-a.istio-system rejected the change: " + nackMessage}}
	ended := time.Date(2026, 3, 1, 10, 0, 3, 0, time.UTC)
	st.Canary = &canary.Record{Strategy: canary.Direct, Phase: canary.RolledBack, Document: "5c7c56257774ce87", From: "484b302941a65608", To: "8394baeae7844241",
		Items: []string{"localRateLimit"}, RollbackOn: canary.AllNACK, Started: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), Ended: &ended,
		Message: "proxy gw-a.istio-system rejected the change: " + nackMessage + "; every proxy that answered NACKed, 1 of 1 (rollbackOn AllNACK)",
		NACKs:   []canary.Answer{{Name: "gw-a.istio-system", State: canary.StateNACKed, Message: nackMessage}}}
	c, _ := statusCluster(t, st)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	t.Logf("$ globalconfig status\n%s", out)
	for _, want := range []string{
		"ConfigMap istio-system/global-config: RolledBack\n",
		"direct rollout: RolledBack (document 5c7c56257774ce87, set 484b302941a65608 → 8394baeae7844241): localRateLimit to every proxy at once (rollbackOn AllNACK); delivered 2026-03-01T10:00:00Z\n",
		"  RolledBack 2026-03-01T10:00:03Z: proxy gw-a.istio-system rejected the change: LDS: ",
		"  waiting for the proxies' answer to the restored last good set\n",
		"  REFUSED BY          MESSAGE\n  gw-a.istio-system   LDS: Error adding/updating listener(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if strings.Contains(out, "canary rollout") || strings.Contains(out, "bake time") {
		t.Error("a Direct rollout shown as a canary one")
	}
}

func TestStatusMissing(t *testing.T) {
	c := newCluster(t, liveDoc)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitNoStatus || code <= 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errs, cli.NoStatusMessage) || !strings.Contains(errs, "istio-system/global-config-status") {
		t.Errorf("stderr %q", errs)
	}
	if code, _, errs := runIn(t, c, "status", "--configmap", "other/cm", "-o", "json"); code != cli.ExitNoStatus || !strings.Contains(errs, "other/cm-status") {
		t.Errorf("--configmap: exit %d, stderr %q", code, errs)
	}
}

func TestStatusUsage(t *testing.T) {
	c, _ := statusCluster(t, testStatus(nil))
	for _, args := range [][]string{{"status", "extra"}, {"status", "-o", "wide"}, {"status", "--configmap", "x"}, {"status", "--nope"}} {
		if code, _, _ := runIn(t, c, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}

// fleetRollout is the rollout of a fleet past rollout.ListAll: the status
// lists only its NACKed proxy, and counts the rest.
func fleetRollout() *rollout.Status {
	r := testRollout()
	r.Selected, r.Synced, r.NACKed = 1000, 999, 1
	r.Proxies = r.Proxies[:1]
	r.Unlisted = 999
	r.Silent = []rollout.Silent{{Name: "app-1.team-1", Type: "sidecar", LastSeen: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}}
	return r
}

// --state and --proxy list only the proxies asked for, and say what the
// status leaves out of them.
func TestStatusFilters(t *testing.T) {
	c, _ := statusCluster(t, testStatus(fleetRollout()))
	nacked := "istio-ingressgateway-7c9f8-abcde.istio-system"

	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || !strings.Contains(out, "… and 999 more proxies not listed (of more than 50 proxies the status lists only those that need attention") {
		t.Errorf("status of a fleet: exit %d, does not say why 999 proxies are not listed:\n%s", code, out)
	}

	code, out, errs = runIn(t, c, "status", "--state", "nacked")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("--state nacked: exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(out, nacked) || strings.Contains(out, "app-1.team-1") || strings.Contains(out, "more proxies not listed") {
		t.Errorf("--state nacked lists the wrong proxies:\n%s", out)
	}
	if !strings.Contains(out, "rollout: 1000 proxies: 1 NACKed, 999 Synced; 1 silent; 1 of 2 istiod unreachable\n") {
		t.Errorf("--state cut the counts:\n%s", out)
	}

	code, out, _ = runIn(t, c, "status", "--state", "Synced")
	if code != cli.ExitOK || strings.Contains(out, nacked) {
		t.Errorf("--state Synced: exit %d, lists the NACKed proxy:\n%s", code, out)
	}
	if !strings.Contains(out, "0 of 999 Synced proxies listed (of more than 50 proxies the status lists only those that need attention") {
		t.Errorf("--state Synced does not say why none is listed:\n%s", out)
	}

	code, out, _ = runIn(t, c, "status", "--state", "Silent")
	if code != cli.ExitOK || !strings.Contains(out, "silent: sidecar app-1.team-1") || strings.Contains(out, nacked) {
		t.Errorf("--state Silent: exit %d:\n%s", code, out)
	}

	code, out, _ = runIn(t, c, "status", "--proxy", nacked)
	if code != cli.ExitOK || !strings.Contains(out, nacked) || strings.Contains(out, "app-1.team-1") {
		t.Errorf("--proxy %s: exit %d:\n%s", nacked, code, out)
	}

	code, out, _ = runIn(t, c, "status", "--proxy", "istio-ingressgateway-7c9f8-zzzzz.istio-system")
	if code != cli.ExitNoProxy || !strings.Contains(out, "proxy istio-ingressgateway-7c9f8-zzzzz.istio-system is not in the status (of more than 50 proxies") {
		t.Errorf("--proxy of an unlisted proxy: exit %d, want %d:\n%s", code, cli.ExitNoProxy, out)
	}

	code, out, errs = runIn(t, c, "status", "--proxy", nacked, "-o", "json")
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); code != cli.ExitOK || err != nil || len(st.Rollout.Proxies) != 1 || len(st.Rollout.Silent) != 0 || st.Rollout.Selected != 1000 {
		t.Errorf("--proxy -o json: exit %d, %v, stderr %q:\n%s", code, err, errs, out)
	}

	if code, _, errs = runIn(t, c, "status", "--state", "Happy"); code != cli.ExitUsage || !strings.Contains(errs, "want one of NACKed, Stale, Pending, Synced, Silent, Unconnected") {
		t.Errorf("--state Happy: exit %d, stderr %q", code, errs)
	}
}

// --cluster lists what belongs to one config cluster: its entry, its
// istiods and proxies; an unknown name exits naming the clusters listed.
func TestStatusClusterFilter(t *testing.T) {
	r := testRollout()
	since := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	r.Proxies = []rollout.Proxy{
		{Name: "gw-a.istio-system", Type: "gateway", Istiod: "http://10.0.0.1:8080", State: rollout.Synced, Cluster: "a"},
		{Name: "gw-b.istio-system", Type: "gateway", Istiod: "http://10.0.1.1:8080", State: rollout.NACKed, Message: "LDS: refused", Cluster: "b"},
	}
	r.Istiod = []rollout.Istiod{{Address: "http://10.0.0.1:8080", Proxies: 1, Cluster: "a"}, {Address: "http://10.0.1.1:8080", Proxies: 1, Cluster: "b"}}
	r.Clusters = []rollout.ClusterCount{{Name: "a", Istiod: 1, Selected: 1, Synced: 1}, {Name: "b", Istiod: 1, Selected: 1, NACKed: 1}}
	r.Selected, r.Synced, r.NACKed, r.Pending, r.Stale = 2, 1, 1, 0, 0
	st := testStatus(r)
	st.Clusters = []status.Cluster{
		{Name: "a", Home: true, Reachable: true, Set: st.Applied.Hash, Objects: 2, Since: &since},
		{Name: "b", Secret: "istio-system/globalconfig-member-b", Error: "apply envoyfilter istio-system/x: forbidden"},
	}
	c, _ := statusCluster(t, st)

	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || !strings.Contains(out, "a (home)") || !strings.Contains(out, "istio-system/globalconfig-member-b") || !strings.Contains(out, "forbidden") {
		t.Errorf("status: exit %d, stderr %q, no clusters table:\n%s", code, errs, out)
	}
	code, out, _ = runIn(t, c, "status", "--cluster", "b", "-o", "json")
	var got status.Status
	if err := json.Unmarshal([]byte(out), &got); code != cli.ExitOK || err != nil {
		t.Fatalf("--cluster b -o json: exit %d, %v:\n%s", code, err, out)
	}
	if len(got.Clusters) != 1 || got.Clusters[0].Name != "b" || len(got.Rollout.Proxies) != 1 || got.Rollout.Proxies[0].Name != "gw-b.istio-system" ||
		len(got.Rollout.Istiod) != 1 || len(got.Rollout.Clusters) != 1 || got.Rollout.Selected != 2 {
		t.Errorf("--cluster b kept the wrong entries: clusters %+v, proxies %+v, istiod %+v, counts %+v (selected %d)",
			got.Clusters, got.Rollout.Proxies, got.Rollout.Istiod, got.Rollout.Clusters, got.Rollout.Selected)
	}
	code, _, errs = runIn(t, c, "status", "--cluster", "c")
	if code != cli.ExitNoProxy || !strings.Contains(errs, "no such cluster; the status lists a, b") {
		t.Errorf("--cluster c: exit %d, stderr %q", code, errs)
	}
}
