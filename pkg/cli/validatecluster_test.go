package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/pkg/anchors/anchorstest"
	"github.com/globalconfig/globalconfig/pkg/cli"
)

const liveWithLocalRateLimit = `
localRateLimit:
  maxTokens: 100
  tokensPerFill: 100
  fillInterval: 1s
gzip:
  chunkSize: 8192
`

// withUser is a cluster whose live document has localRateLimit, with the
// user's EnvoyFilter anchored on it.
func withUser(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, liveWithLocalRateLimit)
	ef, err := anchorstest.EnvoyFilter()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.istio.NetworkingV1alpha3().EnvoyFilters("istio-system").Create(context.Background(), ef, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidateWarnsOfDependents(t *testing.T) {
	c := withUser(t)
	file := writeFile(t, "edit.yaml", "gzip:\n  chunkSize: 8192\n")
	code, out, errs := runIn(t, c, "validate", "-f", file, "--kubeconfig", "k")
	if code != cli.ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := file + ": warning: applying it removes localRateLimit's HTTP filter envoy.filters.http.local_ratelimit, which istio-system/user-anchored-healthcheck (configPatches[0] INSERT_AFTER) anchors on: istiod skips an insert whose anchor is absent, so its filter silently disappears from those proxies\n"
	if errs != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errs, want)
	}
	if !strings.Contains(out, "cluster: compared with ConfigMap istio-system/global-config: 1 EnvoyFilter patch(es) of others anchor on its filters, 1 lose or move their filter\n") {
		t.Errorf("stdout:\n%s", out)
	}

	// Keeping localRateLimit: the dependent is counted, nothing warned.
	file = writeFile(t, "keep.yaml", liveWithLocalRateLimit)
	code, out, errs = runIn(t, c, "validate", "-f", file, "--configmap", "istio-system/global-config")
	if code != cli.ExitOK || errs != "" || !strings.Contains(out, "1 EnvoyFilter patch(es) of others anchor on its filters, 0 lose") {
		t.Errorf("keeping the item: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	// Without --kubeconfig or --configmap, validate stays offline.
	c.dialed = 0
	if code, out, _ := runIn(t, c, "validate", "-f", file); code != cli.ExitOK || c.dialed != 0 || strings.Contains(out, "cluster:") {
		t.Errorf("offline validate: exit %d, dialed %d, stdout %q", code, c.dialed, out)
	}
}

// A comparison asked for and not made is exit 7, not a pass.
func TestValidateClusterUnreachable(t *testing.T) {
	file := writeFile(t, "edit.yaml", "gzip: {}\n")
	var out, errb bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Clients: func(string) (kubernetes.Interface, istioclient.Interface, error) {
			return nil, nil, errors.New("no kubeconfig: stat k: no such file or directory")
		}}
	if code := cli.Main([]string{"validate", "-f", file, "--kubeconfig", "k"}, env); code != cli.ExitAPI || !strings.Contains(errb.String(), "no such file") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if code := cli.Main([]string{"validate", "-f", file, "--configmap", "nonamespace"}, env); code != cli.ExitUsage {
		t.Errorf("--configmap without a namespace: exit %d", code)
	}
}
