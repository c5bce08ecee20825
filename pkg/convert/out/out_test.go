package out

import (
	"fmt"
	"strings"
	"testing"
)

// ShownList is Cut of Shown, however long the list and wherever the cut
// falls (inside a value, on a separator, on a multi-byte rune, at the
// closing bracket).
func TestShownListIsCutShown(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 50} {
		for _, value := range []string{"a", "text/html", "é", "ab£"} {
			var values []string
			for i := range n {
				values = append(values, fmt.Sprintf("%s%d", value, i))
			}
			list := List(values)
			full := Shown(list)
			for max := 0; max <= len(full)+2; max++ {
				if got, want := ShownList(list, max), Cut(full, max); got != want {
					t.Fatalf("%d values of %q, max %d: got %q, want %q", n, value, max, got, want)
				}
			}
		}
	}
	if got := ShownList(Str(strings.Repeat("x", 400)), 10); len(got) != 400 {
		t.Errorf("a scalar was cut: %q", got)
	}
}
