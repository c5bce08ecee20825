package items

import (
	"fmt"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// Support says which Istio releases understand what the item generates:
// the first line for the item, then one line per Need. `globalconfig
// items` prints it and docs/versions.md's compatibility table is made from it.
func (r Registration) Support() []string {
	lines := []string{fmt.Sprintf("Istio %s and newer", envoyfilter.Releases[0].Istio)}
	for _, n := range r.Needs {
		lines = append(lines, n.describe("%s → %s"))
	}
	return lines
}

// describe says what n needs, the setting and field named by format.
func (n Need) describe(format string) string {
	return fmt.Sprintf(format+": %s; older proxies: %s", n.Setting, n.Field, Since(n.Envoy), n.Older)
}

// Since names the Istio releases whose proxies run Envoy envoy or newer.
func Since(envoy envoyfilter.Version) string {
	if istio, ok := envoyfilter.IstioOf(envoy); ok {
		return fmt.Sprintf("Istio %s and newer (Envoy %s)", istio, envoy)
	}
	return fmt.Sprintf("Envoy %s, in no Istio release globalconfig knows yet (newest: %s)", envoy, envoyfilter.Newest().Istio)
}

// CompatibilityTable is docs/versions.md's table of which Istio releases
// understand each item, in Markdown.
func CompatibilityTable() string {
	var b strings.Builder
	b.WriteString("| item | oldest Istio | settings that need a newer one |\n|---|---|---|\n")
	for _, r := range All() {
		var needs []string
		for _, n := range r.Needs {
			needs = append(needs, n.describe("`%s` (`%s`)"))
		}
		if len(needs) == 0 {
			needs = []string{"—"}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Name, envoyfilter.Releases[0].Istio, strings.Join(needs, "<br>"))
	}
	return b.String()
}

// NeedsMsg is the problem of a setting that proxies older than the first
// Istio release with Envoy envoy can't have (envoyfilter.NeedsMsg).
func NeedsMsg(envoy envoyfilter.Version) string { return envoyfilter.NeedsMsg(envoy) }

// StageTable is docs/reference.md's table of the stages and the items in
// each, by slot, in Markdown: the order Istio applies them, where each
// item's HTTP filters go in the chain, and the free slots a new item can
// take (with the priority each would give it).
func StageTable() string {
	var b strings.Builder
	b.WriteString("| stage | priorities | HTTP filters go | slot: item, what it does there | free slots (priority) |\n|---|---|---|---|---|\n")
	for _, st := range envoyfilter.Stages() {
		var slots, free []string
		for slot := range st.Width {
			for _, r := range All() {
				if r.Stage.Name == st.Name && r.Slot == slot {
					slots = append(slots, fmt.Sprintf("%d: `%s`, %s (priority %d)", slot, r.Name, r.Purpose, r.Placement().Priority))
				}
			}
		}
		for _, slot := range FreeSlots(st) {
			free = append(free, fmt.Sprintf("%d (%d)", slot, st.At(slot).Priority))
		}
		where := "before the router"
		if st.Insert.Descending() {
			where = "to the front of the chain"
		}
		fmt.Fprintf(&b, "| `%s` | %d–%d | %s | %s | %s |\n", st.Name, st.Priority, st.Priority+int32(st.Width)-1, where, strings.Join(slots, "<br>"), strings.Join(free, ", "))
	}
	return b.String()
}

// ItemList is the README's list of the items, in the order Istio applies
// them (stage, then slot).
func ItemList() string {
	var names []string
	for _, st := range envoyfilter.Stages() {
		for slot := range st.Width {
			for _, r := range All() {
				if r.Stage.Name == st.Name && r.Slot == slot {
					names = append(names, "`"+r.Name+"`")
				}
			}
		}
	}
	return strings.Join(names, ", ") + "\n"
}
