package envoyfilter_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

func gzipFilter(t *testing.T, chunk uint32) envoyfilter.Patch {
	t.Helper()
	lib, err := anypb.New(&gzipv3.Gzip{ChunkSize: wrapperspb.UInt32(chunk)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := envoyfilter.InsertHTTPFilter("envoy.filters.http.compressor.gzip", &compressorv3.Compressor{
		CompressorLibrary: &corev3.TypedExtensionConfig{Name: "gzip", TypedConfig: lib},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckAcceptsValidPatch(t *testing.T) {
	s, err := envoyfilter.Check(gzipFilter(t, 8192))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := protojson.Marshal(s)
	if !strings.Contains(string(js), `"chunk_size":8192`) {
		t.Errorf("value does not carry chunk_size under its proto name: %s", js)
	}
}

func TestCheckRunsEnvoyValidationInsideTypedConfig(t *testing.T) {
	_, err := envoyfilter.Check(gzipFilter(t, 100)) // Envoy requires 4096..65536
	if err == nil || !strings.Contains(err.Error(), "ChunkSize") {
		t.Fatalf("chunk_size 100 passed the check: %v", err)
	}
}

// Higress emitted "check_size" for gzip's chunk_size; Istio dropped it.
func TestFromStructRejectsUnknownField(t *testing.T) {
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(`{
		"name": "envoy.filters.http.compressor",
		"typed_config": {
			"@type": "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor",
			"compressor_library": {"name": "gzip", "typed_config": {
				"@type": "type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip",
				"check_size": 4096}}}}`), &s); err != nil {
		t.Fatal(err)
	}
	_, err := envoyfilter.FromStruct(networking.EnvoyFilter_HTTP_FILTER, &s)
	if err == nil || !strings.Contains(err.Error(), "check_size") {
		t.Fatalf("unknown field check_size accepted: %v", err)
	}
}

func TestCheckRejectsValueOfWrongType(t *testing.T) {
	p := gzipFilter(t, 4096)
	p.ApplyTo = networking.EnvoyFilter_CLUSTER
	if _, err := envoyfilter.Check(p); err == nil || !strings.Contains(err.Error(), "must be envoy.config.cluster.v3.Cluster") {
		t.Fatalf("HttpFilter value accepted for a CLUSTER patch: %v", err)
	}
}

func TestMergeIsValidatedOntoABase(t *testing.T) {
	// A partial HCM lacks stat_prefix and a route specifier, which a full
	// validation would demand; merged onto a base it is valid...
	good, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{StreamIdleTimeout: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envoyfilter.Check(good); err != nil {
		t.Fatalf("valid partial HCM rejected: %v", err)
	}
	// ...while a bad value that it sets is still caught.
	bad, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(0)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envoyfilter.Check(bad); err == nil {
		t.Fatal("max_headers_count 0 (Envoy requires >= 1) passed the check")
	}
}

// compression is where the tests place their gzip filter.
var compression = envoyfilter.Placement{Priority: 60, Insert: envoyfilter.StageCompression.Insert}

// An inserted HTTP filter goes where its stage says, not where the item
// would put it.
func TestInsertHTTPFilterTakesTheStagePosition(t *testing.T) {
	for _, c := range []struct {
		stage  envoyfilter.Stage
		op     networking.EnvoyFilter_Patch_Operation
		anchor string
	}{
		{envoyfilter.StageCompression, networking.EnvoyFilter_Patch_INSERT_FIRST, ""},
		{envoyfilter.StageHeaders, networking.EnvoyFilter_Patch_INSERT_BEFORE, envoyfilter.Router},
	} {
		at := envoyfilter.Placement{Priority: 7, Insert: c.stage.Insert}
		obj, err := envoyfilter.NewObject("gzip", at, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 4096)})
		if err != nil {
			t.Fatal(err)
		}
		cp := obj.Spec.GetConfigPatches()[0]
		if op := cp.GetPatch().GetOperation(); op != c.op {
			t.Errorf("%s: operation %v, want %v", c.stage.Name, op, c.op)
		}
		if anchor := cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName(); anchor != c.anchor {
			t.Errorf("%s: anchor %q, want %q", c.stage.Name, anchor, c.anchor)
		}
		if cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetName() != envoyfilter.HTTPConnectionManager || obj.Spec.GetPriority() != 7 {
			t.Errorf("%s: not the HCM, or priority %d", c.stage.Name, obj.Spec.GetPriority())
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a, err := envoyfilter.NewObject("gzip", compression, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyfilter.NewObject("gzip", compression, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	ya, _ := a.YAML()
	yb, _ := b.YAML()
	if string(ya) != string(yb) || a.Hash() != b.Hash() {
		t.Errorf("equal input rendered differently:\n%s\n%s", ya, yb)
	}
	c, _ := envoyfilter.NewObject("gzip", compression, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 8192)})
	if c.Hash() == a.Hash() {
		t.Error("different specs share a content hash")
	}
}

func TestRenderReportsEveryBadPatch(t *testing.T) {
	_, err := envoyfilter.NewObject("gzip", compression, envoyfilter.DefaultTarget(), []envoyfilter.Patch{gzipFilter(t, 1), gzipFilter(t, 4096), gzipFilter(t, 2)})
	if err == nil {
		t.Fatal("bad patches rendered")
	}
	for _, want := range []string{"patches[0]", "patches[2]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "patches[1]") {
		t.Errorf("error blames the good patch: %v", err)
	}
}

// Every golden output of every item survives the strict round trip: each
// patch value decodes strictly into its Envoy type, passes validation, and
// encodes back to the same Struct.
func TestGoldenOutputsPassStrictRoundTrip(t *testing.T) {
	outs, err := filepath.Glob("../items/*/testdata/*.out.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range outs {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var obj envoyfilter.Object
			if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for i, cp := range obj.Spec.GetConfigPatches() {
				value := cp.GetPatch().GetValue()
				m, err := envoyfilter.FromStruct(cp.GetApplyTo(), value)
				if err != nil {
					t.Errorf("%s %s patch %d: %v", file, obj.Metadata.Name, i, err)
					continue
				}
				if err := envoyfilter.Validate(cp.GetApplyTo(), cp.GetPatch().GetOperation(), m); err != nil {
					t.Errorf("%s %s patch %d: %v", file, obj.Metadata.Name, i, err)
				}
				again, err := envoyfilter.ToStruct(m)
				if err != nil || !proto.Equal(again, value) {
					t.Errorf("%s %s patch %d changes in the round trip: %v", file, obj.Metadata.Name, i, err)
				}
				checked++
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d patches found in %d golden outputs; the glob is wrong", checked, len(outs))
	}
}

func TestObjectName(t *testing.T) {
	for item, want := range map[string]string{"gzip": "globalconfig-gzip", "localRateLimit": "globalconfig-local-rate-limit", "accessLog": "globalconfig-access-log", "clientIP": "globalconfig-client-ip", "ipAccess": "globalconfig-ip-access", "HTTPRoute": "globalconfig-http-route", "tlsV2": "globalconfig-tls-v2"} {
		if got := envoyfilter.ObjectName(item); got != want {
			t.Errorf("ObjectName(%q) = %q, want %q", item, got, want)
		}
	}
}

// Check remembers its answers by patch content: asking again gives the
// same answer, a refused value stays refused, and a changed value is
// checked afresh, never given another value's answer.
func TestCheckAnswersRepeatedContentAlike(t *testing.T) {
	for range 2 {
		if _, err := envoyfilter.Check(gzipFilter(t, 100)); err == nil {
			t.Fatal("chunk_size 100 passed the check when asked again")
		}
	}
	for _, chunk := range []uint32{8192, 16384, 8192} {
		s, err := envoyfilter.Check(gzipFilter(t, chunk))
		if err != nil {
			t.Fatal(err)
		}
		if js, _ := protojson.Marshal(s); !strings.Contains(string(js), fmt.Sprintf(`"chunk_size":%d`, chunk)) {
			t.Fatalf("chunk_size %d got another value's answer: %s", chunk, js)
		}
	}
}

// SpecHash hashes the spec's own wire encoding, whether its values come
// from Check (encoded once, then reused) or not: every golden output's
// spec hashes alike both ways, so an object's hash label never depends
// on where its values were made.
func TestSpecHashOfCheckedValuesIsTheSpecsOwn(t *testing.T) {
	objs := renderGoldenObjects(t)
	if len(objs) == 0 {
		t.Fatal("no golden objects")
	}
	for _, o := range objs {
		got, err := envoyfilter.SpecHash(o.Spec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(o.Spec)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if want := hex.EncodeToString(sum[:8]); got != want {
			t.Errorf("%s: SpecHash %s, the hash of its encoding %s", o.Metadata.Name, got, want)
		}
		// A copy holds none of Check's values: the whole encoding.
		if again, _ := envoyfilter.SpecHash(proto.Clone(o.Spec).(*networking.EnvoyFilter)); again != got {
			t.Errorf("%s: SpecHash of a copy %s, of the rendered spec %s", o.Metadata.Name, again, got)
		}
	}
}

// renderGoldenObjects renders every golden input that renders.
func renderGoldenObjects(t *testing.T) []*envoyfilter.Object {
	t.Helper()
	ins, err := filepath.Glob("../items/*/testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs []*envoyfilter.Object
	for _, file := range ins {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := document.Parse(data)
		if err != nil {
			continue // an invalid input: its golden is an error
		}
		out, err := render.Desired(doc)
		if err != nil {
			continue
		}
		objs = append(objs, out...)
	}
	return objs
}
