package document

import "github.com/globalconfig/globalconfig/internal/suggest"

// Suggest returns the candidate closest to s by edit distance, or "" when
// none is close enough: the hint behind "did you mean …?".
func Suggest(s string, candidates []string) string { return suggest.Closest(s, candidates) }
