package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/fakekube"
)

// The sync is tested the way kubernetes/sample-controller tests its
// syncHandler: fake clientsets, informers that are never started, and
// caches the test fills itself. Each test decides exactly what the
// informer has "seen" (deliver), so nothing races.

const (
	testNS   = "istio-system"
	testName = "global-config"
)

const docV1 = `
gzip:
  chunkSize: 8192
headers:
  disableXEnvoyHeaders: true
`

type fixture struct {
	*fakekube.Cluster
	t        *testing.T
	ctx      context.Context
	kube     *fake.Clientset
	istio    *istiofake.Clientset
	recorder *record.FakeRecorder
	ctrl     *Controller
	metrics  *Metrics
}

func newFixture(t *testing.T, cfg Config) *fixture {
	c := fakekube.New()
	f := &fixture{Cluster: c, t: t, ctx: context.Background(), kube: c.Kube, istio: c.Istio, recorder: record.NewFakeRecorder(100)}
	versionedConfigMaps(c.Kube, &c.Version)
	cfg.Namespace, cfg.Name, cfg.FieldManager = testNS, testName, "globalconfig"
	if cfg.Admission == nil {
		// A controller serving its webhook, which guards the ConfigMap.
		cfg.Admission = func(context.Context, *corev1.ConfigMap) status.Admission { return status.Admission{Guarded: true} }
	}
	f.metrics = NewMetrics(prometheus.NewRegistry())
	f.ctrl = New(cfg, f.kube, f.istio, c.KubeInf.Core().V1().ConfigMaps(), c.IstioInf.Networking().V1alpha3().EnvoyFilters(),
		f.recorder, f.metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.ctrl.st = state{}
	return f
}

// putConfig writes the global ConfigMap to the API and to the cache.
func (f *fixture) putConfig(doc string) { f.t.Helper(); f.PutConfig(f.t, testNS, testName, doc) }

// deleteConfig removes the global ConfigMap from the API and the cache.
func (f *fixture) deleteConfig() { f.t.Helper(); f.DeleteConfig(f.t, testNS, testName) }

// deliver makes the EnvoyFilter cache show what the API holds.
func (f *fixture) deliver() { f.t.Helper(); f.Deliver(f.t) }

func (f *fixture) sync() error {
	f.t.Helper()
	f.istio.ClearActions()
	return f.ctrl.Sync(f.ctx)
}

func (f *fixture) mustSync() {
	f.t.Helper()
	if err := f.sync(); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
}

// writes lists the EnvoyFilter writes of the last sync: "apply NAME" or
// "delete NAME".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.istio.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			out = append(out, "apply "+a.GetName())
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		}
	}
	return out
}

// live returns the content hashes of the EnvoyFilters the API holds.
func (f *fixture) live() map[string]string { f.t.Helper(); return f.Live(f.t, testNS) }

// status reads the status the controller wrote, as a tool would.
func (f *fixture) status() *status.Status {
	f.t.Helper()
	cm, err := f.kube.CoreV1().ConfigMaps(testNS).Get(f.ctx, status.ConfigMapName(testName), metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(cm.Data) != 1 {
		f.t.Errorf("the status ConfigMap holds %d keys, want only %s", len(cm.Data), status.Key)
	}
	st, err := status.Read(cm.Data)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// filterNames are the applied set's EnvoyFilters, namespace/name.
func filterNames(st *status.Status) []string {
	if st.Applied == nil {
		return nil
	}
	var out []string
	for _, ef := range st.Applied.EnvoyFilters {
		out = append(out, ef.Namespace+"/"+ef.Name)
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// desired returns the content hashes the document asks for.
func desired(t *testing.T, doc string) map[string]string {
	t.Helper()
	d, err := document.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range d.Sections {
		if !s.Item.Enabled() {
			continue
		}
		patches, err := s.Item.Build()
		if err != nil {
			t.Fatal(err)
		}
		o, err := envoyfilter.NewObject(s.Name, s.Placement, s.Target, patches)
		if err != nil {
			t.Fatal(err)
		}
		out[o.Metadata.Name] = o.Hash()
	}
	return out
}

func (f *fixture) wantLive(doc string) {
	f.t.Helper()
	if got, want := f.live(), desired(f.t, doc); !maps.Equal(got, want) {
		f.t.Fatalf("live EnvoyFilters %v, want %v", got, want)
	}
}

// Create, one write per one-item edit, none for a no-op edit, and none for
// a sync whose cache has not shown our own write yet.
func TestSyncWritesOnlyWhatChanged(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"apply globalconfig-gzip", "apply globalconfig-headers"}) {
		t.Fatalf("first sync wrote %v", w)
	}
	f.wantLive(docV1)
	if s := f.status(); s.State != status.Applied || !slices.Equal(filterNames(s), []string{"istio-system/globalconfig-gzip", "istio-system/globalconfig-headers"}) ||
		s.Applied.EnvoyFilters[0].Item != "gzip" || !slices.Equal(s.Applied.Change.Added, []string{"gzip", "headers"}) || s.Sink != "kube" {
		t.Errorf("status %+v", s)
	}
	f.deliver()

	edited := strings.Replace(docV1, "chunkSize: 8192", "chunkSize: 16384", 1)
	f.putConfig(edited)
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"apply globalconfig-gzip"}) {
		t.Fatalf("a one-item edit wrote %v", w)
	}
	f.wantLive(edited)
	if s := f.status(); !reflect.DeepEqual(s.Applied.Change, status.Change{Added: []string{}, Changed: []string{"gzip"}, Removed: []string{}}) {
		t.Errorf("status change %+v, want gzip changed", s.Applied.Change)
	}
	// The cache still shows the old gzip: our own write must not be
	// repeated.
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a sync before the cache showed our update wrote %v", w)
	}
	f.deliver()
	f.putConfig("# reformatted, same meaning\n" + edited + "\n")
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a no-op edit wrote %v", w)
	}
	events := f.events()
	if len(events) != 2 || !strings.Contains(events[0], "added gzip, headers") || !strings.Contains(events[1], "Applied changed gzip: updated istio-system/globalconfig-gzip") {
		t.Errorf("events %q", events)
	}
}

