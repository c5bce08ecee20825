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
		Slot:             7,
		Purpose:          "refuses bodies over the size",
		Where:            "an HTTP filter; outbound, it limits the bodies the workload sends",
		EnabledByDefault: true,
		New:              func() items.Item { return &RequestBody{} },
	})
}

// MaxSize is the ceiling of maxSize: Envoy's max_request_bytes is a
// uint32.
const MaxSize = math.MaxUint32

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*RequestBody) Ranges() []items.Range {
	return []items.Range{{Path: "maxSize", Min: 1, Max: MaxSize, Why: "Envoy's limit, in bytes"}}
}

// Validate implements items.Item.
func (r *RequestBody) Validate() error {
	var p items.Problems
	switch {
	case r.MaxSize == 0 && r.Enable:
		p.Addf("maxSize", "is required, e.g. 10Mi")
	case r.MaxSize > 0:
		items.CheckRanges(&p, r)
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
