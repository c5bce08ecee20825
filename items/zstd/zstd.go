// Package zstd is the `zstd` item: zstd compression of responses with
// Envoy's compressor filter.
package zstd

import (
	zstdv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/zstd/compressor/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/compression"
)

// Name is the item's key in the document.
const Name = "zstd"

// Limits: zstd's own level range (Envoy passes the level through); the
// chunk size limits are compression's.
const MinCompressionLevel, MaxCompressionLevel = 1, 22

// Zstd is the `zstd` section.
type Zstd struct {
	items.Toggle
	compression.Response
	CompressionLevel uint32   `json:"compressionLevel" doc:"zstd level, 1 (fastest) to 22 (smallest)."`
	EnableChecksum   bool     `json:"enableChecksum" doc:"Append a checksum to each frame."`
	Strategy         Strategy `json:"strategy" doc:"zstd strategy by name (DEFAULT lets zstd choose)."`
	ChunkSize        uint32   `json:"chunkSize" doc:"Size of the output buffer, 4096 to 65536 bytes."`
}

var (
	_ items.Item      = (*Zstd)(nil)
	_ items.Ranger    = (*Zstd)(nil)
	_ items.Versioned = (*Zstd)(nil)
	_ items.Enum      = Strategy("")
)

// Strategy is a zstd strategy by Envoy's enum name.
type Strategy string

// Values lists Envoy's names.
func (Strategy) Values() []string { return items.EnumNames(zstdv3.Zstd_Strategy_value) }

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "zstd compression of responses.",
		Stage:            envoyfilter.StageCompression,
		Slot:             2,
		Purpose:          "compresses responses (zstd)",
		Where:            "an HTTP filter at the front of every HTTP connection manager; outbound, it compresses the responses the workload receives (when it sends `Accept-Encoding`)",
		EnabledByDefault: true,
		New:              New,
		Needs:            []items.Need{compression.Need},
	})
}

// New returns zstd's default level with the shared response defaults; a
// present section is enabled unless it says `enable: false`.
func New() items.Item {
	return &Zstd{
		Response:         compression.DefaultResponse(),
		CompressionLevel: 3,
		Strategy:         "DEFAULT",
		ChunkSize:        compression.MinChunkSize,
	}
}

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*Zstd) Ranges() []items.Range {
	return []items.Range{
		{Path: "compressionLevel", Min: MinCompressionLevel, Max: MaxCompressionLevel},
		{Path: "chunkSize", Min: compression.MinChunkSize, Max: compression.MaxChunkSize},
	}
}

// Validate implements items.Item.
func (z *Zstd) Validate() error {
	var p items.Problems
	z.Response.Validate(&p)
	items.CheckRanges(&p, z)
	return p.Err()
}

// Build implements items.Item: the patch for the newest Envoy.
func (z *Zstd) Build() ([]envoyfilter.Patch, error) { return z.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned.
func (z *Zstd) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	lib := &zstdv3.Zstd{
		CompressionLevel: wrapperspb.UInt32(z.CompressionLevel),
		EnableChecksum:   z.EnableChecksum,
		Strategy:         zstdv3.Zstd_Strategy(zstdv3.Zstd_Strategy_value[string(z.Strategy)]),
		ChunkSize:        wrapperspb.UInt32(z.ChunkSize),
	}
	p, err := compression.Patch(Name, z.Response, lib, r.Envoy)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