// A restarted controller (a new term) whose cache shows the desired set
// writes nothing, not even the status.
func TestSyncAfterRestartWritesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	f.ctrl.st = state{} // a new term
	f.kube.ClearActions()
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("restart wrote %v", w)
	}
	for _, a := range f.kube.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("restart made a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// An EnvoyFilter we created and someone deleted before the informer showed
// it is restored: the cache never saw it, and the next sync creates it
// again.
func TestSyncRestoresACreateDeletedBeforeTheCacheSawIt(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	if err := f.istio.NetworkingV1alpha3().EnvoyFilters(testNS).Delete(f.ctx, "globalconfig-gzip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deliver() // the informer saw the create and the delete.
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"apply globalconfig-gzip"}) {
		t.Fatalf("restore wrote %v", w)
	}
	f.wantLive(docV1)
}

// Drift: a deleted and an edited EnvoyFilter are both put back.
func TestSyncRestoresDrift(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	efs := f.istio.NetworkingV1alpha3().EnvoyFilters(testNS)
	if err := efs.Delete(f.ctx, "globalconfig-headers", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gz, err := efs.Get(f.ctx, "globalconfig-gzip", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gz.Spec.Priority = 99 // the content-hash annotation is left as it was
	f.Version++
	gz.ResourceVersion = strconv.Itoa(f.Version)
	if _, err := efs.Update(f.ctx, gz, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deliver()
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"apply globalconfig-gzip", "apply globalconfig-headers"}) {
		t.Fatalf("drift repair wrote %v", w)
	}
	f.wantLive(docV1)
	if events := f.events(); !strings.Contains(events[len(events)-1], "no item changed: updated istio-system/globalconfig-gzip; created istio-system/globalconfig-headers") {
		t.Errorf("drift event %q", events[len(events)-1])
	}
}

// An invalid edit keeps (and restores) the last good set, says so once,
// and an EnvoyFilter no longer wanted is deleted once the document is
// valid again.
func TestSyncKeepsTheLastGoodSet(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	f.events()

	f.putConfig("gizp: {}\n")
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("an invalid edit wrote %v", w)
	}
	s := f.status()
	if s.State != status.Invalid || len(s.Errors) != 1 ||
		s.Errors[0] != (status.Problem{Path: "gizp", Line: 1, Message: `unknown item; did you mean "gzip"?`}) ||
		!slices.Equal(s.Applied.Change.Added, []string{"gzip", "headers"}) {
		t.Errorf("status %+v, applied %+v", s, s.Applied)
	}
	f.mustSync() // a resync: the same problems are not announced again
	if events := f.events(); len(events) != 1 || !strings.Contains(events[0], "Warning InvalidConfig 1 problem(s)") {
		t.Errorf("events %q", events)
	}
	// Someone deletes a filter meanwhile: the last good set is restored.
	if err := f.istio.NetworkingV1alpha3().EnvoyFilters(testNS).Delete(f.ctx, "globalconfig-gzip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deliver()
	f.mustSync()
	f.wantLive(docV1)
	f.deliver()

	f.putConfig("gzip: {chunkSize: 8192}\n")
	f.mustSync()
	if w := f.writes(); !slices.Equal(w, []string{"delete globalconfig-headers"}) {
		t.Errorf("the valid edit wrote %v", w)
	}
	if s := f.status(); s.State != status.Applied || len(s.Errors) != 0 || !slices.Equal(s.Applied.Change.Removed, []string{"headers"}) {
		t.Errorf("status %+v", s)
	}
}

// An invalid document before any valid one leaves the live EnvoyFilters
// alone: after a restart they are the last good state.
func TestSyncInvalidAtStartDeletesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	f.ctrl.st = state{}
	f.putConfig("gzip: {chunkSize: 1}\n")
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("wrote %v", w)
	}
	f.wantLive(docV1)
}

