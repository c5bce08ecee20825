package re2

import (
	"reflect"
	"testing"
)

func TestTopAlternatives(t *testing.T) {
	for _, c := range []struct {
		expr, prefix, suffix string
		alts                 []string
	}{
		{"a|b|c", "", "", []string{"a", "b", "c"}},
		{"(bot|crawler|spider)", "", "", []string{"bot", "crawler", "spider"}},
		{"(?:bot|crawl)", "", "", []string{"bot", "crawl"}},
		{"^(bot|crawl)$", "^", "$", []string{"bot", "crawl"}},
		{"(?i)(bot|crawl)", "(?i)", "", []string{"bot", "crawl"}},
		{"Mozilla/5\\.0 \\(compatible; (a|b)", "Mozilla/5\\.0 \\(compatible; ", "", []string{"a", "b"}},
		{"[|(]x|y", "", "", []string{"[|(]x", "y"}},
		{"\\Q(a|b)\\E|c", "", "", []string{"\\Q(a|b)\\E", "c"}},
		{"(a|(b|c))", "", "", []string{"a", "(b|c)"}},
		{"([]|]|b)", "", "", []string{"[]|]", "b"}},
	} {
		prefix, alts, suffix, ok := TopAlternatives(c.expr)
		if !ok || prefix != c.prefix || suffix != c.suffix || !reflect.DeepEqual(alts, c.alts) {
			t.Errorf("%q: %q %q %q %v", c.expr, prefix, alts, suffix, ok)
		}
	}
	for _, expr := range []string{"abc", "(a|b)+", "(a|b)(c|d)", "(?i:a|b)", "(?P<n>a|b)", "(a|b", "[a|b", "a\\|b"} {
		if _, alts, _, ok := TopAlternatives(expr); ok {
			t.Errorf("%q split into %q", expr, alts)
		}
	}
}
