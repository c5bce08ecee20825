package render

import (
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/emitcheck"
)

// emitted checks what an item builds for each release (pkg/emitcheck):
// the values with a rule are collected once for patches equal to the
// previous release's, and checked for every release's Envoy.
type emitted struct {
	item    items.Item
	checker *emitcheck.Checker
	last    []envoyfilter.Patch
	values  []emitcheck.Value
}

func newEmitted(it items.Item) *emitted {
	return &emitted{item: it, checker: emitcheck.NewChecker()}
}

// check returns a problem for every value of patches the proxies of
// release r refuse, at the key of the item it came from where one can be
// named (else at the item's section), and the patches to use: the last
// release's when they are equal, so that the caller's comparison of the
// two releases finds the same messages and walks nothing again.
func (e *emitted) check(patches []envoyfilter.Patch, r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	if e.last != nil && envoyfilter.SamePatches(e.last, patches) {
		patches = e.last
	} else {
		msgs := make([]proto.Message, 0, len(patches))
		for _, p := range patches {
			msgs = append(msgs, p.Value)
		}
		e.values = e.checker.Values(msgs)
		e.last = patches
	}
	refusals := e.checker.Check(e.values, r.Envoy)
	if len(refusals) == 0 {
		return patches, nil
	}
	var p items.Problems
	for _, rf := range refusals {
		p.Addf(e.origin(rf.Value), "%s", rf.Msg)
	}
	return patches, p.Err()
}

// origin is the path, within the item's section, of the key an emitted
// value came from: a declared text key (items.Texter) whose value it is,
// else the one whose value it holds (a host inside a regex); a list whose
// several elements it holds is named as the list. "" names the section.
func (e *emitted) origin(v emitcheck.Value) string {
	texts, ok := e.item.(items.Texter)
	if !ok {
		return ""
	}
	var exact string
	var inside []string
	items.EachText(texts, func(at string, _ items.TextKind, value string) {
		switch {
		case value == v.Text:
			if exact == "" {
				exact = at
			}
		case len(value) >= 3 && (strings.Contains(v.Text, value) || (v.Kind == emitcheck.Regex && strings.Contains(v.Text, regexp.QuoteMeta(value)))):
			inside = append(inside, at)
		}
	})
	switch {
	case exact != "":
		return exact
	case len(inside) == 0:
		return ""
	}
	// Several elements of one list: the list.
	list, _, ok := cutIndex(inside[0])
	for _, at := range inside[1:] {
		if l, _, ok2 := cutIndex(at); !ok || !ok2 || l != list {
			return inside[0]
		}
	}
	if ok && len(inside) > 1 {
		return list
	}
	return inside[0]
}

// cutIndex splits "a.b[3]" into "a.b" and "3".
func cutIndex(at string) (list, index string, ok bool) {
	if !strings.HasSuffix(at, "]") {
		return "", "", false
	}
	i := strings.LastIndex(at, "[")
	if i <= 0 {
		return "", "", false
	}
	return at[:i], at[i+1 : len(at)-1], true
}
