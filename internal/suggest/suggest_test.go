package suggest

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestClosest(t *testing.T) {
	keys := []string{"gzip", "brotli", "proxy-body-size", "proxy-connect-timeout", "worker-processes", "tracing"}
	for in, want := range map[string]string{
		"gizp": "gzip", "GZIP": "gzip", "proxy-bodysize": "proxy-body-size", "worker-proccesses": "worker-processes",
		"proxy-conect-timeout": "proxy-connect-timeout", "compression": "", "x": "", "tarcing": "tracing",
	} {
		if got := Closest(in, keys); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

// naive is Closest without the length filter and the row cutoff.
func naive(s string, candidates []string) string {
	limit := min(max(len(s)/3, 1), 3)
	best, bestDist := "", -1
	for _, c := range candidates {
		d := distance([]rune(strings.ToLower(s)), []rune(strings.ToLower(c)), 1<<30)
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist >= 0 && bestDist <= limit {
		return best
	}
	return ""
}

// The shortcuts change no answer: random near-misses of random words.
func TestClosestAsNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abcde-"[r.IntN(6)]
		}
		return string(b)
	}
	var words []string
	for range 200 {
		words = append(words, word(2+r.IntN(12)))
	}
	for range 5000 {
		w := []byte(words[r.IntN(len(words))])
		for range r.IntN(4) {
			if len(w) > 1 {
				i := r.IntN(len(w) - 1)
				switch r.IntN(3) {
				case 0:
					w[i], w[i+1] = w[i+1], w[i]
				case 1:
					w = append(w[:i], w[i+1:]...)
				default:
					w[i] = "abcde-"[r.IntN(6)]
				}
			}
		}
		s := string(w)
		got, want := Closest(s, words), naive(s, words)
		if got != want && distance([]rune(s), []rune(got), 1<<30) != distance([]rune(s), []rune(want), 1<<30) {
			t.Fatalf("Closest(%q) = %q, the naive search %q", s, got, want)
		}
	}
}
