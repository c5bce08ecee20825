package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// ConfigMapName is the global ConfigMap's name, in Namespace.
const ConfigMapName = "global-config"

// PutConfig creates or updates the global ConfigMap with doc.
func (c *Cluster) PutConfig(ctx context.Context, doc string) error {
	cms := c.Admin.CoreV1().ConfigMaps(Namespace)
	cm, err := cms.Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: Namespace},
			Data:       map[string]string{document.DataKey: doc},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = map[string]string{document.DataKey: doc}
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// Status reads the status the controller wrote for the test ConfigMap.
func (c *Cluster) Status(ctx context.Context) (*status.Status, error) {
	cm, err := c.Admin.CoreV1().ConfigMaps(Namespace).Get(ctx, status.ConfigMapName(ConfigMapName), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return status.Read(cm.Data)
}

// WaitRollout waits up to bound until the status ConfigMap's rollout is of
// the applied set and satisfies cond, and returns it; the error carries the
// last status seen.
func (c *Cluster) WaitRollout(ctx context.Context, bound time.Duration, cond func(*rollout.Status) bool) (*rollout.Status, error) {
	var last *rollout.Status
	var lastErr error
	ok := Eventually(ctx, bound, func() bool {
		st, err := c.Status(ctx)
		if err != nil {
			lastErr = err
			return false
		}
		if st.Rollout == nil {
			lastErr = errors.New("no rollout yet; summary: " + st.RolloutSummary)
			return false
		}
		last, lastErr = st.Rollout, nil
		return st.Applied != nil && st.Rollout.Version == st.Applied.Hash && cond(st.Rollout)
	})
	if !ok {
		return last, fmt.Errorf("not within %v (last status %+v, error %v)", bound, last, lastErr)
	}
	return last, nil
}

// ExampleDocument is the config.yaml of deploy/examples/global-config.yaml.
func ExampleDocument() (string, error) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy", "examples", "global-config.yaml"))
	if err != nil {
		return "", err
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return "", err
	}
	return cm.Data[document.DataKey], nil
}
