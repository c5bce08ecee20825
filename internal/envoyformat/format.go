// Package envoyformat checks Envoy substitution format strings (access log
// formats, json_format values, local reply bodies, header values) the way
// Envoy's substitution formatter parses them when it loads a
// configuration, so that what validation admits, every Envoy of the fleet
// loads, and what it refuses, Envoy would refuse too (Envoy refuses the
// whole listener or route configuration over one bad operator).
//
// The rules are Envoy's (source/common/formatter: the command regex of
// substitution_formatter.cc, the syntax flags of each operator in
// stream_info_formatter.cc and http_specific_formatter.cc, the built-in
// METADATA, CEL, TYPED_CEL and XFCC_VALUE command parsers), recorded
// against real Envoy binaries 1.36 to 1.40; the test vectors in
// format_test.go and test/agreement's generator hold the package to them:
//
//   - % starts a command operator %NAME%, %NAME(ARG)%, %NAME:N% or
//     %NAME(ARG):N%; NAME is [A-Z0-9_]+, ARG runs to the first ")" that is
//     followed by "%" or ":N%" and can't hold a line break, N is a decimal
//     that fits in 64 bits. %% is a literal percent sign; any other % (a
//     lone %, "50% off", "https://x/a%20b", lower case) is refused.
//   - Each operator takes an argument and a length or not, as Envoy's
//     CommandSyntaxChecker says, and parses its argument by its own grammar
//     (header names, KIND:NAMESPACE:KEY, KEY:PLAIN|TYPED|FIELD, CEL, …).
//   - Operators, arguments and lengths that only newer Envoys take are
//     recorded with the oldest Envoy release that takes them, so an item
//     can refuse them for older proxies (Needs, CheckFor).
//   - Header values (Header) are rewritten before they are parsed:
//     %PER_REQUEST_STATE(key)% becomes %FILTER_STATE(key:PLAIN)% and
//     %UPSTREAM_METADATA(["ns", "key"])% / %DYNAMIC_METADATA([…])% become
//     the colon form; and a header value can't hold NUL, CR or LF.
//     Everything else (access log text and json_format values, local reply
//     bodies: Text) is parsed as written.
//
// Deliberate refusals, stricter than Envoy on purpose: a CEL message
// construction (T{field: value}), which Envoy checks against the protobuf
// types linked into the binary, a set this package can't know.
//
// An item declares which kind of string each field holds and calls, in
// Validate, CheckIn(p, path, s, place) (Text for access log formats,
// json_format values and local reply bodies; Header for header values),
// then refuses the string for proxies older than Needs(s, place) in
// BuildFor (items.Versioned), with items.NeedsMsg; CheckFor does both for
// one release. Check is the conservative form for callers that don't scope
// by proxy version: it refuses whatever the oldest known release refuses.
package envoyformat

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/internal/memo"
)

// Place is the kind of field a format string goes to; Envoy parses the
// two kinds alike except for the rewriting and checks header values get.
type Place uint8

const (
	// Text is a format string Envoy parses as written: an access log's
	// text_format_source or a json_format value, a local reply body_format.
	Text Place = iota
	// Header is a header value: request_headers_to_add and
	// response_headers_to_add of a route configuration, virtual host or
	// route, a local reply mapper's headers_to_add, the local rate limit
	// filter's response_headers_to_add.
	Header
)

func (p Place) String() string {
	if p == Header {
		return "header value"
	}
	return "format string"
}

// Problem is one reason Envoy refuses a format string.
type Problem struct {
	// Message names the operator and what is wrong, quoting at most a
	// short excerpt of the string.
	Message string
	// Since is the oldest Envoy release that accepts what the problem is
	// about; zero when no Envoy release does.
	Since envoyfilter.Version
	// Deliberate marks a refusal stricter than Envoy on purpose (see the
	// package comment): Envoy may accept the string.
	Deliberate bool
}

// Analysis is what Envoy makes of one format string in one place.
type Analysis struct {
	Problems []Problem
}

