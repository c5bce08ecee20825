package nginx_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
)

// want is the one line a key must have: its verdict, and words of its
// detail.
type want struct {
	verdict nginx.Verdict
	detail  string
}

// A key that goes with another key that was not converted keeps its
// line, and says which key and why; each key has exactly one line.
func TestDependentKeysKeepTheirLines(t *testing.T) {
	otel := map[string]string{
		"enable-opentelemetry": "true", "otlp-collector-port": "4317", "otel-service-name": "edge",
		"otel-sampler": "TraceIdRatioBased", "otel-sampler-ratio": "0.1",
		"otel-sampler-parent-based": "false", "opentelemetry-trust-incoming-span": "true",
	}
	otelDependents := []string{"otlp-collector-port", "otel-service-name", "otel-sampler", "otel-sampler-ratio", "otel-sampler-parent-based", "opentelemetry-trust-incoming-span"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name string
		data map[string]string
		hops bool
		want map[string]want
		// otel, when set, is what every other key of the OpenTelemetry
		// block must say (not carried).
		otel string
	}{
		{
			name: "OpenTelemetry, the collector host a Helm placeholder",
			data: with(otel, "otlp-collector-host", "{{ .Values.otel.host }}"),
			want: map[string]want{
				"otlp-collector-host":  {nginx.NotSupported, "a template placeholder, not a host name"},
				"enable-opentelemetry": {nginx.NotSupported, "otlp-collector-host was refused (a template placeholder)"},
			},
			otel: "otlp-collector-host was refused (a template placeholder)",
		},
		{
			name: "OpenTelemetry, the collector host a shell placeholder",
			data: with(otel, "otlp-collector-host", "$HOST"),
			want: map[string]want{"otlp-collector-host": {nginx.NotSupported, "a template placeholder"}},
			otel: "otlp-collector-host was refused (a template placeholder)",
		},
		{
			name: "OpenTelemetry, the collector host an address",
			data: with(otel, "otlp-collector-host", "10.0.0.9"),
			want: map[string]want{"otlp-collector-host": {nginx.NotSupported, "is an address"}},
			otel: "otlp-collector-host was refused (an address, not a service name)",
		},
		{
			name: "OpenTelemetry, the collector host empty",
			data: with(otel, "otlp-collector-host", ""),
			want: map[string]want{
				"otlp-collector-host":  {nginx.NotSupported, "empty"},
				"enable-opentelemetry": {nginx.NotSupported, "no otlp-collector-host"},
			},
			otel: "enable-opentelemetry was not converted (no otlp-collector-host",
		},
		{
			name: "OpenTelemetry, no collector host",
			data: otel,
			otel: "enable-opentelemetry was not converted (no otlp-collector-host",
		},
		{
			name: "address ranges, one denying every client",
			data: map[string]string{"denylist-source-range": "0.0.0.0/0", "whitelist-source-range": "10.0.0.0/8", "block-cidrs": "198.51.100.0/24",
				"block-user-agents": "~*sqlmap", "block-referers": "~*spam"},
			want: map[string]want{
				"denylist-source-range":  {nginx.NotSupported, "0.0.0.0/0 denies every client"},
				"whitelist-source-range": {nginx.NotCarried, "denylist-source-range was refused (a range that denies every client)"},
				"block-cidrs":            {nginx.NotCarried, "denylist-source-range was refused"},
				// Not address ranges: converted as ever.
				"block-user-agents": {nginx.Converted, "ipAccess.denyUserAgents"},
				"block-referers":    {nginx.NotSupported, "Referer"},
			},
		},
		{
			name: "address ranges, two denying every client",
			data: map[string]string{"denylist-source-range": "::/0", "block-cidrs": "0.0.0.0/0", "whitelist-source-range": "10.0.0.0/8"},
			want: map[string]want{
				"denylist-source-range":  {nginx.NotSupported, "::/0 denies every client"},
				"block-cidrs":            {nginx.NotSupported, "0.0.0.0/0 denies every client"},
				"whitelist-source-range": {nginx.NotCarried, "denylist-source-range and block-cidrs were refused"},
			},
		},
		{
			name: "upstream keepalive off",
			data: map[string]string{"upstream-keepalive-connections": "0", "upstream-keepalive-requests": "100"},
			want: map[string]want{
				"upstream-keepalive-connections": {nginx.Converted, "upstream.maxRequestsPerConnection: 1"},
				"upstream-keepalive-requests":    {nginx.NotNeeded, "upstream-keepalive-connections is 0"},
			},
		},
		{
			name: "access log off by one key, on by the other",
			data: map[string]string{"disable-access-log": "true", "disable-http-access-log": "false", "access-log-path": "/dev/stdout"},
			want: map[string]want{
				"disable-access-log":      {nginx.Converted, "no accessLog section"},
				"disable-http-access-log": {nginx.NotNeeded, "disable-access-log is true"},
				"access-log-path":         {nginx.NotNeeded, "access logging is off"},
			},
		},
		{
			name: "access log on, escaping off",
			data: map[string]string{"disable-http-access-log": "false", "log-format-escape-json": "false", "log-format-upstream": `{"s": "$status"}`},
			want: map[string]want{
				"disable-http-access-log": {nginx.Converted, "HTTP requests are logged"},
				"log-format-escape-json":  {nginx.NotNeeded, "can't be told not to"},
			},
		},
		{
			name: "client address: both keys on, no --trusted-hops",
			data: map[string]string{"use-forwarded-headers": "true", "enable-real-ip": "true", "proxy-real-ip-cidr": "10.0.0.0/8"},
			want: map[string]want{
				"use-forwarded-headers": {nginx.NotSupported, "--trusted-hops"},
				"enable-real-ip":        {nginx.NotSupported, "not supported for the same reason"},
				"proxy-real-ip-cidr":    {nginx.NotSupported, "see use-forwarded-headers"},
			},
		},
		{
			name: "client address: one key on, the other off",
			data: map[string]string{"use-forwarded-headers": "true", "enable-real-ip": "false"},
			hops: true,
			want: map[string]want{
				"use-forwarded-headers": {nginx.Converted, "headers.xff.trustedHops"},
				"enable-real-ip":        {nginx.NotNeeded, "use-forwarded-headers true turns the same detection on"},
			},
		},
		{
			name: "TLS 1.3 only, with suites",
			data: map[string]string{"ssl-protocols": "TLSv1.3", "ssl-ciphers": "ECDHE-RSA-AES128-GCM-SHA256"},
			want: map[string]want{"ssl-ciphers": {nginx.NotNeeded, "with TLS 1.3 only"}},
		},
		{
			name: "suites and curves, some unknown",
			data: map[string]string{"ssl-ciphers": "ECDHE-RSA-AES128-GCM-SHA256:CAMELLIA-FOO-BAR", "ssl-ecdh-curve": "X25519:brainpool"},
			want: map[string]want{
				"ssl-ciphers":                  {nginx.Converted, "tls.cipherSuites"},
				"ssl-ciphers (not carried)":    {nginx.NotSupported, "CAMELLIA-FOO-BAR: not suites BoringSSL implements"},
				"ssl-ecdh-curve":               {nginx.Converted, "tls.ecdhCurves"},
				"ssl-ecdh-curve (not carried)": {nginx.NotSupported, "brainpool: not groups Envoy offers"},
			},
		},
		{
			name: "a header ConfigMap none of whose headers carries over",
			data: map[string]string{"add-headers": "ingress-nginx/custom-headers", "proxy-set-headers": "ingress-nginx/nothing"},
			want: map[string]want{
				"add-headers":       {nginx.NotSupported, "none of the headers of the ConfigMap ingress-nginx/custom-headers carried over"},
				"proxy-set-headers": {nginx.DefaultAlready, "holds no header"},
			},
		},
		{
			name: "block-user-agents, none RE2 can run",
			data: map[string]string{"block-user-agents": "~(?=x)"},
			want: map[string]want{"block-user-agents": {nginx.NotSupported, "none carried"}},
		},
		{
			name: "hide-headers naming no header",
			data: map[string]string{"hide-headers": ","},
			want: map[string]want{"hide-headers": {nginx.DefaultAlready, "names no header"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := nginx.Input{Name: "ingress-nginx-controller", Namespace: "ingress-nginx", Data: c.data, HeaderMaps: map[string]map[string]string{
				"ingress-nginx/custom-headers": {"X-Geo": "$geoip2_country_code"},
				"ingress-nginx/nothing":        {},
			}}
			var opts nginx.Options
			if c.hops {
				one := uint32(1)
				opts.TrustedHops = &one
			}
			res, err := nginx.Convert(in, opts)
			if err != nil {
				t.Fatal(err)
			}
			for k := range c.data {
				if n := len(res.Report.Find(k)); n != 1 {
					t.Errorf("%s has %d lines, want 1: %+v", k, n, res.Report.Find(k))
				}
			}
			wants := map[string]want{}
			if c.otel != "" {
				// Every other key of the block says the host was refused,
				// and why.
				for _, k := range otelDependents {
					wants[k] = want{nginx.NotCarried, c.otel}
				}
			}
			for k, w := range c.want {
				wants[k] = w
			}
			for k, w := range wants {
				e := res.Report.Find(k)
				if len(e) != 1 || e[0].Verdict != w.verdict || !strings.Contains(e[0].Detail, w.detail) {
					t.Errorf("%s: %+v, want one line %q with %q", k, e, w.verdict, w.detail)
				}
			}
			if c.otel != "" && strings.Contains(string(res.Document), "tracing") {
				t.Errorf("a tracing section without a collector:\n%s", res.Document)
			}
			// Every key not carried makes the conversion incomplete
			// (exit 5).
			for _, e := range res.Report.Entries {
				if e.Verdict == nginx.NotCarried && !containsEntry(res.Report.NotConverted(), e) {
					t.Errorf("%s: not carried, yet not counted as not converted", e.Key)
				}
			}
		})
	}
}

func containsEntry(es []nginx.Entry, e nginx.Entry) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// The report shows the group's title for keys not carried.
func TestNotCarriedTitle(t *testing.T) {
	var r nginx.Report
	r.AddValue("otlp-collector-port", "4317", nginx.NotCarried, "otlp-collector-host was refused (a template placeholder)")
	var b strings.Builder
	r.Write(&b)
	if want := "not carried (a key it depends on was not converted):\n  otlp-collector-port = 4317: otlp-collector-host was refused (a template placeholder)\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
