package re2

import "strings"

// TopAlternatives splits expr at the alternation that makes it up, so that
// a list written as one regex ("(bot|crawler|spider)") can be emitted as
// several smaller regexes that match the same texts together: expr is
// prefix(?:alt1|alt2|…)suffix, where the alternation is either expr's own
// top level (prefix and suffix empty) or the one group, capturing or not,
// that holds it with no alternation outside it (^(a|b)$). ok is false when
// expr is not such an alternation (one alternative, a flag group such as
// (?i:…), or text it can't read: an unclosed group or class). It reads
// RE2's syntax: escapes, \Q…\E, and character classes, in which "|" and
// parentheses are literal.
func TopAlternatives(expr string) (prefix string, alts []string, suffix string, ok bool) {
	if parts, ok := splitTop(expr); ok && len(parts) > 1 {
		return "", parts, "", true
	}
	// One group at depth 0 holding the alternation.
	spans, ok := groupSpans(expr)
	if !ok {
		return "", nil, "", false
	}
	for _, s := range spans {
		open, body := s[0], s[1]
		inner := expr[body : s[2]-1]
		head := expr[:open]
		if !strings.HasPrefix(expr[open:], "(?:") && strings.HasPrefix(expr[open:], "(?") {
			continue // a flag or named group: its flags would be lost
		}
		parts, ok := splitTop(inner)
		if !ok || len(parts) < 2 {
			continue
		}
		rest := expr[s[2]:]
		if strings.HasPrefix(rest, "*") || strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "?") || strings.HasPrefix(rest, "{") {
			return "", nil, "", false // a repeated group: (a|b)+ is not a|b
		}
		return head, parts, rest, true
	}
	return "", nil, "", false
}

// splitTop splits expr at its depth-0 "|".
func splitTop(expr string) ([]string, bool) {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; {
		case c == '\\':
			if strings.HasPrefix(expr[i:], `\Q`) {
				end := strings.Index(expr[i+2:], `\E`)
				if end < 0 {
					i = len(expr)
				} else {
					i += 2 + end + 1
				}
				continue
			}
			i++
		case c == '[':
			end, ok := classEnd(expr, i)
			if !ok {
				return nil, false
			}
			i = end
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth < 0 {
				return nil, false
			}
		case c == '|' && depth == 0:
			parts = append(parts, expr[start:i])
			start = i + 1
		}
	}
	if depth != 0 {
		return nil, false
	}
	return append(parts, expr[start:]), true
}

// groupSpans lists the depth-0 groups of expr as [open, body, end]: the
// index of "(", of the body after the group's opening ("(", "(?:"), and
// just after its ")"; ok is false when a group or class is unclosed.
// Only expressions with exactly one depth-0 group are of use.
func groupSpans(expr string) ([][3]int, bool) {
	var out [][3]int
	depth, open := 0, -1
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; {
		case c == '\\':
			if strings.HasPrefix(expr[i:], `\Q`) {
				end := strings.Index(expr[i+2:], `\E`)
				if end < 0 {
					return nil, false
				}
				i += 2 + end + 1
				continue
			}
			i++
		case c == '[':
			end, ok := classEnd(expr, i)
			if !ok {
				return nil, false
			}
			i = end
		case c == '(' && flagSetter(expr[i:]) > 0:
			i += flagSetter(expr[i:]) - 1 // (?i): flags, not a group
		case c == '(':
			if depth == 0 {
				open = i
			}
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, false
			}
			if depth == 0 {
				body := open + 1
				if strings.HasPrefix(expr[open:], "(?:") {
					body = open + 3
				}
				out = append(out, [3]int{open, body, i + 1})
			}
		case c == '|' && depth == 0:
			return nil, false
		}
	}
	if depth != 0 || len(out) != 1 {
		return nil, false
	}
	return out, true
}

// classEnd returns the index of the "]" closing the class that opens at i:
// a "]" right after "[" or "[^" is literal, "[:name:]" is one item.
func classEnd(expr string, i int) (int, bool) {
	j := i + 1
	if j < len(expr) && expr[j] == '^' {
		j++
	}
	if j < len(expr) && expr[j] == ']' {
		j++
	}
	for ; j < len(expr); j++ {
		switch {
		case expr[j] == '\\':
			j++
		case strings.HasPrefix(expr[j:], "[:"):
			if end := strings.Index(expr[j+2:], ":]"); end >= 0 {
				j += 2 + end + 1
			}
		case expr[j] == ']':
			return j, true
		}
	}
	return 0, false
}

// flagSetter is the length of the flag group "(?flags)" s starts with, 0
// when it starts with none.
func flagSetter(s string) int {
	if !strings.HasPrefix(s, "(?") {
		return 0
	}
	for j := 2; j < len(s); j++ {
		switch c := s[j]; {
		case c == ')':
			if j == 2 {
				return 0
			}
			return j + 1
		case c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		default:
			return 0
		}
	}
	return 0
}
