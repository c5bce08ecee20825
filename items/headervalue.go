package items

import "fmt"

// HeaderValue is a header value as the author wrote it. A header value is
// text, but YAML reads `x-xss-protection: 0` as a number and `x-flag: true`
// as a boolean; both have only one meaning as a header, so a number or a
// boolean is taken as its text exactly as written (`0` is "0", `1.0`
// stays "1.0", `true` is "true"), never reformatted. Lists and mappings
// are refused.
type HeaderValue string

// DecodeScalar implements the document decoder's scalar hook.
func (h *HeaderValue) DecodeScalar(tag, value string) error {
	switch tag {
	case "!!str", "!!int", "!!float", "!!bool":
		*h = HeaderValue(value)
		return nil
	}
	return fmt.Errorf("expected a header value (text, or a number or boolean taken as written), got %s", DescribeTag(tag))
}

// SchemaTypes implements the schema hook: a number or a boolean is taken
// as its text.
func (HeaderValue) SchemaTypes() []string { return []string{"string", "number", "boolean"} }

var (
	_ ScalarDecoder = (*HeaderValue)(nil)
	_ SchemaTyper   = HeaderValue("")
)
