package out

import (
	"fmt"
	"unicode/utf8"

	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// CheckUTF8 refuses input that is not UTF-8, naming the line and column
// (in bytes, from 1) of the first byte that isn't.
func CheckUTF8(data []byte) error {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("line %d, column %d: not UTF-8 (byte 0x%02x); a ConfigMap holds UTF-8 text only", line, col, data[i])
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col += size
		}
		i += size
	}
	return nil
}

// Limits of a refusal's problems: a key's value may be a megabyte long,
// and a list may hold thousands of bad entries.
const (
	// MaxMessage bounds one problem's message.
	MaxMessage = 300
	// MaxPerPath bounds the problems reported for one path; the rest are
	// counted.
	MaxPerPath = 10
)

// Bound returns err with every message cut to MaxMessage bytes and at most
// MaxPerPath problems a path, the others counted in one more; nil stays
// nil.
func Bound(err error) error {
	if err == nil {
		return nil
	}
	problems := fielderr.Flatten(err)
	var out fielderr.List
	count := map[string]int{}
	for _, p := range problems {
		count[p.Path]++
		if count[p.Path] > MaxPerPath {
			continue
		}
		out.Addf(p.Path, "%s", Cut(p.Msg, MaxMessage))
	}
	for _, p := range problems {
		if n := count[p.Path]; n > MaxPerPath {
			out.Addf(p.Path, "and %d more problems", n-MaxPerPath)
			count[p.Path] = 0
		}
	}
	return out.Err()
}

// Cut is s cut to at most n bytes on a rune boundary, with "…" and the
// length left out when cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutAt(s, n, len(s))
}

// cutAt is Cut of a string of total bytes whose first bytes, more than n
// of them, are s.
func cutAt(s string, n, total int) string {
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return fmt.Sprintf("%s… (%d bytes more)", s[:i], total-i)
}
