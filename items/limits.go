package items

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Limits are declared once and read twice: by validation, which enforces
// them, and by the JSON Schema, which shows them to editors. A value type
// (a ScalarDecoder) declares Limits; an item declares a Range for each
// numeric key with bounds.

// Limits is what the JSON Schema says about the scalar a value type
// accepts, beyond its types. JSON Schema applies Minimum and Maximum to
// numbers only and Pattern to strings only, so a type that takes both
// (SchemaTypes ["integer", "string"]) bounds its number and spells its
// string on one node.
type Limits struct {
	// Minimum and Maximum bound the number form; nil is unbounded.
	Minimum, Maximum *float64
	// Pattern matches the whole string form: anchored with ^ and $,
	// written in the syntax RE2 (Go) and ECMA-262 (editors) share.
	Pattern string
}

var (
	limitsMu    sync.RWMutex
	valueLimits = map[reflect.Type]Limits{}
)

// DeclareLimits declares the Limits of the value type T, whose
// DecodeScalar enforces them with the same constants. Call it from init().
// They are T's alone, not a method: a type that embeds T and reads its own
// scalar differently (tls.MaxAge embeds Seconds and also takes
// "31536000") would otherwise inherit a pattern that refuses what it
// accepts. A pattern that does not compile panics.
func DeclareLimits[T any, PT interface {
	*T
	ScalarDecoder
}](l Limits) {
	if l.Pattern != "" {
		if !strings.HasPrefix(l.Pattern, "^") || !strings.HasSuffix(l.Pattern, "$") {
			panic(fmt.Sprintf("items: the pattern of %s must be anchored with ^ and $: %q", reflect.TypeFor[T](), l.Pattern))
		}
		regexp.MustCompile(l.Pattern)
	}
	limitsMu.Lock()
	defer limitsMu.Unlock()
	valueLimits[reflect.TypeFor[T]()] = l
}

// LimitsOf returns the Limits declared for exactly the type t.
func LimitsOf(t reflect.Type) (Limits, bool) {
	limitsMu.RLock()
	defer limitsMu.RUnlock()
	l, ok := valueLimits[t]
	return l, ok
}

// Range is the range of one numeric key of an item's section. The item
// lists it in Ranges, built from its named constants; Validate enforces
// it with CheckRanges and the JSON Schema carries it as minimum and
// maximum, so the numbers live in one place.
type Range struct {
	// Path is the key relative to the section, by its document names
	// ("chunkSize", "http2.maxConcurrentStreams"). "[]" after a key
	// stands for every element of a list ("perHeader[].maxTokens"), a
	// "*" segment for every value of a map ("buckets.*.maxTokens"). The
	// key holds an integer or a float, or a pointer to one; embedded
	// structs are walked inline, and an unset pointer on the way is not
	// checked.
	Path string
	// Min and Max are inclusive; Max is +Inf for a key with no ceiling
	// (see AtLeast).
	Min, Max float64
	// OneOf, when set, are the only values taken (see OneOf); Min and Max
	// are its least and greatest.
	OneOf []float64
	// Why, when set, ends the problem of a value out of range: why the
	// limit is there.
	Why string
	// Duration says the key is a duration (Seconds or Millis) and Min and
	// Max are seconds (see DurationRange).
	Duration bool
}

// DurationRange is the Range of a duration key (a Seconds or a Millis):
// from lo to hi inclusive, or from lo with no ceiling when hi is 0. A
// floor of one nanosecond reads "greater than 0".
func DurationRange(path string, lo, hi time.Duration) Range {
	r := Range{Path: path, Min: lo.Seconds(), Max: math.Inf(1), Duration: true}
	if hi > 0 {
		r.Max = hi.Seconds()
	}
	return r
}

// durationOf is the duration v holds when it is a Seconds, a Millis or a
// type embedding one.
func durationOf(v reflect.Value) (time.Duration, bool) {
	if v.Kind() != reflect.Struct {
		return 0, false
	}
	f := v.FieldByName("Duration")
	if !f.IsValid() || f.Type() != reflect.TypeFor[time.Duration]() {
		return 0, false
	}
	return time.Duration(f.Int()), true
}

// seconds is a Range bound in seconds as a duration.
func seconds(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Second))) }

// OneOf is the Range of a key that takes only values (an enum of
// numbers), at least two, in increasing order.
func OneOf(path string, values ...float64) Range {
	if len(values) < 2 || !slices.IsSorted(values) {
		panic(fmt.Sprintf("items: OneOf %q: give at least two values in increasing order", path))
	}
	return Range{Path: path, Min: values[0], Max: values[len(values)-1], OneOf: values}
}

