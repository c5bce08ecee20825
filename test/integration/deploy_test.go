package integration

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/test/harness"
)

// envoyOverlay is the overlay that gives the webhook the fleet's Envoy,
// and rateLimitOverlay the one that adds the rate-limit service.
const (
	envoyOverlay     = "deploy/overlays/envoy-admission"
	rateLimitOverlay = "deploy/overlays/ratelimit"
	// multiclusterOverlay is the home cluster's overlay of a multi-cluster
	// install, and memberDir a member cluster's RBAC.
	multiclusterOverlay = "deploy/overlays/multicluster"
	memberDir           = "deploy/member"
	// memberSecretsRole lets the controller list and watch the member
	// Secrets.
	memberSecretsRole = "globalconfig-member-secrets"
)

// deploy/ and its overlays render with kubectl's kustomize and are
// accepted by the API server (server-side dry run), the envoy-admission
// overlay adds to deploy/'s Deployment only istio-proxy's Envoy, and the
// sidecar patch adds globalconfig to an istiod Deployment as a native
// sidecar. The multicluster overlay adds to deploy/ only --member-secrets,
// --cluster-name and the Role that lists and watches Secrets; deploy/member
// is accepted too.
func TestDeployManifests(t *testing.T) {
	f := setup(t)
	root := harness.RepoRoot()
	var base string
	for _, dir := range []string{"deploy", "deploy/overlays/mcp", "deploy/overlays/cert-manager", envoyOverlay, rateLimitOverlay, multiclusterOverlay, memberDir} {
		out, err := cluster.Kubectl(f.ctx, nil, "kustomize", filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		if dir == "deploy" {
			base = out
		}
		if dir == "deploy/overlays/cert-manager" {
			// cert-manager's CRDs are not installed here; check the rendering.
			if !strings.Contains(out, "cert-manager.io/inject-ca-from: istio-system/globalconfig-webhook") || !strings.Contains(out, "--webhook-manage-cert=false") {
				t.Errorf("%s renders without the CA injection or the flag:\n%s", dir, out)
			}
			continue
		}
		if dir == rateLimitOverlay {
			// Its namespace, which a dry run does not create.
			if _, err := cluster.Kubectl(f.ctx, nil, "create", "namespace", "ratelimit"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
				t.Fatal(err)
			}
		}
		if _, err := cluster.Kubectl(f.ctx, []byte(out), "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		switch dir {
		case multiclusterOverlay:
			checkMulticlusterOverlay(t, out, base)
			continue
		case memberDir:
			// TestMemberRBACMatchesDeploy (pkg/cli) keeps it equal to what
			// create-member-secret creates; TestCreateMemberSecret runs that.
			if strings.Contains(out, "kind: Deployment") {
				t.Errorf("%s runs something in the member:\n%s", dir, out)
			}
			continue
		}
		if dir == rateLimitOverlay {
			for _, want := range []string{"--ratelimit-config-addr=:18000", "name: globalconfig-ratelimit-config", "CONFIG_GRPC_XDS_SERVER_URL", "value: globalconfig-ratelimit-config.istio-system.svc.cluster.local:18000", "image: envoyproxy/ratelimit:", "image: redis:"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s lacks %q", dir, want)
				}
			}
			continue
		}
		hasDeployment := strings.Contains(out, "kind: Deployment")
		if hasDeployment != (dir == "deploy" || dir == envoyOverlay) {
			t.Errorf("%s: standalone Deployment present = %v", dir, hasDeployment)
		}
		if dir == "deploy/overlays/mcp" && strings.Contains(out, "ValidatingWebhookConfiguration") {
			t.Errorf("%s ships a webhook configuration that nothing serves", dir)
		}
		if dir == envoyOverlay {
			checkEnvoyOverlay(t, out, base)
			continue
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

// checkEnvoyOverlay checks that deploy/overlays/envoy-admission's
// Deployment is deploy/'s with istio-proxy's Envoy: an init container of
// istio/proxyv2 at a pinned tag whose script copies the Envoy, with the
// loader and libraries it needs, into the emptyDir the controller runs it
// from with --envoy, and /tmp writable for the configurations it checks.
// The script is run for real on the Envoy `make tools` installs.
func checkEnvoyOverlay(t *testing.T, overlay, base string) {
	t.Helper()
	got := decode[appsv1.Deployment](t, parseStream(t, []byte(overlay)), "Deployment/globalconfig")
	want := decode[appsv1.Deployment](t, parseStream(t, []byte(base)), "Deployment/globalconfig")
	pod, ctr := got.Spec.Template.Spec, got.Spec.Template.Spec.Containers[0]
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers: %+v", pod.InitContainers)
	}
	ic := pod.InitContainers[0]
	repo, tag, _ := strings.Cut(ic.Image, ":")
	if repo != "docker.io/istio/proxyv2" || tag == "" || tag == "latest" {
		t.Errorf("init container image %q: want istio/proxyv2 at a pinned tag (the fleet's)", ic.Image)
	}
	if len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].Name != "envoy" || ic.VolumeMounts[0].MountPath != "/shared" {
		t.Errorf("init container mounts %+v", ic.VolumeMounts)
	}
	if !reflect.DeepEqual(ic.SecurityContext, want.Spec.Template.Spec.Containers[0].SecurityContext) {
		t.Errorf("init container securityContext %+v, want the controller's", ic.SecurityContext)
	}
	if wantArgs := append(slices.Clone(want.Spec.Template.Spec.Containers[0].Args), "--envoy=/shared/envoy"); !slices.Equal(ctr.Args, wantArgs) {
		t.Errorf("args %q, want %q", ctr.Args, wantArgs)
	}
	mounts := []corev1.VolumeMount{{Name: "envoy", MountPath: "/shared", ReadOnly: true}, {Name: "tmp", MountPath: "/tmp"}}
	if !reflect.DeepEqual(ctr.VolumeMounts[:2], mounts) {
		t.Errorf("controller mounts %+v, want %+v first", ctr.VolumeMounts, mounts)
	}
	for _, v := range pod.Volumes[:2] {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil {
			t.Errorf("volume %s: %+v, want a bounded emptyDir", v.Name, v.VolumeSource)
		}
	}
	// Nothing else differs from deploy/'s.
	pod.InitContainers, pod.Volumes = nil, pod.Volumes[2:]
	ctr.Args, ctr.VolumeMounts = ctr.Args[:len(ctr.Args)-1], ctr.VolumeMounts[2:]
	pod.Containers = []corev1.Container{ctr}
	if !reflect.DeepEqual(pod, want.Spec.Template.Spec) {
		t.Errorf("the overlay changes more of the pod than the Envoy:\n got %+v\nwant %+v", pod, want.Spec.Template.Spec)
	}

	// The script, on the Envoy `make tools` installs instead of
	// /usr/local/bin/envoy, and a directory instead of /shared.
	real, err := harness.EnvoyBinary(context.Background(), harness.EnvEnvoy, harness.EnvEnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	if len(ic.Command) != 3 || ic.Command[0] != "sh" || ic.Command[1] != "-c" || !strings.Contains(ic.Command[2], "/usr/local/bin/envoy") {
		t.Fatalf("init container command %q", ic.Command)
	}
	script := strings.NewReplacer("/usr/local/bin/envoy", real.Path, "/shared", shared).Replace(ic.Command[2])
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the init container's script: %v\n%s", err, out)
	}
	interp := elfInterpreter(t, real.Path)
	if _, err := os.Stat(filepath.Join(shared, envoybin.LibDir, filepath.Base(interp))); err != nil {
		t.Errorf("the script did not copy Envoy's loader %s: %v", interp, err)
	}
	copied, err := envoybin.Open(context.Background(), filepath.Join(shared, "envoy"))
	if err != nil || copied.Version != real.Version {
		t.Errorf("the copied Envoy: %+v, %v", copied, err)
	}
}

// checkEnvoyAdmission checks that the chart's Deployment with
// envoyAdmission carries what deploy/overlays/envoy-admission adds.
func checkEnvoyAdmission(t *testing.T, chart, overlay *appsv1.Deployment) {
	t.Helper()
	got, want := chart.Spec.Template.Spec, overlay.Spec.Template.Spec
	if !reflect.DeepEqual(got.InitContainers, want.InitContainers) {
		t.Errorf("init containers:\n got %+v\nwant %+v (%s)", got.InitContainers, want.InitContainers, envoyOverlay)
	}
	if !reflect.DeepEqual(got.Volumes, want.Volumes) {
		t.Errorf("volumes:\n got %+v\nwant %+v (%s)", got.Volumes, want.Volumes, envoyOverlay)
	}
	if !reflect.DeepEqual(got.Containers[0].VolumeMounts, want.Containers[0].VolumeMounts) {
		t.Errorf("controller mounts:\n got %+v\nwant %+v (%s)", got.Containers[0].VolumeMounts, want.Containers[0].VolumeMounts, envoyOverlay)
	}
	if !slices.Contains(want.Containers[0].Args, "--envoy=/shared/envoy") {
		t.Errorf("%s runs without --envoy=/shared/envoy: %q", envoyOverlay, want.Containers[0].Args)
	}
}

// elfInterpreter is the dynamic loader an ELF binary names.
func elfInterpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	t.Fatalf("%s names no dynamic loader", path)
	return ""
}

