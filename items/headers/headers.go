// Package headers is the `headers` item: x-envoy headers, x-real-ip, the
// server header, request ids, X-Forwarded-For trust and global response
// headers. Higress's top-level disableXEnvoyHeaders and addXRealIpHeader
// keys are accepted as they are.
package headers

import (
	"fmt"
	"maps"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "headers"

// RealIPHeader is the header addXRealIpHeader sets, and RealIPValue the
// Envoy command operator for the client address it carries.
const (
	RealIPHeader = "x-real-ip"
	RealIPValue  = "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
)

// Headers is the `headers` section.
type Headers struct {
	items.Toggle
	DisableXEnvoyHeaders bool                         `json:"disableXEnvoyHeaders" doc:"Stop adding x-envoy-* headers (router suppress_envoy_headers, merged, never replaced)."`
	AddXRealIPHeader     bool                         `json:"addXRealIpHeader" doc:"Set x-real-ip to the client address on requests to services."`
	Server               *Server                      `json:"server" doc:"The response server header."`
	RequestID            *RequestID                   `json:"requestId" doc:"x-request-id handling."`
	XFF                  *XFF                         `json:"xff" doc:"X-Forwarded-For trust."`
	ResponseHeaders      map[string]items.HeaderValue `json:"responseHeaders" doc:"Headers set on every response, replacing the service's, e.g. x-content-type-options."`
	Request              *RequestEdits                `json:"request" doc:"Request headers changed before the request is forwarded to a service."`
	Response             *ResponseEdits               `json:"response" doc:"Response headers removed before the response reaches the client."`
}

// RequestEdits are changes to every request's headers, made by the route
// configuration before the request is forwarded.
type RequestEdits struct {
	Set    map[string]items.HeaderValue `json:"set" doc:"Headers set, replacing any the client sent (ingress-nginx proxy-set-headers)."`
	Append map[string]items.HeaderValue `json:"append" doc:"Headers added, keeping any the client sent (a second value, or a new header)."`
	Remove []string                     `json:"remove" doc:"Headers removed from the request."`
}

// ResponseEdits are changes to every response's headers.
type ResponseEdits struct {
	Remove []string `json:"remove" doc:"Headers removed from every response, e.g. x-powered-by (ingress-nginx hide-headers)."`
}

// Server is the server header policy.
type Server struct {
	Mode ServerMode `json:"mode" doc:"passThrough (the service's header, if any), overwrite (always name), appendIfAbsent (name when the service sent none) or strip."`
	Name string     `json:"name" doc:"The value for overwrite and appendIfAbsent."`
}

// ServerMode says what happens to the server header.
type ServerMode string

// Values lists the modes.
func (ServerMode) Values() []string {
	return []string{"passThrough", "overwrite", "appendIfAbsent", "strip"}
}

// RequestID is the request id policy.
type RequestID struct {
	Generate         *bool `json:"generate" doc:"Generate x-request-id when the request has none (HCM generate_request_id)."`
	PreserveExternal *bool `json:"preserveExternal" doc:"Keep x-request-id sent by external clients (HCM preserve_external_request_id)."`
}

// XFF is the X-Forwarded-For policy.
type XFF struct {
	UseRemoteAddress *bool   `json:"useRemoteAddress" doc:"Take the client address from the connection, not from X-Forwarded-For (HCM use_remote_address)."`
	TrustedHops      *uint32 `json:"trustedHops" doc:"Proxies in front of this one whose X-Forwarded-For entries are trusted (HCM xff_num_trusted_hops)."`
}

// Texts implements items.Texter.
func (*Headers) Texts() []items.Text {
	return []items.Text{
		{Path: "server.name", Kind: items.TextPlain},
		{Path: "responseHeaders.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
		{Path: "request.set.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
		{Path: "request.append.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
		{Path: "request.remove[]", Kind: items.TextHeaderName},
		{Path: "response.remove[]", Kind: items.TextHeaderName},
	}
}

var (
	_ items.Texter         = (*Headers)(nil)
	_ items.Item           = (*Headers)(nil)
	_ items.ContextLimiter = (*Headers)(nil)
	_ items.Sharer         = (*Headers)(nil)
	_ items.Enum           = ServerMode("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Header policy: x-envoy headers, x-real-ip, server header, request ids, X-Forwarded-For, response headers.",
		Stage:            envoyfilter.StageHeaders,
		Slot:             0,
		Purpose:          "sets request and response headers",
		Where:            "router, connection manager and route configuration merges; the inbound chains' inline route configurations are patched too",
		EnabledByDefault: true,
		New:              func() items.Item { return &Headers{} },
		TopLevel:         map[string]string{"disableXEnvoyHeaders": "disableXEnvoyHeaders", "addXRealIpHeader": "addXRealIpHeader"},
	})
}

// Validate implements items.Item.
func (h *Headers) Validate() error {
	var p items.Problems
	if s := h.Server; s != nil {
		needsName := s.Mode == "overwrite" || s.Mode == "appendIfAbsent"
		switch {
		case s.Mode == "":
			p.Addf("server.mode", "is required")
		case needsName && s.Name == "":
			p.Addf("server.name", "is required for mode %s", s.Mode)
		case !needsName && s.Name != "":
			p.Addf("server.name", "only applies to modes overwrite and appendIfAbsent")
		}
		if s.Name != "" && !httpguts.ValidHeaderFieldValue(s.Name) {
			p.Addf("server.name", "must be a valid header value")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(h.ResponseHeaders)) {
		path := fielderr.Key("responseHeaders", name)
		if name == "server" {
			p.Addf(path, "can't be set here; use server for the server header")
		}
	}
	if r := h.Request; r != nil {
		for _, name := range slices.Sorted(maps.Keys(r.Append)) {
			if _, ok := r.Set[name]; ok {
				p.Addf("request.append."+name, "is also in request.set; a header is either set or appended")
			}
		}
		for _, edits := range []map[string]items.HeaderValue{r.Set, r.Append} {
			if _, ok := edits[RealIPHeader]; ok && h.AddXRealIPHeader {
				p.Addf("request", "%s is also set by addXRealIpHeader; keep one", RealIPHeader)
			}
		}
		checkRemoved(&p, "request.remove", r.Remove, r.Set, r.Append)
		if len(r.Set)+len(r.Append)+len(r.Remove) == 0 {
			p.Addf("request", "sets nothing; give set, append or remove")
		}
	}
	if r := h.Response; r != nil {
		checkRemoved(&p, "response.remove", r.Remove, h.ResponseHeaders)
		if slices.Contains(r.Remove, "server") && h.Server != nil {
			p.Addf("response.remove", "server is governed by server; use mode strip")
		}
		if len(r.Remove) == 0 {
			p.Addf("response", "sets nothing; give remove")
		}
	}
	items.RequireSomething(&p, h)
	return p.Err()
}

// checkRemoved checks a list of header names to remove: each valid, listed
// once, and not also added by one of the maps of added headers.
func checkRemoved(p *items.Problems, path string, names []string, added ...map[string]items.HeaderValue) {
	seen := map[string]bool{}
	for i, name := range names {
		at := fmt.Sprintf("%s[%d]", path, i)
		if seen[name] {
			p.Addf(at, "%s is listed twice", name)
		}
		seen[name] = true
		for _, m := range added {
			if _, ok := m[name]; ok {
				p.Addf(at, "%s is also added; a header is either added or removed", name)
				break
			}
		}
	}
}

// ContextLimits implements items.ContextLimiter. x-real-ip names the
// client; on a sidecar's outbound listeners the client is the workload
// itself, so every request it sends would carry its own address as
// x-real-ip, overwriting the one it forwards; ANY includes those
// listeners.
func (*Headers) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Path: "addXRealIpHeader", Contexts: []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound},
		Why: "on a sidecar's outbound listeners the client is the workload itself, so every request it sends would claim the workload as the real client and overwrite the x-real-ip it forwards (ANY includes those listeners)"}}
}

