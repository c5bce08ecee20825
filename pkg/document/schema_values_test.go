package document_test

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// The schema says what validation takes for the values whose YAML type is
// free: header values written as numbers or booleans, and nested JSON in
// log lines and error bodies. An editor must not flag what the webhook
// admits, nor pass what it refuses.
func TestSchemaTakesWhatValidationTakes(t *testing.T) {
	schema := compileSchema(t)
	for _, c := range []struct {
		name, doc string
		valid     bool
	}{
		{"a header value written as a number", "headers:\n  responseHeaders:\n    x-xss-protection: 0\n    x-api-version: 1.0\n", true},
		{"a header value written as a boolean", "headers:\n  request:\n    set:\n      x-canary: true\n", true},
		{"a header value written as a list", "headers:\n  responseHeaders:\n    x-a: [1, 2]\n", false},
		{"nested JSON in a log line", "accessLog:\n  json:\n    http: {method: \"%REQ(:METHOD)%\", bytes: 0}\n    tags: [a, b]\n    sampled: true\n", true},
		{"nested JSON in an error body", "customErrors:\n  localReplies:\n  - statuses: [503]\n    json: {status: 503, request: {id: \"%REQ(X-REQUEST-ID)%\"}}\n", true},
		{"a null in a log line", "accessLog:\n  json:\n    trace: null\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok, problems := validate([]byte(c.doc))
			var tree any
			if err := yaml.Unmarshal([]byte(c.doc), &tree); err != nil {
				t.Fatal(err)
			}
			schemaErr := schema.Validate(jsonValue(t, tree))
			if ok != c.valid {
				t.Errorf("validate: valid=%v, want %v\n%s", ok, c.valid, problems)
			}
			if (schemaErr == nil) != c.valid {
				t.Errorf("schema: %v, want valid=%v", schemaErr, c.valid)
			}
		})
	}
}
