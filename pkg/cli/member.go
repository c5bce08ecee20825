package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/members"
)

// What create-member-secret creates in a member cluster. deploy/member
// holds the same objects as static YAML (TestMemberRBACMatchesDeploy keeps
// them equal).
const (
	// MemberServiceAccount is the account the home cluster's controller
	// acts as in the member.
	MemberServiceAccount = "globalconfig-member"
	// MemberTokenSecret is the long-lived token Secret of
	// MemberServiceAccount (--token=secret, and auto when the member's
	// token controller fills it).
	MemberTokenSecret = "globalconfig-member-token"
	// memberRead is the ClusterRole (and its binding) for what the
	// controller reads cluster-wide: its own EnvoyFilters (the informer
	// lists and watches them in every namespace by label), and the
	// Services and ServiceEntries the items send to (service facts).
	memberRead = "globalconfig-member"
	// memberWrite is the Role (and binding) in each EnvoyFilter namespace.
	memberWrite = "globalconfig-member-envoyfilters"
	// memberIstiod is the Role (and binding) in istiod's namespace: its
	// EndpointSlices, to find the member's istiod instances.
	memberIstiod = "globalconfig-member-istiod"
	// memberFieldManager is the server-side apply manager of the command.
	memberFieldManager = "globalconfig-create-member-secret"
	// MemberSecretPrefix starts the name of the member Secret printed for
	// the home cluster; the cluster's name (lower-cased) follows.
	MemberSecretPrefix = "globalconfig-member-"
)

// Token modes of create-member-secret.
const (
	tokenAuto    = "auto"
	tokenSecret  = "secret"
	tokenRequest = "request"
)

// Defaults of create-member-secret.
const (
	// DefaultTokenWait is how long --token=secret (and auto) waits for
	// the member's token controller to fill the token Secret; it takes
	// well under a second where kube-controller-manager runs.
	DefaultTokenWait = 10 * time.Second
	// DefaultTokenDuration is what --token=request asks for: a year. The
	// API server may grant less (--service-account-max-token-expiration);
	// the command prints the expiry it got.
	DefaultTokenDuration = 365 * 24 * time.Hour
)

// memberLabels mark every object the command creates.
var memberLabels = map[string]string{"app.kubernetes.io/name": "globalconfig", "app.kubernetes.io/component": "member"}

// memberOptions are create-member-secret's flags.
type memberOptions struct {
	kubeconfig, context string
	name                string
	namespace           string // the ServiceAccount's
	envoyFilterNS       []string
	istiodNamespace     string
	homeNamespace       string // the member Secret's, in the home cluster
	server              string
	debugURLs           string
	token               string
	tokenDuration       time.Duration
	tokenWait           time.Duration
}

