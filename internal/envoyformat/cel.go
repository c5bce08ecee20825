package envoyformat

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/re2"
)

// The argument of %CEL(expr)% and %TYPED_CEL(expr)% is a CEL expression
// Envoy parses (cel-cpp's ANTLR grammar) and plans when it loads the
// configuration. What it refuses then, and this file checks:
//
//   - a syntax error: CEL's grammar, its literals (an int beyond int64, a
//     uint beyond uint64, an escape that isn't one, \u in bytes, a raw
//     string ending in a backslash), reserved identifiers (if, for, …) as
//     names, the optional syntax (a.?b, [?x]) Envoy doesn't enable, and
//     a quoted field name (a.`b c`) before Envoy 1.40;
//   - nesting deeper than cel-cpp's limit of 32 (two counters, see depth);
//   - has() of anything but a field selection;
//   - a function Envoy doesn't register, or not with that many arguments
//     (the table below, probed on Envoy 1.36 to 1.40 — no string(), no
//     string extensions); comprehensions (all, exists, exists_one, map,
//     filter), which Envoy disables;
//   - matches() with a constant pattern RE2 refuses.
//
// A message construction (google.protobuf.Duration{seconds: 1}) is
// refused on purpose: Envoy accepts it when the type and its field names
// are in its descriptor pool, which this package can't know.

// celProblem is a reason Envoy refuses an expression; since is the oldest
// release that accepts it (zero: none does).
type celProblem struct {
	msg        string
	since      envoyfilter.Version
	deliberate bool
}

// celMaxDepth is cel-cpp's recursion limit as Envoy configures it.
const celMaxDepth = 32

// celFunctions are the functions Envoy's CEL registers, by name, with the
// argument counts they take: global (f(x)) and receiver style (x.f()).
var (
	celGlobal = map[string][]int{
		"size": {1}, "int": {1}, "uint": {1}, "double": {1}, "bytes": {1}, "bool": {1},
		"dyn": {1}, "type": {1}, "duration": {1}, "timestamp": {1},
		"matches": {2}, "contains": {2}, "startsWith": {2}, "endsWith": {2},
		"re.extract": {3}, "re.capture": {2}, "re.captureN": {2},
	}
	celReceiver = map[string][]int{
		"size": {0}, "matches": {1}, "contains": {1}, "startsWith": {1}, "endsWith": {1},
		"getDate": {0, 1}, "getDayOfMonth": {0, 1}, "getDayOfWeek": {0, 1}, "getDayOfYear": {0, 1},
		"getFullYear": {0, 1}, "getHours": {0, 1}, "getMilliseconds": {0, 1}, "getMinutes": {0, 1},
		"getMonth": {0, 1}, "getSeconds": {0, 1},
	}
	celComprehensions = []string{"all", "exists", "exists_one", "map", "filter"}
	celReserved       = []string{"as", "break", "const", "continue", "else", "for", "function", "if",
		"import", "let", "loop", "package", "namespace", "return", "var", "void", "while"}
)

// checkCEL returns the problems Envoy has with expr.
func checkCEL(expr string) []celProblem {
	toks, err := celLex(expr)
	if err != nil {
		return []celProblem{{msg: "CEL: " + err.Error()}}
	}
	p := &celParser{toks: toks}
	n, err := p.expr()
	if err == nil && p.peek().kind != tEOF {
		err = p.errorf("unexpected %s", p.peek())
	}
	if err != nil {
		return append(p.problems, celProblem{msg: "CEL: " + err.Error()})
	}
	if n.depth > celMaxDepth {
		p.problems = append(p.problems, celProblem{msg: fmt.Sprintf("the CEL expression nests deeper than Envoy's limit of %d", celMaxDepth)})
	}
	return p.problems
}

type celKind uint8

const (
	tEOF celKind = iota
	tIdent
	tEscIdent // `quoted field`
	tInt
	tUint
	tFloat
	tString
	tBytes
	tPunct
)

