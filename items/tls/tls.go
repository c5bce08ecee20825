// Package tls is the `tls` item: the TLS versions, cipher suites and key
// exchange groups of a gateway's HTTPS listeners, and HTTP Strict Transport
// Security on their responses (ingress-nginx's ssl-protocols, ssl-ciphers,
// ssl-ecdh-curve and hsts keys).
//
// Istio gives a gateway's TLS filter chains no transport protocol in their
// filter chain match, so an EnvoyFilter can't select "the chains that
// terminate TLS". The item selects them by listener port instead, and only
// those with an HTTP connection manager, so TLS passthrough and TCP chains
// are left alone.
package tls

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "tls"

// TransportSocket is the name of Envoy's TLS transport socket. It must be
// the name Istio gives its own, or Istio won't merge the patch into the
// chain's TLS context (it compares the names).
const TransportSocket = "envoy.transport_sockets.tls"

// HSTSHeader is the response header hsts sets.
const HSTSHeader = "strict-transport-security"

// Limits.
const (
	// MaxPorts bounds ports: each port is a patch (two with hsts), and a
	// gateway has a handful of HTTPS ports.
	MaxPorts = 16
	// DefaultMaxAge is ingress-nginx's hsts-max-age: one year.
	DefaultMaxAge = 365 * 24 * time.Hour
	// PreloadMinMaxAge is the shortest max-age hstspreload.org accepts
	// for the preload list: one year.
	PreloadMinMaxAge = 365 * 24 * time.Hour
)

// DefaultPorts are the listener ports whose HTTP filter chains the item
// changes when `ports` is not given: 443, the HTTPS port of a Gateway API
// gateway and of every Gateway's servers, and 8443, the port the istio
// ingressgateway chart's pods listen on for the Service's 443.
var DefaultPorts = []items.Port{443, 8443}

// TLS is the `tls` section.
type TLS struct {
	items.Toggle
	Ports        []items.Port `json:"ports" doc:"Listener ports whose HTTP filter chains terminate TLS (default 443 and 8443): the gateway pod's port for the TLS settings (the istio ingressgateway chart maps Service port 443 to 8443; Gateway API gateways listen on the Gateway's port), the Gateway server's port for hsts. At most 16."`
	MinVersion   Version      `json:"minVersion" doc:"Lowest TLS version accepted: TLSv1_0, TLSv1_1, TLSv1_2 or TLSv1_3 (tls_minimum_protocol_version; Envoy's default TLSv1_2)."`
	MaxVersion   Version      `json:"maxVersion" doc:"Highest TLS version accepted: TLSv1_0, TLSv1_1, TLSv1_2 or TLSv1_3 (tls_maximum_protocol_version; Envoy's default TLSv1_3)."`
	CipherSuites []string     `json:"cipherSuites" doc:"TLS 1.0-1.2 cipher suites by OpenSSL name, in order of preference; [A|B] is a group of equal preference (cipher_suites). TLS 1.3 suites can't be configured."`
	ECDHCurves   []string     `json:"ecdhCurves" doc:"Key exchange groups, in order of preference: X25519, P-256, P-384, P-521, X25519MLKEM768 (ecdh_curves; Envoy's default X25519, P-256)."`
	HSTS         *HSTS        `json:"hsts" doc:"Send Strict-Transport-Security on every response of the HTTPS route configurations on ports."`
}

// HSTS is the `hsts` sub-section. Given, even empty, it turns the header on
// with ingress-nginx's defaults.
type HSTS struct {
	MaxAge            *MaxAge `json:"maxAge" doc:"How long browsers keep to HTTPS, in seconds or as a duration (\"8760h\"); default 31536000 (one year). 0 tells browsers to forget the policy."`
	IncludeSubDomains *bool   `json:"includeSubDomains" doc:"Add includeSubDomains: the policy covers every subdomain too (default true, as in ingress-nginx)."`
	Preload           bool    `json:"preload" doc:"Add preload, consenting to the browsers' preload list; needs includeSubDomains and a maxAge of at least one year."`
}

