package re2

import "unicode/utf8"

// The compiler turns a simplified regexp into RE2's instruction list,
// instruction for instruction, so that the flattened program has exactly
// RE2's size. Instruction 0 is always the fail instruction.

type instOp uint8

const (
	instAlt instOp = iota
	instAltMatch
	instByteRange
	instCapture
	instEmptyWidth
	instMatch
	instNop
	instFail
)

type inst struct {
	op       instOp
	out      uint32
	out1     uint32 // instAlt, instAltMatch
	lo, hi   byte   // instByteRange
	foldcase bool   // instByteRange
}

// patchList is a list of instruction exits still to be filled in, threaded
// through the exits themselves: entry e means inst[e>>1].out (e&1 == 0) or
// inst[e>>1].out1 (e&1 == 1). 0 is the empty list (instruction 0 is the
// fail instruction, which never has an exit to patch).
type patchList struct{ head, tail uint32 }

func mkPatch(p uint32) patchList { return patchList{p, p} }

func (c *compiler) patch(l patchList, to uint32) {
	for l.head != 0 {
		ip := &c.inst[l.head>>1]
		if l.head&1 != 0 {
			l.head = ip.out1
			ip.out1 = to
		} else {
			l.head = ip.out
			ip.out = to
		}
	}
}

func (c *compiler) appendPatch(l1, l2 patchList) patchList {
	if l1.head == 0 {
		return l2
	}
	if l2.head == 0 {
		return l1
	}
	ip := &c.inst[l1.tail>>1]
	if l1.tail&1 != 0 {
		ip.out1 = l2.head
	} else {
		ip.out = l2.head
	}
	return patchList{l1.head, l2.tail}
}

// frag is a compiled fragment: its entry, its open exits, and whether it
// can match the empty string. begin 0 means "matches nothing".
type frag struct {
	begin    uint32
	end      patchList
	nullable bool
}

type compiler struct {
	inst     []inst
	maxInst  int
	failed   bool
	latin1   bool
	visits   int // RE2's exponential walk budget: 2 * maxInst
	anchored bool

	runeCache map[uint64]uint32
	runeRange frag
}

func (c *compiler) alloc(n int) (uint32, bool) {
	if c.failed || len(c.inst)+n > c.maxInst {
		c.failed = true
		return 0, false
	}
	id := uint32(len(c.inst))
	if len(c.inst)+n > cap(c.inst) {
		// Double, as RE2 does: big programs grow one instruction at a time.
		grown := make([]inst, len(c.inst), max(8, 2*cap(c.inst), len(c.inst)+n))
		copy(grown, c.inst)
		c.inst = grown
	}
	c.inst = c.inst[:len(c.inst)+n]
	clear(c.inst[id:])
	return id, true
}

func isNoMatch(f frag) bool { return f.begin == 0 }

func (c *compiler) cat(a, b frag) frag {
	if isNoMatch(a) || isNoMatch(b) {
		return frag{}
	}
	// Elide a leading no-op.
	if bi := &c.inst[a.begin]; bi.op == instNop && a.end.head == a.begin<<1 && bi.out == 0 {
		c.patch(a.end, b.begin)
		return b
	}
	c.patch(a.end, b.begin)
	return frag{a.begin, b.end, a.nullable && b.nullable}
}

func (c *compiler) alt(a, b frag) frag {
	if isNoMatch(a) {
		return b
	}
	if isNoMatch(b) {
		return a
	}
	id, ok := c.alloc(1)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instAlt, out: a.begin, out1: b.begin}
	return frag{id, c.appendPatch(a.end, b.end), a.nullable || b.nullable}
}

// loop builds the Alt of a star, plus or quest: greedy tries the body
// first (out), non-greedy tries the exit first.
func (c *compiler) loopAlt(body uint32, nongreedy bool) (uint32, patchList, bool) {
	id, ok := c.alloc(1)
	if !ok {
		return 0, patchList{}, false
	}
	if nongreedy {
		c.inst[id] = inst{op: instAlt, out1: body}
		return id, mkPatch(id << 1), true
	}
	c.inst[id] = inst{op: instAlt, out: body}
	return id, mkPatch(id<<1 | 1), true
}

