package cli_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// status names each EnvoyFilter of others anchored on an item's filter,
// with the item, and says what removing the item does to it.
func TestStatusTextDependents(t *testing.T) {
	st := status.New(status.Applied)
	st.Dependents = []status.Dependent{
		{Namespace: "istio-system", Name: "user-anchored-healthcheck", Patch: 0, Operation: "INSERT_AFTER", Filter: "envoy.filters.http.local_ratelimit", Item: "localRateLimit"},
		{Namespace: "team-a", Name: "same-priority", Patch: 2, Operation: "INSERT_BEFORE", Filter: "envoy.filters.http.buffer", Item: "requestBody",
			Note: "its priority 52 equals globalconfig-request-body's, so istiod orders the two by creation time: it may not find the filter even now"},
	}
	c, _ := statusCluster(t, st)
	code, out, errs := runIn(t, c, "status")
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"dependents: istio-system/user-anchored-healthcheck anchors on envoy.filters.http.local_ratelimit (localRateLimit): removing or moving that item changes or breaks it\n",
		"dependents: team-a/same-priority anchors on envoy.filters.http.buffer (requestBody): removing or moving that item changes or breaks it\n  (its priority 52 equals",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout:\n%s\nwant it to hold %q", out, want)
		}
	}
	// Without dependents, no such line.
	c, _ = statusCluster(t, status.New(status.Applied))
	if _, out, _ := runIn(t, c, "status"); strings.Contains(out, "dependents") {
		t.Errorf("stdout without dependents:\n%s", out)
	}
}
