package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	// The typed configs istiod itself puts in a gateway's and a sidecar's
	// resources, linked so that they are validated too (globalconfig's own
	// come with items/all). Whatever is still unknown is listed.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/request_id/uuid/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/xds"
)

// Everything istiod sends the gateway (and the sidecar) passes Envoy's own
// proto validation — every Listener, RouteConfiguration and Cluster, and
// every typed config nested in them whose type this binary knows — with
// each golden output in effect, one at a time, and then with the whole
// example document. A typed config of a type nobody here knows is listed;
// one inside what globalconfig generated fails the test, since nothing
// globalconfig emits may escape validation.
func TestEverythingIstiodSendsIsValid(t *testing.T) {
	ctx := setup(t)
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(ctx, nil, "delete", "envoyfilter", "-n", ns, "--ignore-not-found", "e2e-sentinel")
	})
	seen := newTypeLedger()
	defer seen.report(t)
	clients := []struct {
		name   string
		client *xds.Client
	}{{"gateway", gateway}, {"sidecar", sidecar}}
	validateAll := func(t *testing.T, objs []*envoyfilter.Object) {
		t.Helper()
		ours, err := generatedBy(objs)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, c := range clients {
			v := newXDSValidator(ours, seen)
			v.snapshot(c.name, c.client.Snapshot())
			for _, p := range v.invalid {
				t.Errorf("%s", p)
			}
			for _, p := range v.oursUnknown {
				t.Errorf("%s", p)
			}
			total += v.validated
		}
		if total == 0 {
			t.Fatal("validated nothing: the gateway and the sidecar received no resources")
		}
		t.Logf("%d messages validated", total)
	}

	t.Run("istiod-alone", func(t *testing.T) { validateAll(t, nil) })

	for i, file := range goldenOutputs(t) {
		objs := readObjects(t, file)
		if len(objs) == 0 {
			continue // a disabled or absent item: nothing to apply.
		}
		name := strings.TrimPrefix(file, itemsDir()+"/")
		t.Run(name, func(t *testing.T) {
			if _, err := cluster.Kubectl(ctx, nil, "apply", "-f", file); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = cluster.Kubectl(ctx, nil, "delete", "--ignore-not-found", "-f", file) })
			// The sentinel proves istiod has processed this file and the
			// removal of the one before.
			sentinel(ctx, t, 10000+i)
			for _, o := range objs {
				if appliesToGateway(o) {
					waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffect(o, s) })
				}
				if appliesToSidecar(o) {
					waitOn(ctx, t, sidecar, o.Metadata.Name+" at the sidecar", func(s xds.Snapshot) error { return inboundInEffect(o, s) })
				}
			}
			validateAll(t, objs)
		})
	}

	t.Run("example", func(t *testing.T) {
		objs := applyExample(ctx, t)
		sentinel(ctx, t, 20000)
		validateAll(t, objs)
	})

	// The check itself can fail: an invalid field and a typed config of an
	// unknown type in one of globalconfig's filters are both reported.
	t.Run("self-check", func(t *testing.T) {
		objs := desiredObjects(t, exampleDocument(t))
		ours, err := generatedBy(objs)
		if err != nil {
			t.Fatal(err)
		}
		s := gateway.Snapshot()
		l := s.Listeners[listenerName]
		if l == nil {
			t.Fatalf("no listener %s", listenerName)
		}
		broken := proto.Clone(l).(*listenerv3.Listener)
		var hcm *hcmv3.HttpConnectionManager
		var at *listenerv3.Filter
		for _, f := range broken.GetFilterChains()[0].GetFilters() {
			if f.GetName() == envoyfilter.HTTPConnectionManager {
				hcm, at = &hcmv3.HttpConnectionManager{}, f
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatal(err)
				}
			}
		}
		var oursName string
		for name := range ours.filters {
			if name.msg == "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter" {
				oursName = name.name
				break
			}
		}
		if hcm == nil || oursName == "" {
			t.Fatalf("no HTTP connection manager, or the example inserts no HTTP filter")
		}
		// Two filters: one with a name Envoy refuses (empty), one of ours
		// whose typed config is of a type nobody knows.
		hcm.HttpFilters = append([]*hcmv3.HttpFilter{
			{Name: ""},
			{Name: oursName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/globalconfig.e2e.NoSuchType"}}},
		}, hcm.HttpFilters...)
		typed, err := anypb.New(hcm)
		if err != nil {
			t.Fatal(err)
		}
		at.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: typed}
		v := newXDSValidator(ours, newTypeLedger())
		v.resource("gateway", "Listener "+broken.GetName(), broken)
		if len(v.invalid) == 0 || !strings.Contains(strings.Join(v.invalid, "\n"), "HttpFilter.Name") {
			t.Errorf("an HTTP filter without a name passed validation: %q", v.invalid)
		}
		if len(v.oursUnknown) != 1 || !strings.Contains(v.oursUnknown[0], "NoSuchType") {
			t.Errorf("an unknown typed config in %s was not reported as ours: %q", oursName, v.oursUnknown)
		}
	})
}