// checkMulticlusterOverlay checks that deploy/overlays/multicluster is
// deploy/ plus --member-secrets and --cluster-name on the controller and a
// Role, bound to the controller's ServiceAccount, that lists and watches
// Secrets in its namespace: the watcher selects them by label, which RBAC
// can't narrow.
func checkMulticlusterOverlay(t *testing.T, overlay, base string) {
	t.Helper()
	got, want := parseStream(t, []byte(overlay)), parseStream(t, []byte(base))
	wantKeys := append(slices.Collect(maps.Keys(want)), "Role/"+memberSecretsRole, "RoleBinding/"+memberSecretsRole)
	slices.Sort(wantKeys)
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, wantKeys) {
		t.Errorf("%s objects:\n got %v\nwant %v", multiclusterOverlay, keys, wantKeys)
	}
	for key, raw := range want {
		if key != "Deployment/globalconfig" && !bytes.Equal(got[key], raw) {
			t.Errorf("%s changes %s", multiclusterOverlay, key)
		}
	}
	baseDeployment := decode[appsv1.Deployment](t, want, "Deployment/globalconfig")
	if args := multiclusterArgs(t, got, baseDeployment); !slices.Equal(args, []string{"--member-secrets", "--cluster-name=" + members.DefaultHome}) {
		t.Errorf("%s adds the args %q", multiclusterOverlay, args)
	}
	d := decode[appsv1.Deployment](t, got, "Deployment/globalconfig")
	d.Spec.Template.Spec.Containers[0].Args = baseDeployment.Spec.Template.Spec.Containers[0].Args
	if !reflect.DeepEqual(d, baseDeployment) {
		t.Errorf("%s changes the Deployment beyond its args", multiclusterOverlay)
	}
	role := decode[rbacv1.Role](t, got, "Role/"+memberSecretsRole)
	if wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}}}; !reflect.DeepEqual(role.Rules, wantRules) || role.Namespace != ns {
		t.Errorf("Role %s/%s rules %+v, want %+v", role.Namespace, role.Name, role.Rules, wantRules)
	}
	binding := decode[rbacv1.RoleBinding](t, got, "RoleBinding/"+memberSecretsRole)
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != memberSecretsRole ||
		!reflect.DeepEqual(binding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "globalconfig", Namespace: ns}}) {
		t.Errorf("RoleBinding %s: %+v to %+v", memberSecretsRole, binding.RoleRef, binding.Subjects)
	}
}

