// Package preflight predicts one live proxy's Envoy configuration under a
// new document before anything is applied: it reads the proxy's current
// configuration (istiod's /debug/config_dump for it, or a config dump
// file), takes off the patches of globalconfig's current EnvoyFilters that
// reach it, applies the new document's patches the way istiod applies
// EnvoyFilters, and diffs the two at the Envoy level. A real Envoy can then
// load the prediction in validate mode (Validate).
package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Config is the part of a proxy's configuration EnvoyFilters patch: its
// listeners, route configurations and clusters, as istiod sent them.
type Config struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	// Node is the proxy's identity when the dump carries its bootstrap
	// (an Envoy's own /config_dump); istiod's dump has none.
	Node *corev3.Node
	// StaticClusters are the bootstrap's clusters in an Envoy's own dump (istiod's
	// xds-grpc, sds-grpc, ...), which the dynamic resources may name.
	StaticClusters []*clusterv3.Cluster
	// Opaque are the typed-config types this build does not link (an
	// extension outside those istiod writes, Istio's private extensions of
	// a newer release, a custom filter): their content is not read but
	// kept as the dump's JSON, which Validate loads and a diff shows.
	Opaque []string
	// Dropped is the protojson error of fields this build does not know in
	// types it does know (a newer Envoy API), which were dropped; "" when
	// every field was read.
	Dropped string

	res *resolver // knows the stand-ins of Opaque
	// aborted is what Apply could not predict (see patchSet.aborted).
	aborted []string
}

// DumpError is a config dump that can't be read: truncated, not JSON, or
// the output of another tool.
type DumpError struct{ Reason string }

func (e *DumpError) Error() string { return "not an Envoy config dump: " + e.Reason }

// ParseDump reads a config dump: Envoy's admin /config_dump (what
// `istioctl proxy-config all -o json` prints) or istiod's
// /debug/config_dump?proxyID=. Secrets in it are never read.
func ParseDump(data []byte) (*Config, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, &DumpError{"the input is empty"}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) && syn.Offset >= int64(len(data)) || strings.Contains(err.Error(), "unexpected end of JSON input") {
			return nil, &DumpError{fmt.Sprintf("the JSON ends early (truncated after %d bytes?)", len(data))}
		}
		return nil, &DumpError{fmt.Sprintf("not a JSON object: %v", err)}
	}
	raw, ok := top["configs"]
	if !ok {
		keys := make([]string, 0, len(top))
		for k := range top {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 6 {
			keys = append(keys[:6], "…")
		}
		return nil, &DumpError{fmt.Sprintf("it has no \"configs\" list (top-level keys: %s); use istioctl proxy-config all POD -o json, or Envoy's admin /config_dump", strings.Join(keys, ", "))}
	}
	var configs []json.RawMessage
	if err := json.Unmarshal(raw, &configs); err != nil {
		return nil, &DumpError{fmt.Sprintf("\"configs\" is not a list: %v", err)}
	}
	out := &Config{}
	r := newResolver()
	seen := 0
	for i, c := range configs {
		var head struct {
			Type string `json:"@type"`
		}
		if err := json.Unmarshal(c, &head); err != nil || head.Type == "" {
			return nil, &DumpError{fmt.Sprintf("configs[%d] has no \"@type\"", i)}
		}
		var m proto.Message
		switch strings.TrimPrefix(head.Type, "type.googleapis.com/") {
		case "envoy.admin.v3.BootstrapConfigDump":
			m = &adminv3.BootstrapConfigDump{}
		case "envoy.admin.v3.ListenersConfigDump":
			m = &adminv3.ListenersConfigDump{}
		case "envoy.admin.v3.ClustersConfigDump":
			m = &adminv3.ClustersConfigDump{}
		case "envoy.admin.v3.RoutesConfigDump":
			m = &adminv3.RoutesConfigDump{}
		default:
			// Secrets, endpoints, scoped routes, extension configs: not
			// patched by EnvoyFilters here, and secrets are never read.
			continue
		}
		seen++
		dropped, err := r.unmarshal(stripType(c), m)
		if err != nil {
			return nil, &DumpError{fmt.Sprintf("configs[%d] (%s): %v", i, head.Type, err)}
		}
		if dropped != "" && out.Dropped == "" {
			out.Dropped = dropped
		}
		switch d := m.(type) {
		case *adminv3.BootstrapConfigDump:
			out.Node = d.GetBootstrap().GetNode()
			out.StaticClusters = d.GetBootstrap().GetStaticResources().GetClusters()
		case *adminv3.ListenersConfigDump:
			// Static listeners come from the bootstrap; istiod's EnvoyFilters
			// never reach them.
			for _, l := range d.GetDynamicListeners() {
				if a := l.GetActiveState().GetListener(); a != nil {
					lis := &listenerv3.Listener{}
					if err := a.UnmarshalTo(lis); err != nil {
						return nil, &DumpError{fmt.Sprintf("listener %s: %v", l.GetName(), err)}
					}
					out.Listeners = append(out.Listeners, lis)
				}
			}
		case *adminv3.ClustersConfigDump:
			for _, c := range d.GetDynamicActiveClusters() {
				cl := &clusterv3.Cluster{}
				if err := c.GetCluster().UnmarshalTo(cl); err != nil {
					return nil, &DumpError{fmt.Sprintf("cluster: %v", err)}
				}
				out.Clusters = append(out.Clusters, cl)
			}
		case *adminv3.RoutesConfigDump:
			for _, rc := range d.GetDynamicRouteConfigs() {
				rt := &routev3.RouteConfiguration{}
				if err := rc.GetRouteConfig().UnmarshalTo(rt); err != nil {
					return nil, &DumpError{fmt.Sprintf("route configuration: %v", err)}
				}
				out.Routes = append(out.Routes, rt)
			}
		}
	}
	if seen == 0 {
		return nil, &DumpError{"it has no listeners, clusters or routes section"}
	}
	if len(out.Listeners) == 0 {
		return nil, &DumpError{"it has no listener: the proxy has no configuration yet, or the dump is of another kind"}
	}
	out.Opaque = r.opaqueTypes()
	out.res = r
	return out, nil
}