func (c *compiler) plus(a frag, nongreedy bool) frag {
	id, pl, ok := c.loopAlt(a.begin, nongreedy)
	if !ok {
		return frag{}
	}
	c.patch(a.end, id)
	return frag{a.begin, pl, a.nullable}
}

func (c *compiler) star(a frag, nongreedy bool) frag {
	// A nullable body needs (a+)? to keep the priorities right.
	if a.nullable {
		return c.quest(c.plus(a, nongreedy), nongreedy)
	}
	id, pl, ok := c.loopAlt(a.begin, nongreedy)
	if !ok {
		return frag{}
	}
	c.patch(a.end, id)
	return frag{id, pl, true}
}

func (c *compiler) quest(a frag, nongreedy bool) frag {
	if isNoMatch(a) {
		return c.nop()
	}
	id, pl, ok := c.loopAlt(a.begin, nongreedy)
	if !ok {
		return frag{}
	}
	return frag{id, c.appendPatch(pl, a.end), true}
}

func (c *compiler) byteRange(lo, hi byte, foldcase bool) frag {
	id, ok := c.alloc(1)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instByteRange, lo: lo, hi: hi, foldcase: foldcase}
	return frag{id, mkPatch(id << 1), false}
}

func (c *compiler) nop() frag {
	id, ok := c.alloc(1)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instNop}
	return frag{id, mkPatch(id << 1), true}
}

func (c *compiler) match() frag {
	id, ok := c.alloc(1)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instMatch}
	return frag{begin: id}
}

func (c *compiler) emptyWidth() frag {
	id, ok := c.alloc(1)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instEmptyWidth}
	return frag{id, mkPatch(id << 1), true}
}

func (c *compiler) capture(a frag) frag {
	if isNoMatch(a) {
		return frag{}
	}
	id, ok := c.alloc(2)
	if !ok {
		return frag{}
	}
	c.inst[id] = inst{op: instCapture, out: a.begin}
	c.inst[id+1] = inst{op: instCapture}
	c.patch(a.end, id+1)
	return frag{id, mkPatch((id + 1) << 1), a.nullable}
}

// Rune ranges: a class compiles to an alternation of byte sequences. In
// UTF-8, common suffixes are shared through a cache and common leading
// bytes through a trie, exactly as RE2 does, since both change the count.

func (c *compiler) beginRange() {
	clear(c.runeCache)
	c.runeRange = frag{}
}

func (c *compiler) uncachedSuffix(lo, hi byte, foldcase bool, next uint32) uint32 {
	f := c.byteRange(lo, hi, foldcase)
	if next != 0 {
		c.patch(f.end, next)
	} else {
		c.runeRange.end = c.appendPatch(c.runeRange.end, f.end)
	}
	return f.begin
}

func runeCacheKey(lo, hi byte, foldcase bool, next uint32) uint64 {
	k := uint64(next)<<17 | uint64(lo)<<9 | uint64(hi)<<1
	if foldcase {
		k |= 1
	}
	return k
}

func (c *compiler) cachedSuffix(lo, hi byte, foldcase bool, next uint32) uint32 {
	key := runeCacheKey(lo, hi, foldcase, next)
	if id, ok := c.runeCache[key]; ok {
		return id
	}
	id := c.uncachedSuffix(lo, hi, foldcase, next)
	c.runeCache[key] = id
	return id
}

func (c *compiler) isCachedSuffix(id uint32) bool {
	i := c.inst[id]
	_, ok := c.runeCache[runeCacheKey(i.lo, i.hi, i.foldcase, i.out)]
	return ok
}

func (c *compiler) addSuffix(id uint32) {
	if c.failed {
		return
	}
	if c.runeRange.begin == 0 {
		c.runeRange.begin = id
		return
	}
	if !c.latin1 {
		c.runeRange.begin = c.addSuffixRecursive(c.runeRange.begin, id)
		return
	}
	alt, ok := c.alloc(1)
	if !ok {
		c.runeRange.begin = 0
		return
	}
	c.inst[alt] = inst{op: instAlt, out: c.runeRange.begin, out1: id}
	c.runeRange.begin = alt
}

