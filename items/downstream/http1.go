package downstream

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	preservecasev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/header_formatters/preserve_case/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// PreserveCase is the name of Envoy's stateful header formatter that keeps
// the case HTTP/1 header names arrived in.
const PreserveCase = "envoy.http.stateful_header_formatters.preserve_case"

// HTTP1 is the `http1` sub-section: how the HTTP/1 codec treats clients.
// Each key sets a field of the connection manager's http_protocol_options.
// Only true can be set: false is Envoy's default, which an EnvoyFilter
// MERGE leaves alone, so a false here would say something it can't do.
type HTTP1 struct {
	AcceptHTTP10       *bool  `json:"acceptHttp10" doc:"Serve HTTP/1.0 requests instead of answering 426 (http_protocol_options.accept_http_10). Only true can be set."`
	DefaultHost        string `json:"defaultHost" doc:"The Host given to an HTTP/1.0 request that carries none, routed as if the client had sent it: a host name, optionally with :port (http_protocol_options.default_host_for_http_10). Only with acceptHttp10; without it such a request is answered 400."`
	PreserveHeaderCase *bool  `json:"preserveHeaderCase" doc:"Send HTTP/1 header names on in the case the client wrote them, not lower-cased (http_protocol_options.header_key_format, the preserve_case stateful formatter). Only true can be set."`
	EnableTrailers     *bool  `json:"enableTrailers" doc:"Pass HTTP/1 chunked trailers on instead of dropping them (http_protocol_options.enable_trailers). Only true can be set."`
}

// Texts implements items.Texter: the default host is a host name that
// routes, as a request's :authority.
func (*Downstream) Texts() []items.Text {
	return []items.Text{{Path: "http1.defaultHost", Kind: items.TextHostName}}
}

// validate records the problems of the http1 keys, at paths below http1.
func (h *HTTP1) validate(p *items.Problems) {
	if h == nil {
		return
	}
	onlyTrue := func(key string, b *bool, why string) {
		if b != nil && !*b {
			p.Addf("http1."+key, "only true can be set by an EnvoyFilter; false is Envoy's default, which a merge leaves as it is (%s): remove the key", why)
		}
	}
	onlyTrue("acceptHttp10", h.AcceptHTTP10, "Istio turns HTTP/1.0 on at a gateway only with istiod's PILOT_HTTP10=1 or the proxy's ISTIO_META_HTTP10=1")
	onlyTrue("preserveHeaderCase", h.PreserveHeaderCase, "Istio turns it on with ProxyConfig proxyHeaders.preserveHttp1HeaderCase")
	onlyTrue("enableTrailers", h.EnableTrailers, "trailers are dropped unless it is on")
	if h.DefaultHost != "" {
		if msg := checkDefaultHost(h.DefaultHost); msg != "" {
			p.Addf("http1.defaultHost", "must be a host name, optionally with a port (www.example.com, www.example.com:8080): %s", msg)
		}
		if h.AcceptHTTP10 == nil || !*h.AcceptHTTP10 {
			p.Addf("http1.defaultHost", "only applies with acceptHttp10: true (Envoy answers 426 to HTTP/1.0 otherwise, whatever the default host); set acceptHttp10: true, or remove defaultHost")
		}
	}
}

// checkDefaultHost is "" for a host name Envoy can route, optionally with
// a port, else what is wrong with it.
func checkDefaultHost(s string) string {
	host := s
	if strings.Contains(s, ":") {
		h, port, err := net.SplitHostPort(s)
		if err != nil {
			return "it is neither a host name nor host:port"
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %q is not between 1 and 65535", port)
		}
		host = h
	}
	if strings.HasSuffix(host, ".") {
		return "it ends in a dot, which no route's domain has (hardening.stripTrailingHostDot strips it from what clients send)"
	}
	if strings.Contains(host, "*") {
		return "a wildcard is a pattern for routes, not a host a request can carry"
	}
	// Host names compare ignoring case.
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(msgs) > 0 {
		return strings.Join(msgs, "; ")
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) > validation.DNS1123LabelMaxLength {
			return fmt.Sprintf("a label of %d characters; DNS takes at most %d", len(label), validation.DNS1123LabelMaxLength)
		}
	}
	return ""
}

// warnings records what the http1 keys may do that the author did not
// mean.
func (h *HTTP1) warnings(p *items.Problems) {
	if h != nil && h.AcceptHTTP10 != nil && *h.AcceptHTTP10 && h.DefaultHost == "" {
		p.Addf("http1.acceptHttp10", "HTTP/1.0 requests without a Host header (load balancers' health checks often send none) are answered 400, as Envoy routes only by host; set defaultHost to the host they should be routed as")
	}
	if at := h.clusterKey(); at != "" {
		p.Addf(at, "sets the HTTP/1 options of every cluster the proxy sends to, and Istio replaces a cluster's HTTP protocol options whole: a DestinationRule's connectionPool.http idleTimeout, maxRequestsPerConnection and h2UpgradePolicy no longer apply there, and a service Istio would reach over HTTP/2 (a grpc or http2 port) is reached in the protocol the client used")
	}
}

