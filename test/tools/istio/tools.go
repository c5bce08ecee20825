//go:build tools

// Package tools pins the binaries this module builds.
package tools

import (
	_ "istio.io/istio/istioctl/cmd/istioctl"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
