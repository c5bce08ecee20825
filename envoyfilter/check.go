package envoyfilter

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/internal/memo"
)

// ToStruct encodes m the way an EnvoyFilter carries it: a Struct whose keys
// are proto field names and whose Any values carry "@type".
func ToStruct(m proto.Message) (*structpb.Struct, error) {
	js, err := protoNames.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(js, s); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return s, nil
}

// protoNames encodes with proto field names, as EnvoyFilter values use them.
var protoNames = protojson.MarshalOptions{UseProtoNames: true}

// FromStruct decodes an EnvoyFilter patch value strictly into the type
// Istio uses for applyTo: an unknown field, a value of the wrong type or an
// unknown "@type" is an error, where Istio would drop or mangle it.
func FromStruct(applyTo networking.EnvoyFilter_ApplyTo, s *structpb.Struct) (proto.Message, error) {
	m, err := ValueType(applyTo)
	if err != nil {
		return nil, err
	}
	js, err := protojson.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode value: %w", err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, m); err != nil {
		return nil, fmt.Errorf("value is not a valid %s: %s", m.ProtoReflect().Descriptor().FullName(), ProtojsonDetail(err))
	}
	return m, nil
}

// ProtojsonDetail is a protojson error without its package prefix and
// with its non-breaking spaces made plain, for messages people read.
func ProtojsonDetail(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "proto:")
	return strings.TrimSpace(strings.ReplaceAll(msg, "\u00a0", " "))
}

// Check is the gate every patch passes before it is published: the value
// must be of the type Istio expects for ApplyTo, must come back unchanged
// from its Struct encoding (no field lost or renamed), and must pass
// Envoy's validation rules — for MERGE, once merged onto a minimal valid
// object of its type, as Istio will merge it onto a real one. It returns
// the Struct to publish.
//
// The answer depends on the patch's content only, so it is memoized by
// content: every render rebuilds unchanged items' patches, and checking
// them again would prove nothing new. The Struct is shared by every
// caller that checks the same content, as published objects are: never
// change it (proto.Clone it first).
func Check(p Patch) (*structpb.Struct, error) {
	key, ok := checkKey(p)
	if !ok {
		return check(p)
	}
	r, ok := checked.Get(key)
	if !ok {
		r.value, r.err = check(p)
		checked.Put(key, r)
		if r.err == nil {
			if wire, err := deterministic.Marshal(r.value); err == nil {
				wires.Put(r.value, wire)
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.value, nil
}

// checkCacheSize bounds the memo of Check: a few times the patches of the
// largest document, so a controller's renders all hit it, while a stream
// of distinct documents can't grow it without limit.
const checkCacheSize = 4096

// checked memoizes check by patch content.
var checked = memo.New[[sha256.Size]byte, checkResult](checkCacheSize)

// wires holds the deterministic wire encoding of the Structs Check hands
// out, by identity: they are never changed, so SpecHash can hash a spec
// made of them without encoding each again.
var wires = memo.New[*structpb.Struct, []byte](checkCacheSize)

type checkResult struct {
	value *structpb.Struct // shared, never changed
	err   error
}

// checkKey is a hash of everything check reads: ApplyTo, Operation and
// the value's deterministic wire encoding. Two values with the same wire
// encoding hold the same fields with the same values (unknown fields
// included), so protojson, the Struct round trip and ValidateAll see the
// same message and give the same answer. A value whose packed Any bytes
// were encoded in another map order only misses the memo. ok is false
// when the value does not encode; check then reports why.
func checkKey(p Patch) (key [sha256.Size]byte, ok bool) {
	if p.Value == nil {
		return key, false
	}
	b := make([]byte, 0, 256)
	b = binary.AppendUvarint(b, uint64(p.ApplyTo))
	b = binary.AppendUvarint(b, uint64(p.Operation))
	b = append(b, p.Value.ProtoReflect().Descriptor().FullName()...)
	b = append(b, 0)
	b, err := deterministic.MarshalAppend(b, p.Value)
	if err != nil {
		return key, false
	}
	return sha256.Sum256(b), true
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// check is Check without the memo.
func check(p Patch) (*structpb.Struct, error) {
	want, err := ValueType(p.ApplyTo)
	if err != nil {
		return nil, err
	}
	if p.Value == nil {
		return nil, errors.New("patch has no value")
	}
	if got, exp := p.Value.ProtoReflect().Descriptor().FullName(), want.ProtoReflect().Descriptor().FullName(); got != exp {
		return nil, fmt.Errorf("%s patch value must be %s, got %s", p.ApplyTo, exp, got)
	}
	// Encode as Istio carries it: proto JSON, then a Struct (whose numbers
	// are float64, so this is where a huge integer would lose digits).
	js, err := protoNames.Marshal(p.Value)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", want.ProtoReflect().Descriptor().FullName(), err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(js, s); err != nil {
		return nil, fmt.Errorf("encode %s: %w", want.ProtoReflect().Descriptor().FullName(), err)
	}
	back, err := FromStruct(p.ApplyTo, s)
	if err != nil {
		return nil, err
	}
	// The value must come back as it went in. Compare the JSON forms:
	// protojson sorts map keys and expands Anys, while packed Any bytes of
	// messages with maps differ from one marshal to the next.
	again, err := protoNames.Marshal(back)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(again, js) {
		return nil, fmt.Errorf("%s value changes in its Struct encoding", p.ApplyTo)
	}
	if err := Validate(p.ApplyTo, p.Operation, back); err != nil {
		return nil, err
	}
	return s, nil
}

// Validate runs Envoy's validation rules over a patch value and over every
// message packed in an Any inside it. A MERGE value is partial, so it is
// validated merged onto a minimal valid object of its type.
func Validate(applyTo networking.EnvoyFilter_ApplyTo, op networking.EnvoyFilter_Patch_Operation, value proto.Message) error {
	if op == networking.EnvoyFilter_Patch_MERGE {
		merged, err := mergeOntoBase(applyTo, value)
		if err != nil {
			return err
		}
		value = merged
	}
	return validateDeep(value)
}

type validator interface{ ValidateAll() error }

func validateDeep(m proto.Message) error {
	var errs []error
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	walkAnys(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("typed config %q: %w", a.GetTypeUrl(), err))
			return
		}
		if err := validateDeep(inner); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// walkAnys calls f for every Any reachable from m without crossing another
// Any (validateDeep recurses into those itself).
func walkAnys(m protoreflect.Message, f func(*anypb.Any)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		visit := func(v protoreflect.Value) {
			msg := v.Message()
			if a, ok := msg.Interface().(*anypb.Any); ok {
				f(a)
				return
			}
			walkAnys(msg, f)
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v)
		}
		return true
	})
}

