// Package clientip is the `clientIP` item: where the gateway learns the
// client's address. It reads the PROXY protocol header a TCP load balancer
// sends, and, for sidecars, trusts X-Forwarded-For from proxies in given
// CIDRs or takes the address from a header a CDN sets.
package clientip

import (
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	customheaderv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/custom_header/v3"
	xffv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/xff/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "clientIP"

// The filter and extension names the item configures.
const (
	ProxyProtocolFilter = "envoy.filters.listener.proxy_protocol"
	XFFDetection        = "envoy.http.original_ip_detection.xff"
	HeaderDetection     = "envoy.http.original_ip_detection.custom_header"
)

// MaxTrustedCIDRs bounds trustedCIDRs: Envoy walks the list for every
// X-Forwarded-For entry of every request, and a CDN publishes a few dozen
// ranges at most.
const MaxTrustedCIDRs = 256

// ClientIP is the `clientIP` section.
type ClientIP struct {
	items.Toggle
	ProxyProtocol         bool     `json:"proxyProtocol" doc:"Read the PROXY protocol (v1 or v2) header a TCP load balancer sends before each connection, so the client address is the one it names (envoy.filters.listener.proxy_protocol). Gateways only."`
	ProxyProtocolOptional bool     `json:"proxyProtocolOptional" doc:"Also accept connections that carry no PROXY header (allow_requests_without_proxy_protocol); by default they are closed."`
	TrustedCIDRs          []string `json:"trustedCIDRs" doc:"Proxies whose X-Forwarded-For entries are trusted, by address range: the client address is the rightmost entry outside these ranges (xff original IP detection, xff_trusted_cidrs). Sidecars (SIDECAR_INBOUND) only."`
	Header                string   `json:"header" doc:"Take the client address from this request header, e.g. cf-connecting-ip (custom_header original IP detection); tried before trustedCIDRs. Sidecars (SIDECAR_INBOUND) only."`
}

var (
	_ items.Item           = (*ClientIP)(nil)
	_ items.ContextLimiter = (*ClientIP)(nil)
	_ items.Sharer         = (*ClientIP)(nil)
	_ items.Texter         = (*ClientIP)(nil)
)

// Texts implements items.Texter.
func (*ClientIP) Texts() []items.Text {
	return []items.Text{{Path: "header", Kind: items.TextHeaderRead}, {Path: "trustedCIDRs[]", Kind: items.TextCIDR}}
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Client address detection: PROXY protocol on gateways; trusted X-Forwarded-For ranges and a client-IP header on sidecars.",
		Stage:            envoyfilter.StageConnection,
		Slot:             0,
		Purpose:          "finds the client address (PROXY protocol, trusted proxies) before anything reads it",
		Where:            "a listener filter (PROXY protocol) or a connection manager merge (original IP detection)",
		EnabledByDefault: true,
		New:              func() items.Item { return &ClientIP{} },
	})
}

// Validate implements items.Item.
func (c *ClientIP) Validate() error {
	var p items.Problems
	if c.ProxyProtocolOptional && !c.ProxyProtocol {
		p.Addf("proxyProtocolOptional", "only applies with proxyProtocol: true")
	}
	if len(c.TrustedCIDRs) > MaxTrustedCIDRs {
		p.Addf("trustedCIDRs", "has %d entries; at most %d", len(c.TrustedCIDRs), MaxTrustedCIDRs)
	}
	seen := map[netip.Prefix]int{}
	for i, s := range c.TrustedCIDRs {
		path := fmt.Sprintf("trustedCIDRs[%d]", i)
		pfx, err := items.ParseCIDR(s)
		if err != nil {
			p.Addf(path, "%v", err)
			continue
		}
		if j, ok := seen[pfx]; ok {
			p.Addf(path, "%s is also trustedCIDRs[%d]", s, j)
		}
		seen[pfx] = i
	}
	if c.Header != "" {
		if strings.EqualFold(c.Header, "x-forwarded-for") {
			p.Addf("header", "x-forwarded-for is a list; use trustedCIDRs, or headers.xff.trustedHops")
		}
	}
	items.RequireSomething(&p, c)
	return p.Err()
}

