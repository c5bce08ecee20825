package document

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
)

// decoder walks a YAML node tree into Go values by their json tags,
// collecting every problem instead of stopping at the first, and
// remembering the line of every path it visits.
type decoder struct {
	errs  []*fielderr.Error
	lines map[string]int
	// lists holds the list nodes by path: an element's line is read
	// from its list's node when asked for (lineOf), not stored per path.
	lists map[string]*yaml.Node
	// failed holds the paths that did not decode; they keep their
	// defaults, and validation problems at them would only repeat.
	failed map[string]bool
	// cache holds the sections of the last valid document, and decoded
	// the sections of this one, by item name.
	cache, decoded map[string]cachedSection
	// fleet, when set, replaces every target's istioVersions.
	fleet []envoyfilter.Version
	// hashes are the content hashes of section value nodes parseSections
	// already knows (nil when the document was parsed whole).
	hashes map[*yaml.Node]uint64
	// facts, when set, are asked about the services items send to.
	facts Facts
	// clusters, when set, lists the config clusters target.clusters may
	// name.
	clusters func() []string
	// unvalidated skips every rule beyond decoding.
	unvalidated bool
}

func newDecoder() *decoder {
	return &decoder{lines: make(map[string]int, 64), lists: map[string]*yaml.Node{}, failed: map[string]bool{}, decoded: make(map[string]cachedSection, 32)}
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.failed[path] = true
	d.errs = append(d.errs, &fielderr.Error{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

// failedAt reports whether path or one of its ancestors failed to decode.
func (d *decoder) failedAt(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if d.failed[p] {
			return true
		}
	}
	return false
}

// lineOf returns the line of path or of its nearest visited ancestor.
func (d *decoder) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
		if list, i, ok := elementOf(p); ok {
			if n := d.lists[list]; n != nil && i < len(n.Content) {
				return n.Content[i].Line
			}
		}
	}
	return 0
}

// elementOf splits the path of a list element, "a.b[3]", into the list's
// path and the index.
func elementOf(p string) (list string, i int, ok bool) {
	if !strings.HasSuffix(p, "]") {
		return "", 0, false
	}
	open := strings.LastIndexByte(p, '[')
	if open <= 0 {
		return "", 0, false
	}
	i, err := strconv.Atoi(p[open+1 : len(p)-1])
	return p[:open], i, err == nil && i >= 0
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// decode fills v from n. A null node leaves v as it is, so defaults stay.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		d.fail(n, path, "YAML aliases are not supported; write the value out")
		return
	}
	if isNull(n) {
		return
	}
	if nd, ok := items.AsNodeDecoder(v); ok {
		if err := nd.DecodeNode(n); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	if sd, ok := items.AsScalarDecoder(v); ok {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "expected a single value, got %s", describe(n))
			return
		}
		if err := sd.DecodeScalar(n.ShortTag(), n.Value); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path, nil)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.String:
		d.decodeString(n, v, path)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.fail(n, path, "expected true or false, got %s", describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.fail(n, path, "expected true or false")
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		d.decodeInt(n, v, path)
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			d.fail(n, path, "expected a number, got %s", describe(n))
			return
		}
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "expected a finite number, got %s", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		// A programming error in an item's struct, not a user error.
		d.fail(n, path, "internal: field type %s cannot be decoded", v.Type())
	}
}

func (d *decoder) decodeString(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.fail(n, path, "expected a string, got %s", describe(n))
		return
	}
	if allowed, ok := enumValues(v.Type()); ok {
		if !slices.Contains(allowed, n.Value) {
			if s := Suggest(n.Value, allowed); s != "" {
				d.fail(n, path, "unknown value %q; did you mean %q?", n.Value, s)
			} else {
				d.fail(n, path, "must be one of %s, got %q", strings.Join(allowed, ", "), n.Value)
			}
			return
		}
	}
	v.SetString(n.Value)
}

// enumValues is items.EnumValues, asked once per type: an enum's values
// are fixed by its type, and every string of every parse asks.
func enumValues(t reflect.Type) ([]string, bool) {
	if e, ok := enumCache.Load(t); ok {
		e := e.(enumEntry)
		return e.values, e.ok
	}
	values, ok := items.EnumValues(t)
	enumCache.Store(t, enumEntry{values: slices.Clip(values), ok: ok})
	return values, ok
}

// enumCache holds enumValues' answers by reflect.Type; it is bounded by
// the number of string types in the items' structs.
var enumCache sync.Map

type enumEntry struct {
	values []string
	ok     bool
}