// createMemberSecretCommand is `globalconfig create-member-secret`: run
// with a member cluster's credentials, it gives that cluster the least
// RBAC the home cluster's controller needs there (server-side apply, so
// it is idempotent), a token for it, and prints on stdout the member
// Secret to apply in the home cluster. The token goes to stdout only.
func createMemberSecretCommand(args []string, env Env) int {
	const cmd = "create-member-secret"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var o memberOptions
	var efNS string
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the MEMBER cluster's kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
	fs.StringVar(&o.context, "context", "", "the kubeconfig context of the member cluster (default: the current context)")
	fs.StringVar(&o.name, "name", "", "the member cluster's name, as target.clusters, rollout.clusters and the status call it (its istiod's CLUSTER_ID); required")
	fs.StringVar(&o.namespace, "namespace", "istio-system", "the member's namespace for the ServiceAccount "+MemberServiceAccount+" and its token")
	fs.StringVar(&efNS, "envoyfilter-namespaces", "istio-system", "comma-separated namespaces of the member the document's targets write EnvoyFilters to")
	fs.StringVar(&o.istiodNamespace, "istiod-namespace", "istio-system", "the member's istiod namespace, whose EndpointSlices find its istiod instances")
	fs.StringVar(&o.homeNamespace, "home-namespace", "istio-system", "the namespace of the printed member Secret: the controller's (its global ConfigMap's) in the home cluster")
	fs.StringVar(&o.server, "server", "", "the member API server's URL as the home cluster's controller reaches it (default: the kubeconfig's)")
	fs.StringVar(&o.debugURLs, "istiod-debug-urls", "", "comma-separated base URLs of the member istiods' debug ports (http://HOST:8080), written as the annotation "+members.AnnotationIstiodDebugURLs+", when the controller can't reach their pod addresses")
	fs.StringVar(&o.token, "token", tokenAuto, "the member credential: secret (a long-lived ServiceAccount token Secret the member's token controller fills; revoked by deleting it), request (a TokenRequest of --token-duration: for clusters without a token controller; run the command again before it expires), or auto (secret when the member fills it within --token-wait, else request)")
	fs.DurationVar(&o.tokenDuration, "token-duration", DefaultTokenDuration, "how long a requested token (--token=request, or auto's fallback) lives")
	fs.DurationVar(&o.tokenWait, "token-wait", DefaultTokenWait, "how long to wait for the member's token controller to fill the token Secret")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "globalconfig %s: takes no arguments, got %q\n", cmd, fs.Args())
		return ExitUsage
	}
	for _, ns := range strings.Split(efNS, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(o.envoyFilterNS, ns) {
			o.envoyFilterNS = append(o.envoyFilterNS, ns)
		}
	}
	if msg := o.check(); msg != "" {
		fmt.Fprintf(env.Stderr, "globalconfig %s: %s\n", cmd, msg)
		return ExitUsage
	}

	cfg, err := memberRESTConfig(o.kubeconfig, o.context)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	var kube kubernetes.Interface
	if env.Clients != nil {
		kube, _, err = env.Clients(o.kubeconfig)
	} else {
		kube, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	ctx := context.Background()
	if err := applyMemberRBAC(ctx, kube, o); err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	token, expires, err := memberToken(ctx, kube, o, env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	secret, err := memberSecret(cfg, o, token)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	// Never print a Secret the controller would refuse.
	if _, err := members.Parse(secret); err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: the member Secret does not read back: %v\n", cmd, o.name, err)
		return ExitAPI
	}
	out, err := yaml.Marshal(secret)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: member %s: encode the Secret: %v\n", cmd, o.name, err)
		return ExitIO
	}
	if _, err := env.Stdout.Write(out); err != nil {
		return ExitIO
	}
	// What was done, without the credential: stderr may be logged.
	fmt.Fprintf(env.Stderr, "member %s: ServiceAccount %s/%s may write EnvoyFilters in %s and read EnvoyFilters, Services and ServiceEntries cluster-wide and istiod's EndpointSlices in %s.\n",
		o.name, o.namespace, MemberServiceAccount, strings.Join(o.envoyFilterNS, ", "), o.istiodNamespace)
	if !expires.IsZero() {
		fmt.Fprintf(env.Stderr, "member %s: its token expires at %s: run this command again before then, and apply its output in the home cluster.\n",
			o.name, expires.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(env.Stderr, "member %s: apply the Secret on stdout (it holds the token) in the home cluster, where it goes to namespace %s: kubectl apply -f -\n", o.name, o.homeNamespace)
	return ExitOK
}

// check says what is wrong with the flags, "" when nothing is.
func (o *memberOptions) check() string {
	if o.name == "" {
		return "--name is required: the member cluster's name (its istiod's CLUSTER_ID)"
	}
	if msg := members.ValidName(o.name); msg != "" {
		return "--name: " + msg
	}
	if len(o.envoyFilterNS) == 0 {
		return "--envoyfilter-namespaces names no namespace"
	}
	for _, f := range []struct {
		flag string
		list []string
	}{
		{"--namespace", []string{o.namespace}}, {"--envoyfilter-namespaces", o.envoyFilterNS},
		{"--istiod-namespace", []string{o.istiodNamespace}}, {"--home-namespace", []string{o.homeNamespace}},
	} {
		for _, ns := range f.list {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Sprintf("%s: %q is not a namespace name: %s", f.flag, ns, strings.Join(errs, "; "))
			}
		}
	}
	switch o.token {
	case tokenAuto, tokenSecret, tokenRequest:
	default:
		return fmt.Sprintf("--token must be auto, secret or request, got %q", o.token)
	}
	if o.tokenDuration < 10*time.Minute {
		return fmt.Sprintf("--token-duration %s is shorter than the 10 minutes the API server grants at least", o.tokenDuration)
	}
	if o.tokenWait < 0 {
		return "--token-wait is negative"
	}
	if o.server != "" && !strings.HasPrefix(o.server, "https://") && !strings.HasPrefix(o.server, "http://") {
		return fmt.Sprintf("--server %q is not an https:// URL", o.server)
	}
	for _, u := range strings.Split(o.debugURLs, ",") {
		// What the controller refuses when it reads the Secret.
		if u = strings.TrimSpace(u); u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Sprintf("--istiod-debug-urls: %q is not an http:// or https:// URL (istiod's debug port, e.g. http://10.0.0.10:8080)", u)
		}
	}
	return ""
}

