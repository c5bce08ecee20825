// Package all links every item into the binary: one blank import per item.
package all

import (
	_ "github.com/globalconfig/globalconfig/items/brotli"
	_ "github.com/globalconfig/globalconfig/items/gzip"
	_ "github.com/globalconfig/globalconfig/items/tracing"
	_ "github.com/globalconfig/globalconfig/items/zstd"
)