// Analyze parses format as Envoy's substitution formatter does in place.
// Answers are memoized by (format, place): validation, each targeted
// release's check and the check of what items build ask about the same
// strings on every render. The Analysis is shared: never change it.
func Analyze(format string, place Place) Analysis {
	if len(format) > maxMemoFormat {
		return analyze(format, place)
	}
	key := memoKey{format, place}
	a, ok := analyzed.Get(key)
	if !ok {
		a = analyze(format, place)
		a.Problems = slices.Clip(a.Problems) // an append copies
		analyzed.Put(key, a)
	}
	return a
}

// The memo of Analyze holds at most memoSize answers about strings of at
// most maxMemoFormat bytes: a few MiB at worst, whatever documents come.
const (
	memoSize      = 4096
	maxMemoFormat = 1024
)

type memoKey struct {
	format string
	place  Place
}

var analyzed = memo.New[memoKey, Analysis](memoSize)

// analyze is Analyze without the memo.
func analyze(format string, place Place) Analysis {
	var c checker
	if !utf8.ValidString(format) {
		// Envoy takes format strings from protobuf strings, which are UTF-8.
		c.add(never, "%s is not valid UTF-8", place)
	}
	if place == Header {
		format = c.header(format)
	}
	before := len(c.problems)
	c.parse(format)
	if c.rewritten {
		for i := before; i < len(c.problems); i++ {
			c.problems[i].Message += fmt.Sprintf(" (in a header value Envoy rewrites %%PER_REQUEST_STATE%% and the JSON form of the metadata operators first; it parsed %s)", shown(format))
		}
	}
	return Analysis{Problems: c.problems}
}

// Refused reports whether no Envoy release accepts the string.
func (a Analysis) Refused() bool {
	return slices.ContainsFunc(a.Problems, func(p Problem) bool { return p.Since == (envoyfilter.Version{}) })
}

// Needs is the oldest Envoy release that accepts the string: zero when
// every release does. It says nothing about a string no release accepts
// (see Refused).
func (a Analysis) Needs() envoyfilter.Version {
	var v envoyfilter.Version
	for _, p := range a.Problems {
		if p.Since.Compare(v) > 0 {
			v = p.Since
		}
	}
	return v
}

// AcceptedBy reports whether Envoy release envoy loads the string.
func (a Analysis) AcceptedBy(envoy envoyfilter.Version) bool {
	return len(a.For(envoy)) == 0
}

// For returns the problems Envoy release envoy has with the string.
func (a Analysis) For(envoy envoyfilter.Version) []Problem {
	var out []Problem
	for _, p := range a.Problems {
		if p.Since == (envoyfilter.Version{}) || !envoy.AtLeast(p.Since) {
			out = append(out, p)
		}
	}
	return out
}

// Check records at path each problem that some Envoy release globalconfig
// knows (envoyfilter.Releases, oldest first) has with format, a Text
// format string. It is for callers that don't scope what they build by
// proxy version: what it admits, every proxy of every known Istio release
// loads. Items that do scope by version use CheckIn and Needs (or
// CheckFor) instead.
func Check(p *fielderr.List, path, format string) {
	CheckFor(p, path, format, Text, envoyfilter.Releases[0].Envoy)
}

// CheckIn records at path each problem with format in place that no Envoy
// release can get past: the string is wrong whatever the proxies run.
// What only older releases refuse is left to Needs.
func CheckIn(p *fielderr.List, path, format string, place Place) {
	for _, pr := range Analyze(format, place).Problems {
		if pr.Since == (envoyfilter.Version{}) {
			p.Addf(path, "%s", pr.Message)
		}
	}
}

// CheckFor records at path each problem Envoy release envoy has with
// format in place; a problem newer releases don't have says which release
// (Istio and Envoy) it needs, as items.NeedsMsg does.
func CheckFor(p *fielderr.List, path, format string, place Place, envoy envoyfilter.Version) {
	for _, pr := range Analyze(format, place).For(envoy) {
		p.Addf(path, "%s", pr.Message)
	}
}

