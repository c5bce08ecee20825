package nginx_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// goldenOptions are the flags each golden conversion is run with, as its
// user would run it.
var goldenOptions = map[string]func(*nginx.Options){
	// Behind Cloudflare, one proxy stands in front of the gateway.
	"homelab-cloudflare": func(o *nginx.Options) { one := uint32(1); o.TrustedHops = &one },
	// Behind an NLB sending PROXY headers, with hops counted anyway: the
	// PROXY header wins, as in nginx, and no hop is trusted.
	"aws-nlb-proxy-protocol": func(o *nginx.Options) { two := uint32(2); o.TrustedHops = &two },
}

// Whole ConfigMaps in the shapes users write them convert to the
// manifest and the report in testdata; go test -update rewrites them.
// Each converted document also renders.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(inputs) < 4 {
		t.Fatalf("want at least 4 golden inputs, got %v (%v)", inputs, err)
	}
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			in, err := nginx.ReadInput(src)
			if err != nil {
				t.Fatal(err)
			}
			var opts nginx.Options
			if f := goldenOptions[name]; f != nil {
				f(&opts)
			}
			res, err := nginx.Convert(in, opts)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := document.ParseFile(res.Manifest)
			if err != nil {
				t.Fatalf("the manifest does not parse: %v", err)
			}
			objs, err := render.Desired(doc)
			if err != nil {
				t.Fatalf("the document does not render: %v", err)
			}
			if len(objs) == 0 {
				t.Fatal("no EnvoyFilters")
			}
			var report bytes.Buffer
			res.Report.Write(&report)
			compare(t, "testdata/"+name+".out.yaml", res.Manifest)
			compare(t, "testdata/"+name+".report.txt", report.Bytes())
		})
	}
}

func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}
