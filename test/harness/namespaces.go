package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetNamespace makes namespace one a document's target may name: it
// creates the namespace if it is missing, and the Role and RoleBinding
// deploy/base/rbac.yaml asks for there (the controller's ServiceAccount
// may create, patch and delete EnvoyFilters in it).
func (c *Cluster) TargetNamespace(ctx context.Context, namespace string) error {
	_, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "globalconfig", Namespace: namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"networking.istio.io"}, Resources: []string{"envoyfilters"}, Verbs: []string{"create", "patch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "globalconfig", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "globalconfig"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "globalconfig", Namespace: Namespace}},
	}
	if _, err := c.Admin.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create role in %s: %w", namespace, err)
	}
	if _, err := c.Admin.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create role binding in %s: %w", namespace, err)
	}
	return nil
}
