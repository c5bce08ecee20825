package items

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// Where an item works is declared once and read twice, as Ranges are:
// validation refuses a key set for a target context it does not work in,
// and docs/reference.md's table "Which items work where" is generated
// from the same declarations.

// ContextLimit says that a key, or the whole section, works only in some
// target contexts.
type ContextLimit struct {
	// Path is the key relative to the section, by its document names
	// ("proxyProtocol", "perClient"); "" is the whole section. The limit
	// applies when the key is set: true, non-empty, or present.
	Path string
	// Contexts are where it works.
	Contexts []envoyfilter.Context
	// Why says why it does not work elsewhere.
	Why string
}

// ContextLimiter is implemented by items with keys (or a section) that
// work only in some target contexts. An enabled, valid item is checked
// with the target it ends up with (the document's, with the item's own
// override).
type ContextLimiter interface {
	ContextLimits() []ContextLimit
}

// CheckContexts records a problem at every key of it set for context c
// where its ContextLimit does not allow c. A path that names no key is a
// programming error and panics.
func CheckContexts(p *Problems, it ContextLimiter, c envoyfilter.Context) {
	v := reflect.ValueOf(it)
	for _, l := range it.ContextLimits() {
		paths, err := setPaths(v, l.Path)
		if err != nil {
			panic(fmt.Sprintf("items: %T: ContextLimit %q: %v", it, l.Path, err))
		}
		if slices.Contains(l.Contexts, c) {
			continue
		}
		for _, at := range paths {
			p.Addf(at, "applies to target.context %s only (got %s): %s", contextList(l.Contexts), c, l.Why)
		}
	}
}

// contextList words contexts: "GATEWAY or SIDECAR_INBOUND".
func contextList(cs []envoyfilter.Context) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return strings.Join(names, " or ")
}

// isSet reports whether the key at path (dotted document names) of v is
// set: "" is always set; a key is set when it is not its zero value and,
// for a list or map, not empty. A "*" segment stands for every value of a
// map, "[]" after a key for every element of a list: the key is set when
// it is set in any of them.
func isSet(v reflect.Value, path string) (bool, error) {
	paths, err := setPaths(v, path)
	return len(paths) > 0, err
}

// setPaths lists the paths, as problems name them, at which the key at
// path is set (see isSet).
func setPaths(v reflect.Value, path string) ([]string, error) {
	if path == "" {
		return []string{""}, nil
	}
	var out []string
	err := collectSet(v, Range{Path: path}.Keys(), "", &out)
	return out, err
}

func collectSet(v reflect.Value, keys []string, at string, out *[]string) error {
	for i, name := range keys {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return checkKeysType(v.Type().Elem(), keys[i:])
			}
			v = v.Elem()
		}
		switch name {
		case "*", "[]":
			if name == "*" && v.Kind() != reflect.Map || name == "[]" && v.Kind() != reflect.Slice {
				return fmt.Errorf("%s after a %s", name, v.Type())
			}
			if err := checkKeysType(v.Type().Elem(), keys[i+1:]); err != nil {
				return err
			}
			if v.Kind() == reflect.Map {
				ks := v.MapKeys()
				slices.SortFunc(ks, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
				for _, k := range ks {
					if err := collectSet(v.MapIndex(k), keys[i+1:], fielderr.Key(at, k.String()), out); err != nil {
						return err
					}
				}
				return nil
			}
			for j := range v.Len() {
				if err := collectSet(v.Index(j), keys[i+1:], fmt.Sprintf("%s[%d]", at, j), out); err != nil {
					return err
				}
			}
			return nil
		}
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("key %q inside a %s", name, v.Type())
		}
		index, ok := fieldIndex(v.Type(), name)
		if !ok {
			return fmt.Errorf("%s has no key %q", v.Type(), name)
		}
		v = v.FieldByIndex(index)
		at = fielderr.Join(at, name)
	}
	set := !v.IsZero()
	if v.Kind() == reflect.Slice || v.Kind() == reflect.Map {
		set = v.Len() > 0
	}
	if set {
		*out = append(*out, at)
	}
	return nil
}

// checkKeysType reports why keys name no key of type t.
func checkKeysType(t reflect.Type, keys []string) error {
	for _, name := range keys {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case name == "*" && t.Kind() == reflect.Map, name == "[]" && t.Kind() == reflect.Slice:
			t = t.Elem()
			continue
		case t.Kind() != reflect.Struct:
			return fmt.Errorf("key %q inside a %s", name, t)
		}
		index, ok := fieldIndex(t, name)
		if !ok {
			return fmt.Errorf("%s has no key %q", t, name)
		}
		t = t.FieldByIndex(index).Type
	}
	return nil
}

// ContextTable is docs/reference.md's table of which items work where:
// every item, and every key of one that works only in some contexts, from
// the items' ContextLimits.
func ContextTable() string {
	contexts := []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound, envoyfilter.ContextSidecarOutbound, envoyfilter.ContextAny}
	var b strings.Builder
	b.WriteString("| item or key |")
	for _, c := range contexts {
		fmt.Fprintf(&b, " `%s` |", c)
	}
	b.WriteString(" what it patches | why not elsewhere |\n|---|---|---|---|---|---|---|\n")
	// The item's Where and its limit's Why stand in columns of their own:
	// Where says what the item does where it works, Why why it is refused
	// elsewhere, so neither repeats the other.
	row := func(name, where string, l *ContextLimit) {
		fmt.Fprintf(&b, "| `%s` |", name)
		for _, c := range contexts {
			if l == nil || slices.Contains(l.Contexts, c) {
				b.WriteString(" yes |")
			} else {
				b.WriteString(" refused |")
			}
		}
		why := ""
		if l != nil {
			why = l.Why
		}
		fmt.Fprintf(&b, " %s | %s |\n", where, why)
	}
	for _, st := range envoyfilter.Stages() {
		for slot := range st.Width {
			for _, r := range All() {
				if r.Stage.Name != st.Name || r.Slot != slot {
					continue
				}
				limiter, _ := r.NewItem().(ContextLimiter)
				var limits []ContextLimit
				if limiter != nil {
					limits = limiter.ContextLimits()
				}
				var whole *ContextLimit
				for i := range limits {
					if limits[i].Path == "" {
						whole = &limits[i]
					}
				}
				row(r.Name, r.Where, whole)
				for i := range limits {
					if limits[i].Path != "" {
						row(r.Name+"."+limits[i].Path, "", &limits[i])
					}
				}
			}
		}
	}
	return b.String()
}
