package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/test/example"
	"github.com/globalconfig/globalconfig/test/harness"
)

// exampleDocument is the config.yaml of deploy/examples/global-config.yaml.
func exampleDocument(t testing.TB) string {
	t.Helper()
	doc, err := harness.ExampleDocument()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// everythingDocument switches on every option of every item
// (example.Everything).
func everythingDocument(t testing.TB) string {
	t.Helper()
	doc, err := example.Everything(harness.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// The example document, and one with every option of every item, are
// loaded by both Envoys, with no field left unknown.
func TestExampleAndEverythingACKed(t *testing.T) {
	ctx := setup(t)
	for name, doc := range map[string]string{"example": exampleDocument(t), "everything": everythingDocument(t)} {
		t.Run(name, func(t *testing.T) {
			objs := rendered(t, doc)
			if len(objs) < 10 {
				t.Fatalf("only %d EnvoyFilters", len(objs))
			}
			mustACK(ctx, t, objs)
			mustCarry(ctx, t, objs)
			mustOrder(ctx, t, objs)
		})
	}
}

// mustOrder requires the HTTP filters objs insert to stand in each
// gateway's HTTP connection managers in the order docs/reference.md's
// chain line gives (envoycheck.HTTPChain), with the router last.
func mustOrder(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	chain, err := envoycheck.HTTPChain(objs)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range chain {
		if f.Item != "" {
			want = append(want, f.Name)
		}
	}
	for _, g := range gateways {
		doc, err := listenerDump(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		managers := 0
		for _, l := range activeListeners(doc) {
			walk(l, func(k string, v any) {
				list, ok := v.([]any)
				if !ok || k != "http_filters" {
					return
				}
				managers++
				var names, ours []string
				last := ""
				for _, f := range list {
					if fm, ok := f.(map[string]any); ok {
						last = fmt.Sprint(fm["name"])
						names = append(names, last)
						if slices.Contains(want, last) {
							ours = append(ours, last)
						}
					}
				}
				order := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return !slices.Contains(ours, n) })
				if !slices.Equal(ours, order) || last != envoyfilter.Router {
					t.Errorf("gateway %s (Envoy %s): HTTP filters %v (ours %v), want ours in the order %v and the router last", g.name, g.Binary.Version, names, ours, order)
				}
			})
		}
		if managers == 0 {
			t.Errorf("gateway %s: no HTTP connection manager in its active listeners", g.name)
		}
	}
}

// Every golden output of every item, applied alone, is loaded by both
// Envoys.
func TestEveryGoldenACKed(t *testing.T) {
	ctx := setup(t)
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "*.out.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden outputs: %v", err)
	}
	if err := goldenMesh(ctx, files); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range files {
		objs := readObjects(t, file)
		if !slices.ContainsFunc(objs, reachesGateways) {
			continue // disabled, or for sidecars only
		}
		checked++
		if !mine(checked) {
			continue // another shard's
		}
		name := strings.TrimPrefix(file, filepath.Join(harness.RepoRoot(), "items")+"/")
		t.Run(name, func(t *testing.T) {
			mustACK(ctx, t, objs)
			mustCarry(ctx, t, objs)
		})
	}
	if checked < 40 {
		t.Errorf("only %d goldens reach the gateways", checked)
	}
	prune(ctx, t, nil)
}

// reachesGateways tells whether istiod applies o to the test gateways: in
// their namespace, a selector they match, a gateway context.
func reachesGateways(o *envoyfilter.Object) bool {
	if o.Metadata.Namespace != ns {
		return false
	}
	for k, v := range o.Spec.GetWorkloadSelector().GetLabels() {
		if gatewayLabels[k] != v {
			return false
		}
	}
	for _, cp := range o.Spec.GetConfigPatches() {
		if c := cp.GetMatch().GetContext().String(); c == "GATEWAY" || c == "ANY" {
			return true
		}
	}
	return false
}

// readObjects reads a YAML stream of EnvoyFilters.
func readObjects(t testing.TB, path string) []*envoyfilter.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*envoyfilter.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		o := &envoyfilter.Object{}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, o)
	}
	return out
}

// outboundRef finds Istio outbound cluster names in a patch value.
var outboundRef = regexp.MustCompile(`outbound\|(\d+)\|\|([a-z0-9-]+\.[a-z0-9-]+\.svc\.cluster\.local)`)