type celToken struct {
	kind celKind
	text string
	// value is a string literal's content, for matches().
	value string
}

func (t celToken) String() string {
	if t.kind == tEOF {
		return "end of expression"
	}
	return strconv.Quote(t.text)
}

// celPuncts are CEL's operators and punctuation, longest first.
var celPuncts = []string{"==", "!=", "<=", ">=", "&&", "||", "<", ">", "(", ")", "[", "]", "{", "}",
	".", ",", "-", "!", "?", ":", "+", "*", "/", "%"}

// celLex splits expr into CEL tokens as CEL's ANTLR lexer does (longest
// match), and checks each literal as cel-cpp does.
func celLex(s string) ([]celToken, error) {
	var out []celToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
			continue
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			continue
		}
		// String and bytes literals, with their prefixes.
		if n, tok, err, ok := celStringAt(s[i:]); ok {
			if err != nil {
				return nil, err
			}
			out = append(out, tok)
			i += n
			continue
		}
		switch {
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j])) {
				j++
			}
			out = append(out, celToken{kind: tIdent, text: s[i:j]})
			i = j
			continue
		case c == '`':
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j]) || strings.IndexByte(".-/ ", s[j]) >= 0) {
				j++
			}
			if j == i+1 || j >= len(s) || s[j] != '`' {
				return nil, fmt.Errorf("%s is not a quoted field name (letters, digits, _ . - / and spaces between backticks)", shown(s[i:min(j+1, len(s))]))
			}
			out = append(out, celToken{kind: tEscIdent, text: s[i : j+1]})
			i = j + 1
			continue
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			n, tok := celNumberAt(s[i:])
			out = append(out, tok)
			i += n
			continue
		}
		matched := false
		for _, p := range celPuncts {
			if strings.HasPrefix(s[i:], p) {
				out = append(out, celToken{kind: tPunct, text: p})
				i += len(p)
				matched = true
				break
			}
		}
		if !matched {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, fmt.Errorf("%s is not part of CEL's syntax", shown(string(r)))
		}
	}
	return append(out, celToken{kind: tEOF}), nil
}

func isIdentStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isHex(c byte) bool        { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// celNumberAt reads the longest number literal at s: NUM_FLOAT, NUM_UINT
// or NUM_INT.
func celNumberAt(s string) (int, celToken) {
	digits := func(i int) int {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		return i
	}
	exponent := func(i int) int {
		if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
			j := i + 1
			if j < len(s) && (s[j] == '+' || s[j] == '-') {
				j++
			}
			if k := digits(j); k > j {
				return k
			}
		}
		return i
	}
	if strings.HasPrefix(s, "0x") && len(s) > 2 && isHex(s[2]) {
		j := 2
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if j < len(s) && (s[j] == 'u' || s[j] == 'U') {
			return j + 1, celToken{kind: tUint, text: s[:j+1]}
		}
		return j, celToken{kind: tInt, text: s[:j]}
	}
	i := digits(0)
	if i < len(s) && s[i] == '.' && i+1 < len(s) && isDigit(s[i+1]) {
		j := exponent(digits(i + 1))
		return j, celToken{kind: tFloat, text: s[:j]}
	}
	if i == 0 { // ".5"
		j := exponent(digits(1))
		return j, celToken{kind: tFloat, text: s[:j]}
	}
	if j := exponent(i); j > i {
		return j, celToken{kind: tFloat, text: s[:j]}
	}
	if i < len(s) && (s[i] == 'u' || s[i] == 'U') {
		return i + 1, celToken{kind: tUint, text: s[:i+1]}
	}
	return i, celToken{kind: tInt, text: s[:i]}
}

