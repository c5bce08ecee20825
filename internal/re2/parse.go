package re2

import (
	"strings"
	"unicode/utf8"
)

// maxRepeat is the largest count RE2 allows in x{n,m}, also the budget
// for nested counted repetitions: (x{10}){100} is the limit.
const maxRepeat = 1000

// maxWalkVisits is the node budget of RE2's non-exponential tree walks
// (the repetition check while parsing, and simplification).
const maxWalkVisits = 1000000

// parser is RE2's precedence parser with its explicit stack of regexps
// and markers, linked through node.down.
type parser struct {
	flags parseFlags
	// lookbehindCheck: refuse (?<= and (?<! as bad Perl operators, as
	// RE2 does since December 2023 (before, they fail as named groups).
	lookbehindCheck bool
	whole           string // the regexp as given (for "missing )" and "unexpected )")
	stack           *node
	ncap            int
	runeMax         rune
	err             *Error
}

func (p *parser) fail(code ErrorCode, arg string) bool {
	p.err = &Error{Code: code, Arg: arg}
	return false
}

func isMarker(o op) bool { return o >= opLeftParen }

// push pushes re, first turning a one-rune class into a literal and a
// two-rune [Aa] into a case-folded literal.
func (p *parser) push(re *node) {
	p.maybeConcatString(-1, 0)
	if re.op == opCharClass && re.ccb != nil {
		re.ccb.removeAbove(p.runeMax)
		switch re.ccb.nrunes {
		case 1:
			re = newLiteral(re.ccb.ranges[0].lo, p.flags)
		case 2:
			r := re.ccb.ranges[0].lo
			if 'A' <= r && r <= 'Z' && re.ccb.contains(r+'a'-'A') {
				re = newLiteral(r+'a'-'A', p.flags|flagFoldCase)
			}
		}
	}
	re.down = p.stack
	p.stack = re
}

func (p *parser) pushLiteral(r rune) {
	if p.flags&flagFoldCase != 0 {
		if p.flags&flagLatin1 != 0 && ('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z') {
			re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
			addFoldedRangeLatin1(re.ccb, r, r)
			p.push(re)
			return
		}
		if p.flags&flagLatin1 == 0 && cycleFoldRune(r) != r {
			re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
			r1 := r
			for {
				if p.flags&flagNeverNL == 0 || r != '\n' {
					re.ccb.addRange(r, r)
				}
				r = cycleFoldRune(r)
				if r == r1 {
					break
				}
			}
			p.push(re)
			return
		}
	}
	if p.flags&flagNeverNL != 0 && r == '\n' {
		p.push(newNode(opNoMatch, p.flags))
		return
	}
	if p.maybeConcatString(r, p.flags) {
		return
	}
	p.push(newLiteral(r, p.flags))
}

func (p *parser) pushSimple(o op) { p.push(newNode(o, p.flags)) }

func (p *parser) pushCaret() {
	if p.flags&flagOneLine != 0 {
		p.pushSimple(opBeginText)
		return
	}
	p.pushSimple(opBeginLine)
}

func (p *parser) pushDollar() {
	if p.flags&flagOneLine != 0 {
		p.push(newNode(opEndText, p.flags|flagWasDollar))
		return
	}
	p.pushSimple(opEndLine)
}

func (p *parser) pushDot() {
	if p.flags&flagDotNL != 0 && p.flags&flagNeverNL == 0 {
		p.pushSimple(opAnyChar)
		return
	}
	re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
	re.ccb.addRange(0, '\n'-1)
	re.ccb.addRange('\n'+1, p.runeMax)
	p.push(re)
}

// finish prepares a stack entry for use inside a bigger regexp.
func finish(re *node) *node {
	if re == nil {
		return nil
	}
	re.down = nil
	if re.op == opCharClass && re.ccb != nil {
		re.cc = re.ccb.charClass()
		re.ccb = nil
	}
	return re
}

