package items_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

// intRangePattern (through DurationLimits' pattern in nanoseconds) matches
// exactly the whole numbers in its range, for ranges of every length.
func TestDurationLimitsPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	units := []struct {
		suffix string
		size   time.Duration
	}{{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}}
	bounds := [][2]time.Duration{
		{time.Nanosecond, 0}, {50 * time.Millisecond, 0}, {time.Second, time.Hour}, {1500 * time.Millisecond, 90 * time.Minute},
		{7 * time.Nanosecond, 12345 * time.Nanosecond}, {time.Minute, time.Minute},
	}
	for i := 0; i < 20; i++ {
		lo := time.Duration(rng.Int64N(int64(10 * time.Second)))
		bounds = append(bounds, [2]time.Duration{lo + 1, lo + 1 + time.Duration(rng.Int64N(int64(3*time.Hour)))})
	}
	for _, b := range bounds {
		r := items.DurationRange("d", b[0], b[1])
		l := items.DurationLimits(r, time.Second)
		re := regexp.MustCompile(l.Pattern)
		in := func(d time.Duration) bool { return d >= b[0] && (b[1] == 0 || d <= b[1]) }
		check := func(s string) {
			d, err := time.ParseDuration(s)
			matched := re.MatchString(s)
			if matched && (err != nil || !in(d)) {
				t.Fatalf("%v: pattern %s takes %q (%v, %v), which validation refuses", b, l.Pattern, s, d, err)
			}
			if !matched && err == nil && in(d) {
				t.Fatalf("%v: pattern %s refuses the whole %q (%v)", b, l.Pattern, s, d)
			}
		}
		for _, u := range units {
			// Around each bound, in this unit, and a spread between.
			var ns []int64
			for _, at := range []time.Duration{b[0], b[1]} {
				c := int64(at / u.size)
				for k := c - 3; k <= c+3; k++ {
					if k >= 0 {
						ns = append(ns, k)
					}
				}
			}
			for range 200 {
				ns = append(ns, rng.Int64N(int64(4*time.Hour/u.size)+1))
			}
			for _, n := range ns {
				s := strconv.FormatInt(n, 10) + u.suffix
				check(s)
				check("+0" + s)
			}
		}
		if m := *l.Minimum; math.Abs(m-b[0].Seconds()) > 1e-9 {
			t.Errorf("%v: minimum %v", b, m)
		}
	}
}