// multiclusterArgs is what deploy/overlays/multicluster (objs, rendered)
// adds to the args of deploy/base's Deployment.
func multiclusterArgs(t *testing.T, objs objects, base *appsv1.Deployment) []string {
	t.Helper()
	args := decode[appsv1.Deployment](t, objs, "Deployment/globalconfig").Spec.Template.Spec.Containers[0].Args
	baseArgs := base.Spec.Template.Spec.Containers[0].Args
	if len(args) < len(baseArgs) || !slices.Equal(args[:len(baseArgs)], baseArgs) {
		t.Fatalf("%s args %q do not start with deploy/base's %q", multiclusterOverlay, args, baseArgs)
	}
	return args[len(baseArgs):]
}

// checkMemberSecretsRole checks that the chart's Role for the member
// Secrets and its binding are the overlay's.
func checkMemberSecretsRole(t *testing.T, chart, overlay objects) {
	t.Helper()
	got, want := decode[rbacv1.Role](t, chart, "Role/"+memberSecretsRole), decode[rbacv1.Role](t, overlay, "Role/"+memberSecretsRole)
	if !reflect.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("Role %s rules:\n got %+v\nwant %+v (%s)", memberSecretsRole, got.Rules, want.Rules, multiclusterOverlay)
	}
	gotBinding, wantBinding := decode[rbacv1.RoleBinding](t, chart, "RoleBinding/"+memberSecretsRole), decode[rbacv1.RoleBinding](t, overlay, "RoleBinding/"+memberSecretsRole)
	if gotBinding.RoleRef != wantBinding.RoleRef {
		t.Errorf("RoleBinding %s refers to %+v, want %+v (%s)", memberSecretsRole, gotBinding.RoleRef, wantBinding.RoleRef, multiclusterOverlay)
	}
}

