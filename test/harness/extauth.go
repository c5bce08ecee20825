package harness

import (
	"context"
	"crypto/sha1" //nolint:gosec // htpasswd's {SHA} scheme, for a test user
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The auth services the extAuth item is tested against, built and cached
// by `make tools` (extauthz-tools) and named by the Makefile.
const (
	// EnvOAuth2Proxy names oauth2-proxy v7, the service ingress-nginx's
	// global-auth-url users run.
	EnvOAuth2Proxy = "GLOBALCONFIG_OAUTH2_PROXY"
	// EnvExtAuthz names Istio's sample ext_authz server
	// (samples/extauthz), which speaks Envoy's gRPC Authorization API.
	EnvExtAuthz = "GLOBALCONFIG_EXTAUTHZ"
)

// The user oauth2-proxy's htpasswd file knows.
const (
	AuthUser     = "tester"
	AuthPassword = "secret"
	AuthGroup    = "testers"
)

// OAuth2Proxy is oauth2-proxy on loopback, signing users in from an
// htpasswd file (basic auth, or its sign-in form and a cookie session),
// with no identity provider. It proxies every path but its own /oauth2/*
// to a static 200 (--upstream=static://200), so any path answers 200 for
// a signed-in request: Envoy's HTTP ext_authz allows a request only on a
// 200, and oauth2-proxy's own /oauth2/auth answers 202.
type OAuth2Proxy struct {
	*Process
	Port int
	bin  string
	args []string
	dir  string
}

// StartOAuth2Proxy starts oauth2-proxy in dir and waits until it answers.
// Redirects after sign-in may go to any host under whitelist (for
// example ".proxy.test:*").
func StartOAuth2Proxy(ctx context.Context, dir, whitelist string) (*OAuth2Proxy, error) {
	bin, err := Binary(EnvOAuth2Proxy)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(AuthPassword)) //nolint:gosec // htpasswd's {SHA} scheme
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(AuthUser+":{SHA}"+base64.StdEncoding.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		return nil, err
	}
	// A port picked free may be taken before oauth2-proxy binds it (other
	// test processes share the machine): then it exits, and another port
	// is tried.
	var last error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		o := &OAuth2Proxy{Port: port, bin: bin, dir: dir, args: []string{
			"--http-address=127.0.0.1:" + strconv.Itoa(port),
			"--htpasswd-file=" + htpasswd, "--htpasswd-user-group=" + AuthGroup,
			"--email-domain=*", "--cookie-secret=0123456789abcdef0123456789abcdef", "--cookie-secure=false",
			"--client-id=unused", "--client-secret=unused",
			"--upstream=static://200", "--reverse-proxy", "--set-xauthrequest", "--force-json-errors",
			"--whitelist-domain=" + whitelist,
		}}
		if last = o.Start(ctx); last == nil {
			return o, nil
		}
	}
	return nil, last
}

// Start starts (or restarts) the process on its port and waits until it
// answers there: its /ping says OK, and it is still running.
func (o *OAuth2Proxy) Start(ctx context.Context) error {
	p, err := Start(o.dir, "oauth2-proxy", o.bin, o.args, nil)
	if err != nil {
		return err
	}
	o.Process = p
	url := fmt.Sprintf("http://127.0.0.1:%d/ping", o.Port)
	client := &http.Client{Timeout: time.Second}
	ok := Eventually(ctx, 20*time.Second, func() bool {
		if p.Exited() {
			return true
		}
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "OK"
	})
	if ok && !p.Exited() {
		time.Sleep(200 * time.Millisecond)
	}
	if !ok || p.Exited() {
		p.Kill()
		return fmt.Errorf("oauth2-proxy does not answer on port %d:\n%s", o.Port, p.Log(3000))
	}
	return nil
}

// ExtAuthz is Istio's sample ext_authz server: it allows a request with
// the header x-ext-authz: allow and refuses every other one with 403,
// over HTTP and over Envoy's gRPC Authorization API (v3), and tells the
// backend its verdict in x-ext-authz-check-result. It listens on every
// interface (the sample has no flag for the address), on ports picked
// free on loopback.
type ExtAuthz struct {
	*Process
	HTTPPort, GRPCPort int
}

// StartExtAuthz starts the sample ext_authz server in dir and waits until
// both its ports accept connections.
func StartExtAuthz(ctx context.Context, dir string) (*ExtAuthz, error) {
	bin, err := Binary(EnvExtAuthz)
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 {
		x := &ExtAuthz{}
		if x.HTTPPort, err = FreePort(); err != nil {
			return nil, err
		}
		if x.GRPCPort, err = FreePort(); err != nil {
			return nil, err
		}
		if x.Process, err = Start(dir, "extauthz", bin, []string{"-http", strconv.Itoa(x.HTTPPort), "-grpc", strconv.Itoa(x.GRPCPort)}, nil); err != nil {
			return nil, err
		}
		// It logs each server once it listens; a port taken meanwhile
		// makes it exit.
		ok := Eventually(ctx, 20*time.Second, func() bool {
			log := x.Log(4000)
			return x.Exited() || strings.Contains(log, "Starting gRPC server") && strings.Contains(log, "Starting HTTP server")
		})
		if ok && !x.Exited() {
			time.Sleep(200 * time.Millisecond)
		}
		if ok && !x.Exited() && listening(x.GRPCPort) && listening(x.HTTPPort) {
			return x, nil
		}
		x.Kill()
		last = fmt.Errorf("ext_authz sample does not listen:\n%s", x.Log(3000))
	}
	return nil, last
}

// listening reports whether a loopback port accepts connections.
func listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
