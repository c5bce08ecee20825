package items

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
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
		set, err := isSet(v, l.Path)
		if err != nil {
			panic(fmt.Sprintf("items: %T: ContextLimit %q: %v", it, l.Path, err))
		}
		if set && !slices.Contains(l.Contexts, c) {
			p.Addf(l.Path, "applies to target.context %s only (got %s): %s", contextList(l.Contexts), c, l.Why)
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
// for a list or map, not empty.
func isSet(v reflect.Value, path string) (bool, error) {
	if path == "" {
		return true, nil
	}
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return false, nil
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return false, fmt.Errorf("key %q inside a %s", name, v.Type())
		}
		index, ok := fieldIndex(v.Type(), name)
		if !ok {
			return false, fmt.Errorf("%s has no key %q", v.Type(), name)
		}
		v = v.FieldByIndex(index)
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() > 0, nil
	}
	return !v.IsZero(), nil
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
	b.WriteString(" what it patches, and why not elsewhere |\n|---|---|---|---|---|---|\n")
	row := func(name, where string, l *ContextLimit) {
		fmt.Fprintf(&b, "| `%s` |", name)
		for _, c := range contexts {
			if l == nil || slices.Contains(l.Contexts, c) {
				b.WriteString(" yes |")
			} else {
				b.WriteString(" refused |")
			}
		}
		switch {
		case l == nil:
		case where == "":
			where = l.Why
		default:
			where += "; not elsewhere: " + l.Why
		}
		fmt.Fprintf(&b, " %s |\n", where)
	}
	for _, st := range envoyfilter.Stages() {
		for slot := range envoyfilter.StageWidth {
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
