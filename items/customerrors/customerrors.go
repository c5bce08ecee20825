// Package customerrors is the `customErrors` item: ingress-nginx's
// custom-http-errors for Envoy. Envoy's own replies (no route, no healthy
// upstream, timeouts, 413, 429, …) get a body of your choice by status
// through the HTTP connection manager's local_reply_config; responses
// with an error status can also be replaced wholesale through the
// custom response HTTP filter.
package customerrors

import (
	"encoding/json"
	"fmt"
	"mime"
	"strconv"
	"strings"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	customresponsev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/custom_response/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	localresponsev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/custom_response/local_response_policy/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "customErrors"

// Envoy extension names this item uses.
const (
	// CustomResponse is the HTTP filter that replaces responses by status.
	CustomResponse = "envoy.filters.http.custom_response"
	// StatusCodeInput is the matcher input the filter matches statuses on.
	StatusCodeInput = "envoy.matching.inputs.status_code_input"
	// LocalResponsePolicy is the custom response policy that answers
	// with a body configured here.
	LocalResponsePolicy = "envoy.http.custom_response.local_response_policy"
	// runtimeKeyPrefix names the runtime key of each status a local reply
	// mapper matches (Envoy requires one; it lets an operator override the
	// status at run time): globalconfig.custom_errors.status_503.
	runtimeKeyPrefix = "globalconfig.custom_errors.status_"
)

// Limits.
const (
	// MinStatus and MaxStatus bound the statuses an entry replaces: error
	// statuses only. A 1xx is never a final response, and a 2xx or 3xx
	// replaced by a fixed page loses what the client needs (the content,
	// a redirect's location).
	MinStatus, MaxStatus = 400, 599
	// MinRewriteStatus and MaxRewriteStatus are Envoy's range for a
	// rewritten status (ResponseMapper and LocalResponsePolicy
	// status_code, [200, 600)).
	MinRewriteStatus, MaxRewriteStatus = 200, 599
	// MaxBodyBytes bounds a body (the text, or the json object encoded).
	// Envoy has no limit of its own, but every body is copied into every
	// HTTP connection manager of every proxy the item targets, and for a
	// gRPC request Envoy sends a local reply's body as the grpc-message
	// header, percent-encoded, where gRPC clients allow 8 KiB of metadata
	// by default. An error page with inline styles fits in 4 KiB; a larger
	// one belongs on a service.
	MaxBodyBytes = 4096
)

// Default content types.
const (
	DefaultTextContentType = "text/plain; charset=utf-8"
	DefaultJSONContentType = "application/json"
)

// CustomErrors is the `customErrors` section.
type CustomErrors struct {
	items.Toggle
	LocalReplies []Page `json:"localReplies" doc:"Bodies for Envoy's own replies by status (no route 404, no healthy upstream 503, 408/504 timeouts, 413, 429, …), through the HTTP connection manager's local_reply_config. The first entry listing a status wins."`
	Upstream     []Page `json:"upstream" doc:"Responses replaced by status, whoever made them: a service's, and Envoy's own made while handling the request, through the envoy.filters.http.custom_response filter. Not built into istio-proxy: see docs/reference.md."`
}

// Page is one replacement: the statuses it applies to and what is sent
// instead.
type Page struct {
	Statuses      []uint32                   `json:"statuses" doc:"The statuses replaced, 400 to 599, e.g. [502, 503, 504]. A status appears in one entry only."`
	RewriteStatus *uint32                    `json:"rewriteStatus" doc:"Send this status instead, 200 to 599 (default: keep the status)."`
	Text          string                     `json:"text" doc:"The body as text, with Envoy command operators such as %RESPONSE_CODE%, %LOCAL_REPLY_BODY% or %REQ(x-request-id)%; a literal percent sign is %%. At most 4096 bytes."`
	JSON          map[string]items.JSONValue `json:"json" doc:"The body as a JSON object instead: key → text with command operators, e.g. status: \"%RESPONSE_CODE%\"; values may nest, and numbers, booleans and lists are sent as they are (an RFC 7807 body: status: 503, type: about:blank). Every string is a format string. At most 4096 bytes encoded."`
	ContentType   string                     `json:"contentType" doc:"The content-type of the body (default text/plain; charset=utf-8 for text, application/json for json)."`
}

var (
	_ items.Item      = (*CustomErrors)(nil)
	_ items.Warner    = (*CustomErrors)(nil)
	_ items.Texter    = (*CustomErrors)(nil)
	_ items.Versioned = (*CustomErrors)(nil)
)

// Texts implements items.Texter.
func (*CustomErrors) Texts() []items.Text {
	var out []items.Text
	for _, list := range []string{"localReplies", "upstream"} {
		out = append(out,
			items.Text{Path: list + "[].text", Kind: items.TextFormat},
			// json's values may nest: check checks every string in
			// them with the format rule (items.CheckJSON).
			items.Text{Path: list + "[].json.*", Key: items.TextPlain},
			items.Text{Path: list + "[].contentType", Kind: items.TextMediaType})
	}
	return out
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Custom error pages by status (ingress-nginx custom-http-errors): bodies for Envoy's own replies, and replacements of error responses.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             0,
		Purpose:          "replaces error responses; first of the policy filters, so its pages are still compressed and it sees the replies of every filter behind it and of the services",
		Where:            "a connection manager merge and an HTTP filter; outbound, the pages replace Envoy's replies to the workload's own requests (`no healthy upstream`)",
		EnabledByDefault: true,
		New:              func() items.Item { return &CustomErrors{} },
	})
}