// celStringAt reads a string or bytes literal at s, if one starts there:
// an optional b/B, an optional r/R, then a body in one or three single or
// double quotes.
func celStringAt(s string) (n int, tok celToken, err error, ok bool) {
	i := 0
	isBytes, raw := false, false
	if i < len(s) && (s[i] == 'b' || s[i] == 'B') {
		isBytes = true
		i++
	}
	if i < len(s) && (s[i] == 'r' || s[i] == 'R') {
		raw = true
		i++
	}
	if i >= len(s) || (s[i] != '\'' && s[i] != '"') {
		return 0, celToken{}, nil, false
	}
	q := s[i : i+1]
	if strings.HasPrefix(s[i:], q+q+q) {
		// A triple-quoted literal runs to the first closing triple; an
		// empty one-quoted literal ('') is shorter, so the triple wins
		// when it closes.
		body := i + 3
		if end, err := celScanBody(s[body:], q+q+q, raw, true); err == nil {
			tok, err := celLiteral(s[:body+end+3], s[body:body+end], raw, isBytes, q+q+q)
			return body + end + 3, tok, err, true
		}
	}
	body := i + 1
	end, err := celScanBody(s[body:], q, raw, false)
	if err != nil {
		return 0, celToken{}, fmt.Errorf("%s: %v", shown(s[:min(len(s), body+end+1)]), err), true
	}
	tok, err = celLiteral(s[:body+end+1], s[body:body+end], raw, isBytes, q)
	return body + end + 1, tok, err, true
}

// celScanBody finds the closing quote of a literal body, checking each
// escape sequence as CEL's lexer does (raw literals have none).
func celScanBody(s, quote string, raw, multiline bool) (int, error) {
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], quote) {
			return i, nil
		}
		c := s[i]
		if !multiline && (c == '\n' || c == '\r') {
			return i, fmt.Errorf("the string has no closing %s", quote)
		}
		if c == '\\' && !raw {
			n, err := celEscapeLen(s[i:])
			if err != nil {
				return i, err
			}
			i += n
			continue
		}
		i++
	}
	return len(s), fmt.Errorf("the string has no closing %s", quote)
}

// celEscapeLen is the length of the escape sequence at s[0] == '\\'.
func celEscapeLen(s string) (int, error) {
	if len(s) < 2 {
		return 0, fmt.Errorf(`a lone \ at the end of a string`)
	}
	need := func(n int, ok func(byte) bool) (int, error) {
		if len(s) < 2+n {
			return 0, fmt.Errorf("%s is not a CEL escape sequence", shown(s))
		}
		for i := 2; i < 2+n; i++ {
			if !ok(s[i]) {
				return 0, fmt.Errorf("%s is not a CEL escape sequence", shown(s[:2+n]))
			}
		}
		return 2 + n, nil
	}
	switch c := s[1]; {
	case strings.IndexByte("abfnrtv\"'\\?`", c) >= 0:
		return 2, nil
	case c == 'x' || c == 'X':
		return need(2, isHex)
	case c == 'u':
		return need(4, isHex)
	case c == 'U':
		return need(8, isHex)
	case c >= '0' && c <= '3':
		return need(2, func(b byte) bool { return b >= '0' && b <= '7' })
	}
	return 0, fmt.Errorf("%s is not a CEL escape sequence", shown(s[:2]))
}

