package items

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Seconds is a duration written as Higress writes it, a number of seconds
// (a fraction taken: 0.05 is 50ms), or as a Go duration string ("90s",
// "1m30s", "250ms").
type Seconds struct{ time.Duration }

// Millis is a duration whose bare numbers are milliseconds (Higress's
// tracing timeout), or a Go duration string.
type Millis struct{ time.Duration }

// DecodeScalar implements the document decoder's scalar hook.
func (d *Seconds) DecodeScalar(tag, value string) error {
	v, err := decodeDuration(tag, value, time.Second)
	d.Duration = v
	return err
}

// DecodeScalar implements the document decoder's scalar hook.
func (d *Millis) DecodeScalar(tag, value string) error {
	v, err := decodeDuration(tag, value, time.Millisecond)
	d.Duration = v
	return err
}

// SchemaTypes implements the schema hook.
func (Seconds) SchemaTypes() []string { return []string{"number", "string"} }

// SchemaTypes implements the schema hook.
func (Millis) SchemaTypes() []string { return []string{"number", "string"} }

// MarshalJSON writes the duration as a Go duration string.
func (d Seconds) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// MarshalJSON writes the duration as a Go duration string.
func (d Millis) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func decodeDuration(tag, value string, unit time.Duration) (time.Duration, error) {
	switch tag {
	case "!!int", "!!float":
		// A fraction of the unit is taken ("fillInterval: 0.05" is 50ms):
		// a bare number's unit is the key's, whole or not.
		f, err := strconv.ParseFloat(value, 64)
		if tag == "!!int" {
			var n int64
			n, err = strconv.ParseInt(value, 0, 64)
			f = float64(n)
		}
		switch {
		case err != nil && tag == "!!int" && !strings.HasPrefix(value, "-"):
			return 0, tooLong(value, unit)
		case err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || strings.HasPrefix(value, "-"):
			return 0, fmt.Errorf("must be a non-negative number of %s or a duration such as \"90s\", got %s", unitName(unit), value)
		case f > float64(maxDuration/unit):
			return 0, tooLong(value, unit)
		}
		return time.Duration(math.Round(f * float64(unit))), nil
	case "!!str":
		if !durationSyntax.MatchString(value) {
			if strings.HasPrefix(value, "-") {
				return 0, fmt.Errorf("must not be negative, got %q", value)
			}
			return 0, fmt.Errorf("must be a duration such as \"90s\" or \"500ms\", got %q", value)
		}
		d, err := time.ParseDuration(value)
		if err != nil || d > maxDuration {
			// The syntax is right: only the magnitude is past what Go
			// (about 290 years) or we (10 years) can hold.
			return 0, tooLong(value, unit)
		}
		return d, nil
	}
	return 0, fmt.Errorf("expected a number of %s or a duration string, got %s", unitName(unit), DescribeTag(tag))
}

// tooLong is the problem of a duration past maxDuration.
func tooLong(value string, unit time.Duration) error {
	return fmt.Errorf("is %s, longer than the longest duration taken, 10 years (%dh, or %d %s)", value, int64(maxDuration/time.Hour), int64(maxDuration/unit), unitName(unit))
}

// durationSyntax is durationPattern compiled once.
var durationSyntax = regexp.MustCompile(durationPattern)

// maxDuration keeps durations within what protobuf's Duration and Envoy
// accept comfortably: about 10 years.
const maxDuration = 10 * 365 * 24 * time.Hour

