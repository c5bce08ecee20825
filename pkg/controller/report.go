package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/decide"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// report tells what a sync did: metrics, Events on the ConfigMap and the
// status ConfigMap. applyErr is the converge error, returned after it is
// reported.
func (c *Controller) report(ctx context.Context, cm *corev1.ConfigMap, d decide.Decision, writes []string, applyErr error) error {
	status := c.statusOf(d)
	switch {
	case !d.Valid():
		c.metrics.ConfigValid.Set(0)
		c.warnInvalid(cm, d)
	default:
		c.metrics.ConfigValid.Set(1)
		c.st.warned = ""
	}
	if applyErr != nil {
		c.event(cm, corev1.EventTypeWarning, "ApplyFailed", "applying the EnvoyFilters failed: %v", applyErr)
		status["state"] = "ApplyFailed"
		status["message"] = c.scrub("applying the EnvoyFilters failed: " + applyErr.Error())
		if err := c.writeStatus(ctx, status); err != nil {
			c.log.Warn("status not written", "err", c.scrub(err.Error()))
		}
		return applyErr
	}
	if c.st.applied != nil {
		c.metrics.ManagedFilters.Set(float64(len(c.st.applied.Set)))
		if d.Valid() {
			c.metrics.LastApply.SetToCurrentTime()
		}
	}
	c.reportRollout(cm, status)
	if len(writes) > 0 {
		// The item diff says why, the writes what: a drift repair has no
		// item change but writes.
		why := d.Diff.String()
		if !d.Valid() {
			why = "kept the last good set"
		}
		c.event(cm, corev1.EventTypeNormal, "Applied", "%s: %s", why, strings.Join(writes, "; "))
		c.log.Info("converged", "items", why, "writes", writes)
	}
	return c.writeStatus(ctx, status)
}

// LastChangeItemsKey is the status key holding the last change's item
// diff as JSON (plan.Items): {"added":[…],"changed":[…],"removed":[…]}.
const LastChangeItemsKey = "lastChangeItems"

// statusOf is the status data for decision d.
func (c *Controller) statusOf(d decide.Decision) map[string]string {
	status := maps.Clone(c.st.status)
	status["state"] = "Applied"
	status["errors"] = ""
	status["warnings"] = render.Describe(d.Warnings, "\n")
	delete(status, "message")
	if !d.Valid() {
		status["state"] = "Invalid"
		status["errors"] = render.Describe(d.Problems, "\n")
		status["message"] = "the document was rejected; the last good EnvoyFilters are kept"
	}
	if a := c.st.applied; a != nil {
		names := make([]string, 0, len(a.Set))
		for _, o := range a.Set {
			names = append(names, o.Metadata.Namespace+"/"+o.Metadata.Name)
		}
		if hash := render.SetHash(a.Set); status["lastAppliedHash"] != hash {
			now := time.Now()
			status["lastAppliedHash"] = hash
			status["lastAppliedTime"] = now.UTC().Format(time.RFC3339)
			c.st.appliedHash, c.st.appliedAt = hash, now
			if !a.Diff.Empty() {
				status["lastChange"] = a.Diff.String()
				// The same diff for tools, typed: nothing reads the
				// sentence back.
				typed, err := json.Marshal(plan.ItemsOf(a.Diff))
				if err == nil {
					status[LastChangeItemsKey] = string(typed)
				}
			}
		}
		status["envoyFilters"] = strings.Join(names, "\n")
	}
	if c.cfg.StatusExtra != nil {
		for k, v := range c.cfg.StatusExtra() {
			status[k] = c.scrub(v)
		}
	}
	return status
}

// warnInvalid records a Warning Event with every problem, once per
// distinct list.
func (c *Controller) warnInvalid(cm *corev1.ConfigMap, d decide.Decision) {
	text := render.Describe(d.Problems, "; ")
	c.log.Warn("document rejected; keeping the last good EnvoyFilters", "problems", len(d.Problems), "first", d.Problems[0].Error())
	if text == c.st.warned {
		return
	}
	c.st.warned = text
	c.event(cm, corev1.EventTypeWarning, "InvalidConfig", "%d problem(s), last good EnvoyFilters kept: %s", len(d.Problems), text)
}

// event records an Event on the ConfigMap. Messages carry paths and
// problems; API errors quoted in them are scrubbed of secret values.
func (c *Controller) event(cm *corev1.ConfigMap, eventType, reason, format string, args ...any) {
	c.recorder.Event(cm, eventType, reason, c.scrub(fmt.Sprintf(format, args...)))
	c.metrics.APIWrites.WithLabelValues("create", "events").Inc()
}

func (c *Controller) scrub(msg string) string { return render.Scrub(msg, c.st.secrets) }

// readStatus loads the status ConfigMap once per term, so a restart that
// finds the same state writes nothing.
func (c *Controller) readStatus(ctx context.Context) error {
	if c.st.status != nil {
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