func itemsDir() string { return filepath.Join(harness.RepoRoot(), "items") }

// applyExample applies the EnvoyFilters of the example document as they are
// rendered, waits until each is in effect at the gateway, and removes them
// (waiting for their effect to go) when the test ends.
func applyExample(ctx context.Context, t *testing.T) []*envoyfilter.Object {
	t.Helper()
	objs := desiredObjects(t, exampleDocument(t))
	var manifest []byte
	for _, o := range objs {
		y, err := o.YAML()
		if err != nil {
			t.Fatal(err)
		}
		manifest = append(append(manifest, "---\n"...), y...)
	}
	kubectlApply(ctx, t, manifest, "example EnvoyFilters", func(s xds.Snapshot) error {
		for _, o := range objs {
			if err := noneInEffect(o, s); err != nil {
				return err
			}
		}
		return nil
	})
	for _, o := range objs {
		if appliesToGateway(o) {
			waitEffect(ctx, t, o.Metadata.Name, func(s xds.Snapshot) error { return inEffectAmong(o, objs, s) })
		}
	}
	return objs
}

// kubectlApply applies manifest and, when the test ends, deletes it and
// waits until gone says its effect has left the gateway.
func kubectlApply(ctx context.Context, t *testing.T, manifest []byte, what string, gone func(xds.Snapshot) error) {
	t.Helper()
	if _, err := cluster.Kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cluster.Kubectl(ctx, manifest, "delete", "--ignore-not-found", "-f", "-"); err != nil {
			t.Error(err)
			return
		}
		waitOn(ctx, t, gateway, what+" removed from the gateway", gone)
	})
}

// ours is what globalconfig generated: the type URLs of every typed config
// in its patch values, and the filters (and other named objects) its patches
// add whole rather than merge.
type ours struct {
	types   map[string]bool
	filters map[namedMessage]bool
}

// namedMessage is a message of a type, by the value of its name field.
type namedMessage struct {
	msg  protoreflect.FullName
	name string
}

func generatedBy(objs []*envoyfilter.Object) (ours, error) {
	o := ours{types: map[string]bool{}, filters: map[namedMessage]bool{}}
	for _, obj := range objs {
		for i, cp := range obj.Spec.GetConfigPatches() {
			value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
			if err != nil {
				return o, fmt.Errorf("%s patch %d: %w", obj.Metadata.Name, i, err)
			}
			eachAny(value.ProtoReflect(), func(a *anypb.Any) { o.types[a.GetTypeUrl()] = true })
			if cp.GetPatch().GetOperation() == networking.EnvoyFilter_Patch_MERGE {
				continue // the object merged into is Istio's
			}
			if name, ok := nameOf(value.ProtoReflect()); ok {
				o.filters[namedMessage{value.ProtoReflect().Descriptor().FullName(), name}] = true
			}
		}
	}
	return o, nil
}