// Needs returns the oldest Envoy release that accepts format in place,
// zero when every release does. An item refuses the string for proxies
// older than that (items.Versioned, items.NeedsMsg); CheckIn reports the
// strings no release accepts.
func Needs(format string, place Place) envoyfilter.Version {
	return Analyze(format, place).Needs()
}

// QuotesRequest reports whether format substitutes a value the client
// chose (a header, the path, a query parameter, the SNI, a CEL expression
// that may read any of them).
func QuotesRequest(format string) bool {
	for _, t := range tokens(format) {
		if op, ok := operators[t.name]; ok && op.quotesRequest {
			return true
		}
	}
	return false
}

// maxShown bounds the text quoted back in a message.
const maxShown = 40

// shown quotes s for a message, shortened to maxShown characters.
func shown(s string) string {
	if r := []rune(s); len(r) > maxShown {
		s = string(r[:maxShown]) + "…"
	}
	return strconv.Quote(s)
}

// never is the Since of a problem no Envoy release gets past.
var never = envoyfilter.Version{}

// checker collects the problems of one string.
type checker struct {
	problems []Problem
	// rewritten notes that Envoy rewrote a header value before parsing it,
	// for the messages.
	rewritten bool
}

func (c *checker) add(since envoyfilter.Version, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if since != never {
		msg += ": " + envoyfilter.NeedsMsg(since)
	}
	c.problems = append(c.problems, Problem{Message: msg, Since: since})
}

// deliberate records a refusal stricter than Envoy on purpose.
func (c *checker) deliberate(format string, args ...any) {
	c.problems = append(c.problems, Problem{Message: fmt.Sprintf(format, args...), Deliberate: true})
}

// token is one command operator as Envoy's command regex
// ^%([A-Z0-9_]+)(?:\((.*?)\))?(?::([0-9]+))?% reads it.
type token struct {
	text      string // the whole %…%
	name      string
	arg       string // the subcommand; "" when absent or empty, as for Envoy
	length    string // the digits of :N, "" when absent
	hasLength bool
}

// scan reads the command operator at s[0] == '%' (not "%%"). It returns
// the token and its length, or ok false where Envoy finds no valid command.
func scan(s string) (t token, n int, ok bool) {
	i := 1
	for i < len(s) && isNameByte(s[i]) {
		i++
	}
	if i == 1 {
		return token{}, 0, false
	}
	name := s[1:i]
	// The parenthesised argument, when one matches: the shortest run up to
	// a ")" after which the rest matches (RE2's .*? does not cross \n).
	if i < len(s) && s[i] == '(' {
		for k := i + 1; k < len(s) && s[k] != '\n'; k++ {
			if s[k] != ')' {
				continue
			}
			if digits, m, ok := lengthAt(s[k+1:]); ok {
				end := k + 1 + m
				return token{text: s[:end], name: name, arg: s[i+1 : k], length: digits, hasLength: digits != ""}, end, true
			}
		}
	}
	if digits, m, ok := lengthAt(s[i:]); ok {
		end := i + m
		return token{text: s[:end], name: name, length: digits, hasLength: digits != ""}, end, true
	}
	return token{}, 0, false
}

// lengthAt matches (?::([0-9]+))?% at the start of s: the digits ("" for
// none) and the bytes matched.
func lengthAt(s string) (digits string, n int, ok bool) {
	if strings.HasPrefix(s, ":") {
		j := 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j > 1 && j < len(s) && s[j] == '%' {
			return s[1:j], j + 1, true
		}
	}
	if strings.HasPrefix(s, "%") {
		return "", 1, true
	}
	return "", 0, false
}

func isNameByte(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
}

// lengthFits reports whether RE2 reads digits into Envoy's size_t length:
// leading zeros don't count, the value must fit in 64 bits.
func lengthFits(digits string) bool {
	trimmed := strings.TrimLeft(digits, "0")
	if trimmed == "" {
		return true
	}
	_, err := strconv.ParseUint(trimmed, 10, 64)
	return err == nil
}

