package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/harness"
)

// ackTimeout bounds the wait for a gateway to load a change.
const ackTimeout = 30 * time.Second

// sentinelName is the EnvoyFilter that marks each change: it sets the
// HTTP connection manager's via to a fresh value. No item sets via.
const sentinelName = "proxy-sentinel"

var step atomic.Int64

// rendered is the set of EnvoyFilters globalconfig makes of doc: a bare
// document or a ConfigMap manifest.
func rendered(t testing.TB, doc string) []*envoyfilter.Object {
	t.Helper()
	d, err := document.ParseFile([]byte(doc))
	if err != nil {
		t.Fatalf("document: %v", err)
	}
	objs, err := render.Desired(d)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

// rejections sums the gateway's update_rejected counters (LDS, CDS, every
// RDS and SDS subscription).
func rejections(ctx context.Context, g *gw) (int64, error) {
	st, err := g.Stats(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for name, v := range st {
		if strings.HasSuffix(name, ".update_rejected") {
			n += v
		}
	}
	return n, nil
}

// loaded is what a gateway did with a change.
type loaded struct {
	gw      *gw
	nacked  bool
	message string // Envoy's reason, when it NACKed
}

// applyAll makes objs the whole set of globalconfig's EnvoyFilters in the
// cluster (others are deleted), marks the change with the sentinel, and
// waits until each gateway has either loaded the sentinel's value or
// rejected an update. It returns what each gateway did.
func applyAll(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) []loaded {
	t.Helper()
	before := map[*gw]int64{}
	for _, g := range gateways {
		n, err := rejections(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		before[g] = n
	}
	for _, o := range objs {
		for _, cp := range o.Spec.GetConfigPatches() {
			if cp.GetPatch().GetValue().GetFields()["typed_config"].GetStructValue().GetFields()["via"] != nil {
				t.Fatalf("%s sets the HTTP connection manager's via, which this suite's sentinel uses to mark each change: give the sentinel another field", o.Metadata.Name)
			}
		}
	}
	// The rate-limit service gets the set's limits first, as the
	// controller gives them (pkg/rlsconfig).
	if rls != nil {
		if _, err := rls.Publish(objs); err != nil {
			t.Fatal(err)
		}
	}
	prune(ctx, t, objs)
	mark := fmt.Sprintf("step-%d", step.Add(1))
	kubectlApply(ctx, t, append(slices.Clone(objs), sentinel(t, mark)))
	var out []loaded
	for _, g := range gateways {
		l := loaded{gw: g}
		var last error
		ok := harness.Eventually(ctx, ackTimeout, func() bool {
			n, err := rejections(ctx, g)
			if err != nil {
				last = err
				return false
			}
			if n > before[g] {
				l.nacked = true
				l.message = rejectionMessage(ctx, g)
				return true
			}
			var has bool
			has, last = hasVia(ctx, g, mark)
			return has
		})
		if !ok {
			t.Fatalf("gateway %s (Envoy %s) neither loaded nor rejected change %s within %s: %v\n%s",
				g.name, g.Binary.Version, mark, ackTimeout, last, g.Log(2000))
		}
		out = append(out, l)
	}
	return out
}

// kubectlApply applies objs in one kubectl apply.
func kubectlApply(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	var stream bytes.Buffer
	for _, o := range objs {
		y, err := o.YAML()
		if err != nil {
			t.Fatal(err)
		}
		stream.WriteString("---\n")
		stream.Write(y)
	}
	if out, err := cluster.Kubectl(ctx, stream.Bytes(), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// mustACK is applyAll that requires every gateway to load the change.
func mustACK(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	for _, l := range applyAll(ctx, t, objs) {
		if l.nacked {
			t.Errorf("gateway %s (Envoy %s) rejected the change: %s", l.gw.name, l.gw.Binary.Version, l.message)
		}
	}
	for _, g := range gateways {
		st, err := g.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := st["server.dynamic_unknown_fields"]; n != 0 {
			t.Errorf("gateway %s (Envoy %s) ignored %d unknown fields in its dynamic configuration", g.name, g.Binary.Version, n)
		}
	}
}

// prune deletes globalconfig's EnvoyFilters that are not in keep.
func prune(ctx context.Context, t testing.TB, keep []*envoyfilter.Object) {
	t.Helper()
	names := make([]string, 0, len(keep))
	for _, o := range keep {
		names = append(names, o.Metadata.Namespace+"/"+o.Metadata.Name)
	}
	if err := cluster.PruneManaged(ctx, names...); err != nil {
		t.Fatal(err)
	}
}

// sentinel is the EnvoyFilter that sets via to mark on every gateway.
func sentinel(t testing.TB, mark string) *envoyfilter.Object {
	t.Helper()
	p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{Via: mark})
	if err != nil {
		t.Fatal(err)
	}
	o, err := envoyfilter.NewObject(sentinelName, envoyfilter.Placement{Priority: -100}, envoyfilter.DefaultTarget(), []envoyfilter.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	o.Metadata.Name = sentinelName
	o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": sentinelName}
	return o
}

// listenerDump is the gateway's dynamic listeners as its admin shows them.
func listenerDump(ctx context.Context, g *gw) (any, error) {
	body, err := g.Get(ctx, "/config_dump?resource=dynamic_listeners")
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("config dump: %w", err)
	}
	return doc, nil
}

// hasVia tells whether every active listener of g has via mark in its
// HTTP connection manager (the gateway's listeners are all HTTP).
func hasVia(ctx context.Context, g *gw, mark string) (bool, error) {
	doc, err := listenerDump(ctx, g)
	if err != nil {
		return false, err
	}
	ls := activeListeners(doc)
	for _, l := range ls {
		found := false
		walk(l, func(k string, v any) { found = found || (k == "via" && v == mark) })
		if !found {
			return false, nil
		}
	}
	return len(ls) > 0, nil
}

// activeListeners returns the active_state.listener of every dynamic
// listener in a config dump.
func activeListeners(doc any) []any {
	var out []any
	walk(doc, func(k string, v any) {
		if k != "active_state" {
			return
		}
		if m, ok := v.(map[string]any); ok && m["listener"] != nil {
			out = append(out, m["listener"])
		}
	})
	return out
}

// rejectionMessage is Envoy's reason for the last rejected update: the
// error_state details of a listener in its config dump, or else the
// newest warning in its log.
func rejectionMessage(ctx context.Context, g *gw) string {
	var msgs []string
	if doc, err := listenerDump(ctx, g); err == nil {
		walk(doc, func(k string, v any) {
			if k != "error_state" {
				return
			}
			if m, ok := v.(map[string]any); ok {
				if d, ok := m["details"].(string); ok && !slices.Contains(msgs, d) {
					msgs = append(msgs, d)
				}
			}
		})
	}
	if len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	log := g.Log(4000)
	if i := strings.LastIndex(log, "gRPC config for"); i >= 0 {
		return strings.TrimSpace(log[i:])
	}
	return "(no message in the config dump or the log)"
}

// walk calls f for every key and value of a decoded JSON document, depth
// first.
func walk(v any, f func(k string, v any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			f(k, e)
			walk(e, f)
		}
	case []any:
		for _, e := range x {
			walk(e, f)
		}
	}
}