// eachAny calls f for every Any in m, and in the messages those Anys hold.
func eachAny(m protoreflect.Message, f func(*anypb.Any)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		f(a)
		if inner, err := a.UnmarshalNew(); err == nil {
			eachAny(inner.ProtoReflect(), f)
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				eachAny(v.List().Get(i).Message(), f)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				eachAny(mv.Message(), f)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			eachAny(v.Message(), f)
		}
		return true
	})
}

// nameOf returns the value of m's string field "name", if it has one set.
func nameOf(m protoreflect.Message) (string, bool) {
	fd := m.Descriptor().Fields().ByName("name")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || !m.Has(fd) {
		return "", false
	}
	return m.Get(fd).String(), true
}

// typeLedger collects, across a test, the type URLs no registered Go type
// decodes and the messages carrying fields this binary's protos don't know.
type typeLedger struct {
	unknownTypes  map[string]string // type URL → where first seen
	unknownFields map[protoreflect.FullName]string
	noRules       map[protoreflect.FullName]bool // known, but without Envoy's validation
}

func newTypeLedger() *typeLedger {
	return &typeLedger{unknownTypes: map[string]string{}, unknownFields: map[protoreflect.FullName]string{}, noRules: map[protoreflect.FullName]bool{}}
}

func (l *typeLedger) report(t *testing.T) {
	for _, url := range slices.Sorted(maps.Keys(l.unknownTypes)) {
		t.Logf("unknown type (not validated): %s, first at %s", url, l.unknownTypes[url])
	}
	for _, name := range slices.Sorted(maps.Keys(l.unknownFields)) {
		t.Logf("fields unknown to this go-control-plane in %s, first at %s", name, l.unknownFields[name])
	}
	for _, name := range slices.Sorted(maps.Keys(l.noRules)) {
		t.Logf("known type without validation rules: %s", name)
	}
}

// xdsValidator runs Envoy's proto validation over xDS resources.
type xdsValidator struct {
	ours        ours
	ledger      *typeLedger
	invalid     []string // "<client> <resource>: <path>: <error>"
	oursUnknown []string
	validated   int
}

func newXDSValidator(o ours, l *typeLedger) *xdsValidator {
	return &xdsValidator{ours: o, ledger: l}
}

// snapshot validates every resource of s, in a stable order.
func (v *xdsValidator) snapshot(client string, s xds.Snapshot) {
	for _, name := range slices.Sorted(maps.Keys(s.Listeners)) {
		v.resource(client, "Listener "+name, s.Listeners[name])
	}
	for _, name := range slices.Sorted(maps.Keys(s.Routes)) {
		v.resource(client, "RouteConfiguration "+name, s.Routes[name])
	}
	for _, name := range slices.Sorted(maps.Keys(s.Clusters)) {
		v.resource(client, "Cluster "+name, s.Clusters[name])
	}
}

func (v *xdsValidator) resource(client, name string, m proto.Message) {
	where := client + " " + name
	v.validate(where, "", m)
	v.walk(where, "", m.ProtoReflect(), false)
}

type envoyValidated interface{ ValidateAll() error }

func (v *xdsValidator) validate(where, path string, m proto.Message) {
	val, ok := m.(envoyValidated)
	if !ok {
		v.ledger.noRules[m.ProtoReflect().Descriptor().FullName()] = true
		return
	}
	v.validated++
	if err := val.ValidateAll(); err != nil {
		v.invalid = append(v.invalid, fmt.Sprintf("%s: %s: %v", where, orRoot(path), err))
	}
}

func orRoot(path string) string {
	if path == "" {
		return "(resource)"
	}
	return path
}

// typedStructs are the wrappers that carry a config as a Struct with its
// type URL; Envoy converts them to the typed message.
var typedStructs = map[protoreflect.FullName]bool{"udpa.type.v1.TypedStruct": true, "xds.type.v3.TypedStruct": true}

