package re2

// Simplification, as RE2 does it before compiling: runs like a*a+a become
// one counted repeat, counted repeats are written out with *, + and ?,
// empty classes become no-match. The walks have RE2's visit budget.

type walkBudget struct{ visits int }

func (w *walkBudget) visit() bool {
	w.visits--
	return w.visits >= 0
}

// simplify returns the simplified regexp, or nil when RE2's walk budget
// runs out (RE2 then fails to compile).
func simplify(re *node) *node {
	cw := &walkBudget{visits: maxWalkVisits}
	cre := coalesce(re, cw)
	if cw.visits < 0 {
		return nil
	}
	sw := &walkBudget{visits: maxWalkVisits}
	sre := simplifyNode(cre, sw)
	if sw.visits < 0 {
		return nil
	}
	return sre
}

func childrenChanged(re *node, kids []*node) bool {
	for i := range re.subs {
		if re.subs[i] != kids[i] {
			return true
		}
	}
	return false
}

// withKids copies re's kind (and repeat counts or capture index) over new
// children.
func withKids(re *node, kids []*node) *node {
	return &node{op: re.op, flags: re.flags, subs: kids, min: re.min, max: re.max, cap: re.cap}
}

func walkKids(re *node, w *walkBudget, f func(*node, *walkBudget) *node) []*node {
	kids := make([]*node, len(re.subs))
	for i, s := range re.subs {
		if i > 0 && s == re.subs[i-1] {
			kids[i] = kids[i-1] // RE2's walker reuses the result for a repeated child
			continue
		}
		kids[i] = f(s, w)
	}
	return kids
}

// coalesce merges runs of a repeated literal, class, any char or any byte
// with neighbouring repeats or occurrences of the same thing.
func coalesce(re *node, w *walkBudget) *node {
	if !w.visit() {
		return re
	}
	if len(re.subs) == 0 {
		return re
	}
	kids := walkKids(re, w, coalesce)
	if re.op != opConcat {
		if !childrenChanged(re, kids) {
			return re
		}
		return withKids(re, kids)
	}
	can := false
	for i := 0; i+1 < len(kids); i++ {
		if canCoalesce(kids[i], kids[i+1]) {
			can = true
			break
		}
	}
	if !can {
		if !childrenChanged(re, kids) {
			return re
		}
		return &node{op: re.op, flags: re.flags, subs: kids}
	}
	for i := 0; i+1 < len(kids); i++ {
		if canCoalesce(kids[i], kids[i+1]) {
			kids[i], kids[i+1] = doCoalesce(kids[i], kids[i+1])
		}
	}
	var out []*node
	for _, k := range kids {
		if k.op != opEmptyMatch {
			out = append(out, k)
		}
	}
	return &node{op: re.op, flags: re.flags, subs: out}
}

func isRepeatOp(o op) bool {
	return o == opStar || o == opPlus || o == opQuest || o == opRepeat
}

func canCoalesce(r1, r2 *node) bool {
	if !isRepeatOp(r1.op) {
		return false
	}
	s1 := r1.subs[0]
	switch s1.op {
	case opLiteral, opCharClass, opAnyChar, opAnyByte:
	default:
		return false
	}
	if isRepeatOp(r2.op) && equal(s1, r2.subs[0]) &&
		r1.flags&flagNonGreedy == r2.flags&flagNonGreedy {
		return true
	}
	if equal(s1, r2) {
		return true
	}
	return s1.op == opLiteral && r2.op == opLiteralString && r2.runes[0] == s1.r &&
		s1.flags&flagFoldCase == r2.flags&flagFoldCase
}