// create-member-secret, run on a real API server (one without a token
// controller, so auto falls back to a TokenRequest), prints a member
// Secret whose credentials do exactly what the controller does in a
// member: write EnvoyFilters in the target namespace and no other, read
// EnvoyFilters, Services and ServiceEntries in every namespace and
// istiod's EndpointSlices; they read no Secret. Run again, it succeeds
// (server-side apply).
func TestCreateMemberSecret(t *testing.T) {
	f := setup(t)
	t.Cleanup(func() { deleteMemberRBAC(t) })
	var stdout, stderr bytes.Buffer
	for range 2 {
		stdout.Reset()
		stderr.Reset()
		code := cli.Main([]string{"create-member-secret", "--kubeconfig", cluster.AdminKubeconfig, "--name", "member-b", "--token-wait", "1s"},
			cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
		if code != cli.ExitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "requesting a token") {
		t.Errorf("auto did not fall back to a TokenRequest here:\n%s", stderr.String())
	}
	var secret corev1.Secret
	if err := yaml.UnmarshalStrict(stdout.Bytes(), &secret); err != nil {
		t.Fatal(err)
	}
	m, err := members.Parse(&secret)
	if err != nil || m.Name != "member-b" || m.Config.Host != cluster.APIServerURL {
		t.Fatalf("member %+v, %v", m, err)
	}
	kube, err := kubernetes.NewForConfig(m.Config)
	if err != nil {
		t.Fatal(err)
	}
	istio, err := istioclient.NewForConfig(m.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := f.ctx
	ef := &clientnetworking.EnvoyFilter{TypeMeta: metav1.TypeMeta{APIVersion: "networking.istio.io/v1alpha3", Kind: "EnvoyFilter"}, ObjectMeta: metav1.ObjectMeta{Name: "member-probe", Namespace: ns,
		Labels: map[string]string{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}}}
	allowed := []struct {
		what string
		do   func() error
	}{
		// As the controller writes: server-side apply, which creates.
		{"apply envoyfilter " + ns + "/member-probe", func() error {
			body, err := json.Marshal(ef)
			if err != nil {
				return err
			}
			force := true
			_, err = istio.NetworkingV1alpha3().EnvoyFilters(ns).Patch(ctx, "member-probe", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "globalconfig", Force: &force})
			return err
		}},
		{"patch envoyfilter " + ns + "/member-probe", func() error {
			_, err := istio.NetworkingV1alpha3().EnvoyFilters(ns).Patch(ctx, "member-probe", types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":"1"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"list envoyfilters in every namespace by label", func() error {
			_, err := istio.NetworkingV1alpha3().EnvoyFilters("").List(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue})
			return err
		}},
		// The informers' watches, as the controller and service facts open
		// them.
		{"watch envoyfilters in every namespace by label", func() error {
			return watchOnce(istio.NetworkingV1alpha3().EnvoyFilters("").Watch(ctx, metav1.ListOptions{LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue}))
		}},
		{"watch serviceentries in every namespace", func() error {
			return watchOnce(istio.NetworkingV1().ServiceEntries("").Watch(ctx, metav1.ListOptions{}))
		}},
		{"watch one service by name", func() error {
			return watchOnce(kube.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=zipkin"}))
		}},
		{"watch endpointslices in " + ns, func() error {
			return watchOnce(kube.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=istiod"}))
		}},
		{"delete envoyfilter " + ns + "/member-probe", func() error {
			return istio.NetworkingV1alpha3().EnvoyFilters(ns).Delete(ctx, "member-probe", metav1.DeleteOptions{})
		}},
		{"list services in every namespace", func() error {
			_, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list serviceentries in every namespace", func() error {
			_, err := istio.NetworkingV1().ServiceEntries("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list endpointslices in " + ns, func() error {
			_, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, a := range allowed {
		if err := a.do(); err != nil {
			t.Errorf("%s: %v", a.what, err)
		}
	}
	refused := []struct {
		what string
		do   func() error
	}{
		{"create envoyfilter default/member-probe", func() error {
			other := ef.DeepCopy()
			other.Namespace = "default"
			_, err := istio.NetworkingV1alpha3().EnvoyFilters("default").Create(ctx, other, metav1.CreateOptions{})
			return err
		}},
		{"list secrets in " + ns, func() error {
			_, err := kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"get configmap " + ns + "/" + cmName, func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
			return err
		}},
		{"list endpointslices in default", func() error {
			_, err := kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, r := range refused {
		if err := r.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", r.what, err)
		}
	}
}

// watchOnce closes a watch that was opened, and returns the error of one
// that was not.
func watchOnce(w watch.Interface, err error) error {
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}

// deleteMemberRBAC removes what create-member-secret created.
func deleteMemberRBAC(t *testing.T) {
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=member"}
	rbac := cluster.Admin.RbacV1()
	for _, err := range []error{
		rbac.ClusterRoleBindings().DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		rbac.ClusterRoles().DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		rbac.RoleBindings(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		rbac.Roles(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		cluster.Admin.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
		cluster.Admin.CoreV1().ServiceAccounts(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel),
	} {
		if err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
}