func (d *decoder) decodeInt(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.fail(n, path, "expected an integer, got %s", describe(n))
		return
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		d.fail(n, path, "integer %s is out of range", n.Value)
		return
	}
	switch v.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if i < 0 {
			d.fail(n, path, "must not be negative, got %d", i)
			return
		}
		if v.OverflowUint(uint64(i)) {
			d.fail(n, path, "must be at most %d, got %d", uint64(1)<<v.Type().Bits()-1, i)
			return
		}
		v.SetUint(uint64(i))
	default:
		if v.OverflowInt(i) {
			d.fail(n, path, "integer %d is out of range", i)
			return
		}
		v.SetInt(i)
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "expected a list, got %s", describe(n))
		return
	}
	// A given list replaces the default one.
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	d.lists[path] = n
	for i, c := range n.Content {
		d.decode(c, out.Index(i), path+"["+strconv.Itoa(i)+"]")
	}
	v.Set(out)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		d.fail(n, path, "internal: map key type %s cannot be decoded", v.Type().Key())
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	d.eachKey(n, path, func(key string, kn, vn *yaml.Node) {
		p := fielderr.Key(path, key)
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(vn, elem, p)
		out.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
	})
	v.Set(out)
}

// eachKey calls f for every key of the mapping n, reporting non-string and
// duplicate keys instead.
func (d *decoder) eachKey(n *yaml.Node, path string, f func(key string, kn, vn *yaml.Node)) {
	// A small mapping is searched for a repeat; a large one gets a set.
	var seen map[string]bool
	if len(n.Content) > 2*smallMapping {
		seen = make(map[string]bool, len(n.Content)/2)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind != yaml.ScalarNode || kn.ShortTag() == "!!merge" {
			d.fail(kn, path, "keys must be plain strings; YAML merge keys and complex keys are not supported")
			continue
		}
		p := fielderr.Key(path, kn.Value)
		if seen != nil && seen[kn.Value] || seen == nil && repeated(n.Content[:i], kn.Value) {
			d.fail(kn, p, "duplicate key")
			continue
		}
		if seen != nil {
			seen[kn.Value] = true
		}
		d.lines[p] = kn.Line
		f(kn.Value, kn, vn)
	}
}

// smallMapping is the number of keys up to which eachKey looks for a
// duplicate by scanning the keys before it.
const smallMapping = 16

// repeated reports whether the mapping content before holds the plain
// key key. A key that is not a plain string was refused, and never
// counts.
func repeated(before []*yaml.Node, key string) bool {
	for j := 0; j+1 < len(before); j += 2 {
		if k := before[j]; k.Value == key && k.Kind == yaml.ScalarNode && k.ShortTag() != "!!merge" {
			return true
		}
	}
	return false
}

// decodeStruct fills a struct from a mapping; keys in skip are left for the
// caller.
func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string, skip map[string]bool) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	fields := items.Fields(v.Type())
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	d.eachKey(n, path, func(key string, kn, vn *yaml.Node) {
		if skip[key] {
			return
		}
		i := slices.Index(names, key)
		if i < 0 {
			d.fail(kn, fielderr.Key(path, key), "%s", unknownKey("unknown key", key, names))
			return
		}
		d.decode(vn, v.FieldByIndex(fields[i].Index), fielderr.Key(path, key))
	})
}

// unknownKey words the error for a key that is not one of known.
func unknownKey(what, key string, known []string) string {
	if s := Suggest(key, known); s != "" {
		return fmt.Sprintf("%s; did you mean %q?", what, s)
	}
	sorted := slices.Clone(known)
	slices.Sort(sorted)
	return fmt.Sprintf("%s; expected one of: %s", what, strings.Join(sorted, ", "))
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what a node is, never echoing its value (it may be a
// secret).
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return items.DescribeTag(n.ShortTag())
}

// decodeField decodes n into the key named key of the struct v, reporting
// problems at path.
func (d *decoder) decodeField(n *yaml.Node, v reflect.Value, key, path string) {
	for _, f := range items.Fields(v.Type()) {
		if f.Name == key {
			d.lines[path] = n.Line
			d.decode(n, v.FieldByIndex(f.Index), path)
			return
		}
	}
	d.fail(n, path, "internal: no key %q in %s", key, v.Type())
}

// sectionFailed reports whether the section name has a problem: rules
// across sections are checked on valid ones only.
func (d *decoder) sectionFailed(name string) bool {
	for _, e := range d.errs {
		if e.Path == name || strings.HasPrefix(e.Path, name+".") || strings.HasPrefix(e.Path, name+"[") {
			return true
		}
	}
	return false
}
