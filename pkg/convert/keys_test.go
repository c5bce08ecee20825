package convert_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/convert/higress"
	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
)

// The property of both converters' reports: a verdict for every key of
// the input, always, and one only.
//
// What a key is:
//   - ingress-nginx: each data key of the controller's ConfigMap has
//     exactly one line under its own name (a part of a key that did not
//     carry over may have a line of its own, "KEY (…)"); each entry of a
//     header ConfigMap that add-headers or proxy-set-headers names has at
//     most one line of its own ("add-headers: NAME"), and one without is
//     named in its key's converted line; no name has two lines, defaults
//     and the report's own lines ("(client address)") included.
//   - Higress: what higress.InputKeys lists: every key of the document
//     Higress reads that holds no keys of its own (null included), each
//     section written null or empty, mcpServer whole, every key Higress
//     does not know (by path, not looked into), mesh's keys, meshNetworks,
//     any other data key of the ConfigMap, and the higress: wrapper. Each
//     has exactly as many lines as the input has keys of that name (one,
//     unless two places of the input print the same name), and a section
//     with keys of its own (downstream) at most one.
//
// And a line never shows a value that may be a secret: snippets (and keys
// that look like them), TLS ticket keys, Higress's mcpServer and access
// tokens.

// nginxKeyProblems returns how r breaks the property for in.
func nginxKeyProblems(in nginx.Input, r nginx.Report) []string {
	var probs []string
	count := map[string]int{}
	for _, e := range r.Entries {
		count[e.Key]++
	}
	for _, k := range slices.Sorted(maps.Keys(in.Data)) {
		if count[k] != 1 {
			probs = append(probs, fmt.Sprintf("key %q has %d lines, want 1", k, count[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(count)) {
		if count[k] > 1 {
			probs = append(probs, fmt.Sprintf("%q has %d lines", k, count[k]))
		}
	}
	for _, key := range []string{"add-headers", "proxy-set-headers"} {
		ref, ok := in.Data[key]
		if ref = strings.TrimSpace(ref); !ok || ref == "" {
			continue
		}
		if !strings.Contains(ref, "/") {
			ref = in.Namespace + "/" + ref
		}
		m, ok := in.HeaderMaps[ref]
		if !ok {
			continue
		}
		// The converted line names the headers written: "→ PATH (a, b): …".
		written := map[string]bool{}
		for _, e := range r.Find(key) {
			if _, rest, ok := strings.Cut(e.Detail, " ("); e.Verdict == nginx.Converted && ok {
				names, _, _ := strings.Cut(rest, "): ")
				for _, n := range strings.Split(names, ", ") {
					written[n] = true
				}
			}
		}
		for name := range m {
			if own := count[key+": "+name]; own == 0 && !written[strings.ToLower(name)] {
				probs = append(probs, fmt.Sprintf("%s: %s has no line and is not named as written", key, name))
			}
		}
	}
	for k, v := range in.Data {
		if !mayBeSecret(k) {
			continue
		}
		for _, e := range r.Find(k) {
			if e.Value != "" && !(e.Value == `""` && strings.TrimSpace(v) == "") {
				probs = append(probs, fmt.Sprintf("key %q: its value is shown", k))
			}
		}
		if v = strings.TrimSpace(v); len(v) < 8 || sharedValue(in, k, v) {
			continue
		}
		for _, e := range r.Entries {
			if strings.Contains(e.Value, v) || strings.Contains(e.Detail, v) {
				probs = append(probs, fmt.Sprintf("key %q: its value is shown in the line of %q", k, e.Key))
			}
		}
	}
	return probs
}

// mayBeSecret reports whether an ingress-nginx key's value may be a
// secret, by the rules the converter follows.
func mayBeSecret(key string) bool {
	k := strings.ToLower(key)
	if k == "allow-snippet-annotations" { // true or false
		return false
	}
	return strings.Contains(k, "snip") || strings.Contains(k, "snpp") || strings.Contains(k, "ticket-key")
}

// sharedValue reports whether another key or header of in holds v too,
// so that v in the report may be theirs.
func sharedValue(in nginx.Input, key, v string) bool {
	for k, w := range in.Data {
		if k != key && strings.Contains(w, v) {
			return true
		}
	}
	for _, m := range in.HeaderMaps {
		for _, w := range m {
			if strings.Contains(w, v) {
				return true
			}
		}
	}
	return false
}

// higressKeyProblems returns how r breaks the property for in.
func higressKeyProblems(in higress.Input, r higress.Report) []string {
	keys, sections, err := higress.InputKeys(in)
	if err != nil {
		return []string{"InputKeys: " + err.Error()}
	}
	var probs []string
	count := map[string]int{}
	for _, e := range r.Entries {
		count[e.Key]++
	}
	want := map[string]int{}
	for _, k := range keys {
		want[k]++
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if count[k] != want[k] {
			probs = append(probs, fmt.Sprintf("key %q has %d lines, want %d", k, count[k], want[k]))
		}
	}
	for _, k := range sections {
		if count[k] > 1 {
			probs = append(probs, fmt.Sprintf("section %q has %d lines, want at most 1", k, count[k]))
		}
	}
	for _, e := range r.Entries {
		if (e.Key == "mcpServer" || strings.HasSuffix(e.Key, ".access_token")) && e.Value != "" {
			probs = append(probs, fmt.Sprintf("%s: a secret's value is shown", e.Key))
		}
	}
	return probs
}

// fuzzCorpus returns the inputs of a fuzz target's seed corpus files
// (testdata/fuzz/NAME), in go test fuzz v1's format.
func fuzzCorpus(t *testing.T, name string) [][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata/fuzz", name, "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no corpus for %s: %v", name, err)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a []byte corpus entry", p)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, []byte(s))
	}
	return out
}

func readFiles(t *testing.T, globs ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, g := range globs {
		paths, _ := filepath.Glob(g)
		if len(paths) == 0 {
			t.Fatalf("no file matches %s", g)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

// nginxOptions are the option sets every ingress-nginx input is
// converted with: the defaults, and hops with --no-nginx-defaults.
func nginxOptions() []nginx.Options {
	one := uint32(1)
	return []nginx.Options{{}, {TrustedHops: &one, NoDefaults: true}}
}

// tally counts the conversions a property test checked.
type tally struct{ reports, refusals int }

func (n *tally) String() string {
	return fmt.Sprintf("%d reports checked, %d inputs refused", n.reports, n.refusals)
}

// checkNginx converts in with each option set and holds the report to
// the property; a refusal must name keys of the input only.
func checkNginx(t *testing.T, name string, in nginx.Input, n *tally) {
	t.Helper()
	for _, opts := range nginxOptions() {
		res, err := nginx.Convert(in, opts)
		if err != nil {
			n.refusals++
			for _, p := range fielderr.Flatten(err) {
				if _, ok := in.Data[p.Path]; !ok {
					t.Errorf("%s: a refusal names %q, no key of the input: %v", name, p.Path, p.Msg)
				}
			}
			continue
		}
		n.reports++
		if probs := nginxKeyProblems(in, res.Report); len(probs) > 0 {
			t.Errorf("%s (hops %v, no defaults %v):\n  %s", name, opts.TrustedHops != nil, opts.NoDefaults, strings.Join(probs, "\n  "))
		}
	}
}

func checkHigress(t *testing.T, name string, in higress.Input, n *tally) {
	t.Helper()
	res, err := higress.Convert(in, higress.Options{})
	if err != nil {
		n.refusals++
		return
	}
	n.reports++
	if probs := higressKeyProblems(in, res.Report); len(probs) > 0 {
		t.Errorf("%s:\n  %s\n%s", name, strings.Join(probs, "\n  "), in.Higress)
	}
}

// Every input of the converters' testdata and seed corpora.
func TestEveryKeyOneLineFiles(t *testing.T) {
	var ng, hg tally
	for i, b := range append(readFiles(t, "nginx/testdata/*.in.yaml"), fuzzCorpus(t, "FuzzConvertNginx")...) {
		in, err := nginx.ReadInput(b)
		if err != nil {
			ng.refusals++
			continue
		}
		checkNginx(t, fmt.Sprintf("ingress-nginx input %d", i), in, &ng)
	}
	for i, b := range append(readFiles(t, "../../docs/examples/higress-config.yaml", "higress/testdata/*.yaml"), fuzzCorpus(t, "FuzzConvertHigress")...) {
		in, err := higress.ReadInput(b)
		if err != nil {
			hg.refusals++
			continue
		}
		checkHigress(t, fmt.Sprintf("Higress input %d", i), in, &hg)
	}
	t.Logf("ingress-nginx: %v; Higress: %v", &ng, &hg)
	if ng.reports < 12 || hg.reports < 2 {
		t.Errorf("too few reports: ingress-nginx %v, Higress %v", &ng, &hg)
	}
}

// validNginx is a value ingress-nginx reads for each key the converter
// reads by value; every other key takes any text ("x").
var validNginx = map[string]string{
	"proxy-body-size": "8m", "proxy-request-buffering": "on", "large-client-header-buffers": "4 16k",
	"use-forwarded-headers": "true", "enable-real-ip": "true", "forwarded-for-header": "X-Forwarded-For", "proxy-real-ip-cidr": "10.0.0.0/8",
	"compute-full-forwarded-for": "true", "use-proxy-protocol": "false",
	"ssl-protocols": "TLSv1.2 TLSv1.3", "ssl-ciphers": "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384", "ssl-ecdh-curve": "X25519:prime256v1",
	"hsts": "true", "hsts-max-age": "31536000", "hsts-include-subdomains": "true", "hsts-preload": "false",
	"server-tokens": "false", "hide-headers": "X-Powered-By", "add-headers": "ingress-nginx/response-headers", "proxy-set-headers": "ingress-nginx/request-headers",
	"allow-backend-server-header": "false",
	"proxy-connect-timeout":       "5", "proxy-read-timeout": "60", "proxy-send-timeout": "60", "client-header-timeout": "60", "client-body-timeout": "60",
	"keep-alive": "75", "keep-alive-requests": "1000", "upstream-keepalive-timeout": "60", "upstream-keepalive-requests": "1000",
	"upstream-keepalive-connections": "320", "http2-max-concurrent-streams": "128",
	"use-gzip": "true", "gzip-level": "5", "gzip-min-length": "256", "gzip-types": "application/json text/css",
	"enable-brotli": "true", "brotli-level": "4", "brotli-min-length": "20", "brotli-types": "application/json",
	"log-format-upstream": `$remote_addr "$request" $status`, "log-format-escape-json": "false", "disable-access-log": "false",
	"disable-http-access-log": "false", "access-log-path": "/var/log/nginx/access.log", "http-access-log-path": "/dev/stdout",
	"enable-opentelemetry": "true", "otlp-collector-host": "otel-collector.observability", "otlp-collector-port": "4317",
	"otel-service-name": "edge", "otel-sampler": "TraceIdRatioBased", "otel-sampler-ratio": "0.1",
	"otel-sampler-parent-based": "true", "opentelemetry-trust-incoming-span": "true",
	"custom-http-errors": "404,503", "disable-proxy-intercept-errors": "false", "limit-req-status-code": "429", "limit-conn-status-code": "429",
	"whitelist-source-range": "10.0.0.0/8", "denylist-source-range": "203.0.113.0/24", "block-cidrs": "198.51.100.0/24",
	"block-user-agents": "~*sqlmap", "block-referers": "~*spam",
	"generate-request-id": "true", "enable-underscores-in-headers": "false", "ignore-invalid-headers": "true", "allow-snippet-annotations": "false",
	"main-snippet": "location /x { return 200; }", "server-snippet": "location /x { return 200; }",
	"global-auth-url": "http://oauth2-proxy.auth.svc.cluster.local:4180/oauth2/auth", "global-auth-method": "GET",
	"global-auth-signin": "https://$host/oauth2/start?rd=$escaped_request_uri", "global-auth-signin-redirect-param": "rd",
	"global-auth-response-headers": "X-Auth-Request-User, X-Auth-Request-Email", "global-auth-request-redirect": "$request_uri",
	"global-auth-cache-key": "$remote_user$http_authorization", "global-auth-cache-duration": "200 202 401 5m",
	"global-auth-always-set-cookie": "true", "no-auth-locations": "/.well-known/acme-challenge,/healthz",
}

// moreNginx are other values ingress-nginx reads, each taking another
// path through the converter: the ones that refuse or drop part of a
// key, or change what other keys mean.
var moreNginx = map[string][]string{
	"use-proxy-protocol":             {"true"},
	"use-forwarded-headers":          {"false"},
	"enable-real-ip":                 {"false"},
	"forwarded-for-header":           {"CF-Connecting-IP", "X-Real-IP"},
	"proxy-body-size":                {"0", "5g"},
	"proxy-request-buffering":        {"off"},
	"ssl-protocols":                  {"TLSv1.3", "TLSv1 TLSv1.2", "SSLv3"},
	"ssl-ciphers":                    {"HIGH:!aNULL", "ECDHE-RSA-AES128-GCM-SHA256:HIGH:!aNULL", "ECDHE-RSA-AES128-GCM-SHA256:CAMELLIA-FOO-BAR", "CAMELLIA-FOO-BAR", "DHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA"},
	"ssl-ecdh-curve":                 {"auto", "X25519:brainpool", "brainpool"},
	"hsts":                           {"false"},
	"hsts-preload":                   {"true"},
	"server-tokens":                  {"true"},
	"allow-backend-server-header":    {"true"},
	"hide-headers":                   {",", "Server", "bad header"},
	"add-headers":                    {"ingress-nginx/not-given", "ingress-nginx/empty-headers", "ingress-nginx/refused-headers"},
	"proxy-set-headers":              {"ingress-nginx/response-headers", "ingress-nginx/refused-headers"},
	"keep-alive":                     {"0"},
	"upstream-keepalive-connections": {"0"},
	"use-gzip":                       {"false"},
	"gzip-types":                     {"*", "not/a/type; x", "Text/HTML;charset"},
	"enable-brotli":                  {"false"},
	"log-format-upstream":            {`$remote_user $status`, `{"status": $status, "user": "$remote_user"}`},
	"log-format-escape-json":         {"true"},
	"disable-access-log":             {"true"},
	"disable-http-access-log":        {"true"},
	"http-access-log-path":           {"/var/log/http.log"},
	"enable-opentelemetry":           {"false"},
	"otlp-collector-host":            {"10.0.0.9", "otel.example.com"},
	"otel-sampler":                   {"AlwaysOn", "AlwaysOff"},
	"otel-sampler-parent-based":      {"false"},
	"whitelist-source-range":         {"0.0.0.0/0", "10.0.0.0/8,10.1.0.0/16"},
	"denylist-source-range":          {"0.0.0.0/0", "::/0"},
	"block-cidrs":                    {"0.0.0.0/0"},
	"block-user-agents":              {"~(?=x)", "~(?=x),~*sqlmap", ","},
	"generate-request-id":            {"false"},
	"enable-underscores-in-headers":  {"true"},
	"ignore-invalid-headers":         {"false"},
	"allow-snippet-annotations":      {"true"},
	"ssl-session-ticket-key":         {"c2VjcmV0LXRpY2tldC1rZXktdmFsdWU="},
	"global-auth-url":                {"http://10.0.0.5/auth", "http://auth:8080/verify", "https://auth.example.com/", "http://auth.auth.svc/?a=1"},
	"global-auth-signin":             {"https://$host/oauth2/start?rd=$no_such_variable", "/oauth2/sign_in", "https://login.example.com/"},
	"global-auth-always-set-cookie":  {"false"},
	"global-auth-cache-key":          {""},
	"no-auth-locations":              {"", "/,/a%2F,/b/", "/oauth2"},
}

// Placeholders a templating tool leaves when a value was not substituted.
var placeholders = []string{"$PLACEHOLDER", "{{ .Values.controller.placeholder }}"}

// headerMaps are the header ConfigMaps every generated input carries.
func headerMaps() map[string]map[string]string {
	return map[string]map[string]string{
		"ingress-nginx/response-headers": {"X-Frame-Options": "DENY", "X-Served-By": "$hostname", "x-frame-options": "SAMEORIGIN",
			"X-Geo": "$geoip2_country_code", "Bad Name": "v"},
		"ingress-nginx/request-headers": {"X-Request-Start": "t=${msec}", "X-Tenant": "edge"},
		"ingress-nginx/empty-headers":   {},
		"ingress-nginx/refused-headers": {"X-Geo": "$geoip2_country_code"},
	}
}

func nginxInput(data map[string]string) nginx.Input {
	return nginx.Input{Name: "ingress-nginx-controller", Namespace: "ingress-nginx", Data: data, HeaderMaps: headerMaps()}
}

// Generated ConfigMaps: every key the converter knows, with a valid
// value, others that take other paths, an invalid value, template
// placeholders and empty, alone and among every other key with a valid
// value, and a few unknown and look-alike keys.
func TestEveryKeyOneLineGenerated(t *testing.T) {
	known := nginx.KnownKeys()
	if len(known) < 200 {
		t.Fatalf("nginx.KnownKeys: %d keys", len(known))
	}
	valid := func(k string) string {
		if v, ok := validNginx[k]; ok {
			return v
		}
		return "x"
	}
	full := map[string]string{}
	for _, k := range known {
		full[k] = valid(k)
	}
	var n tally
	// The valid values are valid: alone, and all together.
	for _, data := range []map[string]string{full} {
		if _, err := nginx.Convert(nginxInput(maps.Clone(data)), nginx.Options{}); err != nil {
			t.Fatalf("every key with a valid value is refused: %v", err)
		}
	}
	for _, k := range known {
		if _, err := nginx.Convert(nginxInput(map[string]string{k: valid(k)}), nginx.Options{}); err != nil {
			t.Errorf("%s: %q alone is refused: %v", k, valid(k), err)
		}
		values := append([]string{valid(k), "!invalid!", ""}, placeholders...)
		values = append(values, moreNginx[k]...)
		for _, v := range values {
			checkNginx(t, fmt.Sprintf("%s=%q alone", k, v), nginxInput(map[string]string{k: v}), &n)
			data := maps.Clone(full)
			data[k] = v
			checkNginx(t, fmt.Sprintf("%s=%q among the others", k, v), nginxInput(data), &n)
		}
	}
	for _, k := range []string{"proxy-conect-timeout", "client-max-body-size", "Server-Snippet", "server-snipet", "made-up-key"} {
		for _, v := range []string{"location / { secret-token-value; }", ""} {
			checkNginx(t, fmt.Sprintf("%s=%q", k, v), nginxInput(map[string]string{k: v}), &n)
			data := maps.Clone(full)
			data[k] = v
			checkNginx(t, fmt.Sprintf("%s=%q among the others", k, v), nginxInput(data), &n)
		}
	}
	// A value that doesn't parse anywhere refuses the whole input;
	// the rest must still be reports.
	t.Logf("ingress-nginx, %d known keys: %v", len(known), &n)
	if n.reports < 4*len(known) {
		t.Errorf("only %v", &n)
	}

	var h tally
	for name, doc := range generatedHigress(t) {
		checkHigress(t, name, higress.Input{Higress: doc}, &h)
		// The same document in a ConfigMap, beside mesh keys and a
		// data key Higress does not read.
		cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: higress-config, namespace: higress-system}\ndata:\n  higress: " +
			strconv.Quote(doc) + "\n  mesh: \"accessLogFile: /dev/stdout\\n\"\n  meshNetworks: \"\"\n  hgress: x\n"
		in, err := higress.ReadInput([]byte(cm))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkHigress(t, name+" in a ConfigMap", in, &h)
	}
	for _, src := range []string{
		"apiVersion: v1\nkind: ConfigMap\ndata:\n  higress: \"\"\n  mesh: \"{}\"\n",
		"apiVersion: v1\nkind: ConfigMap\ndata:\n  higress: \"gzip: {}\"\n  mesh: \"\"\n",
		"apiVersion: v1\nkind: ConfigMap\ndata:\n  higress: \"tracing: null\"\n  mesh: \"[not, a, mapping]\"\n",
		"higress:\n  downstream: {}\n  higress: {}\n",
	} {
		in, err := higress.ReadInput([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		checkHigress(t, src, in, &h)
	}
	t.Logf("Higress: %v", &h)
	if h.reports < 100 {
		t.Errorf("only %v", &h)
	}
}

// higressFull is a document with every key Higress reads, each valid;
// tracing is off, so the three backends may be there together.
const higressFull = `
tracing:
  enable: false
  sampling: 50
  timeout: 500
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: "9411"}
  skywalking: {service: oap.op-system.svc.cluster.local, port: "11800", access_token: sky-s3cret-token}
  opentelemetry: {service: otel.observability.svc.cluster.local, port: "4317"}
gzip:
  enable: true
  minContentLength: 1024
  contentType: [text/html, application/json]
  disableOnEtagHeader: true
  memoryLevel: 5
  windowBits: 12
  chunkSize: 8192
  compressionLevel: BEST_SPEED
  compressionStrategy: DEFAULT_STRATEGY
downstream:
  idleTimeout: 60
  maxRequestHeadersKb: 60
  connectionBufferLimits: 32768
  routeTimeout: 0
  http2: {maxConcurrentStreams: 100, initialStreamWindowSize: 65535, initialConnectionWindowSize: 1048576}
upstream: {idleTimeout: 10, connectionBufferLimits: 10485760}
disableXEnvoyHeaders: true
addXRealIpHeader: true
mcpServer: {enable: true, redis: {address: "redis:6379", password: mcp-s3cret-password}}
`

// moreHigress are other values Higress reads that take other paths.
var moreHigress = map[string][]any{
	"tracing.enable":                  {true},
	"tracing.sampling":                {0.05},
	"gzip.enable":                     {false},
	"gzip.contentType":                {[]any{"not a type"}, []any{"Text/HTML", "application/json; charset=utf-8"}},
	"gzip.chunkSize":                  {100, 4096},
	"disableXEnvoyHeaders":            {false},
	"addXRealIpHeader":                {false},
	"downstream.routeTimeout":         {30},
	"tracing.skywalking.access_token": {""},
}

// generatedHigress returns documents, by name: each key of higressFull
// with its value, other values, an invalid one, a placeholder, empty and
// null, alone and in higressFull, and with tracing on with each backend
// alone; each section null and empty; unknown keys.
func generatedHigress(t *testing.T) map[string]string {
	t.Helper()
	var full map[string]any
	if err := sigsyaml.Unmarshal([]byte(higressFull), &full); err != nil {
		t.Fatal(err)
	}
	var leaves, sections []string
	var walk func(m map[string]any, prefix string)
	walk = func(m map[string]any, prefix string) {
		for k, v := range m {
			path := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok && path != "mcpServer" {
				sections = append(sections, path)
				walk(sub, path)
				continue
			}
			leaves = append(leaves, path)
		}
	}
	walk(full, "")
	docs := map[string]string{}
	add := func(name string, base map[string]any, path string, v any) {
		doc := clone(t, base)
		set(doc, path, v)
		b, err := sigsyaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		docs[name] = string(b)
	}
	// tracing on, with each backend alone.
	bases := map[string]map[string]any{"alone": {}, "in the full document": full}
	for _, backend := range []string{"zipkin", "skywalking", "opentelemetry"} {
		on := clone(t, full)
		tr := on["tracing"].(map[string]any)
		tr["enable"] = true
		for _, other := range []string{"zipkin", "skywalking", "opentelemetry"} {
			if other != backend {
				delete(tr, other)
			}
		}
		bases["with tracing to "+backend] = on
	}
	for baseName, base := range bases {
		for _, path := range leaves {
			values := []any{get(full, path), "!invalid!", "", nil}
			for _, p := range placeholders {
				values = append(values, p)
			}
			values = append(values, moreHigress[path]...)
			for i, v := range values {
				add(fmt.Sprintf("%s=%v (%d) %s", path, v, i, baseName), base, path, v)
			}
		}
		for _, path := range sections {
			add(path+": null "+baseName, base, path, nil)
			add(path+": {} "+baseName, base, path, map[string]any{})
		}
		add("unknown keys "+baseName, base, "gizp", map[string]any{"enable": true})
		add("an unknown nested key "+baseName, base, "downstream.idleTimeot", 5)
	}
	return docs
}

func clone(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := sigsyaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := sigsyaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func get(m map[string]any, path string) any {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		m = m[p].(map[string]any)
	}
	return m[parts[len(parts)-1]]
}

// set sets path in m, making the sections on the way.
func set(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[p] = sub
		}
		m = sub
	}
	m[parts[len(parts)-1]] = v
}