func (p *parser) pushRepeatOp(o op, s string, nongreedy bool) bool {
	if p.stack == nil || isMarker(p.stack.op) {
		return p.fail(ErrMissingRepeatArgument, s)
	}
	fl := p.flags
	if nongreedy {
		fl ^= flagNonGreedy
	}
	top := p.stack
	if o == top.op && fl == top.flags {
		return true
	}
	if (top.op == opStar || top.op == opPlus || top.op == opQuest) && fl == top.flags {
		top.op = opStar
		return true
	}
	re := &node{op: o, flags: fl, down: top.down}
	re.subs = []*node{finish(top)}
	p.stack = re
	return true
}

func (p *parser) pushRepetition(lo, hi int, s string, nongreedy bool) bool {
	if (hi != -1 && hi < lo) || lo > maxRepeat || hi > maxRepeat {
		return p.fail(ErrRepeatSize, s)
	}
	if p.stack == nil || isMarker(p.stack.op) {
		return p.fail(ErrMissingRepeatArgument, s)
	}
	fl := p.flags
	if nongreedy {
		fl ^= flagNonGreedy
	}
	top := p.stack
	re := &node{op: opRepeat, flags: fl, min: lo, max: hi, down: top.down}
	re.subs = []*node{finish(top)}
	p.stack = re
	if lo >= 2 || hi >= 2 {
		visits := maxWalkVisits
		if repetitionBudget(re, maxRepeat, &visits) == 0 {
			return p.fail(ErrRepeatSize, s)
		}
	}
	return true
}

// repetitionBudget divides budget by every enclosing repeat count and
// returns the smallest quotient in the tree (RE2's RepetitionWalker).
func repetitionBudget(re *node, budget int, visits *int) int {
	if *visits--; *visits < 0 {
		return 0
	}
	if re.op == opRepeat {
		m := re.max
		if m < 0 {
			m = re.min
		}
		if m > 0 {
			budget /= m
		}
	}
	least := budget
	for _, s := range re.subs {
		least = min(least, repetitionBudget(s, budget, visits))
	}
	return least
}

func (p *parser) doLeftParen(name string, named bool) {
	p.ncap++
	p.push(&node{op: opLeftParen, flags: p.flags, cap: p.ncap, named: named, name: name})
}

func (p *parser) doLeftParenNoCapture() {
	p.push(&node{op: opLeftParen, flags: p.flags, cap: -1})
}

func (p *parser) doVerticalBar() {
	p.maybeConcatString(-1, 0)
	p.doConcatenation()
	r1 := p.stack
	if r1 != nil {
		if r2 := r1.down; r2 != nil && r2.op == opVerticalBar {
			if r3 := r2.down; r3 != nil && (r1.op == opAnyChar || r3.op == opAnyChar) {
				// (?s). subsumes a literal or class on the other side.
				if r3.op == opAnyChar && (r1.op == opLiteral || r1.op == opCharClass || r1.op == opAnyChar) {
					p.stack = r2
					return
				}
				if r1.op == opAnyChar && (r3.op == opLiteral || r3.op == opCharClass || r3.op == opAnyChar) {
					r1.down = r3.down
					r2.down = r1
					p.stack = r2
					return
				}
			}
			r1.down = r2.down
			r2.down = r1
			p.stack = r2
			return
		}
	}
	p.pushSimple(opVerticalBar)
}

func (p *parser) doRightParen() bool {
	p.doAlternation()
	r1 := p.stack
	if r1 == nil || r1.down == nil || r1.down.op != opLeftParen {
		return p.fail(ErrUnexpectedParen, p.whole)
	}
	r2 := r1.down
	p.stack = r2.down
	p.flags = r2.flags
	re := r2
	if r2.cap > 0 {
		re.op = opCapture
		re.subs = []*node{finish(r1)}
	} else {
		re = r1
	}
	p.push(re)
	return true
}

func (p *parser) doFinish() *node {
	p.doAlternation()
	re := p.stack
	if re != nil && re.down != nil {
		p.fail(ErrMissingParen, p.whole)
		return nil
	}
	p.stack = nil
	return finish(re)
}

