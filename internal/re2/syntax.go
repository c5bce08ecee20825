package re2

import "sort"

// parseFlags mirrors RE2's Regexp::ParseFlags bit for bit, because the
// flags are compared as whole values in places (squashing of x** and the
// like), so their exact set matters.
type parseFlags uint16

const (
	flagFoldCase      parseFlags = 1 << 0
	flagLiteral       parseFlags = 1 << 1
	flagClassNL       parseFlags = 1 << 2
	flagDotNL         parseFlags = 1 << 3
	flagOneLine       parseFlags = 1 << 4
	flagLatin1        parseFlags = 1 << 5
	flagNonGreedy     parseFlags = 1 << 6
	flagPerlClasses   parseFlags = 1 << 7
	flagPerlB         parseFlags = 1 << 8
	flagPerlX         parseFlags = 1 << 9
	flagUnicodeGroups parseFlags = 1 << 10
	flagNeverNL       parseFlags = 1 << 11
	flagNeverCapture  parseFlags = 1 << 12
	flagWasDollar     parseFlags = 1 << 13

	flagLikePerl = flagClassNL | flagOneLine | flagPerlClasses | flagPerlB |
		flagPerlX | flagUnicodeGroups
)

// op is the kind of a regexp node (RE2's RegexpOp), plus the two parser
// stack markers.
type op uint8

const (
	opNoMatch op = iota + 1
	opEmptyMatch
	opLiteral
	opLiteralString
	opConcat
	opAlternate
	opStar
	opPlus
	opQuest
	opRepeat
	opCapture
	opAnyChar
	opAnyByte
	opBeginLine
	opEndLine
	opWordBoundary
	opNoWordBoundary
	opBeginText
	opEndText
	opCharClass

	opLeftParen   // parser stack marker
	opVerticalBar // parser stack marker
)

// maxNsub is the most children one node holds (RE2 stores the count in 16
// bits); longer concatenations and alternations become two-level trees.
const maxNsub = 0xFFFF

// runeMax is the largest Unicode code point.
const runeMax = 0x10FFFF

// node is one regexp node. Nodes are edited in place during parsing and
// alternation factoring, exactly where RE2 edits its Regexp objects.
type node struct {
	op    op
	flags parseFlags
	subs  []*node

	min, max int    // opRepeat; max == -1 means no upper bound
	r        rune   // opLiteral
	runes    []rune // opLiteralString
	cap      int    // opCapture, opLeftParen (-1: non-capturing)
	named    bool   // opLeftParen, opCapture: (?P<name>...)
	name     string

	cc  *charClass    // opCharClass, once finished
	ccb *classBuilder // opCharClass, while on the parser stack

	down *node // parser stack link
}

func newNode(o op, f parseFlags) *node { return &node{op: o, flags: f} }

func newLiteral(r rune, f parseFlags) *node {
	return &node{op: opLiteral, flags: f, r: r}
}

// newLiteralString copies runes into a fresh literal, literal string or
// empty match, as RE2's Regexp::LiteralString does.
func newLiteralString(runes []rune, f parseFlags) *node {
	switch len(runes) {
	case 0:
		return newNode(opEmptyMatch, f)
	case 1:
		return newLiteral(runes[0], f)
	}
	return &node{op: opLiteralString, flags: f, runes: append([]rune(nil), runes...)}
}

func newCharClassNode(cc *charClass, f parseFlags) *node {
	return &node{op: opCharClass, flags: f, cc: cc}
}

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// charClass is a finished, sorted character class.
type charClass struct {
	ranges     []runeRange
	nrunes     int
	foldsASCII bool
}

func (c *charClass) empty() bool { return c.nrunes == 0 }
func (c *charClass) full() bool  { return c.nrunes == runeMax+1 }

const alphaMask = 1<<26 - 1

// classBuilder accumulates a character class as sorted, non-overlapping,
// non-abutting ranges, and tracks which ASCII letters it holds (which
// decides the compiler's ASCII case-folding shortcut).
type classBuilder struct {
	ranges       []runeRange
	nrunes       int
	upper, lower uint32
}

func (b *classBuilder) contains(r rune) bool {
	i := sort.Search(len(b.ranges), func(i int) bool { return b.ranges[i].hi >= r })
	return i < len(b.ranges) && b.ranges[i].lo <= r
}

