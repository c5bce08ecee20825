// Package integration tests `globalconfig run` against a real kube-apiserver
// and etcd, running the built controller binary as the ServiceAccount user
// that deploy/base/rbac.yaml binds.
package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
	"github.com/globalconfig/globalconfig/test/harness"
)

var (
	cluster    *harness.Cluster
	controlBin string
	setupErr   error
)

const (
	ns        = harness.Namespace
	cmName    = "global-config"
	leaseName = "globalconfig"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "globalconfig-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	if controlBin, setupErr = harness.BuildController(dir, raceEnabled); setupErr == nil {
		cluster, setupErr = harness.StartCluster(ctx, dir)
	}
	if cluster != nil {
		defer cluster.Stop()
	}
	return m.Run()
}

// fixture is one test's view of the shared cluster; it leaves the cluster
// clean for the next test.
type fixture struct {
	t   testing.TB
	ctx context.Context
}

func setup(t testing.TB) *fixture {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("test cluster: %v", setupErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	f := &fixture{t: t, ctx: ctx}
	t.Cleanup(func() {
		f.reset()
		cancel()
	})
	f.reset()
	return f
}

// reset deletes everything a test may have left.
func (f *fixture) reset() {
	ctx := context.Background()
	cms := cluster.Admin.CoreV1().ConfigMaps(ns)
	for _, name := range []string{cmName, status.ConfigMapName(cmName)} {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			f.t.Logf("reset: %v", err)
		}
	}
	efs, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err == nil {
		for _, ef := range efs.Items {
			_ = cluster.Istio.NetworkingV1alpha3().EnvoyFilters(ef.Namespace).Delete(ctx, ef.Name, metav1.DeleteOptions{})
		}
	}
	_ = cluster.Admin.CoordinationV1().Leases(ns).Delete(ctx, leaseName, metav1.DeleteOptions{})
}

// start runs a controller for the rest of the test. There is no istiod
// here, so rollout tracking is off (test/e2e proves it).
func (f *fixture) start(name string, args ...string) *harness.Controller {
	f.t.Helper()
	ctl, err := cluster.StartController(controlBin, name, append([]string{"--rollout=false"}, args...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctl.Kill()
		if f.t.Failed() {
			f.t.Logf("%s log:\n%s", name, ctl.Log(6000))
		}
	})
	return ctl
}

// put creates or updates the global ConfigMap with doc.
func (f *fixture) put(doc string) {
	f.t.Helper()
	cms := cluster.Admin.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(f.ctx, cmName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(f.ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: ns},
			Data:       map[string]string{document.DataKey: doc},
		}, metav1.CreateOptions{})
	} else if err == nil {
		cm.Data = map[string]string{document.DataKey: doc}
		_, err = cms.Update(f.ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		f.t.Fatalf("put configmap: %v", err)
	}
}

// desired is what doc should produce: name → content hash.
func (f *fixture) desired(doc string) map[string]string {
	f.t.Helper()
	d, err := document.Parse([]byte(doc))
	if err != nil {
		f.t.Fatalf("test document invalid: %v", err)
	}
	objs, err := render.Desired(d)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		out[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Hash()
	}
	return out
}

// live returns the managed EnvoyFilters: name → content hash, and
// name → resourceVersion.
func (f *fixture) live() (hashes, versions map[string]string) {
	f.t.Helper()
	efs, err := cluster.Istio.NetworkingV1alpha3().EnvoyFilters("").List(f.ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
	if err != nil {
		f.t.Fatal(err)
	}
	hashes, versions = map[string]string{}, map[string]string{}
	for _, ef := range efs.Items {
		key := ef.Namespace + "/" + ef.Name
		h, err := envoyfilter.SpecHash(&ef.Spec)
		if err != nil {
			f.t.Fatal(err)
		}
		if ef.Annotations[envoyfilter.AnnotationContentHash] != h {
			h = "annotation-mismatch:" + h
		}
		hashes[key], versions[key] = h, ef.ResourceVersion
	}
	return hashes, versions
}

// waitLive waits until the live set equals want.
func (f *fixture) waitLive(want map[string]string, timeout time.Duration) {
	f.t.Helper()
	var got map[string]string
	if !harness.Eventually(f.ctx, timeout, func() bool {
		got, _ = f.live()
		return maps.Equal(got, want)
	}) {
		f.t.Fatalf("live EnvoyFilters never matched:\n got %v\nwant %v", got, want)
	}
}

// metrics scrapes ctl, failing the test on error.
func (f *fixture) metrics(ctl *harness.Controller) map[string]float64 {
	f.t.Helper()
	m, err := ctl.Metrics(f.ctx)
	if err != nil {
		f.t.Fatalf("scrape metrics: %v", err)
	}
	return m
}

// reconciles is how many syncs ctl has finished.
func (f *fixture) reconciles(ctl *harness.Controller) float64 {
	m, err := ctl.Metrics(f.ctx)
	if err != nil {
		return -1
	}
	return harness.Sum(m, "globalconfig_reconcile_total")
}

// waitReconciledPast waits until ctl has finished more than n syncs.
func (f *fixture) waitReconciledPast(ctl *harness.Controller, n float64) {
	f.t.Helper()
	if !harness.Eventually(f.ctx, 30*time.Second, func() bool { return f.reconciles(ctl) > n }) {
		f.t.Fatalf("controller did not reconcile past %v", n)
	}
}

// waitLeader waits until ctl leads.
func (f *fixture) waitLeader(ctl *harness.Controller, timeout time.Duration) {
	f.t.Helper()
	if !harness.Eventually(f.ctx, timeout, func() bool {
		m, err := ctl.Metrics(f.ctx)
		return err == nil && m["globalconfig_leader"] == 1
	}) {
		f.t.Fatalf("%s never became leader", ctl.Name)
	}
}

// status returns the status the controller wrote.
func (f *fixture) status() *status.Status {
	f.t.Helper()
	st, err := f.readStatus()
	if err != nil {
		f.t.Fatalf("status: %v", err)
	}
	return st
}

func (f *fixture) readStatus() (*status.Status, error) {
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(f.ctx, status.ConfigMapName(cmName), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return status.Read(cm.Data)
}

// waitStatus waits until the status satisfies cond.
func (f *fixture) waitStatus(cond func(*status.Status) bool) {
	f.t.Helper()
	var last *status.Status
	if !harness.Eventually(f.ctx, 10*time.Second, func() bool {
		st, err := f.readStatus()
		if err != nil {
			return false
		}
		last = st
		return cond(st)
	}) {
		f.t.Fatalf("status never became as expected; last: %+v", last)
	}
}

// problems are a status's errors, one per line, as people read them.
func problems(st *status.Status) string {
	var lines []string
	for _, p := range st.Errors {
		lines = append(lines, p.String())
	}
	return strings.Join(lines, "\n")
}

func (f *fixture) statusVersion() string {
	cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(f.ctx, status.ConfigMapName(cmName), metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.ResourceVersion
}

// events lists the Events on the global ConfigMap with reason.
func (f *fixture) events(reason string) []corev1.Event {
	f.t.Helper()
	list, err := cluster.Admin.CoreV1().Events(ns).List(f.ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + cmName + ",reason=" + reason,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

// writes is the controller's count of API writes, every verb and resource.
func writes(m map[string]float64) float64 { return harness.Sum(m, "globalconfig_api_writes_total") }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