func TestSyncConfigMapDeleted(t *testing.T) {
	for _, prune := range []bool{false, true} {
		t.Run("prune="+strconv.FormatBool(prune), func(t *testing.T) {
			f := newFixture(t, Config{PruneOnDelete: prune})
			f.putConfig(docV1)
			f.mustSync()
			f.deliver()
			f.deleteConfig()
			f.mustSync()
			s := f.status()
			if s.State != status.ConfigMapDeleted {
				t.Errorf("status %+v", s)
			}
			if prune {
				if len(f.live()) != 0 || len(f.writes()) != 2 {
					t.Errorf("pruned %v, still live %v", f.writes(), f.live())
				}
				return
			}
			if len(f.writes()) != 0 || len(filterNames(s)) != 2 {
				t.Errorf("wrote %v; status %v", f.writes(), s)
			}
			f.wantLive(docV1)
		})
	}
}

// A permanent API error is reported and not retried; a transient one is
// retried with backoff. Both leave the status saying so.
func TestSyncAPIErrors(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		requeued  bool
		permanent bool
	}{
		{"forbidden", apierrors.NewForbidden(fakekube.EnvoyFilters.GroupResource(), "globalconfig-gzip", errors.New("RBAC says no")), false, true},
		{"unavailable", apierrors.NewServiceUnavailable("etcd is down"), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			f.putConfig(docV1)
			f.istio.PrependReactor("patch", "envoyfilters", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, c.err
			})
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			defer q.ShutDown()
			q.Add(queueKey)
			f.ctrl.processNext(f.ctx, q)
			if got := q.NumRequeues(queueKey) > 0; got != c.requeued {
				t.Errorf("requeued %v, want %v", got, c.requeued)
			}
			if isPermanent(f.sync()) != c.permanent {
				t.Errorf("isPermanent disagrees for %v", c.err)
			}
			if s := f.status(); s.State != status.ApplyFailed || !strings.Contains(s.Message, c.err.Error()) {
				t.Errorf("status %+v", s)
			}
			if n := testutil.ToFloat64(f.metrics.ReconcileErrors); n != 2 {
				t.Errorf("reconcile errors %v, want 2", n)
			}
		})
	}
}

// Report-only (the MCP sink alone) writes no EnvoyFilter, yet keeps the
// status, with istiod's MCP NACK scrubbed of secrets.
func TestSyncReportOnly(t *testing.T) {
	f := newFixture(t, Config{Sink: SinkMCP, MCPNack: func() string { return "rejected token s3cr3t" }})
	f.putConfig(docV1 + "tracing:\n  enable: true\n  skywalking: {service: sw.default.svc.cluster.local, port: 11800, access_token: s3cr3t}\n")
	f.mustSync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("report-only wrote %v", w)
	}
	s := f.status()
	if s.State != status.Applied || s.Sink != "mcp" || s.MCPNack != "rejected token [redacted]" || len(filterNames(s)) != 3 {
		t.Errorf("status %+v", s)
	}
}

// A create the cache hasn't seen is kept only while the cache is older
// than it; resourceVersions that don't parse make no claim.
func TestOlderThan(t *testing.T) {
	for _, c := range []struct {
		cache, rv string
		want      bool
	}{{"100", "101", true}, {"101", "101", false}, {"102", "101", false}, {"", "101", false}, {"100", "x", false}} {
		if got := olderThan(c.cache, c.rv); got != c.want {
			t.Errorf("olderThan(%q, %q) = %v", c.cache, c.rv, got)
		}
	}
}

func (f *fixture) lastGood() map[string]string {
	f.t.Helper()
	data, err := ReadLastGood(f.ctx, f.kube, testNS, testName)
	if err != nil {
		f.t.Fatal(err)
	}
	return data
}

