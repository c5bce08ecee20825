package envoyformat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
)

// maxHeaderValue is the longest header value Envoy's HeaderValue proto
// takes (max_bytes).
const maxHeaderValue = 16384

// Envoy's header parser rewrites two legacy forms before the substitution
// formatter sees a header value (router/header_parser_utils.cc), with
// these patterns (std::regex, ECMAScript: \s is [ \t\n\v\f\r]).
var (
	legacyMetadata  = regexp.MustCompile(`%(UPSTREAM|DYNAMIC)_METADATA\([ \t\n\v\f\r]*(\[.+?\][ \t\n\v\f\r]*)\)%`)
	perRequestState = regexp.MustCompile(`%PER_REQUEST_STATE\((.+?)\)%`)
)

// header checks what Envoy checks on a header value before parsing it and
// returns the value rewritten as Envoy rewrites it.
func (c *checker) header(s string) string {
	if strings.ContainsAny(s, "\x00\r\n") {
		c.add(never, "a header value can't hold NUL, CR or LF")
	}
	if len(s) > maxHeaderValue {
		c.add(never, "a header value is at most %d bytes, this one is %d", maxHeaderValue, len(s))
	}
	// %UPSTREAM_METADATA(["ns", "key"])% is %UPSTREAM_METADATA(ns:key)%;
	// Envoy stops rewriting at the first that isn't a non-empty JSON array
	// of strings and leaves it as it is.
	for {
		m := legacyMetadata.FindStringSubmatchIndex(s)
		if m == nil {
			break
		}
		parts, ok := stringArray(s[m[4]:m[5]])
		if !ok || len(parts) == 0 {
			break
		}
		s = s[:m[0]] + "%" + s[m[2]:m[3]] + "_METADATA(" + strings.Join(parts, ":") + ")%" + s[m[1]:]
		c.rewritten = true
	}
	// %PER_REQUEST_STATE(key)% is %FILTER_STATE(key:PLAIN)%.
	for {
		m := perRequestState.FindStringSubmatchIndex(s)
		if m == nil {
			break
		}
		s = s[:m[0]] + "%FILTER_STATE(" + s[m[2]:m[3]] + ":PLAIN)%" + s[m[1]:]
		c.rewritten = true
	}
	return s
}

// stringArray parses a JSON array of strings as Envoy's JSON loader does;
// ok is false when Envoy would not take it (bad JSON, another type).
func stringArray(text string) ([]string, bool) {
	v, err := parseJSON(text)
	if err != nil {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// parseJSON reads one JSON value as Envoy's JSON loader (nlohmann/json)
// does: strict RFC 8259, no trailing data, no lone UTF-16 surrogate
// escapes, and no integer outside int64. Numbers come back as json.Number.
func parseJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value")
	}
	if err := loneSurrogate(text); err != nil {
		return nil, err
	}
	if err := integersFit(v); err != nil {
		return nil, err
	}
	return v, nil
}

// loneSurrogate refuses a \uD800–\uDFFF escape that isn't half of a pair.
func loneSurrogate(text string) error {
	b := []byte(text)
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++
		if i >= len(b) || b[i] != 'u' || i+4 >= len(b) {
			continue
		}
		r, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 16)
		if err != nil {
			continue
		}
		i += 4
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+6 < len(b) && bytes.HasPrefix(b[i+1:], []byte(`\u`)) {
				if lo, err := strconv.ParseUint(string(b[i+3:i+7]), 16, 16); err == nil && utf16.IsSurrogate(rune(lo)) && lo >= 0xDC00 {
					i += 6
					continue
				}
			}
			return fmt.Errorf("a lone UTF-16 surrogate")
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Errorf("a lone UTF-16 surrogate")
		}
	}
	return nil
}

// integersFit refuses a number Envoy's JSON loader can't hold.
func integersFit(v any) error {
	switch v := v.(type) {
	case json.Number:
		if jsonNumberKind(string(v)) == badNumber {
			return fmt.Errorf("the number %s is out of range", v)
		}
	case []any:
		for _, e := range v {
			if err := integersFit(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, e := range v {
			if err := integersFit(e); err != nil {
				return err
			}
		}
	}
	return nil
}

type numberKind uint8

const (
	intNumber numberKind = iota
	floatNumber
	badNumber
)

// jsonNumberKind is how nlohmann/json and Envoy's loader on top of it
// take a JSON number: an integer that fits int64 is an integer; a positive
// one beyond it but within uint64 is refused ("larger than int64"); any
// other number is a float, refused when it overflows.
func jsonNumberKind(s string) numberKind {
	if !strings.ContainsAny(s, ".eE") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return intNumber
		}
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return badNumber
		}
	}
	if f, _ := strconv.ParseFloat(s, 64); math.IsInf(f, 0) {
		return badNumber
	}
	return floatNumber
}

// coalesce is %COALESCE({"operators": [...]})%: a JSON object whose
// operators are command names or {"command", "param", "max_length"}
// objects, each parsed by the built-in command parsers.
func coalesce(c *checker, o call) {
	v, err := parseJSON(o.arg)
	if err != nil {
		c.add(never, "%s: the argument of %%COALESCE%% must be JSON, {\"operators\": [...]}: %v", shown(o.text), err)
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		c.add(never, "%s: the argument of %%COALESCE%% must be a JSON object, {\"operators\": [...]}", shown(o.text))
		return
	}
	ops, ok := obj["operators"].([]any)
	switch {
	case !ok:
		c.add(never, "%s: %%COALESCE%% needs an \"operators\" array", shown(o.text))
		return
	case len(ops) == 0:
		c.add(never, "%s: the \"operators\" of %%COALESCE%% must not be empty", shown(o.text))
		return
	}
	for i, e := range ops {
		where := fmt.Sprintf("%%COALESCE%% operator %d", i)
		switch e := e.(type) {
		case string:
			c.nested(where, e, "", false)
		case map[string]any:
			name, ok := e["command"].(string)
			if !ok {
				c.add(never, "%s: %s needs a \"command\" string", shown(o.text), where)
				continue
			}
			param := ""
			if p, present := e["param"]; present {
				s, ok := p.(string)
				if !ok {
					c.add(never, "%s: the \"param\" of %s must be a string", shown(o.text), where)
					continue
				}
				param = s
			}
			hasLength := false
			if n, present := e["max_length"]; present {
				num, ok := n.(json.Number)
				i, err := strconv.ParseInt(string(num), 10, 64)
				if !ok || jsonNumberKind(string(num)) != intNumber || err != nil || i <= 0 {
					c.add(never, "%s: the \"max_length\" of %s must be a positive integer", shown(o.text), where)
					continue
				}
				hasLength = true
			}
			c.nested(where, name, param, hasLength)
		default:
			c.add(never, "%s: %s must be a command name or an object with a \"command\"", shown(o.text), where)
		}
	}
}

// nested checks an operator %COALESCE% names: only the built-in command
// parsers take it, as if written %NAME(param)%.
func (c *checker) nested(where, name, param string, hasLength bool) {
	text := "%" + name
	if param != "" {
		text += "(" + param + ")"
	}
	text += "%"
	if _, known := operators[name]; !known {
		c.add(never, "%s: unknown command %s", where, shown(name))
		return
	}
	c.command(name, param, hasLength, text)
}
