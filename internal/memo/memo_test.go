package memo

import "testing"

// A cache never holds more than its bound, and still answers what it
// holds: a document of a million distinct values can't exhaust memory.
func TestCacheIsBounded(t *testing.T) {
	c := New[int, int](100)
	calls := 0
	for i := range 10000 {
		if got := c.Do(i, func() int { calls++; return i * 2 }); got != i*2 {
			t.Fatalf("Do(%d) = %d", i, got)
		}
	}
	if c.Len() != 100 {
		t.Fatalf("cache holds %d entries, bound 100", c.Len())
	}
	if calls != 10000 {
		t.Fatalf("computed %d times for 10000 distinct keys", calls)
	}
	// The last key is held: asking again computes nothing.
	c.Do(9999, func() int { calls++; return 0 })
	if calls != 10000 {
		t.Fatal("a held key was computed again")
	}
}
