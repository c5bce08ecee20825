package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/pkg/webhook"
	"github.com/globalconfig/globalconfig/test/harness"
)

// The chart deploy/helm/globalconfig passes `helm lint`, and what `helm
// template` renders for each mode is accepted by the API server
// (server-side dry run) and is deploy/'s objects with deploy/'s RBAC:
// standalone (self-signed or cert-manager webhook certificate) as
// deploy/base, istiodSidecar as deploy/overlays/mcp, and the ConfigMap it
// can render holds a document `globalconfig validate` accepts. With
// envoyAdmission it adds what deploy/overlays/envoy-admission adds, and
// with multicluster what deploy/overlays/multicluster adds.
func TestHelmChart(t *testing.T) {
	f := setup(t)
	h := newHelm(t)
	root := harness.RepoRoot()
	chart := filepath.Join(root, "deploy", "helm", "globalconfig")
	docValues := filepath.Join(chart, "ci", "document-values.yaml")

	for _, args := range [][]string{{chart}, {chart, "-f", docValues}} {
		if out, err := h.run(f.ctx, append([]string{"lint", "--strict"}, args...)...); err != nil {
			t.Fatalf("helm lint: %v\n%s", err, out)
		}
	}

	// cert-manager's and the Prometheus operator's kinds, so that every
	// rendered object goes through the dry run.
	crds := filepath.Join(root, "test", "integration", "testdata", "helm-crds.yaml")
	if _, err := cluster.Kubectl(f.ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "--wait=false", "-f", crds)
	})
	if _, err := cluster.Kubectl(f.ctx, nil, "wait", "--for=condition=established", "--timeout=60s",
		"crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io", "crd/servicemonitors.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}

	// What deploy/ holds, to compare with.
	base := objects{}
	for _, name := range []string{"serviceaccount.yaml", "rbac.yaml", "operator-rbac.yaml", "deployment.yaml", "webhook.yaml"} {
		maps.Copy(base, parseFile(t, filepath.Join(root, "deploy", "base", name)))
	}
	certManager := parseFile(t, filepath.Join(root, "deploy", "overlays", "cert-manager", "certificate.yaml"))
	// The envoy-admission overlay as kustomize renders it, and the
	// istio/proxyv2 tag it pins, which the chart is given.
	overlay, err := cluster.Kubectl(f.ctx, nil, "kustomize", filepath.Join(root, "deploy", "overlays", "envoy-admission"))
	if err != nil {
		t.Fatal(err)
	}
	envoyOverlay := decode[appsv1.Deployment](t, parseStream(t, []byte(overlay)), "Deployment/globalconfig")
	mcRendered, err := cluster.Kubectl(f.ctx, nil, "kustomize", filepath.Join(root, multiclusterOverlay))
	if err != nil {
		t.Fatal(err)
	}
	mcOverlay := parseStream(t, []byte(mcRendered))
	proxyRepo, proxyTag, _ := strings.Cut(envoyOverlay.Spec.Template.Spec.InitContainers[0].Image, ":")
	baseRole := decode[rbacv1.Role](t, base, "Role/globalconfig")
	baseDeployment := decode[appsv1.Deployment](t, base, "Deployment/globalconfig")
	baseWebhook := decode[admissionregistrationv1.ValidatingWebhookConfiguration](t, base, "ValidatingWebhookConfiguration/globalconfig")

	// The chart's Role is deploy/base's, with the rollout's EndpointSlices
	// rule (compared as sets: the order of rules means nothing).
	endpointSlices := rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}
	isSecrets := func(r rbacv1.PolicyRule) bool { return slices.Equal(r.Resources, []string{"secrets"}) }
	roleSelf := withRule(baseRole.Rules, endpointSlices)
	var roleCertManager, roleSidecar []rbacv1.PolicyRule
	for _, r := range baseRole.Rules {
		switch {
		case !isSecrets(r):
			roleCertManager = append(roleCertManager, r)
			// The sidecar serves no webhook: no Secret at all.
			roleSidecar = append(roleSidecar, r)
		case len(r.ResourceNames) > 0:
			// cert-manager writes the Secret; the controller only reads it.
			r.Verbs = []string{"get", "list", "watch"}
			roleCertManager = append(roleCertManager, r)
		}
	}
	roleCertManager = withRule(roleCertManager, endpointSlices)
	roleSidecar = withRule(roleSidecar, endpointSlices)

	standaloneKeys := slices.Sorted(maps.Keys(base))
	sidecarKeys := without(standaloneKeys, "ServiceAccount/globalconfig", "Deployment/globalconfig",
		"ValidatingWebhookConfiguration/globalconfig", "Service/globalconfig-webhook",
		"ClusterRole/globalconfig-webhook", "ClusterRoleBinding/globalconfig-webhook")
	certManagerKeys := append(slices.Clone(standaloneKeys),
		"Issuer/globalconfig-selfsigned", "Certificate/globalconfig-webhook",
		"Service/globalconfig-metrics", "ServiceMonitor/globalconfig")
	slices.Sort(certManagerKeys)
	documentKeys := append(slices.Clone(standaloneKeys), "ConfigMap/"+cmName)
	slices.Sort(documentKeys)
	multiclusterKeys := append(slices.Clone(standaloneKeys), "Role/"+memberSecretsRole, "RoleBinding/"+memberSecretsRole)
	slices.Sort(multiclusterKeys)

	cases := []struct {
		name  string
		args  []string
		keys  []string            // every object rendered, Kind/name
		role  []rbacv1.PolicyRule // the Role's rules
		cert  string              // the webhook's certificate; "" without a Deployment
		notes []string            // what the install notes must say
	}{
		{"standalone", nil, standaloneKeys, roleSelf, "self",
			[]string{"rollout status deployment/globalconfig", "kubectl apply -f deploy/examples/global-config.yaml"}},
		{"standalone-cert-manager", []string{"--set", "webhook.certificate=certManager", "--set", "metrics.serviceMonitor.enabled=true"}, certManagerKeys, roleCertManager, "certManager",
			[]string{"cert-manager keeps its certificate"}},
		{"istiod-sidecar", []string{"--set", "mode=istiodSidecar"}, sidecarKeys, roleSidecar, "",
			[]string{"--patch-file deploy/overlays/mcp/istiod-sidecar.yaml", "-f deploy/overlays/mcp/istio-values.yaml", "--sink=mcp",
				"--istiod=" + ns + "/istiod", "--istiod-token-file=/var/run/secrets/globalconfig/istio-token", "--istiod-debug-url=http://127.0.0.1:8080"}},
		{"standalone-document", []string{"-f", docValues}, documentKeys, roleSelf, "self",
			[]string{"rollout status deployment/globalconfig"}},
		{"standalone-envoy-admission", []string{"--set", "envoyAdmission.enabled=true", "--set", "envoyAdmission.image.repository=" + proxyRepo, "--set", "envoyAdmission.image.tag=" + proxyTag},
			standaloneKeys, roleSelf, "self",
			[]string{"also loaded into the Envoy of " + proxyRepo + ":" + proxyTag}},
		// The overlay's --cluster-name, so that the args compare equal.
		{"standalone-multicluster", []string{"--set", "multicluster.enabled=true", "--set", "multicluster.clusterName=" + members.DefaultHome},
			multiclusterKeys, roleSelf, "self",
			[]string{"home cluster " + members.DefaultHome, "globalconfig create-member-secret --name MEMBER", "leaves its EnvoyFilters there"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := h.run(f.ctx, append([]string{"template", "globalconfig", chart, "--namespace", ns}, c.args...)...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			if _, err := cluster.Kubectl(f.ctx, []byte(out), "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-"); err != nil {
				t.Fatalf("server-side dry run: %v", err)
			}
			objs := parseStream(t, []byte(out))
			// helm template leaves out the notes; a dry-run install prints
			// them. It still checks that objects of the same names (the
			// RBAC the harness installed from deploy/) belong to the
			// release, which --take-ownership waives; nothing is written.
			install, err := h.run(f.ctx, append([]string{"install", "globalconfig", chart, "--namespace", ns, "--dry-run=client", "--take-ownership"}, c.args...)...)
			if err != nil {
				t.Fatalf("helm install --dry-run=client: %v\n%s", err, install)
			}
			_, notes, _ := strings.Cut(install, "\nNOTES:\n")
			for _, want := range c.notes {
				if !strings.Contains(notes, want) {
					t.Errorf("notes do not say %q:\n%s", want, notes)
				}
			}
			if got := slices.Sorted(maps.Keys(objs)); !slices.Equal(got, c.keys) {
				t.Errorf("rendered objects:\n got %v\nwant %v", got, c.keys)
			}

			role := decode[rbacv1.Role](t, objs, "Role/globalconfig")
			if got, want := ruleSet(role.Rules), ruleSet(c.role); !slices.Equal(got, want) {
				t.Errorf("Role rules:\n got %q\nwant %q", got, want)
			}
			for _, name := range []string{"globalconfig-read-envoyfilters", "globalconfig-read-pods", "globalconfig-webhook"} {
				if _, ok := objs["ClusterRole/"+name]; ok {
					got := decode[rbacv1.ClusterRole](t, objs, "ClusterRole/"+name).Rules
					want := decode[rbacv1.ClusterRole](t, base, "ClusterRole/"+name).Rules
					if name == "globalconfig-webhook" && c.cert == "certManager" {
						// cert-manager keeps the caBundle: the controller
						// only reads the configuration.
						want[0].Verbs = []string{"get"}
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("ClusterRole %s rules:\n got %+v\nwant %+v", name, got, want)
					}
				}
			}
			// Every binding is to the ServiceAccount the controller runs as.
			sa := "globalconfig"
			if c.cert == "" {
				sa = "istiod"
			}
			wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
			for key := range objs {
				var subjects []rbacv1.Subject
				switch {
				case strings.HasPrefix(key, "RoleBinding/"):
					subjects = decode[rbacv1.RoleBinding](t, objs, key).Subjects
				case strings.HasPrefix(key, "ClusterRoleBinding/"):
					subjects = decode[rbacv1.ClusterRoleBinding](t, objs, key).Subjects
				default:
					continue
				}
				if !reflect.DeepEqual(subjects, wantSubjects) {
					t.Errorf("%s subjects %+v, want %+v", key, subjects, wantSubjects)
				}
			}

			if c.cert != "" {
				var envoy *appsv1.Deployment
				if strings.HasSuffix(c.name, "envoy-admission") {
					envoy = envoyOverlay
				}
				var mc objects
				if strings.HasSuffix(c.name, "multicluster") {
					mc = mcOverlay
					checkMemberSecretsRole(t, objs, mc)
				}
				checkHelmDeployment(t, objs, baseDeployment, c.cert, envoy, mc)
				hook := decode[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration/globalconfig")
				if !reflect.DeepEqual(hook.Webhooks, baseWebhook.Webhooks) {
					t.Errorf("webhooks:\n got %+v\nwant %+v", hook.Webhooks, baseWebhook.Webhooks)
				}
				if mc := hook.Webhooks[0].MatchConditions; len(mc) != 1 || mc[0].Expression != webhook.MatchExpression(ns, cmName) || hook.Webhooks[0].ObjectSelector != nil {
					t.Errorf("the webhook does not select the global ConfigMap %s/%s by name: %+v", ns, cmName, hook.Webhooks[0])
				}
				inject, injected := hook.Annotations["cert-manager.io/inject-ca-from"]
				if want := c.cert == "certManager"; injected != want || (want && inject != ns+"/globalconfig-webhook") {
					t.Errorf("webhook annotations %v; CA injection wanted: %v", hook.Annotations, want)
				}
			}
			if c.cert == "certManager" {
				for _, key := range []string{"Issuer/globalconfig-selfsigned", "Certificate/globalconfig-webhook"} {
					got, want := decode[map[string]any](t, objs, key), decode[map[string]any](t, certManager, key)
					if !reflect.DeepEqual((*got)["spec"], (*want)["spec"]) {
						t.Errorf("%s spec:\n got %v\nwant %v (deploy/overlays/cert-manager)", key, (*got)["spec"], (*want)["spec"])
					}
				}
				checkHelmServiceMonitor(t, objs)
			}
			if _, ok := objs["ConfigMap/"+cmName]; ok {
				validateHelmConfigMap(t, objs["ConfigMap/"+cmName])
			}
		})
	}

	// The document values.yaml holds (configMap.create: false by default)
	// is valid too.
	out, err := h.run(f.ctx, "template", "globalconfig", chart, "--namespace", ns, "--set", "configMap.create=true", "--show-only", "templates/configmap.yaml")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := parseStream(t, []byte(out))
	if raw, ok := objs["ConfigMap/"+cmName]; !ok {
		t.Errorf("configMap.create=true rendered %v", slices.Sorted(maps.Keys(objs)))
	} else {
		validateHelmConfigMap(t, raw)
	}

	// Values that can't work are refused.
	for _, bad := range []struct{ set, msg string }{
		{"mode=sidecar", "mode must be standalone or istiodSidecar"},
		{"webhook.certificate=vault", "webhook.certificate must be self or certManager"},
		{"leaderElection.enabled=false", "replicaCount above 1 needs leaderElection.enabled"},
		{"envoyAdmission.enabled=true", "envoyAdmission.image.tag must be your fleet's Istio version"},
		{"envoyAdmission.enabled=true,envoyAdmission.image.tag=1.31.0,mode=istiodSidecar", "envoyAdmission.enabled checks the webhook's edits"},
		{"multicluster.enabled=true,mode=istiodSidecar", "multicluster.enabled needs mode standalone"},
		{"multicluster.enabled=true,multicluster.clusterName=-eu", `multicluster.clusterName "-eu" is not a cluster name`},
	} {
		out, err := h.run(f.ctx, "template", "globalconfig", chart, "--namespace", ns, "--set", bad.set)
		if err == nil || !strings.Contains(out, bad.msg) {
			t.Errorf("helm template --set %s: err %v, want a failure saying %q:\n%s", bad.set, err, bad.msg, out)
		}
	}
}

// checkHelmDeployment compares the chart's Deployment with deploy/base's:
// the same pod, plus the rollout flags and the istiod token; with envoy
// (deploy/overlays/envoy-admission's Deployment), plus what that overlay
// adds: the init container copying istio-proxy's Envoy, its volumes and
// mounts, and --envoy; with mc (deploy/overlays/multicluster, rendered),
// plus the args that overlay adds to deploy/base's.
func checkHelmDeployment(t *testing.T, objs objects, base *appsv1.Deployment, cert string, envoy *appsv1.Deployment, mc objects) {
	t.Helper()
	d := decode[appsv1.Deployment](t, objs, "Deployment/globalconfig")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if !reflect.DeepEqual(d.Spec.Selector, base.Spec.Selector) {
		t.Errorf("selector %+v, want deploy/base's %+v", d.Spec.Selector, base.Spec.Selector)
	}
	pod, basePod := d.Spec.Template.Spec, base.Spec.Template.Spec
	if pod.ServiceAccountName != basePod.ServiceAccountName || !reflect.DeepEqual(pod.SecurityContext, basePod.SecurityContext) {
		t.Errorf("pod runs as %q with %+v, want deploy/base's %q with %+v", pod.ServiceAccountName, pod.SecurityContext, basePod.ServiceAccountName, basePod.SecurityContext)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("containers: %+v", pod.Containers)
	}
	ctr, baseCtr := pod.Containers[0], basePod.Containers[0]
	if ctr.Image != "ghcr.io/globalconfig/globalconfig:latest" {
		t.Errorf("image %q", ctr.Image)
	}
	for _, field := range []struct {
		name      string
		got, want any
	}{
		{"securityContext", ctr.SecurityContext, baseCtr.SecurityContext},
		{"resources", ctr.Resources, baseCtr.Resources},
		{"readinessProbe", ctr.ReadinessProbe, baseCtr.ReadinessProbe},
		{"livenessProbe", ctr.LivenessProbe, baseCtr.LivenessProbe},
		{"ports", ctr.Ports, baseCtr.Ports},
	} {
		if !reflect.DeepEqual(field.got, field.want) {
			t.Errorf("container %s:\n got %+v\nwant %+v (deploy/base)", field.name, field.got, field.want)
		}
	}
	wantArgs := []string{
		"run",
		"--configmap=" + ns + "/" + cmName,
		"--metrics-addr=:9090",
		"--health-addr=:8081",
		"--leader-elect=true",
		"--webhook-addr=:9443",
		fmt.Sprintf("--webhook-manage-cert=%v", cert == "self"),
		"--rollout=true",
		"--istiod=" + ns + "/istiod",
		"--istiod-debug-port=8080",
		"--rollout-timeout=60s",
		"--istiod-token-file=/var/run/secrets/globalconfig/istio-token",
		"--service-facts=true",
		"--cluster-domain=cluster.local",
	}
	if envoy != nil {
		wantArgs = append(wantArgs, "--envoy=/shared/envoy", "--envoy-timeout=3s")
		checkEnvoyAdmission(t, d, envoy)
		// The rest is deploy/base's.
		pod.InitContainers, pod.Volumes = nil, pod.Volumes[len(pod.Volumes)-1:]
		ctr.VolumeMounts = ctr.VolumeMounts[len(ctr.VolumeMounts)-1:]
	}
	if mc != nil {
		wantArgs = append(wantArgs, multiclusterArgs(t, mc, base)...)
	}
	if len(pod.InitContainers) != 0 {
		t.Errorf("init containers: %+v", pod.InitContainers)
	}
	if !slices.Equal(ctr.Args, wantArgs) {
		t.Errorf("args:\n got %q\nwant %q", ctr.Args, wantArgs)
	}
	for _, arg := range baseCtr.Args {
		if !slices.Contains(ctr.Args, arg) {
			t.Errorf("deploy/base passes %s; the chart does not", arg)
		}
	}
	mounts := []corev1.VolumeMount{{Name: "istio-token", MountPath: "/var/run/secrets/globalconfig", ReadOnly: true}}
	if !reflect.DeepEqual(ctr.VolumeMounts, mounts) {
		t.Errorf("volume mounts %+v, want %+v", ctr.VolumeMounts, mounts)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].Projected == nil || len(pod.Volumes[0].Projected.Sources) != 1 {
		t.Fatalf("volumes: %+v", pod.Volumes)
	}
	if basePod.Volumes != nil && (!reflect.DeepEqual(pod.Volumes, basePod.Volumes) || !reflect.DeepEqual(ctr.VolumeMounts, baseCtr.VolumeMounts)) {
		t.Errorf("volumes %+v mounted %+v, deploy/base's %+v mounted %+v", pod.Volumes, ctr.VolumeMounts, basePod.Volumes, baseCtr.VolumeMounts)
	}
	token := pod.Volumes[0].Projected.Sources[0].ServiceAccountToken
	if token == nil || token.Audience != "istio-ca" || token.ExpirationSeconds == nil || *token.ExpirationSeconds != 3600 || token.Path != "istio-token" {
		t.Errorf("istiod token: %+v", token)
	}
}

// checkHelmServiceMonitor checks that the ServiceMonitor selects the
// metrics Service by its labels and scrapes its port.
func checkHelmServiceMonitor(t *testing.T, objs objects) {
	t.Helper()
	var sm struct {
		Spec struct {
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(objs["ServiceMonitor/globalconfig"], &sm); err != nil {
		t.Fatal(err)
	}
	svc := decode[corev1.Service](t, objs, "Service/globalconfig-metrics")
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the metrics Service has %v", k, v, svc.Labels)
		}
	}
	if web := decode[corev1.Service](t, objs, "Service/globalconfig-webhook"); len(sm.Spec.Selector.MatchLabels) == 0 ||
		labelsMatch(sm.Spec.Selector.MatchLabels, web.Labels) {
		t.Errorf("ServiceMonitor selector %v also selects the webhook Service", sm.Spec.Selector.MatchLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9090 || len(sm.Spec.Endpoints) != 1 ||
		sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" ||
		!slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{ns}) {
		t.Errorf("ServiceMonitor %+v does not scrape the metrics Service's port %+v", sm.Spec, svc.Spec.Ports)
	}
}

// ruleSet is rules as sorted strings, one a rule.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, fmt.Sprintf("%v %v %v %v %v", r.APIGroups, r.Resources, r.ResourceNames, r.Verbs, r.NonResourceURLs))
	}
	slices.Sort(out)
	return out
}