// Ranges implements items.Ranger: a replaced status is an error status,
// a rewritten one is in Envoy's range.
func (*CustomErrors) Ranges() []items.Range {
	const why = "it must be an error status (a 1xx is never a final response, and a 2xx or 3xx is no error to replace)"
	return []items.Range{
		{Path: "localReplies[].statuses[]", Min: MinStatus, Max: MaxStatus, Why: why},
		{Path: "upstream[].statuses[]", Min: MinStatus, Max: MaxStatus, Why: why},
		{Path: "localReplies[].rewriteStatus", Min: MinRewriteStatus, Max: MaxRewriteStatus},
		{Path: "upstream[].rewriteStatus", Min: MinRewriteStatus, Max: MaxRewriteStatus},
	}
}

// Validate implements items.Item.
func (c *CustomErrors) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, c)
	local := checkList(&p, "localReplies", c.LocalReplies)
	upstream := checkList(&p, "upstream", c.Upstream)

	// Envoy's local reply config applies to every local reply, the custom
	// response filter's replacements included, and the filter sees
	// Envoy's own replies after the local reply config rewrote them. A
	// status in both lists, or rewritten into the other list, would have
	// one body hide the other.
	for i, e := range c.Upstream {
		for j, s := range e.Statuses {
			if at, ok := local[s]; ok {
				p.Addf(fmt.Sprintf("upstream[%d].statuses[%d]", i, j), "%d is also in %s; keep a status in one list: the custom response filter also replaces Envoy's own replies, and Envoy's local reply config also rewrites the filter's replacements", s, at)
			}
		}
		if r := e.RewriteStatus; r != nil {
			if at, ok := local[*r]; ok {
				p.Addf(fmt.Sprintf("upstream[%d].rewriteStatus", i), "%d is in %s, whose body would replace this one: Envoy's local reply config also rewrites the replacements the custom response filter sends", *r, at)
			}
		}
	}
	for i, e := range c.LocalReplies {
		if r := e.RewriteStatus; r != nil {
			if at, ok := upstream[*r]; ok {
				p.Addf(fmt.Sprintf("localReplies[%d].rewriteStatus", i), "%d is in %s, which would replace this reply: the custom response filter also sees Envoy's own replies", *r, at)
			}
		}
	}
	items.RequireSomething(&p, c)
	return p.Err()
}

// checkList checks the entries of one list and returns where each status
// is handled ("localReplies[0]").
func checkList(p *items.Problems, name string, pages []Page) map[uint32]string {
	where := map[uint32]string{}
	if pages != nil && len(pages) == 0 {
		p.Addf(name, "is empty; give at least one entry, or remove the key")
	}
	for i, e := range pages {
		at := fmt.Sprintf("%s[%d]", name, i)
		if len(e.Statuses) == 0 {
			p.Addf(at+".statuses", "needs at least one status, e.g. [503]")
		}
		for j, s := range e.Statuses {
			path := fmt.Sprintf("%s.statuses[%d]", at, j)
			switch first, dup := where[s]; {
			case s < MinStatus || s > MaxStatus:
				// CheckRanges says so.
			case dup:
				p.Addf(path, "%d is already in %s; a status belongs to one entry", s, first)
			default:
				where[s] = at
			}
		}
		e.check(p, at)
	}
	return where
}