// addRange adds lo-hi and reports whether the class grew (false when lo-hi
// already lay inside one range of the class).
func (b *classBuilder) addRange(lo, hi rune) bool {
	if hi < lo {
		return false
	}
	if lo <= 'z' && hi >= 'A' {
		if lo1, hi1 := max(lo, 'A'), min(hi, 'Z'); lo1 <= hi1 {
			b.upper |= (1<<(hi1-lo1+1) - 1) << (lo1 - 'A')
		}
		if lo1, hi1 := max(lo, 'a'), min(hi, 'z'); lo1 <= hi1 {
			b.lower |= (1<<(hi1-lo1+1) - 1) << (lo1 - 'a')
		}
	}
	// First range that overlaps or abuts lo-hi on the left.
	i := sort.Search(len(b.ranges), func(i int) bool { return b.ranges[i].hi >= lo-1 })
	if i < len(b.ranges) && b.ranges[i].lo <= lo && hi <= b.ranges[i].hi {
		return false
	}
	j := i
	for j < len(b.ranges) && b.ranges[j].lo <= hi+1 {
		lo = min(lo, b.ranges[j].lo)
		hi = max(hi, b.ranges[j].hi)
		b.nrunes -= int(b.ranges[j].hi - b.ranges[j].lo + 1)
		j++
	}
	b.ranges = append(b.ranges[:i], append([]runeRange{{lo, hi}}, b.ranges[j:]...)...)
	b.nrunes += int(hi - lo + 1)
	return true
}

func (b *classBuilder) addClass(o *classBuilder) {
	for _, r := range o.ranges {
		b.addRange(r.lo, r.hi)
	}
}

func (b *classBuilder) foldsASCII() bool { return (b.upper^b.lower)&alphaMask == 0 }

// removeAbove drops every code point above r (RE2 does this to every class
// the parser pushes, with r = 0xFF in Latin-1).
func (b *classBuilder) removeAbove(r rune) {
	if r >= runeMax {
		return
	}
	if r < 'z' {
		if r < 'a' {
			b.lower = 0
		} else {
			b.lower &= alphaMask >> ('z' - r)
		}
	}
	if r < 'Z' {
		if r < 'A' {
			b.upper = 0
		} else {
			b.upper &= alphaMask >> ('Z' - r)
		}
	}
	out := b.ranges[:0]
	n := 0
	for _, rr := range b.ranges {
		if rr.lo > r {
			continue
		}
		if rr.hi > r {
			rr.hi = r
		}
		out = append(out, rr)
		n += int(rr.hi - rr.lo + 1)
	}
	b.ranges, b.nrunes = out, n
}

