package facts_test

import (
	"strings"
	"testing"

	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/facts"
)

// A missing service's warning says that the item is not in effect and
// what the proxies do without its cluster: by default they refuse the
// listener; an item whose filter loads without the cluster says what
// happens instead. NotInEffect reads the consequence back.
func TestMissingSaysWhatTheProxiesDo(t *testing.T) {
	r := &facts.Resolver{Kube: fake.NewClientset(), Istio: istiofake.NewSimpleClientset()}
	for _, c := range []struct {
		missing, want string
	}{
		{"", "; until there is one, the item is not in effect: Envoy refuses every listener that sends to it: each proxy keeps the listeners it had, without the document's changes, and a proxy that starts gets no listener"},
		{"every check fails", "; until there is one, the item is not in effect: every check fails"},
	} {
		f := r.Service(items.ServiceRef{Path: "service", Host: "auth.auth.svc.cluster.local", Port: 80, Missing: c.missing})
		if !f.Warn || !strings.HasSuffix(f.Msg, c.want) {
			t.Errorf("Missing %q: %+v, want a warning ending %q", c.missing, f, c.want)
		}
		want := c.missing
		if want == "" {
			want = facts.DefaultMissing
		}
		if got, ok := facts.NotInEffect(f.Msg); !ok || got != want {
			t.Errorf("NotInEffect(%q) = %q, %v; want %q", f.Msg, got, ok, want)
		}
	}
}