// celLiteral checks what cel-cpp checks when it decodes a literal and
// returns its token.
func celLiteral(text, body string, raw, isBytes bool, quote string) (celToken, error) {
	kind := tString
	if isBytes {
		kind = tBytes
	}
	tok := celToken{kind: kind, text: text}
	if raw {
		// A closing quote can't be escaped, even in a raw literal.
		n := len(body) - len(strings.TrimRight(body, `\`))
		if n%2 == 1 {
			return tok, fmt.Errorf("%s: the string must end with %s, not with a backslash", shown(text), quote)
		}
		tok.value = body
		return tok, nil
	}
	var b strings.Builder
	for i := 0; i < len(body); {
		if body[i] != '\\' {
			b.WriteByte(body[i])
			i++
			continue
		}
		n, _ := celEscapeLen(body[i:])
		esc := body[i : i+n]
		switch esc[1] {
		case 'u', 'U':
			if isBytes {
				return tok, fmt.Errorf(`%s: a bytes literal can't hold \%c escapes`, shown(text), esc[1])
			}
			r, _ := strconv.ParseUint(esc[2:], 16, 32)
			if r > utf8.MaxRune || r >= 0xD800 && r < 0xE000 {
				return tok, fmt.Errorf("%s: %s is not a Unicode character", shown(text), esc)
			}
			b.WriteRune(rune(r))
		case 'x', 'X':
			r, _ := strconv.ParseUint(esc[2:], 16, 8)
			b.WriteRune(rune(r))
		case '0', '1', '2', '3':
			r, _ := strconv.ParseUint(esc[1:], 8, 8)
			b.WriteRune(rune(r))
		default:
			b.WriteByte(map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v'}[esc[1]] | passthrough(esc[1]))
		}
		i += n
	}
	tok.value = b.String()
	return tok, nil
}

// passthrough is the character an escape like \" or \\ stands for.
func passthrough(c byte) byte {
	if strings.IndexByte("abfnrtv", c) >= 0 {
		return 0
	}
	return c
}

// celNode is what the checker needs of a parsed expression.
type celNode struct {
	// depth is cel-cpp's parse depth of the node: 1 for a name or a
	// literal, one more than its deepest part for anything else, except
	// that parentheses add nothing and a chain of && (or ||) adds one in
	// all, however long.
	depth int
	// qualified is the dotted name of an identifier or a selection of
	// identifiers (a.b.c), "" for anything else.
	qualified string
	selection bool // a field selection, what has() takes
	// pattern is the value of a string literal, for matches().
	pattern  string
	constant bool
}

type celParser struct {
	toks     []celToken
	pos      int
	exprs    int // nested expr rules, cel-cpp's other recursion counter
	problems []celProblem
}

func (p *celParser) peek() celToken { return p.toks[p.pos] }

func (p *celParser) is(punct string) bool {
	t := p.peek()
	return t.kind == tPunct && t.text == punct
}

func (p *celParser) accept(punct string) bool {
	if p.is(punct) {
		p.pos++
		return true
	}
	return false
}

func (p *celParser) expect(punct string) error {
	if !p.accept(punct) {
		return p.errorf("expected %q, found %s", punct, p.peek())
	}
	return nil
}

func (p *celParser) errorf(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}

func (p *celParser) problem(since envoyfilter.Version, format string, args ...any) {
	p.problems = append(p.problems, celProblem{msg: fmt.Sprintf(format, args...), since: since})
}

func maxDepth(nodes ...celNode) int {
	d := 0
	for _, n := range nodes {
		d = max(d, n.depth)
	}
	return d
}

// expr: conditionalOr ('?' conditionalOr ':' expr)?
func (p *celParser) expr() (celNode, error) {
	p.exprs++
	defer func() { p.exprs-- }()
	if p.exprs > celMaxDepth+1 {
		return celNode{}, p.errorf("the expression nests deeper than Envoy's limit of %d", celMaxDepth)
	}
	cond, err := p.logical("||", p.conditionalAnd)
	if err != nil || !p.accept("?") {
		return cond, err
	}
	then, err := p.logical("||", p.conditionalAnd)
	if err != nil {
		return celNode{}, err
	}
	if err := p.expect(":"); err != nil {
		return celNode{}, err
	}
	els, err := p.expr()
	if err != nil {
		return celNode{}, err
	}
	return celNode{depth: 1 + maxDepth(cond, then, els)}, nil
}

func (p *celParser) conditionalAnd() (celNode, error) { return p.logical("&&", p.relation) }

// logical is a chain of terms joined by op; cel-cpp balances the chain,
// and its depth counts the chain once.
func (p *celParser) logical(op string, term func() (celNode, error)) (celNode, error) {
	first, err := term()
	if err != nil || !p.is(op) {
		return first, err
	}
	nodes := []celNode{first}
	for p.accept(op) {
		n, err := term()
		if err != nil {
			return celNode{}, err
		}
		nodes = append(nodes, n)
	}
	return celNode{depth: 1 + maxDepth(nodes...)}, nil
}

var celRelations = []string{"<", "<=", ">=", ">", "==", "!="}

// relation: calc (op calc)*, left to right; "in" is a relation too.
func (p *celParser) relation() (celNode, error) {
	left, err := p.additive()
	for err == nil {
		t := p.peek()
		if !(t.kind == tPunct && slices.Contains(celRelations, t.text) || t.kind == tIdent && t.text == "in") {
			break
		}
		p.pos++
		var right celNode
		if right, err = p.additive(); err == nil {
			left = celNode{depth: 1 + maxDepth(left, right)}
		}
	}
	return left, err
}

func (p *celParser) additive() (celNode, error) {
	left, err := p.multiplicative()
	for err == nil && (p.is("+") || p.is("-")) {
		p.pos++
		var right celNode
		if right, err = p.multiplicative(); err == nil {
			left = celNode{depth: 1 + maxDepth(left, right)}
		}
	}
	return left, err
}

func (p *celParser) multiplicative() (celNode, error) {
	left, err := p.unary()
	for err == nil && (p.is("*") || p.is("/") || p.is("%")) {
		p.pos++
		var right celNode
		if right, err = p.unary(); err == nil {
			left = celNode{depth: 1 + maxDepth(left, right)}
		}
	}
	return left, err
}

// unary: member | '!'+ member | '-'+ member, where a single '-' before a
// number is part of the literal.
func (p *celParser) unary() (celNode, error) {
	op := ""
	switch {
	case p.is("!"):
		op = "!"
	case p.is("-") && !p.negativeLiteral():
		op = "-"
	default:
		return p.member()
	}
	n := 0
	for p.accept(op) {
		n++
	}
	m, err := p.member()
	// cel-cpp drops an even number of them: the operand stands for itself
	// (has(!!a.b) is has(a.b)); either way the operators count once in
	// the depth.
	u := celNode{depth: 1 + m.depth}
	if n%2 == 0 {
		u.selection = m.selection
	}
	return u, err
}

// celNumber checks a number literal's range as cel-cpp does.
func celNumber(t celToken, negative bool) error {
	text := t.text
	switch t.kind {
	case tInt:
		base, digits := 10, text
		if strings.HasPrefix(text, "0x") {
			base, digits = 16, text[2:]
		}
		if negative {
			digits = "-" + digits
		}
		if _, err := strconv.ParseInt(digits, base, 64); err != nil {
			return fmt.Errorf("%s is out of the int range", shown(text))
		}
	case tUint:
		base, digits := 10, strings.TrimRight(text, "uU")
		if strings.HasPrefix(digits, "0x") {
			base, digits = 16, digits[2:]
		}
		if _, err := strconv.ParseUint(digits, base, 64); err != nil {
			return fmt.Errorf("%s is out of the uint range", shown(text))
		}
	}
	return nil
}

func (p *celParser) member() (celNode, error) {
	n, err := p.primary()
	if err != nil {
		return n, err
	}
	return p.suffixes(n)
}

// suffixes: member '.' name, member '.' name '(' args ')', member '[' expr ']'.
func (p *celParser) suffixes(n celNode) (celNode, error) {
	for {
		switch {
		case p.accept("."):
			if p.accept("?") {
				p.problem(never, "Envoy doesn't enable CEL's optional syntax (.?field)")
			}
			t := p.peek()
			switch t.kind {
			case tIdent:
				if isCELKeyword(t.text) {
					return n, p.errorf("%q can't follow \".\"", t.text)
				}
				p.pos++
				if p.is("(") {
					call, err := p.call(t.text, &n)
					if err != nil {
						return n, err
					}
					n = call
					continue
				}
			case tEscIdent:
				p.pos++
				p.problem(v(40), "a quoted field name %s", t.text)
				if p.is("(") {
					return n, p.errorf("a quoted field name can't be called")
				}
			default:
				return n, p.errorf("expected a field name after \".\", found %s", t)
			}
			q := ""
			if n.qualified != "" {
				q = n.qualified + "." + strings.Trim(t.text, "`")
			}
			n = celNode{depth: n.depth + 1, qualified: q, selection: true}
		case p.accept("["):
			if p.accept("?") {
				p.problem(never, "Envoy doesn't enable CEL's optional syntax ([?index])")
			}
			idx, err := p.expr()
			if err != nil {
				return n, err
			}
			if err := p.expect("]"); err != nil {
				return n, err
			}
			n = celNode{depth: 1 + maxDepth(n, idx)}
		default:
			return n, nil
		}
	}
}

// negativeLiteral reports whether a '-' and a number (int or float) are
// next: CEL's literal rule takes them as one negative number.
func (p *celParser) negativeLiteral() bool {
	if !p.is("-") {
		return false
	}
	next := p.toks[p.pos+1]
	return next.kind == tInt || next.kind == tFloat
}

func (p *celParser) primary() (celNode, error) {
	t := p.peek()
	if p.negativeLiteral() {
		p.pos += 2
		return celNode{depth: 1}, celNumber(p.toks[p.pos-1], true)
	}
	switch {
	case t.kind == tPunct && t.text == "." || t.kind == tIdent && !isCELKeyword(t.text):
		dot := p.accept(".")
		t = p.peek()
		if t.kind != tIdent || isCELKeyword(t.text) {
			return celNode{}, p.errorf("expected a name after \".\", found %s", t)
		}
		p.pos++
		if slices.Contains(celReserved, t.text) {
			return celNode{}, p.errorf("%q is a reserved word in CEL", t.text)
		}
		if p.is("(") {
			return p.call(t.text, nil)
		}
		// A message construction: a dotted type name and '{'.
		if n, ok, err := p.construction(); ok {
			return n, err
		}
		name := t.text
		if dot {
			name = "." + name
		}
		return celNode{depth: 1, qualified: name}, nil
	case t.kind == tPunct && t.text == "(":
		p.pos++
		n, err := p.expr()
		if err != nil {
			return n, err
		}
		if err := p.expect(")"); err != nil {
			return n, err
		}
		n.qualified = ""
		return n, nil
	case t.kind == tPunct && t.text == "[":
		p.pos++
		var elems []celNode
		// '[' listInit? ','? ']': "[,]" is a list too.
		for !p.is("]") && !(len(elems) == 0 && p.accept(",")) {
			if p.accept("?") {
				p.problem(never, "Envoy doesn't enable CEL's optional syntax ([?element])")
			}
			e, err := p.expr()
			if err != nil {
				return e, err
			}
			elems = append(elems, e)
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect("]"); err != nil {
			return celNode{}, err
		}
		return celNode{depth: 1 + maxDepth(elems...)}, nil
	case t.kind == tPunct && t.text == "{":
		p.pos++
		var parts []celNode
		for !p.is("}") && !(len(parts) == 0 && p.accept(",")) {
			if p.accept("?") {
				p.problem(never, "Envoy doesn't enable CEL's optional syntax ({?key: value})")
			}
			k, err := p.expr()
			if err != nil {
				return k, err
			}
			if err := p.expect(":"); err != nil {
				return celNode{}, err
			}
			val, err := p.expr()
			if err != nil {
				return val, err
			}
			parts = append(parts, k, val)
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect("}"); err != nil {
			return celNode{}, err
		}
		return celNode{depth: 1 + maxDepth(parts...)}, nil
	case t.kind == tInt || t.kind == tUint || t.kind == tFloat:
		p.pos++
		return celNode{depth: 1}, celNumber(t, false)
	case t.kind == tString:
		p.pos++
		return celNode{depth: 1, pattern: t.value, constant: true}, nil
	case t.kind == tBytes || t.kind == tIdent && (t.text == "true" || t.text == "false" || t.text == "null"):
		p.pos++
		return celNode{depth: 1}, nil
	}
	return celNode{}, p.errorf("expected an operand, found %s", t)
}

func isCELKeyword(s string) bool {
	return s == "in" || s == "true" || s == "false" || s == "null"
}

// construction parses Type.Name{field: value, ...} after its first name,
// when the tokens ahead are one; ok reports whether they were.
func (p *celParser) construction() (celNode, bool, error) {
	i := p.pos
	for p.toks[i].kind == tPunct && p.toks[i].text == "." && p.toks[i+1].kind == tIdent {
		i += 2
	}
	if !(p.toks[i].kind == tPunct && p.toks[i].text == "{") {
		return celNode{}, false, nil
	}
	p.pos = i + 1
	var values []celNode
	for !p.is("}") && !(len(values) == 0 && p.accept(",")) {
		p.accept("?")
		if t := p.peek(); t.kind != tIdent && t.kind != tEscIdent {
			return celNode{}, true, p.errorf("expected a field name, found %s", t)
		}
		p.pos++
		if err := p.expect(":"); err != nil {
			return celNode{}, true, err
		}
		val, err := p.expr()
		if err != nil {
			return val, true, err
		}
		values = append(values, val)
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect("}"); err != nil {
		return celNode{}, true, err
	}
	p.problems = append(p.problems, celProblem{deliberate: true,
		msg: "globalconfig refuses CEL message construction (Type{field: value}): Envoy checks the type against the protobuf types linked into it, which globalconfig can't know"})
	return celNode{depth: 1 + maxDepth(values...)}, true, nil
}

// call parses the arguments of name(...) or target.name(...) and checks
// the function is one Envoy registers with that many arguments.
func (p *celParser) call(name string, target *celNode) (celNode, error) {
	p.pos++ // (
	var args []celNode
	if !p.is(")") {
		for {
			a, err := p.expr()
			if err != nil {
				return a, err
			}
			args = append(args, a)
			if !p.accept(",") {
				break
			}
		}
	}
	if err := p.expect(")"); err != nil {
		return celNode{}, err
	}
	parts := args
	if target != nil {
		parts = append([]celNode{*target}, args...)
	}
	n := celNode{depth: 1 + maxDepth(parts...)}
	switch {
	case target == nil && name == "has":
		if len(args) == 1 && !args[0].selection {
			p.problem(never, "has() takes a field selection, has(a.b)")
		} else if len(args) != 1 {
			p.problem(never, "has() takes one field selection, has(a.b)")
		}
		return n, nil
	case target != nil && slices.Contains(celComprehensions, name):
		p.problem(never, "Envoy disables CEL comprehensions (%s)", strings.Join(celComprehensions, ", "))
		return n, nil
	}
	if target != nil && target.qualified != "" && slices.Contains(celGlobal[strings.TrimPrefix(target.qualified, ".")+"."+name], len(args)) {
		return n, nil
	}
	known := celGlobal
	style := fmt.Sprintf("%s(...)", name)
	if target != nil {
		known = celReceiver
		style = fmt.Sprintf("x.%s(...)", name)
	}
	if !slices.Contains(known[name], len(args)) {
		p.problem(never, "Envoy's CEL has no function %s with %d argument(s)", style, len(args))
		return n, nil
	}
	// matches() compiles a constant pattern when Envoy loads the expression.
	var pattern *celNode
	switch {
	case name == "matches" && target == nil && len(args) == 2:
		pattern = &args[1]
	case name == "matches" && target != nil && len(args) == 1:
		pattern = &args[0]
	}
	if pattern != nil && pattern.constant {
		// The project's one RE2 check (Envoy's own RE2 options; cel-cpp
		// compiles with RE2's defaults, which differ only for non-ASCII).
		if _, err := re2.Check(pattern.pattern); err != nil {
			p.problem(never, "matches() pattern %s: %v", shown(pattern.pattern), err)
		}
	}
	return n, nil
}
