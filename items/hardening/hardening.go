// Package hardening is the `hardening` item: how the gateway treats
// request paths and headers it should not pass on as they are, and how
// long connections and streams may live.
package hardening

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	connlimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/connection_limit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "hardening"

// Hardening is the `hardening` section. Every key is optional; a key left
// out leaves Istio's and Envoy's setting alone.
type Hardening struct {
	items.Toggle
	NormalizePath            *bool          `json:"normalizePath" doc:"Normalize request paths (RFC 3986: ./ and ../ segments) before routing (HCM normalize_path). Only true can be set here."`
	MergeSlashes             *bool          `json:"mergeSlashes" doc:"Merge adjacent slashes in request paths (HCM merge_slashes). Only true can be set here."`
	EscapedSlashes           EscapedSlashes `json:"escapedSlashes" doc:"What to do with %2F and %5C in paths (HCM path_with_escaped_slashes_action): KEEP_UNCHANGED, REJECT_REQUEST, UNESCAPE_AND_REDIRECT or UNESCAPE_AND_FORWARD."`
	HeadersWithUnderscores   Underscores    `json:"headersWithUnderscores" doc:"What to do with request headers whose names contain underscores (common_http_protocol_options.headers_with_underscores_action): REJECT_REQUEST or DROP_HEADER."`
	MaxConnectionDuration    *items.Seconds `json:"maxConnectionDuration" doc:"Close a client connection this long after it opened, draining it first (common_http_protocol_options.max_connection_duration)."`
	MaxStreamDuration        *items.Seconds `json:"maxStreamDuration" doc:"Reset a request stream this long after it started (common_http_protocol_options.max_stream_duration)."`
	MaxRequestsPerConnection *uint32        `json:"maxRequestsPerConnection" doc:"Close a client connection after this many requests, at least 1 (common_http_protocol_options.max_requests_per_connection)."`
	MaxConnections           *uint64        `json:"maxConnections" doc:"Most client connections open at once on each HTTP filter chain of a listener, at least 1; newer ones are closed (envoy.filters.network.connection_limit)."`
	ConnectionLimitDelay     *items.Seconds `json:"connectionLimitDelay" doc:"Wait this long before closing a connection over maxConnections, so a client can't retry at once (connection_limit delay; default: close at once)."`
	StripTrailingHostDot     *bool          `json:"stripTrailingHostDot" doc:"Remove a trailing dot from the request's host (example.com. and example.com.:8080 become example.com and example.com:8080) before filters and routing see it, so it is routed like the host without the dot (HCM strip_trailing_host_dot). Only true can be set."`
}

// ConnectionLimit is the name of the network filter maxConnections inserts,
// and ConnectionLimitStats the prefix of its statistics
// (connection_limit.<prefix>.limited_connections, active_connections).
const (
	ConnectionLimit      = "envoy.filters.network.connection_limit"
	ConnectionLimitStats = "globalconfig_connection_limit"
)

// EscapedSlashes is Envoy's path_with_escaped_slashes_action by name,
// less IMPLEMENTATION_SPECIFIC_DEFAULT: that is the enum's zero value,
// which an EnvoyFilter MERGE cannot set.
type EscapedSlashes string

// Values lists the settable names.
func (EscapedSlashes) Values() []string {
	return []string{"KEEP_UNCHANGED", "REJECT_REQUEST", "UNESCAPE_AND_REDIRECT", "UNESCAPE_AND_FORWARD"}
}

// Underscores is Envoy's headers_with_underscores_action by name, less
// ALLOW, Envoy's default and the enum's zero value, which a MERGE cannot
// set.
type Underscores string

// Values lists the settable names.
func (Underscores) Values() []string { return []string{"REJECT_REQUEST", "DROP_HEADER"} }

