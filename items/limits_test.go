package items_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
)

type Inner struct {
	N *uint32 `json:"n"`
	F float64 `json:"f"`
}

type Embedded struct {
	E int32 `json:"e"`
}

// ranged has a Range through every kind of step a path can take.
type ranged struct {
	fake
	Embedded
	Sub  *Inner           `json:"sub"`
	Opt  *Inner           `json:"opt"`
	List []Inner          `json:"list"`
	Map  map[string]Inner `json:"map"`
	Ints [][]uint32       `json:"ints"`
}

func (*ranged) Ranges() []items.Range {
	return []items.Range{
		{Path: "e", Min: 1, Max: 5},
		{Path: "sub.n", Min: 1, Max: 5},
		{Path: "opt.n", Min: 1, Max: 5},
		{Path: "list[].f", Min: 0, Max: 1},
		{Path: "map.*.n", Min: 2, Max: 3},
		items.AtLeast("ints[][]", 2),
	}
}

func u32(v uint32) *uint32 { return &v }

func TestCheckRanges(t *testing.T) {
	r := &ranged{
		Embedded: Embedded{E: 9},
		Sub:      &Inner{N: u32(0)},
		List:     []Inner{{F: 0.5}, {F: 1.5}},
		Map:      map[string]Inner{"b": {N: u32(4)}, "a.b": {N: u32(7)}, "c": {}},
		Ints:     [][]uint32{{2, 1}},
	}
	var p items.Problems
	items.CheckRanges(&p, r)
	var got []string
	if err := p.Err(); err != nil {
		got = strings.Split(err.Error(), "\n")
	}
	want := []string{
		"e: must be between 1 and 5, got 9",
		"sub.n: must be between 1 and 5, got 0",
		"list[1].f: must be between 0 and 1, got 1.5",
		`map["a.b"].n: must be between 2 and 3, got 7`,
		"map.b.n: must be between 2 and 3, got 4",
		"ints[0][1]: must be at least 2, got 1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if keys := (items.Range{Path: "list[].f"}).Keys(); !reflect.DeepEqual(keys, []string{"list", "[]", "f"}) {
		t.Errorf("keys %q", keys)
	}
}

type misnamed struct{ fake }

func (*misnamed) Ranges() []items.Range { return []items.Range{{Path: "enabled", Min: 0, Max: 1}} }

func TestCheckRangesRefusesABadPath(t *testing.T) {
	mustPanic(t, `Range "enabled"`, func() { items.CheckRanges(new(items.Problems), &misnamed{}) })
}
