package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/cli"
	"github.com/globalconfig/globalconfig/test/harness"
)

// `make run` as a newcomer meets it: the sandbox starts, its banner's curl
// line shows gzip at the real Envoy gateway, an edit of the ConfigMap
// changes what that curl shows, and istioctl reads the gateway's own
// config dump. Ctrl-C stops it and leaves nothing running.
func TestMakeRun(t *testing.T) {
	ctx := setup(t)
	bin := filepath.Join(suiteDir, "sandbox")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./test/sandbox")
	build.Dir = harness.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the sandbox: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "--controller", controlBn)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ready in ") {
				banner <- b.String()
			}
		}
		done <- cmd.Wait()
	}()
	var text string
	select {
	case text = <-banner:
	case err := <-done:
		t.Fatalf("the sandbox exited: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("the sandbox was not ready within 3 minutes")
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the sandbox did not stop within 30 s of Ctrl-C")
		}
	})
	t.Logf("$ make run\n%s", text)
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `:\s+(\S+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("the banner has no %s", name)
		}
		return m[1]
	}
	curlLine := regexp.MustCompile(`curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' '([^']+)'`).FindStringSubmatch(text)
	if curlLine == nil {
		t.Fatal("the banner has no curl line")
	}
	url, kubeconfig, admin := curlLine[1], field("kubeconfig"), field("gateway admin")
	gz := func() string {
		r := mustGet(ctx, t, url, map[string]string{"Accept-Encoding": "gzip"})
		if r.status != 200 {
			t.Fatalf("curl %s: %d", url, r.status)
		}
		return r.header.Get("Content-Encoding")
	}
	if enc := gz(); enc != "gzip" {
		t.Fatalf("the banner's curl shows content-encoding %q, want gzip", enc)
	}
	// The README's first edit: gzip's minContentLength from 1024 to 8192;
	// the 4096-byte body is no longer compressed.
	kubectl, err := harness.Binary(harness.EnvKubectl)
	if err != nil {
		t.Fatal(err)
	}
	k := func(stdin string, args ...string) string {
		c := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cm := k("", "get", "configmap", "global-config", "-n", "istio-system", "-o", "yaml")
	edited := strings.Replace(cm, "minContentLength: 1024", "minContentLength: 8192", 1)
	if edited == cm {
		t.Fatal("the example has no gzip minContentLength: 1024")
	}
	// Before applying it: the gateway's own Envoy-level change, predicted
	// from istiod and checked by the gateway's Envoy release.
	editFile := filepath.Join(suiteDir, "sandbox-edit.yaml")
	if err := os.WriteFile(editFile, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	istiodDebug := strings.TrimSuffix(field("istiod debug"), "/debug/syncz")
	var pout, perr bytes.Buffer
	code := cli.Main([]string{"diff", "-f", editFile, "--kubeconfig", kubeconfig, "--proxy", "gw-ingressgateway.istio-system",
		"--istiod-debug-url", istiodDebug, "--envoy", newest.Binary.Path}, cli.Env{Stdout: &pout, Stderr: &perr})
	if code != cli.ExitChanged || !regexp.MustCompile(`(?m)^-\s+"min_content_length": 1024,$`).MatchString(pout.String()) ||
		!regexp.MustCompile(`(?m)^\+\s+"min_content_length": 8192,$`).MatchString(pout.String()) || !strings.Contains(pout.String(), "accepts the predicted configuration") {
		t.Errorf("diff --proxy on the sandbox gateway: exit %d\n%s\n%s", code, pout.String(), perr.String())
	}
	t.Logf("$ globalconfig diff -f edit.yaml --proxy gw-ingressgateway.istio-system --envoy ...\n%s", pout.String())
	t.Logf("$ kubectl replace (minContentLength: 8192)\n%s", k(edited, "replace", "-f", "-"))
	if !harness.Eventually(ctx, 20*time.Second, func() bool { return gz() == "" }) {
		t.Fatal("after the edit the 4096-byte body is still compressed")
	}
	// istioctl reads what the real Envoy loaded.
	dumpFile := filepath.Join(suiteDir, "sandbox-dump.json")
	body := mustGet(ctx, t, admin+"/config_dump", nil).body
	if err := os.WriteFile(dumpFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	istioctl, err := harness.Binary(harness.EnvIstioctl)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, istioctl, "proxy-config", "listener", "--file", dumpFile, "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("istioctl proxy-config listener: %v\n%s", err, out)
	}
	var doc any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("istioctl's JSON: %v", err)
	}
	var minLen []string
	walk(doc, func(k string, v any) {
		if k == "minContentLength" || k == "min_content_length" {
			minLen = append(minLen, fmt.Sprint(v))
		}
	})
	if !strings.Contains(strings.Join(minLen, ","), "8192") {
		t.Errorf("istioctl proxy-config listener on the gateway's dump shows minContentLength %v, want 8192", minLen)
	}
}