// tokens returns the command operators of s up to the first place Envoy
// stops at, for QuotesRequest.
func tokens(s string) []token {
	var out []token
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			i++
			continue
		}
		t, n, ok := scan(s[i:])
		if !ok {
			return out
		}
		out = append(out, t)
		i += n - 1
	}
	return out
}

// parse walks s as SubstitutionFormatParser::parse does. Envoy stops at
// the first error; parse goes on where it can still tell the operators
// apart, so that one pass reports every bad operator.
func (c *checker) parse(s string) {
	for i := 0; i < len(s); {
		if s[i] != '%' {
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			i += 2
			continue
		}
		t, n, ok := scan(s[i:])
		if !ok {
			c.add(never, "%s", c.notAnOperator(s[i:]))
			return // Envoy stops here too: the rest can't be split reliably.
		}
		if t.hasLength && !lengthFits(t.length) {
			c.add(never, "%s: the length %s does not fit in 64 bits", shown(t.text), shown(t.length))
		} else {
			c.command(t.name, t.arg, t.hasLength, t.text)
		}
		i += n
	}
}

// notAnOperator explains a % that starts no valid command operator.
func (c *checker) notAnOperator(rest string) string {
	if rest == "%" {
		return `a lone "%" at the end must be written "%%" (Envoy reads "%" as the start of a command operator)`
	}
	if end := strings.IndexByte(rest[1:], '%'); end >= 0 {
		// A lower-case name: suggest it in upper case, argument untouched.
		token := rest[:end+2]
		n := 1
		for n < len(token) && (isNameByte(token[n]) || token[n] >= 'a' && token[n] <= 'z') {
			n++
		}
		if upper := "%" + strings.ToUpper(token[1:n]) + token[n:]; upper != token {
			if t, m, ok := scan(upper); ok && m == len(upper) {
				if _, known := operators[t.name]; known {
					return fmt.Sprintf("%s: command operators are upper case; did you mean %s?", shown(token), shown(upper))
				}
			}
		}
	}
	name := 1
	for name < len(rest) && isNameByte(rest[name]) {
		name++
	}
	switch {
	case name == 1:
		return fmt.Sprintf(`%s: a lone "%%" must be written "%%%%" (Envoy reads "%%" as the start of a command operator)`, shown(excerpt(rest)))
	case name == len(rest):
		return fmt.Sprintf(`%s has no closing "%%"; a literal percent sign is written "%%%%"`, shown(excerpt(rest)))
	case rest[name] == '(':
		if close := strings.IndexByte(rest, ')'); close < 0 || !strings.Contains(rest[close:], "%") {
			return fmt.Sprintf(`%s: %%%s(...)%% has no closing ")%%"; a literal percent sign is written "%%%%"`, shown(excerpt(rest)), rest[1:name])
		}
		return fmt.Sprintf(`%s: %%%s(...)%% must end with ")%%" or "):N%%", N a decimal length, and its argument can't hold a line break; a literal percent sign is written "%%%%"`, shown(excerpt(rest)), rest[1:name])
	case rest[name] == ':':
		return fmt.Sprintf(`%s: %%%s:N%% takes a decimal length N and a closing "%%"; a literal percent sign is written "%%%%"`, shown(excerpt(rest)), rest[1:name])
	}
	return fmt.Sprintf(`%s is not a command operator (%%NAME%%, %%NAME(arg)%%, %%NAME:N%% or %%NAME(arg):N%%, NAME in upper case); write a literal percent sign as "%%%%"`, shown(excerpt(rest)))
}

// excerpt is the start of rest, the % that starts it, up to the next %
// when that is near, else a few characters.
func excerpt(rest string) string {
	if end := strings.IndexByte(rest[1:], '%'); end >= 0 && end < maxShown {
		return rest[:end+2]
	}
	if r := []rune(rest); len(r) > 16 {
		return string(r[:16])
	}
	return rest
}

// Operators lists the names of the command operators Envoy's built-in
// command parsers know, in some release, sorted.
func Operators() []string { return operatorNames() }
