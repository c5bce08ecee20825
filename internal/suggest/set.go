package suggest

import (
	"strings"
	"unicode/utf8"
)

// Set is a list of candidates made ready for many lookups: each is
// lowered and split into runes once, not once per lookup. A converter
// suggests a key for each of thousands of unknown keys against the same
// few hundred known ones.
type Set struct {
	words []string
	lower [][]rune
	// bags are the lowered candidates' letter counts, nil for one that is
	// not ASCII.
	bags [][]letterCount
}

// letterCount is how many times a letter occurs in a word.
type letterCount struct {
	letter byte
	n      int32
}

// NewSet prepares candidates for Closest.
func NewSet(candidates []string) *Set {
	s := &Set{words: candidates, lower: make([][]rune, len(candidates)), bags: make([][]letterCount, len(candidates))}
	for i, c := range candidates {
		s.lower[i] = []rune(strings.ToLower(c))
		s.bags[i] = bagOf(s.lower[i])
	}
	return s
}

// bagOf counts the letters of an ASCII word, or is nil.
func bagOf(rs []rune) []letterCount {
	if !isASCII(rs) {
		return nil
	}
	var counts [utf8.RuneSelf]int32
	var bag []letterCount
	for _, r := range rs {
		if counts[r] == 0 {
			bag = append(bag, letterCount{letter: byte(r)})
		}
		counts[r]++
	}
	for i := range bag {
		bag[i].n = counts[bag[i].letter]
	}
	return bag
}

// Closest is the package's Closest over the set's candidates.
func (set *Set) Closest(s string) string {
	// Allow about one edit in three characters, at least one and at most three.
	limit := min(max(len(s)/3, 1), 3)
	ls := []rune(strings.ToLower(s))
	ascii := isASCII(ls)
	var counts [utf8.RuneSelf]int32
	if ascii {
		for _, r := range ls {
			counts[r]++
		}
	}
	best, bestDist := "", limit+1
	for i, lc := range set.lower {
		// A length apart by more than the limit is that many edits at
		// least, and so is a bag of letters apart: not worth the table.
		if abs(len(lc)-len(ls)) >= bestDist || (ascii && set.bags[i] != nil && bagDistance(&counts, len(ls), set.bags[i], len(lc)) >= bestDist) {
			continue
		}
		if d := distance(ls, lc, bestDist); d < bestDist {
			best, bestDist = set.words[i], d
		}
	}
	return best
}

func isASCII(rs []rune) bool {
	for _, r := range rs {
		if r >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// bagDistance is a lower bound of the distance between a word of la
// letters counted in a and one of lb letters counted in b: the larger
// count of letters one has and the other lacks (a swap changes no count,
// every other edit at most one on each side). With the letters both
// share, more+fewer = la+lb-2·shared and more-fewer = la-lb.
func bagDistance(a *[utf8.RuneSelf]int32, la int, b []letterCount, lb int) int {
	shared := 0
	for _, c := range b {
		shared += int(min(a[c.letter], c.n))
	}
	return (la + lb - 2*shared + abs(la-lb)) / 2
}
