package mcp

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// publisherWith is a publisher whose global ConfigMap holds doc ("" for
// no ConfigMap) and whose stored last good document is lastGood ("" for
// none).
func publisherWith(t *testing.T, doc, lastGood string) *Publisher {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if doc != "" {
		if err := idx.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "global-config", Namespace: "istio-system"},
			Data: map[string]string{document.DataKey: doc}}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := NewPublisher(NewMetrics(prometheus.NewRegistry()), nil)
	p.ConfigMaps, p.Namespace, p.Name, p.Log = corelisters.NewConfigMapLister(idx), "istio-system", "global-config", log
	p.Server = NewServer(log, p.Observer())
	p.LastGood = func(context.Context) (map[string]string, error) {
		if lastGood == "" {
			return nil, nil
		}
		return map[string]string{document.DataKey: lastGood}, nil
	}
	return p
}

// served is the number of EnvoyFilters the server serves, -1 before the
// first publish.
func served(p *Publisher) int {
	_, res, ok := p.Server.Snapshot()
	if !ok {
		return -1
	}
	return len(res)
}

// A publisher that starts while the document is invalid (or the ConfigMap
// is gone) serves the stored last good set from its first answer; a valid
// document then replaces it, and a later invalid edit keeps what is served.
func TestPublisherStartsFromTheLastGood(t *testing.T) {
	const good = "gzip: {}\nheaders: {disableXEnvoyHeaders: true}\n"
	for name, c := range map[string]struct{ doc, lastGood string }{
		"invalid document": {"gizp: {}\n", good},
		"no ConfigMap":     {"", good},
	} {
		t.Run(name, func(t *testing.T) {
			p := publisherWith(t, c.doc, c.lastGood)
			p.Sync()
			if n := served(p); n != 2 {
				t.Fatalf("serves %d EnvoyFilters, want the last good 2", n)
			}
		})
	}
	t.Run("nothing stored", func(t *testing.T) {
		p := publisherWith(t, "gizp: {}\n", "")
		p.Sync()
		if n := served(p); n != -1 {
			t.Errorf("serves %d EnvoyFilters with no valid document anywhere, want to wait", n)
		}
	})
	t.Run("a valid document wins", func(t *testing.T) {
		p := publisherWith(t, "gzip: {}\n", good)
		p.Sync()
		if n := served(p); n != 1 {
			t.Errorf("serves %d EnvoyFilters, want the document's 1", n)
		}
	})
}

// A replica serves its istiod only the items that go to its cluster:
// one limited to another cluster (target.clusters) is left out.
func TestPublisherServesItsClusterOnly(t *testing.T) {
	doc := "gzip: {}\nheaders:\n  disableXEnvoyHeaders: true\n  target:\n    clusters: [eu-west-1]\n"
	for cluster, want := range map[string]int{"eu-west-1": 2, "us-east-1": 1} {
		p := publisherWith(t, doc, "")
		p.Cluster = cluster
		p.Sync()
		if n := served(p); n != want {
			t.Errorf("a replica in %s serves %d EnvoyFilters, want %d", cluster, n, want)
		}
	}
}
