package cli_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/pkg/members"
)

const (
	memberServer = "https://member-b.example:6443"
	memberCA     = "-----BEGIN CERTIFICATE-----\nnot a real CA, carried as bytes\n-----END CERTIFICATE-----\n"
	// requestedToken and secretToken are what the fake API server hands
	// out for a TokenRequest and fills the token Secret with.
	requestedToken = "requested-token-0123456789"
	secretToken    = "secret-token-9876543210"
)

// memberCluster is a fake member API server: a kubeconfig naming it, and
// the clientset behind Env.Clients.
type memberCluster struct {
	kube       *fake.Clientset
	kubeconfig string
	// fill, when set, makes the token controller fill the token Secret.
	fill bool
}

func newMemberCluster(t *testing.T) *memberCluster {
	t.Helper()
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: b\n  cluster:\n    server: " + memberServer +
		"\n    certificate-authority-data: " + b64(memberCA) +
		"\nusers:\n- name: admin\n  user:\n    token: admin-token-must-not-leak\ncontexts:\n- name: b\n  context:\n    cluster: b\n    user: admin\ncurrent-context: b\n"
	m := &memberCluster{kube: fake.NewClientset(), kubeconfig: writeFile(t, "kubeconfig", kubeconfig)}
	m.kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		out := req.DeepCopy()
		out.Status = authenticationv1.TokenRequestStatus{Token: requestedToken,
			ExpirationTimestamp: metav1.NewTime(time.Date(2027, 11, 28, 0, 0, 0, 0, time.UTC))}
		return true, out, nil
	})
	// The token controller: it fills a token Secret of a ServiceAccount
	// as soon as it is asked for.
	m.kube.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !m.fill {
			return false, nil, nil
		}
		obj, err := m.kube.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		s := obj.(*corev1.Secret).DeepCopy()
		if s.Type == corev1.SecretTypeServiceAccountToken {
			s.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(secretToken)}
		}
		return true, s, nil
	})
	return m
}

func b64(s string) string {
	b, _ := yaml.Marshal([]byte(s)) // a []byte marshals as base64
	return strings.TrimSpace(string(b))
}

// run runs create-member-secret against the member.
func (m *memberCluster) run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Clients: func(string) (kubernetes.Interface, istioclient.Interface, error) { return m.kube, nil, nil }}
	code = cli.Main(append([]string{"create-member-secret", "--kubeconfig", m.kubeconfig}, args...), env)
	if strings.Contains(errb.String(), requestedToken) || strings.Contains(errb.String(), secretToken) || strings.Contains(errb.String(), "admin-token-must-not-leak") {
		t.Errorf("a token reached stderr:\n%s", errb.String())
	}
	return code, out.String(), errb.String()
}

// parseMember reads the printed Secret as the controller does.
func parseMember(t *testing.T, stdout string) (*corev1.Secret, members.Member) {
	t.Helper()
	var s corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(stdout), &s); err != nil {
		t.Fatalf("stdout is not a Secret: %v\n%s", err, stdout)
	}
	if s.Labels[members.LabelMember] != "true" {
		t.Errorf("the Secret lacks the label %s=true: %v", members.LabelMember, s.Labels)
	}
	m, err := members.Parse(&s)
	if err != nil {
		t.Fatalf("members.Parse: %v", err)
	}
	return &s, m
}

// The printed Secret is one the controller reads as the named member: its
// kubeconfig reaches the member's API server, trusts its CA, and carries
// the requested token (never the caller's own credentials); stderr says
// when the token expires and never holds it.
func TestCreateMemberSecretPrintsAMemberSecret(t *testing.T) {
	m := newMemberCluster(t)
	code, stdout, stderr := m.run(t, "--name", "eu-west-1", "--token", "request")
	if code != cli.ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	s, member := parseMember(t, stdout)
	if member.Name != "eu-west-1" || s.Name != "globalconfig-member-eu-west-1" || s.Namespace != "istio-system" {
		t.Errorf("member %q from Secret %s/%s", member.Name, s.Namespace, s.Name)
	}
	if member.Config.Host != memberServer || string(member.Config.CAData) != memberCA || member.Config.BearerToken != requestedToken {
		t.Errorf("kubeconfig: host %q, CA %q, token %q", member.Config.Host, member.Config.CAData, member.Config.BearerToken)
	}
	if strings.Contains(stdout, "admin-token-must-not-leak") {
		t.Errorf("the caller's own credentials are in the member Secret")
	}
	if !strings.Contains(stderr, "expires at 2027-11-28T00:00:00Z") {
		t.Errorf("stderr does not say when the token expires:\n%s", stderr)
	}
	// --server and --istiod-debug-urls, for a home cluster that reaches
	// the member by other addresses.
	code, stdout, stderr = m.run(t, "--name", "B_2", "--token", "request", "--server", "https://10.0.0.9:443",
		"--istiod-debug-urls", "http://10.0.0.10:8080, http://10.0.0.11:8080", "--home-namespace", "mesh-config")
	if code != cli.ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	s, member = parseMember(t, stdout)
	if member.Name != "B_2" || s.Name != "globalconfig-member-b-2" || s.Namespace != "mesh-config" || member.Config.Host != "https://10.0.0.9:443" ||
		!slices.Equal(member.DebugURLs, []string{"http://10.0.0.10:8080", "http://10.0.0.11:8080"}) {
		t.Errorf("member %q (Secret %s/%s) at %q, debug URLs %q", member.Name, s.Namespace, s.Name, member.Config.Host, member.DebugURLs)
	}
}