// memberRESTConfig loads the member's kubeconfig and context.
func memberRESTConfig(kubeconfig, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "globalconfig"
	cfg.Timeout = APITimeout
	return cfg, nil
}

// applyMemberRBAC gives the ServiceAccount what the controller does in a
// member, and nothing more: write EnvoyFilters in the namespaces the
// document targets; read EnvoyFilters cluster-wide (the informer of the
// managed ones lists all namespaces by label, as in the home cluster),
// Services and ServiceEntries (service facts); read istiod's
// EndpointSlices. It needs no Secret, ConfigMap, Lease or Event there.
func applyMemberRBAC(ctx context.Context, kube kubernetes.Interface, o memberOptions) error {
	opts := metav1.ApplyOptions{FieldManager: memberFieldManager, Force: true}
	subject := rbacv1ac.Subject().WithKind("ServiceAccount").WithName(MemberServiceAccount).WithNamespace(o.namespace)
	fail := func(verb, resource string, err error) error {
		hint := ""
		if apierrors.IsForbidden(err) {
			hint = " (the credentials of --kubeconfig must be allowed to create RBAC in the member: a cluster admin's)"
		}
		return fmt.Errorf("%s %s: %w%s", verb, resource, err, hint)
	}

	if _, err := kube.CoreV1().ServiceAccounts(o.namespace).Apply(ctx,
		corev1ac.ServiceAccount(MemberServiceAccount, o.namespace).WithLabels(memberLabels), opts); err != nil {
		return fail("apply", "serviceaccount "+o.namespace+"/"+MemberServiceAccount, err)
	}
	read := rbacv1ac.ClusterRole(memberRead).WithLabels(memberLabels).WithRules(memberReadRules()...)
	if _, err := kube.RbacV1().ClusterRoles().Apply(ctx, read, opts); err != nil {
		return fail("apply", "clusterrole "+memberRead, err)
	}
	readBinding := rbacv1ac.ClusterRoleBinding(memberRead).WithLabels(memberLabels).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(memberRead)).
		WithSubjects(subject)
	if _, err := kube.RbacV1().ClusterRoleBindings().Apply(ctx, readBinding, opts); err != nil {
		return fail("apply", "clusterrolebinding "+memberRead, err)
	}
	roles := []struct {
		name, ns string
		rules    []*rbacv1ac.PolicyRuleApplyConfiguration
	}{{memberIstiod, o.istiodNamespace, memberIstiodRules()}}
	for _, ns := range o.envoyFilterNS {
		roles = append(roles, struct {
			name, ns string
			rules    []*rbacv1ac.PolicyRuleApplyConfiguration
		}{memberWrite, ns, memberWriteRules()})
	}
	for _, r := range roles {
		role := rbacv1ac.Role(r.name, r.ns).WithLabels(memberLabels).WithRules(r.rules...)
		if _, err := kube.RbacV1().Roles(r.ns).Apply(ctx, role, opts); err != nil {
			return fail("apply", "role "+r.ns+"/"+r.name, err)
		}
		binding := rbacv1ac.RoleBinding(r.name, r.ns).WithLabels(memberLabels).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Role").WithName(r.name)).
			WithSubjects(subject)
		if _, err := kube.RbacV1().RoleBindings(r.ns).Apply(ctx, binding, opts); err != nil {
			return fail("apply", "rolebinding "+r.ns+"/"+r.name, err)
		}
	}
	return nil
}

func memberReadRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("networking.istio.io").WithResources("envoyfilters").WithVerbs("get", "list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("services").WithVerbs("get", "list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("networking.istio.io").WithResources("serviceentries").WithVerbs("list", "watch"),
	}
}

func memberWriteRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("networking.istio.io").WithResources("envoyfilters").WithVerbs("create", "patch", "delete"),
	}
}

func memberIstiodRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("discovery.k8s.io").WithResources("endpointslices").WithVerbs("get", "list", "watch"),
	}
}

