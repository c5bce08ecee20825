package plan

import (
	"math/rand"
	"strings"
	"testing"
)

func TestUnifiedEqual(t *testing.T) {
	if d := Unified("a", "b", "x\ny\n", "x\ny\n"); d != "" {
		t.Errorf("equal texts diff to %q", d)
	}
}

func TestUnifiedGolden(t *testing.T) {
	lines := func(n int, change map[int]string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if s, ok := change[i]; ok {
				if s != "" {
					b.WriteString(s + "\n")
				}
				continue
			}
			b.WriteString("line" + string(rune('a'+i-1)) + "\n")
		}
		return b.String()
	}
	cases := []struct {
		name, a, b, want string
	}{
		{
			name: "one changed line in the middle",
			a:    lines(10, nil),
			b:    lines(10, map[int]string{5: "LINE E"}),
			want: `--- live/x
+++ file/x
@@ -2,7 +2,7 @@
 lineb
 linec
 lined
-linee
+LINE E
 linef
 lineg
 lineh
`,
		},
		{
			name: "two changes far apart are two hunks",
			a:    lines(20, nil),
			b:    lines(20, map[int]string{2: "B", 18: "R"}),
			want: `--- live/x
+++ file/x
@@ -1,5 +1,5 @@
 linea
-lineb
+B
 linec
 lined
 linee
@@ -15,6 +15,6 @@
 lineo
 linep
 lineq
-liner
+R
 lines
 linet
`,
		},
		{
			name: "changes six lines apart share a hunk",
			a:    lines(12, nil),
			b:    lines(12, map[int]string{2: "B", 9: "I"}),
			want: `--- live/x
+++ file/x
@@ -1,12 +1,12 @@
 linea
-lineb
+B
 linec
 lined
 linee
 linef
 lineg
 lineh
-linei
+I
 linej
 linek
 linel
`,
		},
		{
			name: "a line removed",
			a:    lines(5, nil),
			b:    lines(5, map[int]string{1: ""}),
			want: `--- live/x
+++ file/x
@@ -1,4 +1,3 @@
-linea
 lineb
 linec
 lined
`,
		},
		{
			name: "created",
			a:    "",
			b:    "a\nb\n",
			want: `--- live/x
+++ file/x
@@ -0,0 +1,2 @@
+a
+b
`,
		},
		{
			name: "deleted",
			a:    "a\n",
			b:    "",
			want: `--- live/x
+++ file/x
@@ -1 +0,0 @@
-a
`,
		},
		{
			name: "no newline at the end",
			a:    "a\nb",
			b:    "a\nc\n",
			want: `--- live/x
+++ file/x
@@ -1,2 +1,2 @@
 a
-b
\ No newline at end of file
+c
`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Unified("live/x", "file/x", c.a, c.b); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// lcs is the length of the longest common subsequence, by dynamic
// programming: a shortest script deletes and inserts everything else.
func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

// The script rebuilds both texts and is as short as any.
func TestLineDiffRandom(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	gen := func() []string {
		n := r.Intn(30)
		out := make([]string, n)
		for i := range out {
			out[i] = string(rune('a' + r.Intn(4)))
		}
		return out
	}
	for i := 0; i < 2000; i++ {
		a, b := gen(), gen()
		ops := lineDiff(a, b)
		var gotA, gotB []string
		edits := 0
		for _, o := range ops {
			switch o.kind {
			case opEqual:
				if a[o.a] != b[o.b] {
					t.Fatalf("equal op on different lines %q %q", a[o.a], b[o.b])
				}
				gotA, gotB = append(gotA, a[o.a]), append(gotB, b[o.b])
			case opDelete:
				gotA = append(gotA, a[o.a])
				edits++
			case opInsert:
				gotB = append(gotB, b[o.b])
				edits++
			}
		}
		if strings.Join(gotA, "") != strings.Join(a, "") || strings.Join(gotB, "") != strings.Join(b, "") {
			t.Fatalf("script does not rebuild the texts: %v %v", a, b)
		}
		if want := len(a) + len(b) - 2*lcs(a, b); edits != want {
			t.Fatalf("%d edits for %v → %v, shortest is %d", edits, a, b, want)
		}
	}
}

// Far apart texts fall back to replacing the middle whole, still a
// correct diff.
func TestLineDiffFallback(t *testing.T) {
	var a, b []string
	for i := 0; i < maxEdits; i++ {
		a = append(a, "a"+strings.Repeat("x", i%7)+"\n")
		b = append(b, "b"+strings.Repeat("y", i%5)+"\n")
	}
	a = append([]string{"same\n"}, a...)
	b = append([]string{"same\n"}, b...)
	ops := lineDiff(a, b)
	if len(ops) != 1+2*maxEdits || ops[0].kind != opEqual || ops[1].kind != opDelete || ops[len(ops)-1].kind != opInsert {
		t.Fatalf("unexpected fallback script of %d ops", len(ops))
	}
}
