package preflight

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Merge merges src into dst as istiod merges an EnvoyFilter's MERGE value
// (its pkg/proto/merge): like proto.Merge, except that a
// google.protobuf.Duration is replaced whole rather than merged field by
// field. A nested Any is a message of a type URL and bytes, so it is
// replaced too.
func Merge(dst, src proto.Message) { mergeMessage(dst.ProtoReflect(), src.ProtoReflect(), false) }

// MergeReplaceLists is MERGE_AND_REPLACE_LIST: a list the value sets
// replaces the list it merges into.
func MergeReplaceLists(dst, src proto.Message) {
	mergeMessage(dst.ProtoReflect(), src.ProtoReflect(), true)
}

const durationName = "google.protobuf.Duration"

func mergeMessage(dst, src protoreflect.Message, replaceLists bool) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			dl := dst.Mutable(fd).List()
			if replaceLists {
				dl.Truncate(0)
			}
			sl := v.List()
			for i := range sl.Len() {
				e := sl.Get(i)
				switch {
				case fd.Message() != nil:
					ne := dl.NewElement()
					mergeMessage(ne.Message(), e.Message(), replaceLists)
					dl.Append(ne)
				case fd.Kind() == protoreflect.BytesKind:
					dl.Append(protoreflect.ValueOfBytes(append([]byte(nil), e.Bytes()...)))
				default:
					dl.Append(e)
				}
			}
		case fd.IsMap():
			dm := dst.Mutable(fd).Map()
			vd := fd.MapValue()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch {
				case vd.Message() != nil:
					nv := dm.NewValue()
					mergeMessage(nv.Message(), mv.Message(), replaceLists)
					dm.Set(k, nv)
				case vd.Kind() == protoreflect.BytesKind:
					dm.Set(k, protoreflect.ValueOfBytes(append([]byte(nil), mv.Bytes()...)))
				default:
					dm.Set(k, mv)
				}
				return true
			})
		case fd.Message() != nil:
			if fd.Message().FullName() == durationName {
				dst.Set(fd, protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect()))
			} else {
				mergeMessage(dst.Mutable(fd).Message(), v.Message(), replaceLists)
			}
		case fd.Kind() == protoreflect.BytesKind:
			dst.Set(fd, protoreflect.ValueOfBytes(append([]byte(nil), v.Bytes()...)))
		default:
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(append(dst.GetUnknown(), u...))
	}
}

// mergeAnys is Istio's merge of a filter's typed config: both unpacked,
// merged, and packed again. Two different types can't be merged; istiod
// then keeps the filter as it was.
func mergeAnys(dst, src *anypb.Any) (*anypb.Any, error) {
	d, err := dst.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	s, err := src.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	if d.ProtoReflect().Descriptor().FullName() != s.ProtoReflect().Descriptor().FullName() {
		return nil, fmt.Errorf("merge %s into %s", s.ProtoReflect().Descriptor().FullName(), d.ProtoReflect().Descriptor().FullName())
	}
	Merge(d, s)
	return anypb.New(d)
}
