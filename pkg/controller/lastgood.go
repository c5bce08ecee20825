package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// The last good document survives restarts in every sink. The leader keeps
// a copy of the last valid document it applied in the ConfigMap
// LastGoodName(name), beside the global one: the same text, so the same
// exposure as the ConfigMap users edit (it is not the status: a document
// may hold a token). A controller or MCP publisher that starts while the
// global ConfigMap's document is invalid renders that copy instead, so the
// proxies keep the last good set: the kube sink restores it on drift, and
// the MCP sink serves it to istiod from its first answer on.

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

// lastGoodData reads the stored last good document once a term, for both
// the decision on an invalid document and a canary's stable set.
func (c *Controller) lastGoodData(ctx context.Context) (map[string]string, error) {
	if c.st.lastGoodRead {
		return c.st.lastGood, nil
	}
	data, err := ReadLastGood(ctx, c.kube, c.cfg.Namespace, c.cfg.Name)
	if err != nil {
		return nil, err
	}
	c.st.lastGood, c.st.lastGoodRead = data, true
	return data, nil
}

// storeLastGood keeps cm's document as the last good one, unless the copy
// already renders to set.
func (c *Controller) storeLastGood(ctx context.Context, cm *corev1.ConfigMap, set []*envoyfilter.Object) error {
	hash := render.SetHash(set)
	if hash == c.st.lastGoodHash {
		return nil
	}
	if c.st.lastGoodHash == "" {
		// Once a term: what is stored already?
		stored, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, LastGoodName(c.cfg.Name), metav1.GetOptions{})
		if err == nil && stored.Annotations[AnnotationSetHash] == hash && stored.Data[document.DataKey] == cm.Data[document.DataKey] {
			c.st.lastGoodHash = hash
			return nil
		}
	}
	apply := applycorev1.ConfigMap(LastGoodName(c.cfg.Name), c.cfg.Namespace).
		WithLabels(map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}).
		WithAnnotations(map[string]string{AnnotationSetHash: hash}).
		WithData(map[string]string{document.DataKey: cm.Data[document.DataKey]})
	if _, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: c.cfg.FieldManager, Force: true}); err != nil {
		return fmt.Errorf("write %s: %w", LastGoodName(c.cfg.Name), err)
	}
	c.metrics.APIWrites.WithLabelValues("apply", "configmaps").Inc()
	c.st.lastGoodHash = hash
	c.st.lastGood, c.st.lastGoodRead = map[string]string{document.DataKey: cm.Data[document.DataKey]}, true
	return nil
}
