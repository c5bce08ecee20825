//go:build tools

// Package tools pins the binaries this module builds: the service
// (ratelimit) and its config checker (ratelimit_config_check).
package tools

import (
	_ "github.com/envoyproxy/ratelimit/src/config_check_cmd"
	_ "github.com/envoyproxy/ratelimit/src/service_cmd"
)
