package ipaccess_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items/ipaccess"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/goldentest"
)

func TestGolden(t *testing.T) { goldentest.Run(t, "testdata") }

// maxObjectBytes is the most the API server stores in one object (etcd's
// default request limit).
const maxObjectBytes = 1536 * 1024

// longest is a document with n of the longest ranges (IPv6 /128 written
// out in full), spread over the three lists.
func longest(n int) []byte {
	var b strings.Builder
	b.WriteString("ipAccess:\n")
	for k, key := range []string{"allow", "deny", "denyConnections"} {
		fmt.Fprintf(&b, "  %s:\n", key)
		for i := k; i < n; i += 3 {
			fmt.Fprintf(&b, "  - 2001:db8:%x:ffff:ffff:ffff:ffff:%x\n", k+1, i)
		}
	}
	return []byte(b.String())
}

// TestMaxRangesFitsOneObject checks the reason for MaxRanges: the longest
// lists it admits still make an EnvoyFilter the API server stores, and one
// range more is refused.
func TestMaxRangesFitsOneObject(t *testing.T) {
	if testing.Short() {
		t.Skip("renders 10000 ranges")
	}
	doc, err := document.ParseFile(longest(ipaccess.MaxRanges))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(j) > maxObjectBytes {
			t.Errorf("%d ranges make a %d-byte EnvoyFilter; the API server stores at most %d", ipaccess.MaxRanges, len(j), maxObjectBytes)
		}
	}
	if _, err := document.ParseFile(longest(ipaccess.MaxRanges + 1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d ranges: want a problem naming the bound, got %v", ipaccess.MaxRanges+1, err)
	}
}
