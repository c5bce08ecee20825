// Package all links every item into the binary: one blank import per item.
package all

import (
	_ "github.com/globalconfig/globalconfig/items/accesslog"
	_ "github.com/globalconfig/globalconfig/items/bandwidthlimit"
	_ "github.com/globalconfig/globalconfig/items/basicauth"
	_ "github.com/globalconfig/globalconfig/items/brotli"
	_ "github.com/globalconfig/globalconfig/items/clientip"
	_ "github.com/globalconfig/globalconfig/items/cors"
	_ "github.com/globalconfig/globalconfig/items/csrf"
	_ "github.com/globalconfig/globalconfig/items/customerrors"
	_ "github.com/globalconfig/globalconfig/items/downstream"
	_ "github.com/globalconfig/globalconfig/items/extauth"
	_ "github.com/globalconfig/globalconfig/items/extproc"
	_ "github.com/globalconfig/globalconfig/items/faultinjection"
	_ "github.com/globalconfig/globalconfig/items/globalratelimit"
	_ "github.com/globalconfig/globalconfig/items/gzip"
	_ "github.com/globalconfig/globalconfig/items/hardening"
	_ "github.com/globalconfig/globalconfig/items/headers"
	_ "github.com/globalconfig/globalconfig/items/ipaccess"
	_ "github.com/globalconfig/globalconfig/items/loadshedding"
	_ "github.com/globalconfig/globalconfig/items/localratelimit"
	_ "github.com/globalconfig/globalconfig/items/requestbody"
	_ "github.com/globalconfig/globalconfig/items/tls"
	_ "github.com/globalconfig/globalconfig/items/tracing"
	_ "github.com/globalconfig/globalconfig/items/upstream"
	_ "github.com/globalconfig/globalconfig/items/zstd"
)
