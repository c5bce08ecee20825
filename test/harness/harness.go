// Package harness starts the real parts the integration and end-to-end
// tests run against — etcd, kube-apiserver and istiod — as processes on
// loopback, from binaries the Makefile builds into a cache outside the
// checkout (see `make tools`). `make run` uses it for its sandbox too.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalconfig/globalconfig/test/toolcache"
)

// Environment variables, set by the Makefile, naming the built binaries.
const (
	EnvKubeAPIServer  = "GLOBALCONFIG_KUBE_APISERVER"
	EnvEtcd           = "GLOBALCONFIG_ETCD"
	EnvKubectl        = "GLOBALCONFIG_KUBECTL"
	EnvPilotDiscovery = "GLOBALCONFIG_PILOT_DISCOVERY"
	EnvIstioctl       = "GLOBALCONFIG_ISTIOCTL"
	EnvHelm           = "GLOBALCONFIG_HELM"
)

// Namespace is Istio's root namespace, where the global ConfigMap lives.
const Namespace = "istio-system"

// Tokens of the users the API server knows (tokens.csv: static, read when
// it starts, the same in every cluster).
const (
	adminToken      = "globalconfig-admin-token"
	controllerToken = "globalconfig-controller-token"
	operatorToken   = "globalconfig-operator-token"
	readerToken     = "globalconfig-reader-token"
	memberToken     = "globalconfig-member-token"
	// AdminUser is in system:masters: it may do anything.
	AdminUser = "admin"
	// ControllerUser is the user the controller runs as: the ServiceAccount
	// deploy/base/rbac.yaml binds, so the tests exercise that RBAC.
	ControllerUser = "system:serviceaccount:istio-system:globalconfig"
	// OperatorUser is a person bound to the globalconfig-operator Role.
	OperatorUser = "operator"
	// ReaderUser may only read (get, list, watch) EnvoyFilters, Services
	// and ServiceEntries, in every namespace (ReaderClusterRole): a
	// member's credentials that can't write EnvoyFilters.
	ReaderUser = "reader"
	// MemberUser is the ServiceAccount istio-system/globalconfig-member
	// that a member cluster's least RBAC binds (deploy/member, globalconfig
	// create-member-secret); the cluster binds nothing to it until the test
	// applies that RBAC. Its token is static, so a member Secret can hold
	// it without the token controller a real cluster runs.
	MemberUser = "system:serviceaccount:istio-system:globalconfig-member"
	// ReaderClusterRole is the ClusterRole bound to ReaderUser.
	ReaderClusterRole = "globalconfig-test-reader"
)

// DefaultClusterName is the name of a cluster StartCluster starts, and
// istiod's cluster ID when CLUSTER_ID is unset.
const DefaultClusterName = "Kubernetes"

// Binary returns the path an environment variable names, or an error that
// says how to get it.
func Binary(env string) (string, error) {
	p := os.Getenv(env)
	if p == "" {
		return "", toolcache.Unset("the real components", env)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("$%s: %w (run `make tools`, or this suite with `%s`)", env, err, toolcache.Command())
	}
	return p, nil
}

// RepoRoot is the root of the checkout.
func RepoRoot() string { return toolcache.RepoRoot() }

// FreePort returns a loopback port that was free a moment ago. It is
// drawn at random from below the kernel's ephemeral range, so that the
// source port of some outgoing connection (the tests make thousands) can't
// take it between this check and the server's bind: with ports from ":0"
// that happened about once in ten suite runs.
func FreePort() (int, error) {
	lo, hi := 10000, ephemeralLow()-1
	for range 100 {
		port := lo + mrand.IntN(hi-lo+1)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return port, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it can't be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				return n
			}
		}
	}
	return 32768
}

// Process is a child process whose output goes to a log file.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	err     error
}

// Start starts bin with args and env (added to the environment).
func Start(dir, name, bin string, args, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	// Own process group, and killed if the test process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process ends.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM and waits up to grace, then kills.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
	}
	p.Kill()
	return errors.New(p.Name + " did not stop within " + grace.String())
}

