// Package suggest finds the likely intended word for a typo.
package suggest

// Closest returns the candidate closest to s, ignoring case, when it is
// close enough to be a likely typo, or "": the hint behind "did you mean
// …?".
func Closest(s string, candidates []string) string {
	return NewSet(candidates).Closest(s)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// distance is the Damerau–Levenshtein (optimal string alignment) distance,
// so a swap of two letters ("gizp") counts as one edit; once every entry
// of a row reaches bound, bound is returned (the distance is at least
// that).
func distance(ra, rb []rune, bound int) int {
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		// A swap reads two rows back, so stop only when two rows are
		// past the bound.
		if rowMin >= bound && i > 1 && minOf(prev) >= bound {
			return bound
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

func minOf(row []int) int {
	m := row[0]
	for _, v := range row[1:] {
		m = min(m, v)
	}
	return m
}
