// Package higress converts Higress's higress-config document into a
// globalconfig document that puts into effect at the gateway what Higress
// put into effect, with every default Higress applied silently written
// out, and reports key by key what became of it.
//
// The model below mirrors what Higress reads (its pkg/ingress/kube/configmap):
// the same keys, Go types and defaults, decoded the way Higress decodes
// them, so a document Higress rejects is rejected here too.
package higress

// Higress's defaults (NewDefaultHigressConfig): a key left out keeps them,
// and so does a section left out.
const (
	DefaultIdleTimeout                 = 180 // seconds; also the stream idle timeout
	DefaultMaxRequestHeadersKb         = 60
	DefaultConnectionBufferLimits      = 32768
	DefaultMaxConcurrentStreams        = 100
	DefaultInitialStreamWindowSize     = 65535
	DefaultInitialConnectionWindowSize = 1048576
	DefaultRouteTimeout                = 0 // leave route timeouts alone
	DefaultUpstreamIdleTimeout         = 10
	DefaultUpstreamBufferLimits        = 10485760
	DefaultTracingTimeout              = 500 // milliseconds
	DefaultTracingSampling             = 100.0
	DefaultGzipMinContentLength        = 1024
	DefaultGzipMemoryLevel             = 5
	DefaultGzipWindowBits              = 12
	DefaultGzipChunkSize               = 4096
	DefaultGzipCompressionLevel        = "BEST_COMPRESSION"
	DefaultGzipCompressionStrategy     = "DEFAULT_STRATEGY"
	// envoyChunkSize is what Envoy used for every Higress gzip filter:
	// Higress writes chunkSize as check_size, which Istio drops.
	envoyChunkSize = 4096
)

// DefaultGzipContentType is Higress's gzip content type list.
var DefaultGzipContentType = []string{"text/html", "text/css", "text/plain", "text/xml", "application/json", "application/javascript", "application/xhtml+xml", "image/svg+xml"}

// Higress's limits (its validation).
const (
	maxRequestHeadersKb = 8192
	maxHTTP2            = 2147483647
	minHTTP2Window      = 65535
)

// Higress's gzip enums: Envoy's names, less DEFAULT_COMPRESSION.
var (
	gzipLevels     = []string{"BEST_COMPRESSION", "BEST_SPEED", "COMPRESSION_LEVEL_1", "COMPRESSION_LEVEL_2", "COMPRESSION_LEVEL_3", "COMPRESSION_LEVEL_4", "COMPRESSION_LEVEL_5", "COMPRESSION_LEVEL_6", "COMPRESSION_LEVEL_7", "COMPRESSION_LEVEL_8", "COMPRESSION_LEVEL_9"}
	gzipStrategies = []string{"DEFAULT_STRATEGY", "FILTERED", "HUFFMAN_ONLY", "RLE", "FIXED"}
)

// Config is the higress document.
type Config struct {
	Tracing              *Tracing    `json:"tracing,omitempty"`
	Gzip                 *Gzip       `json:"gzip,omitempty"`
	Downstream           *Downstream `json:"downstream,omitempty"`
	Upstream             *Upstream   `json:"upstream,omitempty"`
	DisableXEnvoyHeaders bool        `json:"disableXEnvoyHeaders,omitempty"`
	AddXRealIPHeader     bool        `json:"addXRealIpHeader,omitempty"`
	// McpServer is Higress's MCP server for AI agents: not an Envoy
	// global. It is decoded only to be checked as Higress checks it and
	// reported (it may hold a password, never shown).
	McpServer *McpServer `json:"mcpServer,omitempty"`
}

// McpServer is the part of Higress's mcpServer section its checks read;
// Higress decodes the rest into types too, so a value of the wrong type
// anywhere in it makes Higress refuse the document.
type McpServer struct {
	Enable                bool          `json:"enable,omitempty"`
	Redis                 *McpRedis     `json:"redis,omitempty"`
	SSEPathSuffix         string        `json:"sse_path_suffix,omitempty"`
	Servers               []McpSSE      `json:"servers,omitempty"`
	MatchList             []McpMatch    `json:"match_list,omitempty"`
	EnableUserLevelServer bool          `json:"enable_user_level_server,omitempty"`
	RateLimit             *McpRateLimit `json:"rate_limit,omitempty"`
}