// Kill kills the process group at once (SIGKILL) and waits.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Log returns the tail of the process's log.
func (p *Process) Log(maxBytes int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	return string(b)
}

// Cluster is kube-apiserver on loopback, with Istio's CRDs and the
// controller's RBAC installed, and the etcd it stores its state in, which
// it may share with other clusters (StartClusters, StartSibling).
type Cluster struct {
	// Name is the cluster's name: DefaultClusterName for StartCluster's,
	// the name given for StartClusters' and StartSibling's. Give it to
	// its istiod as its cluster ID (IstiodOptions.ClusterID) and to its
	// proxies (GatewayOptions.ClusterID).
	Name                 string
	Dir                  string
	APIServerURL         string
	AdminKubeconfig      string
	ControllerKubeconfig string
	// OperatorKubeconfig is a user bound to deploy/base/operator-rbac.yaml's
	// Role only (OperatorUser).
	OperatorKubeconfig string
	// ReaderKubeconfig is ReaderUser's: read-only.
	ReaderKubeconfig string
	// MemberKubeconfig is MemberUser's.
	MemberKubeconfig string
	Admin            kubernetes.Interface
	Istio            istioclient.Interface
	AdminConfig      *rest.Config

	etcd          *sharedEtcd
	apiserver     *Process
	apiserverBin  string
	apiserverArgs []string
	stopOnce      sync.Once
}

// sharedEtcd is an etcd one or more clusters keep their state in, each
// under its own key prefix; it stops when the last of them stops.
type sharedEtcd struct {
	*Process
	URL string

	mu    sync.Mutex
	users int
}

// startEtcd starts etcd with its data in dir/etcd and its log in dir.
func startEtcd(dir string) (*sharedEtcd, error) {
	etcdBin, err := Binary(EnvEtcd)
	if err != nil {
		return nil, err
	}
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	p, err := Start(dir, "etcd", etcdBin, []string{
		"--name=default", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	}, nil)
	if err != nil {
		return nil, err
	}
	return &sharedEtcd{Process: p, URL: etcdURL}, nil
}

// acquire counts one more cluster on e.
func (e *sharedEtcd) acquire() {
	e.mu.Lock()
	e.users++
	e.mu.Unlock()
}

// release counts one cluster fewer on e, and stops e after the last.
func (e *sharedEtcd) release() {
	e.mu.Lock()
	e.users--
	last := e.users <= 0
	e.mu.Unlock()
	if last {
		_ = e.Stop(10 * time.Second)
	}
}

// StartCluster starts etcd and kube-apiserver in dir and prepares them.
// The cluster is named DefaultClusterName, and its API server keeps its
// state under etcd's default prefix.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	if _, err := Binary(EnvKubeAPIServer); err != nil {
		return nil, err
	}
	etcd, err := startEtcd(dir)
	if err != nil {
		return nil, err
	}
	return startAPIServerOn(ctx, etcd, dir, DefaultClusterName, "")
}

// StartClusters starts one etcd in dir and, on it, one prepared cluster
// per name (at least one), each in dir/<name> with its own kube-apiserver
// (its own port, certificates, tokens and kubeconfigs), keeping its state
// under the etcd prefix /clusters/<name>. The API servers start and are
// prepared in parallel. Each cluster's Stop stops its API server; the
// etcd stops with the last of them.
func StartClusters(ctx context.Context, dir string, names ...string) ([]*Cluster, error) {
	if len(names) == 0 {
		return nil, errors.New("start clusters: no cluster name given")
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := checkClusterName(n); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, fmt.Errorf("start clusters: cluster name %q is given twice", n)
		}
		seen[n] = true
	}
	if _, err := Binary(EnvKubeAPIServer); err != nil {
		return nil, err
	}
	etcd, err := startEtcd(dir)
	if err != nil {
		return nil, err
	}
	// The etcd stays up while the clusters start; each started cluster
	// holds it on its own.
	etcd.acquire()
	defer etcd.release()
	clusters := make([]*Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = startMember(ctx, etcd, filepath.Join(dir, name), name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range clusters {
			if c != nil {
				c.Stop()
			}
		}
		return nil, err
	}
	return clusters, nil
}

