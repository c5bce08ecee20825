package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// rolloutCommand is `globalconfig rollout promote|abort`: an operator's
// word on the canary phase in progress. It annotates the global ConfigMap
// (canary.AnnotationAction) for the phase's document; the controller acts
// on its next sync, and `globalconfig status` shows the outcome.
func rolloutCommand(args []string, env Env) int {
	if len(args) == 0 || (args[0] != "promote" && args[0] != "abort") {
		fmt.Fprintln(env.Stderr, "globalconfig rollout: say promote (skip the rest of the bake time) or abort (roll back now)")
		return ExitUsage
	}
	action := canary.Action(args[0])
	fs := flag.NewFlagSet("rollout "+args[0], flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var cf clusterFlags
	cf.define(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "globalconfig rollout %s: takes no arguments\n", action)
		return ExitUsage
	}
	cmd := "rollout " + string(action)
	ns, name, code := cf.check(cmd, env)
	if code != ExitOK {
		return code
	}
	kube, _, code := cf.connect(cmd, env)
	if code != ExitOK {
		return code
	}
	ctx := context.Background()
	statusName := status.ConfigMapName(name)
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, statusName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(env.Stderr, "globalconfig %s: %s (ConfigMap %s/%s not found)\n", cmd, NoStatusMessage, ns, statusName)
		return ExitNoStatus
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig %s: read configmap %s/%s: %v\n", cmd, ns, statusName, err)
		return ExitAPI
	}
	st, err := status.Read(cm.Data)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: ConfigMap %s/%s: %v\n", cmd, ns, statusName, err)
		return ExitNoStatus
	}
	r := st.Canary
	// A held phase (waiting to start) can be aborted, not promoted.
	if r == nil || !(r.Phase == canary.InCanary || r.Phase == canary.Held && action == canary.ActionAbort) {
		phase := "no canary rollout"
		if r != nil {
			phase = "the last one was " + string(r.Phase)
		}
		fmt.Fprintf(env.Stderr, "globalconfig %s: no canary phase in progress (%s)\n", cmd, phase)
		return ExitNoRollout
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		canary.AnnotationAction: r.Request(action)}}})
	if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		hint := ""
		if apierrors.IsForbidden(err) {
			hint = " (the operator's Role needs patch on this ConfigMap; see docs/rollout.md)"
		}
		fmt.Fprintf(env.Stderr, "globalconfig %s: annotate configmap %s/%s: %v%s\n", cmd, ns, name, err, hint)
		return ExitAPI
	}
	verb := map[canary.Action]string{canary.ActionPromote: "promote to every proxy", canary.ActionAbort: "roll back on every proxy"}[action]
	fmt.Fprintf(env.Stdout, "asked the controller to %s the change of document %s (%s); `globalconfig status` shows the outcome\n",
		verb, r.Document, strings.Join(r.Items, ", "))
	return ExitOK
}
