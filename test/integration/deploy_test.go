package integration

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
)

// deploy/ and its MCP overlay render with kubectl's kustomize and are
// accepted by the API server (server-side dry run), and the sidecar patch
// adds globalconfig to an istiod Deployment as a native sidecar.
func TestDeployManifests(t *testing.T) {
	f := setup(t)
	root := harness.RepoRoot()
	for _, dir := range []string{"deploy", "deploy/overlays/mcp", "deploy/overlays/cert-manager"} {
		out, err := cluster.Kubectl(f.ctx, nil, "kustomize", filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		if dir == "deploy/overlays/cert-manager" {
			// cert-manager's CRDs are not installed here; check the rendering.
			if !strings.Contains(out, "cert-manager.io/inject-ca-from: istio-system/globalconfig-webhook") || !strings.Contains(out, "--webhook-manage-cert=false") {
				t.Errorf("%s renders without the CA injection or the flag:\n%s", dir, out)
			}
			continue
		}
		if _, err := cluster.Kubectl(f.ctx, []byte(out), "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		hasDeployment := strings.Contains(out, "kind: Deployment")
		if hasDeployment != (dir == "deploy") {
			t.Errorf("%s: standalone Deployment present = %v", dir, hasDeployment)
		}
		if dir == "deploy/overlays/mcp" && strings.Contains(out, "ValidatingWebhookConfiguration") {
			t.Errorf("%s ships a webhook configuration that nothing serves", dir)
		}
		if dir != "deploy" && !strings.Contains(out, "name: istiod") {
			t.Errorf("%s: RBAC is not granted to istiod's ServiceAccount:\n%s", dir, out)
		}
	}

	istiod := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "istio/pilot"}}},
			},
		},
	}
	if _, err := cluster.Admin.AppsV1().Deployments(ns).Create(f.ctx, istiod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Admin.AppsV1().Deployments(ns).Delete(f.ctx, "istiod", metav1.DeleteOptions{}) })
	if _, err := cluster.Kubectl(f.ctx, nil, "patch", "deployment", "istiod", "-n", ns, "--patch-file", filepath.Join(root, "deploy", "overlays", "mcp", "istiod-sidecar.yaml")); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.Admin.AppsV1().Deployments(ns).Get(f.ctx, "istiod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "globalconfig" ||
		spec.InitContainers[0].RestartPolicy == nil || *spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways ||
		len(spec.Containers) != 1 || !strings.Contains(strings.Join(spec.InitContainers[0].Args, " "), "--sink=mcp") {
		t.Errorf("patched istiod pod spec: %+v", spec)
	}
}