// StartSibling starts another prepared cluster named name on c's etcd,
// in dir (created if missing) with its own kube-apiserver, as
// StartClusters starts each of its clusters.
func (c *Cluster) StartSibling(ctx context.Context, dir, name string) (*Cluster, error) {
	if err := checkClusterName(name); err != nil {
		return nil, err
	}
	if c.etcd == nil || c.etcd.Exited() {
		return nil, fmt.Errorf("start cluster %s: the etcd of cluster %s is not running", name, c.Name)
	}
	return startMember(ctx, c.etcd, dir, name)
}

// clusterNamePattern is what a cluster name may be here, as Istio
// cluster IDs go (Kubernetes, eu-west-1) and as a Secret's data key, a
// directory and an etcd prefix can hold it.
var clusterNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// checkClusterName refuses a name that can't be a cluster ID, a
// directory, an etcd prefix and a Secret's data key alike.
func checkClusterName(name string) error {
	if !clusterNamePattern.MatchString(name) {
		return fmt.Errorf("cluster name %q must be 1 to 63 letters, digits, '.', '_' and '-', starting and ending with a letter or a digit", name)
	}
	return nil
}

// SecretNameFor is prefix followed by cluster name made fit for an
// object's name: lower case, '_' as '-'.
func SecretNameFor(prefix, name string) string {
	return prefix + strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// startMember starts the API server of cluster name on etcd, in dir, with
// its own etcd prefix.
func startMember(ctx context.Context, etcd *sharedEtcd, dir, name string) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startAPIServerOn(ctx, etcd, dir, name, "/clusters/"+name)
}

// startAPIServerOn starts and prepares the API server of cluster name in
// dir, storing its state in etcd under prefix ("" for etcd's default). The
// cluster holds etcd until it stops; on an error it is stopped.
func startAPIServerOn(ctx context.Context, etcd *sharedEtcd, dir, name, prefix string) (*Cluster, error) {
	apiserverBin, err := Binary(EnvKubeAPIServer)
	if err != nil {
		return nil, err
	}
	etcd.acquire()
	c := &Cluster{Name: name, Dir: dir, apiserverBin: apiserverBin, etcd: etcd}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := writeAuthFiles(dir); err != nil {
		return nil, err
	}
	c.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	c.apiserverArgs = []string{
		"--etcd-servers=" + etcd.URL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
	}
	if prefix != "" {
		c.apiserverArgs = append(c.apiserverArgs, "--etcd-prefix="+prefix)
	}
	if err := c.StartAPIServer(ctx); err != nil {
		return nil, err
	}
	c.AdminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	c.ControllerKubeconfig = filepath.Join(dir, "controller.kubeconfig")
	c.OperatorKubeconfig = filepath.Join(dir, "operator.kubeconfig")
	c.ReaderKubeconfig = filepath.Join(dir, "reader.kubeconfig")
	c.MemberKubeconfig = filepath.Join(dir, "member.kubeconfig")
	for path, token := range map[string]string{c.AdminKubeconfig: adminToken, c.ControllerKubeconfig: controllerToken,
		c.OperatorKubeconfig: operatorToken, c.ReaderKubeconfig: readerToken, c.MemberKubeconfig: memberToken} {
		if err := writeKubeconfig(path, c.APIServerURL, token); err != nil {
			return nil, err
		}
	}
	if c.AdminConfig, err = clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig); err != nil {
		return nil, err
	}
	c.AdminConfig.QPS, c.AdminConfig.Burst = 200, 400
	if c.Admin, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		return nil, err
	}
	if c.Istio, err = istioclient.NewForConfig(c.AdminConfig); err != nil {
		return nil, err
	}
	if err := c.prepare(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// StartAPIServer starts (or restarts) kube-apiserver and waits until ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if c.apiserver != nil && !c.apiserver.Exited() {
		return fmt.Errorf("start the API server of cluster %s: it is running", c.Name)
	}
	p, err := Start(c.Dir, "kube-apiserver", c.apiserverBin, c.apiserverArgs, nil)
	if err != nil {
		return err
	}
	c.apiserver = p
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// Loopback only, against the server's own self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("kube-apiserver exited: %s", p.Log(3000))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.APIServerURL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready after 90s: %s", p.Log(3000))
}

