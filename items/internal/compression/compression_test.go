package compression_test

import (
	"testing"

	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items/internal/compression"
)

func compressorFor(t *testing.T, envoy envoyfilter.Version) *compressorv3.Compressor_CommonDirectionConfig {
	t.Helper()
	p, err := compression.Patch("gzip", compression.DefaultResponse(), &gzipv3.Gzip{}, envoy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envoyfilter.Check(p); err != nil {
		t.Fatalf("Envoy %s: %v", envoy, err)
	}
	c := &compressorv3.Compressor{}
	if err := p.Value.(*hcmv3.HttpFilter).GetTypedConfig().UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	return c.GetResponseDirectionConfig().GetCommonConfig()
}

// Proxies whose Envoy has content_type_matcher get it, and not the
// deprecated content_type; older ones get content_type.
func TestContentTypeByEnvoy(t *testing.T) {
	types := compression.DefaultResponse().ContentType
	old := compressorFor(t, envoyfilter.Version{Major: 1, Minor: 39})
	if len(old.GetContentTypeMatcher()) != 0 || len(old.GetContentType()) != len(types) {
		t.Errorf("Envoy 1.39: content_type %v, matchers %v", old.GetContentType(), old.GetContentTypeMatcher())
	}
	cur := compressorFor(t, compression.ContentTypeMatcher)
	if len(cur.GetContentType()) != 0 || len(cur.GetContentTypeMatcher()) != len(types) {
		t.Fatalf("Envoy %s: content_type %v, matchers %v", compression.ContentTypeMatcher, cur.GetContentType(), cur.GetContentTypeMatcher())
	}
	for i, m := range cur.GetContentTypeMatcher() {
		if m.GetPrefix() != types[i] || !m.GetIgnoreCase() {
			t.Errorf("matcher %d = %v, want a case-insensitive prefix %q", i, m, types[i])
		}
	}
}