// doCollapse replaces the stack entries above the topmost marker with
// their concatenation or alternation, flattening nested ones of the same
// kind.
func (p *parser) doCollapse(o op) {
	n := 0
	var next *node
	for sub := p.stack; sub != nil && !isMarker(sub.op); sub = next {
		next = sub.down
		if sub.op == o {
			n += len(sub.subs)
		} else {
			n++
		}
	}
	if p.stack != nil && p.stack.down == next {
		return
	}
	subs := make([]*node, n)
	i := n
	for sub := p.stack; sub != nil && !isMarker(sub.op); sub = next {
		next = sub.down
		if sub.op == o {
			for k := len(sub.subs) - 1; k >= 0; k-- {
				i--
				subs[i] = sub.subs[k]
			}
		} else {
			i--
			subs[i] = finish(sub)
		}
	}
	re := concatOrAlternate(o, subs, p.flags, true)
	re.down = next
	p.stack = re
}

func (p *parser) doConcatenation() {
	if r1 := p.stack; r1 == nil || isMarker(r1.op) {
		p.push(newNode(opEmptyMatch, p.flags))
	}
	p.doCollapse(opConcat)
}

func (p *parser) doAlternation() {
	p.doVerticalBar()
	p.stack = p.stack.down // pop the vertical bar
	p.doCollapse(opAlternate)
}

// maybeConcatString merges the two topmost literals into a literal string.
// If r >= 0, the emptied top entry is reused for the literal r and true is
// returned.
func (p *parser) maybeConcatString(r rune, f parseFlags) bool {
	re1 := p.stack
	if re1 == nil {
		return false
	}
	re2 := re1.down
	if re2 == nil {
		return false
	}
	if re1.op != opLiteral && re1.op != opLiteralString {
		return false
	}
	if re2.op != opLiteral && re2.op != opLiteralString {
		return false
	}
	if re1.flags&flagFoldCase != re2.flags&flagFoldCase {
		return false
	}
	if re2.op == opLiteral {
		re2.op = opLiteralString
		re2.runes = []rune{re2.r}
		re2.r = 0
	}
	if re1.op == opLiteral {
		re2.runes = append(re2.runes, re1.r)
	} else {
		re2.runes = append(re2.runes, re1.runes...)
		re1.runes = nil
	}
	if r >= 0 {
		re1.op = opLiteral
		re1.r = r
		re1.flags = f
		return true
	}
	p.stack = re2
	return false
}

// parseInteger parses a decimal without leading zeros.
func parseInteger(s string) (n int, rest string, ok bool) {
	if s == "" || !isDigit(s[0]) {
		return 0, s, false
	}
	if len(s) >= 2 && s[0] == '0' && isDigit(s[1]) {
		return 0, s, false
	}
	for s != "" && isDigit(s[0]) {
		if n >= 100000000 {
			return 0, s, false
		}
		n = n*10 + int(s[0]-'0')
		s = s[1:]
	}
	return n, s, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// maybeParseRepetition parses {n}, {n,} or {n,m}; hi is -1 for {n,}.
func maybeParseRepetition(s string) (lo, hi int, rest string, ok bool) {
	if s == "" || s[0] != '{' {
		return 0, 0, s, false
	}
	lo, s, ok = parseInteger(s[1:])
	if !ok || s == "" {
		return 0, 0, s, false
	}
	if s[0] == ',' {
		s = s[1:]
		if s == "" {
			return 0, 0, s, false
		}
		if s[0] == '}' {
			hi = -1
		} else if hi, s, ok = parseInteger(s); !ok {
			return 0, 0, s, false
		}
	} else {
		hi = lo
	}
	if s == "" || s[0] != '}' {
		return 0, 0, s, false
	}
	return lo, hi, s[1:], true
}

// nextRune decodes the next rune of s. The parser only sees valid UTF-8:
// Check refuses anything else before parsing.
func nextRune(s string) (rune, string) {
	r, n := utf8.DecodeRuneInString(s)
	return r, s[n:]
}

func isHex(c rune) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' || 'a' <= c && c <= 'f'
}