// stripType removes the "@type" key of one configs entry, leaving the
// message's own fields.
func stripType(c json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c, &m); err != nil {
		return c
	}
	delete(m, "@type")
	b, err := json.Marshal(m)
	if err != nil {
		return c
	}
	return b
}

// resolver resolves every type linked into this binary and stands a
// message holding the object's JSON in for any other (see wrap), so that a
// dump with such a type still decodes whole; those types are recorded.
type resolver struct {
	opaque map[string]protoreflect.MessageType
}

func newResolver() *resolver { return &resolver{opaque: map[string]protoreflect.MessageType{}} }

func (r *resolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if t, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil {
		return t, nil
	}
	return r.stand(string(name))
}

func (r *resolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if t, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil {
		return t, nil
	}
	name := url
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		name = url[i+1:]
	}
	return r.stand(name)
}

func (r *resolver) FindExtensionByName(field protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(field)
}

func (r *resolver) FindExtensionByNumber(message protoreflect.FullName, field protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(message, field)
}

// opaqueField is the one field of a stand-in: the JSON of the object it
// stands in for, "@type" taken out (see wrap and expand).
const opaqueField = "json"

// stand returns the stand-in message type of the full name.
func (r *resolver) stand(name string) (protoreflect.MessageType, error) {
	if t, ok := r.opaque[name]; ok {
		return t, nil
	}
	if !protoreflect.FullName(name).IsValid() {
		return nil, fmt.Errorf("invalid type name %q", name)
	}
	pkg, msg := "", name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		pkg, msg = name[:i], name[i+1:]
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("opaque/" + name + ".proto"),
		Package: proto.String(pkg),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String(msg), Field: []*descriptorpb.FieldDescriptorProto{{
			Name: proto.String(opaqueField), JsonName: proto.String(opaqueField), Number: proto.Int32(1),
			Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}}}},
	}, nil)
	if err != nil {
		return nil, err
	}
	t := dynamicpb.NewMessageType(fd.Messages().Get(0))
	r.opaque[name] = t
	return t, nil
}

