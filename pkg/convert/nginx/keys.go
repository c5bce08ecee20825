package nginx

import (
	"maps"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/pkg/convert/gap"
)

// fixed is the verdict of a key whose conversion does not depend on its
// value: an nginx-internal setting, or one with no equivalent.
type fixed struct {
	verdict Verdict
	detail  string
	// off, when set, is the verdict's detail for a value that turns the
	// feature off (false, 0, off): then Envoy's default already agrees.
	off string
	// gap, when set, is the Envoy capability the key would need: the
	// detail says what the key did, and the verdict adds what the
	// registry has for the capability (gap.Gap.Verdict).
	gap *gap.Gap
}

// text is the key's verdict detail.
func (f fixed) text() string {
	if f.gap != nil {
		return f.gap.Verdict(f.detail)
	}
	return f.detail
}

// The Envoy capabilities some keys would need. A verdict that names one
// globalconfig may lack names it here, by its proto message or field, and
// words it with gap.Gap.Verdict: once an item declares the capability
// (items.Registration.Provides), the verdict names that item by itself.
var (
	// limit-rate needs the filter's rate; limit-rate-after, which Envoy
	// has no field for, the filter as a whole: an item's setting of the
	// rate is named in limit-rate's verdict, not in limit-rate-after's.
	bandwidthLimit       = &gap.Gap{Envoy: "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit", Name: "Envoy's bandwidth_limit filter"}
	bandwidthRate        = &gap.Gap{Envoy: "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit.limit_kbps", Name: "the rate of Envoy's bandwidth_limit filter"}
	geoip                = &gap.Gap{Envoy: "envoy.extensions.filters.http.geoip.v3.Geoip", Name: "Envoy's geoip filter"}
	responseHeadersLimit = &gap.Gap{
		Envoy: "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options.max_response_headers_kb",
		Name:  "the clusters' limit on a response's headers",
	}
	upstreamLifetime = &gap.Gap{
		Envoy: "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options.max_connection_duration",
		Name:  "a lifetime for the clusters' connections",
	}
	listenerFiltersTimeout = &gap.Gap{Envoy: "envoy.config.listener.v3.Listener.listener_filters_timeout", Name: "the listener filters' timeout"}
	spanOperation          = &gap.Gap{
		Envoy: "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.Tracing.operation",
		Name:  "the connection manager's span operation name",
	}
	accessLogByRequest = &gap.Gap{Envoy: "envoy.config.accesslog.v3.AccessLogFilter.header_filter", Name: "an access log filter on request headers such as :path"}
)

const (
	internalBuffers = "nginx's buffering of proxied data in memory and temporary files; Envoy streams through fixed-size buffers and has no temporary files"
	hashTables      = "sizes nginx's internal hash tables; Envoy has none to size"
	streamLogs      = "the access log of TCP and UDP services; accessLog covers HTTP"
	perRoute        = "per route in Istio: "
	removedTracing  = "OpenTracing (Zipkin, Jaeger, Datadog) was removed in ingress-nginx 1.10, which ignores this key; to trace with Envoy, set tracing.zipkin or tracing.datadog, or enable-opentelemetry"
	removedGlobalRL = "global rate limiting in memcached was removed from ingress-nginx in 2024, which ignores this key, and its limits were global-rate-limit annotations of Ingresses, not part of this ConfigMap; globalRateLimit replaces it: limits shared by every gateway, counted by envoyproxy/ratelimit in Redis (deploy/examples/ratelimit), keyed by client, subnet or header as global-rate-limit-key was"
)

