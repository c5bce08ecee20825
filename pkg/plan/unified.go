package plan

import (
	"fmt"
	"strings"
)

// Context is the number of unchanged lines a hunk shows around a change,
// as diff -u and kubectl diff do.
const Context = 3

// maxEdits bounds the edit distance the line diff searches for a shortest
// script; past it the differing middle is shown as removed and added
// whole. Two EnvoyFilters that far apart share little anyway.
const maxEdits = 1000

// opKind is one line of an edit script.
type opKind byte

const (
	opEqual  opKind = ' '
	opDelete opKind = '-'
	opInsert opKind = '+'
)

type op struct {
	kind opKind
	// a and b are the line's indexes in the old and the new text; a is
	// meaningless for an insert, b for a delete.
	a, b int
}

// Unified is the unified diff (diff -u) from text a, named aName, to text
// b, named bName, with Context lines of context; "" when they are equal.
func Unified(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	al, bl := splitLines(a), splitLines(b)
	ops := lineDiff(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	for _, h := range hunks(ops, Context) {
		writeHunk(&out, ops[h[0]:h[1]], al, bl)
	}
	return out.String()
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// lineDiff returns a shortest edit script from a to b (Myers' algorithm,
// after trimming the common prefix and suffix); deletes come before the
// inserts they pair with.
func lineDiff(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]op, 0, len(a)+len(b))
	for i := 0; i < pre; i++ {
		ops = append(ops, op{opEqual, i, i})
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf], pre, pre)...)
	for i := suf; i > 0; i-- {
		ops = append(ops, op{opEqual, len(a) - i, len(b) - i})
	}
	return ops
}

// myers diffs a and b, whose first lines are line offA and offB of the
// whole texts.
func myers(a, b []string, offA, offB int) []op {
	n, m := len(a), len(b)
	total := n + m
	if total == 0 {
		return nil
	}
	// trace[d] is the furthest x on each diagonal k (index k+d) after d
	// edits.
	var trace [][]int
	var prev []int
	found := -1
	for d := 0; d <= total && d <= maxEdits; d++ {
		v := make([]int, 2*d+1)
		for k := -d; k <= d; k += 2 {
			var x int
			switch {
			case d == 0:
				x = 0
			case k == -d || (k != d && at(prev, d-1, k-1) < at(prev, d-1, k+1)):
				x = at(prev, d-1, k+1) // down: an insert
			default:
				x = at(prev, d-1, k-1) + 1 // right: a delete
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+d] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
		trace = append(trace, v)
		prev = v
		if found >= 0 {
			break
		}
	}
	if found < 0 {
		// Too far apart: all of a out, all of b in.
		ops := make([]op, 0, n+m)
		for i := range a {
			ops = append(ops, op{opDelete, offA + i, offB})
		}
		for j := range b {
			ops = append(ops, op{opInsert, offA + n, offB + j})
		}
		return ops
	}
	// Walk back from (n, m), collecting the script in reverse.
	var rev []op
	x, y := n, m
	for d := found; d > 0; d-- {
		k := x - y
		var prevK int
		if k == -d || (k != d && at(trace[d-1], d-1, k-1) < at(trace[d-1], d-1, k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(trace[d-1], d-1, prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x, y = x-1, y-1
			rev = append(rev, op{opEqual, offA + x, offB + y})
		}
		if x == prevX {
			y--
			rev = append(rev, op{opInsert, offA + x, offB + y})
		} else {
			x--
			rev = append(rev, op{opDelete, offA + x, offB + y})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, op{opEqual, offA + x, offB + y})
	}
	ops := make([]op, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return deletesFirst(ops)
}

// at reads diagonal k of the V array of step d.
func at(v []int, d, k int) int { return v[k+d] }

// deletesFirst moves, within each run of changed lines, the deletes
// before the inserts, as diff -u prints them.
func deletesFirst(ops []op) []op {
	for i := 0; i < len(ops); {
		if ops[i].kind == opEqual {
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].kind != opEqual {
			j++
		}
		run := make([]op, 0, j-i)
		for _, o := range ops[i:j] {
			if o.kind == opDelete {
				run = append(run, o)
			}
		}
		for _, o := range ops[i:j] {
			if o.kind == opInsert {
				run = append(run, o)
			}
		}
		copy(ops[i:j], run)
		i = j
	}
	return ops
}

// hunks groups the changes of ops with ctx lines of context each side,
// merging changes closer than 2*ctx lines; each hunk is [start, end) of
// ops.
func hunks(ops []op, ctx int) [][2]int {
	var out [][2]int
	for i := 0; i < len(ops); i++ {
		if ops[i].kind == opEqual {
			continue
		}
		start := max(i-ctx, 0)
		// Extend over changes until a run of more than 2*ctx equal lines.
		end := i
		for j := i; j < len(ops); {
			if ops[j].kind != opEqual {
				end = j + 1
				j++
				continue
			}
			run := j
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run == len(ops) || run-j > 2*ctx {
				break
			}
			j = run
		}
		end = min(end+ctx, len(ops))
		if n := len(out); n > 0 && start <= out[n-1][1] {
			out[n-1][1] = end // overlapping context (cannot happen, kept safe)
		} else {
			out = append(out, [2]int{start, end})
		}
		i = end - 1
	}
	return out
}

// writeHunk writes one hunk: its @@ header and lines.
func writeHunk(w *strings.Builder, ops []op, a, b []string) {
	aStart, bStart, aCount, bCount := -1, -1, 0, 0
	for _, o := range ops {
		if o.kind != opInsert {
			if aStart < 0 {
				aStart = o.a
			}
			aCount++
		}
		if o.kind != opDelete {
			if bStart < 0 {
				bStart = o.b
			}
			bCount++
		}
	}
	if aStart < 0 {
		aStart = ops[0].a
	}
	if bStart < 0 {
		bStart = ops[0].b
	}
	fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aCount), hunkRange(bStart, bCount))
	for _, o := range ops {
		line := ""
		switch o.kind {
		case opDelete:
			line = a[o.a]
		default:
			line = b[o.b]
		}
		w.WriteByte(byte(o.kind))
		w.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange is one side of a hunk header, as GNU diff writes it: "l,n",
// just "l" for one line, and the line before for none.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