// Version is a TLS protocol version by Envoy's name, less TLS_AUTO: that
// is the enum's zero value, which an EnvoyFilter MERGE cannot set. It
// decodes itself, to say what nginx's and Istio's spellings are in Envoy.
type Version string

// Values lists the settable versions.
func (Version) Values() []string { return []string{"TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3"} }

// nginxVersions are nginx's names of the versions (ssl_protocols).
var nginxVersions = map[string]Version{
	"TLSv1": "TLSv1_0", "TLSv1.0": "TLSv1_0", "TLSv1.1": "TLSv1_1", "TLSv1.2": "TLSv1_2", "TLSv1.3": "TLSv1_3",
}

// DecodeScalar implements the document decoder's scalar hook.
func (v *Version) DecodeScalar(tag, value string) error {
	if tag != "!!str" {
		return fmt.Errorf("expected a TLS version such as TLSv1_2, got %s", items.DescribeTag(tag))
	}
	for _, name := range v.Values() {
		switch {
		case value == name:
			*v = Version(name)
			return nil
		case strings.EqualFold(value, name):
			return fmt.Errorf("unknown value %q; did you mean %q? (Envoy's names are case-sensitive)", value, name)
		}
	}
	switch {
	case nginxVersions[value] != "":
		return fmt.Errorf("unknown value %q (nginx's spelling); did you mean %q?", value, nginxVersions[value])
	case strings.EqualFold(value, "TLS_AUTO"):
		return fmt.Errorf("TLS_AUTO is Envoy's \"not set\", which an EnvoyFilter MERGE can't set; leave the key out for Envoy's default")
	case strings.ContainsAny(value, " ,"):
		return fmt.Errorf("must be one version, got %q; for ingress-nginx's ssl-protocols list, set minVersion to the lowest and maxVersion to the highest", value)
	}
	return fmt.Errorf("must be one of %s, got %q", strings.Join(v.Values(), ", "), value)
}

func (v Version) proto() tlsv3.TlsParameters_TlsProtocol {
	return tlsv3.TlsParameters_TlsProtocol(tlsv3.TlsParameters_TlsProtocol_value[string(v)])
}

// envoyDefaultMin is Envoy's minimum version for servers when none is set.
const envoyDefaultMin Version = "TLSv1_2"

// MaxAge is an HSTS max-age: a whole number of seconds, written as an
// integer, a numeric string (ingress-nginx's ConfigMap writes "31536000")
// or a duration ("8760h").
type MaxAge struct {
	items.Seconds
	// invalid marks a value that did not decode, so Validate doesn't
	// judge the zero it left.
	invalid bool
}

// DecodeScalar implements the document decoder's scalar hook.
func (m *MaxAge) DecodeScalar(tag, value string) error {
	if tag == "!!float" {
		// max-age is a whole number of seconds (RFC 6797).
		m.invalid = true
		return fmt.Errorf("must be a whole number of seconds such as 31536000, or a duration such as \"8760h\", got %s", value)
	}
	if tag == "!!str" {
		if _, err := strconv.ParseUint(value, 10, 64); err == nil {
			tag = "!!int"
		}
	}
	if err := m.Seconds.DecodeScalar(tag, value); err != nil {
		m.invalid = true
		return fmt.Errorf("must be a number of seconds such as 31536000, or a duration such as \"8760h\", got %q", value)
	}
	return nil
}

// SchemaTypes implements the schema hook.
func (MaxAge) SchemaTypes() []string { return []string{"integer", "string"} }

var (
	_ items.Item           = (*TLS)(nil)
	_ items.Warner         = (*TLS)(nil)
	_ items.ContextLimiter = (*TLS)(nil)
	_ items.Enum           = Version("")
	_ items.ScalarDecoder  = (*Version)(nil)
	_ items.ScalarDecoder  = (*MaxAge)(nil)
	_ items.SchemaTyper    = MaxAge{}
	_ items.Texter         = (*TLS)(nil)
)

