package downstream_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/downstream"
)

func boolp(b bool) *bool { return &b }

// What validate, the webhook and the status warn about for http1: an
// HTTP/1.0 request without Host would still get 400, and trailers or
// header case replace every cluster's HTTP protocol options.
func TestHTTP1Warnings(t *testing.T) {
	for _, c := range []struct {
		name string
		h    downstream.HTTP1
		want []string // substrings, one per warning, in order
	}{
		{"HTTP/1.0 without a default host", downstream.HTTP1{AcceptHTTP10: boolp(true)},
			[]string{"http1.acceptHttp10: HTTP/1.0 requests without a Host header"}},
		{"HTTP/1.0 with a default host", downstream.HTTP1{AcceptHTTP10: boolp(true), DefaultHost: "www.example.com"}, nil},
		{"trailers", downstream.HTTP1{EnableTrailers: boolp(true)},
			[]string{"http1.enableTrailers: sets the HTTP/1 options of every cluster"}},
		{"header case", downstream.HTTP1{PreserveHeaderCase: boolp(true)},
			[]string{"http1.preserveHeaderCase: sets the HTTP/1 options of every cluster"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &downstream.Downstream{HTTP1: &c.h}
			var got []string
			if err := d.Warnings(); err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if len(got) != len(c.want) {
				t.Fatalf("warnings %q, want %d", got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %q lacks %q", got[i], w)
				}
			}
		})
	}
}

// Trailers and header case claim the clusters' HTTP protocol options, and
// nothing else of http1 does.
func TestHTTP1Claims(t *testing.T) {
	d := &downstream.Downstream{HTTP1: &downstream.HTTP1{AcceptHTTP10: boolp(true), EnableTrailers: boolp(true), PreserveHeaderCase: boolp(true)}}
	claims := d.Claims()
	if len(claims) != 2 || claims[0].Field != items.ClusterHTTPProtocolOptions || claims[0].Path != "http1.enableTrailers" || claims[1].Path != "http1.preserveHeaderCase" {
		t.Errorf("claims %+v", claims)
	}
	if c := (&downstream.Downstream{HTTP1: &downstream.HTTP1{AcceptHTTP10: boolp(true)}}).Claims(); len(c) != 0 {
		t.Errorf("acceptHttp10 claims %+v", c)
	}
}
