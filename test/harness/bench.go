package harness

import (
	"slices"
	"time"
)

// Percentile returns the p-th percentile of d (nearest rank).
func Percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// Ms is d in milliseconds, for benchmark tables.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
