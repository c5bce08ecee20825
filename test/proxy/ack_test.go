package proxy

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/test/harness"
)

// exampleDocument is the config.yaml of deploy/examples/global-config.yaml.
func exampleDocument(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "examples", "global-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data[document.DataKey]
}

// The example document is loaded by both Envoys.
func TestExampleACKed(t *testing.T) {
	ctx := setup(t)
	mustACK(ctx, t, render(t, exampleDocument(t)))
}
