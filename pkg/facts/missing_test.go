package facts_test

import (
	"strings"
	"testing"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/facts"
)

// A missing service's warning says what the proxies do without its
// cluster: by default they refuse the listener; an item whose filter loads
// without the cluster says what happens instead.
func TestMissingSaysWhatTheProxiesDo(t *testing.T) {
	r := &facts.Resolver{Kube: fake.NewClientset(), Istio: istiofake.NewSimpleClientset()}
	for _, c := range []struct {
		missing, want string
	}{
		{"", "and Envoy refuses every listener that sends to it until there is one"},
		{"every check fails", "and every check fails until there is one"},
	} {
		f := r.Service(items.ServiceRef{Path: "service", Host: "auth.auth.svc.cluster.local", Port: 80, Missing: c.missing})
		if !f.Warn || !strings.HasSuffix(f.Msg, c.want) {
			t.Errorf("Missing %q: %+v, want a warning ending %q", c.missing, f, c.want)
		}
	}
}