// Texts implements items.Texter: the names are checked against the item's
// own tables.
func (*TLS) Texts() []items.Text {
	return []items.Text{{Path: "cipherSuites[]", Kind: items.TextPlain}, {Path: "ecdhCurves[]", Kind: items.TextPlain}}
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "TLS versions, cipher suites and key exchange groups of the gateway's HTTPS ports, and HSTS on their responses.",
		Stage:            envoyfilter.StageConnection,
		Slot:             3,
		Purpose:          "sets the TLS policy of the listeners that terminate TLS",
		Where:            "it patches the filter chains and route configurations of the gateway's TLS ports",
		EnabledByDefault: true,
		New:              func() items.Item { return &TLS{Ports: slices.Clone(DefaultPorts)} },
	})
}

// maxAge is the effective max-age.
func (h *HSTS) maxAge() time.Duration {
	if h.MaxAge == nil {
		return DefaultMaxAge
	}
	return h.MaxAge.Duration
}

// includeSubDomains is the effective includeSubDomains.
func (h *HSTS) includeSubDomains() bool {
	return h.IncludeSubDomains == nil || *h.IncludeSubDomains
}

// seconds writes d in seconds when it is whole, as max-age is.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
	return d.String()
}

// Value is the header's value.
func (h *HSTS) Value() string {
	v := "max-age=" + seconds(h.maxAge())
	if h.includeSubDomains() {
		v += "; includeSubDomains"
	}
	if h.Preload {
		v += "; preload"
	}
	return v
}

// setsParams reports whether any TLS parameter is set.
func (t *TLS) setsParams() bool {
	return t.MinVersion != "" || t.MaxVersion != "" || len(t.CipherSuites) > 0 || len(t.ECDHCurves) > 0
}

// Validate implements items.Item.
func (t *TLS) Validate() error {
	var p items.Problems
	t.checkPorts(&p)
	t.checkVersions(&p)
	checkCipherSuites(&p, t.CipherSuites)
	checkCurves(&p, t.ECDHCurves)
	if h := t.HSTS; h != nil {
		age, known := h.maxAge(), h.MaxAge == nil || !h.MaxAge.invalid
		if age%time.Second != 0 {
			p.Addf("hsts.maxAge", "must be a whole number of seconds (max-age is in seconds), got %v", age)
		}
		if h.Preload {
			if !h.includeSubDomains() {
				p.Addf("hsts.preload", "needs includeSubDomains: true (the browsers' preload list, hstspreload.org, takes whole domains only)")
			}
			if known && age < PreloadMinMaxAge {
				p.Addf("hsts.preload", "needs a maxAge of at least 31536000 seconds (one year, hstspreload.org's minimum), got %s", seconds(age))
			}
		}
	}
	if t.Enabled() && !t.setsParams() && t.HSTS == nil {
		p.Addf("", "sets nothing; give minVersion, maxVersion, cipherSuites, ecdhCurves or hsts, or remove the section")
	}
	return p.Err()
}

func (t *TLS) checkPorts(p *items.Problems) {
	switch {
	case len(t.Ports) == 0:
		p.Addf("ports", "must list at least one port (default 443 and 8443)")
	case len(t.Ports) > MaxPorts:
		p.Addf("ports", "has %d ports; at most %d", len(t.Ports), MaxPorts)
	}
	seen := map[items.Port]int{}
	for i, port := range t.Ports {
		if j, ok := seen[port]; ok {
			p.Addf(fmt.Sprintf("ports[%d]", i), "%d is also ports[%d]", port, j)
			continue
		}
		seen[port] = i
		if slices.Contains(PlaintextPorts, port) {
			p.Addf(fmt.Sprintf("ports[%d]", i), "%d is the standard gateway's plaintext HTTP port (Service port 80, pod port 8080): its filter chains have no TLS, so the TLS settings would give them a TLS socket without certificates, which Envoy refuses with every listener of the port; list the ports your Gateway terminates TLS on", port)
		}
	}
}

// PlaintextPorts are the standard ingress gateway's plaintext HTTP ports:
// the Service's port 80 and the pod's port 8080 it maps to (Istio's
// gateway chart).
var PlaintextPorts = []items.Port{80, 8080}