func (b *classBuilder) negate() {
	var v []runeRange
	next := rune(0)
	for _, r := range b.ranges {
		if r.lo > next {
			v = append(v, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= runeMax {
		v = append(v, runeRange{next, runeMax})
	}
	b.ranges = v
	b.upper = alphaMask &^ b.upper
	b.lower = alphaMask &^ b.lower
	b.nrunes = runeMax + 1 - b.nrunes
}

func (b *classBuilder) charClass() *charClass {
	return &charClass{
		ranges:     append([]runeRange(nil), b.ranges...),
		nrunes:     b.nrunes,
		foldsASCII: b.foldsASCII(),
	}
}

// addRangeFlags adds lo-hi honouring the newline and case-folding flags.
func (b *classBuilder) addRangeFlags(lo, hi rune, f parseFlags) {
	cutNL := f&flagClassNL == 0 || f&flagNeverNL != 0
	if cutNL && lo <= '\n' && '\n' <= hi {
		if lo < '\n' {
			b.addRangeFlags(lo, '\n'-1, f)
		}
		if hi > '\n' {
			b.addRangeFlags('\n'+1, hi, f)
		}
		return
	}
	switch {
	case f&flagFoldCase == 0:
		b.addRange(lo, hi)
	case f&flagLatin1 != 0:
		addFoldedRangeLatin1(b, lo, hi)
	default:
		addFoldedRange(b, lo, hi, 0)
	}
}

// addFoldedRangeLatin1 is RE2's Latin-1 case folding: ASCII letters only.
func addFoldedRangeLatin1(b *classBuilder, lo, hi rune) {
	for ; lo <= hi; lo++ {
		b.addRange(lo, lo)
		switch {
		case 'A' <= lo && lo <= 'Z':
			b.addRange(lo-'A'+'a', lo-'A'+'a')
		case 'a' <= lo && lo <= 'z':
			b.addRange(lo-'a'+'A', lo-'a'+'A')
		}
	}
}

// addFoldedRange adds lo-hi and everything case-equivalent under Unicode
// simple folding, stopping early where RE2 does (a range already present is
// assumed to have its folds present too).
func addFoldedRange(b *classBuilder, lo, hi rune, depth int) {
	if depth > 10 {
		return
	}
	if !b.addRange(lo, hi) {
		return
	}
	for lo <= hi {
		f := lookupCaseFold(lo)
		if f == nil {
			break
		}
		if lo < f.lo {
			lo = f.lo
			continue
		}
		lo1, hi1 := lo, min(hi, f.hi)
		switch f.delta {
		default:
			lo1 += f.delta
			hi1 += f.delta
		case foldEvenOdd:
			if lo1%2 == 1 {
				lo1--
			}
			if hi1%2 == 0 {
				hi1++
			}
		case foldOddEven:
			if lo1%2 == 0 {
				lo1--
			}
			if hi1%2 == 1 {
				hi1++
			}
		}
		addFoldedRange(b, lo1, hi1, depth+1)
		lo = f.hi + 1
	}
}

// equal reports whether two regexps are structurally equal (RE2's
// Regexp::Equal).
func equal(a, b *node) bool {
	if a == nil || b == nil {
		return a == b
	}
	if !topEqual(a, b) {
		return false
	}
	for i := range a.subs {
		if !equal(a.subs[i], b.subs[i]) {
			return false
		}
	}
	return true
}

func topEqual(a, b *node) bool {
	if a.op != b.op {
		return false
	}
	switch a.op {
	case opEndText:
		return (a.flags^b.flags)&flagWasDollar == 0
	case opLiteral:
		return a.r == b.r && (a.flags^b.flags)&flagFoldCase == 0
	case opLiteralString:
		if len(a.runes) != len(b.runes) || (a.flags^b.flags)&flagFoldCase != 0 {
			return false
		}
		for i := range a.runes {
			if a.runes[i] != b.runes[i] {
				return false
			}
		}
		return true
	case opAlternate, opConcat:
		return len(a.subs) == len(b.subs)
	case opStar, opPlus, opQuest:
		return (a.flags^b.flags)&flagNonGreedy == 0
	case opRepeat:
		return (a.flags^b.flags)&flagNonGreedy == 0 && a.min == b.min && a.max == b.max
	case opCapture:
		return a.cap == b.cap && a.named == b.named && a.name == b.name
	case opCharClass:
		ac, bc := a.cc, b.cc
		if ac.nrunes != bc.nrunes || len(ac.ranges) != len(bc.ranges) {
			return false
		}
		for i := range ac.ranges {
			if ac.ranges[i] != bc.ranges[i] {
				return false
			}
		}
		return true
	}
	return true
}

// concatOrAlternate builds a concatenation or alternation of subs the way
// RE2's ConcatOrAlternate does: one child stands alone, none is an empty
// match (concat) or no-match (alternate), alternations may be factored,
// and more than maxNsub children make a two-level tree.
func concatOrAlternate(o op, subs []*node, f parseFlags, canFactor bool) *node {
	if len(subs) == 1 {
		return subs[0]
	}
	if len(subs) == 0 {
		if o == opAlternate {
			return newNode(opNoMatch, f)
		}
		return newNode(opEmptyMatch, f)
	}
	if o == opAlternate && canFactor {
		subs = append([]*node(nil), subs...)
		subs = subs[:factorAlternation(subs, f)]
		if len(subs) == 1 {
			return subs[0]
		}
	}
	if len(subs) > maxNsub {
		nbig := (len(subs) + maxNsub - 1) / maxNsub
		re := newNode(o, f)
		re.subs = make([]*node, nbig)
		for i := 0; i < nbig; i++ {
			end := min((i+1)*maxNsub, len(subs))
			re.subs[i] = concatOrAlternate(o, subs[i*maxNsub:end], f, false)
		}
		return re
	}
	re := newNode(o, f)
	re.subs = append([]*node(nil), subs...)
	return re
}

func concat(subs []*node, f parseFlags) *node {
	return concatOrAlternate(opConcat, subs, f, false)
}

// starPlusOrQuest builds sub*, sub+ or sub?, squashing repeated operators
// with the same flags as RE2 does.
func starPlusOrQuest(o op, sub *node, f parseFlags) *node {
	if o == sub.op && f == sub.flags {
		return sub
	}
	if (sub.op == opStar || sub.op == opPlus || sub.op == opQuest) && f == sub.flags {
		if sub.op == opStar {
			return sub
		}
		return &node{op: opStar, flags: f, subs: []*node{sub.subs[0]}}
	}
	return &node{op: o, flags: f, subs: []*node{sub}}
}
