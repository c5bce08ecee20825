package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/status"
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
	for _, p := range []profiles{{}, {rateLimit: true}, {auth: true}, {rateLimit: true, auth: true}, {extAuthz: true}, {rateLimit: true, extAuthz: true}} {
		doc, err := documentOf(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := document.Parse([]byte(doc)); err != nil {
			t.Errorf("WITH=%s: the document does not parse: %v", p, err)
		}
		if p.rateLimit != strings.Contains(doc, "\nglobalRateLimit:") || (p.auth || p.extAuthz) != strings.Contains(doc, "\nextAuth:") {
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
		"ratelimit,auth": {rateLimit: true, auth: true}, " auth , ratelimit ": {rateLimit: true, auth: true},
		"extauthz": {extAuthz: true}} {
		got, err := parseProfiles(in)
		if err != nil || got != want {
			t.Errorf("WITH=%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := parseProfiles("ratelimit,oauth"); err == nil || !strings.Contains(err.Error(), `"oauth"`) {
		t.Errorf("WITH=ratelimit,oauth: %v, want an error naming oauth", err)
	}
	if _, err := parseProfiles("auth,extauthz"); err == nil || !strings.Contains(err.Error(), "one extAuth section") {
		t.Errorf("WITH=auth,extauthz: %v, want an error: one extAuth section", err)
	}
}

// The tools the playground runs; the test is skipped when their
// environment is not set (go test outside make), and fails otherwise.
var playgroundEnv = []string{
	harness.EnvKubectl, harness.EnvPilotDiscovery, harness.EnvIstioctl, harness.EnvEnvoy, harness.EnvEnvoyVersion,
	"GLOBALCONFIG_KUBE_APISERVER", "GLOBALCONFIG_ETCD", "GLOBALCONFIG_RATELIMIT", "GLOBALCONFIG_REDIS", harness.EnvOAuth2Proxy, harness.EnvExtAuthz,
}

// make run WITH=ratelimit,auth at Envoy 1.40 (the harness's newest): the
// banner's curl lines answer what they promise (a 429 shared by both
// gateways, 401 without credentials, 200 with them, 200 on the opted-out
// path); WITH=extauthz's too (403, 200 with x-ext-authz: allow, 200 opted
// out); plain make run's status is Applied with no warning (its document
// names no Service the sandbox lacks). Either way, cancelling the context
// (what Ctrl-C does) stops every process the sandbox started and removes
// its folder.
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
	t.Run("default", func(t *testing.T) {
		tryPlayground(t, bin, profiles{}, func(ctx context.Context, p *playground, banner string) {
			if len(p.gateways) != 1 || len(p.checks) != 0 {
				t.Errorf("plain make run: %d gateways, %d curl lines; want 1 and none", len(p.gateways), len(p.checks))
			}
			if !strings.Contains(banner, "make run WITH=ratelimit,auth") {
				t.Error("the plain banner does not say how to start the profiles")
			}
			wantStatus(ctx, t, p, nil)
		})
	})
	t.Run("ratelimit,auth", func(t *testing.T) {
		tryPlayground(t, bin, profiles{rateLimit: true, auth: true}, func(ctx context.Context, p *playground, banner string) {
			if len(p.gateways) != 2 {
				t.Errorf("%d gateways, want 2 (WITH=ratelimit starts a second one)", len(p.gateways))
			}
			urls := make([]string, len(p.gateways))
			for i, g := range p.gateways {
				urls[i] = g.url()
			}
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
			// What docs/playground.md says a 429 carries.
			r, body, err := sendBody(ctx, p.gateways[1].url()+sharedPath)
			if err != nil {
				t.Fatal(err)
			}
			if r.StatusCode != 429 || r.Header.Get("x-envoy-ratelimited") != "true" || r.Header.Get("x-ratelimit-remaining") != "0" ||
				r.Header.Get("x-ratelimit-limit") == "" || !strings.Contains(body, "too_many_requests") {
				t.Errorf("one more request to %s: %d %v %s; want 429 with x-envoy-ratelimited, x-ratelimit-limit, x-ratelimit-remaining: 0 and the example's JSON body", sharedPath, r.StatusCode, r.Header, body)
			}
			wantStatus(ctx, t, p, []string{"globalRateLimit", "extAuth"})
		})
	})
	t.Run("extauthz", func(t *testing.T) {
		tryPlayground(t, bin, profiles{extAuthz: true}, func(ctx context.Context, p *playground, banner string) {
			if len(p.gateways) != 1 || len(p.checks) != 3 {
				t.Errorf("%d gateways, %d curl lines; want 1 and 3: 403, 200 with x-ext-authz: allow, 200 opted out", len(p.gateways), len(p.checks))
			}
			for _, c := range p.checks {
				if !strings.Contains(banner, c.curl([]string{p.gateways[0].url()})) {
					t.Errorf("the banner lacks %q", c.curl([]string{p.gateways[0].url()}))
				}
				got, err := c.run(ctx, p.gateways)
				if err != nil {
					t.Error(err)
				}
				t.Logf("%s: %v", c.what, got)
			}
			wantStatus(ctx, t, p, []string{"extAuth"})
		})
	})
}

// tryPlayground runs the sandbox with the profiles, calls try once it is
// ready, then cancels it and checks that nothing it started is left.
func tryPlayground(t *testing.T, bin string, pr profiles, try func(context.Context, *playground, string)) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out syncBuffer
	var p *playground
	// Every process the sandbox started, taken while it runs (stopping
	// the rate-limit service forgets its process).
	procs := map[string]*harness.Process{}
	began := time.Now()
	err := run(ctx, options{controller: bin, profiles: pr, out: &out}, func(pg *playground) {
		defer cancel()
		p = pg
		procs["controller"], procs["istiod"] = p.ctl.Process, p.istiod.Process
		if p.rls != nil {
			procs["rate-limit service"], procs["redis"] = p.rls.Service, p.rls.Redis
		}
		if p.oauth2 != nil {
			procs["oauth2-proxy"] = p.oauth2.Process
		}
		for _, g := range p.gateways {
			procs["gateway "+g.name] = g.gw.Process
		}
		t.Logf("WITH=%s: ready in %s", pr, time.Since(began).Round(100*time.Millisecond))
		try(ctx, p, out.String())
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

// wantStatus checks that the controller's status says the document is
// Applied, without errors or warnings, with an EnvoyFilter for each of
// items.
func wantStatus(ctx context.Context, t *testing.T, p *playground, items []string) {
	t.Helper()
	st, err := p.cluster.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != status.Applied || len(st.Errors) != 0 || len(st.Warnings) != 0 {
		t.Errorf("status %s, errors %v, warnings %v; want Applied, none, none", st.State, st.Errors, st.Warnings)
	}
	has := map[string]bool{}
	if st.Applied != nil {
		for _, ef := range st.Applied.EnvoyFilters {
			has[ef.Item] = true
		}
	}
	for _, item := range items {
		if !has[item] {
			t.Errorf("the applied set has no EnvoyFilter of %s", item)
		}
	}
}

// sendBody makes a GET with the basic-auth user's credentials and returns
// the response and its body.
func sendBody(ctx context.Context, url string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	req.SetBasicAuth(harness.AuthUser, harness.AuthPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
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

// --started is `date +%s.%N`; a date without %N (macOS prints "N") is
// refused, and the sandbox then counts from its own start.
func TestParseStarted(t *testing.T) {
	got, err := parseStarted("1795895475.25")
	if err != nil || got.UnixMilli() != 1795895475250 {
		t.Errorf("1795895475.25: %v, %v", got, err)
	}
	if got, err := parseStarted(""); err != nil || !got.IsZero() {
		t.Errorf("empty: %v, %v; want the zero time", got, err)
	}
	if _, err := parseStarted("1795895475.N"); err == nil {
		t.Error("1795895475.N: no error")
	}
}
