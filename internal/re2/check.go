package re2

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/globalconfig/globalconfig/internal/memo"
)

// MaxProgramSize is the largest RE2 program size Envoy accepts by default:
// Envoy refuses a regex whose forward program has more instructions than
// the runtime key re2.max_program_size.error_level, which defaults to 100
// (source/common/common/regex.cc). The refusal takes the whole listener
// or route configuration down with it, so callers compare Check's size
// against this before emitting a regex.
const MaxProgramSize = 100

// Dialect is the RE2 of a range of Envoy releases. They differ in how a
// pattern is read, which changes both what is refused and the program
// sizes, so a fleet running several Envoy versions must pass all of them
// (CheckAll).
type Dialect int

const (
	// Envoy139 is Envoy 1.39 and 1.40 (verified on 1.39.3 and 1.40.0):
	// RE2 reads the pattern as Latin-1, every byte one character
	// (U+0000-U+00FF). A UTF-8 "é" is the two characters "Ã©", \x{100}
	// and above are invalid escapes, (?i) folds ASCII letters only, and
	// . is one byte.
	Envoy139 Dialect = iota + 1
	// Envoy136 is Envoy 1.36 to 1.38 (verified on 1.36.2): RE2 reads the
	// pattern as UTF-8 (RE2's default), with Unicode 15.1 tables. . is
	// any UTF-8 sequence (12 instructions rather than 6), and (?i)k also
	// matches the Kelvin sign. Its RE2 predates the look-behind check, so
	// (?<=a) is refused as an "invalid named capture group" (Envoy
	// 1.38.3 says "invalid perl operator"; both refuse).
	Envoy136
)

// Dialects lists every dialect, newest first.
func Dialects() []Dialect { return []Dialect{Envoy139, Envoy136} }

func (d Dialect) String() string {
	switch d {
	case Envoy139:
		return "Envoy 1.39+ (RE2, Latin-1)"
	case Envoy136:
		return "Envoy 1.36-1.38 (RE2, UTF-8)"
	}
	return "unknown RE2 dialect"
}

// EnvoyDialect is the dialect of the newest Envoy this project targets,
// which Check uses.
const EnvoyDialect = Envoy139

// maxMem is RE2's default memory budget (RE2::Options::kDefaultMaxMem),
// which Envoy keeps; two thirds of it go to the forward program.
const maxMem = 8 << 20

// progOverhead is sizeof(re2::Prog) on 64-bit Linux, and instSize
// sizeof(Prog::Inst): the forward program may hold
// (maxMem*2/3 - progOverhead) / instSize = 698,996 instructions before
// flattening (measured on Envoy 1.36.2, 1.39.3 and 1.40.0), beyond which
// RE2 fails with "pattern too large - compile failed".
const (
	progOverhead = 432
	instSize     = 8
)

// maxInst is RE2's instruction budget for the forward program.
const maxInst = (maxMem*2/3 - progOverhead) / instSize

// ErrorCode is the kind of a refusal, named by RE2's own message.
type ErrorCode string

// RE2's parse errors (re2/regexp.cc kErrorStrings), and its compile error.
const (
	ErrInternal              ErrorCode = "unexpected error"
	ErrBadEscape             ErrorCode = "invalid escape sequence"
	ErrBadCharClass          ErrorCode = "invalid character class"
	ErrBadCharRange          ErrorCode = "invalid character class range"
	ErrMissingBracket        ErrorCode = "missing ]"
	ErrMissingParen          ErrorCode = "missing )"
	ErrUnexpectedParen       ErrorCode = "unexpected )"
	ErrTrailingBackslash     ErrorCode = "trailing \\"
	ErrMissingRepeatArgument ErrorCode = "no argument for repetition operator"
	ErrRepeatSize            ErrorCode = "invalid repetition size"
	ErrBadRepeatOp           ErrorCode = "bad repetition operator"
	ErrBadPerlOp             ErrorCode = "invalid perl operator"
	ErrBadUTF8               ErrorCode = "invalid UTF-8"
	ErrBadNamedCapture       ErrorCode = "invalid named capture group"
	ErrPatternTooLarge       ErrorCode = "pattern too large - compile failed"
)

// Error is a regex RE2 refuses. Its text is exactly what Envoy reports
// (RE2's RE2::error()), e.g. `invalid escape sequence: \x{4e0`.
type Error struct {
	Code ErrorCode
	// Arg is the piece of the pattern RE2 blames, as RE2 shows it. In
	// Latin-1 each non-ASCII byte of the pattern appears as the character
	// with that code (UTF-8 "é" shows as "Ã©"), except after "missing )"
	// and "unexpected )", which quote the pattern as given.
	Arg string
}