// Build implements items.Item.
func (h *Headers) Build() ([]envoyfilter.Patch, error) {
	var patches []envoyfilter.Patch
	if h.DisableXEnvoyHeaders {
		p, err := envoyfilter.MergeRouter(&routerv3.Router{SuppressEnvoyHeaders: true})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}

	hcm := &hcmv3.HttpConnectionManager{}
	setHCM := false
	if s := h.Server; s != nil {
		setHCM = true
		switch s.Mode {
		case "overwrite":
			hcm.ServerHeaderTransformation = hcmv3.HttpConnectionManager_OVERWRITE
			hcm.ServerName = s.Name
		case "appendIfAbsent":
			hcm.ServerHeaderTransformation = hcmv3.HttpConnectionManager_APPEND_IF_ABSENT
			hcm.ServerName = s.Name
		default: // passThrough, strip
			hcm.ServerHeaderTransformation = hcmv3.HttpConnectionManager_PASS_THROUGH
		}
	}
	if r := h.RequestID; r != nil {
		setHCM = true
		hcm.GenerateRequestId = items.OptionalBool(r.Generate)
		if r.PreserveExternal != nil {
			hcm.PreserveExternalRequestId = *r.PreserveExternal
		}
	}
	if x := h.XFF; x != nil {
		setHCM = true
		hcm.UseRemoteAddress = items.OptionalBool(x.UseRemoteAddress)
		if x.TrustedHops != nil {
			hcm.XffNumTrustedHops = *x.TrustedHops
		}
	}
	if setHCM {
		p, err := envoyfilter.MergeHCM(hcm)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}

	rc := &routev3.RouteConfiguration{}
	if h.AddXRealIPHeader {
		rc.RequestHeadersToAdd = append(rc.RequestHeadersToAdd, envoyfilter.SetHeader(RealIPHeader, RealIPValue))
	}
	for _, name := range slices.Sorted(maps.Keys(h.ResponseHeaders)) {
		rc.ResponseHeadersToAdd = append(rc.ResponseHeadersToAdd, envoyfilter.SetHeader(name, string(h.ResponseHeaders[name])))
	}
	if r := h.Request; r != nil {
		for _, name := range slices.Sorted(maps.Keys(r.Set)) {
			rc.RequestHeadersToAdd = append(rc.RequestHeadersToAdd, envoyfilter.SetHeader(name, string(r.Set[name])))
		}
		for _, name := range slices.Sorted(maps.Keys(r.Append)) {
			rc.RequestHeadersToAdd = append(rc.RequestHeadersToAdd, envoyfilter.AppendHeader(name, string(r.Append[name])))
		}
		rc.RequestHeadersToRemove = slices.Clone(r.Remove)
	}
	if h.Server != nil && h.Server.Mode == "strip" {
		// Envoy has no strip mode: pass the service's header through and
		// remove it from every response.
		rc.ResponseHeadersToRemove = []string{"server"}
	}
	if r := h.Response; r != nil {
		rc.ResponseHeadersToRemove = append(rc.ResponseHeadersToRemove, r.Remove...)
	}
	if len(rc.RequestHeadersToAdd)+len(rc.ResponseHeadersToAdd)+len(rc.RequestHeadersToRemove)+len(rc.ResponseHeadersToRemove) > 0 {
		patches = append(patches, envoyfilter.MergeRouteConfigurations(rc))
	}
	return patches, nil
}

// Claims implements items.Sharer: the connection manager's own ways of
// reading X-Forwarded-For.
func (h *Headers) Claims() []items.Claim {
	var out []items.Claim
	if x := h.XFF; x != nil {
		if x.UseRemoteAddress != nil && *x.UseRemoteAddress {
			out = append(out, items.Claim{Field: items.HCMUseRemoteAddress, Path: "xff.useRemoteAddress"})
		}
		if x.TrustedHops != nil && *x.TrustedHops > 0 {
			out = append(out, items.Claim{Field: items.HCMXffNumTrustedHops, Path: "xff.trustedHops"})
		}
	}
	return out
}

// Exclusions implements items.Sharer: clientIP declares the rules.
func (*Headers) Exclusions() []items.Exclusion { return nil }
