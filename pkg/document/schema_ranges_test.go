package document

import (
	"math"
	"reflect"
	"testing"

	"github.com/globalconfig/globalconfig/items"
)

type rangedInner struct {
	N *uint32 `json:"n"`
}

type rangedSection struct {
	items.Toggle
	Sub  *rangedInner           `json:"sub"`
	List []rangedInner          `json:"list"`
	Map  map[string]rangedInner `json:"map"`
	Ints [][]uint32             `json:"ints"`
	U    uint32                 `json:"u"`
}

// A Range reaches its node through sub-sections, list elements and map
// values, and replaces the minimum 0 of an unsigned key.
func TestSetRange(t *testing.T) {
	s := schemaOf(reflect.TypeFor[rangedSection](), reflect.Value{})
	for _, c := range []struct {
		r    items.Range
		node func() *Schema
	}{
		{items.Range{Path: "sub.n", Min: 1, Max: 5}, func() *Schema { return s.Properties["sub"].Properties["n"] }},
		{items.Range{Path: "list[].n", Min: 2, Max: 6}, func() *Schema { return s.Properties["list"].Items.Properties["n"] }},
		{items.Range{Path: "map.*.n", Min: 3, Max: 7}, func() *Schema {
			return s.Properties["map"].AdditionalProperties.(*Schema).Properties["n"]
		}},
		{items.AtLeast("ints[][]", 4), func() *Schema { return s.Properties["ints"].Items.Items }},
		{items.AtLeast("u", 1), func() *Schema { return s.Properties["u"] }},
	} {
		setRange(s, c.r, reflect.TypeFor[rangedSection](), "test")
		n := c.node()
		if n.Minimum == nil || *n.Minimum != c.r.Min {
			t.Errorf("%s: minimum %v, want %v", c.r.Path, n.Minimum, c.r.Min)
		}
		if wantMax := c.r.Max; (n.Maximum == nil) != math.IsInf(wantMax, 1) || (n.Maximum != nil && *n.Maximum != wantMax) {
			t.Errorf("%s: maximum %v, want %v", c.r.Path, n.Maximum, wantMax)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a Range naming no key did not panic")
		}
	}()
	setRange(s, items.Range{Path: "sub.m", Min: 1, Max: 2}, reflect.TypeFor[rangedSection](), "test")
}