func (t *TLS) checkVersions(p *items.Problems) {
	switch {
	case t.MinVersion != "" && t.MaxVersion != "":
		if t.MinVersion.proto() > t.MaxVersion.proto() {
			p.Addf("maxVersion", "%s is below minVersion %s", t.MaxVersion, t.MinVersion)
		}
	case t.MaxVersion != "":
		if t.MaxVersion.proto() < envoyDefaultMin.proto() {
			p.Addf("maxVersion", "%s is below Envoy's default minimum version %s; set minVersion too", t.MaxVersion, envoyDefaultMin)
		}
	}
}

// Warnings implements items.Warner: settings Envoy accepts that don't do
// what they seem to.
func (t *TLS) Warnings() error {
	var p items.Problems
	if t.MinVersion != "" && t.MinVersion.proto() < envoyDefaultMin.proto() && !slices.ContainsFunc(t.CipherSuites, hasCBCSuite) {
		p.Addf("minVersion", "TLS 1.0 and 1.1 clients can only use CBC suites (names ending in -SHA, such as ECDHE-RSA-AES128-SHA), and %s; they still can't connect", cbcReason(t.CipherSuites))
	}
	if t.MinVersion == "TLSv1_3" && len(t.CipherSuites) > 0 {
		p.Addf("cipherSuites", "only apply to TLS 1.0-1.2; with minVersion TLSv1_3 they have no effect")
	}
	if len(t.ECDHCurves) > 0 && !slices.ContainsFunc(t.ECDHCurves, func(c string) bool { return c != postQuantum }) {
		p.Addf("ecdhCurves", "has no classical group: TLS 1.2 clients and TLS 1.3 clients without X25519MLKEM768 (most non-browser clients) can't use ECDHE; add X25519 after it")
	}
	return p.Err()
}

func cbcReason(suites []string) string {
	if len(suites) == 0 {
		return "Envoy's default suites are all TLS 1.2-only (GCM and ChaCha20-Poly1305)"
	}
	return "cipherSuites lists none"
}

// hasCBCSuite reports whether entry (a suite or a group) holds a suite TLS
// 1.0 and 1.1 can use.
func hasCBCSuite(entry string) bool {
	for _, s := range strings.Split(strings.Trim(entry, "[]"), "|") {
		if slices.Contains(CipherSuites, s) && strings.HasSuffix(s, "-SHA") {
			return true
		}
	}
	return false
}

// ContextLimits implements items.ContextLimiter: on sidecars the ports'
// inbound chains carry Istio's mutual TLS, and a plaintext chain on the
// same port would get a TLS socket without certificates.
func (*TLS) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "on a sidecar the ports' chains carry Istio's mutual TLS, or are plaintext and would get a TLS socket without certificates, which Envoy rejects"}}
}

// Build implements items.Item.
func (t *TLS) Build() ([]envoyfilter.Patch, error) {
	var patches []envoyfilter.Patch
	if t.setsParams() {
		params := &tlsv3.TlsParameters{
			CipherSuites: slices.Clone(t.CipherSuites),
			EcdhCurves:   slices.Clone(t.ECDHCurves),
		}
		if t.MinVersion != "" {
			params.TlsMinimumProtocolVersion = t.MinVersion.proto()
		}
		if t.MaxVersion != "" {
			params.TlsMaximumProtocolVersion = t.MaxVersion.proto()
		}
		for _, port := range t.Ports {
			typed, err := envoyfilter.Any(&tlsv3.DownstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsParams: params},
			})
			if err != nil {
				return nil, fmt.Errorf("pack %s: %w", TransportSocket, err)
			}
			patches = append(patches, envoyfilter.MergeFilterChainsOnPort(uint32(port), &listenerv3.FilterChain{
				TransportSocket: &corev3.TransportSocket{
					Name:       TransportSocket,
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: typed},
				},
			}))
		}
	}
	if h := t.HSTS; h != nil {
		for _, port := range t.Ports {
			patches = append(patches, envoyfilter.MergeRouteConfigurationsOnPort(uint32(port), &routev3.RouteConfiguration{
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{envoyfilter.SetHeader(HSTSHeader, h.Value())},
			}))
		}
	}
	return patches, nil
}
