// Package compression holds what the gzip, brotli and zstd items share: the
// response settings of Envoy's compressor filter and the patch that inserts
// it before the router.
package compression

import (
	"fmt"
	"mime"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	compressorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Response is the part of a compression item that decides which responses
// are compressed. Embed it in the item struct; its keys read inline.
type Response struct {
	MinContentLength    uint32   `json:"minContentLength" doc:"Smallest response body, in bytes, that is compressed."`
	ContentType         []string `json:"contentType" doc:"Media types that are compressed; a given list replaces the default one."`
	DisableOnEtagHeader bool     `json:"disableOnEtagHeader" doc:"Leave responses with an ETag header uncompressed."`
}

// Envoy's range for every compressor library's chunk_size (the output
// buffer): gzip, brotli and zstd share it. Envoy's floor of 4096 is tighter
// than Higress's (> 0), and Envoy's wins: a smaller value is rejected.
const MinChunkSize, MaxChunkSize = 4096, 65536

// DefaultMinContentLength is Higress's default: smaller bodies gain too
// little to be worth the CPU.
const DefaultMinContentLength = 1024

// DefaultResponse is Higress's gzip default: the text formats browsers and
// APIs send most.
func DefaultResponse() Response {
	return Response{
		MinContentLength: DefaultMinContentLength,
		ContentType: []string{
			"text/html", "text/css", "text/plain", "text/xml",
			"application/json", "application/javascript", "application/xhtml+xml", "image/svg+xml",
		},
		DisableOnEtagHeader: true,
	}
}

// Texts implements items.Texter for the items that embed Response.
func (Response) Texts() []items.Text {
	return []items.Text{{Path: "contentType[]", Kind: items.TextMediaType}}
}

// Validate records the problems of r.
func (r Response) Validate(p *items.Problems) {
	if len(r.ContentType) == 0 {
		p.Addf("contentType", "must list at least one media type")
	}
	for i, ct := range r.ContentType {
		path := fmt.Sprintf("contentType[%d]", i)
		mt, params, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			p.Addf(path, "must be a media type such as \"text/html\", got %q", ct)
		case strings.Contains(mt, "*"):
			p.Addf(path, "is %q, a wildcard, but Envoy's compressor compares media types exactly, so it would match no response; list each type instead, such as \"text/html\" and \"text/css\"", ct)
		case len(params) > 0 || mt != ct:
			p.Addf(path, "must be a bare lower-case media type without parameters, such as %q, got %q", mt, ct)
		}
	}
}

// ContentTypeMatcher is the first Envoy with the compressor's
// content_type_matcher, which deprecates content_type.
var ContentTypeMatcher = envoyfilter.Version{Major: 1, Minor: 40}

// Need is what the compression items declare in Registration.Needs.
var Need = items.Need{Setting: "contentType", Field: "content_type_matcher", Envoy: ContentTypeMatcher, Older: "content_type, the same media types (deprecated from Envoy 1.40)"}

// Patch builds the compressor filter for library (named name, configured by
// lib) for proxies of envoy and inserts it at the compression stage's
// position. Only responses are compressed: the request direction is left
// unset, which Envoy treats as off.
func Patch(name string, r Response, lib proto.Message, envoy envoyfilter.Version) (envoyfilter.Patch, error) {
	typedLib, err := envoyfilter.Any(lib)
	if err != nil {
		return envoyfilter.Patch{}, fmt.Errorf("pack %s library: %w", name, err)
	}
	c := &compressorv3.Compressor{
		ResponseDirectionConfig: &compressorv3.Compressor_ResponseDirectionConfig{
			CommonConfig: &compressorv3.Compressor_CommonDirectionConfig{
				MinContentLength: wrapperspb.UInt32(r.MinContentLength),
			},
			DisableOnEtagHeader: r.DisableOnEtagHeader,
		},
		CompressorLibrary: &corev3.TypedExtensionConfig{Name: name, TypedConfig: typedLib},
	}
	common := c.ResponseDirectionConfig.CommonConfig
	if envoy.AtLeast(ContentTypeMatcher) {
		// A prefix match, case-insensitive, of the media type: it holds
		// whether or not Envoy strips parameters (";charset=utf-8")
		// before matching, as it does for content_type.
		for _, ct := range r.ContentType {
			common.ContentTypeMatcher = append(common.ContentTypeMatcher, &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: ct},
				IgnoreCase:   true,
			})
		}
	} else {
		common.ContentType = r.ContentType
	}
	return envoyfilter.InsertHTTPFilter(envoyfilter.Compressor+"."+name, c)
}
