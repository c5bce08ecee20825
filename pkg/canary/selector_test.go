package canary_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/document"
)

// Scenario 9 (issue 33): a target selector on the canary label passed
// validation, then made every sync fail. Validation refuses it now, with
// its path, at the document's target and at an item's.
func TestTargetSelectorOnTheCanaryLabelIsRefused(t *testing.T) {
	for doc, path := range map[string]string{
		"rollout:\n  strategy: Canary\ntarget:\n  selector: {globalconfig.io/canary: \"true\"}\ngzip: {}\n":                                                                 `target.selector["globalconfig.io/canary"]`,
		"rollout:\n  strategy: Canary\ngzip:\n  target:\n    selector: {globalconfig.io/canary: \"true\"}\n":                                                                `gzip.target.selector["globalconfig.io/canary"]`,
		"rollout:\n  strategy: Canary\n  canaryLabel: example.com/track\nheaders:\n  disableXEnvoyHeaders: true\n  target:\n    selector: {example.com/track: \"false\"}\n": `headers.target.selector["example.com/track"]`,
	} {
		_, err := document.Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), path+": names the canary label") {
			t.Errorf("%q: got %v, want a refusal at %s", doc, err, path)
		}
	}
	// Without a canary rollout the label is a label like any other.
	if _, err := document.Parse([]byte("gzip:\n  target:\n    selector: {globalconfig.io/canary: \"true\"}\n")); err != nil {
		t.Errorf("a Direct document selecting on the label: %v", err)
	}
}
