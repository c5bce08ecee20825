package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// rolloutBound is how long the status may take to show a proxy's answer:
// istiod's debounce, the tracker's 1 s poll and one status write.
const rolloutBound = 20 * time.Second

// gzipName is what the NACKing gateway "cannot load".
const gzipName = "envoy.filters.http.compressor.gzip"

// rejectGzip NACKs listeners that carry the gzip compressor, as an Envoy
// built without it would.
func rejectGzip(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != xds.ListenerType {
		return nil
	}
	for _, r := range resp.GetResources() {
		if bytes.Contains(r.GetValue(), []byte(gzipName)) {
			return fmt.Errorf("Error adding/updating listener(s) %s: Didn't find a registered implementation for '%s'", listenerName, gzipName)
		}
	}
	return nil
}

// Two gateways, one that takes the set and one that rejects it: the
// status shows the first Synced and the second NACKed with Envoy's
// message within a bounded time, with a Warning Event; of two istiod
// instances, the one that does not answer is reported unreachable.
func TestRolloutAckAndNack(t *testing.T) {
	ctx := setup(t)
	_, port, err := net.SplitHostPort(istiod.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	putConfig(ctx, t, "gzip:\n  enable: false\ndownstream:\n  idleTimeout: 180\n")
	good := dialGateway(ctx, t, "10.1.3.1", xds.Options{})
	bad := dialGateway(ctx, t, "10.1.3.2", xds.Options{Reject: rejectGzip})
	goodName, badName := "gw-10-1-3-1."+ns, "gw-10-1-3-2."+ns

	// Two istiod instances: the real one, and one that does not answer
	// (the Service's endpoints are the same list, found by
	// test/integration's TestRolloutFindsIstiodInstances; an EndpointSlice
	// can't name a loopback address).
	ctl := startController(ctx, t, "--istiod-debug-url=http://127.0.0.1:"+port+",http://127.0.0.2:"+port, "--rollout-timeout=15s")
	first := waitRollout(ctx, t, "both gateways take the first set", func(st *rollout.Status) bool {
		return state(st, goodName) == rollout.Synced && state(st, badName) == rollout.Synced
	})

	start := time.Now()
	putConfig(ctx, t, "gzip:\n  enable: true\ndownstream:\n  idleTimeout: 180\n")
	st := waitRollout(ctx, t, "one gateway ACKs the gzip set, the other NACKs it", func(st *rollout.Status) bool {
		return st.Version != first.Version && state(st, goodName) == rollout.Synced && state(st, badName) == rollout.NACKed
	})
	t.Logf("the NACK showed in the status %v after the edit", time.Since(start).Round(time.Millisecond))
	if bad.Nacks() == 0 {
		t.Fatal("the rejecting gateway never NACKed")
	}
	nacked := proxyOf(st, badName)
	if !strings.Contains(nacked.Message, "LDS: Error adding/updating listener(s) "+listenerName) || !strings.Contains(nacked.Message, gzipName) ||
		nacked.Type != "gateway" || nacked.IstioVersion != "1.31.0" {
		t.Errorf("the NACKed proxy should carry Envoy's message: %+v", nacked)
	}
	if _, err := good.Snapshot().GatewayHCM(listenerName); err != nil {
		t.Error(err)
	}
	var unreachable []string
	for _, i := range st.Unreachable() {
		unreachable = append(unreachable, i.Address)
	}
	if strings.Join(unreachable, ",") != "http://127.0.0.2:"+port || len(st.Istiod) != 2 {
		t.Errorf("istiod instances %+v: want 127.0.0.2 reported unreachable", st.Istiod)
	}

	// A Warning Event names the proxy and the message.
	if !harness.Eventually(ctx, rolloutBound, func() bool {
		return hasEvent(ctx, "ProxyRejected", badName, gzipName) && hasEvent(ctx, "IstiodUnreachable", "127.0.0.2", "")
	}) {
		t.Errorf("no ProxyRejected event for %s and IstiodUnreachable for 127.0.0.2", badName)
	}
	// globalconfig status shows it as istioctl proxy-status would.
	var out, errs bytes.Buffer
	if code := cli.Main([]string{"status", "--kubeconfig", cluster.AdminKubeconfig}, cli.Env{Stdout: &out, Stderr: &errs}); code != cli.ExitOK {
		t.Fatalf("globalconfig status: exit %d: %s", code, errs.String())
	}
	t.Logf("$ globalconfig status\n%s", out.String())
	for _, want := range []string{"NACKed", badName, "LDS: Error adding/updating listener(s) " + listenerName, "istiod http://127.0.0.2:" + port + " unreachable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("globalconfig status lacks %q", want)
		}
	}
	m, err := ctl.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m[`globalconfig_rollout_proxies{state="NACKed"}`] < 1 || m["globalconfig_rollout_istiod_unreachable"] != 1 {
		t.Errorf("metrics: nacked %v, istiod unreachable %v", m[`globalconfig_rollout_proxies{state="NACKed"}`], m["globalconfig_rollout_istiod_unreachable"])
	}
}

// dialGateway connects one more gateway at ip and waits for its listener.
func dialGateway(ctx context.Context, t *testing.T, ip string, opts xds.Options) *xds.Client {
	t.Helper()
	c, err := xds.DialWith(ctx, istiod.GRPCAddr, xds.GatewayNodeIn(ns, ip, "1.31.0"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitFor(ctx, 60*time.Second, func(s xds.Snapshot) bool { _, err := s.GatewayHCM(listenerName); return err == nil }); err != nil {
		t.Fatalf("gateway %s: %v", ip, err)
	}
	return c
}

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

// hasEvent reports whether the global ConfigMap has an Event with reason
// whose message contains both parts.
func hasEvent(ctx context.Context, reason, part1, part2 string) bool {
	list, err := cluster.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Reason == reason && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "global-config" &&
			strings.Contains(e.Message, part1) && strings.Contains(e.Message, part2) {
			return true
		}
	}
	return false
}
