package higress

import (
	"fmt"
	"io"
	"strings"

	"github.com/globalconfig/globalconfig/pkg/convert/out"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// Verdict says what became of a key.
type Verdict string

// The verdicts, in the order the report lists them.
const (
	// Converted: the user's key became a globalconfig key with the same
	// effect at the gateway.
	Converted Verdict = "converted"
	// DefaultWritten: the user didn't set it; Higress applied its default
	// silently, and the converted document writes it out.
	DefaultWritten Verdict = "default written"
	// Difference: a deliberate difference; the detail says what changes at
	// the proxy.
	Difference Verdict = "difference"
	// NotCarried: the key is not in the converted document: it has no
	// place in globalconfig, or it goes with a key that is not written
	// (which the detail names); the detail says why.
	NotCarried Verdict = "not carried"
)

var verdictOrder = []Verdict{Converted, DefaultWritten, Difference, NotCarried}

// Entry is one line of the report.
type Entry = out.Entry[Verdict]

// Report is the key-by-key account of a conversion.
type Report struct{ out.Report[Verdict] }

func (r *Report) add(key string, v Verdict, detail string) { r.Add(key, v, detail) }

func (r *Report) addValue(key, value string, v Verdict, detail string) {
	r.AddValue(key, value, v, detail)
}

var titles = map[Verdict]string{
	Converted:      "converted (same effect at the gateway)",
	DefaultWritten: "default written (Higress applied it without the key; the document now says it)",
	Difference:     "difference (what changes at the proxy, and why)",
	NotCarried:     "not carried",
}

// Write prints the report for people, grouped by verdict.
func (r Report) Write(w io.Writer) { r.Report.Write(w, verdictOrder, titles) }

// suggestion words a hint for an unknown key: the known key it is
// closest to.
func suggestion(path string) string {
	parts := strings.Split(path, ".")
	known := knownKeys
	for _, p := range parts[:len(parts)-1] {
		sub, ok := known[p].(map[string]any)
		if !ok {
			return ""
		}
		known = sub
	}
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	if s := document.Suggest(parts[len(parts)-1], names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// oneLinePerKey leaves a key with a difference one line, the
// difference: a key is listed once, as what it is. Its "converted (same
// effect)" line is dropped, and the default Higress applied without it is
// folded into the difference, which names it.
func (r *Report) oneLinePerKey() {
	differs := map[string]bool{}
	defaults := map[string]Entry{}
	for _, e := range r.Entries {
		if e.Verdict == Difference {
			differs[e.Key] = true
		}
	}
	for _, e := range r.Entries {
		if _, seen := defaults[e.Key]; e.Verdict == DefaultWritten && differs[e.Key] && !seen {
			defaults[e.Key] = e
		}
	}
	at := map[string]int{} // a key's difference, in kept
	var kept []Entry
	for _, e := range r.Entries {
		if !differs[e.Key] {
			kept = append(kept, e)
			continue
		}
		switch e.Verdict {
		case Converted, DefaultWritten:
			continue
		case Difference:
			if i, ok := at[e.Key]; ok {
				kept[i].Detail += "; " + e.Detail
				continue
			}
			if d, ok := defaults[e.Key]; ok {
				if d.Value != "" {
					e.Value = d.Value
					e.Detail = "Higress's default, written out " + d.Detail + "; " + e.Detail
				} else {
					e.Detail = d.Detail + "; " + e.Detail
				}
			}
			at[e.Key] = len(kept)
		}
		kept = append(kept, e)
	}
	r.Entries = kept
}
