package nginx

import "strings"

// fixed is the verdict of a key whose conversion does not depend on its
// value: an nginx-internal setting, or one with no equivalent.
type fixed struct {
	verdict Verdict
	detail  string
	// off, when set, is the verdict's detail for a value that turns the
	// feature off (false, 0, off): then Envoy's default already agrees.
	off string
}

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
	"worker-processes":                      {NotNeeded, "Envoy runs one worker thread per CPU the gateway pod has (Istio sets --concurrency from the CPU limit)", ""},
	"worker-cpu-affinity":                   {NotNeeded, "Envoy's workers are not pinned; set the gateway pod's CPU resources", ""},
	"worker-shutdown-timeout":               {NotNeeded, "nginx's wait for old workers after a reload; Envoy applies configuration without reloading (drain on shutdown is Istio's terminationDrainDuration)", ""},
	"enable-serial-reloads":                 {NotNeeded, "Envoy applies configuration without reloading", ""},
	"max-worker-connections":                {NotNeeded, "nginx's per-worker connection table; Envoy has none (a cap on client connections is hardening.maxConnections)", ""},
	"max-worker-open-files":                 {NotNeeded, "nginx's file descriptor limit per worker; Envoy's is the pod's limit", ""},
	"enable-multi-accept":                   {NotNeeded, "nginx's accept loop; Envoy's listeners balance connections themselves", ""},
	"reuse-port":                            {NotNeeded, "Envoy's listeners use SO_REUSEPORT by default", ""},
	"map-hash-bucket-size":                  {NotNeeded, hashTables, ""},
	"server-name-hash-bucket-size":          {NotNeeded, hashTables, ""},
	"server-name-hash-max-size":             {NotNeeded, hashTables, ""},
	"proxy-headers-hash-bucket-size":        {NotNeeded, hashTables, ""},
	"proxy-headers-hash-max-size":           {NotNeeded, hashTables, ""},
	"variables-hash-bucket-size":            {NotNeeded, hashTables, ""},
	"variables-hash-max-size":               {NotNeeded, hashTables, ""},
	"lua-shared-dicts":                      {NotNeeded, "sizes the Lua memory zones of ingress-nginx's own Lua code", ""},
	"proxy-buffering":                       {NotNeeded, internalBuffers, ""},
	"proxy-buffer-size":                     {NotSupported, "nginx reads a service's response headers into this one buffer and answers 502 (upstream sent too big header) to a response whose headers don't fit; Envoy's limit on a response's headers is the cluster's max_response_headers_kb, 60 KiB by default, which globalconfig does not set: responses nginx refused now pass", ""},
	"proxy-buffers-number":                  {NotNeeded, internalBuffers, ""},
	"proxy-busy-buffers-size":               {NotNeeded, internalBuffers, ""},
	"proxy-max-temp-file-size":              {NotNeeded, internalBuffers, ""},
	"client-body-buffer-size":               {NotNeeded, "the part of a request body nginx keeps in memory before it spills to a temporary file; Envoy has no temporary files (the body limit is proxy-body-size, requestBody.maxSize)", ""},
	"client-header-buffer-size":             {NotNeeded, "the first buffer nginx reads request headers into; headers that don't fit move to large-client-header-buffers, the actual limit (Envoy has one limit, downstream.maxRequestHeadersKb)", ""},
	"grpc-buffer-size-kb":                   {NotNeeded, internalBuffers, ""},
	"enable-aio-write":                      {NotNeeded, "nginx's asynchronous temporary-file writes; Envoy writes no temporary files", ""},
	"ssl-buffer-size":                       {NotNeeded, "nginx's TLS record buffer; Envoy sizes TLS records itself", ""},
	"ssl-session-cache":                     {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", ""},
	"ssl-session-cache-size":                {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", ""},
	"ssl-session-timeout":                   {NotNeeded, "Envoy resumes TLS sessions with session tickets, on by default", ""},
	"ssl-session-tickets":                   {NotNeeded, "Envoy resumes TLS sessions with tickets under keys it rotates itself", ""},
	"ssl-session-ticket-key":                {NotNeeded, "Envoy resumes TLS sessions with tickets under keys it rotates itself; the key is not shown", ""},
	"ssl-dh-param":                          {NotNeeded, "Diffie-Hellman parameters for DHE suites; Envoy's TLS library, BoringSSL, has no DHE suites", ""},
	"error-log-level":                       {NotNeeded, "Envoy's log level is set per proxy: istioctl proxy-config log <pod> --level warning", ""},
	"error-log-path":                        {NotNeeded, "istio-proxy logs to its container's stderr", ""},
	"access-log-params":                     {NotNeeded, "nginx's access-log buffering (buffer=, flush=); Envoy buffers and flushes its access log file itself", ""},
	"http2-max-field-size":                  {NotNeeded, "deprecated in ingress-nginx for large-client-header-buffers, which is converted", ""},
	"http2-max-header-size":                 {NotNeeded, "deprecated in ingress-nginx for large-client-header-buffers, which is converted", ""},
	"http2-max-requests":                    {NotNeeded, "deprecated in ingress-nginx for keep-alive-requests", "0 is no limit in nginx, as in Envoy"},
	"use-http2":                             {NotNeeded, "Istio's gateways offer HTTP/2 to TLS clients through ALPN", ""},
	"proxy-http-version":                    {NotNeeded, "Istio chooses the protocol towards each service (the Service's appProtocol, or DestinationRule h2UpgradePolicy)", ""},
	"nginx-status-ipv4-whitelist":           {NotNeeded, "guards nginx's status page; Envoy's admin interface listens on localhost only", ""},
	"nginx-status-ipv6-whitelist":           {NotNeeded, "guards nginx's status page; Envoy's admin interface listens on localhost only", ""},
	"debug-connections":                     {NotNeeded, "nginx's per-client debug log; use istioctl proxy-config log <pod> --level debug", ""},
	"disable-ipv6-dns":                      {NotNeeded, "Istio resolves services itself, not the gateway", ""},
	"strict-validate-path-type":             {NotNeeded, "validates Ingress paths; Istio validates its own resources", ""},
	"annotations-risk-level":                {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", ""},
	"annotation-value-word-blocklist":       {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", ""},
	"allow-cross-namespace-resources":       {NotNeeded, "governs ingress-nginx's Ingress annotations; globalconfig reads none", ""},
	"enable-access-log-for-default-backend": {NotNeeded, "Istio has no default backend: a request no route matches is answered 404 by Envoy and logged like any other", ""},
	"proxy-stream-timeout":                  {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes (idle timeout: DestinationRule connectionPool.tcp.idleTimeout)", ""},
	"proxy-stream-next-upstream":            {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", ""},
	"proxy-stream-next-upstream-timeout":    {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", ""},
	"proxy-stream-next-upstream-tries":      {NotNeeded, "TCP and UDP services of ingress-nginx; in Istio, a Gateway's TCP server and VirtualService tcp routes", ""},
	"proxy-stream-responses":                {NotNeeded, "UDP services of ingress-nginx", ""},
	"otel-max-queuesize":                    {NotNeeded, "nginx's span export queue; Envoy's OpenTelemetry tracer batches spans itself", ""},
	"otel-schedule-delay-millis":            {NotNeeded, "nginx's span export delay; Envoy's OpenTelemetry tracer batches spans itself", ""},
	"otel-max-export-batch-size":            {NotNeeded, "nginx's span export batch; Envoy's OpenTelemetry tracer batches spans itself", ""},
	"opentelemetry-config":                  {NotNeeded, "the path of the nginx module's own configuration file, which ingress-nginx writes from the other keys", ""},

	// No equivalent in the document.
	"limit-rate":                          {NotSupported, "bandwidth limiting per connection; Envoy's bandwidth_limit filter is not an item of globalconfig", "no bandwidth limit, as in Envoy"},
	"limit-rate-after":                    {NotSupported, "bandwidth limiting per connection; Envoy's bandwidth_limit filter is not an item of globalconfig", "no bandwidth limit, as in Envoy"},
	"limit-conn-zone-variable":            {NotSupported, "keys the limit-connections annotation; Envoy has no per-client connection limit (hardening.maxConnections is a listener total)", ""},
	"enable-modsecurity":                  {NotSupported, "a WAF module inside nginx; with Envoy, run a WAF that speaks ext_proc and set extProc (service, requestBody), or Coraza with the OWASP Core Rule Set as a WasmPlugin", "no WAF, as without extProc or a WasmPlugin"},
	"enable-owasp-modsecurity-crs":        {NotSupported, "a WAF module inside nginx; with Envoy, run a WAF that speaks ext_proc and set extProc (service, requestBody), or Coraza with the OWASP Core Rule Set as a WasmPlugin", "no WAF, as without extProc or a WasmPlugin"},
	"use-geoip":                           {NotSupported, "GeoIP lookups; Envoy's geoip filter is not built into istio-proxy", "no GeoIP lookups, as in Envoy"},
	"use-geoip2":                          {NotSupported, "GeoIP lookups; Envoy's geoip filter is not built into istio-proxy", "no GeoIP lookups, as in Envoy"},
	"geoip2-autoreload-in-minutes":        {NotSupported, "GeoIP lookups; Envoy's geoip filter is not built into istio-proxy", ""},
	"global-allowed-response-headers":     {NotSupported, "governs the custom-headers annotation of Ingresses; globalconfig reads no annotations", ""},
	"enable-ocsp":                         {NotSupported, "OCSP stapling; Envoy staples only a response file given with the certificate, which Istio's credentialName secrets don't carry", "no OCSP stapling, as in Envoy by default"},
	"ssl-early-data":                      {NotSupported, "TLS 1.3 0-RTT; not an item of globalconfig (Envoy's enable_early_data is off by default)", "no TLS 1.3 early data, as in Envoy by default"},
	"ssl-reject-handshake":                {NotSupported, "Envoy's gateway listeners answer every TLS handshake whose SNI a Gateway server names; unknown names fall to the default filter chain", "Envoy completes handshakes, as nginx did"},
	"ssl-redirect":                        {NotSupported, perRoute + "the Gateway server's tls.httpsRedirect: true", "Istio redirects no plain-HTTP request unless a Gateway server sets tls.httpsRedirect"},
	"force-ssl-redirect":                  {NotSupported, perRoute + "the Gateway server's tls.httpsRedirect: true", "Istio redirects no plain-HTTP request unless a Gateway server sets tls.httpsRedirect"},
	"http-redirect-code":                  {NotSupported, "Istio's httpsRedirect answers 301; a VirtualService redirect can set redirectCode", ""},
	"no-tls-redirect-locations":           {NotSupported, perRoute + "a VirtualService route for the path on the plain-HTTP server", ""},
	"use-port-in-redirects":               {NotSupported, perRoute + "VirtualService redirect port", "Istio's redirects carry no port unless a VirtualService sets one"},
	"relative-redirects":                  {NotSupported, "Envoy rewrites no Location headers of services' redirects", "Envoy leaves services' Location headers alone"},
	"proxy-redirect-from":                 {NotSupported, "Envoy rewrites no Location headers of services' redirects", ""},
	"proxy-redirect-to":                   {NotSupported, "Envoy rewrites no Location headers of services' redirects", ""},
	"proxy-cookie-domain":                 {NotSupported, "Envoy rewrites no Set-Cookie headers", ""},
	"proxy-cookie-path":                   {NotSupported, "Envoy rewrites no Set-Cookie headers", ""},
	"proxy-next-upstream":                 {NotSupported, perRoute + "VirtualService http[].retries (retryOn); Istio retries twice by default on connect-failure, refused-stream, unavailable, cancelled and retriable-status-codes", ""},
	"proxy-next-upstream-timeout":         {NotSupported, perRoute + "VirtualService http[].retries.perTryTimeout", ""},
	"proxy-next-upstream-tries":           {NotSupported, perRoute + "VirtualService http[].retries.attempts", ""},
	"retry-non-idempotent":                {NotSupported, perRoute + "VirtualService http[].retries; Envoy retries any method its retryOn conditions match", "Istio's default retries apply to any method; per route, VirtualService http[].retries"},
	"load-balance":                        {NotSupported, "DestinationRule trafficPolicy.loadBalancer per service (Istio's default is LEAST_REQUEST)", ""},
	"upstream-hash-by":                    {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", ""},
	"upstream-hash-by-subset":             {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", "off"},
	"upstream-hash-by-subset-size":        {NotSupported, "DestinationRule trafficPolicy.loadBalancer.consistentHash per service", ""},
	"upstream-keepalive-time":             {NotSupported, "a lifetime for connections to services; not an item of globalconfig (DestinationRule connectionPool.http.maxConnectionDuration in recent Istio)", ""},
	"service-upstream":                    {NotNeeded, "Istio balances over the Service's endpoints itself", ""},
	"bind-address":                        {NotSupported, "the addresses the gateway listens on are its Service's and Gateway's", ""},
	"disable-ipv6":                        {NotSupported, "the gateway's IP families are its Service's (ipFamilies)", "the gateway's IP families are its Service's"},
	"proxy-add-original-uri-header":       {NotSupported, "Envoy adds x-envoy-original-path only when a route rewrites the path; no item sets x-original-uri", "no x-original-uri, as in Envoy"},
	"preserve-trailing-slash":             {NotSupported, "redirects of ingress-nginx's ssl-redirect; Istio's httpsRedirect keeps the path as it is", "Istio's httpsRedirect keeps the path as it is"},
	"proxy-ssl-location-only":             {NotSupported, "TLS towards services: DestinationRule trafficPolicy.tls per service", "off"},
	"default-type":                        {NotSupported, "Envoy adds no content-type to responses that lack one", ""},
	"skip-access-log-urls":                {NotSupported, "the accessLog item filters by status only (minStatusCode); Telemetry API access logging filters by expression", ""},
	"enable-syslog":                       {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", "no syslog, as in Envoy"},
	"syslog-host":                         {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", ""},
	"syslog-port":                         {NotSupported, "Envoy writes access logs to a file or stdout; ship them to syslog with the cluster's log collector", ""},
	"log-format-stream":                   {NotSupported, streamLogs, ""},
	"stream-access-log-path":              {NotSupported, streamLogs, ""},
	"disable-stream-access-log":           {NotSupported, streamLogs, ""},
	"enable-auth-access-log":              {NotSupported, "nginx logged each auth subrequest; Envoy logs no line for the check itself: the request's own line carries the response flag UAEX when the auth service refused it (extAuth)", "nothing to log"},
	"log-format-escape-none":              {NotNeeded, "Envoy escapes nothing in text formats, and escapes JSON formats correctly", ""},
	"forwarded-host-header":               {NotSupported, "Envoy sets no x-forwarded-host, and reads none to route", ""},
	"forwarded-for-proxy-protocol-header": {NotNeeded, "the header ingress-nginx uses internally to combine PROXY protocol and X-Forwarded-For", ""},
	"proxy-protocol-header-timeout":       {NotSupported, "the wait for the PROXY header; Envoy's listener filter timeout (15s) is not an item of globalconfig", ""},
	"opentelemetry-operation-name":        {NotSupported, "Envoy names each span after the route's host and path (or the VirtualService route's name); the tracing item sets no operation name", ""},
	"gzip-disable":                        {NotSupported, "Envoy's compressor can't skip clients by User-Agent", ""},

	// Removed from ingress-nginx.
	"enable-opentracing":                           {NotSupported, removedTracing, "no tracing through OpenTracing"},
	"opentracing-operation-name":                   {NotSupported, removedTracing, ""},
	"opentracing-location-operation-name":          {NotSupported, removedTracing, ""},
	"opentracing-trust-incoming-span":              {NotSupported, removedTracing, ""},
	"zipkin-collector-host":                        {NotSupported, removedTracing, ""},
	"zipkin-collector-port":                        {NotSupported, removedTracing, ""},
	"zipkin-service-name":                          {NotSupported, removedTracing, ""},
	"zipkin-sample-rate":                           {NotSupported, removedTracing, ""},
	"jaeger-collector-host":                        {NotSupported, removedTracing, ""},
	"jaeger-collector-port":                        {NotSupported, removedTracing, ""},
	"jaeger-endpoint":                              {NotSupported, removedTracing, ""},
	"jaeger-service-name":                          {NotSupported, removedTracing, ""},
	"jaeger-propagation-format":                    {NotSupported, removedTracing, ""},
	"jaeger-sampler-type":                          {NotSupported, removedTracing, ""},
	"jaeger-sampler-param":                         {NotSupported, removedTracing, ""},
	"jaeger-sampler-host":                          {NotSupported, removedTracing, ""},
	"jaeger-sampler-port":                          {NotSupported, removedTracing, ""},
	"jaeger-trace-context-header-name":             {NotSupported, removedTracing, ""},
	"jaeger-debug-header":                          {NotSupported, removedTracing, ""},
	"jaeger-baggage-header":                        {NotSupported, removedTracing, ""},
	"jaeger-trace-baggage-header-prefix":           {NotSupported, removedTracing, ""},
	"datadog-collector-host":                       {NotSupported, removedTracing, ""},
	"datadog-collector-port":                       {NotSupported, removedTracing, ""},
	"datadog-service-name":                         {NotSupported, removedTracing, ""},
	"datadog-environment":                          {NotSupported, removedTracing, ""},
	"datadog-operation-name-override":              {NotSupported, removedTracing, ""},
	"datadog-priority-sampling":                    {NotSupported, removedTracing, ""},
	"datadog-sample-rate":                          {NotSupported, removedTracing, ""},
	"global-rate-limit-memcached-host":             {NotSupported, removedGlobalRL, ""},
	"global-rate-limit-memcached-port":             {NotSupported, removedGlobalRL, ""},
	"global-rate-limit-memcached-connect-timeout":  {NotSupported, removedGlobalRL, ""},
	"global-rate-limit-memcached-max-idle-timeout": {NotSupported, removedGlobalRL, ""},
	"global-rate-limit-memcached-pool-size":        {NotSupported, removedGlobalRL, ""},
	"global-rate-limit-status-code":                {NotSupported, removedGlobalRL + "; when you recreate the limits, globalRateLimit.statusCode sets their status (429 by default, where ingress-nginx answered 429 too)", ""},
}

// snippet explains why raw nginx configuration is refused.
const snippet = "raw nginx configuration, which Envoy can't run and globalconfig never takes (snippets are off by default since CVE-2021-25742 let them read the controller's secrets); rebuild what it does with the document's keys, or, for a one-off, a reviewed EnvoyFilter of your own"

// isSnippet reports whether key holds raw nginx configuration.
func isSnippet(key string) bool { return strings.HasSuffix(key, "-snippet") }
