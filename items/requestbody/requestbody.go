// Package requestbody is the `requestBody` item: a maximum request body
// size, enforced with Envoy's buffer filter, which answers 413 to larger
// requests.
package requestbody

import (
	"math"

	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "requestBody"

// RequestBody is the `requestBody` section.
type RequestBody struct {
	items.Toggle
	MaxSize items.ByteSize `json:"maxSize" doc:"Largest request body accepted, e.g. 10Mi; larger requests get 413. The body is buffered before it is forwarded."`
}

var _ items.Item = (*RequestBody)(nil)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A maximum request body size; larger requests are answered 413.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             3,
		Purpose:          "refuses bodies over the size",
		EnabledByDefault: true,
		New:              func() items.Item { return &RequestBody{} },
	})
}

// Validate implements items.Item.
func (r *RequestBody) Validate() error {
	var p items.Problems
	switch {
	case r.MaxSize == 0 && r.Enable:
		p.Addf("maxSize", "is required, e.g. 10Mi")
	case r.MaxSize > math.MaxUint32:
		p.Addf("maxSize", "must be at most 4294967295 bytes (Envoy's limit), got %d", uint64(r.MaxSize))
	}
	return p.Err()
}

// Build implements items.Item.
func (r *RequestBody) Build() ([]envoyfilter.Patch, error) {
	p, err := envoyfilter.InsertHTTPFilter(envoyfilter.Buffer, &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(uint32(r.MaxSize))})
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
