package envoycheck

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

// A log directly in a proxy's writable folder goes to that folder's
// stand-in; a log in a sub-folder of it, which no proxy has, goes where no
// folder exists; the proxy's streams and other paths stay as they are.
// Envoy's messages name the proxy's paths again.
func TestLocalLogPaths(t *testing.T) {
	direct, err := localPath("/var/lib/istio/data/access.log")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Dir(direct)); err != nil || !st.IsDir() || !strings.HasPrefix(direct, localRoot) {
		t.Errorf("a file in the proxy's folder: %s, its folder: %v", direct, err)
	}
	deeper, err := localPath("/var/lib/istio/data/logs/access.log")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(deeper)); !os.IsNotExist(err) || !strings.HasPrefix(deeper, localRoot) {
		t.Errorf("a file in a sub-folder: %s, its folder: %v; want one that does not exist", deeper, err)
	}
	for _, same := range []string{"/dev/stdout", "/dev/stderr", "/dev/null", "/var/lib/istio/data/"} {
		if got, err := localPath(same); err != nil || got != same {
			t.Errorf("%s: %s, %v; want it unchanged", same, got, err)
		}
	}
	msg := "cannot open " + direct + " and " + deeper
	if got := ProxyPaths(msg); got != "cannot open /var/lib/istio/data/access.log and /var/lib/istio/data/logs/access.log" {
		t.Errorf("ProxyPaths: %q", got)
	}
}

// At a real Envoy: the documents whose clientIP and headers.xff can never
// reach one proxy are accepted, each group beside gzip; the same items
// on one proxy's labels are refused for that group alone, naming Envoy's
// "may not be mixed" and no item on its own.
func TestDisjointTargetsAtEnvoy(t *testing.T) {
	bin := openEnvoy(t)
	ctx := context.Background()
	for _, doc := range []string{disjointSelectors, disjointNamespaces, disjointClusters} {
		rep, err := Check(ctx, bin, renderDoc(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || len(rep.Results) != 2 {
			t.Errorf("%s\nEnvoy %s: %+v; want two groups, both accepted", doc, bin.Version, rep)
		}
	}
	objs := renderDoc(t, disjointSelectors)
	for _, o := range objs {
		if o.Item() == "headers" {
			o.Spec.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "storefront"}}
		}
	}
	rep, err := Check(ctx, bin, objs)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Results) != 1 || !strings.Contains(rep.Results[0].Rejected, "may not be mixed") ||
		rep.Results[0].Proxies() != "SIDECAR_INBOUND proxies labelled app=storefront" || len(rep.Results[0].Items) != 0 {
		t.Errorf("both on app=storefront: %+v", rep)
	}
	if msg, err := Verdict(ctx, bin, objs); err != nil || !strings.Contains(msg, "may not be mixed") {
		t.Errorf("Verdict: %q, %v", msg, err)
	}
}

// At a real Envoy: a log directly in a proxy's writable folder loads; one
// in a sub-folder a proxy lacks, or with a name longer than a file name
// can be, is refused as a proxy refuses it, with the proxy's path.
func TestLogFoldersAtEnvoy(t *testing.T) {
	bin := openEnvoy(t)
	const file = "/var/lib/istio/data/access.log"
	objs := renderDoc(t, "accessLog:\n  path: "+file+"\n")
	rep, err := Check(context.Background(), bin, objs)
	if err != nil || !rep.OK() {
		t.Fatalf("%s: %+v, %v", file, rep, err)
	}
	for _, bad := range []string{"/var/lib/istio/data/logs/access.log", "/etc/istio/proxy/" + strings.Repeat("a", 256)} {
		moved := renderDoc(t, "accessLog:\n  path: "+file+"\n")
		n := 0
		for _, o := range moved {
			for _, cp := range o.Spec.GetConfigPatches() {
				n += replaceString(cp.GetPatch().GetValue(), file, bad)
			}
		}
		if n == 0 {
			t.Fatalf("no patch carries %s", file)
		}
		rep, err := Check(context.Background(), bin, moved)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || !strings.Contains(rep.Results[0].Rejected, bad) || strings.Contains(rep.Results[0].Rejected, localRoot) {
			t.Errorf("%s: %+v; want a refusal naming the proxy's path", bad, rep)
		} else {
			t.Logf("%s: %s", bad, rep.Results[0].Rejected)
		}
	}
}

// replaceString replaces every string value old in s by new, and counts them.
func replaceString(s *structpb.Struct, old, new string) int {
	n := 0
	var walk func(v *structpb.Value)
	walk = func(v *structpb.Value) {
		switch k := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			if k.StringValue == old {
				k.StringValue = new
				n++
			}
		case *structpb.Value_StructValue:
			for _, f := range k.StructValue.GetFields() {
				walk(f)
			}
		case *structpb.Value_ListValue:
			for _, e := range k.ListValue.GetValues() {
				walk(e)
			}
		}
	}
	for _, f := range s.GetFields() {
		walk(f)
	}
	return n
}
