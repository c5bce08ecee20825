package re2

import (
	"fmt"
	"strings"
)

// Alternation returns the usual builder for SplitAlternatives:
// (?:a|b|c), or (?i)(?:a|b|c) when caseInsensitive.
func Alternation(caseInsensitive bool) func(alternatives []string) string {
	return func(alternatives []string) string {
		re := "(?:" + strings.Join(alternatives, "|") + ")"
		if caseInsensitive {
			re = "(?i)" + re
		}
		return re
	}
}

// AlternativeError reports an alternative that cannot be emitted even
// alone: RE2 refuses build([]string{alternative}), or its program is
// bigger than MaxProgramSize.
type AlternativeError struct {
	Index       int    // position in the list
	Alternative string // the alternative as given
	Regex       string // what build made of it
	Size        int    // its program size, when RE2 accepts it
	Err         error  // RE2's refusal, or nil when it is only too big
}

func (e *AlternativeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("alternative %d %q: %v", e.Index, e.Alternative, e.Err)
	}
	return fmt.Sprintf("alternative %d %q: RE2 program size %d exceeds %d even alone",
		e.Index, e.Alternative, e.Size, MaxProgramSize)
}

func (e *AlternativeError) Unwrap() error { return e.Err }

// splitLookahead bounds how far a group is grown past the size limit.
// RE2's program can shrink when an alternative is added (b joins a|c into
// the single range [a-c]), so a group that is too big may fit again one
// alternative later; past twice the limit it no longer can in practice.
const splitLookahead = 2 * MaxProgramSize

// SplitAlternatives splits alternatives, in order, into the fewest
// consecutive groups such that build(group) has an RE2 program size of at
// most MaxProgramSize, as check measures it: Check for the newest Envoy
// (nil means Check), CheckAll for a fleet of several Envoy versions.
// build must make the regex the caller really emits, wrapper and flags
// included; see Alternation. Among equally short splits it returns the one
// whose earlier groups are longest, so the result depends only on the
// input.
//
// An alternative that does not fit even alone is reported as an
// *AlternativeError; so is a group check refuses although its members
// pass alone (an alternative that breaks out of the wrapper).
func SplitAlternatives(alternatives []string, build func(alternatives []string) string,
	check func(expr string) (programSize int, err error)) ([][]string, error) {
	if check == nil {
		check = Check
	}
	n := len(alternatives)
	if n == 0 {
		return nil, nil
	}
	for i, a := range alternatives {
		re := build([]string{a})
		size, err := check(re)
		if err != nil || size > MaxProgramSize {
			return nil, &AlternativeError{Index: i, Alternative: a, Regex: re, Size: size, Err: err}
		}
	}
	// fits[i] lists every end j (exclusive) for which alternatives[i:j]
	// fits, in increasing order.
	fits := make([][]int, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j <= n; j++ {
			re := build(alternatives[i:j])
			size, err := check(re)
			if err != nil {
				return nil, &AlternativeError{Index: j - 1, Alternative: alternatives[j-1], Regex: re, Err: err}
			}
			if size <= MaxProgramSize {
				fits[i] = append(fits[i], j)
			} else if size > splitLookahead {
				break
			}
		}
	}
	// groups[i] is the fewest groups for alternatives[i:]; next[i] the
	// end of the first of them, the longest among the optimal choices.
	groups := make([]int, n+1)
	next := make([]int, n+1)
	for i := n - 1; i >= 0; i-- {
		groups[i] = n + 1
		for _, j := range fits[i] {
			if g := groups[j] + 1; g <= groups[i] {
				groups[i], next[i] = g, j
			}
		}
	}
	var out [][]string
	for i := 0; i < n; i = next[i] {
		out = append(out, append([]string(nil), alternatives[i:next[i]]...))
	}
	return out, nil
}