// mergeOntoBase merges value onto a minimal valid object of its type the way
// Istio merges patches: filters have their typed configs merged, not
// replaced.
func mergeOntoBase(applyTo networking.EnvoyFilter_ApplyTo, value proto.Message) (proto.Message, error) {
	switch v := value.(type) {
	case *listenerv3.Filter:
		typed, err := mergeTyped(v.GetTypedConfig())
		if err != nil {
			return nil, err
		}
		out := proto.Clone(v).(*listenerv3.Filter)
		out.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: typed}
		return out, nil
	case *hcmv3.HttpFilter:
		typed, err := mergeTyped(v.GetTypedConfig())
		if err != nil {
			return nil, err
		}
		out := proto.Clone(v).(*hcmv3.HttpFilter)
		out.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}
		return out, nil
	}
	base := baseFor(applyTo)
	if base == nil {
		return value, nil
	}
	proto.Merge(base, value)
	return base, nil
}

func mergeTyped(a *anypb.Any) (*anypb.Any, error) {
	if a == nil {
		return nil, nil
	}
	patch, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("typed config %q: %w", a.GetTypeUrl(), err)
	}
	base := baseTyped(patch)
	proto.Merge(base, patch)
	return anypb.New(base)
}

// baseTyped is a minimal valid filter config of m's type.
func baseTyped(m proto.Message) proto.Message {
	if _, ok := m.(*hcmv3.HttpConnectionManager); ok {
		router, _ := anypb.New(&routerv3.Router{})
		return &hcmv3.HttpConnectionManager{
			StatPrefix: "base",
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
				RouteConfigName: "base",
				ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
			}},
			HttpFilters: []*hcmv3.HttpFilter{{Name: Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
		}
	}
	return m.ProtoReflect().Type().New().Interface()
}

// baseFor is a minimal valid object of the type applyTo patches, or nil
// when the empty message already is one.
func baseFor(applyTo networking.EnvoyFilter_ApplyTo) proto.Message {
	switch applyTo {
	case networking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{Name: "base"}
	case networking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{Name: "base"}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{Name: "base"}
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{Name: "base", Domains: []string{"*"}}
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "base"}}},
		}
	}
	return nil
}