// The last valid document applied is kept beside the global ConfigMap;
// an invalid edit doesn't replace it, and an unchanged one isn't written
// again.
func TestSyncStoresTheLastGoodDocument(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	if got := f.lastGood()[document.DataKey]; got != docV1 {
		t.Fatalf("last good %q, want the applied document", got)
	}
	f.putConfig("gizp: {}\n")
	f.mustSync()
	if got := f.lastGood()[document.DataKey]; got != docV1 {
		t.Errorf("an invalid edit replaced the last good document: %q", got)
	}
	f.putConfig("# a comment\n" + docV1)
	f.kube.ClearActions()
	f.mustSync()
	for _, a := range f.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetName() == LastGoodName(testName) {
			t.Errorf("a document that renders the same set rewrote the last good copy")
		}
	}
	f.putConfig("gzip: {chunkSize: 16384}\n")
	f.mustSync()
	if got := f.lastGood()[document.DataKey]; got != "gzip: {chunkSize: 16384}\n" {
		t.Errorf("last good %q after a valid edit", got)
	}
}

// A controller that starts while the document is invalid keeps, and
// restores on drift, the stored last good set, not nothing.
func TestSyncRestartWithAnInvalidDocumentRestoresTheLastGood(t *testing.T) {
	f := newFixture(t, Config{})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	f.ctrl.st = state{} // a restart
	f.putConfig("gzip: {chunkSize: 1}\n")
	if err := f.istio.NetworkingV1alpha3().EnvoyFilters(testNS).Delete(f.ctx, "globalconfig-gzip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deliver()
	f.mustSync()
	f.wantLive(docV1)
	if s := f.status(); s.State != status.Invalid {
		t.Errorf("status %v", s)
	}
}

// The status says whether admission guards the ConfigMap; a Warning Event
// says so once per distinct reason, and again after it was guarded.
func TestSyncReportsAdmission(t *testing.T) {
	reason := "its objectSelector (globalconfig.io/validate=true) does not select the ConfigMap's labels"
	f := newFixture(t, Config{Admission: func(_ context.Context, cm *corev1.ConfigMap) status.Admission {
		if cm.Name != testName {
			t.Errorf("asked about %s", cm.Name)
		}
		if reason == "" {
			return status.Admission{Guarded: true}
		}
		return status.Admission{Reason: reason}
	}})
	notGuarding := func() int {
		n := 0
		for _, e := range f.events() {
			if strings.Contains(e, "Warning AdmissionNotGuarding") {
				n++
			}
		}
		return n
	}
	f.putConfig(docV1)
	f.mustSync()
	if s := f.status(); s.Admission == nil || s.Admission.Guarded || s.Admission.Reason != reason {
		t.Errorf("admission %+v", s.Admission)
	}
	f.mustSync() // a resync: not announced again
	if n := notGuarding(); n != 1 {
		t.Errorf("%d AdmissionNotGuarding events, want 1", n)
	}
	reason = ""
	f.mustSync()
	if s := f.status(); s.Admission == nil || !s.Admission.Guarded || s.Admission.Reason != "" {
		t.Errorf("guarded: admission %+v", s.Admission)
	}
	reason = "the ValidatingWebhookConfiguration globalconfig does not exist"
	f.mustSync()
	if n := notGuarding(); n != 1 {
		t.Errorf("after the webhook configuration went: %d new events, want 1", n)
	}
	// Without a webhook served at all, the status says so.
	g := newFixture(t, Config{Sink: SinkMCP})
	g.ctrl.cfg.Admission = nil
	g.putConfig(docV1)
	g.mustSync()
	if s := g.status(); s.Admission == nil || s.Admission.Guarded || s.Admission.Reason != NoWebhook {
		t.Errorf("no webhook: admission %+v", s.Admission)
	}
}

// A new term whose status already says admission is not guarding, for the
// same reason, announces nothing: a restart writes nothing.
func TestRestartDoesNotAnnounceAdmissionAgain(t *testing.T) {
	notGuarded := func(context.Context, *corev1.ConfigMap) status.Admission {
		return status.Admission{Reason: "no webhook"}
	}
	f := newFixture(t, Config{Admission: notGuarded})
	f.putConfig(docV1)
	f.mustSync()
	f.deliver()
	if n := len(f.events()); n != 2 { // Applied, AdmissionNotGuarding
		t.Fatalf("%d events at the first sync", n)
	}
	f.ctrl.st = state{} // a new term
	f.mustSync()
	if events := f.events(); len(events) != 0 {
		t.Errorf("a restart announced again: %q", events)
	}
}
