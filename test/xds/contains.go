package xds

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Contains reports whether every field set in want is set to the same
// value in live: what a MERGE of want onto live would leave unchanged.
// Lists are compared as "every element of want appears in live" (a MERGE
// appends), maps key by key, and Any values by their unpacked messages.
func Contains(live, want proto.Message) bool {
	return containsMsg(live.ProtoReflect(), want.ProtoReflect())
}

func containsMsg(live, want protoreflect.Message) bool {
	if la, ok := live.Interface().(*anypb.Any); ok {
		wa := want.Interface().(*anypb.Any)
		if la.GetTypeUrl() != wa.GetTypeUrl() {
			return false
		}
		lm, err1 := la.UnmarshalNew()
		wm, err2 := wa.UnmarshalNew()
		if err1 != nil || err2 != nil {
			return proto.Equal(la, wa)
		}
		return containsMsg(lm.ProtoReflect(), wm.ProtoReflect())
	}
	ok := true
	want.Range(func(fd protoreflect.FieldDescriptor, wv protoreflect.Value) bool {
		if !live.Has(fd) {
			ok = false
			return false
		}
		lv := live.Get(fd)
		switch {
		case fd.IsList():
			ok = listContains(fd, lv.List(), wv.List())
		case fd.IsMap():
			wv.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				l := lv.Map().Get(k)
				if !lv.Map().Has(k) || !valueContains(fd.MapValue(), l, v) {
					ok = false
				}
				return ok
			})
		default:
			ok = valueContains(fd, lv, wv)
		}
		return ok
	})
	return ok
}

func listContains(fd protoreflect.FieldDescriptor, live, want protoreflect.List) bool {
	for i := 0; i < want.Len(); i++ {
		found := false
		for j := 0; j < live.Len() && !found; j++ {
			found = valueContains(fd, live.Get(j), want.Get(i))
		}
		if !found {
			return false
		}
	}
	return true
}

func valueContains(fd protoreflect.FieldDescriptor, live, want protoreflect.Value) bool {
	if fd.Message() != nil {
		return containsMsg(live.Message(), want.Message())
	}
	return live.Equal(want)
}