// StopAPIServer stops kube-apiserver; etcd keeps the state, and
// StartAPIServer starts it again on the same port.
func (c *Cluster) StopAPIServer() {
	if c.apiserver != nil {
		_ = c.apiserver.Stop(10 * time.Second)
	}
}

// KillAPIServer kills kube-apiserver at once (SIGKILL), as a crash or a
// lost machine would end it; etcd keeps the state, and StartAPIServer
// starts it again on the same port. (StopAPIServer's SIGTERM takes the
// whole 10 s grace while istiod watches the server: it then kills it.)
func (c *Cluster) KillAPIServer() {
	if c.apiserver != nil {
		c.apiserver.Kill()
	}
}

// APIServer is the cluster's running (or last) kube-apiserver process.
func (c *Cluster) APIServer() *Process { return c.apiserver }

// Etcd is the etcd process the cluster keeps its state in (shared by
// the clusters of StartClusters and StartSibling).
func (c *Cluster) Etcd() *Process {
	if c.etcd == nil {
		return nil
	}
	return c.etcd.Process
}

// Stop stops the cluster's API server, and its etcd unless another
// cluster still keeps its state there. A second call does nothing.
func (c *Cluster) Stop() {
	c.StopAPIServer()
	c.stopOnce.Do(func() {
		if c.etcd != nil {
			c.etcd.release()
		}
	})
}

// Kubectl runs the built kubectl as admin.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	bin, err := Binary(EnvKubectl)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + c.AdminKubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// prepare creates istio-system, installs Istio's CRDs and the controller's
// ServiceAccount and RBAC from deploy/.
func (c *Cluster) prepare(ctx context.Context) error {
	_, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace: %w", err)
	}
	crds, err := IstioCRDs()
	if err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, nil, "wait", "--for=condition=established", "--timeout=60s", "crd/envoyfilters.networking.istio.io", "crd/gateways.networking.istio.io"); err != nil {
		return err
	}
	root := RepoRoot()
	base := filepath.Join(root, "deploy", "base")
	if _, err = c.Kubectl(ctx, nil, "apply", "-f", filepath.Join(base, "serviceaccount.yaml"), "-f", filepath.Join(base, "rbac.yaml"),
		"-f", filepath.Join(base, "operator-rbac.yaml")); err != nil {
		return err
	}
	if _, err = c.Kubectl(ctx, nil, "create", "rolebinding", "globalconfig-operator", "-n", Namespace, "--role=globalconfig-operator", "--user="+OperatorUser); err != nil {
		return err
	}
	return c.bindReader(ctx)
}

// bindReader lets ReaderUser read (get, list, watch) EnvoyFilters,
// Services and ServiceEntries in every namespace, and nothing else.
func (c *Cluster) bindReader(ctx context.Context) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderClusterRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"networking.istio.io"}, Resources: []string{"envoyfilters", "serviceentries"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderClusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ReaderClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ReaderUser}},
	}
	if _, err := c.Admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create cluster role %s: %w", ReaderClusterRole, err)
	}
	if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create cluster role binding %s: %w", ReaderClusterRole, err)
	}
	return nil
}