// addSuffixRecursive merges the byte sequence starting at id into the trie
// rooted at root and returns the (possibly new) root, 0 on failure.
func (c *compiler) addSuffixRecursive(root, id uint32) uint32 {
	f := c.findByteRange(root, id)
	if isNoMatch(f) {
		alt, ok := c.alloc(1)
		if !ok {
			return 0
		}
		c.inst[alt] = inst{op: instAlt, out: root, out1: id}
		return alt
	}
	var br uint32
	switch {
	case f.end.head == 0:
		br = root
	case f.end.head&1 != 0:
		br = c.inst[f.begin].out1
	default:
		br = c.inst[f.begin].out
	}
	if c.isCachedSuffix(br) {
		// A cached suffix may not change: clone its head.
		clone, ok := c.alloc(1)
		if !ok {
			return 0
		}
		b := c.inst[br]
		c.inst[clone] = inst{op: instByteRange, lo: b.lo, hi: b.hi, foldcase: b.foldcase, out: b.out}
		br = clone
		switch {
		case f.end.head == 0:
			root = br
		case f.end.head&1 != 0:
			c.inst[f.begin].out1 = br
		default:
			c.inst[f.begin].out = br
		}
	}
	out := c.inst[id].out
	if !c.isCachedSuffix(id) {
		// id is the newest instruction: free it rather than strand it.
		c.inst = c.inst[:len(c.inst)-1]
	}
	out = c.addSuffixRecursive(c.inst[br].out, out)
	if out == 0 {
		return 0
	}
	c.inst[br].out = out
	return root
}

func (c *compiler) byteRangeEqual(a, b uint32) bool {
	x, y := c.inst[a], c.inst[b]
	return x.lo == y.lo && x.hi == y.hi && x.foldcase == y.foldcase
}

func (c *compiler) findByteRange(root, id uint32) frag {
	if c.inst[root].op == instByteRange {
		if c.byteRangeEqual(root, id) {
			return frag{begin: root}
		}
		return frag{}
	}
	for c.inst[root].op == instAlt {
		out1 := c.inst[root].out1
		if c.byteRangeEqual(out1, id) {
			return frag{begin: root, end: mkPatch(root<<1 | 1)}
		}
		// Classes are sorted: a miss on out1 is final (forward mode).
		return frag{}
	}
	return frag{}
}

func (c *compiler) addRuneRange(lo, hi rune, foldcase bool) {
	if c.latin1 {
		if lo > hi || lo > 0xFF {
			return
		}
		hi = min(hi, 0xFF)
		c.addSuffix(c.uncachedSuffix(byte(lo), byte(hi), foldcase, 0))
		return
	}
	c.addRuneRangeUTF8(lo, hi, foldcase)
}

// add80to10FFFF is RE2's compact form of every non-ASCII rune: it
// tolerates overlong E0/F0 sequences and F4 sequences above 10FFFF.
func (c *compiler) add80to10FFFF() {
	cont1 := c.uncachedSuffix(0x80, 0xBF, false, 0)
	c.addSuffix(c.uncachedSuffix(0xC2, 0xDF, false, cont1))
	cont2 := c.uncachedSuffix(0x80, 0xBF, false, cont1)
	c.addSuffix(c.uncachedSuffix(0xE0, 0xEF, false, cont2))
	cont3 := c.uncachedSuffix(0x80, 0xBF, false, cont2)
	c.addSuffix(c.uncachedSuffix(0xF0, 0xF4, false, cont3))
}

// maxRuneOfLen is the largest rune with an n-byte UTF-8 encoding.
func maxRuneOfLen(n int) rune {
	if n == 1 {
		return 1<<7 - 1
	}
	return 1<<(8-(n+1)+6*(n-1)) - 1
}

