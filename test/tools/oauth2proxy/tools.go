//go:build tools

// Package tools pins the binary this module builds: oauth2-proxy (its main
// package is the module root).
package tools

import _ "github.com/oauth2-proxy/oauth2-proxy/v7"
