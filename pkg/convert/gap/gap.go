// Package gap words a converter's verdict on an Envoy capability that the
// key being converted would need: missing from globalconfig, or provided
// by a registered item, as the registry says at run time. A converter
// names the capability by its proto message or field (Gap.Envoy), never
// by prose alone, so the verdict can't go stale when an item arrives: an
// item that declares the capability in its Registration.Provides is named
// in the verdict, with no edit to the converter, and pkg/convert's tests
// fail when an item emits a capability a verdict calls missing without
// declaring it.
package gap

import (
	"fmt"
	"strings"

	"github.com/globalconfig/globalconfig/items"
)

// Gap is an Envoy capability a converter's key needs.
type Gap struct {
	// Envoy is the capability, as items.Capability.Envoy names it: a
	// proto message's full name, optionally with a path of its fields.
	Envoy string
	// Name is how a user knows it: "Envoy's bandwidth_limit filter".
	Name string
}

// Provider is an item that provides a gap's capability.
type Provider struct {
	Item string
	// Setting is the document key, relative to the section, that sets
	// what the gap's key needs: the item's declared Setting when it
	// declares the gap's capability itself. When it declares only a part
	// of it (the gap is the bandwidth_limit filter, the item declares the
	// filter's limit_kbps at limitKbps), that setting is not what the
	// gap's key needs, and Setting is "": the verdict names the item.
	Setting string
	Summary string
}

// Key is the provider's document key: item or item.setting.
func (p Provider) Key() string {
	if p.Setting == "" {
		return p.Item
	}
	return p.Item + "." + p.Setting
}

// Provides reports whether a capability an item declares provides the
// gap: the same name, or a field inside it (an item that sets one of the
// bandwidth_limit filter's fields emits the filter).
func (g Gap) Provides(declared string) bool {
	return declared == g.Envoy || strings.HasPrefix(declared, g.Envoy+".")
}

// ProviderOf returns r as a provider of the gap, if it declares the gap's
// capability or a part of it: with the declared Setting when a
// declaration is the capability itself, with none when r declares only
// parts of it (one capability can serve several keys: ingress-nginx's
// limit-rate needs the bandwidth_limit filter's limit_kbps, its
// limit-rate-after the filter, and the setting of the one is not the
// other's).
func (g Gap) ProviderOf(r items.Registration) (Provider, bool) {
	var found bool
	for _, c := range r.Provides {
		if c.Envoy == g.Envoy {
			return Provider{Item: r.Name, Setting: c.Setting, Summary: r.Summary}, true
		}
		found = found || g.Provides(c.Envoy)
	}
	return Provider{Item: r.Name, Summary: r.Summary}, found
}

// Providers returns the registered items that declare the gap's
// capability, in name order.
func (g Gap) Providers() []Provider {
	var out []Provider
	for _, r := range items.All() {
		if p, ok := g.ProviderOf(r); ok {
			out = append(out, p)
		}
	}
	return out
}

// Verdict words a converter's verdict on a key that needs the gap's
// capability. theirs says what the key did in the other product, and
// anything else the user needs beside the capability. With no item
// providing it, the verdict says the capability is not an item of
// globalconfig; with one, it names the item, what it is for, and that the
// conversion does not fill it from this key, so the user compares the two
// and sets it by hand.
func (g Gap) Verdict(theirs string) string {
	ps := g.Providers()
	if len(ps) == 0 {
		return fmt.Sprintf("%s; %s (%s) is not an item of globalconfig", theirs, g.Name, g.Envoy)
	}
	var b strings.Builder
	b.WriteString(theirs)
	for _, p := range ps {
		fmt.Fprintf(&b, "; globalconfig's %s sets %s (%s): %s", p.Key(), g.Name, g.Envoy, strings.TrimSuffix(p.Summary, "."))
	}
	fmt.Fprintf(&b, ". The conversion does not carry this key there: compare what %s does with the above, and set it by hand if it fits (docs/reference.md, %s)", ps[0].Key(), ps[0].Item)
	return b.String()
}

// Use is one verdict of a converter that names a gap.
type Use struct {
	// Converter is the converter's package and the file of the verdict
	// ("pkg/convert/nginx keys.go").
	Converter string
	// Key is the converted key the verdict is for.
	Key string
	// Theirs is what the key did, as Verdict takes it.
	Theirs string
	Gap    Gap
}

// Text is the verdict as the converter reports it today.
func (u Use) Text() string { return u.Gap.Verdict(u.Theirs) }
