package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/test/harness"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
)

// The default document leaves out the sections whose services the
// sandbox doesn't run, keeps every other item of the example, and each
// profile adds its own; every one decodes as the controller decodes it.
func TestDocuments(t *testing.T) {
	example, err := documentOf(profiles{})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"globalRateLimit:", "extAuth:", "oauth2-proxy.oauth2-proxy", "ratelimit.ratelimit"} {
		if strings.Contains(example, gone) {
			t.Errorf("the default document still has %q: make run's status would warn about a service the sandbox doesn't run", gone)
		}
	}
	for _, kept := range []string{"\ntracing:", "\ngzip:", "\nlocalRateLimit:", "\nipAccess:", "\ncustomErrors:", "\nbrotli:"} {
		if !strings.Contains(example, kept) {
			t.Errorf("the default document lost %q", kept)
		}
	}
	for _, p := range []profiles{{}, {rateLimit: true}, {auth: true}, {rateLimit: true, auth: true}} {
		doc, err := documentOf(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := document.Parse([]byte(doc)); err != nil {
			t.Errorf("WITH=%s: the document does not parse: %v", p, err)
		}
		if p.rateLimit != strings.Contains(doc, "\nglobalRateLimit:") || p.auth != strings.Contains(doc, "\nextAuth:") {
			t.Errorf("WITH=%s: the document's sections don't match the profiles:\n%s", p, doc)
		}
	}
}

func documentOf(p profiles) (string, error) {
	raw, err := configMap(p)
	if err != nil {
		return "", err
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		return "", err
	}
	return cm.Data[document.DataKey], nil
}

func TestParseProfiles(t *testing.T) {
	for in, want := range map[string]profiles{"": {}, "ratelimit": {rateLimit: true}, "auth": {auth: true},
		"ratelimit,auth": {true, true}, " auth , ratelimit ": {true, true}} {
		got, err := parseProfiles(in)
		if err != nil || got != want {
			t.Errorf("WITH=%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := parseProfiles("ratelimit,oauth"); err == nil || !strings.Contains(err.Error(), `"oauth"`) {
		t.Errorf("WITH=ratelimit,oauth: %v, want an error naming oauth", err)
	}
}

// The tools the playground runs; the test is skipped when their
// environment is not set (go test outside make), and fails otherwise.
var playgroundEnv = []string{
	harness.EnvKubectl, harness.EnvPilotDiscovery, harness.EnvIstioctl, harness.EnvEnvoy, harness.EnvEnvoyVersion,
	"GLOBALCONFIG_KUBE_APISERVER", "GLOBALCONFIG_ETCD", "GLOBALCONFIG_RATELIMIT", "GLOBALCONFIG_REDIS", harness.EnvOAuth2Proxy,
}

// make run WITH=ratelimit,auth at Envoy 1.40 (the harness's newest): the
// banner's curl lines answer what they promise (a 429 shared by both
// gateways, 401 without credentials, 200 with them, 200 on the opted-out
// path), and cancelling the context (what Ctrl-C does) stops every
// process the sandbox started and removes its folder.
func TestPlayground(t *testing.T) {
	var unset []string
	for _, env := range playgroundEnv {
		if os.Getenv(env) == "" {
			unset = append(unset, "$"+env)
		}
	}
	if len(unset) > 0 {
		t.Skipf("%s not set: the playground runs the tools cache's binaries; run it with `make test-one PKG=./test/sandbox`", strings.Join(unset, ", "))
	}
	bin, err := harness.BuildController(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out syncBuffer
	var p *playground
	// Every process the sandbox started, taken while it runs (stopping
	// the rate-limit service forgets its process).
	procs := map[string]*harness.Process{}
	began := time.Now()
	err = run(ctx, options{controller: bin, profiles: profiles{rateLimit: true, auth: true}, out: &out}, func(pg *playground) {
		defer cancel()
		p = pg
		procs = map[string]*harness.Process{"controller": p.ctl.Process, "istiod": p.istiod.Process,
			"rate-limit service": p.rls.Service, "redis": p.rls.Redis, "oauth2-proxy": p.oauth2.Process}
		for _, g := range p.gateways {
			procs["gateway "+g.name] = g.gw.Process
		}
		t.Logf("ready in %s", time.Since(began).Round(100*time.Millisecond))
		if len(p.gateways) != 2 {
			t.Errorf("%d gateways, want 2 (WITH=ratelimit starts a second one)", len(p.gateways))
		}
		urls := make([]string, len(p.gateways))
		for i, g := range p.gateways {
			urls[i] = g.url()
		}
		banner := out.String()
		if len(p.checks) != 4 {
			t.Errorf("%d curl lines, want 4: the shared 429, 401, 200 with credentials, 200 opted out", len(p.checks))
		}
		for _, c := range p.checks {
			if !strings.Contains(banner, c.curl(urls)) {
				t.Errorf("the banner lacks %q", c.curl(urls))
			}
		}
		// The limit's window is a clock minute: the requests must not
		// straddle two.
		if s := time.Now().Second(); s > 50 {
			time.Sleep(time.Duration(61-s) * time.Second)
		}
		for _, c := range p.checks {
			got, err := c.run(ctx, p.gateways)
			if err != nil {
				t.Error(err)
			}
			t.Logf("%s: %v", c.what, got)
		}
	})
	if err != nil {
		t.Fatalf("the playground: %v\n%s", err, out.String())
	}
	if p == nil {
		t.Fatalf("the playground never became ready:\n%s", out.String())
	}
	if t.Failed() {
		t.Logf("sandbox output:\n%s\ncontroller log:\n%s", out.String(), p.ctl.Log(3000))
	}
	// What Ctrl-C leaves: nothing.
	for name, proc := range procs {
		if !proc.Exited() {
			t.Errorf("after the cancel, the %s still runs (pid %d)", name, proc.Cmd.Process.Pid)
			proc.Kill()
		}
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("after the cancel, the sandbox's folder %s is still there (%v)", p.dir, err)
		_ = os.RemoveAll(p.dir)
	}
}

// syncBuffer is a buffer the sandbox writes and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
