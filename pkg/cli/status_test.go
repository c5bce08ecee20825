package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/rollout"
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

// statusCluster is a cluster whose controller wrote status; rollout is
// left out when r is nil.
func statusCluster(t *testing.T, r *rollout.Status) *cluster {
	t.Helper()
	c := newCluster(t, liveDoc)
	data := map[string]string{
		"state":           "Invalid",
		"message":         "the document was rejected; the last good EnvoyFilters are kept",
		"errors":          "gzip.chunkSize: must be between 4096 and 65536, got 100 (config.yaml line 3)\ngizp: unknown item; did you mean \"gzip\"? (config.yaml line 4)",
		"warnings":        "",
		"lastChange":      "changed gzip; removed brotli",
		"lastChangeItems": `{"added":[],"changed":["gzip"],"removed":["brotli"]}`,
		"lastAppliedTime": "2026-03-01T10:00:00Z",
		"lastAppliedHash": "0123456789abcdef",
		"envoyFilters":    "istio-system/globalconfig-gzip\nistio-system/globalconfig-zstd",
	}
	if r != nil {
		text, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		data[rollout.StatusKey], data[rollout.SummaryKey] = text, r.Summary()
	}
	st := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "global-config-status", Namespace: "istio-system"}, Data: data}
	if _, err := c.kube.CoreV1().ConfigMaps("istio-system").Create(context.Background(), st, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStatusText(t *testing.T) {
	c := statusCluster(t, testRollout())
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
	if strings.Contains(out, "theirs") {
		t.Error("an EnvoyFilter globalconfig doesn't own is listed")
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

func TestStatusJSON(t *testing.T) {
	c := statusCluster(t, testRollout())
	code, out, errs := runIn(t, c, "status", "-o", "json")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var rep cli.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.State != "Invalid" || !rep.ConfigMapFound || len(rep.Errors) != 2 || len(rep.Warnings) != 0 ||
		rep.LastChange != "changed gzip; removed brotli" || rep.LastAppliedHash != "0123456789abcdef" || rep.LastAppliedTime != "2026-03-01T10:00:00Z" {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Items) != 2 || rep.Items[0] != (cli.StatusItem{Item: "gzip", EnvoyFilter: "globalconfig-gzip", Namespace: "istio-system", Change: "changed"}) ||
		rep.Items[1].Item != "zstd" || rep.Items[1].Change != "" {
		t.Errorf("items %+v", rep.Items)
	}
	r := rep.Rollout
	if r == nil || r.NACKed != 1 || len(r.Proxies) != 2 || r.Proxies[0].Message != nackMessage || len(r.Unreachable()) != 1 ||
		rep.RolloutSummary != "2 proxies: 1 NACKed, 1 Synced; 1 of 2 istiod unreachable" {
		t.Errorf("rollout %+v", r)
	}
	if !strings.Contains(out, `"warnings": []`) || !strings.Contains(out, `"nacked": 1`) {
		t.Errorf("json:\n%s", out)
	}
	code, out, _ = runIn(t, c, "status", "-o", "yaml")
	if code != cli.ExitOK || !strings.Contains(out, "state: Invalid\n") || !strings.Contains(out, "  - istioVersion: 1.30.2\n") {
		t.Errorf("exit %d, yaml:\n%s", code, out)
	}
}

func TestStatusRolloutNotTracked(t *testing.T) {
	c := statusCluster(t, nil)
	code, out, _ := runIn(t, c, "status")
	if code != cli.ExitOK || !strings.HasSuffix(out, "\n"+cli.RolloutNotTracked+"\n") {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}
	_, out, _ = runIn(t, c, "status", "-o", "json")
	if !strings.Contains(out, `"rollout": null`) {
		t.Errorf("json:\n%s", out)
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
	c := statusCluster(t, nil)
	for _, args := range [][]string{{"status", "extra"}, {"status", "-o", "wide"}, {"status", "--configmap", "x"}, {"status", "--nope"}} {
		if code, _, _ := runIn(t, c, args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}
