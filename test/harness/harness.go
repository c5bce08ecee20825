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
	"strconv"
	"strings"
	"syscall"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
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

// Tokens of the two users the API server knows.
const (
	adminToken      = "globalconfig-admin-token"
	controllerToken = "globalconfig-controller-token"
	operatorToken   = "globalconfig-operator-token"
	// ControllerUser is the user the controller runs as: the ServiceAccount
	// deploy/base/rbac.yaml binds, so the tests exercise that RBAC.
	ControllerUser = "system:serviceaccount:istio-system:globalconfig"
	// OperatorUser is a person bound to the globalconfig-operator Role.
	OperatorUser = "operator"
)

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

// Cluster is etcd and kube-apiserver on loopback, with Istio's CRDs and the
// controller's RBAC installed.
type Cluster struct {
	Dir                  string
	APIServerURL         string
	AdminKubeconfig      string
	ControllerKubeconfig string
	// OperatorKubeconfig is a user bound to deploy/base/operator-rbac.yaml's
	// Role only (OperatorUser).
	OperatorKubeconfig string
	Admin              kubernetes.Interface
	Istio              istioclient.Interface
	AdminConfig        *rest.Config

	etcd, apiserver *Process
	apiserverBin    string
	apiserverArgs   []string
}

// StartCluster starts etcd and kube-apiserver in dir and prepares them.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	apiserverBin, err := Binary(EnvKubeAPIServer)
	if err != nil {
		return nil, err
	}
	etcdBin, err := Binary(EnvEtcd)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, apiserverBin: apiserverBin}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.etcd, err = Start(dir, "etcd", etcdBin, []string{
		"--name=default", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	}, nil)
	if err != nil {
		return nil, err
	}
	if err := writeAuthFiles(dir); err != nil {
		return nil, err
	}
	c.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	c.apiserverArgs = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[2]),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
	}
	if err := c.StartAPIServer(ctx); err != nil {
		return nil, err
	}
	c.AdminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	c.ControllerKubeconfig = filepath.Join(dir, "controller.kubeconfig")
	c.OperatorKubeconfig = filepath.Join(dir, "operator.kubeconfig")
	for path, token := range map[string]string{c.AdminKubeconfig: adminToken, c.ControllerKubeconfig: controllerToken, c.OperatorKubeconfig: operatorToken} {
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

// StopAPIServer stops kube-apiserver; etcd keeps the state.
func (c *Cluster) StopAPIServer() {
	if c.apiserver != nil {
		_ = c.apiserver.Stop(10 * time.Second)
	}
}

// Stop stops everything.
func (c *Cluster) Stop() {
	c.StopAPIServer()
	if c.etcd != nil {
		_ = c.etcd.Stop(10 * time.Second)
	}
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
	_, err = c.Kubectl(ctx, nil, "create", "rolebinding", "globalconfig-operator", "-n", Namespace, "--role=globalconfig-operator", "--user="+OperatorUser)
	return err
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
	tokens := fmt.Sprintf("%s,admin,admin-uid,system:masters\n%s,%s,controller-uid,\"system:serviceaccounts,system:serviceaccounts:istio-system\"\n%s,%s,operator-uid\n",
		adminToken, controllerToken, ControllerUser, operatorToken, OperatorUser)
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