// withRule is rules plus r, unless they hold it already.
func withRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) []rbacv1.PolicyRule {
	for _, have := range rules {
		if reflect.DeepEqual(have, r) {
			return rules
		}
	}
	return append(slices.Clone(rules), r)
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// validateHelmConfigMap runs `globalconfig validate -f` on a rendered
// ConfigMap manifest.
func validateHelmConfigMap(t *testing.T, manifest []byte) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(manifest, &cm); err != nil || strings.TrimSpace(cm.Data[document.DataKey]) == "" {
		t.Fatalf("ConfigMap without a document (%v):\n%s", err, manifest)
	}
	path := filepath.Join(t.TempDir(), "global-config.yaml")
	if err := os.WriteFile(path, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"validate", "-f", path}, cli.Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}); code != cli.ExitOK {
		t.Errorf("globalconfig validate: exit %d\n%s%s", code, stdout.String(), stderr.String())
	} else {
		t.Logf("globalconfig validate: %s", strings.TrimSpace(stdout.String()))
	}
}

// helm runs the built helm with its cache, config and data in a temporary
// directory, so nothing is read from or written to the user's.
type helm struct {
	bin string
	env []string
}

func newHelm(t *testing.T) *helm {
	t.Helper()
	bin, err := harness.Binary(harness.EnvHelm)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+cluster.AdminKubeconfig)
	return &helm{bin: bin, env: env}
}

// run returns helm's standard output, or with an error its standard
// output and error together.
func (h *helm) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// objects is a stream of manifests by Kind/name.
type objects map[string][]byte

func parseFile(t *testing.T, path string) objects {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseStream(t, data)
}

func parseStream(t *testing.T, data []byte) objects {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	out := objects{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		if obj.Kind == "" {
			continue // only comments
		}
		key := obj.Kind + "/" + obj.Metadata.Name
		if _, dup := out[key]; dup {
			t.Fatalf("%s twice in the stream", key)
		}
		out[key] = doc
	}
}

// decode strictly decodes the object key of objs into a T.
func decode[T any](t *testing.T, objs objects, key string) *T {
	t.Helper()
	raw, ok := objs[key]
	if !ok {
		t.Fatalf("no %s among %v", key, slices.Sorted(maps.Keys(objs)))
	}
	var v T
	if err := yaml.UnmarshalStrict(raw, &v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &v
}

// without returns keys less drop.
func without(keys []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return slices.Contains(drop, k) })
}
