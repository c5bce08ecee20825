package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
	"github.com/globalconfig/globalconfig/test/xds"
)

// What pkg/anchors says a dependent risks, at a real istiod: the user's
// health check stands right after localRateLimit's filter while the item
// is there, and silently goes with it (istiod skips an INSERT_AFTER whose
// anchor is absent); with the item back, it is back.
func TestDependentLosesItsAnchor(t *testing.T) {
	ctx := setup(t)
	doc := "localRateLimit:\n  maxTokens: 100\n  tokensPerFill: 100\n  fillInterval: 1s\n"
	var ours []byte
	for _, o := range desiredObjects(t, doc) {
		y, err := o.YAML()
		if err != nil {
			t.Fatal(err)
		}
		ours = append(append(ours, "---\n"...), y...)
	}
	if _, err := cluster.Kubectl(ctx, []byte(anchorstest.UserAnchoredHealthCheck), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(ctx, []byte(anchorstest.UserAnchoredHealthCheck), "delete", "--ignore-not-found", "-f", "-")
		_, _ = cluster.Kubectl(ctx, ours, "delete", "--ignore-not-found", "-f", "-")
	})
	chain := func(s xds.Snapshot) (string, error) {
		hcm, err := s.GatewayHCM(listenerName)
		if err != nil {
			return "", err
		}
		var names []string
		for _, f := range hcm.GetHttpFilters() {
			names = append(names, f.GetName())
		}
		return "," + strings.Join(names, ",") + ",", nil
	}
	anchored := func(s xds.Snapshot) error {
		c, err := chain(s)
		if err != nil {
			return err
		}
		if !strings.Contains(c, ",envoy.filters.http.local_ratelimit,envoy.filters.http.health_check,") {
			return fmt.Errorf("chain %s: want health_check right after local_ratelimit", c)
		}
		return nil
	}
	for round := range 2 {
		if _, err := cluster.Kubectl(ctx, ours, "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		waitEffect(ctx, t, fmt.Sprintf("round %d: the user's filter after localRateLimit's", round), anchored)
		if _, err := cluster.Kubectl(ctx, ours, "delete", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		waitEffect(ctx, t, fmt.Sprintf("round %d: both gone with the item", round), func(s xds.Snapshot) error {
			c, err := chain(s)
			if err != nil {
				return err
			}
			if strings.Contains(c, ",envoy.filters.http.local_ratelimit,") || strings.Contains(c, ",envoy.filters.http.health_check,") {
				return fmt.Errorf("chain %s: want neither local_ratelimit nor the user's health_check", c)
			}
			return nil
		})
	}
}
