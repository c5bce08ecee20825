package format_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
	fmtcheck "github.com/globalconfig/globalconfig/items/internal/format"
)

func TestCheckFormatAccepts(t *testing.T) {
	for _, format := range []string{
		"",
		"plain text, no operators",
		"100%% sure, %%%%",
		"%RESPONSE_CODE%",
		"[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n",
		"%START_TIME(%Y/%m/%dT%H:%M:%S%z %s)%",
		"%START_TIME(%s.%3f)%",
		"%REQ(x-request-id):36%",
		"%RESPONSE_CODE()%",
		"%DYNAMIC_METADATA(envoy.filters.http.rbac:shadow_engine_result)%",
		"%FILTER_STATE(envoy.network.application_protocols:PLAIN):20%",
		"%RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES)%",
		"<p>%LOCAL_REPLY_BODY%</p>",
		"%METADATA(ROUTE:com.example:team):20%",
	} {
		var p items.Problems
		fmtcheck.Check(&p, "text", format)
		if err := p.Err(); err != nil {
			t.Errorf("Check(%q) = %v, want no problem", format, err)
		}
	}
}

func TestCheckFormatRefuses(t *testing.T) {
	for _, c := range []struct{ format, want string }{
		{"50% off", `a lone "%" must be written "%%"`},
		{"ends with %", `a lone "%"`},
		{"%RESPONSE_CODE", `"%RESPONSE_CODE" has no closing "%"`},
		{"%RESPONSE_COD%", "did you mean %RESPONSE_CODE%?"},
		{"%NOT_AN_OPERATOR_AT_ALL%", "see Envoy's access log command operators"},
		{"%response_code%", "command operators are upper case; did you mean %RESPONSE_CODE%?"},
		{"%REQ%", "%REQ% needs an argument"},
		{"%REQ()%", "%REQ% needs an argument"},
		{"%PROTOCOL(x)%", "%PROTOCOL% takes no argument or length"},
		{"%PROTOCOL:3%", "%PROTOCOL% takes no argument or length"},
		{"%START_TIME:10%", "%START_TIME% takes no :N length"},
		{"%REQ(a?b?c)%", "at most one alternative"},
		{"%REQ(a):99999999999999999999999%", "is too large"},
		{"%CEL(request.path)%", "envoy.formatter.cel"},
		{"%METADATA(REQUEST:x:y)%", "the metadata kind must be one of DYNAMIC"},
		{"%REQ(a)b)%", "is not a command operator"},
		{"15% off and 20% more", "is not a command operator"},
	} {
		var p items.Problems
		fmtcheck.Check(&p, "text", c.format)
		err := p.Err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%q) = %v, want a problem with %q", c.format, err, c.want)
		}
	}
}

func TestCheckFormatReportsEveryUnknownOperator(t *testing.T) {
	var p items.Problems
	fmtcheck.Check(&p, "text", "%RESPONSE_COD% %PROTOCL% %RESPONSE_CODE%")
	if p.Len() != 2 {
		t.Errorf("got %d problems, want 2: %v", p.Len(), p.Err())
	}
}