// --token=secret (and auto, where a token controller runs) hands over the
// long-lived token Secret's token, which expires with the Secret only.
func TestCreateMemberSecretUsesTheTokenSecret(t *testing.T) {
	for _, mode := range []string{"secret", "auto"} {
		t.Run(mode, func(t *testing.T) {
			m := newMemberCluster(t)
			m.fill = true
			code, stdout, stderr := m.run(t, "--name", "b", "--token", mode)
			if code != cli.ExitOK {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			if _, member := parseMember(t, stdout); member.Config.BearerToken != secretToken {
				t.Errorf("token %q, want the token Secret's", member.Config.BearerToken)
			}
			if strings.Contains(stderr, "expires") {
				t.Errorf("stderr speaks of an expiry for a token Secret:\n%s", stderr)
			}
		})
	}
}

// Without a token controller (the test clusters: a bare kube-apiserver),
// --token=secret fails naming the Secret, and auto falls back to a
// TokenRequest and deletes the Secret nobody filled.
func TestCreateMemberSecretWithoutATokenController(t *testing.T) {
	m := newMemberCluster(t)
	code, _, stderr := m.run(t, "--name", "b", "--token", "secret", "--token-wait", "300ms")
	if code != cli.ExitAPI || !strings.Contains(stderr, "member b: secret istio-system/globalconfig-member-token: the token controller did not fill it within 300ms") {
		t.Errorf("--token=secret: exit %d, want %d and the Secret named:\n%s", code, cli.ExitAPI, stderr)
	}
	code, stdout, stderr := m.run(t, "--name", "b", "--token-wait", "300ms")
	if code != cli.ExitOK {
		t.Fatalf("auto: exit %d:\n%s", code, stderr)
	}
	if _, member := parseMember(t, stdout); member.Config.BearerToken != requestedToken {
		t.Errorf("auto: token %q, want the requested one", member.Config.BearerToken)
	}
	if !strings.Contains(stderr, "requesting a token") || !strings.Contains(stderr, "expires at") {
		t.Errorf("auto does not say it fell back to an expiring token:\n%s", stderr)
	}
	if _, err := m.kube.CoreV1().Secrets("istio-system").Get(t.Context(), cli.MemberTokenSecret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the unfilled token Secret is left behind: %v", err)
	}
}

// What the command creates in the member is deploy/member, object for
// object: the same ServiceAccount, rules, bindings and token Secret, so
// that the static YAML grants exactly what the CLI does. Run twice, it
// changes nothing (server-side apply). Another EnvoyFilter namespace gets
// the same write Role, and nothing else changes.
func TestMemberRBACMatchesDeploy(t *testing.T) {
	m := newMemberCluster(t)
	m.fill = true
	for range 2 {
		if code, _, stderr := m.run(t, "--name", "b", "--token", "secret"); code != cli.ExitOK {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
	}
	want := readManifests(t, filepath.Join("..", "..", "deploy", "member", "rbac.yaml"), filepath.Join("..", "..", "deploy", "member", "token.yaml"))
	got := memberObjects(t, m.kube)
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("objects created:\n got %v\nwant %v (deploy/member)", keys(got), keys(want))
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s:\n got %+v\nwant %+v (deploy/member)", k, got[k], w)
		}
	}

	m = newMemberCluster(t)
	if code, _, stderr := m.run(t, "--name", "b", "--token", "request", "--envoyfilter-namespaces", "istio-system,gateways"); code != cli.ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	got = memberObjects(t, m.kube)
	for _, kind := range []string{"Role", "RoleBinding"} {
		a, b := got[kind+"/istio-system/globalconfig-member-envoyfilters"], got[kind+"/gateways/globalconfig-member-envoyfilters"]
		if a == nil || b == nil {
			t.Fatalf("%s globalconfig-member-envoyfilters in istio-system %v, in gateways %v", kind, a != nil, b != nil)
		}
		switch kind {
		case "Role":
			if !reflect.DeepEqual(a.(*rbacv1.Role).Rules, b.(*rbacv1.Role).Rules) {
				t.Errorf("the gateways Role's rules %+v, want istio-system's %+v", b.(*rbacv1.Role).Rules, a.(*rbacv1.Role).Rules)
			}
		case "RoleBinding":
			if !reflect.DeepEqual(a.(*rbacv1.RoleBinding).Subjects, b.(*rbacv1.RoleBinding).Subjects) {
				t.Errorf("the gateways RoleBinding binds %+v", b.(*rbacv1.RoleBinding).Subjects)
			}
		}
	}
	if _, ok := got["Role/gateways/globalconfig-member-istiod"]; ok {
		t.Errorf("the istiod Role is in the EnvoyFilter namespace gateways too")
	}
}