// goldenMesh creates what the goldens refer to: a ServiceEntry for every
// outbound cluster a patch names (Envoy refuses a tracer whose collector
// cluster doesn't exist, as it would in a mesh without that Service) and
// every namespace a golden's objects live in.
func goldenMesh(ctx context.Context, files []string) error {
	hosts := map[string]map[int]bool{}
	nss := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, m := range outboundRef.FindAllStringSubmatch(string(data), -1) {
			port, _ := strconv.Atoi(m[1])
			if hosts[m[2]] == nil {
				hosts[m[2]] = map[int]bool{}
			}
			hosts[m[2]][port] = true
		}
		for _, m := range regexp.MustCompile(`(?m)^  namespace: (\S+)$`).FindAllStringSubmatch(string(data), -1) {
			nss[m[1]] = true
		}
	}
	for n := range nss {
		_, err := cluster.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for host, ports := range hosts {
		if host == zipkinHost {
			continue // the suite's collector
		}
		se := &clientnetworkingv1.ServiceEntry{
			ObjectMeta: metav1.ObjectMeta{Name: "golden-" + host, Namespace: ns},
			Spec: networkingv1.ServiceEntry{
				Hosts:      []string{host},
				Location:   networkingv1.ServiceEntry_MESH_INTERNAL,
				Resolution: networkingv1.ServiceEntry_STATIC,
				Endpoints:  []*networkingv1.WorkloadEntry{{Address: "127.0.0.1"}},
			},
		}
		for p := range ports {
			se.Spec.Ports = append(se.Spec.Ports, &networkingv1.ServicePort{Number: uint32(p), Name: fmt.Sprintf("grpc-%d", p), Protocol: "GRPC"})
		}
		if _, err := cluster.Istio.NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("service entry %s: %w", host, err)
		}
	}
	return nil
}

// mustCarry requires every HTTP filter objs insert to be in the active
// listeners of each gateway whose Istio version the patch is for: loaded,
// not only accepted.
func mustCarry(ctx context.Context, t testing.TB, objs []*envoyfilter.Object) {
	t.Helper()
	for _, g := range gateways {
		doc, err := listenerDump(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, l := range activeListeners(doc) {
			walk(l, func(k string, v any) {
				if m, ok := v.([]any); ok && k == "http_filters" {
					for _, f := range m {
						if fm, ok := f.(map[string]any); ok {
							names[fmt.Sprint(fm["name"])] = true
						}
					}
				}
			})
		}
		for _, o := range objs {
			if !reachesGateways(o) {
				continue
			}
			for _, cp := range o.Spec.GetConfigPatches() {
				if cp.GetApplyTo().String() != "HTTP_FILTER" || !strings.HasPrefix(cp.GetPatch().GetOperation().String(), "INSERT") {
					continue
				}
				if pv := cp.GetMatch().GetProxy().GetProxyVersion(); pv != "" && !regexp.MustCompile(pv).MatchString(g.IstioVersion) {
					continue
				}
				name := cp.GetPatch().GetValue().GetFields()["name"].GetStringValue()
				if !names[name] {
					t.Errorf("gateway %s (Envoy %s): %s's HTTP filter %s is not in its active listeners", g.name, g.Binary.Version, o.Metadata.Name, name)
				}
			}
		}
	}
}

// What istiod sends the gateways, with every option of every item on,
// names no Istio-private extension (the test istiod's switches leave none:
// upstream Envoy has none of them and would refuse it), and every listener
// is on the gateway's loopback address.
func TestNoIstioExtensionsAndLoopbackOnly(t *testing.T) {
	ctx := setup(t)
	mustACK(ctx, t, rendered(t, everythingDocument(t)))
	for _, g := range gateways {
		body, err := g.Get(ctx, "/config_dump?include_eds")
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		types := map[string]bool{}
		walk(doc, func(k string, v any) {
			s, ok := v.(string)
			if !ok {
				return
			}
			switch {
			case k == "@type" || k == "type_url":
				types[s] = true
				if !strings.HasPrefix(s, "type.googleapis.com/envoy.") && !strings.HasPrefix(s, "type.googleapis.com/google.protobuf.") {
					t.Errorf("gateway %s: a configuration of type %s", g.name, s)
				}
			case k == "name" && strings.HasPrefix(s, "istio."):
				t.Errorf("gateway %s: Istio's own extension %s", g.name, s)
			}
		})
		if len(types) < 10 {
			t.Errorf("gateway %s: only %d configuration types in its dump", g.name, len(types))
		}
		ld, err := listenerDump(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range activeListeners(ld) {
			addr := l.(map[string]any)["address"].(map[string]any)["socket_address"].(map[string]any)["address"]
			if addr != g.ip {
				t.Errorf("gateway %s: a listener on %v, not on %s", g.name, addr, g.ip)
			}
			n++
		}
		if n != 2 {
			t.Errorf("gateway %s: %d listeners, want HTTP and HTTPS", g.name, n)
		}
	}
}
