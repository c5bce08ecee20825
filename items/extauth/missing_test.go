package extauth_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// What the warning says a gateway does while the auth service has no
// cluster follows the section's settings, as test/proxy's
// TestServiceFailure measured them: the failure status it is denied with,
// or that requests pass unchecked.
func TestMissingFollowsFailureMode(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"", "every request that is not opted out (skip) is denied with 503 (failureMode deny)"},
		{"  failureStatus: 500\n", "is denied with 500 (failureMode deny)"},
		{"  failureMode: allow\n", "every request passes unchecked"},
		{"  shadow: true\n", "no request is refused (shadow)"},
	} {
		d, err := document.ParseFile([]byte("extAuth:\n  service: auth.auth.svc.cluster.local\n  port: 80\n" + c.extra))
		if err != nil {
			t.Fatalf("%q: %v", c.extra, err)
		}
		refs := d.Sections[0].Item.(items.ServiceUser).Services()
		if len(refs) != 1 || !strings.Contains(refs[0].Missing, c.want) {
			t.Errorf("%q: %+v, want Missing to say %q", c.extra, refs, c.want)
		}
	}
}