// An error names the member, the verb and the resource; the flags are
// checked before anything is written.
func TestCreateMemberSecretErrors(t *testing.T) {
	m := newMemberCluster(t)
	m.kube.PrependReactor("patch", "clusterroles", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, "globalconfig-member", errors.New("not allowed"))
	})
	code, stdout, stderr := m.run(t, "--name", "eu-west-1", "--token", "request")
	if code != cli.ExitAPI || stdout != "" ||
		!strings.Contains(stderr, "member eu-west-1: apply clusterrole globalconfig-member: ") || !strings.Contains(stderr, "forbidden") ||
		!strings.Contains(stderr, "allowed to create RBAC") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--name is required"},
		{[]string{"--name", "eu west"}, `--name: cluster name "eu west" must be letters, digits`},
		{[]string{"--name", "b", "--token", "forever"}, "--token must be auto, secret or request"},
		{[]string{"--name", "b", "--envoyfilter-namespaces", "Gateways"}, `--envoyfilter-namespaces: "Gateways" is not a namespace name`},
		{[]string{"--name", "b", "--istiod-debug-urls", "istiod.b:8080"}, `--istiod-debug-urls: "istiod.b:8080" is not an http:// or https:// URL`},
		{[]string{"--name", "b", "--token-duration", "1m"}, "--token-duration 1m0s is shorter"},
	} {
		m := newMemberCluster(t)
		code, _, stderr := m.run(t, c.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, want %d and %q:\n%s", c.args, code, cli.ExitUsage, c.want, stderr)
		}
		if len(m.kube.Actions()) != 0 {
			t.Errorf("%q: the member was written to: %v", c.args, m.kube.Actions())
		}
	}
}

// memberObjects lists what the fake member holds, by Kind/namespace/name,
// with only the fields the manifests state.
func memberObjects(t *testing.T, kube *fake.Clientset) map[string]runtime.Object {
	t.Helper()
	ctx := t.Context()
	out := map[string]runtime.Object{}
	meta := func(m metav1.ObjectMeta) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
	}
	sas, _ := kube.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	for _, o := range sas.Items {
		out["ServiceAccount/"+o.Namespace+"/"+o.Name] = &corev1.ServiceAccount{ObjectMeta: meta(o.ObjectMeta)}
	}
	secrets, _ := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	for _, o := range secrets.Items {
		out["Secret/"+o.Namespace+"/"+o.Name] = &corev1.Secret{ObjectMeta: meta(o.ObjectMeta), Type: o.Type}
	}
	crs, _ := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	for _, o := range crs.Items {
		out["ClusterRole//"+o.Name] = &rbacv1.ClusterRole{ObjectMeta: meta(o.ObjectMeta), Rules: o.Rules}
	}
	crbs, _ := kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	for _, o := range crbs.Items {
		out["ClusterRoleBinding//"+o.Name] = &rbacv1.ClusterRoleBinding{ObjectMeta: meta(o.ObjectMeta), RoleRef: o.RoleRef, Subjects: o.Subjects}
	}
	roles, _ := kube.RbacV1().Roles("").List(ctx, metav1.ListOptions{})
	for _, o := range roles.Items {
		out["Role/"+o.Namespace+"/"+o.Name] = &rbacv1.Role{ObjectMeta: meta(o.ObjectMeta), Rules: o.Rules}
	}
	rbs, _ := kube.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	for _, o := range rbs.Items {
		out["RoleBinding/"+o.Namespace+"/"+o.Name] = &rbacv1.RoleBinding{ObjectMeta: meta(o.ObjectMeta), RoleRef: o.RoleRef, Subjects: o.Subjects}
	}
	return out
}

// readManifests decodes YAML streams strictly into typed objects, keyed
// as memberObjects keys them.
func readManifests(t *testing.T, paths ...string) map[string]runtime.Object {
	t.Helper()
	out := map[string]runtime.Object{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind == "" {
				continue
			}
			var obj runtime.Object
			switch tm.Kind {
			case "ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "Secret":
				obj = &corev1.Secret{}
			case "ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			case "Role":
				obj = &rbacv1.Role{}
			case "RoleBinding":
				obj = &rbacv1.RoleBinding{}
			default:
				t.Fatalf("%s: unexpected kind %s", path, tm.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			m := obj.(metav1.Object)
			key := tm.Kind + "/" + m.GetNamespace() + "/" + m.GetName()
			// Only what memberObjects keeps.
			reflect.ValueOf(obj).Elem().FieldByName("TypeMeta").Set(reflect.ValueOf(metav1.TypeMeta{}))
			out[key] = obj
		}
	}
	return out
}

func keys(m map[string]runtime.Object) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
