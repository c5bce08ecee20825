package items_test

import (
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/items"
)

// A log file must be a stream or a file directly in one of the folders an
// Istio proxy has: Envoy creates no folders.
func TestCheckProxyFile(t *testing.T) {
	long := strings.Repeat("a", items.NameMax+1)
	for _, c := range []struct {
		file string
		want []string // words of the problem; nil: admitted
	}{
		{"/dev/stdout", nil},
		{"/dev/stderr", nil},
		{"/dev/null", nil},
		{"/var/lib/istio/data/access.log", nil},
		{"/etc/istio/proxy/access.log", nil},
		{"/var/lib/istio/data/" + strings.Repeat("a", items.NameMax), nil},
		{"/var/lib/istio/data/logs/access.log", []string{"in a folder an Istio proxy doesn't have (/var/lib/istio/data/logs)", "/var/lib/istio/data/ or /etc/istio/proxy/"}},
		{"/etc/istio/proxy/a/b/c.log", []string{"(/etc/istio/proxy/a/b)"}},
		{"/var/lib/istio/data/" + long, []string{"256 bytes", "at most 255"}},
		{"/var/lib/istio/data/", []string{"absolute, clean"}},
		{"/var/log/envoy/access.log", []string{"can't be written", "/var/lib/istio/data/ or /etc/istio/proxy/"}},
		{"/var/lib/istio/data/../x.log", []string{"absolute, clean"}},
		{"access.log", []string{"absolute, clean"}},
	} {
		var p items.Problems
		items.CheckProxyFile(&p, "accessLog.path", c.file)
		err := p.Err()
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: refused: %v", c.file, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: admitted", c.file)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "accessLog.path: ") {
				t.Errorf("%s: %q lacks %q", c.file, err, w)
			}
		}
	}
}

type texty struct {
	items.Toggle
	Format  string            `json:"format"`
	Hosts   []string          `json:"hosts"`
	Headers map[string]string `json:"headers"`
}

func (*texty) Texts() []items.Text {
	return []items.Text{
		{Path: "format", Kind: items.TextFormat},
		{Path: "hosts[]", Kind: items.TextPlain},
		{Path: "headers.*", Kind: items.TextHeaderValue, Key: items.TextHeaderName},
	}
}

// EachText names every declared value with its path and kind, map keys
// included, and skips empty ones.
func TestEachText(t *testing.T) {
	it := &texty{Format: "%REQ(:PATH)%", Hosts: []string{"a.example.com", "", "b.example.com"}, Headers: map[string]string{"x-b": "2", "x-a": "1"}}
	var got []string
	items.EachText(it, func(at string, kind items.TextKind, value string) {
		got = append(got, at+" "+string(kind)+" "+value)
	})
	want := []string{
		"format format %REQ(:PATH)%",
		"hosts[0] plain a.example.com",
		"hosts[2] plain b.example.com",
		"headers.x-a headerName x-a",
		"headers.x-b headerName x-b",
		"headers.x-a headerValue 1",
		"headers.x-b headerValue 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