func (c *compiler) addRuneRangeUTF8(lo, hi rune, foldcase bool) {
	if lo > hi {
		return
	}
	if lo == 0x80 && hi == 0x10ffff {
		c.add80to10FFFF()
		return
	}
	// Split into ranges of one encoded length.
	for i := 1; i < utf8.UTFMax; i++ {
		if m := maxRuneOfLen(i); lo <= m && m < hi {
			c.addRuneRangeUTF8(lo, m, foldcase)
			c.addRuneRangeUTF8(m+1, hi, foldcase)
			return
		}
	}
	if hi < utf8.RuneSelf {
		c.addSuffix(c.uncachedSuffix(byte(lo), byte(hi), foldcase, 0))
		return
	}
	// Split into ranges that agree on their leading bytes.
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				c.addRuneRangeUTF8(lo, lo|m, foldcase)
				c.addRuneRangeUTF8((lo|m)+1, hi, foldcase)
				return
			}
			if hi&m != m {
				c.addRuneRangeUTF8(lo, (hi&^m)-1, foldcase)
				c.addRuneRangeUTF8(hi&^m, hi, foldcase)
				return
			}
		}
	}
	var bufLo, bufHi [utf8.UTFMax]byte
	ulo := encodeRune(&bufLo, lo)
	uhi := encodeRune(&bufHi, hi)
	n := len(ulo)
	id := uint32(0)
	for i := n - 1; i >= 0; i-- {
		// Cache the last byte, and middle bytes that are ranges.
		if i == n-1 || (ulo[i] < uhi[i] && i != 0) {
			id = c.cachedSuffix(ulo[i], uhi[i], false, id)
		} else {
			id = c.uncachedSuffix(ulo[i], uhi[i], false, id)
		}
	}
	c.addSuffix(id)
}

// encodeRune is RE2's runetochar: UTF-8, except that surrogates (which
// \x{D800} can name) are encoded like any other code point.
func encodeRune(buf *[utf8.UTFMax]byte, r rune) []byte {
	switch {
	case r < 0x80:
		buf[0] = byte(r)
		return buf[:1]
	case r < 0x800:
		buf[0], buf[1] = 0xC0|byte(r>>6), 0x80|byte(r)&0x3F
		return buf[:2]
	case r > runeMax:
		r = utf8.RuneError
	}
	if r < 0x10000 {
		buf[0], buf[1], buf[2] = 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F
		return buf[:3]
	}
	buf[0], buf[1], buf[2], buf[3] = 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F
	return buf[:4]
}

func (c *compiler) literal(r rune, foldcase bool) frag {
	if c.latin1 || r < utf8.RuneSelf {
		return c.byteRange(byte(r), byte(r), foldcase)
	}
	var tmp [utf8.UTFMax]byte
	buf := encodeRune(&tmp, r)
	f := c.byteRange(buf[0], buf[0], false)
	for _, b := range buf[1:] {
		f = c.cat(f, c.byteRange(b, b, false))
	}
	return f
}

// walk compiles re, children first, within RE2's visit budget.
func (c *compiler) walk(re *node) frag {
	if c.failed {
		return frag{}
	}
	if c.visits--; c.visits < 0 {
		c.failed = true
		return frag{}
	}
	kids := make([]frag, len(re.subs))
	for i, s := range re.subs {
		kids[i] = c.walk(s)
	}
	if c.failed {
		return frag{}
	}
	nongreedy := re.flags&flagNonGreedy != 0
	switch re.op {
	case opNoMatch:
		return frag{}
	case opEmptyMatch:
		return c.nop()
	case opConcat:
		f := kids[0]
		for _, k := range kids[1:] {
			f = c.cat(f, k)
		}
		return f
	case opAlternate:
		f := kids[0]
		for _, k := range kids[1:] {
			f = c.alt(f, k)
		}
		return f
	case opStar:
		return c.star(kids[0], nongreedy)
	case opPlus:
		return c.plus(kids[0], nongreedy)
	case opQuest:
		return c.quest(kids[0], nongreedy)
	case opLiteral:
		return c.literal(re.r, re.flags&flagFoldCase != 0)
	case opLiteralString:
		if len(re.runes) == 0 {
			return c.nop()
		}
		var f frag
		for i, r := range re.runes {
			f1 := c.literal(r, re.flags&flagFoldCase != 0)
			if i == 0 {
				f = f1
			} else {
				f = c.cat(f, f1)
			}
		}
		return f
	case opAnyChar:
		c.beginRange()
		c.addRuneRange(0, runeMax, false)
		return c.runeRange
	case opAnyByte:
		return c.byteRange(0x00, 0xFF, false)
	case opCharClass:
		return c.charClass(re.cc)
	case opCapture:
		return c.capture(kids[0])
	case opBeginLine, opEndLine, opBeginText, opEndText, opWordBoundary, opNoWordBoundary:
		return c.emptyWidth()
	}
	// opRepeat never survives simplification.
	c.failed = true
	return frag{}
}

