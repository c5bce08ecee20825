// Package gzip is the `gzip` item: gzip compression of responses with
// Envoy's compressor filter, in Higress's higress-config shape.
package gzip

import (
	gzipv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/compression"
)

// Name is the item's key in the document.
const Name = "gzip"

// Limits from Envoy's gzip compressor (envoy.extensions.compression.gzip.
// compressor.v3.Gzip); the chunk size limits are compression's.
const (
	MinMemoryLevel, MaxMemoryLevel = 1, 9
	MinWindowBits, MaxWindowBits   = 9, 15
)

// Gzip is the `gzip` section.
type Gzip struct {
	items.Toggle
	compression.Response
	MemoryLevel         uint32   `json:"memoryLevel" doc:"zlib memory level, 1 (least memory) to 9 (fastest)."`
	WindowBits          uint32   `json:"windowBits" doc:"Base-2 log of the zlib window size, 9 to 15."`
	ChunkSize           uint32   `json:"chunkSize" doc:"Size of the output buffer, 4096 to 65536 bytes (Envoy's chunk_size)."`
	CompressionLevel    Level    `json:"compressionLevel" doc:"Envoy gzip compression level."`
	CompressionStrategy Strategy `json:"compressionStrategy" doc:"zlib compression strategy."`
}

var (
	_ items.Item      = (*Gzip)(nil)
	_ items.Ranger    = (*Gzip)(nil)
	_ items.Versioned = (*Gzip)(nil)
	_ items.Enum      = Level("")
	_ items.Enum      = Strategy("")
)

// Level is a gzip compression level by Envoy's enum name.
type Level string

// Values lists Envoy's names.
func (Level) Values() []string { return items.EnumNames(gzipv3.Gzip_CompressionLevel_value) }

// Strategy is a zlib strategy by Envoy's enum name.
type Strategy string

// Values lists Envoy's names.
func (Strategy) Values() []string { return items.EnumNames(gzipv3.Gzip_CompressionStrategy_value) }

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "gzip compression of responses (Higress-compatible).",
		Stage:            envoyfilter.StageCompression,
		Slot:             1,
		Purpose:          "compresses responses (gzip)",
		Where:            "an HTTP filter at the front of every HTTP connection manager; outbound, it compresses the responses the workload receives (when it sends `Accept-Encoding`)",
		EnabledByDefault: true,
		New:              New,
		Needs:            []items.Need{compression.Need},
	})
}

// New returns the defaults, which are Higress's; a present section is
// enabled unless it says `enable: false`.
func New() items.Item {
	return &Gzip{
		Response:            compression.DefaultResponse(),
		MemoryLevel:         5,
		WindowBits:          12,
		ChunkSize:           compression.MinChunkSize,
		CompressionLevel:    "BEST_COMPRESSION",
		CompressionStrategy: "DEFAULT_STRATEGY",
	}
}

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*Gzip) Ranges() []items.Range {
	return []items.Range{
		{Path: "memoryLevel", Min: MinMemoryLevel, Max: MaxMemoryLevel},
		{Path: "windowBits", Min: MinWindowBits, Max: MaxWindowBits},
		{Path: "chunkSize", Min: compression.MinChunkSize, Max: compression.MaxChunkSize},
	}
}

// Validate implements items.Item.
func (g *Gzip) Validate() error {
	var p items.Problems
	g.Response.Validate(&p)
	items.CheckRanges(&p, g)
	return p.Err()
}

// Build implements items.Item: the patch for the newest Envoy.
func (g *Gzip) Build() ([]envoyfilter.Patch, error) { return g.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned.
func (g *Gzip) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	lib := &gzipv3.Gzip{
		MemoryLevel:         wrapperspb.UInt32(g.MemoryLevel),
		WindowBits:          wrapperspb.UInt32(g.WindowBits),
		ChunkSize:           wrapperspb.UInt32(g.ChunkSize),
		CompressionLevel:    gzipv3.Gzip_CompressionLevel(gzipv3.Gzip_CompressionLevel_value[string(g.CompressionLevel)]),
		CompressionStrategy: gzipv3.Gzip_CompressionStrategy(gzipv3.Gzip_CompressionStrategy_value[string(g.CompressionStrategy)]),
	}
	p, err := compression.Patch(Name, g.Response, lib, r.Envoy)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