// walk visits every message under m. Inside an Any or a TypedStruct of a
// known type it validates the message held and goes on inside it. inOurs
// tells whether m lies within something globalconfig added whole.
func (v *xdsValidator) walk(where, path string, m protoreflect.Message, inOurs bool) {
	if name, ok := nameOf(m); ok && v.ours.filters[namedMessage{m.Descriptor().FullName(), name}] {
		inOurs = true
	}
	if len(m.GetUnknown()) > 0 {
		if _, seen := v.ledger.unknownFields[m.Descriptor().FullName()]; !seen {
			v.ledger.unknownFields[m.Descriptor().FullName()] = where + " " + orRoot(path)
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		v.held(where, path, a.GetTypeUrl(), inner, err, inOurs)
		return
	}
	if typedStructs[m.Descriptor().FullName()] {
		url := m.Get(m.Descriptor().Fields().ByName("type_url")).String()
		inner, err := fromTypedStruct(url, m.Get(m.Descriptor().Fields().ByName("value")).Message().Interface())
		v.held(where, path, url, inner, err, inOurs)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		if path == "" {
			p = string(fd.Name())
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				e := l.Get(i).Message()
				key := fmt.Sprint(i)
				if name, ok := nameOf(e); ok && name != "" {
					key = name
				}
				v.walk(where, fmt.Sprintf("%s[%s]", p, key), e, inOurs)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				v.walk(where, fmt.Sprintf("%s[%v]", p, k.Interface()), mv.Message(), inOurs)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			v.walk(where, p, val.Message(), inOurs)
		}
		return true
	})
}

// held handles the message an Any or a TypedStruct holds.
func (v *xdsValidator) held(where, path, url string, inner proto.Message, err error, inOurs bool) {
	switch {
	case errors.Is(err, protoregistry.NotFound):
		if _, seen := v.ledger.unknownTypes[url]; !seen {
			v.ledger.unknownTypes[url] = where + " " + orRoot(path)
		}
		if inOurs || v.ours.types[url] {
			v.oursUnknown = append(v.oursUnknown, fmt.Sprintf("%s: %s: typed config %s, generated by globalconfig, is of a type this test cannot decode, so it was not validated", where, orRoot(path), url))
		}
	case err != nil:
		v.invalid = append(v.invalid, fmt.Sprintf("%s: %s: decode %s: %v", where, orRoot(path), url, err))
	default:
		p := fmt.Sprintf("%s<%s>", path, inner.ProtoReflect().Descriptor().FullName())
		v.validate(where, p, inner)
		v.walk(where, p, inner.ProtoReflect(), inOurs)
	}
}

// fromTypedStruct decodes the Struct value of a TypedStruct into the
// message of url, strictly, as Envoy does.
func fromTypedStruct(url string, value proto.Message) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return nil, err
	}
	st, ok := value.(*structpb.Struct)
	if !ok {
		return nil, fmt.Errorf("TypedStruct value is a %T", value)
	}
	js, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal(js, m); err != nil {
		return nil, err
	}
	return m, nil
}