// Kubeconfig is the path and the contents of the kubeconfig of user
// (AdminUser, ControllerUser, OperatorUser, ReaderUser or MemberUser) for c's API
// server, its namespace istio-system: what a member Secret or an Istio
// remote secret holds.
func (c *Cluster) Kubeconfig(user string) (path string, data []byte, err error) {
	paths := map[string]string{AdminUser: c.AdminKubeconfig, ControllerUser: c.ControllerKubeconfig,
		OperatorUser: c.OperatorKubeconfig, ReaderUser: c.ReaderKubeconfig, MemberUser: c.MemberKubeconfig}
	path, ok := paths[user]
	if !ok {
		return "", nil, fmt.Errorf("kubeconfig of cluster %s: no user %q: the users are %s, %s, %s, %s and %s",
			c.Name, user, AdminUser, ControllerUser, OperatorUser, ReaderUser, MemberUser)
	}
	if data, err = os.ReadFile(path); err != nil {
		return "", nil, fmt.Errorf("kubeconfig of cluster %s for %s: %w", c.Name, user, err)
	}
	return path, data, nil
}

// Istio's remote-secret format (istioctl create-remote-secret): a
// kubeconfig in the data key named after the cluster, the cluster's name
// also in an annotation, and the label istiod's secret controller watches.
const (
	RemoteSecretLabel             = "istio/multiCluster"
	RemoteSecretClusterAnnotation = "networking.istio.io/cluster"
)

// RemoteSecretFor is a Secret in Istio's remote-secret format for cluster
// of, in istio-system, named istio-remote-secret-<of.Name> (lower case,
// as SecretNameFor makes it): data key
// of.Name holds the kubeconfig of user for of's API server, and the
// annotation networking.istio.io/cluster names of. It has no label: add
// Istio's (CreateRemoteSecret does) or globalconfig's member label.
func RemoteSecretFor(of *Cluster, user string) (*corev1.Secret, error) {
	_, kubeconfig, err := of.Kubeconfig(user)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        SecretNameFor("istio-remote-secret-", of.Name),
			Namespace:   Namespace,
			Annotations: map[string]string{RemoteSecretClusterAnnotation: of.Name},
		},
		Data: map[string][]byte{of.Name: kubeconfig},
	}, nil
}

// CreateRemoteSecret creates in c's istio-system Istio's remote secret
// for cluster of (label istio/multiCluster: "true", of's admin
// kubeconfig): c's istiod then discovers of's services and endpoints, and
// knows the proxies that report of's name as their cluster ID.
func (c *Cluster) CreateRemoteSecret(ctx context.Context, of *Cluster) error {
	sec, err := RemoteSecretFor(of, AdminUser)
	if err != nil {
		return err
	}
	sec.Labels = map[string]string{RemoteSecretLabel: "true"}
	if _, err := c.Admin.CoreV1().Secrets(Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the remote secret of cluster %s in cluster %s: %w", of.Name, c.Name, err)
	}
	return nil
}

// IstioCRDs is the path of Istio's CRDs in the istio.io/api module the
// project builds with.
func IstioCRDs() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate istio.io/api: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "kubernetes", "customresourcedefinitions.gen.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

func writeAuthFiles(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	tokens := fmt.Sprintf("%s,%s,admin-uid,system:masters\n%s,%s,controller-uid,\"system:serviceaccounts,system:serviceaccounts:istio-system\"\n%s,%s,operator-uid\n%s,%s,reader-uid\n%s,%s,member-uid,\"system:serviceaccounts,system:serviceaccounts:istio-system\"\n",
		adminToken, AdminUser, controllerToken, ControllerUser, operatorToken, OperatorUser, readerToken, ReaderUser, memberToken, MemberUser)
	return os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600)
}

func writeKubeconfig(path, server, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: sandbox
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: user
  user:
    token: %s
contexts:
- name: sandbox
  context:
    cluster: sandbox
    user: user
    namespace: istio-system
current-context: sandbox
`, server, token)
	return os.WriteFile(path, []byte(cfg), 0o600)
}
