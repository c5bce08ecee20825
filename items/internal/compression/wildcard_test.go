package compression_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/compression"
)

// A wildcard media type never matches a response at any Envoy (1.36-1.39
// compare content_type exactly, 1.40's matcher is our prefix of the
// literal text), so it is refused at its key with the reason, and the
// exact types beside it are still taken.
func TestWildcardMediaTypesRefused(t *testing.T) {
	for _, ct := range []string{"text/*", "*/*", "application/*"} {
		r := compression.DefaultResponse()
		r.ContentType = []string{"text/html", ct}
		var p items.Problems
		r.Validate(&p)
		err := p.Err()
		if err == nil {
			t.Errorf("contentType %q admitted; it matches no response", ct)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "contentType[1]") || !strings.Contains(msg, "exactly") || strings.Contains(msg, "contentType[0]") {
			t.Errorf("contentType %q: %v; want one problem at contentType[1] saying Envoy compares types exactly", ct, err)
		}
	}
	r := compression.DefaultResponse()
	var p items.Problems
	r.Validate(&p)
	if err := p.Err(); err != nil {
		t.Errorf("the default types: %v", err)
	}
}
