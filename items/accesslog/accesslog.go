// Package accesslog is the `accessLog` item: a file access log on every
// HTTP connection manager, as text or JSON, optionally only for some status
// codes.
package accesslog

import (
	"maps"
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "accessLog"

// Defaults.
const (
	// DefaultPath is the proxy's standard output, which kubectl logs shows.
	DefaultPath = "/dev/stdout"
	// runtimeKey lets an operator override the status filter at run time.
	runtimeKey = "globalconfig.access_log.min_status"
)

// AccessLog is the `accessLog` section.
type AccessLog struct {
	items.Toggle
	Path          string                     `json:"path" doc:"File the proxy writes to (default /dev/stdout): /dev/stdout, /dev/stderr, or a file directly in /var/lib/istio/data/ or /etc/istio/proxy/, the folders an Istio proxy can write (its root filesystem is read-only, and Envoy creates no folders)."`
	Format        string                     `json:"format" doc:"Text format with Envoy command operators, e.g. \"[%START_TIME%] %REQ(:METHOD)% %RESPONSE_CODE%\\n\"; Envoy's default format when neither format nor json is given."`
	JSON          map[string]items.JSONValue `json:"json" doc:"JSON log lines: field name → Envoy command operator, e.g. status: \"%RESPONSE_CODE%\"; values may nest (http: {method: \"%REQ(:METHOD)%\"}), and numbers, booleans and lists are written as they are. Every string is a format string."`
	MinStatusCode *uint32                    `json:"minStatusCode" doc:"Log only responses with at least this status code, e.g. 400 (status_code_filter GE)."`
}

var (
	_ items.Item      = (*AccessLog)(nil)
	_ items.Ranger    = (*AccessLog)(nil)
	_ items.Texter    = (*AccessLog)(nil)
	_ items.Versioned = (*AccessLog)(nil)
)

// Texts implements items.Texter.
func (*AccessLog) Texts() []items.Text {
	return []items.Text{
		{Path: "path", Kind: items.TextFilePath},
		{Path: "format", Kind: items.TextFormat},
		// json's values may nest: Validate checks every string in
		// them with the format rule (items.CheckJSON), at its own path.
		{Path: "json.*", Key: items.TextPlain},
	}
}

// The status codes HTTP defines, for minStatusCode.
const MinHTTPStatus, MaxHTTPStatus = 100, 599

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*AccessLog) Ranges() []items.Range {
	return []items.Range{{Path: "minStatusCode", Min: MinHTTPStatus, Max: MaxHTTPStatus}}
}

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A file access log, text or JSON, optionally filtered by status code.",
		Stage:            envoyfilter.StageObservability,
		Slot:             0,
		Purpose:          "logs each request",
		Where:            "a merge into every HTTP connection manager of the context",
		EnabledByDefault: true,
		New:              func() items.Item { return &AccessLog{Path: DefaultPath} },
	})
}

// Validate implements items.Item.
func (a *AccessLog) Validate() error {
	var p items.Problems
	if a.Path == "" {
		p.Addf("path", "must not be empty")
	}
	if a.Format != "" && len(a.JSON) > 0 {
		p.Addf("json", "give either format or json, not both")
	}
	if strings.Contains(a.Format, "\x00") {
		p.Addf("format", "must not contain NUL")
	}
	for _, k := range slices.Sorted(maps.Keys(a.JSON)) {
		if v := a.JSON[k]; v.Kind == "string" && v.Text == "" {
			p.Addf("json."+k, "needs a command operator or text")
		}
	}
	items.CheckJSON(&p, "json", a.JSON)
	items.CheckRanges(&p, a)
	return p.Err()
}

// Build implements items.Item: the patch for the newest Envoy.
func (a *AccessLog) Build() ([]envoyfilter.Patch, error) { return a.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: a string in json that the
// release's Envoy refuses (an operator added since) is refused for it, as
// items.TextsFor does for the declared texts.
func (a *AccessLog) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	if err := items.JSONFor("json", a.JSON, r.Envoy); err != nil {
		return nil, err
	}
	file := &filev3.FileAccessLog{Path: a.Path}
	switch {
	case a.Format != "":
		file.AccessLogFormat = &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: a.Format},
			}},
		}}
	case len(a.JSON) > 0:
		file.AccessLogFormat = &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: items.JSONStruct(a.JSON)},
		}}
	}
	typed, err := envoyfilter.Any(file)
	if err != nil {
		return nil, err
	}
	log := &accesslogv3.AccessLog{Name: envoyfilter.FileAccessLog, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: typed}}
	if v := a.MinStatusCode; v != nil {
		log.Filter = &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
			StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
				Op:    accesslogv3.ComparisonFilter_GE,
				Value: &corev3.RuntimeUInt32{DefaultValue: *v, RuntimeKey: runtimeKey},
			}},
		}}
	}
	p, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{AccessLog: []*accesslogv3.AccessLog{log}})
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
