package emitcheck_test

import (
	"slices"
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/emitcheck"
)

// The walk finds every value with a rule, however deep, inside Any-packed
// typed configs too, and only those.
func TestCollectFindsEveryValueWithARule(t *testing.T) {
	logFormat, err := structpb.NewStruct(map[string]any{
		"method": "%REQ(:METHOD)%",
		"http":   map[string]any{"status": "%RESPONSE_CODE%", "tags": []any{"%UPSTREAM_HOST%", 7.0}},
		"n":      1.0,
	})
	if err != nil {
		t.Fatal(err)
	}
	file, err := anypb.New(&filev3.FileAccessLog{Path: "/var/lib/istio/data/access.log", AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
		Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: logFormat},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StreamIdleTimeout: durationpb.New(1),
		AccessLog:         []*accesslogv3.AccessLog{{Name: "envoy.access_loggers.file", ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: file}}},
		LocalReplyConfig: &hcmv3.LocalReplyConfig{BodyFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "%LOCAL_REPLY_BODY%\n"}}},
		}},
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			ResponseHeadersToAdd:    []*corev3.HeaderValueOption{envoyfilter.SetHeader("x-frame-options", "DENY")},
			ResponseHeadersToRemove: []string{"server"},
			VirtualHosts: []*routev3.VirtualHost{{Name: "v", Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "^/a.*"}}},
			}}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := emitcheck.Collect(&hcmv3.HttpFilter{Name: "x", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: hcm}})
	want := []emitcheck.Value{
		{Kind: emitcheck.Format, Text: "%REQ(:METHOD)%"},
		{Kind: emitcheck.Format, Text: "%RESPONSE_CODE%"},
		{Kind: emitcheck.Format, Text: "%UPSTREAM_HOST%"},
		{Kind: emitcheck.ProxyFile, Text: "/var/lib/istio/data/access.log"},
		{Kind: emitcheck.Format, Text: "%LOCAL_REPLY_BODY%\n"},
		{Kind: emitcheck.HeaderName, Text: "x-frame-options"},
		{Kind: emitcheck.HeaderValue, Text: "DENY"},
		{Kind: emitcheck.HeaderName, Text: "server"},
		{Kind: emitcheck.Regex, Text: "^/a.*"},
	}
	sortValues := func(v []emitcheck.Value) {
		slices.SortFunc(v, func(a, b emitcheck.Value) int { return strings.Compare(a.Text, b.Text) })
	}
	sortValues(got)
	sortValues(want)
	if !slices.Equal(got, want) {
		t.Errorf("collected\n%v\nwant\n%v", got, want)
	}
}

// Each rule refuses for the releases whose Envoy refuses, in words about
// the value, and passes what Envoy takes.
func TestCheckerRefusesWhatEachReleaseRefuses(t *testing.T) {
	v136, v139, v140 := envoyfilter.Version{Major: 1, Minor: 36}, envoyfilter.Version{Major: 1, Minor: 39}, envoyfilter.Version{Major: 1, Minor: 40}
	six := `(?i)^(?:api\.example\.com|www\.example\.com|shop\.example\.com|checkout\.example\.com|accounts\.example\.com|login\.example\.com)(?::[0-9]+)?$`
	for _, c := range []struct {
		v     emitcheck.Value
		envoy envoyfilter.Version
		want  string // "" accepted
	}{
		{emitcheck.Value{Kind: emitcheck.Regex, Text: six}, v140, "program size is 110"},
		{emitcheck.Value{Kind: emitcheck.Regex, Text: six}, v136, "program size is 117"},
		{emitcheck.Value{Kind: emitcheck.Regex, Text: "^/api(?:[/?].*)?$"}, v140, ""},
		{emitcheck.Value{Kind: emitcheck.Regex, Text: `\x{4e00}`}, v139, "RE2 refuses"},
		{emitcheck.Value{Kind: emitcheck.Regex, Text: `\x{4e00}`}, v136, ""},
		{emitcheck.Value{Kind: emitcheck.Regex, Text: ""}, v140, "empty regex"},
		{emitcheck.Value{Kind: emitcheck.Format, Text: "%REQ(:PATH)% %NOT_AN_OPERATOR%"}, v140, "format string"},
		{emitcheck.Value{Kind: emitcheck.Format, Text: "50% off"}, v140, "Envoy refuses"},
		{emitcheck.Value{Kind: emitcheck.Format, Text: "100%% %RESPONSE_CODE%"}, v140, ""},
		{emitcheck.Value{Kind: emitcheck.HeaderValue, Text: "a\nb"}, v140, "header value"},
		{emitcheck.Value{Kind: emitcheck.HeaderValue, Text: "50% off"}, v140, "header value"},
		{emitcheck.Value{Kind: emitcheck.PlainHeaderValue, Text: "50% off"}, v140, ""},
		{emitcheck.Value{Kind: emitcheck.HeaderName, Text: "bad header"}, v140, "valid HTTP header name"},
		{emitcheck.Value{Kind: emitcheck.HeaderName, Text: "host"}, v140, "host can't be changed"},
		{emitcheck.Value{Kind: emitcheck.HeaderName, Text: "x-frame-options"}, v140, ""},
		{emitcheck.Value{Kind: emitcheck.ProxyFile, Text: "/var/lib/istio/data/logs/access.log"}, v140, "folder an Istio proxy doesn't have"},
		{emitcheck.Value{Kind: emitcheck.ProxyFile, Text: "/dev/stdout"}, v140, ""},
	} {
		got := emitcheck.NewChecker().Check([]emitcheck.Value{c.v, c.v}, c.envoy)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%v for Envoy %s: refused: %s", c.v, c.envoy, got[0].Msg)
		case c.want != "" && len(got) != 1:
			t.Errorf("%v for Envoy %s: %d refusals, want 1", c.v, c.envoy, len(got))
		case c.want != "" && (!strings.Contains(got[0].Msg, c.want) || strings.Contains(got[0].Msg, "envoy.")):
			t.Errorf("%v for Envoy %s: %q lacks %q", c.v, c.envoy, got[0].Msg, c.want)
		}
	}
}