func unhex(c rune) rune {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func isAlnum(c rune) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// parseEscape parses an escape (s starts with a backslash) standing for a
// single rune.
func (p *parser) parseEscape(s string) (rune, string, bool) {
	begin := s
	bad := func(s string) (rune, string, bool) {
		p.fail(ErrBadEscape, begin[:len(begin)-len(s)])
		return 0, s, false
	}
	if len(s) == 1 {
		p.fail(ErrTrailingBackslash, "")
		return 0, s, false
	}
	c, s := nextRune(s[1:])
	switch c {
	case '1', '2', '3', '4', '5', '6', '7':
		// A single non-zero digit would be a backreference.
		if s == "" || s[0] < '0' || s[0] > '7' {
			return bad(s)
		}
		fallthrough
	case '0':
		code := c - '0'
		if s != "" && '0' <= s[0] && s[0] <= '7' {
			code = code*8 + rune(s[0]-'0')
			s = s[1:]
			if s != "" && '0' <= s[0] && s[0] <= '7' {
				code = code*8 + rune(s[0]-'0')
				s = s[1:]
			}
		}
		if code > p.runeMax {
			return bad(s)
		}
		return code, s, true
	case 'x':
		if s == "" {
			return bad(s)
		}
		c, s = nextRune(s)
		if c == '{' {
			if s == "" {
				// RE2 tries to decode a rune past the end and fails.
				p.fail(ErrBadUTF8, "")
				return 0, s, false
			}
			c, s = nextRune(s)
			nhex := 0
			code := rune(0)
			for isHex(c) {
				nhex++
				code = code*16 + unhex(c)
				if code > p.runeMax || s == "" {
					return bad(s)
				}
				c, s = nextRune(s)
			}
			if c != '}' || nhex == 0 {
				return bad(s)
			}
			return code, s, true
		}
		if s == "" {
			return bad(s)
		}
		var c1 rune
		c1, s = nextRune(s)
		if !isHex(c) || !isHex(c1) {
			return bad(s)
		}
		return unhex(c)*16 + unhex(c1), s, true
	case 'n':
		return '\n', s, true
	case 'r':
		return '\r', s, true
	case 't':
		return '\t', s, true
	case 'a':
		return '\a', s, true
	case 'f':
		return '\f', s, true
	case 'v':
		return '\v', s, true
	}
	if c < utf8.RuneSelf && !isAlnum(c) {
		// Escaped punctuation (and \_) is itself.
		return c, s, true
	}
	return bad(s)
}

type groupParse int

const (
	groupOK groupParse = iota
	groupError
	groupNothing
)

// parseUnicodeGroup parses \pN, \p{Name}, \PN, \P{Name} and \p{^Name}.
func (p *parser) parseUnicodeGroup(s string, f parseFlags, b *classBuilder) (groupParse, string) {
	if f&flagUnicodeGroups == 0 || len(s) < 2 || s[0] != '\\' || (s[1] != 'p' && s[1] != 'P') {
		return groupNothing, s
	}
	sign := +1
	if s[1] == 'P' {
		sign = -1
	}
	seq := s
	s = s[2:]
	var name string
	if s != "" && s[0] == '{' {
		end := strings.IndexByte(s[1:], '}')
		if end < 0 {
			p.fail(ErrBadCharRange, seq)
			return groupError, s
		}
		name = s[1 : 1+end]
		s = s[end+2:]
	} else if s != "" {
		_, rest := nextRune(s)
		name = s[:len(s)-len(rest)]
		s = rest
	}
	seq = seq[:len(seq)-len(s)]
	if strings.HasPrefix(name, "^") {
		sign = -sign
		name = name[1:]
	}
	g, ok := lookupUnicodeGroup(name)
	if !ok {
		p.fail(ErrBadCharRange, seq)
		return groupError, s
	}
	addGroup(b, g, sign, f)
	return groupOK, s
}

// maybePerlClass parses \d \s \w \D \S \W.
func maybePerlClass(s string, f parseFlags) (group, string, bool) {
	if f&flagPerlClasses == 0 || len(s) < 2 || s[0] != '\\' {
		return group{}, s, false
	}
	g, ok := perlGroups[s[:2]]
	if !ok {
		return group{}, s, false
	}
	return g, s[2:], true
}

// parseClassName parses [:alpha:] and the like inside a class.
func (p *parser) parseClassName(s string, f parseFlags, b *classBuilder) (groupParse, string) {
	if len(s) < 2 || s[0] != '[' || s[1] != ':' {
		return groupNothing, s
	}
	end := strings.Index(s[2:], ":]")
	if end < 0 {
		return groupNothing, s
	}
	name := s[:2+end+2]
	g, ok := posixGroups[name]
	if !ok {
		p.fail(ErrBadCharRange, name)
		return groupError, s
	}
	addGroup(b, g, g.sign, f)
	return groupOK, s[len(name):]
}

func (p *parser) parseClassChar(s, wholeClass string) (rune, string, bool) {
	if s == "" {
		p.fail(ErrMissingBracket, wholeClass)
		return 0, s, false
	}
	if s[0] == '\\' {
		return p.parseEscape(s)
	}
	r, s := nextRune(s)
	return r, s, true
}

func (p *parser) parseClassRange(s, wholeClass string) (runeRange, string, bool) {
	os := s
	lo, s, ok := p.parseClassChar(s, wholeClass)
	if !ok {
		return runeRange{}, s, false
	}
	if len(s) >= 2 && s[0] == '-' && s[1] != ']' {
		var hi rune
		hi, s, ok = p.parseClassChar(s[1:], wholeClass)
		if !ok {
			return runeRange{}, s, false
		}
		if hi < lo {
			p.fail(ErrBadCharRange, os[:len(os)-len(s)])
			return runeRange{}, s, false
		}
		return runeRange{lo, hi}, s, true
	}
	return runeRange{lo, lo}, s, true
}

// parseCharClass parses a bracketed class; s starts with '['.
func (p *parser) parseCharClass(s string) (*node, string, bool) {
	wholeClass := s
	re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
	s = s[1:]
	negated := false
	if s != "" && s[0] == '^' {
		s = s[1:]
		negated = true
		if p.flags&flagClassNL == 0 || p.flags&flagNeverNL != 0 {
			re.ccb.addRange('\n', '\n')
		}
	}
	first := true
	for s != "" && (s[0] != ']' || first) {
		if s[0] == '-' && !first && p.flags&flagPerlX == 0 && (len(s) == 1 || s[1] != ']') {
			_, rest := nextRune(s[1:])
			p.fail(ErrBadCharRange, s[:len(s)-len(rest)])
			return nil, s, false
		}
		first = false
		if len(s) > 2 && s[0] == '[' && s[1] == ':' {
			var st groupParse
			st, s = p.parseClassName(s, p.flags, re.ccb)
			if st == groupOK {
				continue
			}
			if st == groupError {
				return nil, s, false
			}
		}
		if len(s) > 2 && s[0] == '\\' && (s[1] == 'p' || s[1] == 'P') {
			var st groupParse
			st, s = p.parseUnicodeGroup(s, p.flags, re.ccb)
			if st == groupOK {
				continue
			}
			if st == groupError {
				return nil, s, false
			}
		}
		if g, rest, ok := maybePerlClass(s, p.flags); ok {
			addGroup(re.ccb, g, g.sign, p.flags)
			s = rest
			continue
		}
		rr, rest, ok := p.parseClassRange(s, wholeClass)
		if !ok {
			return nil, s, false
		}
		s = rest
		// Explicit ranges keep \n even where classes like \s would not.
		re.ccb.addRangeFlags(rr.lo, rr.hi, p.flags|flagClassNL)
	}
	if s == "" {
		p.fail(ErrMissingBracket, wholeClass)
		return nil, s, false
	}
	s = s[1:]
	if negated {
		re.ccb.negate()
	}
	return re, s, true
}

// validCaptureName: non-empty, and every rune a letter, mark, decimal
// digit, letter number or connector punctuation.
func validCaptureName(name string) bool {
	if name == "" {
		return false
	}
	cc := captureNameClass()
	for _, r := range name {
		if !cc.contains(r) {
			return false
		}
	}
	return true
}

// parsePerlFlags parses (?flags), (?flags:, (?P<name> and (?<name>; t
// starts with "(?".
func (p *parser) parsePerlFlags(s string) (string, bool) {
	t := s
	if p.lookbehindCheck && ((len(t) > 3 && (t[2] == '=' || t[2] == '!')) ||
		(len(t) > 4 && t[2] == '<' && (t[3] == '=' || t[3] == '!'))) {
		n := 3
		if t[2] == '<' {
			n = 4
		}
		return s, p.fail(ErrBadPerlOp, t[:n])
	}
	if (len(t) > 4 && t[2] == 'P' && t[3] == '<') || (len(t) > 3 && t[2] == '<') {
		begin := 3
		if t[2] == 'P' {
			begin = 4
		}
		end := strings.IndexByte(t[begin:], '>')
		if end < 0 {
			return s, p.fail(ErrBadNamedCapture, t)
		}
		end += begin
		capture := t[:end+1]
		name := t[begin:end]
		if !validCaptureName(name) {
			return s, p.fail(ErrBadNamedCapture, capture)
		}
		p.doLeftParen(name, true)
		return s[len(capture):], true
	}
	t = t[2:]
	negated, sawFlag := false, false
	nflags := p.flags
	bad := func() (string, bool) { return s, p.fail(ErrBadPerlOp, s[:len(s)-len(t)]) }
	for done := false; !done; {
		if t == "" {
			return bad()
		}
		var c rune
		c, t = nextRune(t)
		switch c {
		default:
			return bad()
		case 'i':
			sawFlag = true
			if negated {
				nflags &^= flagFoldCase
			} else {
				nflags |= flagFoldCase
			}
		case 'm': // the opposite of OneLine
			sawFlag = true
			if negated {
				nflags |= flagOneLine
			} else {
				nflags &^= flagOneLine
			}
		case 's':
			sawFlag = true
			if negated {
				nflags &^= flagDotNL
			} else {
				nflags |= flagDotNL
			}
		case 'U':
			sawFlag = true
			if negated {
				nflags &^= flagNonGreedy
			} else {
				nflags |= flagNonGreedy
			}
		case '-':
			if negated {
				return bad()
			}
			negated = true
			sawFlag = false
		case ':':
			p.doLeftParenNoCapture()
			done = true
		case ')':
			done = true
		}
	}
	if negated && !sawFlag {
		return bad()
	}
	p.flags = nflags
	return t, true
}

// latin1ToUTF8 reads every byte of s as one Latin-1 character, as RE2
// does to a Latin-1 pattern before parsing it.
func latin1ToUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteRune(rune(s[i]))
	}
	return b.String()
}

