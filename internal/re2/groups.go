package re2

import (
	"sort"
	"strconv"
	"strings"
	"sync"
)

// group is a named character class: \d, [:alpha:] or \p{Greek}.
// sign -1 means the class is the complement of ranges.
type group struct {
	sign   int
	ranges []runeRange
}

// perlGroups are RE2's \d \s \w and their negations. RE2's \s is
// [\t\n\f\r ]: it has no \v.
var perlGroups = map[string]group{
	`\d`: {+1, digitRanges},
	`\D`: {-1, digitRanges},
	`\s`: {+1, perlSpaceRanges},
	`\S`: {-1, perlSpaceRanges},
	`\w`: {+1, wordRanges},
	`\W`: {-1, wordRanges},
}

var (
	digitRanges     = []runeRange{{'0', '9'}}
	perlSpaceRanges = []runeRange{{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}
	wordRanges      = []runeRange{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
)

// posixGroups are the [:name:] classes, ASCII only as in RE2.
var posixGroups = func() map[string]group {
	m := map[string]group{}
	for name, rs := range map[string][]runeRange{
		"alnum":  {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}},
		"alpha":  {{'A', 'Z'}, {'a', 'z'}},
		"ascii":  {{0, 0x7f}},
		"blank":  {{'\t', '\t'}, {' ', ' '}},
		"cntrl":  {{0, 0x1f}, {0x7f, 0x7f}},
		"digit":  {{'0', '9'}},
		"graph":  {{'!', '~'}},
		"lower":  {{'a', 'z'}},
		"print":  {{' ', '~'}},
		"punct":  {{'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'}},
		"space":  {{'\t', '\r'}, {' ', ' '}},
		"upper":  {{'A', 'Z'}},
		"word":   {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
		"xdigit": {{'0', '9'}, {'A', 'F'}, {'a', 'f'}},
	} {
		m["[:"+name+":]"] = group{+1, rs}
		m["[:^"+name+":]"] = group{-1, rs}
	}
	return m
}()

var (
	unicodeGroupsOnce sync.Once
	unicodeGroups     map[string]group
)

// lookupUnicodeGroup finds \p{name}; "Any" is every code point.
func lookupUnicodeGroup(name string) (group, bool) {
	if name == "Any" {
		return group{+1, []runeRange{{0, runeMax}}}, true
	}
	unicodeGroupsOnce.Do(func() {
		unicodeGroups = make(map[string]group, len(unicodeGroupData))
		for _, d := range unicodeGroupData {
			unicodeGroups[d.name] = group{+1, decodeRanges(d.ranges)}
		}
	})
	g, ok := unicodeGroups[name]
	return g, ok
}

func decodeRanges(s string) []runeRange {
	f := strings.Fields(s)
	rs := make([]runeRange, 0, len(f)/2)
	prev := rune(-1)
	for i := 0; i+1 < len(f); i += 2 {
		gap, _ := strconv.ParseInt(f[i], 36, 32)
		n, _ := strconv.ParseInt(f[i+1], 36, 32)
		lo := prev + 1 + rune(gap)
		prev = lo + rune(n)
		rs = append(rs, runeRange{lo, prev})
	}
	return rs
}

// addGroup adds group g (or its negation, sign -1) to b.
func addGroup(b *classBuilder, g group, sign int, f parseFlags) {
	if sign == +1 {
		for _, r := range g.ranges {
			b.addRangeFlags(r.lo, r.hi, f)
		}
		return
	}
	if f&flagFoldCase != 0 {
		// The negation of a folded group must also drop whatever folds
		// to a member; build the folded group, then negate it.
		var tmp classBuilder
		addGroup(&tmp, g, +1, f)
		if f&flagClassNL == 0 || f&flagNeverNL != 0 {
			tmp.addRange('\n', '\n')
		}
		tmp.negate()
		b.addClass(&tmp)
		return
	}
	next := rune(0)
	for _, r := range g.ranges {
		if next < r.lo {
			b.addRangeFlags(next, r.lo-1, f)
		}
		next = r.hi + 1
	}
	if next <= runeMax {
		b.addRangeFlags(next, runeMax, f)
	}
}

// captureNameClass is what RE2 allows in a group name: the Unicode
// categories Lu, Ll, Lt, Lm, Lo, Nl, Mn, Mc, Nd and Pc.
var captureNameClass = sync.OnceValue(func() *classBuilder {
	var b classBuilder
	for _, name := range []string{"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Nd", "Pc"} {
		g, _ := lookupUnicodeGroup(name)
		addGroup(&b, g, +1, 0)
	}
	return &b
})

// caseFold is one entry of RE2's case folding table.
type caseFold struct {
	lo, hi rune
	delta  rune
}

const (
	foldEvenOdd     = 1
	foldOddEven     = -1
	foldEvenOddSkip = 1 << 30
	foldOddEvenSkip = 1<<30 + 1
)

// lookupCaseFold returns the entry holding r, else the first entry above
// r, else nil.
func lookupCaseFold(r rune) *caseFold {
	i := sort.Search(len(caseFoldData), func(i int) bool { return caseFoldData[i].hi >= r })
	if i == len(caseFoldData) {
		return nil
	}
	return &caseFoldData[i]
}

func applyFold(f *caseFold, r rune) rune {
	switch f.delta {
	default:
		return r + f.delta
	case foldEvenOddSkip:
		if (r-f.lo)%2 != 0 {
			return r
		}
		fallthrough
	case foldEvenOdd:
		if r%2 == 0 {
			return r + 1
		}
		return r - 1
	case foldOddEvenSkip:
		if (r-f.lo)%2 != 0 {
			return r
		}
		fallthrough
	case foldOddEven:
		if r%2 == 1 {
			return r + 1
		}
		return r - 1
	}
}

// cycleFoldRune returns the next rune in r's case-folding orbit.
func cycleFoldRune(r rune) rune {
	f := lookupCaseFold(r)
	if f == nil || r < f.lo {
		return r
	}
	return applyFold(f, r)
}