func (c *compiler) charClass(cc *charClass) frag {
	if cc.empty() {
		c.failed = true
		return frag{}
	}
	// If the class treats A-Z as it treats a-z, drop the ranges inside
	// A-Z and let the a-z ranges fold case: (?i)abc costs 1 instruction
	// per letter, not 3.
	foldASCII := cc.foldsASCII
	c.beginRange()
	for _, r := range cc.ranges {
		if foldASCII && 'A' <= r.lo && r.hi <= 'Z' {
			continue
		}
		fold := foldASCII
		if (r.lo <= 'A' && 'z' <= r.hi) || r.hi < 'A' || 'z' < r.lo || ('Z' < r.lo && r.hi < 'a') {
			fold = false
		}
		c.addRuneRange(r.lo, r.hi, fold)
	}
	return c.runeRange
}

// isAnchorStart reports whether re must match at the start of the text,
// replacing that \A with an empty match (RE2 looks at most 4 levels deep).
func isAnchorStart(pre **node, depth int) bool {
	re := *pre
	if re == nil || depth >= 4 {
		return false
	}
	switch re.op {
	case opConcat:
		if len(re.subs) > 0 {
			sub := re.subs[0]
			if isAnchorStart(&sub, depth+1) {
				subs := append([]*node{sub}, re.subs[1:]...)
				*pre = concat(subs, re.flags)
				return true
			}
		}
	case opCapture:
		sub := re.subs[0]
		if isAnchorStart(&sub, depth+1) {
			*pre = &node{op: opCapture, flags: re.flags, subs: []*node{sub}, cap: re.cap}
			return true
		}
	case opBeginText:
		*pre = newNode(opEmptyMatch, re.flags)
		return true
	}
	return false
}

// isAnchorEnd is isAnchorStart for \z at the end.
func isAnchorEnd(pre **node, depth int) bool {
	re := *pre
	if re == nil || depth >= 4 {
		return false
	}
	switch re.op {
	case opConcat:
		if n := len(re.subs); n > 0 {
			sub := re.subs[n-1]
			if isAnchorEnd(&sub, depth+1) {
				subs := append(append([]*node(nil), re.subs[:n-1]...), sub)
				*pre = concat(subs, re.flags)
				return true
			}
		}
	case opCapture:
		sub := re.subs[0]
		if isAnchorEnd(&sub, depth+1) {
			*pre = &node{op: opCapture, flags: re.flags, subs: []*node{sub}, cap: re.cap}
			return true
		}
	case opEndText:
		*pre = newNode(opEmptyMatch, re.flags)
		return true
	}
	return false
}

// compileProgram compiles re into a forward program and returns its
// instruction count after RE2's optimisation and flattening, or false
// when RE2 would run out of its instruction or walk budget.
func compileProgram(re *node, latin1 bool, maxInst int) (int, bool) {
	c := &compiler{
		maxInst:   maxInst,
		latin1:    latin1,
		visits:    2 * maxInst,
		runeCache: map[uint64]uint32{},
	}
	c.alloc(1) // instruction 0: fail
	c.inst[0].op = instFail

	sre := simplify(re)
	if sre == nil {
		return 0, false
	}
	anchorStart := isAnchorStart(&sre, 0)
	isAnchorEnd(&sre, 0)

	all := c.walk(sre)
	if c.failed {
		return 0, false
	}
	all = c.cat(all, c.match())
	start := all.begin
	if !anchorStart {
		// The unanchored entry: a non-greedy .*? loop over any byte.
		all = c.cat(c.star(c.byteRange(0x00, 0xff, false), true), all)
	}
	if c.failed {
		return 0, false
	}
	startUnanchored := all.begin
	n := len(c.inst)
	if start == 0 && startUnanchored == 0 {
		n = 1 // nothing can match: keep the fail instruction only
	}
	p := &prog{inst: c.inst[:n], start: start, startUnanchored: startUnanchored}
	p.optimize()
	return p.flattenedSize(), true
}