func (r *resolver) opaqueTypes() []string {
	out := make([]string, 0, len(r.opaque))
	for n := range r.opaque {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// unmarshal decodes strictly. The object of a type this build does not
// link is kept as its JSON in a stand-in (wrap); then any field this build
// does not know in a type it does know is dropped, and reported.
func (r *resolver) unmarshal(b []byte, m proto.Message) (dropped string, err error) {
	strict := protojson.UnmarshalOptions{Resolver: r}
	strictErr := strict.Unmarshal(b, m)
	if strictErr == nil {
		return "", nil
	}
	if len(r.opaque) > 0 {
		if b, err = r.wrap(b); err != nil {
			return "", err
		}
		proto.Reset(m)
		if strictErr = strict.Unmarshal(b, m); strictErr == nil {
			return "", nil
		}
	}
	proto.Reset(m)
	if err := (protojson.UnmarshalOptions{Resolver: r, DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return "", err
	}
	return envoyfilter.ProtojsonDetail(strictErr), nil
}

// wrap is the JSON with every object whose "@type" this build does not
// link replaced by its stand-in: the "@type" and, in the stand-in's one
// field, the rest of the object as JSON text.
func (r *resolver) wrap(b []byte) ([]byte, error) {
	return rewriteTyped(b, func(ty string, t map[string]any) (any, error) {
		name := ty[strings.LastIndexByte(ty, '/')+1:]
		if _, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err == nil || !protoreflect.FullName(name).IsValid() {
			return nil, nil
		}
		if _, err := r.stand(name); err != nil {
			return nil, err
		}
		delete(t, "@type")
		raw, err := encodeJSON(t)
		if err != nil {
			return nil, err
		}
		return map[string]any{"@type": ty, opaqueField: string(raw)}, nil
	})
}

// expand is protojson's output b with every stand-in given back the
// object it stands in for, as the dump had it: what Envoy loads and what
// a diff shows.
func (r *resolver) expand(b []byte) ([]byte, error) {
	if r == nil || len(r.opaque) == 0 {
		return b, nil
	}
	return rewriteTyped(b, func(ty string, t map[string]any) (any, error) {
		if _, stand := r.opaque[ty[strings.LastIndexByte(ty, '/')+1:]]; !stand {
			return nil, nil
		}
		out := map[string]any{}
		if raw, ok := t[opaqueField].(string); ok {
			o, err := decodeJSON([]byte(raw))
			if err != nil {
				return nil, err
			}
			if out, ok = o.(map[string]any); !ok {
				return nil, fmt.Errorf("the kept JSON of a %s is not an object", ty)
			}
		}
		out["@type"] = ty
		return out, nil
	})
}

// rewriteTyped is the JSON b with every object that has an "@type"
// replaced by what f returns for it; where f returns nil the object stays,
// and its fields are rewritten in turn.
func rewriteTyped(b []byte, f func(ty string, obj map[string]any) (any, error)) ([]byte, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	var walk func(v any) (any, error)
	walk = func(v any) (any, error) {
		switch t := v.(type) {
		case map[string]any:
			if ty, ok := t["@type"].(string); ok {
				out, err := f(ty, t)
				if err != nil || out != nil {
					return out, err
				}
			}
			for k, e := range t {
				w, err := walk(e)
				if err != nil {
					return nil, err
				}
				t[k] = w
			}
		case []any:
			for i, e := range t {
				w, err := walk(e)
				if err != nil {
					return nil, err
				}
				t[i] = w
			}
		}
		return v, nil
	}
	w, err := walk(v)
	if err != nil {
		return nil, err
	}
	return encodeJSON(w)
}

// encodeJSON is v as compact JSON, with "<", ">" and "&" as written.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// decodeJSON decodes b keeping numbers as written.
func decodeJSON(b []byte) (any, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
