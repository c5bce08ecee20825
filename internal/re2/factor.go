package re2

// Alternation factoring, as RE2's parser does it on every alternation it
// builds. It changes the program size a lot: ABC|ABD|AEF|BCX|BCY becomes
// A(B[CD]|EF)|BC[XY].

// splice is one factored prefix (or merged class) and the span of
// alternatives it replaces.
type splice struct {
	prefix  *node
	start   int // index of the span in the alternatives
	n       int // length of the span
	nsuffix int // alternatives left in the span after factoring it
}

// factorAlternation factors sub in place and returns its new length.
func factorAlternation(sub []*node, f parseFlags) int {
	n := len(sub)
	for round := 1; round <= 3; round++ {
		var splices []splice
		switch round {
		case 1:
			splices = factorRound1(sub[:n])
		case 2:
			splices = factorRound2(sub[:n])
		case 3:
			splices = factorRound3(sub[:n], f)
		}
		if len(splices) == 0 {
			continue
		}
		if round < 3 {
			// Factor each span's suffixes before rebuilding.
			for i := range splices {
				sp := &splices[i]
				sp.nsuffix = factorAlternation(sub[sp.start:sp.start+sp.n], f)
			}
		}
		out := 0
		i := 0
		for _, sp := range splices {
			for i < sp.start {
				sub[out] = sub[i]
				out++
				i++
			}
			if round < 3 {
				alt := concatOrAlternate(opAlternate, sub[sp.start:sp.start+sp.nsuffix], f, false)
				sub[out] = concat([]*node{sp.prefix, alt}, f)
			} else {
				sub[out] = sp.prefix
			}
			out++
			i += sp.n
		}
		for i < n {
			sub[out] = sub[i]
			out++
			i++
		}
		n = out
	}
	return n
}

// leadingString returns the literal runes re begins with, and their
// case-folding and Latin-1 flags.
func leadingString(re *node) ([]rune, parseFlags) {
	for re.op == opConcat && len(re.subs) > 0 {
		re = re.subs[0]
	}
	fl := re.flags & (flagFoldCase | flagLatin1)
	switch re.op {
	case opLiteral:
		return []rune{re.r}, fl
	case opLiteralString:
		return re.runes, fl
	}
	return nil, fl
}

// removeLeadingString drops the first n leading runes of re, in place.
func removeLeadingString(re *node, n int) {
	// RE2 remembers at most four enclosing concatenations to clean up.
	var stk []*node
	for re.op == opConcat {
		if len(stk) < 4 {
			stk = append(stk, re)
		}
		re = re.subs[0]
	}
	switch re.op {
	case opLiteral:
		re.r = 0
		re.op = opEmptyMatch
	case opLiteralString:
		switch {
		case n >= len(re.runes):
			re.runes = nil
			re.op = opEmptyMatch
		case n == len(re.runes)-1:
			re.r = re.runes[len(re.runes)-1]
			re.runes = nil
			re.op = opLiteral
		default:
			re.runes = append([]rune(nil), re.runes[n:]...)
		}
	}
	for d := len(stk) - 1; d >= 0; d-- {
		re := stk[d]
		if re.subs[0].op != opEmptyMatch {
			continue
		}
		switch len(re.subs) {
		case 0, 1:
			re.subs = nil
			re.op = opEmptyMatch
		case 2:
			*re = *re.subs[1]
		default:
			re.subs = re.subs[1:]
		}
	}
}

// leadingRegexp returns the first piece of re (nil for an empty match).
func leadingRegexp(re *node) *node {
	if re.op == opEmptyMatch {
		return nil
	}
	if re.op == opConcat && len(re.subs) >= 2 {
		if re.subs[0].op == opEmptyMatch {
			return nil
		}
		return re.subs[0]
	}
	return re
}

