package globalratelimit_test

import (
	"testing"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// What the warning says a gateway does while the rate-limit service has
// no cluster follows failureMode, as test/proxy's TestServiceFailure
// measured it: no limit enforced, or every request denied with the
// failure status (Envoy's 500 when unset).
func TestMissingFollowsFailureMode(t *testing.T) {
	for _, c := range []struct{ extra, want string }{
		{"", "no limit is enforced: every request passes unlimited (failureMode allow)"},
		{"  failureMode: deny\n", "every request is denied with 500 (failureMode deny)"},
		{"  failureMode: deny\n  failureStatus: 503\n", "every request is denied with 503 (failureMode deny)"},
	} {
		d, err := document.ParseFile([]byte("globalRateLimit:\n  service: ratelimit.ratelimit.svc.cluster.local\n  port: 8081\n" + c.extra +
			"  limits:\n    all:\n      requests: 10\n      unit: minute\n"))
		if err != nil {
			t.Fatalf("%q: %v", c.extra, err)
		}
		refs := d.Sections[0].Item.(items.ServiceUser).Services()
		if len(refs) != 1 || refs[0].Missing != c.want {
			t.Errorf("%q: %+v, want Missing %q", c.extra, refs, c.want)
		}
	}
}