// durationPattern is the string form decodeDuration accepts: what
// time.ParseDuration reads, without a sign but "+", in time's units. A
// string's magnitude is not in it: time.ParseDuration refuses more than
// about 290 years, which only validation sees.
const durationPattern = `^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// durationLimits are the Limits of a duration whose bare integers are in
// unit.
func durationLimits(unit time.Duration) Limits {
	return Limits{Minimum: ptr(0), Maximum: ptr(float64(maxDuration / unit)), Pattern: durationPattern}
}

func ptr(f float64) *float64 { return &f }

func unitName(unit time.Duration) string {
	if unit == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// Port is a TCP port, 1–65535. Higress writes ports as strings ("9411"),
// so both a number and a numeric string are accepted.
type Port uint32

// The range of a Port.
const MinPort, MaxPort = 1, 65535

// portPattern is the string form of a port from MinPort to MaxPort, in
// decimal, leading zeros allowed (strconv.ParseUint reads "0080" as 80).
const portPattern = `^0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$`

// DecodeScalar implements the document decoder's scalar hook.
func (p *Port) DecodeScalar(tag, value string) error {
	if tag != "!!int" && tag != "!!str" {
		return fmt.Errorf("expected a port number, got %s", DescribeTag(tag))
	}
	n, err := strconv.ParseUint(value, 10, 32)
	if err != nil || n < MinPort || n > MaxPort {
		return fmt.Errorf("must be a port number from %d to %d, got %q", MinPort, MaxPort, value)
	}
	*p = Port(n)
	return nil
}

// SchemaTypes implements the schema hook.
func (Port) SchemaTypes() []string { return []string{"integer", "string"} }

// DescribeTag turns a YAML core tag into the word a user knows.
func DescribeTag(tag string) string {
	switch tag {
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!str":
		return "a string"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	}
	return tag
}

// Problems is where an item's Validate records what is wrong.
type Problems = fielderr.List

// EnumNames returns the names of a protobuf enum's value map, sorted; an
// item's string enum types return it from Values().
func EnumNames(m map[string]int32) []string {
	return slices.Sorted(maps.Keys(m))
}

// ByteSize is a size in bytes: an integer, or a string with a binary
// (Ki, Mi, Gi) or decimal (K, M, G) suffix such as "10Mi".
type ByteSize uint64

// DecodeScalar implements the document decoder's scalar hook.
func (b *ByteSize) DecodeScalar(tag, value string) error {
	switch tag {
	case "!!int":
		n, err := strconv.ParseUint(value, 0, 64)
		if err != nil {
			return fmt.Errorf("must be a non-negative number of bytes, got %s", value)
		}
		*b = ByteSize(n)
		return nil
	case "!!str":
		for _, u := range byteUnits {
			if num, ok := strings.CutSuffix(value, u.suffix); ok {
				n, err := strconv.ParseUint(num, 10, 64)
				if err != nil || n > math.MaxUint64/u.factor {
					break
				}
				*b = ByteSize(n * u.factor)
				return nil
			}
		}
		return fmt.Errorf("must be a size such as 1048576, \"512Ki\" or \"10Mi\", got %q", value)
	}
	return fmt.Errorf("expected a size in bytes, got %s", DescribeTag(tag))
}

// SchemaTypes implements the schema hook.
func (ByteSize) SchemaTypes() []string { return []string{"integer", "string"} }

// byteUnits are tried in order, so "Mi" is matched before "M".
var byteUnits = []struct {
	suffix string
	factor uint64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9},
}

// byteSizePattern is the string form ByteSize accepts: decimal digits and
// one of byteUnits (a bare number is an integer). A size beyond 2^64-1
// bytes is refused by validation only.
func byteSizePattern() string {
	suffixes := make([]string, len(byteUnits))
	for i, u := range byteUnits {
		suffixes[i] = u.suffix
	}
	return "^[0-9]+(" + strings.Join(suffixes, "|") + ")$"
}

// The Limits of the value types above, for the JSON Schema; DecodeScalar
// enforces them with the same constants.
func init() {
	DeclareLimits[Seconds](durationLimits(time.Second))
	DeclareLimits[Millis](durationLimits(time.Millisecond))
	DeclareLimits[Port](Limits{Minimum: ptr(MinPort), Maximum: ptr(MaxPort), Pattern: portPattern})
	DeclareLimits[ByteSize](Limits{Minimum: ptr(0), Pattern: byteSizePattern()})
}

// durationUnits are the units of the duration types' bare integers.
var durationUnits = map[reflect.Type]time.Duration{
	reflect.TypeFor[Seconds](): time.Second,
	reflect.TypeFor[Millis]():  time.Millisecond,
}

// DurationUnit is the unit of t's bare integers when t is a duration type
// (Seconds, Millis).
func DurationUnit(t reflect.Type) (time.Duration, bool) {
	u, ok := durationUnits[t]
	return u, ok
}

// DurationLimits are the Limits the JSON Schema gives a duration key with
// the Range r (a DurationRange) whose bare integers are in unit: the bounds
// of the number form, and a pattern of the string forms within the range.
// The pattern takes one unit with a whole number ("50ms", "2m", "+90s",
// "1.0h"); validation also takes sums and fractions ("1m30s", "0.5s"),
// which a pattern can't bound, so an editor may flag those but never
// offers a value validation refuses.
func DurationLimits(r Range, unit time.Duration) Limits {
	lo, hi := seconds(r.Min), seconds(r.Max)
	open := math.IsInf(r.Max, 1)
	l := Limits{Minimum: ptr(float64(lo) / float64(unit))}
	if !open {
		l.Maximum = ptr(float64(hi) / float64(unit))
	}
	var forms []string
	for _, u := range stringUnits {
		first := (lo + u.size - 1) / u.size // the least whole count at least lo
		if open {
			forms = append(forms, "("+intRangePattern(uint64(first), 0, true)+")"+u.pattern)
			continue
		}
		last := hi / u.size
		if first <= last {
			forms = append(forms, "("+intRangePattern(uint64(first), uint64(last), false)+")"+u.pattern)
		}
	}
	l.Pattern = `^\+?0*(` + strings.Join(forms, "|") + `)$`
	return l
}

// stringUnits are time.ParseDuration's units, as patterns; the fraction
// (\.0*)? keeps the number whole.
var stringUnits = []struct {
	size    time.Duration
	pattern string
}{
	{time.Nanosecond, `(\.0*)?ns`},
	{time.Microsecond, `(\.0*)?(us|µs|μs)`},
	{time.Millisecond, `(\.0*)?ms`},
	{time.Second, `(\.0*)?s`},
	{time.Minute, `(\.0*)?m`},
	{time.Hour, `(\.0*)?h`},
}

// intRangePattern matches the decimal numbers from lo to hi, without
// leading zeros, or from lo up when open.
func intRangePattern(lo, hi uint64, open bool) string {
	a := strconv.FormatUint(lo, 10)
	var alts []string
	if open {
		alts = sameLength(a, strings.Repeat("9", len(a)))
		alts = append(alts, fmt.Sprintf("[1-9][0-9]{%d,}", len(a)))
		return strings.Join(alts, "|")
	}
	b := strconv.FormatUint(hi, 10)
	for n := len(a); n <= len(b); n++ {
		from, to := a, b
		if n > len(a) {
			from = "1" + strings.Repeat("0", n-1)
		}
		if n < len(b) {
			to = strings.Repeat("9", n)
		}
		alts = append(alts, sameLength(from, to)...)
	}
	return strings.Join(alts, "|")
}

// sameLength matches the numbers from a to b, both of one length, a <= b.
func sameLength(a, b string) []string {
	if a == b {
		return []string{a}
	}
	if a[0] == b[0] {
		var out []string
		for _, rest := range sameLength(a[1:], b[1:]) {
			out = append(out, a[:1]+rest)
		}
		return out
	}
	n := len(a) - 1
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	any := strings.Repeat("[0-9]", n)
	digits := func(lo, hi byte) string {
		if lo == hi {
			return string(lo)
		}
		return fmt.Sprintf("[%c-%c]", lo, hi)
	}
	lo, hi := a[0], b[0]
	var out []string
	if a[1:] != zeros {
		for _, rest := range sameLength(a[1:], nines) {
			out = append(out, a[:1]+rest)
		}
		lo++
	}
	top := hi
	if b[1:] != nines {
		top--
	}
	if lo <= top {
		out = append(out, digits(lo, top)+any)
	}
	if b[1:] != nines {
		for _, rest := range sameLength(zeros, b[1:]) {
			out = append(out, b[:1]+rest)
		}
	}
	return out
}

// ParseCIDR reads an address range. A bare address is a range of one (/32
// or /128); a range with host bits set is refused, since it most likely
// names the wrong range.
func ParseCIDR(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("must be an address range such as 10.0.0.0/8 or 2001:db8::/32, got %q", s)
	}
	if pfx.Masked() != pfx {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set; did you mean %s?", s, pfx.Masked())
	}
	return pfx, nil
}
