package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// gzipFilter is the HTTP filter the gzip item inserts.
const gzipFilter = "envoy.filters.http.compressor.gzip"

// What `make run` keeps: the gateway's config as Envoy's admin
// /config_dump, written by the xds client, reads with the real istioctl
// (listeners, routes and clusters), and an edit of the global ConfigMap
// shows in the next dump.
func TestSandboxConfigDump(t *testing.T) {
	ctx := setup(t)
	bin, err := harness.Binary(harness.EnvIstioctl)
	if err != nil {
		t.Fatal(err)
	}
	client, err := xds.Dial(ctx, istiod.GRPCAddr, xds.GatewayNodeIn(ns, "10.1.1.80", gatewayVersion))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	doc := exampleDocument(t)
	putConfig(ctx, t, doc)
	startController(ctx, t)
	for _, o := range desiredObjects(t, doc) {
		if appliesToGateway(o) {
			waitOn(ctx, t, client, o.Metadata.Name, func(s xds.Snapshot) error { return inEffect(o, s) })
		}
	}
	waitOn(ctx, t, client, "route "+gatewayRoute, func(s xds.Snapshot) error {
		if len(s.Routes[gatewayRoute].GetVirtualHosts()) == 0 {
			return fmt.Errorf("no route configuration %s with virtual hosts", gatewayRoute)
		}
		return nil
	})

	dump := filepath.Join(t.TempDir(), "gateway-config-dump.json")
	if err := client.WriteConfigDump(dump); err != nil {
		t.Fatal(err)
	}
	istioctl := func(args ...string) string {
		t.Helper()
		args = append([]string{"proxy-config"}, append(args, "--file", dump)...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("istioctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	listeners := istioctl("listener")
	if !hasRow(listeners, "0.0.0.0", "80", "Route: "+gatewayRoute) {
		t.Errorf("istioctl proxy-config listener shows no row for %s:\n%s", listenerName, listeners)
	}
	var routes []struct {
		Name         string `json:"name"`
		VirtualHosts []struct {
			Name   string            `json:"name"`
			Routes []json.RawMessage `json:"routes"`
		} `json:"virtualHosts"`
	}
	routeJSON := istioctl("route", "-o", "json")
	if err := json.Unmarshal([]byte(routeJSON), &routes); err != nil {
		t.Fatalf("istioctl proxy-config route -o json: %v\n%s", err, routeJSON)
	}
	gotRoute := false
	for _, rc := range routes {
		for _, vh := range rc.VirtualHosts {
			gotRoute = gotRoute || rc.Name == gatewayRoute && len(vh.Routes) > 0
		}
	}
	if !gotRoute {
		t.Errorf("istioctl proxy-config route -o json shows no route in %s:\n%s", gatewayRoute, routeJSON)
	}
	clusters := istioctl("cluster")
	backend := routeBackend.name + "." + routeBackend.namespace + ".svc.cluster.local"
	if !hasRow(clusters, backend, fmt.Sprint(routeBackend.ports[0]), "outbound") || !hasRow(clusters, "BlackHoleCluster") {
		t.Errorf("istioctl proxy-config cluster shows no outbound cluster of %s or no BlackHoleCluster:\n%s", backend, clusters)
	}
	if n := len(strings.Split(strings.TrimSpace(clusters), "\n")) - 1; n != len(client.Snapshot().Clusters) {
		t.Errorf("istioctl proxy-config cluster lists %d clusters, the client holds %d:\n%s", n, len(client.Snapshot().Clusters), clusters)
	}

	before := gzipChunkSize(t, istioctl("listener", "--port", "80", "-o", "json"))
	if before != 4096 {
		t.Fatalf("the dump shows gzip chunkSize %v, want the example's 4096", before)
	}
	edited := strings.Replace(doc, "chunkSize: 4096", "chunkSize: 16384", 1)
	putConfig(ctx, t, edited)
	for _, o := range desiredObjects(t, edited) {
		if o.Item() == "gzip" {
			waitOn(ctx, t, client, "edited gzip", func(s xds.Snapshot) error { return inEffect(o, s) })
		}
	}
	if err := client.WriteConfigDump(dump); err != nil {
		t.Fatal(err)
	}
	if after := gzipChunkSize(t, istioctl("listener", "--port", "80", "-o", "json")); after != 16384 {
		t.Errorf("after the edit the dump shows gzip chunkSize %v, want 16384", after)
	}
	t.Logf("istioctl proxy-config listener --file %s:\n%s", filepath.Base(dump), listeners)
	t.Logf("gzip chunkSize in istioctl proxy-config listener --port 80 -o json: %v before the edit, 16384 after", before)
}

// hasRow reports whether a line of istioctl's table holds every cell.
func hasRow(table string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		ok := true
		for _, c := range cells {
			if !strings.Contains(" "+strings.Join(fields, " ")+" ", " "+c+" ") {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// gzipChunkSize finds, in istioctl's JSON of listeners, the chunkSize of
// the gzip compressor filter of every HTTP connection manager; they must
// agree.
func gzipChunkSize(t *testing.T, listenerJSON string) float64 {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(listenerJSON), &v); err != nil {
		t.Fatalf("istioctl listener JSON: %v\n%.2000s", err, listenerJSON)
	}
	var found []float64
	var walk func(any, bool)
	walk = func(v any, inGzip bool) {
		switch x := v.(type) {
		case map[string]any:
			if x["name"] == gzipFilter {
				inGzip = true
			}
			if n, ok := x["chunkSize"].(float64); ok && inGzip {
				found = append(found, n)
			}
			for _, c := range x {
				walk(c, inGzip)
			}
		case []any:
			for _, c := range x {
				walk(c, inGzip)
			}
		}
	}
	walk(v, false)
	if len(found) == 0 {
		t.Fatalf("no %s filter with a chunkSize in istioctl's listener JSON:\n%.2000s", gzipFilter, listenerJSON)
	}
	for _, n := range found[1:] {
		if n != found[0] {
			t.Fatalf("the gzip filters disagree on chunkSize: %v", found)
		}
	}
	return found[0]
}
