package app_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/mcp"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/fakekube"
)

const testNS, testName = "istio-system", "global-config"

// One decision table, both sinks: the controller's sync (the kube sink,
// EnvoyFilter objects) and the MCP publisher (the MCP sink, what istiod
// is served) go through the same decider, so the same history of the
// global ConfigMap, restarts included, leaves them holding the same set.
// Each step says which document's set both must hold.
func TestBothSinksDecideAlike(t *testing.T) {
	const (
		docA = "gzip: {chunkSize: 8192}\nheaders: {disableXEnvoyHeaders: true}\n"
		docB = "gzip: {chunkSize: 16384}\nbrotli: {}\n"
		bad  = "gizp: {}\n"
	)
	type step struct {
		name string
		doc  string // "" deletes the ConfigMap
		// restart starts both the controller's term and the publisher
		// afresh before the step, as a new process would.
		restart bool
		want    string // the document whose set both hold; "" for none
	}
	for _, c := range []struct {
		prune bool
		steps []step
	}{
		{steps: []step{
			{name: "a valid document", doc: docA, want: docA},
			{name: "an invalid edit keeps it", doc: bad, want: docA},
			{name: "a valid edit", doc: docB, want: docB},
			{name: "a restart with an invalid document serves the last good", doc: bad, restart: true, want: docB},
			{name: "the ConfigMap deleted: kept", want: docB},
			{name: "a restart without the ConfigMap: the last good", restart: true, want: docB},
			{name: "the ConfigMap back", doc: docA, want: docA},
		}},
		{prune: true, steps: []step{
			{name: "a valid document", doc: docA, want: docA},
			{name: "the ConfigMap deleted: pruned", want: ""},
			{name: "back, invalid: nothing to keep", doc: bad, want: ""},
			{name: "valid again", doc: docB, want: docB},
		}},
	} {
		fc := fakekube.New()
		renderer := render.New() // one per process, as pkg/app wires it
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		newController := func() *controller.Controller {
			return controller.New(controller.Config{Namespace: testNS, Name: testName, FieldManager: "globalconfig", PruneOnDelete: c.prune, Renderer: renderer},
				fc.Kube, fc.Istio, fc.KubeInf.Core().V1().ConfigMaps(), fc.IstioInf.Networking().V1alpha3().EnvoyFilters(),
				record.NewFakeRecorder(100), controller.NewMetrics(prometheus.NewRegistry()), log)
		}
		newPublisher := func() *mcp.Publisher {
			p := mcp.NewPublisher(mcp.NewMetrics(prometheus.NewRegistry()), renderer)
			p.ConfigMaps, p.Namespace, p.Name, p.Log = fc.KubeInf.Core().V1().ConfigMaps().Lister(), testNS, testName, log
			p.PruneOnDelete = c.prune
			p.LastGood = func(ctx context.Context) (map[string]string, error) {
				return controller.ReadLastGood(ctx, fc.Kube, testNS, testName)
			}
			p.Server = mcp.NewServer(log, p.Observer())
			return p
		}
		ctl, pub := newController(), newPublisher()
		exists := false
		for _, s := range c.steps {
			if s.restart {
				ctl, pub = newController(), newPublisher()
			}
			switch {
			case s.doc != "":
				fc.PutConfig(t, testNS, testName, s.doc)
				exists = true
			case exists:
				fc.DeleteConfig(t, testNS, testName)
				exists = false
			}
			if err := ctl.Sync(context.Background()); err != nil {
				t.Fatalf("%s: sync: %v", s.name, err)
			}
			fc.Deliver(t)
			pub.Sync()

			want := map[string]string{}
			if s.want != "" {
				res := renderer.FromConfigMap(map[string]string{document.DataKey: s.want})
				for _, o := range res.Objects {
					want[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Hash()
				}
			}
			kube := map[string]string{}
			for name, hash := range fc.Live(t, testNS) {
				kube[testNS+"/"+name] = hash
			}
			served, err := pub.Server.Served()
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(kube, want) || !maps.Equal(served, want) {
				t.Errorf("prune=%v, %s: kube sink holds %v, MCP sink serves %v; want %v", c.prune, s.name, kube, served, want)
			}
		}
	}
}