var (
	_ items.Item = (*Hardening)(nil)
	_ items.Enum = EscapedSlashes("")
	_ items.Enum = Underscores("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "HTTP hardening: path normalization, merged and escaped slashes, headers with underscores, a trailing dot in the host, connection and stream lifetimes, a connection limit.",
		Stage:            envoyfilter.StageConnection,
		Slot:             2,
		Purpose:          "normalizes paths and headers and caps connections",
		Where:            "a connection manager merge; `maxConnections` counts per HTTP filter chain wherever it goes",
		EnabledByDefault: true,
		New:              func() items.Item { return &Hardening{} },
	})
}

// Ranges implements items.Ranger: both counts need at least one.
func (*Hardening) Ranges() []items.Range {
	return []items.Range{items.AtLeast("maxRequestsPerConnection", 1), items.AtLeast("maxConnections", 1)}
}

// Validate implements items.Item.
func (h *Hardening) Validate() error {
	var p items.Problems
	// A MERGE can't turn a bool off: false is proto3's default, which
	// merges as "not set" (and a false wrapper merges as nothing too).
	if h.NormalizePath != nil && !*h.NormalizePath {
		p.Addf("normalizePath", "only true can be set by an EnvoyFilter; to turn normalization off, use Istio's MeshConfig pathNormalization.normalization: NONE")
	}
	if h.MergeSlashes != nil && !*h.MergeSlashes {
		p.Addf("mergeSlashes", "only true can be set by an EnvoyFilter; false is Envoy's default (and Istio's unless MeshConfig pathNormalization says MERGE_SLASHES)")
	}
	if h.StripTrailingHostDot != nil && !*h.StripTrailingHostDot {
		p.Addf("stripTrailingHostDot", "only true can be set by an EnvoyFilter; false is Envoy's default (a host with a trailing dot matches no route's domain but a wildcard's), which a merge leaves as it is: remove the key")
	}
	items.CheckRanges(&p, h)
	if h.ConnectionLimitDelay != nil && h.MaxConnections == nil {
		p.Addf("connectionLimitDelay", "only applies with maxConnections")
	}
	items.RequireSomething(&p, h)
	return p.Err()
}

// Build implements items.Item.
func (h *Hardening) Build() ([]envoyfilter.Patch, error) {
	hcm := &hcmv3.HttpConnectionManager{
		NormalizePath: items.OptionalBool(h.NormalizePath),
	}
	if h.MergeSlashes != nil {
		hcm.MergeSlashes = *h.MergeSlashes
	}
	if h.StripTrailingHostDot != nil {
		hcm.StripTrailingHostDot = *h.StripTrailingHostDot
	}
	if h.EscapedSlashes != "" {
		hcm.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction(
			hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction_value[string(h.EscapedSlashes)])
	}
	common := &corev3.HttpProtocolOptions{
		MaxConnectionDuration:    items.OptionalDuration(h.MaxConnectionDuration),
		MaxStreamDuration:        items.OptionalDuration(h.MaxStreamDuration),
		MaxRequestsPerConnection: items.OptionalUInt32(h.MaxRequestsPerConnection),
	}
	if h.HeadersWithUnderscores != "" {
		common.HeadersWithUnderscoresAction = corev3.HttpProtocolOptions_HeadersWithUnderscoresAction(
			corev3.HttpProtocolOptions_HeadersWithUnderscoresAction_value[string(h.HeadersWithUnderscores)])
	}
	if common.MaxConnectionDuration != nil || common.MaxStreamDuration != nil || common.MaxRequestsPerConnection != nil || common.HeadersWithUnderscoresAction != 0 {
		hcm.CommonHttpProtocolOptions = common
	}
	var patches []envoyfilter.Patch
	if !proto.Equal(hcm, &hcmv3.HttpConnectionManager{}) {
		p, err := envoyfilter.MergeHCM(hcm)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if h.MaxConnections != nil {
		p, err := envoyfilter.InsertNetworkFilter(ConnectionLimit, &connlimitv3.ConnectionLimit{
			StatPrefix:     ConnectionLimitStats,
			MaxConnections: wrapperspb.UInt64(*h.MaxConnections),
			Delay:          items.OptionalDuration(h.ConnectionLimitDelay),
		})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}