// removeLeadingRegexp returns re without its first piece.
func removeLeadingRegexp(re *node) *node {
	if re.op == opEmptyMatch {
		return re
	}
	if re.op == opConcat && len(re.subs) >= 2 {
		if re.subs[0].op == opEmptyMatch {
			return re
		}
		if len(re.subs) == 2 {
			return re.subs[1]
		}
		re.subs = re.subs[1:]
		return re
	}
	return newNode(opEmptyMatch, re.flags)
}

// factorRound1 finds runs of alternatives with a common literal prefix.
func factorRound1(sub []*node) []splice {
	var splices []splice
	start := 0
	var runes []rune
	var runeFlags parseFlags
	for i := 0; i <= len(sub); i++ {
		var runesI []rune
		var flagsI parseFlags
		if i < len(sub) {
			runesI, flagsI = leadingString(sub[i])
			if flagsI == runeFlags {
				same := 0
				for same < len(runes) && same < len(runesI) && runes[same] == runesI[same] {
					same++
				}
				if same > 0 {
					runes = runes[:same]
					continue
				}
			}
		}
		if i-start >= 2 {
			prefix := newLiteralString(runes, runeFlags)
			for j := start; j < i; j++ {
				removeLeadingString(sub[j], len(runes))
			}
			splices = append(splices, splice{prefix: prefix, start: start, n: i - start})
		}
		if i < len(sub) {
			start = i
			runes = runesI
			runeFlags = flagsI
		}
	}
	return splices
}

// factorRound2 finds runs of alternatives with a common simple first piece:
// an empty-width assertion, a class, any char or byte, or a fixed repeat
// of one of those or a literal.
func factorRound2(sub []*node) []splice {
	var splices []splice
	start := 0
	var first *node
	for i := 0; i <= len(sub); i++ {
		var firstI *node
		if i < len(sub) {
			firstI = leadingRegexp(sub[i])
			if first != nil && factorable(first) && equal(first, firstI) {
				continue
			}
		}
		if i-start >= 2 {
			for j := start; j < i; j++ {
				sub[j] = removeLeadingRegexp(sub[j])
			}
			splices = append(splices, splice{prefix: first, start: start, n: i - start})
		}
		if i < len(sub) {
			start = i
			first = firstI
		}
	}
	return splices
}

func factorable(re *node) bool {
	switch re.op {
	case opBeginLine, opEndLine, opWordBoundary, opNoWordBoundary, opBeginText,
		opEndText, opCharClass, opAnyChar, opAnyByte:
		return true
	case opRepeat:
		if re.min != re.max {
			return false
		}
		switch re.subs[0].op {
		case opLiteral, opCharClass, opAnyChar, opAnyByte:
			return true
		}
	}
	return false
}

// factorRound3 merges runs of literals and classes into one class.
func factorRound3(sub []*node, f parseFlags) []splice {
	var splices []splice
	start := 0
	var first *node
	isLitOrClass := func(re *node) bool { return re.op == opLiteral || re.op == opCharClass }
	for i := 0; i <= len(sub); i++ {
		var firstI *node
		if i < len(sub) {
			firstI = sub[i]
			if first != nil && isLitOrClass(first) && isLitOrClass(firstI) {
				continue
			}
		}
		if i-start >= 2 {
			var b classBuilder
			for j := start; j < i; j++ {
				re := sub[j]
				if re.op == opCharClass {
					for _, r := range re.cc.ranges {
						b.addRangeFlags(r.lo, r.hi, re.flags)
					}
				} else if re.flags&flagFoldCase != 0 {
					// Fold into a fresh class: folding stops early at a
					// rune the class already holds.
					var tmp classBuilder
					tmp.addRangeFlags(re.r, re.r, re.flags)
					b.addClass(&tmp)
				} else {
					b.addRangeFlags(re.r, re.r, re.flags)
				}
			}
			re := newCharClassNode(b.charClass(), f&^flagFoldCase)
			splices = append(splices, splice{prefix: re, start: start, n: i - start})
		}
		if i < len(sub) {
			start = i
			first = firstI
		}
	}
	return splices
}
