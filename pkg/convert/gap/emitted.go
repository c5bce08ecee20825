package gap

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// Emitted adds to into the capabilities m carries, in the form of
// items.Capability.Envoy: the full name of every message in it, and that
// name followed by the path of every field set below it, for every
// message (so both "envoy.config.listener.v3.Listener.listener_filters_timeout"
// and, for a cluster's typed protocol options,
// "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options.idle_timeout"
// and "envoy.config.core.v3.HttpProtocolOptions.idle_timeout"). A typed
// config packed in an Any is unpacked and walked as a message of its own;
// one whose type the binary does not link adds only its type's name.
func Emitted(m proto.Message, into map[string]bool) {
	walk(m.ProtoReflect(), into)
}

// walk records m's capabilities and returns the paths of the fields set
// below m, relative to it.
func walk(m protoreflect.Message, into map[string]bool) []string {
	name := string(m.Descriptor().FullName())
	if name == "google.protobuf.Any" {
		a, ok := m.Interface().(*anypb.Any)
		if !ok {
			return nil
		}
		inner, err := a.UnmarshalNew()
		if err != nil {
			if mt, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl()); err == nil {
				into[string(mt.Descriptor().FullName())] = true
			} else if n := a.MessageName(); n != "" {
				into[string(n)] = true
			}
			return nil
		}
		walk(inner.ProtoReflect(), into)
		return nil // the packed message is a root of its own
	}
	into[name] = true
	var paths []string
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		field := string(f.Name())
		paths = append(paths, field)
		var below []string
		switch {
		case f.IsMap():
			if f.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
					below = append(below, walk(e.Message(), into)...)
					return true
				})
			}
		case f.IsList():
			if f.Message() != nil {
				for i := range v.List().Len() {
					below = append(below, walk(v.List().Get(i).Message(), into)...)
				}
			}
		case f.Message() != nil:
			below = walk(v.Message(), into)
		}
		for _, p := range below {
			paths = append(paths, field+"."+p)
		}
		return true
	})
	for _, p := range paths {
		into[name+"."+p] = true
	}
	return paths
}