// ContextLimits implements items.ContextLimiter: PROXY protocol on a
// sidecar's listeners would break mesh traffic; header-based detection on
// a gateway is refused by Envoy (see docs/reference.md).
func (*ClientIP) ContextLimits() []items.ContextLimit {
	const why = "Istio sets use_remote_address on every gateway's HTTP connection manager, an EnvoyFilter MERGE can't clear it, and Envoy refuses original IP detection beside it; on gateways use headers.xff.trustedHops or ProxyConfig gatewayTopology.numTrustedProxies"
	inbound := []envoyfilter.Context{envoyfilter.ContextSidecarInbound}
	return []items.ContextLimit{
		{Path: "proxyProtocol", Contexts: []envoyfilter.Context{envoyfilter.ContextGateway}, Why: "a sidecar's listeners receive mesh traffic that carries no PROXY header"},
		{Path: "trustedCIDRs", Contexts: inbound, Why: why},
		{Path: "header", Contexts: inbound, Why: why},
	}
}

// Build implements items.Item.
func (c *ClientIP) Build() ([]envoyfilter.Patch, error) {
	var patches []envoyfilter.Patch
	if c.ProxyProtocol {
		p, err := envoyfilter.InsertListenerFilter(ProxyProtocolFilter, &proxyprotocolv3.ProxyProtocol{
			AllowRequestsWithoutProxyProtocol: c.ProxyProtocolOptional,
		})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	var detection []*corev3.TypedExtensionConfig
	if c.Header != "" {
		ext, err := extension(HeaderDetection, &customheaderv3.CustomHeaderConfig{HeaderName: c.Header})
		if err != nil {
			return nil, err
		}
		detection = append(detection, ext)
	}
	if len(c.TrustedCIDRs) > 0 {
		cidrs := &xffv3.XffTrustedCidrs{}
		for _, s := range c.TrustedCIDRs {
			pfx, err := items.ParseCIDR(s)
			if err != nil {
				return nil, err
			}
			cidrs.Cidrs = append(cidrs.Cidrs, &corev3.CidrRange{
				AddressPrefix: pfx.Addr().String(),
				PrefixLen:     wrapperspb.UInt32(uint32(pfx.Bits())),
			})
		}
		ext, err := extension(XFFDetection, &xffv3.XffConfig{XffTrustedCidrs: cidrs})
		if err != nil {
			return nil, err
		}
		detection = append(detection, ext)
	}
	if len(detection) > 0 {
		p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{OriginalIpDetectionExtensions: detection})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}

func extension(name string, cfg proto.Message) (*corev3.TypedExtensionConfig, error) {
	typed, err := envoyfilter.Any(cfg)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", name, err)
	}
	return &corev3.TypedExtensionConfig{Name: name, TypedConfig: typed}, nil
}

// Claims implements items.Sharer: original IP detection on the connection
// manager.
func (c *ClientIP) Claims() []items.Claim {
	var out []items.Claim
	if len(c.TrustedCIDRs) > 0 {
		out = append(out, items.Claim{Field: items.HCMOriginalIPDetection, Path: "trustedCIDRs"})
	}
	if c.Header != "" {
		out = append(out, items.Claim{Field: items.HCMOriginalIPDetection, Path: "header"})
	}
	return out
}

// Exclusions implements items.Sharer: Envoy refuses original IP detection
// beside either way of reading X-Forwarded-For by itself.
func (*ClientIP) Exclusions() []items.Exclusion {
	return []items.Exclusion{
		{Field: items.HCMOriginalIPDetection, Other: items.HCMUseRemoteAddress,
			Why: "Envoy refuses original IP detection extensions beside use_remote_address (\"may not be mixed\") and rejects the listener; trustedCIDRs and header already decide the client address"},
		{Field: items.HCMOriginalIPDetection, Other: items.HCMXffNumTrustedHops,
			Why: "Envoy refuses original IP detection extensions beside xff_num_trusted_hops (\"may not be mixed\") and rejects the listener; use trustedCIDRs or trustedHops, not both"},
	}
}
