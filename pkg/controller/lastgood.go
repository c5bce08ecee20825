package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// The last good document survives restarts in every sink. The leader keeps
// a copy of the last valid document the proxies took in the ConfigMap
// LastGoodName(name), beside the global one: the same text, so the same
// exposure as the ConfigMap users edit (it is not the status: a document
// may hold a token), annotated with the hash of the set it rendered to. A
// controller or MCP publisher that starts while the global ConfigMap's
// document is invalid renders that copy instead, so the proxies keep the
// last good set: the kube sink restores it on drift, and the MCP sink
// serves it to istiod from its first answer on.
//
// A copy is the rollback set only when it renders to exactly the set the
// rollout needs: a hand-edited copy, one a failed write left stale, or one
// that no longer renders is not used, and the status says so
// (lastGood.problem). Writes carry the copy's resourceVersion, so a
// replica that lost its lease can't overwrite what the new leader wrote.

// LastGoodName is the name of the ConfigMap holding the last good copy of
// the ConfigMap name.
func LastGoodName(name string) string { return name + "-last-good" }

// AnnotationSetHash is the hash of the EnvoyFilter set the last good
// document rendered to when it was stored.
const AnnotationSetHash = "globalconfig.io/set-hash"

// ReadLastGood reads the last good document of the ConfigMap
// namespace/name: its data (the document under document.DataKey), or nil
// when none was stored.
func ReadLastGood(ctx context.Context, kube kubernetes.Interface, namespace, name string) (map[string]string, error) {
	cm, err := kube.CoreV1().ConfigMaps(namespace).Get(ctx, LastGoodName(name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", LastGoodName(name), err)
	}
	return cm.Data, nil
}

// errNotLeading refuses a write of a replica that no longer holds the
// lease.
var errNotLeading = errors.New("this replica no longer leads: the write is left to the elected one")

// fenced is errNotLeading when this replica no longer leads.
func (c *Controller) fenced() error {
	if c.cfg.Leading != nil && !c.cfg.Leading() {
		return errNotLeading
	}
	return nil
}

// readLastGood reads the stored copy once a term: its data (nil when none
// is stored), the hash it was stored for and its resourceVersion.
func (c *Controller) readLastGood(ctx context.Context) error {
	if c.st.lastGoodRead {
		return nil
	}
	cm, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, LastGoodName(c.cfg.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.st.lastGood, c.st.lastGoodHash, c.st.lastGoodRV = nil, "", ""
	case err != nil:
		return fmt.Errorf("read %s: %w", LastGoodName(c.cfg.Name), err)
	default:
		c.st.lastGood, c.st.lastGoodHash, c.st.lastGoodRV = cm.Data, cm.Annotations[AnnotationSetHash], cm.ResourceVersion
	}
	c.st.lastGoodRead = true
	return nil
}

// lastGoodData reads the stored last good document once a term, for the
// decision on an invalid document.
func (c *Controller) lastGoodData(ctx context.Context) (map[string]string, error) {
	if err := c.readLastGood(ctx); err != nil {
		return nil, err
	}
	return c.st.lastGood, nil
}

// lastGoodSet is the set the stored copy renders to, or nil with why: none
// is stored, or it no longer renders. A copy that renders to another set
// than the one it was stored for is returned, with the problem noted: the
// caller uses it only when its hash is the one it needs.
func (c *Controller) lastGoodSet(ctx context.Context) (*canary.Set, string, error) {
	if err := c.readLastGood(ctx); err != nil {
		return nil, "", err
	}
	data := c.st.lastGood
	if data == nil {
		why := "no last good copy is stored (" + LastGoodName(c.cfg.Name) + " is missing)"
		if prev := c.st.status; prev != nil && prev.LastGood != nil {
			c.st.lastGoodProblem = "missing: it was stored for set " + prev.LastGood.Hash + ", and is gone"
		}
		return nil, why, nil
	}
	// A renderer of its own: rendering the old document must not evict
	// the current one's built items from the shared cache.
	res := render.New().FromConfigMap(data)
	if !res.Valid() {
		why := "the last good copy " + LastGoodName(c.cfg.Name) + " no longer renders: " + c.scrub(render.Describe(res.Problems[:1], ""))
		c.st.lastGoodProblem = "it no longer renders (after an upgrade, or a hand edit)"
		return nil, why, nil
	}
	set := &canary.Set{Objects: res.Objects, Hash: render.SetHash(res.Objects)}
	if c.st.lastGoodHash != "" && c.st.lastGoodHash != set.Hash {
		c.st.lastGoodProblem = fmt.Sprintf("it renders to set %s, not to the set %s it was stored for (a hand edit, or a release that renders it otherwise)", set.Hash, c.st.lastGoodHash)
	}
	return set, "", nil
}

// stableFromLastGoodCheck is a Direct rollout's stable set from the
// stored copy: only when it renders to the set it was stored for (and
// that the status says was stored); nil otherwise.
func (c *Controller) directStable(set *canary.Set) *canary.Set {
	if set == nil {
		return nil
	}
	want := c.st.lastGoodHash
	if prev := c.st.status; prev != nil && prev.LastGood != nil && prev.LastGood.Hash != "" {
		want = prev.LastGood.Hash
	}
	if want != "" && want != set.Hash {
		return nil
	}
	return set
}

// storeLastGood keeps cm's document as the last good one, unless the copy
// already renders its set (and nothing is wrong with it): set is the
// document's own set (never a paired one).
// The write carries the copy's resourceVersion as read (or creates it),
// so it fails when another replica wrote it since.
func (c *Controller) storeLastGood(ctx context.Context, cm *corev1.ConfigMap, set []*envoyfilter.Object) error {
	hash := render.SetHash(set)
	text := cm.Data[document.DataKey]
	if err := c.readLastGood(ctx); err != nil {
		return err
	}
	if c.st.lastGood != nil && c.st.lastGoodHash == hash && c.st.lastGoodProblem == "" {
		return nil // the copy renders this very set already (a comment edit)
	}
	if err := c.fenced(); err != nil {
		return err
	}
	written, err := c.applyConfigMap(ctx, LastGoodName(c.cfg.Name), c.st.lastGoodRV, map[string]string{AnnotationSetHash: hash},
		map[string]string{document.DataKey: text})
	if err != nil {
		// Read it again next time: another replica may have written it.
		c.st.lastGoodRead = false
		c.st.lastGoodProblem = "the last write failed, so the copy may be older than set " + hash + ": " + c.scrub(err.Error())
		return fmt.Errorf("write %s: %w", LastGoodName(c.cfg.Name), err)
	}
	c.metrics.APIWrites.WithLabelValues("apply", "configmaps").Inc()
	c.st.lastGood, c.st.lastGoodHash, c.st.lastGoodRV, c.st.lastGoodRead = written.Data, hash, written.ResourceVersion, true
	c.st.lastGoodProblem = ""
	return nil
}

// lastGoodStatus is the status's lastGood: what is stored, and what is
// wrong with it.
func (c *Controller) lastGoodStatus() *status.LastGood {
	if !c.st.lastGoodRead && c.st.lastGoodProblem == "" {
		if prev := c.st.status; prev != nil {
			return prev.LastGood
		}
		return nil
	}
	if c.st.lastGoodHash == "" && c.st.lastGoodProblem == "" {
		return nil
	}
	return &status.LastGood{Hash: c.st.lastGoodHash, Problem: c.st.lastGoodProblem}
}