// A user's own EnvoyFilter and a WasmPlugin beside the example: the
// gateway's HTTP filter chain on every HTTP listener ends with the router,
// has both of the user's filters, and holds globalconfig's HTTP filters
// where the priorities and insert positions of the generated EnvoyFilters
// put them — in the order the stage table in envoyfilter/priority.go
// means, around the user's filters.
func TestFilterOrderBesideUserFilters(t *testing.T) {
	ctx := setup(t)
	applyExample(ctx, t)

	if _, err := cluster.Kubectl(ctx, nil, "wait", "--for=condition=established", "--timeout=60s", "crd/wasmplugins.extensions.istio.io"); err != nil {
		t.Fatal(err)
	}
	user := []byte(fmt.Sprintf(userFilters, ns, envoyfilter.HTTPConnectionManager, envoyfilter.Router, userLua, ns, userWasm))
	kubectlApply(ctx, t, user, "the user's filters", func(s xds.Snapshot) error {
		for _, l := range httpListeners {
			for _, hcm := range s.HCMs(l) {
				if userFiltersIn(hcm.GetHttpFilters()) != [2]int{-1, -1} {
					return fmt.Errorf("still on %s", l)
				}
			}
		}
		return nil
	})
	waitEffect(ctx, t, "the user's lua filter and WasmPlugin", func(s xds.Snapshot) error {
		for _, l := range httpListeners {
			hcms := s.HCMs(l)
			if len(hcms) == 0 {
				return fmt.Errorf("no HTTP connection manager on %s", l)
			}
			for i, hcm := range hcms {
				if at := userFiltersIn(hcm.GetHttpFilters()); at[0] < 0 || at[1] < 0 {
					return fmt.Errorf("%s chain %d: lua at %d, wasm at %d", l, i, at[0], at[1])
				}
			}
		}
		return nil
	})

	list, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var efs []appliedFilter
	for _, ef := range list.Items {
		a := appliedFilter{name: ef.Name, created: ef.CreationTimestamp.Time, spec: &ef.Spec, ours: ef.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue, item: ef.Labels[envoyfilter.LabelItem]}
		if a.appliesToGateway() {
			efs = append(efs, a)
		}
	}
	// Istio's order (pilot/pkg/model/push_context.go, EnvoyFilters): by
	// priority, then creation time, then name. The gateway's namespace is
	// the root namespace, so namespaces don't enter into it.
	sort.SliceStable(efs, func(i, j int) bool {
		a, b := efs[i], efs[j]
		if a.spec.GetPriority() != b.spec.GetPriority() {
			return a.spec.GetPriority() < b.spec.GetPriority()
		}
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.name < b.name
	})

	s := gateway.Snapshot()
	chains := 0
	for _, name := range httpListeners {
		l := s.Listeners[name]
		for i, fc := range l.GetFilterChains() {
			hcm, err := xds.HCMOf(fc)
			if err != nil {
				continue
			}
			chains++
			checkChain(t, fmt.Sprintf("%s chain %d", name, i), l, fc, hcm.GetHttpFilters(), efs)
		}
	}
	if chains < 2 {
		t.Errorf("checked %d HTTP chains, want one on each of %v", chains, httpListeners)
	}
}

