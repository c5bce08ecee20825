// Package brotli is the `brotli` item: brotli compression of responses with
// Envoy's compressor filter, beside or instead of gzip.
package brotli

import (
	brotliv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/brotli/compressor/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/compression"
)

// Name is the item's key in the document.
const Name = "brotli"

// Limits from Envoy's brotli compressor; the chunk size limits are
// compression's.
const (
	MaxQuality                           = 11
	MinWindowBits, MaxWindowBits         = 10, 24
	MinInputBlockBits, MaxInputBlockBits = 16, 24
)

// Brotli is the `brotli` section.
type Brotli struct {
	items.Toggle
	compression.Response
	Quality                       uint32      `json:"quality" doc:"Compression quality, 0 (fastest) to 11 (smallest)."`
	EncoderMode                   EncoderMode `json:"encoderMode" doc:"Hint about the content: DEFAULT, GENERIC, TEXT or FONT."`
	WindowBits                    uint32      `json:"windowBits" doc:"Base-2 log of the sliding window size, 10 to 24."`
	InputBlockBits                uint32      `json:"inputBlockBits" doc:"Base-2 log of the input block size, 16 to 24."`
	ChunkSize                     uint32      `json:"chunkSize" doc:"Size of the output buffer, 4096 to 65536 bytes."`
	DisableLiteralContextModeling bool        `json:"disableLiteralContextModeling" doc:"Trade a little ratio for faster compression."`
}

var (
	_ items.Item      = (*Brotli)(nil)
	_ items.Ranger    = (*Brotli)(nil)
	_ items.Versioned = (*Brotli)(nil)
	_ items.Enum      = EncoderMode("")
)

// EncoderMode is a brotli encoder mode by Envoy's enum name.
type EncoderMode string

// Values lists Envoy's names.
func (EncoderMode) Values() []string { return items.EnumNames(brotliv3.Brotli_EncoderMode_value) }

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "brotli compression of responses.",
		Stage:            envoyfilter.StageCompression,
		Slot:             0,
		Purpose:          "compresses responses (br)",
		Where:            "an HTTP filter at the front of every HTTP connection manager; outbound, it compresses the responses the workload receives (when it sends `Accept-Encoding`)",
		EnabledByDefault: true,
		New:              New,
		Needs:            []items.Need{compression.Need},
	})
}

// New returns Envoy's brotli defaults with the shared response defaults; a
// present section is enabled unless it says `enable: false`.
func New() items.Item {
	return &Brotli{
		Response:       compression.DefaultResponse(),
		Quality:        3,
		EncoderMode:    "DEFAULT",
		WindowBits:     18,
		InputBlockBits: 24,
		ChunkSize:      compression.MinChunkSize,
	}
}

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*Brotli) Ranges() []items.Range {
	return []items.Range{
		{Path: "quality", Min: 0, Max: MaxQuality},
		{Path: "windowBits", Min: MinWindowBits, Max: MaxWindowBits},
		{Path: "inputBlockBits", Min: MinInputBlockBits, Max: MaxInputBlockBits},
		{Path: "chunkSize", Min: compression.MinChunkSize, Max: compression.MaxChunkSize},
	}
}

// Validate implements items.Item.
func (b *Brotli) Validate() error {
	var p items.Problems
	b.Response.Validate(&p)
	items.CheckRanges(&p, b)
	return p.Err()
}

// Build implements items.Item: the patch for the newest Envoy.
func (b *Brotli) Build() ([]envoyfilter.Patch, error) { return b.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned.
func (b *Brotli) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	lib := &brotliv3.Brotli{
		Quality:                       wrapperspb.UInt32(b.Quality),
		EncoderMode:                   brotliv3.Brotli_EncoderMode(brotliv3.Brotli_EncoderMode_value[string(b.EncoderMode)]),
		WindowBits:                    wrapperspb.UInt32(b.WindowBits),
		InputBlockBits:                wrapperspb.UInt32(b.InputBlockBits),
		ChunkSize:                     wrapperspb.UInt32(b.ChunkSize),
		DisableLiteralContextModeling: b.DisableLiteralContextModeling,
	}
	p, err := compression.Patch(Name, b.Response, lib, r.Envoy)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
