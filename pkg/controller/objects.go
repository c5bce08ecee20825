package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// liveFilter is a managed EnvoyFilter as the informer cache shows it.
type liveFilter struct {
	*clientnetworking.EnvoyFilter
}

// equals reports whether the live object already is d: the labels and
// content hash annotation are there, and the spec itself hashes to d's
// hash (so an edit that kept the annotation is still seen as drift).
func (l liveFilter) equals(d *envoyfilter.Object) bool {
	if l.Labels[envoyfilter.LabelManagedBy] != envoyfilter.ManagedByValue ||
		l.Labels[envoyfilter.LabelItem] != d.Item() ||
		l.Annotations[envoyfilter.AnnotationContentHash] != d.Hash() {
		return false
	}
	h, err := envoyfilter.SpecHash(&l.Spec)
	return err == nil && h == d.Hash()
}

// applyBody is the server-side apply body of d.
func applyBody(d *envoyfilter.Object) ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode envoyfilter %s: %w", d.Metadata.Name, err)
	}
	return b, nil
}

// readStatus loads the status ConfigMap once, so a restart that finds the
// same state writes nothing.
func (c *Controller) readStatus(ctx context.Context) error {
	if c.st.statusRead {
		return nil
	}
	cm, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Get(ctx, StatusName(c.cfg.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.st.status = map[string]string{}
	case err != nil:
		return fmt.Errorf("read status configmap: %w", err)
	default:
		c.st.status = maps.Clone(cm.Data)
		if c.st.status == nil {
			c.st.status = map[string]string{}
		}
	}
	c.st.statusRead = true
	return nil
}

// writeStatus applies the status ConfigMap unless it already says data.
func (c *Controller) writeStatus(ctx context.Context, data map[string]string) error {
	if maps.Equal(data, c.st.status) {
		return nil
	}
	cm := applycorev1.ConfigMap(StatusName(c.cfg.Name), c.cfg.Namespace).
		WithLabels(map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}).
		WithData(data)
	if _, err := c.kube.CoreV1().ConfigMaps(c.cfg.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: c.cfg.FieldManager, Force: true}); err != nil {
		return fmt.Errorf("write status configmap: %w", err)
	}
	c.metrics.APIWrites.WithLabelValues("apply", "configmaps").Inc()
	c.st.status = maps.Clone(data)
	return nil
}
