package convert_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/convert/higress"
	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// seed adds every file matching the globs to the corpus.
func seed(f *testing.F, globs ...string) {
	f.Helper()
	n := 0
	for _, g := range globs {
		paths, err := filepath.Glob(g)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			n++
		}
	}
	if n == 0 {
		f.Fatalf("no seed in %v", globs)
	}
}

// inTime runs f, failing t if it takes over fuzzTimeout: a converter
// must answer any input of at most 64 KiB quickly.
func inTime(t *testing.T, data []byte, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(fuzzTimeout):
		t.Fatalf("no answer within %v for %d bytes: %.500q", fuzzTimeout, len(data), data)
	}
}

const fuzzTimeout = 5 * time.Second

// checkOutcome holds a conversion to its promise on any input: a refusal
// is brief, names a path wherever a key is at fault, and is never an internal
// error nor out.Document's last resort (a value the converter let through
// unchecked, under a path of the converted document); a converted
// manifest parses and renders.
func checkOutcome(t *testing.T, manifest []byte, err error) {
	t.Helper()
	if err != nil {
		for _, p := range fielderr.Flatten(err) {
			if len(p.Msg) > 2*out.MaxMessage || strings.Contains(p.Msg, "internal") || strings.Contains(p.Msg, "converts to a value globalconfig refuses") {
				t.Fatalf("a refusal the converter did not make itself, or without a path: %v", p)
			}
		}
		return
	}
	doc, err := document.ParseFile(manifest)
	if err != nil {
		t.Fatalf("the converted manifest does not validate: %v\n%s", err, manifest)
	}
	if _, err := render.Desired(doc); err != nil {
		t.Fatalf("the converted document does not render: %v\n%s", err, manifest)
	}
}

func FuzzConvertHigress(f *testing.F) {
	seed(f, "../../docs/examples/higress-config.yaml", "higress/testdata/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		inTime(t, data, func() {
			in, err := higress.ReadInput(data)
			if err != nil {
				return
			}
			res, err := higress.Convert(in, higress.Options{})
			var manifest []byte
			if res != nil {
				manifest = res.Manifest
				// A verdict for every key of the input (keys_test.go).
				if probs := higressKeyProblems(in, res.Report); len(probs) > 0 {
					t.Fatalf("the report gives a key no line, or two, or shows a secret:\n  %s", strings.Join(probs, "\n  "))
				}
			}
			checkOutcome(t, manifest, err)
		})
	})
}

func FuzzConvertNginx(f *testing.F) {
	seed(f, "nginx/testdata/*.in.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		inTime(t, data, func() {
			in, err := nginx.ReadInput(data)
			if err != nil {
				return
			}
			hops := uint32(1)
			for _, opts := range []nginx.Options{{}, {TrustedHops: &hops, NoDefaults: true}} {
				res, err := nginx.Convert(in, opts)
				var manifest []byte
				if res != nil {
					manifest = res.Manifest
					// A verdict for every key of the input (keys_test.go).
					if probs := nginxKeyProblems(in, res.Report); len(probs) > 0 {
						t.Fatalf("the report gives a key no line, or two, or shows a secret:\n  %s", strings.Join(probs, "\n  "))
					}
				}
				checkOutcome(t, manifest, err)
			}
		})
	})
}
