package re2

import "slices"

// prog is a compiled program before RE2's Optimize and Flatten, which
// change its size: Flatten drops every Alt and Nop, copies the
// instructions reachable from each "root" into a list, and adds a Nop
// wherever a list reaches another root. ProgramSize is that flat size.
type prog struct {
	inst            []inst
	start           uint32
	startUnanchored uint32
}

// workq is an insertion-ordered set of instruction ids that grows while
// it is iterated; id 0 (fail) is never added.
type workq struct {
	seen  []bool
	order []uint32
}

func newWorkq(n int) *workq { return &workq{seen: make([]bool, n)} }

func (q *workq) add(id uint32) {
	if id == 0 || q.seen[id] {
		return
	}
	q.seen[id] = true
	q.order = append(q.order, id)
}

// optimize skips Nops reachable from the anchored start and marks the
// Alt of a greedy or lazy .* loop that ends in a match as AltMatch.
func (p *prog) optimize() {
	skipNops := func(j uint32) uint32 {
		for j != 0 && p.inst[j].op == instNop {
			j = p.inst[j].out
		}
		return j
	}
	q := newWorkq(len(p.inst))
	q.add(p.start)
	for i := 0; i < len(q.order); i++ {
		ip := &p.inst[q.order[i]]
		ip.out = skipNops(ip.out)
		q.add(ip.out)
		if ip.op == instAlt {
			ip.out1 = skipNops(ip.out1)
			q.add(ip.out1)
		}
	}

	q = newWorkq(len(p.inst))
	q.add(p.start)
	for i := 0; i < len(q.order); i++ {
		id := q.order[i]
		ip := &p.inst[id]
		q.add(ip.out)
		if ip.op != instAlt {
			continue
		}
		q.add(ip.out1)
		j, k := &p.inst[ip.out], &p.inst[ip.out1]
		if j.op == instByteRange && j.out == id && j.lo == 0x00 && j.hi == 0xFF && p.isMatch(ip.out1) {
			ip.op = instAltMatch
			continue
		}
		if p.isMatch(ip.out) && k.op == instByteRange && k.out == id && k.lo == 0x00 && k.hi == 0xFF {
			ip.op = instAltMatch
		}
	}
}

// isMatch reports whether id is a match, perhaps after captures and nops.
func (p *prog) isMatch(id uint32) bool {
	for {
		switch p.inst[id].op {
		case instCapture, instNop:
			id = p.inst[id].out
		case instMatch:
			return true
		default:
			return false
		}
	}
}

// flattener holds Flatten's bookkeeping, indexed by instruction id.
type flattener struct {
	p      *prog
	isRoot []bool
	roots  []uint32   // in the order they were found
	preds  [][]uint32 // the Alts leading to each instruction
	// seen marks instructions visited by the current walk: seen[id] ==
	// stamp, a new stamp per walk.
	seen  []uint32
	stamp uint32
	stk   []uint32
}

func (f *flattener) addRoot(id uint32) {
	if !f.isRoot[id] {
		f.isRoot[id] = true
		f.roots = append(f.roots, id)
	}
}

// visit marks id as seen by the current walk and reports whether it is new.
func (f *flattener) visit(id uint32) bool {
	if f.seen[id] == f.stamp {
		return false
	}
	f.seen[id] = f.stamp
	return true
}

func (f *flattener) newWalk(start uint32) {
	f.stamp++
	f.stk = append(f.stk[:0], start)
}

func (f *flattener) pop() uint32 {
	id := f.stk[len(f.stk)-1]
	f.stk = f.stk[:len(f.stk)-1]
	return id
}

// flattenedSize returns the number of instructions RE2's Flatten emits.
func (p *prog) flattenedSize() int {
	n := len(p.inst)
	f := &flattener{p: p, isRoot: make([]bool, n), preds: make([][]uint32, n), seen: make([]uint32, n)}
	f.markSuccessors()

	// Dominator roots: each root, from the highest id down (but not the
	// fail instruction, the start or the unanchored start), may promote
	// instructions that are also reached from elsewhere.
	sorted := append([]uint32(nil), f.roots...)
	slices.Sort(sorted)
	for i := len(sorted) - 1; i > 0; i-- {
		if id := sorted[i]; id != p.startUnanchored && id != p.start {
			f.markDominator(id)
		}
	}

	size := 0
	for _, root := range f.roots {
		size += f.listSize(root)
	}
	return size
}

// markSuccessors finds the first roots: the fail instruction, both
// starts, and whatever a byte range, capture or empty-width assertion
// leads to. It records every Alt as a predecessor of its two exits.
func (f *flattener) markSuccessors() {
	p := f.p
	f.addRoot(0)
	f.addRoot(p.startUnanchored)
	f.addRoot(p.start)
	f.newWalk(p.startUnanchored)
	for len(f.stk) > 0 {
		id := f.pop()
		for f.visit(id) {
			ip := &p.inst[id]
			switch ip.op {
			case instAlt, instAltMatch:
				f.preds[ip.out] = append(f.preds[ip.out], id)
				f.preds[ip.out1] = append(f.preds[ip.out1], id)
				f.stk = append(f.stk, ip.out1)
				id = ip.out
				continue
			case instByteRange, instCapture, instEmptyWidth:
				f.addRoot(ip.out)
				id = ip.out
				continue
			case instNop:
				id = ip.out
				continue
			}
			break
		}
	}
}

// markDominator walks the epsilon closure of root (stopping at other
// roots); anything in it with a predecessor outside it becomes a root.
func (f *flattener) markDominator(root uint32) {
	p := f.p
	var reached []uint32
	f.newWalk(root)
	for len(f.stk) > 0 {
		id := f.pop()
		for f.visit(id) {
			reached = append(reached, id)
			if id != root && f.isRoot[id] {
				break
			}
			ip := &p.inst[id]
			if ip.op == instAlt || ip.op == instAltMatch {
				f.stk = append(f.stk, ip.out1)
				id = ip.out
				continue
			}
			if ip.op == instNop {
				id = ip.out
				continue
			}
			break
		}
	}
	for _, id := range reached {
		for _, pred := range f.preds[id] {
			if f.seen[pred] != f.stamp {
				f.addRoot(id)
			}
		}
	}
}

// listSize counts the instructions Flatten emits for root's list.
func (f *flattener) listSize(root uint32) int {
	p := f.p
	n := 0
	f.newWalk(root)
	for len(f.stk) > 0 {
		id := f.pop()
		for f.visit(id) {
			if id != root && f.isRoot[id] {
				n++ // a Nop to the other root's list
				break
			}
			ip := &p.inst[id]
			switch ip.op {
			case instAltMatch:
				n++
				fallthrough
			case instAlt:
				f.stk = append(f.stk, ip.out1)
				id = ip.out
				continue
			case instNop:
				id = ip.out
				continue
			}
			n++ // byte range, capture, empty width, match or fail
			break
		}
	}
	return n
}