// The user's objects: an EnvoyFilter inserting a Lua filter before the
// router, and a WasmPlugin in the AUTHN phase, which istiod turns into an
// HTTP filter configured over ECDS (it never fetches the module).
const (
	userLua  = "user-lua"
	userWasm = "user-wasm"
	luaName  = "envoy.filters.http.lua"

	userFilters = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: %[4]s
  namespace: %[1]s
spec:
  workloadSelector:
    labels:
      istio: ingressgateway
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: GATEWAY
      listener:
        filterChain:
          filter:
            name: %[2]s
            subFilter:
              name: %[3]s
    patch:
      operation: INSERT_BEFORE
      value:
        name: ` + luaName + `
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          default_source_code:
            inline_string: |
              function envoy_on_request(handle)
                handle:headers():add("x-user-lua", "1")
              end
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata:
  name: %[6]s
  namespace: %[5]s
spec:
  selector:
    matchLabels:
      istio: ingressgateway
  url: oci://example.com/filter:1
  phase: AUTHN
`
)

// userFiltersIn returns where the user's lua filter and wasm filter are in
// filters, -1 for absent.
func userFiltersIn(filters []*hcmv3.HttpFilter) [2]int {
	at := [2]int{-1, -1}
	for i, f := range filters {
		switch {
		case f.GetName() == luaName:
			at[0] = i
		case f.GetConfigDiscovery() != nil && strings.Contains(f.GetName(), userWasm):
			at[1] = i
		}
	}
	return at
}

// appliedFilter is an EnvoyFilter of the cluster that applies to the
// gateway.
type appliedFilter struct {
	name    string
	created time.Time
	spec    *networking.EnvoyFilter
	ours    bool
	item    string
}

func (a appliedFilter) appliesToGateway() bool {
	for k, v := range a.spec.GetWorkloadSelector().GetLabels() {
		if gatewayLabels[k] != v {
			return false
		}
	}
	return len(a.spec.GetTargetRefs()) == 0
}

// chainEntry is one HTTP filter in a chain and the EnvoyFilter that
// inserted it ("" for istiod's own, WasmPlugins included).
type chainEntry struct{ name, by string }

func (e chainEntry) String() string {
	if e.by == "" {
		return e.name
	}
	return e.name + " [" + e.by + "]"
}

func names(chain []chainEntry) []string {
	out := make([]string, len(chain))
	for i, e := range chain {
		out[i] = e.name
	}
	return out
}

// checkChain checks one HTTP filter chain of listener l.
func checkChain(t *testing.T, what string, l *listenerv3.Listener, fc *listenerv3.FilterChain, filters []*hcmv3.HttpFilter, efs []appliedFilter) {
	t.Helper()
	observed := make([]string, len(filters))
	for i, f := range filters {
		observed[i] = f.GetName()
	}

	// The patches that position HTTP filters in this chain, in the order
	// istiod applies them.
	type insert struct {
		ef    appliedFilter
		op    networking.EnvoyFilter_Patch_Operation
		value string // the filter inserted
		at    string // the anchor, "" for none
	}
	var inserts []insert
	insertedBy := map[string]string{}
	for _, ef := range efs {
		for i, cp := range ef.spec.GetConfigPatches() {
			if cp.GetApplyTo() != networking.EnvoyFilter_HTTP_FILTER {
				continue
			}
			applies, err := httpFilterPatchApplies(cp, l, fc)
			if err != nil {
				t.Fatalf("%s patch %d: %v", ef.name, i, err)
			}
			if !applies {
				continue
			}
			// Only the name: a user's filter may be of a type this binary
			// doesn't link.
			in := insert{ef: ef, op: cp.GetPatch().GetOperation(), value: cp.GetPatch().GetValue().GetFields()["name"].GetStringValue(),
				at: cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()}
			switch in.op {
			case networking.EnvoyFilter_Patch_MERGE:
				if in.value != "" && in.value != in.at {
					t.Fatalf("%s patch %d renames %s to %s, which this check does not model", ef.name, i, in.at, in.value)
				}
				continue
			case networking.EnvoyFilter_Patch_REPLACE:
				t.Fatalf("%s patch %d: REPLACE of an HTTP filter is not modelled here", ef.name, i)
			case networking.EnvoyFilter_Patch_REMOVE:
			default:
				insertedBy[in.value] = ef.name
			}
			inserts = append(inserts, in)
		}
	}

	// What istiod built before any EnvoyFilter: the chain without the
	// filters EnvoyFilters insert. Replaying the inserts onto it must give
	// exactly the chain the gateway has.
	var base, expected []chainEntry
	for _, name := range observed {
		if insertedBy[name] == "" {
			base = append(base, chainEntry{name: name})
		}
	}
	expected = slices.Clone(base)
	for _, in := range inserts {
		e := chainEntry{name: in.value, by: in.ef.name}
		find := func() int {
			return slices.IndexFunc(expected, func(x chainEntry) bool { return x.name == in.at })
		}
		switch in.op {
		case networking.EnvoyFilter_Patch_ADD:
			expected = append(expected, e)
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			expected = slices.Insert(expected, 0, e)
		case networking.EnvoyFilter_Patch_INSERT_BEFORE:
			if in.at == "" {
				expected = slices.Insert(expected, 0, e)
			} else if i := find(); i >= 0 {
				expected = slices.Insert(expected, i, e)
			}
		case networking.EnvoyFilter_Patch_INSERT_AFTER:
			if in.at == "" {
				expected = append(expected, e)
			} else if i := find(); i >= 0 {
				expected = slices.Insert(expected, i+1, e)
			}
		case networking.EnvoyFilter_Patch_REMOVE:
			if in.at != "" {
				expected = slices.DeleteFunc(expected, func(x chainEntry) bool { return x.name == in.at })
			}
		}
	}
	var chain []chainEntry
	for _, name := range observed {
		chain = append(chain, chainEntry{name: name, by: insertedBy[name]})
	}
	logChain(t, what, chain)

	if !slices.Equal(observed, names(expected)) {
		t.Errorf("%s: the HTTP filters are not where the EnvoyFilters' priorities and positions put them:\n got  %v\n want %v", what, observed, names(expected))
	}
	if n := len(observed); n == 0 || observed[n-1] != envoyfilter.Router {
		t.Errorf("%s: the chain does not end with the router: %v", what, observed)
	}
	if at := userFiltersIn(filters); at[0] < 0 || at[1] < 0 {
		t.Errorf("%s: the user's lua filter (at %d) or WasmPlugin filter (at %d) is missing", what, at[0], at[1])
	}

	// globalconfig's own inserts, against the stage table: each at its
	// stage's position, in front of or behind every filter istiod built
	// (the WasmPlugin's included), and the stages in the order the table
	// gives them, each in the order of its items' slots (slot 0 first,
	// whatever the stage's insert position), and an item's own filters in
	// the order its patches insert them (reversed at the front: a later
	// INSERT_FIRST goes in front of an earlier one).
	type placed struct {
		name  string
		stage int
		slot  int
		seq   int
	}
	seqs := map[string]int{}
	stages := envoyfilter.Stages()
	var ourOrder []placed
	for _, in := range inserts {
		if !in.ef.ours || in.op == networking.EnvoyFilter_Patch_REMOVE {
			continue
		}
		si := slices.IndexFunc(stages, func(s envoyfilter.Stage) bool {
			p := in.ef.spec.GetPriority()
			return s.Priority <= p && p < s.Priority+int32(s.Width)
		})
		if si < 0 {
			t.Errorf("%s: priority %d is in no stage of envoyfilter.Stages()", in.ef.name, in.ef.spec.GetPriority())
			continue
		}
		stage := stages[si]
		if in.op != stage.Insert.Operation || in.at != stage.Insert.Anchor {
			t.Errorf("%s inserts %s %s %q; its stage %s inserts %s %q", in.ef.name, in.value, in.op, in.at, stage.Name, stage.Insert.Operation, stage.Insert.Anchor)
		}
		at := slices.Index(observed, in.value)
		if at < 0 {
			t.Errorf("%s: %s of %s is not in the chain", what, in.value, in.ef.name)
			continue
		}
		front := stage.Insert.Operation == networking.EnvoyFilter_Patch_INSERT_FIRST
		beforeRouter := stage.Insert.Operation == networking.EnvoyFilter_Patch_INSERT_BEFORE && stage.Insert.Anchor == envoyfilter.Router
		var misplaced []string
		for _, e := range base {
			if e.name == envoyfilter.Router {
				continue
			}
			if bj := slices.Index(observed, e.name); front && bj < at || beforeRouter && bj > at {
				misplaced = append(misplaced, e.name)
			}
		}
		if len(misplaced) > 0 && front {
			t.Errorf("%s: %s (stage %s, at the front) stands behind istiod's %v", what, in.value, stage.Name, misplaced)
		}
		if len(misplaced) > 0 && beforeRouter {
			t.Errorf("%s: %s (stage %s, before the router) stands in front of istiod's %v", what, in.value, stage.Name, misplaced)
		}
		// Stages inserting at the front stand in reverse order of
		// application (a later INSERT_FIRST goes in front of an earlier
		// one), and in front of the others, which stand in order of
		// application.
		rank := si
		if front {
			rank = -si - len(stages)
		}
		reg, ok := items.Lookup(in.ef.item)
		if !ok {
			t.Errorf("%s: item %q is not registered", in.ef.name, in.ef.item)
			continue
		}
		seq := seqs[in.ef.item]
		seqs[in.ef.item]++
		if front {
			seq = -seq
		}
		ourOrder = append(ourOrder, placed{name: in.value, stage: rank, slot: reg.Slot, seq: seq})
	}
	want := slices.Clone(ourOrder)
	slices.SortStableFunc(want, func(a, b placed) int {
		if a.stage != b.stage {
			return a.stage - b.stage
		}
		if a.slot != b.slot {
			return a.slot - b.slot
		}
		return a.seq - b.seq
	})
	var gotOurs, wantOurs []string
	for _, name := range observed {
		if slices.ContainsFunc(ourOrder, func(p placed) bool { return p.name == name }) {
			gotOurs = append(gotOurs, name)
		}
	}
	for _, p := range want {
		wantOurs = append(wantOurs, p.name)
	}
	if len(wantOurs) == 0 {
		t.Errorf("%s: globalconfig inserts no HTTP filter here; nothing to check", what)
	}
	if !slices.Equal(gotOurs, wantOurs) {
		t.Errorf("%s: globalconfig's HTTP filters stand as %v; the stage table wants %v", what, gotOurs, wantOurs)
	}
}

func logChain(t *testing.T, what string, chain []chainEntry) {
	t.Helper()
	lines := make([]string, len(chain))
	for i, e := range chain {
		lines[i] = fmt.Sprintf("%2d %s", i, e)
	}
	t.Logf("%s HTTP filters:\n%s", what, strings.Join(lines, "\n"))
}

// httpFilterPatchApplies tells whether an HTTP_FILTER patch applies to the
// HTTP connection manager of filter chain fc of the gateway's listener l,
// as istiod decides it (pilot/pkg/networking/core/envoyfilter).
func httpFilterPatchApplies(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, l *listenerv3.Listener, fc *listenerv3.FilterChain) (bool, error) {
	m := cp.GetMatch()
	if c := m.GetContext(); c != networking.EnvoyFilter_GATEWAY && c != networking.EnvoyFilter_ANY {
		return false, nil
	}
	if len(m.GetProxy().GetMetadata()) > 0 {
		return false, errors.New("proxy metadata matches are not modelled here")
	}
	if pv := m.GetProxy().GetProxyVersion(); pv != "" {
		re, err := regexp.Compile(pv)
		if err != nil {
			return false, err
		}
		if !re.MatchString(gatewayVersion) {
			return false, nil
		}
	}
	lm := m.GetListener()
	if lm == nil {
		return true, nil
	}
	if lm.GetName() != "" && lm.GetName() != l.GetName() {
		return false, nil
	}
	if p := lm.GetPortNumber(); p != 0 && l.GetAddress().GetSocketAddress().GetPortValue() != p {
		return false, nil
	}
	cm := lm.GetFilterChain()
	if cm == nil {
		return true, nil
	}
	fcm := fc.GetFilterChainMatch()
	switch {
	case cm.GetName() != "" && cm.GetName() != fc.GetName():
		return false, nil
	case cm.GetSni() != "" && !slices.Contains(fcm.GetServerNames(), cm.GetSni()):
		return false, nil
	case cm.GetTransportProtocol() != "" && fcm.GetTransportProtocol() != cm.GetTransportProtocol():
		return false, nil
	case cm.GetDestinationPort() != 0 && fcm.GetDestinationPort().GetValue() != cm.GetDestinationPort():
		return false, nil
	}
	if ap := cm.GetApplicationProtocols(); ap != "" {
		for _, p := range strings.Split(ap, ",") {
			if !slices.Contains(fcm.GetApplicationProtocols(), p) {
				return false, nil
			}
		}
	}
	if f := cm.GetFilter(); f != nil && f.GetName() != envoyfilter.HTTPConnectionManager {
		return false, nil
	}
	return true, nil
}
