// Package cdnloop is the `cdnLoop` item: Envoy's CDN-Loop filter
// (envoy.filters.http.cdn_loop) at the gateways, RFC 8586's loop
// detection. The gateway appends its CDN identifier to each request's
// CDN-Loop header, and refuses, with a 502 of its own, a request whose
// header already carries that identifier more than maxAllowedOccurrences
// times: a chain of proxies or CDNs that sends requests back to the
// gateway is cut at the first pass over the limit instead of piling up.
//
// Envoy's filter has two settings, both offered. Its config factory
// refuses an identifier its CDN-Loop parser can't read (a token, or an
// IPv6 literal in brackets, with an optional :port); validation asks the
// same of the whole value (Envoy reads only as far as its parser gets, and
// an identifier with more after it never matches the header's entries).
package cdnloop

import (
	"math"
	"regexp"

	cdnloopv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cdn_loop/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "cdnLoop"

// Filter is the name of the HTTP filter the item inserts: a name of its
// own, so that a team's EnvoyFilter that inserts Envoy's CDN-Loop filter
// under its extension name is never matched or replaced by it.
const Filter = "globalconfig.cdn_loop"

// MaxAllowedOccurrences is Envoy's ceiling: max_allowed_occurrences is a
// uint32 (the proto declares no other rule).
const MaxAllowedOccurrences = math.MaxUint32

// cdnID is RFC 8586's cdn-id as Envoy's parser reads it, whole: a token
// (RFC 7230 tchar) or an IPv6 literal in brackets, then an optional
// ":port". A host name, an IPv4 address and a pseudonym are tokens.
var cdnID = regexp.MustCompile("^(?:[A-Za-z0-9!#$%&'*+.^_`|~-]+|\\[[0-9A-Fa-f:.]*\\])(?::[0-9]*)?$")

// CdnLoop is the `cdnLoop` section.
type CdnLoop struct {
	items.Toggle
	CdnID                 string `json:"cdnId" doc:"Required: the gateways' CDN identifier (RFC 8586's cdn-id; cdn_id), appended to every request's CDN-Loop header and counted in it, e.g. edge.example.com or example-gateway: a host name you control, with an optional :port, or a pseudonym of letters, digits and !#$%&'*+-.^_|~ (an IPv6 literal in brackets too). Choose one no other proxy or CDN in your chain uses: a request that carries it is taken for one that has passed these gateways."`
	MaxAllowedOccurrences uint32 `json:"maxAllowedOccurrences" doc:"How many times a request's CDN-Loop header may already carry cdnId when it reaches a gateway (max_allowed_occurrences): one more is a loop, answered 502 by the gateway. 0 (default) refuses any request that has passed these gateways before; 1 lets a request through the gateways twice (a service that calls another through the gateway with the headers it got)."`
}

var (
	_ items.Item           = (*CdnLoop)(nil)
	_ items.Ranger         = (*CdnLoop)(nil)
	_ items.Texter         = (*CdnLoop)(nil)
	_ items.ContextLimiter = (*CdnLoop)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Loop detection at the gateways (RFC 8586, Envoy's cdn_loop filter): the gateway appends its CDN identifier to each request's CDN-Loop header and answers 502 itself to a request that carries it more than the allowed number of times.",
		Stage:            envoyfilter.StageCompression,
		Slot:             4,
		Purpose:          "cuts looping requests behind only the compressors and the health answers, before every filter that refuses, buffers or slows requests (error pages, auth, address lists, rate limits, load shedding, faults), so a loop costs none of them a call, a token or a delay",
		Where:            "an HTTP filter at the front of every HTTP connection manager of the gateways, in the compression stage after its slots 0 to 3; it appends its identifier to every request's CDN-Loop header and answers looping requests itself",
		EnabledByDefault: true,
		New:              New,
		Provides: []items.Capability{
			{Envoy: "envoy.extensions.filters.http.cdn_loop.v3.CdnLoopConfig.cdn_id", Setting: "cdnId"},
			{Envoy: "envoy.extensions.filters.http.cdn_loop.v3.CdnLoopConfig.max_allowed_occurrences", Setting: "maxAllowedOccurrences"},
		},
	})
}

// New returns the defaults: Envoy's 0 occurrences allowed; cdnId is
// required.
func New() items.Item { return &CdnLoop{} }

// Ranges implements items.Ranger.
func (*CdnLoop) Ranges() []items.Range {
	return []items.Range{{Path: "maxAllowedOccurrences", Min: 0, Max: MaxAllowedOccurrences,
		Why: "Envoy's max_allowed_occurrences is a 32-bit unsigned integer"}}
}

// Texts implements items.Texter: the identifier is sent as it is (its
// rule, the CDN-Loop grammar, is checked in Validate).
func (*CdnLoop) Texts() []items.Text {
	return []items.Text{{Path: "cdnId", Kind: items.TextPlain}}
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*CdnLoop) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "RFC 8586's identifier names the edge that requests from CDNs and other proxies reach; on sidecars every hop of the mesh would append it, and a call chain that passes one workload twice would be refused as a loop"}}
}

// Validate implements items.Item.
func (c *CdnLoop) Validate() error {
	var p items.Problems
	switch {
	case c.CdnID == "":
		if c.Enable {
			p.Addf("cdnId", "is required: the gateways' CDN identifier, e.g. edge.example.com")
		}
	case !cdnID.MatchString(c.CdnID):
		p.Addf("cdnId", "must be a CDN identifier (RFC 8586): a host name or pseudonym of letters, digits and !#$%%&'*+-.^_|~, or an IPv6 literal in brackets, with an optional :port, without spaces or anything after it, got %q", c.CdnID)
	}
	items.CheckRanges(&p, c)
	return p.Err()
}

// config is the filter's configuration, as Envoy would see it even for a
// section Validate refused.
func (c *CdnLoop) config() *cdnloopv3.CdnLoopConfig {
	return &cdnloopv3.CdnLoopConfig{CdnId: c.CdnID, MaxAllowedOccurrences: c.MaxAllowedOccurrences}
}

// Build implements items.Item: the filter, at the front of the chain after
// the compressors and healthCheck.
func (c *CdnLoop) Build() ([]envoyfilter.Patch, error) {
	p, err := envoyfilter.InsertHTTPFilter(Filter, c.config())
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
