package items

import (
	"reflect"
)

// The optional capabilities of a value type in an item's struct. The
// document decoder and the JSON Schema look them up on the pointer to the
// field's type, so both receivers work; by convention Values and
// SchemaTypes have value receivers and DecodeScalar a pointer receiver.
// Give every implementing type an interface guard:
//
//	var _ items.Enum = Level("")
//	var _ items.ScalarDecoder = (*Seconds)(nil)
type (
	// Enum is a string type with a fixed set of values; anything else is
	// rejected with a suggestion.
	Enum interface{ Values() []string }
	// ScalarDecoder reads one YAML scalar itself: tag is the resolved YAML
	// tag ("!!int", "!!str"), value the literal text.
	ScalarDecoder interface {
		DecodeScalar(tag, value string) error
	}
	// SchemaTyper names the JSON Schema types a ScalarDecoder accepts.
	SchemaTyper interface{ SchemaTypes() []string }
)

var (
	enumType          = reflect.TypeFor[Enum]()
	scalarDecoderType = reflect.TypeFor[ScalarDecoder]()
	schemaTyperType   = reflect.TypeFor[SchemaTyper]()
	nodeDecoderType   = reflect.TypeFor[NodeDecoder]()
)

// EnumValues returns the values of t when t (or *t) is an Enum.
func EnumValues(t reflect.Type) ([]string, bool) {
	if !reflect.PointerTo(t).Implements(enumType) {
		return nil, false
	}
	return reflect.New(t).Interface().(Enum).Values(), true
}

// AsScalarDecoder returns the ScalarDecoder of the addressable value v,
// when its type (or its pointer type) is one.
func AsScalarDecoder(v reflect.Value) (ScalarDecoder, bool) {
	if !v.CanAddr() || !v.Addr().Type().Implements(scalarDecoderType) {
		return nil, false
	}
	return v.Addr().Interface().(ScalarDecoder), true
}

// AsNodeDecoder returns the NodeDecoder of the addressable value v, when
// its type (or its pointer type) is one.
func AsNodeDecoder(v reflect.Value) (NodeDecoder, bool) {
	if !v.CanAddr() || !v.Addr().Type().Implements(nodeDecoderType) {
		return nil, false
	}
	return v.Addr().Interface().(NodeDecoder), true
}

// SchemaTypes returns the JSON Schema types of t when t (or *t) is a
// SchemaTyper.
func SchemaTypes(t reflect.Type) ([]string, bool) {
	if !reflect.PointerTo(t).Implements(schemaTyperType) {
		return nil, false
	}
	return reflect.New(t).Interface().(SchemaTyper).SchemaTypes(), true
}

// Interface guards of the value types this package provides.
var (
	_ ScalarDecoder = (*Seconds)(nil)
	_ ScalarDecoder = (*Millis)(nil)
	_ ScalarDecoder = (*Port)(nil)
	_ ScalarDecoder = (*ByteSize)(nil)
	_ SchemaTyper   = Seconds{}
	_ SchemaTyper   = Millis{}
	_ SchemaTyper   = Port(0)
	_ SchemaTyper   = ByteSize(0)
)