// McpRedis is mcpServer.redis.
type McpRedis struct {
	Address  string `json:"address,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	DB       int    `json:"db,omitempty"`
}

// McpSSE is one of mcpServer.servers.
type McpSSE struct {
	Name       string         `json:"name,omitempty"`
	Path       string         `json:"path,omitempty"`
	Type       string         `json:"type,omitempty"`
	Config     map[string]any `json:"config,omitempty"`
	DomainList []string       `json:"domain_list,omitempty"`
}

// McpMatch is one of mcpServer.match_list.
type McpMatch struct {
	MatchRuleDomain   string `json:"match_rule_domain,omitempty"`
	MatchRulePath     string `json:"match_rule_path,omitempty"`
	MatchRuleType     string `json:"match_rule_type,omitempty"`
	UpstreamType      string `json:"upstream_type"`
	EnablePathRewrite bool   `json:"enable_path_rewrite"`
	PathRewritePrefix string `json:"path_rewrite_prefix"`
}

// McpRateLimit is mcpServer.rate_limit.
type McpRateLimit struct {
	Limit     int64    `json:"limit,omitempty"`
	Window    int64    `json:"window,omitempty"`
	WhiteList []string `json:"white_list,omitempty"`
}

// Tracing is the tracing section. Ports are strings in Higress.
type Tracing struct {
	Enable        bool        `json:"enable,omitempty"`
	Sampling      float64     `json:"sampling,omitempty"`
	Timeout       int32       `json:"timeout,omitempty"`
	Zipkin        *Backend    `json:"zipkin,omitempty"`
	Skywalking    *Skywalking `json:"skywalking,omitempty"`
	OpenTelemetry *Backend    `json:"opentelemetry,omitempty"`
}

// Backend is a collector service and port.
type Backend struct {
	Service string `json:"service,omitempty"`
	Port    string `json:"port,omitempty"`
}

// Skywalking is the skywalking backend.
type Skywalking struct {
	// Service and Port are Backend's, written out: sigs.k8s.io/yaml, as
	// Higress uses it, quotes a number for a string field only when it
	// finds the field, and it does not look into embedded structs.
	Service     string `json:"service,omitempty"`
	Port        string `json:"port,omitempty"`
	AccessToken string `json:"access_token,omitempty"`
}

// Backend is the tracing backend of a Skywalking section.
func (s *Skywalking) Backend() Backend { return Backend{Service: s.Service, Port: s.Port} }

// Gzip is the gzip section.
type Gzip struct {
	Enable              bool     `json:"enable,omitempty"`
	MinContentLength    int32    `json:"minContentLength,omitempty"`
	ContentType         []string `json:"contentType,omitempty"`
	DisableOnEtagHeader bool     `json:"disableOnEtagHeader,omitempty"`
	MemoryLevel         int32    `json:"memoryLevel,omitempty"`
	WindowBits          int32    `json:"windowBits,omitempty"`
	ChunkSize           int32    `json:"chunkSize,omitempty"`
	CompressionLevel    string   `json:"compressionLevel,omitempty"`
	CompressionStrategy string   `json:"compressionStrategy,omitempty"`
}

// Downstream is the downstream section; durations are whole seconds.
type Downstream struct {
	IdleTimeout            uint32 `json:"idleTimeout"`
	MaxRequestHeadersKb    uint32 `json:"maxRequestHeadersKb,omitempty"`
	ConnectionBufferLimits uint32 `json:"connectionBufferLimits,omitempty"`
	HTTP2                  *HTTP2 `json:"http2,omitempty"`
	RouteTimeout           uint32 `json:"routeTimeout"`
}

// HTTP2 is downstream.http2.
type HTTP2 struct {
	MaxConcurrentStreams        uint32 `json:"maxConcurrentStreams,omitempty"`
	InitialStreamWindowSize     uint32 `json:"initialStreamWindowSize,omitempty"`
	InitialConnectionWindowSize uint32 `json:"initialConnectionWindowSize,omitempty"`
}

// Upstream is the upstream section.
type Upstream struct {
	IdleTimeout            uint32 `json:"idleTimeout"`
	ConnectionBufferLimits uint32 `json:"connectionBufferLimits,omitempty"`
}

// defaults is the document Higress starts from before reading the user's.
func defaults() *Config {
	return &Config{
		Tracing: &Tracing{Timeout: DefaultTracingTimeout, Sampling: DefaultTracingSampling},
		Gzip: &Gzip{
			Enable: true, MinContentLength: DefaultGzipMinContentLength, ContentType: append([]string(nil), DefaultGzipContentType...),
			DisableOnEtagHeader: true, MemoryLevel: DefaultGzipMemoryLevel, WindowBits: DefaultGzipWindowBits,
			ChunkSize: DefaultGzipChunkSize, CompressionLevel: DefaultGzipCompressionLevel, CompressionStrategy: DefaultGzipCompressionStrategy,
		},
		Downstream: &Downstream{
			IdleTimeout: DefaultIdleTimeout, MaxRequestHeadersKb: DefaultMaxRequestHeadersKb, ConnectionBufferLimits: DefaultConnectionBufferLimits,
			HTTP2: &HTTP2{
				MaxConcurrentStreams: DefaultMaxConcurrentStreams, InitialStreamWindowSize: DefaultInitialStreamWindowSize,
				InitialConnectionWindowSize: DefaultInitialConnectionWindowSize,
			},
			RouteTimeout: DefaultRouteTimeout,
		},
		Upstream: &Upstream{IdleTimeout: DefaultUpstreamIdleTimeout, ConnectionBufferLimits: DefaultUpstreamBufferLimits},
	}
}