// parse parses s with the given flags (RE2's Regexp::Parse).
func parse(s string, flags parseFlags, lookbehindCheck bool) (*node, *Error) {
	p := &parser{flags: flags, whole: s, runeMax: runeMax, lookbehindCheck: lookbehindCheck}
	if flags&flagLatin1 != 0 {
		p.runeMax = 0xFF
		s = latin1ToUTF8(s)
	}
	t := s
	// lastUnary and isUnary hold len(t) where a repetition operator began
	// (0: none): t is always a suffix of s, so s[len(s)-n:] is the text
	// from that operator on.
	lastUnary := 0
	for t != "" {
		isUnary := 0
		switch t[0] {
		default:
			var r rune
			r, t = nextRune(t)
			p.pushLiteral(r)
		case '(':
			if p.flags&flagPerlX != 0 && len(t) >= 2 && t[1] == '?' {
				var ok bool
				if t, ok = p.parsePerlFlags(t); !ok {
					return nil, p.err
				}
				break
			}
			if p.flags&flagNeverCapture != 0 {
				p.doLeftParenNoCapture()
			} else {
				p.doLeftParen("", false)
			}
			t = t[1:]
		case '|':
			p.doVerticalBar()
			t = t[1:]
		case ')':
			if !p.doRightParen() {
				return nil, p.err
			}
			t = t[1:]
		case '^':
			p.pushCaret()
			t = t[1:]
		case '$':
			p.pushDollar()
			t = t[1:]
		case '.':
			p.pushDot()
			t = t[1:]
		case '[':
			re, rest, ok := p.parseCharClass(t)
			if !ok {
				return nil, p.err
			}
			t = rest
			p.push(re)
		case '*', '+', '?':
			o := opStar
			switch t[0] {
			case '+':
				o = opPlus
			case '?':
				o = opQuest
			}
			opstr := t
			nongreedy := false
			t = t[1:]
			if p.flags&flagPerlX != 0 {
				if t != "" && t[0] == '?' {
					nongreedy = true
					t = t[1:]
				}
				if lastUnary != 0 {
					// Stacked repetition operators (a**) are an error.
					p.fail(ErrBadRepeatOp, s[len(s)-lastUnary:len(s)-len(t)])
					return nil, p.err
				}
			}
			opstr = opstr[:len(opstr)-len(t)]
			if !p.pushRepeatOp(o, opstr, nongreedy) {
				return nil, p.err
			}
			isUnary = len(opstr) + len(t)
		case '{':
			opstr := t
			lo, hi, rest, ok := maybeParseRepetition(t)
			if !ok {
				p.pushLiteral('{')
				t = t[1:]
				break
			}
			t = rest
			nongreedy := false
			if p.flags&flagPerlX != 0 {
				if t != "" && t[0] == '?' {
					nongreedy = true
					t = t[1:]
				}
				if lastUnary != 0 {
					p.fail(ErrBadRepeatOp, s[len(s)-lastUnary:len(s)-len(t)])
					return nil, p.err
				}
			}
			opstr = opstr[:len(opstr)-len(t)]
			if !p.pushRepetition(lo, hi, opstr, nongreedy) {
				return nil, p.err
			}
			isUnary = len(opstr) + len(t)
		case '\\':
			var ok bool
			if t, ok = p.parseBackslash(t); !ok {
				return nil, p.err
			}
		}
		lastUnary = isUnary
	}
	re := p.doFinish()
	if re == nil {
		return nil, p.err
	}
	return re, nil
}

