package envoycheck_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Nested values in a JSON log line (ECS) and a JSON error body (RFC 7807),
// with numbers, booleans and lists beside format strings, are admitted by
// validation; both real Envoys (1.40 and 1.39) load what render emits for
// them.
func TestNestedJSONLoadsAtBothEnvoys(t *testing.T) {
	var bins []*envoybin.Binary
	for _, env := range []string{"GLOBALCONFIG_ENVOY", "GLOBALCONFIG_ENVOY_OLD"} {
		p := os.Getenv(env)
		if p == "" {
			t.Skipf("%s is not set: run `make test-one PKG=./pkg/envoycheck RUN=TestNestedJSONLoadsAtBothEnvoys`, which installs both Envoys and sets it", env)
		}
		b, err := envoybin.Open(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		bins = append(bins, b)
	}
	for _, in := range []string{
		"../../items/accesslog/testdata/json-nested.in.yaml",
		"../../items/customerrors/testdata/json-problem.in.yaml",
	} {
		src, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := document.Parse(src)
		if err != nil {
			t.Fatalf("%s: validate refuses it: %v", in, err)
		}
		objs, err := render.Desired(doc)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		for _, bin := range bins {
			t.Run(filepath.Base(in)+"/"+bin.Version, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				rep, err := envoycheck.Check(ctx, bin, objs)
				if err != nil {
					t.Fatal(err)
				}
				applied := 0
				for _, r := range rep.Results {
					applied += r.Patches
					if r.Rejected != "" {
						t.Errorf("Envoy %s refuses the %s configuration: %s", bin.Version, r.Context, r.Rejected)
					}
				}
				if applied == 0 {
					t.Errorf("Envoy %s: no patch was applied, so nothing was checked", bin.Version)
				}
			})
		}
	}
}
