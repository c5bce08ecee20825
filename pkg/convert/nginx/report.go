package nginx

import (
	"io"

	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// Verdict says what became of a key.
type Verdict string

// The verdicts, in the order the report lists them.
const (
	// Converted: the key became a document key; the detail says which,
	// with any change of unit or meaning.
	Converted Verdict = "converted"
	// DefaultWritten: the ConfigMap left the key out, ingress-nginx
	// applied its default anyway, and the document now says it, so the
	// gateway keeps behaving as the controller did.
	DefaultWritten Verdict = "nginx default written"
	// DefaultSkipped: as DefaultWritten, but left out, by
	// --no-nginx-defaults or because writing it would change more than
	// the key meant: the gateway keeps Envoy's behaviour, which the detail
	// names.
	DefaultSkipped Verdict = "nginx default not written"
	// DefaultAlready: Envoy's or Istio's default already does what the
	// value asked for.
	DefaultAlready Verdict = "default already"
	// NotNeeded: an nginx-internal setting with no meaning for Envoy.
	NotNeeded Verdict = "not needed with Envoy"
	// NotSupported: no safe Envoy equivalent that globalconfig builds
	// today; the detail says why and what to do instead.
	NotSupported Verdict = "not supported"
	// NotCarried: the key could have been converted, but a key it
	// depends on was not (refused, or not supported), so there is nothing
	// for it to go with; the detail names that key and why.
	NotCarried Verdict = "not carried"
	// Insecure: raw nginx configuration (snippets), refused.
	Insecure Verdict = "insecure, refused"
	// Unknown: a key ingress-nginx does not read (a typo, or a key of
	// another version).
	Unknown Verdict = "unknown key"
)

var verdictOrder = []Verdict{Converted, DefaultWritten, DefaultSkipped, DefaultAlready, NotNeeded, NotSupported, NotCarried, Insecure, Unknown}

var titles = map[Verdict]string{
	Converted:      "converted",
	DefaultWritten: "nginx default written (ingress-nginx applied it without the key; the document now says it)",
	DefaultSkipped: "nginx default not written (--no-nginx-defaults, or writing it would change more than the key meant: Envoy's behaviour applies instead)",
	DefaultAlready: "default already (Envoy or Istio already behaves this way)",
	NotNeeded:      "not needed with Envoy",
	NotSupported:   "not supported (not converted; what to do instead)",
	NotCarried:     "not carried (a key it depends on was not converted)",
	Insecure:       "insecure, refused",
	Unknown:        "unknown key (ingress-nginx does not read it)",
}

// Entry is one line of the report.
type Entry = out.Entry[Verdict]

// Report is the key-by-key account of a conversion.
type Report struct{ out.Report[Verdict] }

// Write prints the report for people, grouped by verdict.
func (r Report) Write(w io.Writer) { r.Report.Write(w, verdictOrder, titles) }

// NotConverted returns the entries for keys, or parts of keys, the
// document does not carry: not supported, not carried, refused or
// unknown. A conversion with any is incomplete.
func (r Report) NotConverted() []Entry {
	var out []Entry
	for _, v := range []Verdict{NotSupported, NotCarried, Insecure, Unknown} {
		out = append(out, r.Of(v)...)
	}
	return out
}