// doCoalesce merges r2 into the repeat r1; it returns the new pair (an
// empty match and the merged repeat, or the merged repeat and the rest of
// a literal string).
func doCoalesce(r1, r2 *node) (*node, *node) {
	nre := &node{op: opRepeat, flags: r1.flags, subs: []*node{r1.subs[0]}}
	switch r1.op {
	case opStar:
		nre.min, nre.max = 0, -1
	case opPlus:
		nre.min, nre.max = 1, -1
	case opQuest:
		nre.min, nre.max = 0, 1
	case opRepeat:
		nre.min, nre.max = r1.min, r1.max
	}
	switch r2.op {
	case opStar:
		nre.max = -1
	case opPlus:
		nre.min++
		nre.max = -1
	case opQuest:
		if nre.max != -1 {
			nre.max++
		}
	case opRepeat:
		nre.min += r2.min
		if r2.max == -1 {
			nre.max = -1
		} else if nre.max != -1 {
			nre.max += r2.max
		}
	case opLiteral, opCharClass, opAnyChar, opAnyByte:
		nre.min++
		if nre.max != -1 {
			nre.max++
		}
	case opLiteralString:
		r := r1.subs[0].r
		n := 1
		for n < len(r2.runes) && r2.runes[n] == r {
			n++
		}
		nre.min += n
		if nre.max != -1 {
			nre.max += n
		}
		if n < len(r2.runes) {
			return nre, newLiteralString(r2.runes[n:], r2.flags)
		}
	}
	return newNode(opEmptyMatch, 0), nre
}

func simplifyNode(re *node, w *walkBudget) *node {
	if !w.visit() {
		return re
	}
	switch re.op {
	case opConcat, opAlternate:
		kids := walkKids(re, w, simplifyNode)
		if !childrenChanged(re, kids) {
			return re
		}
		return &node{op: re.op, flags: re.flags, subs: kids}
	case opCapture:
		sub := simplifyNode(re.subs[0], w)
		if sub == re.subs[0] {
			return re
		}
		return &node{op: opCapture, flags: re.flags, subs: []*node{sub}, cap: re.cap}
	case opStar, opPlus, opQuest:
		sub := simplifyNode(re.subs[0], w)
		if sub.op == opEmptyMatch {
			return sub
		}
		if sub == re.subs[0] {
			return re
		}
		if re.op == sub.op && re.flags == sub.flags {
			return sub
		}
		return &node{op: re.op, flags: re.flags, subs: []*node{sub}}
	case opRepeat:
		sub := simplifyNode(re.subs[0], w)
		if sub.op == opEmptyMatch {
			return sub
		}
		return simplifyRepeat(sub, re.min, re.max, re.flags)
	case opCharClass:
		if re.cc.empty() {
			return newNode(opNoMatch, re.flags)
		}
		if re.cc.full() {
			return newNode(opAnyChar, re.flags)
		}
	}
	return re
}

func isEmptyOp(re *node) bool {
	switch re.op {
	case opBeginLine, opEndLine, opWordBoundary, opNoWordBoundary, opBeginText, opEndText:
		return true
	}
	return false
}

// simplifyRepeat writes re{min,max} with *, + and ?: x{2,5} is
// xx(x(x(x)?)?)?. The copies share one node, as in RE2.
func simplifyRepeat(re *node, lo, hi int, f parseFlags) *node {
	if isEmptyOp(re) || ((re.op == opConcat || re.op == opAlternate) && allEmptyOps(re.subs)) {
		lo = min(lo, 1)
		hi = min(hi, 1)
	}
	if hi == -1 {
		switch lo {
		case 0:
			return starPlusOrQuest(opStar, re, f)
		case 1:
			return starPlusOrQuest(opPlus, re, f)
		}
		subs := make([]*node, lo)
		for i := 0; i < lo-1; i++ {
			subs[i] = re
		}
		subs[lo-1] = starPlusOrQuest(opPlus, re, f)
		return concat(subs, f)
	}
	if lo == 0 && hi == 0 {
		return newNode(opEmptyMatch, f)
	}
	if lo == 1 && hi == 1 {
		return re
	}
	var nre *node
	if lo > 0 {
		subs := make([]*node, lo)
		for i := range subs {
			subs[i] = re
		}
		nre = concat(subs, f)
	}
	if hi > lo {
		suf := starPlusOrQuest(opQuest, re, f)
		for i := lo + 1; i < hi; i++ {
			suf = starPlusOrQuest(opQuest, &node{op: opConcat, flags: f, subs: []*node{re, suf}}, f)
		}
		if nre == nil {
			nre = suf
		} else {
			nre = &node{op: opConcat, flags: f, subs: []*node{nre, suf}}
		}
	}
	if nre == nil {
		return newNode(opNoMatch, f)
	}
	return nre
}

func allEmptyOps(subs []*node) bool {
	for _, s := range subs {
		if !isEmptyOp(s) {
			return false
		}
	}
	return true
}
