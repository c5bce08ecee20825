package customerrors_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/customerrors"
)

func TestWarnings(t *testing.T) {
	local := &customerrors.CustomErrors{LocalReplies: []customerrors.Page{{Statuses: []uint32{503}, Text: "down"}}}
	if err := local.Warnings(); err != nil {
		t.Errorf("localReplies alone warns: %v", err)
	}
	upstream := &customerrors.CustomErrors{Upstream: []customerrors.Page{{Statuses: []uint32{404, 401}, Text: "no"}}}
	err := upstream.Warnings()
	if err == nil {
		t.Fatal("upstream does not warn")
	}
	for _, want := range []string{"upstream: istio-proxy is built without " + customerrors.CustomResponse, "upstream[0].statuses[1]: replacing a 401 drops the service's www-authenticate header"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("warnings %q lack %q", err, want)
		}
	}
}

func TestWarningsHTMLQuotingTheRequest(t *testing.T) {
	c := &customerrors.CustomErrors{LocalReplies: []customerrors.Page{
		{Statuses: []uint32{404}, ContentType: "text/html; charset=utf-8", Text: "<p>No page at %REQ(:path)%</p>"},
		{Statuses: []uint32{503}, ContentType: "text/html", Text: "<p>Error %RESPONSE_CODE%, 100%% sure</p>"},
		{Statuses: []uint32{429}, JSON: map[string]items.JSONValue{"path": {Kind: "string", Text: "%REQ(:path)%"}}},
	}}
	err := c.Warnings()
	if err == nil || !strings.Contains(err.Error(), "localReplies[0].text: quotes the request in an HTML page") {
		t.Fatalf("warnings = %v, want one for localReplies[0].text", err)
	}
	if strings.Count(err.Error(), "quotes the request") != 1 {
		t.Errorf("warnings = %v, want only localReplies[0] (json is escaped, the 503 page quotes nothing)", err)
	}
}