func (e *Error) Error() string {
	if e.Arg == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Arg
}

// Check parses and compiles expr as Envoy's RE2 does (EnvoyDialect) and
// returns RE2's program size, the number Envoy compares against
// re2.max_program_size.error_level (see MaxProgramSize). A regex RE2
// refuses returns an *Error with RE2's message.
//
// Envoy's own config checks come on top: its RegexMatcher requires a
// non-empty regex, which RE2 itself accepts (size 4).
func Check(expr string) (programSize int, err error) {
	return CheckDialect(expr, EnvoyDialect)
}

// CheckAll checks expr in every dialect: it returns the first refusal
// (newest dialect first, its text prefixed with the dialect), else the
// largest program size. Use it for regexes that reach proxies of several
// Envoy versions.
func CheckAll(expr string) (programSize int, err error) {
	for _, d := range Dialects() {
		n, err := CheckDialect(expr, d)
		if err != nil {
			return 0, fmt.Errorf("%v: %w", d, err)
		}
		programSize = max(programSize, n)
	}
	return programSize, nil
}

// CheckDialect is Check for the RE2 of a given range of Envoy releases.
// Answers are memoized by (expr, d): validation and the check of what
// items build ask about the same regexes on every render.
func CheckDialect(expr string, d Dialect) (programSize int, err error) {
	if len(expr) > maxMemoExpr {
		return checkDialect(expr, d)
	}
	key := memoKey{expr, d}
	r, ok := checked.Get(key)
	if !ok {
		r.size, r.err = checkDialect(expr, d)
		checked.Put(key, r)
	}
	return r.size, r.err
}

// The memo of CheckDialect holds at most memoSize answers about
// regexes of at most maxMemoExpr bytes (a regex within Envoy's program
// size is far shorter): a few MiB at worst, whatever documents come.
const (
	memoSize    = 4096
	maxMemoExpr = 1024
)

type memoKey struct {
	expr string
	d    Dialect
}

type memoResult struct {
	size int
	err  error
}

var checked = memo.New[memoKey, memoResult](memoSize)

// checkDialect is CheckDialect without the memo.
func checkDialect(expr string, d Dialect) (programSize int, err error) {
	// Both Envoys construct RE2 with its default options but the
	// encoding: Perl syntax, ClassNL, captures, 8 MiB.
	flags := flagClassNL | flagLikePerl
	var latin1, lookbehindCheck bool
	switch d {
	case Envoy139:
		latin1, lookbehindCheck = true, true
		flags |= flagLatin1
	case Envoy136:
	default:
		return 0, errors.New("re2: unknown dialect")
	}
	// Envoy takes regexes from protobuf strings, which are UTF-8; RE2 in
	// UTF-8 mode refuses anything else with this message.
	if !utf8.ValidString(expr) {
		return 0, &Error{Code: ErrBadUTF8}
	}
	re, perr := parse(expr, flags, lookbehindCheck)
	if perr != nil {
		return 0, perr
	}
	// RE2 matches a leading ^literal by itself and compiles only the rest.
	if _, suffix, ok := requiredPrefix(re); ok {
		re = suffix
	}
	n, ok := compileProgram(re, latin1, maxInst)
	if !ok {
		return 0, &Error{Code: ErrPatternTooLarge}
	}
	return n, nil
}

// requiredPrefix splits ^literal... into the literal and the rest, as RE2
// does when the regexp is a concatenation of one or more \A, a literal,
// and anything.
func requiredPrefix(re *node) (prefix []rune, suffix *node, ok bool) {
	if re.op != opConcat {
		return nil, nil, false
	}
	i := 0
	for i < len(re.subs) && re.subs[i].op == opBeginText {
		i++
	}
	if i == 0 || i >= len(re.subs) {
		return nil, nil, false
	}
	lit := re.subs[i]
	switch lit.op {
	case opLiteral:
		prefix = []rune{lit.r}
	case opLiteralString:
		prefix = lit.runes
	default:
		return nil, nil, false
	}
	i++
	if i < len(re.subs) {
		suffix = concat(re.subs[i:], re.flags)
	} else {
		suffix = newNode(opEmptyMatch, re.flags)
	}
	return prefix, suffix, true
}
