package envoycheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/render"
)

func openEnvoy(t *testing.T) *envoybin.Binary {
	t.Helper()
	p := os.Getenv("GLOBALCONFIG_ENVOY")
	if p == "" {
		t.Skip("GLOBALCONFIG_ENVOY is not set: run `make test-one PKG=./pkg/envoycheck` (or `make test`), which installs Envoy and sets it")
	}
	b, err := envoybin.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The bootstrap goes to Envoy in protobuf's binary encoding, as xDS
// delivers config: an optional filter of a type the binary does not link
// (custom_response in istio-proxy's Envoy) is skipped, as the proxy skips
// it, where the same bootstrap as JSON does not even parse. A filter of
// that type that is not optional is refused, naming it.
func TestOptionalFilterTheBinaryLacks(t *testing.T) {
	bin := openEnvoy(t)
	const notLinked = "type.googleapis.com/istio.not.linked.v1.Config"
	empty, err := anypb.New(&emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// withFilter is the representative gateway with a filter of type url
	// first in its HTTP filter chain.
	withFilter := func(optional bool, typed *anypb.Any) proto.Message {
		bs, err := bootstrap(networking.EnvoyFilter_GATEWAY, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0]
		hcm := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		hcm.HttpFilters = slices.Insert(hcm.HttpFilters, 0, &hcmv3.HttpFilter{Name: "istio.not_linked", IsOptional: optional,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}})
		packed, err := anypb.New(hcm)
		if err != nil {
			t.Fatal(err)
		}
		f.GetTypedConfig().Value = packed.GetValue()
		return bs
	}
	binary := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	if err := bin.ValidateBinary(ctx, binary(withFilter(true, &anypb.Any{TypeUrl: notLinked}))); err != nil {
		t.Errorf("an optional filter the binary lacks, binary bootstrap: %v", err)
	}
	// Go can't write JSON of a type it does not know either: write a known
	// one and rename it.
	js, err := protojson.Marshal(withFilter(true, empty))
	if err != nil {
		t.Fatal(err)
	}
	var rej *envoybin.Rejected
	err = bin.Validate(ctx, []byte(strings.ReplaceAll(string(js), empty.GetTypeUrl(), notLinked)))
	if !errors.As(err, &rej) || !strings.Contains(rej.Message, "istio.not.linked.v1.Config") {
		t.Errorf("the same as JSON: %v; want Envoy's parse error (why the check sends binary)", err)
	}
	err = bin.ValidateBinary(ctx, binary(withFilter(false, &anypb.Any{TypeUrl: notLinked})))
	if !errors.As(err, &rej) || !strings.Contains(rej.Message, "Didn't find a registered implementation for 'istio.not_linked'") {
		t.Errorf("a required filter the binary lacks: %v", err)
	}
}

// What the check loads carries nothing but upstream Envoy's own types:
// none of Istio's extensions (istio.*, TypedStruct wrappers), which an
// upstream binary refuses and istio-proxy's accepts. So an upstream and
// istio-proxy's binary judge the same configuration, and nothing of ours
// is refused only for them. The example uses every item; customErrors'
// upstream adds the filter istio-proxy lacks (optional).
func TestRepresentativeConfigIsUpstreamEnvoys(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "global-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = strings.Replace(cm.Data["config.yaml"], "customErrors:\n", "customErrors:\n  upstream:\n  - statuses: [500]\n    json: {error: internal}\n", 1)
	res := render.New().FromConfigMap(cm.Data)
	if !res.Valid() {
		t.Fatalf("the example: %s", render.Describe(res.Problems, "\n"))
	}
	byCtx, err := byContext(res.Objects, "1.32.0")
	if err != nil {
		t.Fatal(err)
	}
	typeURL := regexp.MustCompile(`"@type":\s*"([^"]+)"`)
	seen := map[string]bool{}
	for c, ps := range byCtx {
		bs, err := bootstrap(c, ps)
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(bs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range typeURL.FindAllStringSubmatch(string(js), -1) {
			seen[m[1]] = true
			if !strings.HasPrefix(m[1], "type.googleapis.com/envoy.") {
				t.Errorf("%s: %s is not one of upstream Envoy's types", c, m[1])
			}
		}
	}
	if !seen["type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse"] || len(seen) < 10 {
		t.Errorf("the example's bootstrap carries only %d types (%v): is it built?", len(seen), seen)
	}
}

// When the time runs out while the items Envoy refuses are being named,
// the refusal stands, without their names (the webhook denies with it).
func TestRefusalOutlivesTheTime(t *testing.T) {
	dir := t.TempDir()
	path, seen := filepath.Join(dir, "envoy"), filepath.Join(dir, "seen")
	// The first load is refused; every later one hangs.
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL'; exit 0; fi\n" +
		"if [ ! -e '" + seen + "' ]; then touch '" + seen + "'; echo \"error initializing configuration 'x.pb': no such thing\" >&2; exit 1; fi\nexec sleep 60\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := envoybin.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	res := render.New().FromConfigMap(map[string]string{"config.yaml": "gzip: {}\nbrotli: {}\n"})
	if !res.Valid() {
		t.Fatal(res.Problems)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	rep, err := Check(ctx, bin, res.Objects)
	if err != nil || rep.OK() || len(rep.Results) != 1 || rep.Results[0].Rejected != "no such thing" || !rep.Results[0].Unnamed || len(rep.Results[0].Items) != 0 {
		t.Errorf("Check: %+v, %v; want the refusal, Unnamed", rep, err)
	}
}
