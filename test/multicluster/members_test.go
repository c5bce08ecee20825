package multicluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/test/harness"
)

// homeSecretsRole is the Role that lets the controller read member
// Secrets in its namespace of the home cluster.
const homeSecretsRole = "globalconfig-member-secrets"

// allowMemberSecrets lets the controller's ServiceAccount in c read the
// Secrets of its namespace (run --member-secrets lists and watches
// them), which deploy/base does not grant: a single-cluster install reads
// no Secret but the webhook's.
func allowMemberSecrets(ctx context.Context, c *harness.Cluster) error {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: homeSecretsRole, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: homeSecretsRole, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: homeSecretsRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "globalconfig", Namespace: ns}},
	}
	if _, err := c.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster %s: create role %s: %w", c.Name, homeSecretsRole, err)
	}
	if _, err := c.Admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster %s: create role binding %s: %w", c.Name, homeSecretsRole, err)
	}
	return nil
}

// memberSecret is the member Secret of s for the controller in cluster
// a: user's kubeconfig for s's API server (harness.ControllerUser, bound
// by deploy/base; harness.MemberUser, once the test applied the member
// RBAC of deploy/member in s; harness.ReaderUser to be refused every
// write), and the
// address of s's istiod, which the controller can't find from s's
// EndpointSlices on loopback.
func memberSecret(s *site, user string) (*corev1.Secret, error) {
	sec, err := harness.RemoteSecretFor(s.Cluster, user)
	if err != nil {
		return nil, err
	}
	sec.Name = harness.SecretNameFor("globalconfig-member-", s.Name)
	sec.Labels = map[string]string{members.LabelMember: "true"}
	sec.Annotations[members.AnnotationCluster] = s.Name
	sec.Annotations[members.AnnotationIstiodDebugURLs] = s.Istiod.DebugURL()
	return sec, nil
}

// addMember creates s's member Secret (user's credentials) in cluster a,
// and deletes it when t ends.
func addMember(ctx context.Context, t testing.TB, s *site, user string) *corev1.Secret {
	t.Helper()
	sec, err := memberSecret(s, user)
	if err != nil {
		t.Fatal(err)
	}
	secrets := siteA.Admin.CoreV1().Secrets(ns)
	if sec, err = secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the member Secret of cluster %s in cluster %s: %v", s.Name, siteA.Name, err)
	}
	t.Cleanup(func() {
		err := secrets.Delete(context.Background(), sec.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the member Secret of cluster %s: %v", s.Name, err)
		}
	})
	return sec
}

// runController runs the controller in cluster a, its home (named a,
// watching member Secrets, following a's istiod), without leader
// election, until t ends; args add flags. When t ends, after the
// controller is gone, the EnvoyFilters it made in the other clusters are
// removed too (harness.RunController removes a's).
func runController(t testing.TB, args ...string) *harness.Controller {
	t.Helper()
	// Registered first, so it runs last: after RunController's cleanup
	// has killed the controller, which would otherwise put them back.
	t.Cleanup(func() {
		for _, s := range sites[1:] {
			if err := s.PruneManaged(context.Background()); err != nil {
				t.Errorf("remove the managed EnvoyFilters of cluster %s: %v", s.Name, err)
			}
		}
	})
	return siteA.RunController(t, controllerBin, append([]string{
		"--cluster-name=" + siteA.Name, "--member-secrets",
		"--istiod-debug-url=" + siteA.Istiod.DebugURL(),
	}, args...)...)
}

// hasHTTPFilter tells whether s's gateway's active listeners carry the
// HTTP filter name, by its own config dump: the listeners it runs, not
// the configuration it refused (error_state).
func (s *site) hasHTTPFilter(ctx context.Context, name string) (bool, error) {
	body, err := s.Gateway.Get(ctx, "/config_dump?resource=dynamic_listeners")
	if err != nil {
		return false, fmt.Errorf("config dump of the gateway of cluster %s: %w", s.Name, err)
	}
	var dump struct {
		Configs []struct {
			ActiveState json.RawMessage `json:"active_state"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(body, &dump); err != nil {
		return false, fmt.Errorf("config dump of the gateway of cluster %s: %w", s.Name, err)
	}
	for _, c := range dump.Configs {
		if bytes.Contains(c.ActiveState, []byte(`"name":"`+name+`"`)) || bytes.Contains(c.ActiveState, []byte(`"name": "`+name+`"`)) {
			return true, nil
		}
	}
	return false, nil
}