// clusterKey is the first key that makes the http1 keys set the clusters'
// HTTP/1 options too, "" when none does.
func (h *HTTP1) clusterKey() string {
	switch {
	case h == nil:
		return ""
	case h.EnableTrailers != nil && *h.EnableTrailers:
		return "http1.enableTrailers"
	case h.PreserveHeaderCase != nil && *h.PreserveHeaderCase:
		return "http1.preserveHeaderCase"
	}
	return ""
}

// Claims implements items.Sharer: enableTrailers and preserveHeaderCase
// set the HTTP protocol options of the clusters.
func (d *Downstream) Claims() []items.Claim {
	h := d.HTTP1
	if h == nil {
		return nil
	}
	var out []items.Claim
	if h.EnableTrailers != nil && *h.EnableTrailers {
		out = append(out, items.Claim{Field: items.ClusterHTTPProtocolOptions, Path: "http1.enableTrailers"})
	}
	if h.PreserveHeaderCase != nil && *h.PreserveHeaderCase {
		out = append(out, items.Claim{Field: items.ClusterHTTPProtocolOptions, Path: "http1.preserveHeaderCase"})
	}
	return out
}

// Exclusions implements items.Sharer: another item's HTTP protocol options
// on the same clusters would replace these, or these them.
func (*Downstream) Exclusions() []items.Exclusion {
	return []items.Exclusion{{Field: items.ClusterHTTPProtocolOptions, Other: items.ClusterHTTPProtocolOptions,
		Why: "Istio replaces a cluster's HTTP protocol options whole, so the EnvoyFilter applied last would silently undo the other's settings; keep one of them"}}
}

// protocolOptions is the connection manager's http_protocol_options the
// keys set; nil when none is set.
func (h *HTTP1) protocolOptions() (*corev3.Http1ProtocolOptions, error) {
	if h == nil {
		return nil, nil
	}
	o := &corev3.Http1ProtocolOptions{
		AcceptHttp_10:  h.AcceptHTTP10 != nil && *h.AcceptHTTP10,
		EnableTrailers: h.EnableTrailers != nil && *h.EnableTrailers,
	}
	if o.AcceptHttp_10 {
		o.DefaultHostForHttp_10 = h.DefaultHost
	}
	if h.PreserveHeaderCase != nil && *h.PreserveHeaderCase {
		formatter, err := envoyfilter.Any(&preservecasev3.PreserveCaseFormatterConfig{})
		if err != nil {
			return nil, fmt.Errorf("pack the preserve_case formatter: %w", err)
		}
		o.HeaderKeyFormat = &corev3.Http1ProtocolOptions_HeaderKeyFormat{
			HeaderFormat: &corev3.Http1ProtocolOptions_HeaderKeyFormat_StatefulFormatter{
				StatefulFormatter: &corev3.TypedExtensionConfig{Name: PreserveCase, TypedConfig: formatter},
			},
		}
	}
	if !o.AcceptHttp_10 && !o.EnableTrailers && o.HeaderKeyFormat == nil {
		return nil, nil
	}
	return o, nil
}

// patches are the merges the http1 keys make: one into the connection
// manager (the codec that reads clients' requests and writes their
// responses) and, for trailers and header case, one into every cluster
// (the codec that writes requests to services and reads their
// responses); none when no key is set.
//
// Envoy's HTTP/1 codecs drop trailers unless each is told to pass them, so
// a trailer crosses the proxy only when both the connection manager and
// the cluster enable them. Header case is read by the connection manager's
// formatter, and the request carries it to the service; a service's
// response keeps its case only with the formatter on the cluster too.
func (h *HTTP1) patches() ([]envoyfilter.Patch, error) {
	o, err := h.protocolOptions()
	if err != nil || o == nil {
		return nil, err
	}
	hcm, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{HttpProtocolOptions: o})
	if err != nil {
		return nil, fmt.Errorf("http1: %w", err)
	}
	patches := []envoyfilter.Patch{hcm}
	if h.clusterKey() == "" {
		return patches, nil
	}
	// Istio replaces the typed options entry whole, so it must say how to
	// speak to the service too: in the client's protocol, as the upstream
	// item's options do.
	opts, err := envoyfilter.Any(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &corev3.Http1ProtocolOptions{EnableTrailers: o.EnableTrailers, HeaderKeyFormat: o.HeaderKeyFormat},
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("http1: pack the clusters' protocol options: %w", err)
	}
	return append(patches, envoyfilter.MergeClusters(&clusterv3.Cluster{
		TypedExtensionProtocolOptions: map[string]*anypb.Any{envoyfilter.HTTPProtocolOptionsKey: opts},
	})), nil
}