// check checks the body and content type of one entry at path at.
func (e Page) check(p *items.Problems, at string) {
	switch {
	case e.Text != "" && len(e.JSON) > 0:
		p.Addf(at+".json", "give either text or json, not both")
	case e.Text == "" && len(e.JSON) == 0:
		p.Addf(at, "needs a body: give text or json")
	}
	if e.Text != "" {
		if n := len(e.Text); n > MaxBodyBytes {
			p.Addf(at+".text", "is %d bytes, more than %d; serve a larger page from a service", n, MaxBodyBytes)
		}
	}
	if len(e.JSON) > 0 {
		items.CheckJSON(p, at+".json", e.JSON)
		if b, err := json.Marshal(e.JSON); err == nil && len(b) > MaxBodyBytes {
			p.Addf(at+".json", "is %d bytes encoded, more than %d; serve a larger body from a service", len(b), MaxBodyBytes)
		}
	}
	if ct := e.ContentType; ct != "" {
		switch mediaType, _, err := mime.ParseMediaType(ct); {
		case !httpguts.ValidHeaderFieldValue(ct):
			p.Addf(at+".contentType", "must be a valid header value (no control characters)")
		case strings.Contains(ct, "%"):
			p.Addf(at+".contentType", "must not contain %%: Envoy reads the header value as a format string")
		case err != nil || !strings.Contains(mediaType, "/"):
			p.Addf(at+".contentType", "must be a media type such as \"text/html; charset=utf-8\", got %q", ct)
		}
	}
}

// Warnings implements items.Warner.
func (c *CustomErrors) Warnings() error {
	var p items.Problems
	if len(c.Upstream) > 0 {
		p.Addf("upstream", "istio-proxy is built without %s, so it is inserted as an optional filter: istio-proxy ignores it and these replacements take effect only on proxies whose Envoy includes the filter (localReplies works everywhere)", CustomResponse)
	}
	for _, list := range []struct {
		name  string
		pages []Page
	}{{"localReplies", c.LocalReplies}, {"upstream", c.Upstream}} {
		for i, e := range list.pages {
			if e.Text != "" && isHTML(e.contentType()) && envoyformat.QuotesRequest(e.Text) {
				p.Addf(fmt.Sprintf("%s[%d].text", list.name, i), "quotes the request in an HTML page: Envoy doesn't HTML-escape what it substitutes, so a crafted path or header can inject markup; quote request values in json bodies only")
			}
		}
	}
	for i, e := range c.Upstream {
		for j, s := range e.Statuses {
			if h, ok := challenges[s]; ok {
				p.Addf(fmt.Sprintf("upstream[%d].statuses[%d]", i, j), "replacing a %d drops the service's %s header, which clients need to authenticate", s, h)
			}
		}
	}
	return p.Err()
}

// isHTML reports whether contentType is an HTML media type.
func isHTML(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mediaType == "text/html" || mediaType == "application/xhtml+xml")
}

// challenges are the headers a replacement of the status loses that
// clients can't do without.
var challenges = map[uint32]string{401: "www-authenticate", 407: "proxy-authenticate"}

// Build implements items.Item: the patches for the newest Envoy.
func (c *CustomErrors) Build() ([]envoyfilter.Patch, error) { return c.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: a string in a json body that the
// release's Envoy refuses (an operator added since) is refused for it, as
// items.TextsFor does for the declared texts.
func (c *CustomErrors) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	var p items.Problems
	for _, list := range []struct {
		name  string
		pages []Page
	}{{"localReplies", c.LocalReplies}, {"upstream", c.Upstream}} {
		for i, e := range list.pages {
			p.Add("", items.JSONFor(fmt.Sprintf("%s[%d].json", list.name, i), e.JSON, r.Envoy))
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	var patches []envoyfilter.Patch
	if len(c.LocalReplies) > 0 {
		cfg := &hcmv3.LocalReplyConfig{}
		for _, e := range c.LocalReplies {
			format := e.format()
			format.ContentType = e.contentType()
			cfg.Mappers = append(cfg.Mappers, &hcmv3.ResponseMapper{
				Filter:             statusFilter(e.Statuses),
				StatusCode:         items.OptionalUInt32(e.RewriteStatus),
				BodyFormatOverride: format,
			})
		}
		p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{LocalReplyConfig: cfg})
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	if len(c.Upstream) > 0 {
		p, err := customResponse(c.Upstream)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}

// format is the entry's body as Envoy's substitution format string.
func (e Page) format() *corev3.SubstitutionFormatString {
	if e.Text != "" {
		return &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: e.Text},
			}},
		}
	}
	// json_format is a google.protobuf.Struct in Envoy's proto: this is
	// the field's own type, filled from the typed map.
	return &corev3.SubstitutionFormatString{
		Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: items.JSONStruct(e.JSON)},
	}
}

