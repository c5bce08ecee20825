// Package goldentest runs an item's golden cases. Only the item under
// test is linked, so its outputs never change when another item is added;
// its priority there is its slot's, the one the binary gives it too.
//
// Each case: every testdata/<case>.in.yaml
// is rendered and compared with <case>.out.yaml (the EnvoyFilters) or, for
// an invalid document, <case>.err.txt (the problems, one per line).
//
//	make golden
//
// (the item packages' tests with -update) rewrites the outputs and deletes
// outputs whose input is gone.
package goldentest

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

var update = flag.Bool("update", false, "rewrite golden outputs and delete stale ones")

// Suffixes of golden files.
const (
	InSuffix  = ".in.yaml"
	OutSuffix = ".out.yaml"
	ErrSuffix = ".err.txt"
)

// Output returns the golden output of one input: the YAML stream, or the
// problems when the document is invalid (ok false).
func Output(in []byte) (out []byte, ok bool) {
	doc, err := document.ParseFile(in)
	if err == nil {
		objs, rerr := render.Desired(doc)
		if rerr == nil {
			y, yerr := render.YAML(objs)
			if yerr == nil {
				return y, true
			}
			err = yerr
		} else {
			err = rerr
		}
	}
	var de *document.Error
	if errors.As(err, &de) {
		var b bytes.Buffer
		for _, p := range de.Problems {
			b.WriteString(p.Error())
			b.WriteByte('\n')
		}
		return b.Bytes(), false
	}
	return []byte(err.Error() + "\n"), false
}

// Run checks every case in dir.
func Run(t *testing.T, dir string) {
	t.Helper()
	ins, err := filepath.Glob(filepath.Join(dir, "*"+InSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) == 0 {
		t.Fatalf("no golden inputs (*%s) in %s", InSuffix, dir)
	}
	want := map[string]bool{}
	for _, in := range ins {
		base := strings.TrimSuffix(in, InSuffix)
		t.Run(filepath.Base(base), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := Output(data)
			path, other := base+OutSuffix, base+ErrSuffix
			if !ok {
				path, other = other, path
			}
			want[path] = true
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				_ = os.Remove(other)
				return
			}
			exp, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("missing golden output (run make golden): %v", err)
			}
			if !bytes.Equal(got, exp) {
				t.Errorf("%s differs from the rendered output (run make golden to accept it):\n--- got ---\n%s\n--- want ---\n%s", path, got, exp)
			}
		})
	}
	// Outputs whose input is gone are stale.
	for _, suffix := range []string{OutSuffix, ErrSuffix} {
		outs, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
		for _, out := range outs {
			if want[out] {
				continue
			}
			if *update {
				if err := os.Remove(out); err != nil {
					t.Error(err)
				}
				continue
			}
			t.Errorf("stale golden output %s: its input is gone or renders the other way (run make golden)", out)
		}
	}
}
