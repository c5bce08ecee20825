// Package suggest finds the likely intended word for a typo.
package suggest

import "strings"

// Closest returns the candidate closest to s, ignoring case, when it is
// close enough to be a likely typo, or "": the hint behind "did you mean
// …?".
func Closest(s string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := distance(strings.ToLower(s), strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	// Allow about one edit in three characters, at least one and at most three.
	limit := min(max(len(s)/3, 1), 3)
	if bestDist >= 0 && bestDist <= limit {
		return best
	}
	return ""
}

// distance is the Damerau–Levenshtein (optimal string alignment) distance,
// so a swap of two letters ("gizp") counts as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
