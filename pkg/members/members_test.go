package members

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: s3cr3t-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func secret(name string, annotations map[string]string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: name, Annotations: annotations, Labels: map[string]string{LabelMember: "true"}}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestParseReadsIstiosRemoteSecretFormat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   string
	}{
		{"the data key names the cluster", secret("m1", nil, map[string]string{"eu-west-1": kubeconfig}), "eu-west-1"},
		{"istioctl's annotation", secret("m2", map[string]string{AnnotationIstioCluster: "b"}, map[string]string{"b": kubeconfig}), "b"},
		{"our annotation wins, one key", secret("m3", map[string]string{AnnotationCluster: "c", AnnotationIstioCluster: "x"}, map[string]string{"whatever": kubeconfig}), "c"},
	} {
		m, err := Parse(tc.secret)
		if err != nil || m.Name != tc.want || m.Config.Host != "https://10.0.0.1:6443" || m.Secret != "istio-system/"+tc.secret.Name {
			t.Errorf("%s: Parse = %+v, %v; want the cluster %s", tc.name, m, err, tc.want)
		}
	}
}

func TestParseRefusesWithoutLeakingCredentials(t *testing.T) {
	for _, tc := range []struct {
		secret *corev1.Secret
		want   string
	}{
		{secret("two", nil, map[string]string{"a": kubeconfig, "b": kubeconfig}), "names no cluster"},
		{secret("bad-name", nil, map[string]string{"eu west": kubeconfig}), "must be letters, digits"},
		{secret("not-yaml", nil, map[string]string{"b": "s3cr3t-token: [unclosed"}), "does not load"},
		{secret("url", map[string]string{AnnotationIstiodDebugURLs: "10.0.0.2:8080"}, map[string]string{"b": kubeconfig}), "not an http:// or https:// URL"},
	} {
		_, err := Parse(tc.secret)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "istio-system/"+tc.secret.Name) {
			t.Errorf("Parse(%s) = %v, want an error naming the Secret and saying %q", tc.secret.Name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Parse(%s) leaks the kubeconfig: %v", tc.secret.Name, err)
		}
	}
}

func TestResolveRefusesTheHomeAndDuplicates(t *testing.T) {
	ms, problems := Resolve([]*corev1.Secret{
		secret("z-dup", nil, map[string]string{"b": kubeconfig}),
		secret("a-b", nil, map[string]string{"b": kubeconfig}),
		secret("home", nil, map[string]string{"Kubernetes": kubeconfig}),
		secret("c", map[string]string{AnnotationIstiodDebugURLs: "http://10.0.0.3:8080/, http://10.0.0.4:8080"}, map[string]string{"c": kubeconfig}),
	}, DefaultHome)
	if len(ms) != 2 || ms[0].Name != "b" || ms[0].Secret != "istio-system/a-b" || ms[1].Name != "c" {
		t.Fatalf("members = %+v, want b (from the first Secret by name) and c", ms)
	}
	if got := strings.Join(ms[1].DebugURLs, " "); got != "http://10.0.0.3:8080 http://10.0.0.4:8080" {
		t.Errorf("c's istiod URLs = %q", got)
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Error())
	}
	all := strings.Join(msgs, "\n")
	if len(problems) != 2 || !strings.Contains(all, "istio-system/home: names the home cluster") || !strings.Contains(all, "istio-system/z-dup: names the cluster \"b\", which the Secret istio-system/a-b already names") {
		t.Errorf("problems:\n%s", all)
	}
}