// memberToken returns the ServiceAccount's token, and when it expires
// (zero for a token Secret's, which lasts until the Secret is deleted).
func memberToken(ctx context.Context, kube kubernetes.Interface, o memberOptions, env Env) (string, time.Time, error) {
	if o.token != tokenRequest {
		tok, err := secretToken(ctx, kube, o)
		switch {
		case err == nil:
			return tok, time.Time{}, nil
		case o.token == tokenSecret || !errors.Is(err, errTokenNotFilled):
			return "", time.Time{}, err
		}
		// auto: no token controller filled it (a cluster without
		// kube-controller-manager). An unfilled Secret is dropped, so
		// that no credential appears later that nobody uses.
		if err := kube.CoreV1().Secrets(o.namespace).Delete(ctx, MemberTokenSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", time.Time{}, fmt.Errorf("delete secret %s/%s (its token was never filled): %w", o.namespace, MemberTokenSecret, err)
		}
		fmt.Fprintf(env.Stderr, "member %s: no token controller filled the Secret %s/%s within %s; requesting a token of %s instead (--token=request).\n",
			o.name, o.namespace, MemberTokenSecret, o.tokenWait, o.tokenDuration)
	}
	seconds := int64(o.tokenDuration / time.Second)
	tr, err := kube.CoreV1().ServiceAccounts(o.namespace).CreateToken(ctx, MemberServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("create serviceaccounts/token %s/%s: %w", o.namespace, MemberServiceAccount, err)
	}
	if tr.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("create serviceaccounts/token %s/%s: the API server returned no token", o.namespace, MemberServiceAccount)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

var errTokenNotFilled = errors.New("the token controller did not fill it")

// secretToken applies the ServiceAccount's token Secret and waits up to
// o.tokenWait for the member's token controller to fill it.
func secretToken(ctx context.Context, kube kubernetes.Interface, o memberOptions) (string, error) {
	key := o.namespace + "/" + MemberTokenSecret
	s := corev1ac.Secret(MemberTokenSecret, o.namespace).WithLabels(memberLabels).
		WithAnnotations(map[string]string{corev1.ServiceAccountNameKey: MemberServiceAccount}).
		WithType(corev1.SecretTypeServiceAccountToken)
	if _, err := kube.CoreV1().Secrets(o.namespace).Apply(ctx, s, metav1.ApplyOptions{FieldManager: memberFieldManager, Force: true}); err != nil {
		return "", fmt.Errorf("apply secret %s: %w", key, err)
	}
	deadline := time.Now().Add(o.tokenWait)
	for {
		got, err := kube.CoreV1().Secrets(o.namespace).Get(ctx, MemberTokenSecret, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get secret %s: %w", key, err)
		}
		if tok := got.Data[corev1.ServiceAccountTokenKey]; len(tok) > 0 {
			return string(tok), nil
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("secret %s: %w within %s (does the cluster run kube-controller-manager? --token=request asks the API server instead)", key, errTokenNotFilled, o.tokenWait)
		}
		time.Sleep(min(200*time.Millisecond, time.Until(deadline)))
	}
}

// memberSecret is the Secret for the home cluster: Istio's remote-secret
// format (a kubeconfig under the cluster's name) with globalconfig's
// label and annotations.
func memberSecret(cfg *rest.Config, o memberOptions, token string) (*corev1.Secret, error) {
	server := o.server
	if server == "" {
		server = cfg.Host
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the API server's CA of the kubeconfig: %w", err)
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[o.name] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: ca,
		TLSServerName:            cfg.ServerName,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos[o.name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[o.name] = &clientcmdapi.Context{Cluster: o.name, AuthInfo: o.name}
	kc.CurrentContext = o.name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("write the kubeconfig: %w", err)
	}
	annotations := map[string]string{members.AnnotationCluster: o.name}
	if o.debugURLs != "" {
		annotations[members.AnnotationIstiodDebugURLs] = o.debugURLs
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        MemberSecretName(o.name),
			Namespace:   o.homeNamespace,
			Labels:      map[string]string{members.LabelMember: "true", "app.kubernetes.io/name": "globalconfig"},
			Annotations: annotations,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{o.name: data},
	}, nil
}

// MemberSecretName is the home cluster's Secret name for the member
// cluster: MemberSecretPrefix and the name, lower-cased, with '_' and '.'
// as '-' (a cluster name may hold what an object name may not).
func MemberSecretName(cluster string) string {
	return MemberSecretPrefix + strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(cluster))
}
