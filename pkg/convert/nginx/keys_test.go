package nginx_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/items/extauth"
	"github.com/globalconfig/globalconfig/pkg/convert/gap"
	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
)

var update = flag.Bool("update", false, "rewrite the golden files and docs/migrating-from-ingress-nginx.md's key table")

// keyCase is one key's conversion: the ConfigMap holds key: value (and
// with), and the key must get verdict; want maps document paths to the
// value they must hold, "-" meaning absent.
type keyCase struct {
	key, value string
	unset      bool     // the ConfigMap leaves key out: ingress-nginx's default applies
	with       []string // other keys the case needs, k=v
	hops       int      // --trusted-hops, when more than 0 (-1: 0)
	verdict    nginx.Verdict
	want       []string // path=value
	note       string   // the key table's note, on the first case of a key
}

const (
	ip     = "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
	absent = "-"
)

var keyCases = []keyCase{
	// Keys whose verdict names an Envoy capability (nginx.Gaps): the
	// table's note is the verdict, as the registry words it today.
	{key: "limit-rate", value: "16384", verdict: nginx.NotSupported},
	{key: "limit-rate-after", value: "1m", verdict: nginx.NotSupported},
	{key: "upstream-keepalive-time", value: "1h", verdict: nginx.NotSupported},
	{key: "proxy-protocol-header-timeout", value: "5s", verdict: nginx.NotSupported},
	{key: "opentelemetry-operation-name", value: "HTTP $request_method $service_name $uri", verdict: nginx.NotSupported},
	{key: "skip-access-log-urls", value: "/healthz", verdict: nginx.NotSupported},
	{key: "use-geoip2", value: "true", verdict: nginx.NotSupported},
	// Body size.
	{key: "proxy-body-size", value: "25m", verdict: nginx.Converted, want: []string{"requestBody.maxSize=25Mi"}, note: "nginx's m is a mebibyte. Envoy buffers the body in memory up to the limit; larger requests get 413, as from nginx"},
	{key: "proxy-body-size", unset: true, verdict: nginx.DefaultWritten, want: []string{"requestBody.maxSize=1Mi"}},
	{key: "proxy-body-size", value: "0", verdict: nginx.Converted, want: []string{"requestBody=-"}},
	{key: "proxy-request-buffering", value: "off", verdict: nginx.NotSupported, want: []string{"requestBody.maxSize=1Mi"}, note: "Envoy can't stream a request and limit its size; with proxy-body-size 0 it streams"},
	{key: "client-body-buffer-size", value: "64k", verdict: nginx.NotNeeded, note: "nginx's memory buffer before a temporary file"},
	// Headers.
	{key: "large-client-header-buffers", value: "8 16k", verdict: nginx.Converted, want: []string{"downstream.maxRequestHeadersKb=128"}, note: "number × size becomes a limit on the whole header block; nginx's per-line limit has no counterpart"},
	{key: "large-client-header-buffers", unset: true, verdict: nginx.DefaultWritten, want: []string{"downstream.maxRequestHeadersKb=32"}},
	{key: "proxy-buffer-size", value: "16k", verdict: nginx.NotSupported}, // the note is the gap's verdict (nginx.Gaps)
	{key: "client-header-buffer-size", value: "4k", verdict: nginx.NotNeeded, note: "nginx's first header buffer; the limit is large-client-header-buffers"},
	// Client IP.
	{key: "use-forwarded-headers", value: "true", verdict: nginx.NotSupported, want: []string{"headers.xff=-"}, note: "nginx trusts X-Forwarded-For by address range (proxy-real-ip-cidr); Envoy at a gateway by hop count: give --trusted-hops N"},
	{key: "use-forwarded-headers", value: "true", hops: 2, verdict: nginx.Converted, want: []string{"headers.xff.trustedHops=2"}},
	{key: "use-forwarded-headers", value: "false", verdict: nginx.DefaultAlready, want: []string{"headers.xff=-"}},
	{key: "enable-real-ip", value: "true", hops: 1, verdict: nginx.Converted, want: []string{"headers.xff.trustedHops=1"}, note: "as use-forwarded-headers"},
	{key: "forwarded-for-header", value: "CF-Connecting-IP", with: []string{"use-forwarded-headers=true"}, hops: 1, verdict: nginx.Converted, want: []string{"headers.xff.trustedHops=1"}, note: "Cloudflare's header, with --trusted-hops: Cloudflare appends the same address to X-Forwarded-For; other headers are not supported at gateways"},
	{key: "forwarded-for-header", value: "X-Real-IP", with: []string{"use-forwarded-headers=true"}, verdict: nginx.NotSupported},
	{key: "proxy-real-ip-cidr", value: "10.0.0.0/8", with: []string{"use-forwarded-headers=true"}, verdict: nginx.NotSupported, note: "a hop count (--trusted-hops) replaces the ranges"},
	{key: "proxy-real-ip-cidr", value: "10.0.0.0/8", verdict: nginx.NotNeeded},
	{key: "compute-full-forwarded-for", value: "true", with: []string{"use-forwarded-headers=true"}, hops: 1, verdict: nginx.DefaultAlready, want: []string{"headers.request.set.x-forwarded-for=-"}, note: "Envoy appends the peer, as nginx's full chain does; without it, nginx sent the client address alone, which the document sets"},
	{key: "compute-full-forwarded-for", value: "false", verdict: nginx.Converted, want: []string{"headers.request.set.x-forwarded-for=" + ip}},
	{key: "use-proxy-protocol", value: "true", verdict: nginx.Converted, want: []string{"clientIP.proxyProtocol=true"}},
	// TLS and HSTS.
	{key: "ssl-protocols", value: "TLSv1.3", verdict: nginx.Converted, want: []string{"tls.minVersion=TLSv1_3", "tls.maxVersion=TLSv1_3"}, note: "a list becomes a range: minVersion to maxVersion"},
	{key: "ssl-protocols", value: "TLSv1.2 TLSv1.3", verdict: nginx.DefaultAlready, want: []string{"tls.minVersion=-"}},
	{key: "ssl-protocols", value: "TLSv1 TLSv1.1 TLSv1.2", with: []string{"ssl-ciphers=ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-SHA"}, verdict: nginx.Converted, want: []string{"tls.minVersion=TLSv1_0", "tls.maxVersion=TLSv1_2"}},
	{key: "ssl-protocols", value: "TLSv1.1 TLSv1.2", verdict: nginx.Converted, want: []string{"tls.minVersion=TLSv1_2", "tls.maxVersion=TLSv1_2"}},
	{key: "ssl-protocols", value: "SSLv3", verdict: nginx.NotSupported, want: []string{"tls.minVersion=-", "tls.hsts.maxAge=31536000"}},
	{key: "ssl-ciphers", value: "ECDHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES256-GCM-SHA384", verdict: nginx.Converted, want: []string{"tls.cipherSuites=[ECDHE-RSA-AES256-GCM-SHA384]"}, note: "DHE suites dropped (BoringSSL has none); cipher expressions (HIGH:!aNULL) are not supported: beside suites by name, only the named ones carry over, and the report says the gateway offers fewer"},
	{key: "ssl-ciphers", value: "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES128-GCM-SHA256", verdict: nginx.DefaultAlready, want: []string{"tls.cipherSuites=-"}},
	{key: "ssl-ciphers", value: "HIGH:!aNULL:!MD5", verdict: nginx.NotSupported, want: []string{"tls.cipherSuites=-"}},
	{key: "ssl-ciphers", value: "ECDHE-RSA-AES128-GCM-SHA256:HIGH:!aNULL", verdict: nginx.Converted, want: []string{"tls.cipherSuites=[ECDHE-RSA-AES128-GCM-SHA256]"}},
	{key: "ssl-ecdh-curve", value: "secp384r1:X25519", verdict: nginx.Converted, want: []string{"tls.ecdhCurves=[P-384 X25519]"}, note: "OpenSSL's names become Envoy's; auto is Envoy's default"},
	{key: "ssl-ecdh-curve", value: "auto", verdict: nginx.DefaultAlready, want: []string{"tls.ecdhCurves=-"}},
	{key: "hsts", value: "false", verdict: nginx.Converted, want: []string{"tls=-"}, note: "HSTS on the HTTPS ports of tls.ports (443, 8443)"},
	{key: "hsts", unset: true, verdict: nginx.DefaultWritten, want: []string{"tls.hsts.maxAge=31536000", "tls.hsts.includeSubDomains=true"}},
	{key: "hsts-max-age", value: "600", verdict: nginx.Converted, want: []string{"tls.hsts.maxAge=600"}, note: "a whole number in float notation (3.14496e+07, as Helm renders large numbers) is read as the number"},
	{key: "hsts-max-age", value: "3.14496e+07", verdict: nginx.Converted, want: []string{"tls.hsts.maxAge=31449600"}},
	{key: "hsts-include-subdomains", value: "false", verdict: nginx.Converted, want: []string{"tls.hsts.includeSubDomains=false"}},
	{key: "hsts-preload", value: "true", verdict: nginx.Converted, want: []string{"tls.hsts.preload=true"}, note: "refused with a max-age under a year or without includeSubDomains, as by the preload list"},
	{key: "hsts-preload", value: "true", with: []string{"hsts-max-age=600"}, verdict: nginx.NotSupported, want: []string{"tls.hsts.preload=-"}},
	// Response headers.
	{key: "server-tokens", value: "false", verdict: nginx.Converted, want: []string{"headers.server.mode=strip"}, note: "nginx removed every Server header"},
	{key: "server-tokens", value: "true", verdict: nginx.DefaultAlready, want: []string{"headers.server=-"}},
	{key: "allow-backend-server-header", value: "true", with: []string{"server-tokens=true"}, verdict: nginx.Converted, want: []string{"headers.server.mode=passThrough"}},
	{key: "hide-headers", value: "X-Powered-By,Server", verdict: nginx.Converted, want: []string{"headers.response.remove=[x-powered-by]"}, note: "Server is governed by server-tokens"},
	{key: "add-headers", value: "ingress-nginx/custom-headers", verdict: nginx.Converted, want: []string{"headers.responseHeaders.x-frame-options=DENY", "headers.responseHeaders.x-served-by=%HOSTNAME%"}, note: "the named ConfigMap, from the input or --configmap-dir; nginx variables become command operators"},
	{key: "add-headers", value: "ingress-nginx/not-given", verdict: nginx.NotSupported, want: []string{"headers.responseHeaders=-"}},
	{key: "proxy-set-headers", value: "ingress-nginx/custom-headers", verdict: nginx.Converted, want: []string{"headers.request.set.x-frame-options=DENY"}, note: "as add-headers, on requests to services"},
	// Timeouts.
	{key: "proxy-connect-timeout", value: "10", verdict: nginx.Converted, want: []string{"upstream.connectTimeout=10s"}},
	{key: "proxy-connect-timeout", unset: true, verdict: nginx.DefaultWritten, want: []string{"upstream.connectTimeout=5s"}},
	{key: "proxy-read-timeout", value: "300", verdict: nginx.Converted, want: []string{"downstream.streamIdleTimeout=300s"}, note: "per read in nginx: Envoy's stream idle timeout is the closest, the largest of the three read and send timeouts"},
	{key: "proxy-send-timeout", value: "90", verdict: nginx.Converted, want: []string{"downstream.streamIdleTimeout=90s"}, note: "as proxy-read-timeout"},
	{key: "client-body-timeout", value: "120", verdict: nginx.Converted, want: []string{"downstream.streamIdleTimeout=120s"}, note: "as proxy-read-timeout"},
	{key: "client-header-timeout", value: "10", verdict: nginx.Converted, want: []string{"downstream.requestHeadersTimeout=10s"}},
	{key: "keep-alive", value: "30", verdict: nginx.Converted, want: []string{"downstream.idleTimeout=30s"}, note: "0 (keep-alive off) becomes hardening.maxRequestsPerConnection 1"},
	{key: "keep-alive", value: "0", verdict: nginx.Converted, want: []string{"hardening.maxRequestsPerConnection=1", "downstream.idleTimeout=-"}},
	{key: "keep-alive-requests", value: "500", verdict: nginx.Converted, want: []string{"hardening.maxRequestsPerConnection=500"}, note: "written only when set: nginx's default exists to free per-connection memory"},
	{key: "keep-alive-requests", unset: true, verdict: "", want: []string{"hardening.maxRequestsPerConnection=-"}},
	{key: "upstream-keepalive-timeout", value: "30", verdict: nginx.Converted, want: []string{"upstream.idleTimeout=30s"}, note: "written only when set: with it every gateway cluster's upstream protocol follows the client's (Istio replaces a cluster's protocol options whole); the report says so"},
	{key: "upstream-keepalive-timeout", unset: true, verdict: nginx.DefaultSkipped, want: []string{"upstream.idleTimeout=-"}},
	{key: "upstream-keepalive-requests", value: "1000", verdict: nginx.Converted, want: []string{"upstream.maxRequestsPerConnection=1000"}, note: "as upstream-keepalive-timeout"},
	{key: "upstream-keepalive-requests", unset: true, verdict: nginx.DefaultSkipped, want: []string{"upstream.maxRequestsPerConnection=-"}},
	{key: "upstream-keepalive-connections", value: "64", verdict: nginx.NotNeeded, note: "0 (reuse off) becomes upstream.maxRequestsPerConnection 1"},
	{key: "upstream-keepalive-connections", value: "0", verdict: nginx.Converted, want: []string{"upstream.maxRequestsPerConnection=1"}},
	{key: "http2-max-concurrent-streams", value: "64", verdict: nginx.Converted, want: []string{"downstream.http2.maxConcurrentStreams=64"}},
	// Compression.
	{key: "use-gzip", value: "true", verdict: nginx.Converted, want: []string{"gzip.enable=true", "gzip.compressionLevel=COMPRESSION_LEVEL_1", "gzip.minContentLength=256", "gzip.windowBits=15"}, note: "with nginx's level, length and types"},
	{key: "use-gzip", value: "false", verdict: nginx.DefaultAlready, want: []string{"gzip=-"}},
	{key: "gzip-level", value: "6", with: []string{"use-gzip=true"}, verdict: nginx.Converted, want: []string{"gzip.compressionLevel=COMPRESSION_LEVEL_6"}},
	{key: "gzip-min-length", value: "512", with: []string{"use-gzip=true"}, verdict: nginx.Converted, want: []string{"gzip.minContentLength=512"}},
	{key: "gzip-types", value: "application/json", with: []string{"use-gzip=true"}, verdict: nginx.Converted, want: []string{"gzip.contentType=[text/html application/json]"}, note: "text/html added: nginx always compresses it; * is not supported"},
	{key: "enable-brotli", value: "true", verdict: nginx.Converted, want: []string{"brotli.quality=4", "brotli.windowBits=19"}},
	{key: "brotli-level", value: "7", with: []string{"enable-brotli=true"}, verdict: nginx.Converted, want: []string{"brotli.quality=7"}},
	{key: "brotli-min-length", value: "100", with: []string{"enable-brotli=true"}, verdict: nginx.Converted, want: []string{"brotli.minContentLength=100"}},
	{key: "brotli-types", value: "application/json text/css", with: []string{"enable-brotli=true"}, verdict: nginx.Converted, want: []string{"brotli.contentType=[text/html application/json text/css]"}, note: "as gzip-types"},
	{key: "brotli-types", value: "*", with: []string{"enable-brotli=true"}, verdict: nginx.NotSupported, want: []string{"brotli.contentType=-"}},
	// Access logs.
	{key: "log-format-upstream", value: `$remote_addr "$request" $status 100%`, verdict: nginx.Converted, want: []string{"accessLog.format=" + ip + ` "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% 100%%` + "\n"}, note: "variables become command operators; a JSON object becomes accessLog.json; variables with no equivalent are written as - and reported"},
	{key: "log-format-upstream", value: `{"status": $status, "ua": "$http_user_agent", "t": $request_time}`, verdict: nginx.Converted, want: []string{"accessLog.json.status=%RESPONSE_CODE%", "accessLog.json.ua=%REQ(USER-AGENT)%", "accessLog.json.t=%DURATION%"}},
	{key: "log-format-upstream", value: `$remote_user $status`, verdict: nginx.NotSupported, want: []string{"accessLog.format=- %RESPONSE_CODE%\n"}},
	{key: "log-format-upstream", value: `$ssl_session_id $status`, verdict: nginx.Converted, want: []string{"accessLog.format=%DOWNSTREAM_TLS_SESSION_ID% %RESPONSE_CODE%\n"}},
	{key: "log-format-escape-json", value: "true", with: []string{`log-format-upstream={"s": "$status"}`}, verdict: nginx.DefaultAlready, note: "Envoy escapes JSON formats itself; not supported for text formats"},
	{key: "log-format-escape-json", value: "true", verdict: nginx.NotSupported},
	{key: "disable-access-log", value: "true", verdict: nginx.Converted, want: []string{"accessLog=-"}},
	{key: "disable-access-log", unset: true, verdict: nginx.DefaultWritten, want: []string{"accessLog.path=/dev/stdout"}},
	{key: "access-log-path", value: "/var/log/nginx/access.log", verdict: nginx.Converted, want: []string{"accessLog.path=/dev/stdout"}, note: "ingress-nginx's image links it to /dev/stdout"},
	{key: "access-log-path", value: "/dev/stderr", verdict: nginx.Converted, want: []string{"accessLog.path=/dev/stderr"}},
	// Tracing.
	{key: "enable-opentelemetry", value: "true", with: []string{"otlp-collector-host=otel-collector.observability.svc.cluster.local"}, verdict: nginx.Converted, want: []string{"tracing.enable=true", "tracing.opentelemetry.service=otel-collector.observability.svc.cluster.local", "tracing.opentelemetry.port=4317", "tracing.serviceName=nginx", "tracing.sampling=100"}},
	{key: "enable-opentelemetry", value: "true", verdict: nginx.NotSupported, want: []string{"tracing=-"}},
	{key: "otlp-collector-host", value: "otel", with: []string{"enable-opentelemetry=true"}, verdict: nginx.Converted, want: []string{"tracing.opentelemetry.service=otel.ingress-nginx.svc.cluster.local"}, note: "short names become the service's full name"},
	{key: "otlp-collector-host", value: "10.0.0.9", with: []string{"enable-opentelemetry=true"}, verdict: nginx.NotSupported, want: []string{"tracing=-"}},
	{key: "otlp-collector-port", value: "4318", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o"}, verdict: nginx.Converted, want: []string{"tracing.opentelemetry.port=4318"}},
	{key: "otel-service-name", value: "edge", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o"}, verdict: nginx.Converted, want: []string{"tracing.serviceName=edge"}},
	{key: "otel-sampler", value: "TraceIdRatioBased", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o", "otel-sampler-ratio=0.25"}, verdict: nginx.Converted, want: []string{"tracing.sampling=25"}, note: "AlwaysOn is 100 percent, AlwaysOff 0, TraceIdRatioBased the ratio"},
	{key: "otel-sampler-ratio", value: "0.25", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o", "otel-sampler=TraceIdRatioBased"}, verdict: nginx.Converted, want: []string{"tracing.sampling=25"}},
	{key: "otel-sampler-parent-based", value: "false", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o"}, verdict: nginx.NotSupported, note: "Envoy always follows an incoming traceparent's decision"},
	{key: "opentelemetry-trust-incoming-span", value: "false", with: []string{"enable-opentelemetry=true", "otlp-collector-host=otel.o"}, verdict: nginx.NotSupported},
	{key: "otel-max-queuesize", value: "4096", verdict: nginx.NotNeeded},
	// Errors and limits.
	{key: "custom-http-errors", value: "404,503", verdict: nginx.NotSupported, want: []string{"customErrors=-"}, note: "nginx fetched the pages from its default backend; customErrors.localReplies takes bodies of your own"},
	{key: "limit-req-status-code", value: "429", verdict: nginx.NotSupported, note: "belongs to the rate-limit annotations of Ingresses; recreate them as localRateLimit.limits (match.hosts and pathPrefix, perClient, requests per second or minute) and set localRateLimit.statusCode"},
	{key: "limit-conn-status-code", value: "429", verdict: nginx.NotSupported},
	{key: "global-rate-limit-memcached-host", value: "memcached.default.svc", verdict: nginx.NotSupported, note: "removed from ingress-nginx; globalRateLimit replaces it"},
	{key: "global-rate-limit-status-code", value: "429", verdict: nginx.NotSupported},
	// IP access.
	{key: "whitelist-source-range", value: "10.0.0.0/8,192.168.1.5", verdict: nginx.Converted, want: []string{"ipAccess.allow=[10.0.0.0/8 192.168.1.5/32]"}, note: "403 for everyone else, as in nginx"},
	{key: "denylist-source-range", value: "203.0.113.0/24,203.0.113.9", verdict: nginx.Converted, want: []string{"ipAccess.deny=[203.0.113.0/24]"}},
	{key: "block-cidrs", value: "198.51.100.1/24", verdict: nginx.Converted, want: []string{"ipAccess.deny=[198.51.100.0/24]"}, note: "ipAccess.deny (403 after X-Forwarded-For, as nginx), not denyConnections"},
	{key: "whitelist-source-range", value: "", verdict: nginx.DefaultAlready, want: []string{"ipAccess=-"}},
	{key: "block-user-agents", value: "~*sqlmap", verdict: nginx.Converted, want: []string{"ipAccess.denyUserAgents=[~*sqlmap]"}, note: "read as nginx's map reads it: a plain value whole and ignoring case, ~ and ~* regular expressions; one RE2 can't run (lookaround) is reported; empty blocks nothing"},
	{key: "block-user-agents", value: "Go-http-client/1.1,~^nikto", verdict: nginx.Converted, want: []string{"ipAccess.denyUserAgents=[Go-http-client/1.1 ~^nikto]"}},
	{key: "block-user-agents", value: "", verdict: nginx.DefaultAlready},
	{key: "block-referers", value: "~*spam", verdict: nginx.NotSupported},
	// External authentication.
	{key: "global-auth-url", value: "http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth", verdict: nginx.Converted, want: []string{"extAuth.service=oauth2-proxy.auth.svc.cluster.local", "extAuth.port=4180", "extAuth.pathPrefix=/oauth2/auth", "extAuth.failureStatus=500", "extAuth.addHeaders.x-original-url=" + extauth.OriginalURL}, note: "Envoy allows a request only on a 200 answer (nginx: any 2xx): oauth2-proxy's /oauth2/auth answers 202, so the check goes to /oauth2/auth followed by the request's path, which oauth2-proxy run with --upstream=static://200 answers 200; another path becomes extAuth.path (the check goes to that path alone). 500 when the service fails, as from nginx"},
	{key: "global-auth-url", value: "http://auth.auth:8080/verify", verdict: nginx.Converted, want: []string{"extAuth.service=auth.auth.svc.cluster.local", "extAuth.path=/verify", "extAuth.pathPrefix=-"}},
	{key: "global-auth-url", value: "http://10.0.0.5/auth", verdict: nginx.NotSupported, want: []string{"extAuth=-"}},
	{key: "global-auth-method", value: "GET", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.NotSupported, note: "Envoy checks with the request's own method and can't be told another"},
	{key: "global-auth-signin", value: "https://$host/oauth2/start?rd=$escaped_request_uri", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.signIn.url=https://%REQ(:AUTHORITY)%/oauth2/start?rd=%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "extAuth.skip.paths=[/.well-known/acme-challenge /oauth2]"}, note: "the service's 401 becomes a 302 to it with the original URL, not percent-encoded (Envoy can't); oauth2-proxy's /oauth2 pages are added to extAuth.skip.paths"},
	{key: "global-auth-signin", value: "https://login.example.com/start", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.signIn.url=https://login.example.com/start", "extAuth.skip=-"}},
	{key: "global-auth-signin-redirect-param", value: "next", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth", "global-auth-signin=https://login.example.com/start"}, verdict: nginx.Converted, want: []string{"extAuth.signIn.redirectParam=next"}},
	{key: "global-auth-response-headers", value: "X-Auth-Request-User,X-Auth-Request-Email", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.upstreamHeaders=[x-auth-request-user x-auth-request-email]"}},
	{key: "global-auth-request-redirect", value: "https://app.example.com$request_uri", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.addHeaders.x-auth-request-redirect=https://app.example.com%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"}},
	{key: "global-auth-cache-key", value: "$remote_user$http_authorization", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.NotSupported, note: "Envoy caches no check: the service sees every request"},
	{key: "global-auth-cache-duration", value: "200 202 401 5m", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth", "global-auth-cache-key=$remote_user"}, verdict: nginx.NotSupported},
	{key: "global-auth-always-set-cookie", value: "true", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.clientHeadersOnSuccess=-"}, note: "extAuth's default sends the service's set-cookie with every response of an allowed request; nginx without the key, with 2xx and 3xx only"},
	{key: "global-auth-snippet", value: "proxy_set_header X-Token s3cr3t;", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Insecure, note: "never shown: it may hold secrets"},
	{key: "no-auth-locations", value: "/.well-known/acme-challenge,/healthz/", with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.Converted, want: []string{"extAuth.skip.paths=[/.well-known/acme-challenge /healthz]"}, note: "whole segments of each request's path, where nginx compared the paths of Ingresses as strings; the default is the same"},
	{key: "no-auth-locations", unset: true, with: []string{"global-auth-url=http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth"}, verdict: nginx.DefaultAlready, want: []string{"extAuth.skip=-"}},
	{key: "enable-global-auth", value: "false", verdict: nginx.Unknown, note: "an Ingress annotation, not a ConfigMap key: list the Ingress's hosts in extAuth.skip.hosts"},
	// Request IDs, paths and headers.
	{key: "generate-request-id", value: "false", verdict: nginx.Converted, want: []string{"headers.requestId.generate=false", "headers.requestId.preserveExternal=true"}, note: "and the client's x-request-id is kept, as nginx did"},
	{key: "enable-underscores-in-headers", value: "false", verdict: nginx.Converted, want: []string{"hardening.headersWithUnderscores=DROP_HEADER"}},
	{key: "enable-underscores-in-headers", value: "true", verdict: nginx.DefaultAlready, want: []string{"hardening.headersWithUnderscores=-"}},
	{key: "ignore-invalid-headers", value: "true", verdict: nginx.DefaultAlready, note: "Envoy answers 400 to invalid header names, where nginx dropped the header"},
	{key: "ignore-invalid-headers", value: "false", verdict: nginx.NotSupported, want: []string{"hardening.headersWithUnderscores=-"}},
	// Snippets, nginx-internal keys, and the rest.
	{key: "allow-snippet-annotations", value: "true", verdict: nginx.Insecure},
	{key: "allow-snippet-annotations", value: "false", verdict: nginx.DefaultAlready},
	{key: "server-snippet", value: "location /x { return 200; }", verdict: nginx.Insecure, note: "every *-snippet key"},
	{key: "worker-processes", value: "4", verdict: nginx.NotNeeded},
	{key: "proxy-buffering", value: "on", verdict: nginx.NotNeeded},
	{key: "use-http2", value: "true", verdict: nginx.NotNeeded},
	// What nginx does at the edge without a key.
	{key: "(built in) HTTP/1.0", unset: true, verdict: nginx.DefaultWritten, want: []string{"downstream.http1.acceptHttp10=true", "downstream.http1.defaultHost=-"},
		note: "nginx serves HTTP/1.0, Envoy answers it 426 unless told to; a request without Host gets 400 from Envoy where ingress-nginx's default server answered 404 (downstream.http1.defaultHost routes them)"},
	{key: "(built in) trailing dot in Host", unset: true, verdict: nginx.DefaultWritten, want: []string{"hardening.stripTrailingHostDot=true"},
		note: "nginx matches example.com. as example.com; Envoy, left alone, routes it by a wildcard host only"},
	{key: "(built in) header name case", unset: true, verdict: nginx.DefaultSkipped, want: []string{"downstream.http1.preserveHeaderCase=-"},
		note: "nginx passes header names on as they arrived, Envoy lower-cases them; preserveHeaderCase is not written, since it replaces every gateway cluster's HTTP protocol options"},
	{key: "ssl-redirect", value: "true", verdict: nginx.NotSupported, note: "the Gateway server's tls.httpsRedirect"},
	{key: "ssl-redirect", value: "false", verdict: nginx.DefaultAlready},
	{key: "load-balance", value: "ewma", verdict: nginx.NotSupported},
	{key: "enable-modsecurity", value: "true", verdict: nginx.NotSupported},
	{key: "zipkin-collector-host", value: "zipkin", verdict: nginx.NotSupported, note: "removed with OpenTracing in ingress-nginx 1.10"},
	{key: "client-max-body-size", value: "50m", verdict: nginx.Unknown, note: "unknown keys are reported with a suggestion"},
}

// headerMaps are the ConfigMaps the header cases name.
const headerMaps = `---
apiVersion: v1
kind: ConfigMap
metadata: {name: custom-headers, namespace: ingress-nginx}
data:
  X-Frame-Options: DENY
  X-Served-By: $hostname
`

func (k keyCase) input() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ingress-nginx-controller, namespace: ingress-nginx}\ndata:\n")
	kv := k.with
	if !k.unset {
		kv = append([]string{k.key + "=" + k.value}, kv...)
	}
	for _, s := range kv {
		key, v, _ := strings.Cut(s, "=")
		fmt.Fprintf(&b, "  %s: %q\n", key, v)
	}
	if len(kv) == 0 {
		b.WriteString("  {}\n")
	}
	return b.String() + headerMaps
}

func TestKeys(t *testing.T) {
	for _, k := range keyCases {
		name := k.key + "=" + k.value
		if k.unset {
			name = k.key + " unset"
		}
		t.Run(name, func(t *testing.T) {
			in, err := nginx.ReadInput([]byte(k.input()))
			if err != nil {
				t.Fatal(err)
			}
			var opts nginx.Options
			if k.hops != 0 {
				n := uint32(max(k.hops, 0))
				opts.TrustedHops = &n
			}
			res, err := nginx.Convert(in, opts)
			if err != nil {
				t.Fatal(err)
			}
			// Every key of the input has one line; a part of a key (its
			// entries not carried) may have its own, "KEY (…)".
			for key := range in.Data {
				if n := len(res.Report.Find(key)); n != 1 {
					t.Errorf("%s has %d lines in the report, want 1", key, n)
				}
			}
			var entries []nginx.Entry
			for _, e := range res.Report.Entries {
				if e.Key == k.key || strings.HasPrefix(e.Key, k.key+" (") {
					entries = append(entries, e)
				}
			}
			var got []string
			found := false
			for _, e := range entries {
				got = append(got, string(e.Verdict)+": "+e.Detail)
				found = found || e.Verdict == k.verdict
			}
			if k.verdict == "" && len(entries) > 0 || k.verdict != "" && !found {
				t.Errorf("verdicts %q, want %q", got, k.verdict)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(res.Document, &doc); err != nil {
				t.Fatal(err)
			}
			for _, w := range k.want {
				path, want, _ := strings.Cut(w, "=")
				v, ok := lookup(doc, path)
				switch {
				case want == absent && ok:
					t.Errorf("%s = %v, want it absent", path, v)
				case want != absent && !ok:
					t.Errorf("%s absent, want %s\n%s", path, want, res.Document)
				case want != absent && fmt.Sprint(v) != want:
					t.Errorf("%s = %v, want %s", path, v, want)
				}
			}
		})
	}
}

func lookup(doc map[string]any, path string) (any, bool) {
	var v any = doc
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, true
}

// docs/migrating-from-ingress-nginx.md's table of keys is made from keyCases, so every key it
// lists has a test of its verdict and document keys; go test -update
// rewrites it.
func TestReadmeKeyTable(t *testing.T) {
	const begin, end = "<!-- ingress-nginx keys: begin -->\n", "<!-- ingress-nginx keys: end -->\n"
	readme, err := os.ReadFile("../../../docs/migrating-from-ingress-nginx.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(readme), begin)
	_, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("docs/migrating-from-ingress-nginx.md has no %q … %q section", begin, end)
	}
	gaps := map[string]gap.Use{}
	for _, u := range nginx.Gaps() {
		gaps[u.Key] = u
	}
	var b strings.Builder
	b.WriteString("| key | verdict | document key | notes |\n|:--|:--|:--|:--|\n")
	seen := map[string]bool{}
	for _, k := range keyCases {
		if seen[k.key] {
			continue
		}
		seen[k.key] = true
		var paths []string
		for _, w := range k.want {
			if p, v, _ := strings.Cut(w, "="); v != absent {
				paths = append(paths, "`"+p+"`")
			}
		}
		note := k.note
		if g, ok := gaps[k.key]; ok {
			note = g.Text()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.key, k.verdict, strings.Join(paths, ", "), note)
	}
	want := before + begin + b.String() + end + after
	if *update {
		if err := os.WriteFile("../../../docs/migrating-from-ingress-nginx.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(readme) {
		t.Error("docs/migrating-from-ingress-nginx.md's key table differs from keyCases; run go test ./pkg/convert/nginx -update")
	}
}

// Every key ingress-nginx documents gets a verdict, none is unknown.
func TestEveryDocumentedKeyKnown(t *testing.T) {
	// From docs/user-guide/nginx-configuration/configmap.md.
	documented := strings.Fields(`add-headers allow-backend-server-header allow-cross-namespace-resources allow-snippet-annotations
annotations-risk-level annotation-value-word-blocklist hide-headers access-log-params access-log-path http-access-log-path
stream-access-log-path enable-access-log-for-default-backend error-log-path enable-modsecurity modsecurity-snippet
enable-owasp-modsecurity-crs client-header-buffer-size client-header-timeout client-body-buffer-size client-body-timeout
disable-access-log disable-ipv6 disable-ipv6-dns enable-underscores-in-headers enable-ocsp ignore-invalid-headers
retry-non-idempotent error-log-level http2-max-field-size http2-max-header-size http2-max-requests http2-max-concurrent-streams
hsts hsts-include-subdomains hsts-max-age hsts-preload keep-alive keep-alive-requests large-client-header-buffers
log-format-escape-none log-format-escape-json log-format-upstream log-format-stream enable-multi-accept max-worker-connections
max-worker-open-files map-hash-bucket-size nginx-status-ipv4-whitelist nginx-status-ipv6-whitelist proxy-real-ip-cidr
proxy-set-headers server-name-hash-max-size server-name-hash-bucket-size proxy-headers-hash-max-size proxy-headers-hash-bucket-size
reuse-port server-tokens ssl-ciphers ssl-ecdh-curve ssl-dh-param ssl-protocols ssl-session-cache ssl-session-cache-size
ssl-session-tickets ssl-session-ticket-key ssl-session-timeout ssl-buffer-size use-proxy-protocol proxy-protocol-header-timeout
enable-aio-write use-gzip use-geoip use-geoip2 geoip2-autoreload-in-minutes enable-brotli brotli-level brotli-min-length
brotli-types use-http2 gzip-disable gzip-level gzip-min-length gzip-types worker-processes worker-cpu-affinity
worker-shutdown-timeout enable-serial-reloads load-balance variables-hash-bucket-size variables-hash-max-size
upstream-keepalive-connections upstream-keepalive-time upstream-keepalive-timeout upstream-keepalive-requests
limit-conn-zone-variable proxy-stream-timeout proxy-stream-next-upstream proxy-stream-next-upstream-timeout
proxy-stream-next-upstream-tries proxy-stream-responses bind-address use-forwarded-headers enable-real-ip forwarded-for-header
forwarded-for-proxy-protocol-header compute-full-forwarded-for proxy-add-original-uri-header generate-request-id
jaeger-collector-host jaeger-collector-port jaeger-endpoint jaeger-service-name jaeger-propagation-format jaeger-sampler-type
jaeger-sampler-param jaeger-sampler-host jaeger-sampler-port jaeger-trace-context-header-name jaeger-debug-header
jaeger-baggage-header jaeger-trace-baggage-header-prefix enable-opentelemetry opentelemetry-trust-incoming-span
opentelemetry-operation-name opentelemetry-config otlp-collector-host otlp-collector-port otel-max-queuesize
otel-schedule-delay-millis otel-max-export-batch-size otel-service-name otel-sampler otel-sampler-parent-based
otel-sampler-ratio main-snippet http-snippet server-snippet stream-snippet location-snippet custom-http-errors
proxy-body-size proxy-connect-timeout proxy-read-timeout proxy-send-timeout proxy-buffers-number proxy-buffer-size
proxy-busy-buffers-size proxy-cookie-path proxy-cookie-domain proxy-next-upstream proxy-next-upstream-timeout
proxy-next-upstream-tries proxy-redirect-from proxy-request-buffering ssl-redirect force-ssl-redirect denylist-source-range
whitelist-source-range skip-access-log-urls limit-rate limit-rate-after lua-shared-dicts http-redirect-code proxy-buffering
limit-req-status-code limit-conn-status-code enable-syslog syslog-host syslog-port no-tls-redirect-locations
global-allowed-response-headers global-auth-url global-auth-method global-auth-signin global-auth-signin-redirect-param
global-auth-response-headers global-auth-request-redirect global-auth-snippet global-auth-cache-key global-auth-cache-duration
no-auth-locations block-cidrs block-user-agents block-referers proxy-ssl-location-only default-type service-upstream
ssl-reject-handshake debug-connections strict-validate-path-type grpc-buffer-size-kb relative-redirects`)
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n")
	for _, k := range documented {
		fmt.Fprintf(&b, "  %s: %q\n", k, "x")
	}
	in, err := nginx.ReadInput([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	// Values of "x" are invalid for typed keys; Convert reports those by
	// key, and every other key must get a verdict that isn't unknown.
	invalid := map[string]bool{}
	res, err := nginx.Convert(in, nginx.Options{})
	for i := 0; err != nil && i < 5; i++ {
		for _, line := range strings.Split(err.Error(), "\n") {
			if k, _, ok := strings.Cut(line, ":"); ok {
				invalid[strings.TrimSpace(k)] = true
			}
		}
		// Convert again with the typed keys left out.
		for k := range invalid {
			delete(in.Data, k)
		}
		res, err = nginx.Convert(in, nginx.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(in.Data)) {
		entries := res.Report.Find(k)
		if len(entries) == 0 {
			t.Errorf("%s: no verdict", k)
		}
		for _, e := range entries {
			if e.Verdict == nginx.Unknown {
				t.Errorf("%s: unknown", k)
			}
		}
	}
	if len(invalid) < 20 {
		t.Errorf("only %d keys refused the value x: %v", len(invalid), invalid)
	}
}