// contentType is the entry's content type, or the default for its body.
func (e Page) contentType() string {
	switch {
	case e.ContentType != "":
		return e.ContentType
	case len(e.JSON) > 0:
		return DefaultJSONContentType
	}
	return DefaultTextContentType
}

// statusFilter matches local replies with one of statuses.
func statusFilter(statuses []uint32) *accesslogv3.AccessLogFilter {
	filters := make([]*accesslogv3.AccessLogFilter, 0, len(statuses))
	for _, s := range statuses {
		filters = append(filters, &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
			StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
				Op:    accesslogv3.ComparisonFilter_EQ,
				Value: &corev3.RuntimeUInt32{DefaultValue: s, RuntimeKey: runtimeKeyPrefix + strconv.FormatUint(uint64(s), 10)},
			}},
		}})
	}
	if len(filters) == 1 {
		return filters[0]
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{
		OrFilter: &accesslogv3.OrFilter{Filters: filters},
	}}
}

// customResponse is the custom response filter replacing each entry's
// statuses. It is optional: an Envoy built without it (istio-proxy) skips
// it instead of rejecting the listener.
func customResponse(pages []Page) (envoyfilter.Patch, error) {
	list := &xdsmatcherv3.Matcher_MatcherList{}
	for _, e := range pages {
		predicate, err := statusPredicate(e.Statuses)
		if err != nil {
			return envoyfilter.Patch{}, err
		}
		// The policy ignores the format's content_type: the header is set
		// on the reply instead.
		action, err := envoyfilter.Any(&localresponsev3.LocalResponsePolicy{
			BodyFormat:           e.format(),
			StatusCode:           items.OptionalUInt32(e.RewriteStatus),
			ResponseHeadersToAdd: []*corev3.HeaderValueOption{envoyfilter.SetHeader("content-type", e.contentType())},
		})
		if err != nil {
			return envoyfilter.Patch{}, err
		}
		list.Matchers = append(list.Matchers, &xdsmatcherv3.Matcher_MatcherList_FieldMatcher{
			Predicate: predicate,
			OnMatch: &xdsmatcherv3.Matcher_OnMatch{OnMatch: &xdsmatcherv3.Matcher_OnMatch_Action{
				Action: &xdscorev3.TypedExtensionConfig{Name: LocalResponsePolicy, TypedConfig: action},
			}},
		})
	}
	p, err := envoyfilter.InsertHTTPFilter(CustomResponse, &customresponsev3.CustomResponse{
		CustomResponseMatcher: &xdsmatcherv3.Matcher{MatcherType: &xdsmatcherv3.Matcher_MatcherList_{MatcherList: list}},
	})
	if err != nil {
		return envoyfilter.Patch{}, err
	}
	p.Value.(*hcmv3.HttpFilter).IsOptional = true
	return p, nil
}

// statusPredicate matches a response whose status is one of statuses.
func statusPredicate(statuses []uint32) (*xdsmatcherv3.Matcher_MatcherList_Predicate, error) {
	input, err := envoyfilter.Any(&matcherv3.HttpResponseStatusCodeMatchInput{})
	if err != nil {
		return nil, err
	}
	preds := make([]*xdsmatcherv3.Matcher_MatcherList_Predicate, 0, len(statuses))
	for _, s := range statuses {
		preds = append(preds, &xdsmatcherv3.Matcher_MatcherList_Predicate{
			MatchType: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_{
				SinglePredicate: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate{
					Input: &xdscorev3.TypedExtensionConfig{Name: StatusCodeInput, TypedConfig: input},
					Matcher: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_ValueMatch{
						ValueMatch: &xdsmatcherv3.StringMatcher{MatchPattern: &xdsmatcherv3.StringMatcher_Exact{
							Exact: strconv.FormatUint(uint64(s), 10),
						}},
					},
				},
			},
		})
	}
	if len(preds) == 1 {
		return preds[0], nil
	}
	return &xdsmatcherv3.Matcher_MatcherList_Predicate{MatchType: &xdsmatcherv3.Matcher_MatcherList_Predicate_OrMatcher{
		OrMatcher: &xdsmatcherv3.Matcher_MatcherList_Predicate_PredicateList{Predicate: preds},
	}}, nil
}
