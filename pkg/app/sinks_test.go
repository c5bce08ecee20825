package app_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/mcp"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
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

			want := contents(nil)
			if s.want != "" {
				want = contents(renderer.FromConfigMap(map[string]string{document.DataKey: s.want}).Objects)
			}
			kube, served := holdings(t, fc, pub)
			if !maps.Equal(kube, want) || !maps.Equal(served, want) {
				t.Errorf("prune=%v, %s: kube sink holds %v, MCP sink serves %v; want %v", c.prune, s.name, kube, served, want)
			}
		}
	}
}

// contents are objs by namespace/name → content hash.
func contents(objs []*envoyfilter.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		out[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Hash()
	}
	return out
}

// holdings are what the kube sink holds (the API's EnvoyFilters) and what
// the MCP sink serves, as contents.
func holdings(t *testing.T, fc *fakekube.Cluster, pub *mcp.Publisher) (kube, served map[string]string) {
	t.Helper()
	kube = map[string]string{}
	for name, hash := range fc.Live(t, testNS) {
		kube[testNS+"/"+name] = hash
	}
	served, err := pub.Server.Served()
	if err != nil {
		t.Fatal(err)
	}
	return kube, served
}

// The canary rollout, both sinks: the elected controller decides (start,
// an operator's promote, a roll back at the phase timeout), and the
// MCP publisher, following the record in the status and the last good
// copy, serves exactly the set the kube sink holds at every step,
// restarts of both included. Each step names the pair (stable, candidate)
// both must hold split, or the one document both must hold.
func TestBothSinksRollOutAlike(t *testing.T) {
	const policy = "rollout:\n  strategy: Canary\n  bakeTime: 1m\n"
	docA, docB, docC := policy+"gzip: {chunkSize: 8192}\n", policy+"gzip: {chunkSize: 16384}\nbrotli: {}\n", policy+"zstd: {}\n"
	fc := fakekube.New()
	renderer := render.New()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	clock := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	newController := func() *controller.Controller {
		return controller.New(controller.Config{Namespace: testNS, Name: testName, FieldManager: "globalconfig", Renderer: renderer,
			RootNamespace: testNS, Now: func() time.Time { return clock }},
			fc.Kube, fc.Istio, fc.KubeInf.Core().V1().ConfigMaps(), fc.IstioInf.Networking().V1alpha3().EnvoyFilters(),
			record.NewFakeRecorder(100), controller.NewMetrics(prometheus.NewRegistry()), log)
	}
	newPublisher := func() *mcp.Publisher {
		p := mcp.NewPublisher(mcp.NewMetrics(prometheus.NewRegistry()), renderer)
		p.ConfigMaps, p.Namespace, p.Name, p.Log = fc.KubeInf.Core().V1().ConfigMaps().Lister(), testNS, testName, log
		p.Now = func() time.Time { return clock }
		p.LastGood = func(ctx context.Context) (map[string]string, error) {
			return controller.ReadLastGood(ctx, fc.Kube, testNS, testName)
		}
		p.Rollout = func(ctx context.Context) (*canary.Record, map[string]string, error) {
			var rec *canary.Record
			if cm, err := fc.Kube.CoreV1().ConfigMaps(testNS).Get(ctx, status.ConfigMapName(testName), metav1.GetOptions{}); err == nil {
				st, err := status.Read(cm.Data)
				if err != nil {
					return nil, nil, err
				}
				rec = st.Canary
			}
			data, err := controller.ReadLastGood(ctx, fc.Kube, testNS, testName)
			return rec, data, err
		}
		p.Server = mcp.NewServer(log, p.Observer())
		return p
	}
	set := func(doc string) []*envoyfilter.Object {
		res := render.New().FromConfigMap(map[string]string{document.DataKey: doc})
		if !res.Valid() {
			t.Fatal(res.Problems)
		}
		return res.Objects
	}
	split := func(from, to string) []*envoyfilter.Object {
		objs, err := canary.Pair(set(from), set(to), canary.DefaultLabel)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	// Under a canary policy every set goes out paired.
	paired := func(doc string) []*envoyfilter.Object { return split(doc, doc) }
	ctl, pub := newController(), newPublisher()
	var rec *canary.Record
	for _, s := range []struct {
		name    string
		do      func()
		restart bool
		want    []*envoyfilter.Object
		phase   canary.Phase
	}{
		{name: "the first set goes out directly", do: func() { fc.PutConfig(t, testNS, testName, docA) }, want: paired(docA)},
		{name: "a change: the canary set", do: func() { fc.PutConfig(t, testNS, testName, docB) }, want: split(docA, docB), phase: canary.InCanary},
		{name: "both restart in the phase", restart: true, want: split(docA, docB), phase: canary.InCanary},
		{name: "an operator promotes", do: func() {
			fc.Annotate(t, testNS, testName, canary.AnnotationAction, rec.Request(canary.ActionPromote))
		}, want: paired(docB), phase: canary.Promoted},
		{name: "another change: the canary set from the promoted one", do: func() { fc.PutConfig(t, testNS, testName, docC) }, want: split(docB, docC), phase: canary.InCanary},
		{name: "the bake time passes with nothing to judge: held", do: func() { clock = clock.Add(2 * time.Minute) }, want: split(docB, docC), phase: canary.InCanary},
		{name: "the phase timeout passes: rolled back", do: func() { clock = clock.Add(2 * time.Minute) }, want: paired(docB), phase: canary.RolledBack},
		{name: "both restart: still rolled back", restart: true, want: paired(docB), phase: canary.RolledBack},
	} {
		if s.restart {
			ctl, pub = newController(), newPublisher()
		}
		if s.do != nil {
			s.do()
		}
		// The controller decides and writes its status; then the publisher
		// follows. A second round settles what the first one changed.
		for range 2 {
			if err := ctl.Sync(context.Background()); err != nil {
				t.Fatalf("%s: sync: %v", s.name, err)
			}
			fc.Deliver(t)
			pub.Sync()
		}
		want := contents(s.want)
		kube, served := holdings(t, fc, pub)
		if !maps.Equal(kube, want) || !maps.Equal(served, want) {
			t.Errorf("%s: kube sink holds %v, MCP sink serves %v; want %v", s.name, kube, served, want)
		}
		cm, err := fc.Kube.CoreV1().ConfigMaps(testNS).Get(context.Background(), status.ConfigMapName(testName), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := status.Read(cm.Data)
		if err != nil {
			t.Fatal(err)
		}
		rec = st.Canary
		switch {
		case s.phase == "" && rec != nil:
			t.Errorf("%s: a canary record %+v", s.name, rec)
		case s.phase != "" && (rec == nil || rec.Phase != s.phase):
			t.Errorf("%s: record %+v, want phase %s", s.name, rec, s.phase)
		}
	}
}