// parseBackslash handles an escape outside a class: assertions, \C, \Q..\E,
// Unicode and Perl classes, and single-rune escapes.
func (p *parser) parseBackslash(t string) (string, bool) {
	if p.flags&flagPerlB != 0 && len(t) >= 2 && (t[1] == 'b' || t[1] == 'B') {
		if t[1] == 'b' {
			p.pushSimple(opWordBoundary)
		} else {
			p.pushSimple(opNoWordBoundary)
		}
		return t[2:], true
	}
	if p.flags&flagPerlX != 0 && len(t) >= 2 {
		switch t[1] {
		case 'A':
			p.pushSimple(opBeginText)
			return t[2:], true
		case 'z':
			p.pushSimple(opEndText)
			return t[2:], true
		case 'C':
			p.pushSimple(opAnyByte)
			return t[2:], true
		case 'Q':
			t = t[2:]
			for t != "" {
				if len(t) >= 2 && t[0] == '\\' && t[1] == 'E' {
					t = t[2:]
					break
				}
				var r rune
				r, t = nextRune(t)
				p.pushLiteral(r)
			}
			return t, true
		}
	}
	if len(t) >= 2 && (t[1] == 'p' || t[1] == 'P') {
		re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
		st, rest := p.parseUnicodeGroup(t, p.flags, re.ccb)
		switch st {
		case groupOK:
			p.push(re)
			return rest, true
		case groupError:
			return rest, false
		}
	}
	if g, rest, ok := maybePerlClass(t, p.flags); ok {
		re := &node{op: opCharClass, flags: p.flags &^ flagFoldCase, ccb: &classBuilder{}}
		addGroup(re.ccb, g, g.sign, p.flags)
		p.push(re)
		return rest, true
	}
	r, rest, ok := p.parseEscape(t)
	if !ok {
		return rest, false
	}
	p.pushLiteral(r)
	return rest, true
}