// fixedKeys are the keys whose verdict is fixed. The keys converted by
// value are in the converter's code; together they are every key
// ingress-nginx's ConfigMap documents (docs/user-guide/nginx-configuration/
// configmap.md), and the removed ones users still carry.
var fixedKeys = map[string]fixed{
	// nginx-internal.
	"worker-processes":                      {NotNeeded, "Envoy runs one worker thread per CPU the gateway pod has (Istio sets --concurrency from the CPU limit)", "", nil},
	"worker-cpu-affinity":                   {NotNeeded, "Envoy's workers are not pinned; set the gateway pod's CPU resources", "", nil},
	"worker-shutdown-timeout":               {NotNeeded, "nginx's wait for old workers after a reload; Envoy applies configuration without reloading (drain on shutdown is Istio's terminationDrainDuration)", "", nil},
	"enable-serial-reloads":                 {NotNeeded, "Envoy applies configuration without reloading", "", nil},
	"max-worker-connections":                {NotNeeded, "nginx's per-worker connection table; Envoy has none (a cap on client connections is hardening.maxConnections)", "", nil},
	"max-worker-open-files":                 {NotNeeded, "nginx's file descriptor limit per worker; Envoy's is the pod's limit", "", nil},
	"enable-multi-accept":                   {NotNeeded, "nginx's accept loop; Envoy's listeners balance connections themselves", "", nil},
	"reuse-port":                            {NotNeeded, "Envoy's listeners use SO_REUSEPORT by default", "", nil},
	"map-hash-bucket-size":                  {NotNeeded, hashTables, "", nil},
	"server-name-hash-bucket-size":          {NotNeeded, hashTables, "", nil},
	"server-name-hash-max-size":             {NotNeeded, hashTables, "", nil},
	"proxy-headers-hash-bucket-size":        {NotNeeded, hashTables, "", nil},
	"proxy-headers-hash-max-size":           {NotNeeded, hashTables, "", nil},
	"variables-hash-bucket-size":            {NotNeeded, hashTables, "", nil},
	"variables-hash-max-size":               {NotNeeded, hashTables, "", nil},
	"lua-shared-dicts":                      {NotNeeded, "sizes the Lua memory zones of ingress-nginx's own Lua code", "", nil},
	"proxy-buffering":                       {NotNeeded, internalBuffers, "", nil},
	"proxy-buffer-size":                     {NotSupported, "nginx reads a service's response headers into this one buffer and answers 502 (upstream sent too big header) to a response whose headers don't fit; Envoy takes response headers up to 60 KiB, so responses nginx refused now pass", "", responseHeadersLimit},
	"proxy-buffers-number":                  {NotNeeded, internalBuffers, "", nil},
	"proxy-busy-buffers-size":               {NotNeeded, internalBuffers, "", nil},
	"proxy-max-temp-file-size":              {NotNeeded, internalBuffers, "", nil},
	"client-body-buffer-size":               {NotNeeded, "the part of a request body nginx keeps in memory before it spills to a temporary file; Envoy has no temporary files (the body limit is proxy-body-size, requestBody.maxSize)", "", nil},
	"client-header-buffer-size":             {NotNeeded, "the first buffer nginx reads request headers into; headers that don't fit move to large-client-header-buffers, the actual limit (Envoy has one limit, downstream.maxRequestHeadersKb)", "", nil},
	"grpc-buffer-size-kb":                   {NotNeeded, internalBuffers, "", nil},
	"enable-aio-write":                      {NotNeeded, "nginx's asynchronous temporary-file writes; Envoy writes no temporary files", "", nil},
	"ssl-buffer-size":                       {NotNeeded, "nginx's TLS record buffer; Envoy sizes TLS records itself", "", nil},
	"ssl-session-cache":                     {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", "", nil},
	"ssl-session-cache-size":                {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", "", nil},
	"ssl-session-timeout":                   {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", "", nil},
	"ssl-session-tickets":                   {NotNeeded, "Envoy resumes TLS sessions with tickets under keys it rotates itself", "", nil},
	"ssl-session-ticket-key":                {NotNeeded, "Envoy resumes TLS sessions with tickets under keys it rotates itself; the key is not shown", "", nil},
	"ssl-dh-param":                          {NotNeeded, "Diffie-Hellman parameters for DHE suites; Envoy's TLS library, BoringSSL, has no DHE suites", "", nil},
	"error-log-level":                       {NotNeeded, "Envoy's log level is set per proxy: istioctl proxy-config log <pod> --level warning", "", nil},
	"error-log-path":                        {NotNeeded, "istio-proxy logs to its container's stderr", "", nil},
	"access-log-params":                     {NotNeeded, "nginx's access-log buffering (buffer=, flush=); Envoy buffers and flushes its access log file itself", "", nil},
	"http2-max-field-size":                  {NotNeeded, "deprecated in ingress-nginx for large-client-header-buffers, which is converted", "", nil},
	"http2-max-header-size":                 {NotNeeded, "deprecated in ingress-nginx for large-client-header-buffers, which is converted", "", nil},
	"http2-max-requests":                    {NotNeeded, "deprecated in ingress-nginx for keep-alive-requests", "0 is no limit in nginx, as in Envoy", nil},
	"use-http2":                             {NotNeeded, "Istio's gateways offer HTTP/2 to TLS clients through ALPN", "", nil},
	"proxy-http-version":                    {NotNeeded, "Istio chooses the protocol towards each service (the Service's appProtocol, or DestinationRule h2UpgradePolicy)", "", nil},
	"nginx-status-ipv4-whitelist":           {NotNeeded, "guards nginx's status page; Envoy's admin interface listens on localhost only", "", nil},
	"nginx-status-ipv6-whitelist":           {NotNeeded, "guards nginx's status page; Envoy's admin interface listens on localhost only", "", nil},
	"debug-connections":                     {NotNeeded, "nginx's per-client debug log; use istioctl proxy-config log <pod> --level debug", "", nil},
	"disable-ipv6-dns":                      {NotNeeded, "Istio resolves services itself, not the gateway", "", nil},
	"strict-validate-path-type":             {NotNeeded, "validates Ingress paths; Istio validates its own resources", "", nil},
	"annotations-risk-level":                {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", "", nil},
	"annotation-value-word-blocklist":       {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", "", nil},
	"allow-cross-namespace-resources":       {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", "", nil},
	"enable-access-log-for-default-backend": {NotNeeded, "Istio has no default backend: a request no route matches is answered 404 by Envoy and logged like any other", "", nil},
	"proxy-stream-timeout":                  {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes (idle timeout: DestinationRule connectionPool.tcp.idleTimeout)", "", nil},
	"proxy-stream-next-upstream":            {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", "", nil},
	"proxy-stream-next-upstream-timeout":    {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", "", nil},
	"proxy-stream-next-upstream-tries":      {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", "", nil},
	"proxy-stream-responses":                {NotNeeded, "UDP services of ingress-nginx", "", nil},
	"otel-max-queuesize":                    {NotNeeded, "nginx's span export queue; Envoy's OpenTelemetry tracer batches spans itself", "", nil},
	"otel-schedule-delay-millis":            {NotNeeded, "nginx's span export delay; Envoy's OpenTelemetry tracer batches spans itself", "", nil},
	"otel-max-export-batch-size":            {NotNeeded, "nginx's span export batch; Envoy's OpenTelemetry tracer batches spans itself", "", nil},
	"opentelemetry-config":                  {NotNeeded, "the path of the nginx module's own configuration file, which ingress-nginx writes from the other keys", "", nil},

	// No equivalent in the document.
	"limit-rate":                          {NotSupported, "nginx limits the rate of each response sent to a client, per connection", "no bandwidth limit, as in Envoy", bandwidthRate},
	"limit-rate-after":                    {NotSupported, "nginx sends this much of each response before limit-rate applies", "no bandwidth limit, as in Envoy", bandwidthLimit},
	"limit-conn-zone-variable":            {NotSupported, "keys the limit-connections annotation; Envoy has no per-client connection limit (hardening.maxConnections is a listener total)", "", nil},
	"enable-modsecurity":                  {NotSupported, "a WAF module inside nginx; with Envoy, run a WAF that speaks ext_proc and set extProc (service, requestBody), or Coraza with the OWASP Core Rule Set as a WasmPlugin", "no WAF, as without extProc or a WasmPlugin", nil},
	"enable-owasp-modsecurity-crs":        {NotSupported, "a WAF module inside nginx; with Envoy, run a WAF that speaks ext_proc and set extProc (service, requestBody), or Coraza with the OWASP Core Rule Set as a WasmPlugin", "no WAF, as without extProc or a WasmPlugin", nil},
	"use-geoip":                           {NotSupported, "GeoIP lookups (istio-proxy's Envoy is built without them)", "no GeoIP lookups, as in Envoy", geoip},
	"use-geoip2":                          {NotSupported, "GeoIP lookups (istio-proxy's Envoy is built without them)", "no GeoIP lookups, as in Envoy", geoip},
	"geoip2-autoreload-in-minutes":        {NotSupported, "reloads nginx's GeoIP databases (istio-proxy's Envoy is built without GeoIP lookups)", "", geoip},
	"global-allowed-response-headers":     {NotSupported, "governs the custom-headers annotation of Ingresses; globalconfig reads no annotations", "", nil},
	"enable-ocsp":                         {NotSupported, "OCSP stapling; Envoy staples only a response file given with the certificate, which Istio's credentialName secrets don't carry", "no OCSP stapling, as in Envoy by default", nil},
	"ssl-early-data":                      {NotSupported, "TLS 1.3 0-RTT; Envoy takes no early data on TLS over TCP (only a QUIC listener, for HTTP/3, can)", "no TLS 1.3 early data, as in Envoy", nil},
	"ssl-reject-handshake":                {NotSupported, "Envoy's gateway listeners answer every TLS handshake whose SNI a Gateway server names; unknown names fall to the default filter chain", "Envoy completes handshakes, as nginx did", nil},
	"ssl-redirect":                        {NotSupported, perRoute + "the Gateway server's tls.httpsRedirect: true", "Istio redirects no plain-HTTP request unless a Gateway server sets tls.httpsRedirect", nil},
	"force-ssl-redirect":                  {NotSupported, perRoute + "the Gateway server's tls.httpsRedirect: true", "Istio redirects no plain-HTTP request unless a Gateway server sets tls.httpsRedirect", nil},
	"http-redirect-code":                  {NotSupported, "Istio's httpsRedirect answers 301; a VirtualService redirect can set redirectCode", "", nil},
	"no-tls-redirect-locations":           {NotSupported, perRoute + "a VirtualService route for the path on the plain-HTTP server", "", nil},
	"use-port-in-redirects":               {NotSupported, perRoute + "VirtualService redirect port", "Istio's redirects carry no port unless a VirtualService sets one", nil},
	"relative-redirects":                  {NotSupported, "Envoy rewrites no Location headers of services' redirects", "Envoy leaves services' Location headers alone", nil},
	"proxy-redirect-from":                 {NotSupported, "Envoy rewrites no Location headers of services' redirects", "", nil},
	"proxy-redirect-to":                   {NotSupported, "Envoy rewrites no Location headers of services' redirects", "", nil},
	"proxy-cookie-domain":                 {NotSupported, "Envoy rewrites no Set-Cookie headers", "", nil},
	"proxy-cookie-path":                   {NotSupported, "Envoy rewrites no Set-Cookie headers", "", nil},
	"proxy-next-upstream":                 {NotSupported, perRoute + "VirtualService http[].retries (retryOn); Istio retries twice by default on connect-failure, refused-stream, unavailable, cancelled and retriable-status-codes", "", nil},
	"proxy-next-upstream-timeout":         {NotSupported, perRoute + "VirtualService http[].retries.perTryTimeout", "", nil},
	"proxy-next-upstream-tries":           {NotSupported, perRoute + "VirtualService http[].retries.attempts", "", nil},
	"retry-non-idempotent":                {NotSupported, perRoute + "VirtualService http[].retries; Envoy retries any method its retryOn conditions match", "Istio's default retries apply to any method; per route, VirtualService http[].retries", nil},
	"load-balance":                        {NotSupported, "DestinationRule trafficPolicy.loadBalancer per service (Istio's default is LEAST_REQUEST)", "", nil},
	"upstream-hash-by":                    {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", "", nil},
	"upstream-hash-by-subset":             {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", "off", nil},
	"upstream-hash-by-subset-size":        {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", "", nil},
	"upstream-keepalive-time":             {NotSupported, "a lifetime for connections to services (per service in Istio: DestinationRule connectionPool.http.maxConnectionDuration, in recent releases)", "", upstreamLifetime},
	"service-upstream":                    {NotNeeded, "Istio balances over the Service's endpoints itself", "", nil},
	"bind-address":                        {NotSupported, "the addresses the gateway listens on are its Service's and Gateway's", "", nil},
	"disable-ipv6":                        {NotSupported, "the gateway's IP families are its Service's (ipFamilies)", "the gateway's IP families are its Service's", nil},
	"proxy-add-original-uri-header":       {NotSupported, "Envoy adds x-envoy-original-path only when a route rewrites the path, and no x-original-uri; the conversion adds none", "no x-original-uri, as in Envoy", nil},
	"preserve-trailing-slash":             {NotSupported, "redirects of ingress-nginx's ssl-redirect; Istio's httpsRedirect keeps the path as it is", "Istio's httpsRedirect keeps the path as it is", nil},
	"proxy-ssl-location-only":             {NotSupported, "TLS towards services: DestinationRule trafficPolicy.tls per service", "off", nil},
	"default-type":                        {NotSupported, "Envoy adds no content-type to responses that lack one", "", nil},
	"skip-access-log-urls":                {NotSupported, "nginx logs no line for requests to these paths (Telemetry API access logging can filter by expression)", "", accessLogByRequest},
	"enable-syslog":                       {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", "no syslog, as in Envoy", nil},
	"syslog-host":                         {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", "", nil},
	"syslog-port":                         {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", "", nil},
	"log-format-stream":                   {NotSupported, streamLogs, "", nil},
	"stream-access-log-path":              {NotSupported, streamLogs, "", nil},
	"disable-stream-access-log":           {NotSupported, streamLogs, "", nil},
	"enable-auth-access-log":              {NotSupported, "nginx logged each auth subrequest; Envoy logs no line for the check itself: the request's own line carries the response flag UAEX when the auth service refused it (extAuth)", "nothing to log", nil},
	"log-format-escape-none":              {NotNeeded, "Envoy escapes nothing in text formats, and escapes JSON formats correctly", "", nil},
	"forwarded-host-header":               {NotSupported, "Envoy sets no x-forwarded-host, and reads none to route", "", nil},
	"forwarded-for-proxy-protocol-header": {NotNeeded, "the header ingress-nginx uses internally to combine PROXY protocol and X-Forwarded-For", "", nil},
	"proxy-protocol-header-timeout":       {NotSupported, "the wait for the PROXY header (Envoy waits 15 seconds)", "", listenerFiltersTimeout},
	"opentelemetry-operation-name":        {NotSupported, "names nginx's spans; Envoy names each span after the route's host and path (or the VirtualService route's name)", "", spanOperation},
	"gzip-disable":                        {NotSupported, "Envoy's compressor can't skip clients by User-Agent", "", nil},

	// Removed from ingress-nginx.
	"enable-opentracing":                           {NotSupported, removedTracing, "no tracing through OpenTracing", nil},
	"opentracing-operation-name":                   {NotSupported, removedTracing, "", nil},
	"opentracing-location-operation-name":          {NotSupported, removedTracing, "", nil},
	"opentracing-trust-incoming-span":              {NotSupported, removedTracing, "", nil},
	"zipkin-collector-host":                        {NotSupported, removedTracing, "", nil},
	"zipkin-collector-port":                        {NotSupported, removedTracing, "", nil},
	"zipkin-service-name":                          {NotSupported, removedTracing, "", nil},
	"zipkin-sample-rate":                           {NotSupported, removedTracing, "", nil},
	"jaeger-collector-host":                        {NotSupported, removedTracing, "", nil},
	"jaeger-collector-port":                        {NotSupported, removedTracing, "", nil},
	"jaeger-endpoint":                              {NotSupported, removedTracing, "", nil},
	"jaeger-service-name":                          {NotSupported, removedTracing, "", nil},
	"jaeger-propagation-format":                    {NotSupported, removedTracing, "", nil},
	"jaeger-sampler-type":                          {NotSupported, removedTracing, "", nil},
	"jaeger-sampler-param":                         {NotSupported, removedTracing, "", nil},
	"jaeger-sampler-host":                          {NotSupported, removedTracing, "", nil},
	"jaeger-sampler-port":                          {NotSupported, removedTracing, "", nil},
	"jaeger-trace-context-header-name":             {NotSupported, removedTracing, "", nil},
	"jaeger-debug-header":                          {NotSupported, removedTracing, "", nil},
	"jaeger-baggage-header":                        {NotSupported, removedTracing, "", nil},
	"jaeger-trace-baggage-header-prefix":           {NotSupported, removedTracing, "", nil},
	"datadog-collector-host":                       {NotSupported, removedTracing, "", nil},
	"datadog-collector-port":                       {NotSupported, removedTracing, "", nil},
	"datadog-service-name":                         {NotSupported, removedTracing, "", nil},
	"datadog-environment":                          {NotSupported, removedTracing, "", nil},
	"datadog-operation-name-override":              {NotSupported, removedTracing, "", nil},
	"datadog-priority-sampling":                    {NotSupported, removedTracing, "", nil},
	"datadog-sample-rate":                          {NotSupported, removedTracing, "", nil},
	"global-rate-limit-memcached-host":             {NotSupported, removedGlobalRL, "", nil},
	"global-rate-limit-memcached-port":             {NotSupported, removedGlobalRL, "", nil},
	"global-rate-limit-memcached-connect-timeout":  {NotSupported, removedGlobalRL, "", nil},
	"global-rate-limit-memcached-max-idle-timeout": {NotSupported, removedGlobalRL, "", nil},
	"global-rate-limit-memcached-pool-size":        {NotSupported, removedGlobalRL, "", nil},
	"global-rate-limit-status-code":                {NotSupported, removedGlobalRL + "; when you recreate the limits, globalRateLimit.statusCode sets their status (429 by default, where ingress-nginx answered 429 too)", "", nil},
}

// Gaps lists the verdicts that name an Envoy capability the key would
// need, as this binary's registry words them, for pkg/convert's tests.
func Gaps() []gap.Use {
	var out []gap.Use
	for _, k := range slices.Sorted(maps.Keys(fixedKeys)) {
		if f := fixedKeys[k]; f.gap != nil {
			out = append(out, gap.Use{Converter: "pkg/convert/nginx keys.go", Key: k, Theirs: f.detail, Gap: *f.gap})
		}
	}
	return out
}

// snippet explains why raw nginx configuration is refused.
const snippet = "raw nginx configuration, which Envoy can't run and globalconfig never takes (snippets are off by default since CVE-2021-25742 let them read the controller's secrets); rebuild what it does with the document's keys, or, for a one-off, a reviewed EnvoyFilter of your own"

// isSnippet reports whether key holds raw nginx configuration.
func isSnippet(key string) bool { return strings.HasSuffix(key, "-snippet") }