// ErrorStatuses is the Range of a key that takes an HTTP status from 400
// that Envoy's StatusCode enum knows (its HttpStatus refuses the others).
func ErrorStatuses(path string) Range {
	var codes []float64
	for c := range typev3.StatusCode_name {
		if c >= 400 {
			codes = append(codes, float64(c))
		}
	}
	slices.Sort(codes)
	return OneOf(path, codes...)
}

// Spans writes the values of OneOf with consecutive integers as spans:
// "400-417, 421-424, 426".
func (r Range) Spans() string {
	var out []string
	for i := 0; i < len(r.OneOf); {
		j := i
		for j+1 < len(r.OneOf) && r.OneOf[j+1] == r.OneOf[j]+1 {
			j++
		}
		if j > i {
			out = append(out, number(r.OneOf[i])+"-"+number(r.OneOf[j]))
		} else {
			out = append(out, number(r.OneOf[i]))
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}

// AtLeast is the Range of a key with a floor and no ceiling.
func AtLeast(path string, lo float64) Range { return Range{Path: path, Min: lo, Max: math.Inf(1)} }

// Ranger is implemented by items with Ranges. Validate calls CheckRanges
// with the item itself; the JSON Schema reads the same list.
type Ranger interface {
	Ranges() []Range
}

// Keys splits the path into its steps: key names, "[]" for the elements
// of a list and "*" for the values of a map.
func (r Range) Keys() []string {
	var out []string
	for _, seg := range strings.Split(r.Path, ".") {
		name, lists := seg, 0
		for strings.HasSuffix(name, "[]") {
			name, lists = strings.TrimSuffix(name, "[]"), lists+1
		}
		out = append(out, name)
		for range lists {
			out = append(out, "[]")
		}
	}
	return out
}

// CheckRanges records a problem at every key of it outside its Range:
// "must be between LO and HI, got V", or "must be at least LO, got V"
// without a ceiling. A path that names no numeric key is a programming
// error and panics, whatever the values.
func CheckRanges(p *Problems, it Ranger) {
	v := reflect.ValueOf(it)
	for _, r := range it.Ranges() {
		keys := r.Keys()
		checked := pathKey{v.Type(), r.Path}
		if _, ok := pathsChecked.Load(checked); !ok {
			if err := checkPath(v.Type(), keys, r.Duration); err != nil {
				panic(fmt.Sprintf("items: %T: Range %q: %v", it, r.Path, err))
			}
			pathsChecked.Store(checked, true)
		}
		eachValue(v, keys, "", func(path string, v reflect.Value) {
			if r.Duration {
				checkDuration(p, r, path, v)
				return
			}
			var f float64
			var got string // as %v writes the key's own type
			switch {
			case v.CanInt():
				f, got = float64(v.Int()), strconv.FormatInt(v.Int(), 10)
			case v.CanUint():
				f, got = float64(v.Uint()), strconv.FormatUint(v.Uint(), 10)
			default:
				f, got = v.Float(), strconv.FormatFloat(v.Float(), 'g', -1, v.Type().Bits())
			}
			why := ""
			if r.Why != "" {
				why = ": " + r.Why
			}
			switch {
			case f >= r.Min && f <= r.Max && (r.OneOf == nil || slices.Contains(r.OneOf, f)):
			case r.OneOf != nil:
				p.Addf(path, "must be one of %s, got %s%s", r.Spans(), got, why)
			case math.IsInf(r.Max, 1):
				p.Addf(path, "must be at least %s, got %s%s", number(r.Min), got, why)
			default:
				p.Addf(path, "must be between %s and %s, got %s%s", number(r.Min), number(r.Max), got, why)
			}
		})
	}
}

// checkDuration records a problem at path when the duration v holds is
// outside r.
func checkDuration(p *Problems, r Range, path string, v reflect.Value) {
	d, _ := durationOf(v)
	lo, hi := seconds(r.Min), seconds(r.Max)
	why := ""
	if r.Why != "" {
		why = ": " + r.Why
	}
	switch {
	case d >= lo && (math.IsInf(r.Max, 1) || d <= hi):
	case lo == time.Nanosecond && math.IsInf(r.Max, 1):
		p.Addf(path, "must be greater than 0%s", why)
	case math.IsInf(r.Max, 1):
		p.Addf(path, "must be at least %s, got %s%s", lo, d, why)
	default:
		p.Addf(path, "must be between %s and %s, got %s%s", lo, hi, d, why)
	}
}

// pathKey is a Range's path on an item type; pathsChecked holds those
// checkPath found sound, so each is checked once per process.
type pathKey struct {
	t    reflect.Type
	path string
}

var pathsChecked sync.Map

// number writes a limit as the integer it usually is (2147483647, not
// 2.147483647e+09).
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// checkPath reports why keys name no numeric key of t, or no duration key
// when duration.
func checkPath(t reflect.Type, keys []string, duration bool) error {
	t, err := typeAt(t, keys)
	if err != nil {
		return err
	}
	if duration {
		if _, ok := durationOf(reflect.New(t).Elem()); ok {
			return nil
		}
		return fmt.Errorf("names a %s, not a duration", t)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil
	}
	return fmt.Errorf("names a %s, not a number", t)
}

// typeAt is the type keys name inside t (a key of a struct, [] an element
// of a list, * a value of a map with string keys), pointers followed; or
// why they name none.
func typeAt(t reflect.Type, keys []string) (reflect.Type, error) {
	for ; ; keys = keys[1:] {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if len(keys) == 0 {
			return t, nil
		}
		switch k := keys[0]; {
		case k == "[]":
			if t.Kind() != reflect.Slice {
				return nil, fmt.Errorf("[] after a %s, not a list", t)
			}
			t = t.Elem()
		case k == "*":
			if t.Kind() != reflect.Map || t.Key().Kind() != reflect.String {
				return nil, fmt.Errorf("* after a %s, not a map", t)
			}
			t = t.Elem()
		case t.Kind() != reflect.Struct:
			return nil, fmt.Errorf("key %q inside a %s", k, t)
		default:
			index, ok := fieldIndex(t, k)
			if !ok {
				return nil, fmt.Errorf("%s has no key %q", t, k)
			}
			t = t.FieldByIndex(index).Type
		}
	}
}

// eachValue calls f with every value keys reach from v, and its path
// (prefixed with path) as problems name it.
func eachValue(v reflect.Value, keys []string, path string, f func(string, reflect.Value)) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if len(keys) == 0 {
		f(path, v)
		return
	}
	switch k := keys[0]; k {
	case "[]":
		for i := range v.Len() {
			eachValue(v.Index(i), keys[1:], fmt.Sprintf("%s[%d]", path, i), f)
		}
	case "*":
		mapKeys := v.MapKeys()
		slices.SortFunc(mapKeys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, key := range mapKeys {
			eachValue(v.MapIndex(key), keys[1:], fielderr.Key(path, key.String()), f)
		}
	default:
		index, _ := fieldIndex(v.Type(), k)
		eachValue(v.FieldByIndex(index), keys[1:], fielderr.Join(path, k), f)
	}
}

// fieldIndex finds the field of struct t whose document key is name.
func fieldIndex(t reflect.Type, name string) ([]int, bool) {
	for _, f := range Fields(t) {
		if f.Name == name {
			return f.Index, true
		}
	}
	return nil, false
}

// Field is one key of a section struct.
type Field struct {
	// Name is the document key (the json tag); Doc its doc tag.
	Name, Doc string
	// Index is the field's index for reflect's FieldByIndex.
	Index []int
}

// Fields lists the keys of a struct type as the document decoder reads
// them: by json tag, with anonymous embedded structs (Toggle) inline.
// The result is shared: callers must not change it.
func Fields(t reflect.Type) []Field {
	if f, ok := fieldsOf.Load(t); ok {
		return f.([]Field)
	}
	f := fields(t)
	fieldsOf.Store(t, f)
	return f
}

// fieldsOf caches Fields by type: the decoder and the limits ask for the
// same few types on every render.
var fieldsOf sync.Map

func fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			for _, f := range Fields(sf.Type) {
				f.Index = append([]int{i}, f.Index...) // a copy: the cached one stays
				out = append(out, f)
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, Field{Name: name, Index: sf.Index, Doc: sf.Tag.Get("doc")})
	}
	return out
}

// KeyType is the type of the key r names in the section type t, pointers
// taken off: the JSON Schema reads a duration key's unit from it.
func (r Range) KeyType(t reflect.Type) (reflect.Type, error) {
	if err := checkPath(t, r.Keys(), r.Duration); err != nil {
		return nil, err
	}
	for _, k := range r.Keys() {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch k {
		case "[]", "*":
			t = t.Elem()
		default:
			index, _ := fieldIndex(t, k)
			t = t.FieldByIndex(index).Type
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, nil
}
