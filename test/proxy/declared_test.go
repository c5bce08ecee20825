package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/test/harness"
)

// An item proves its effect at the proxy from its own testdata: the cases
// of items/<package>/testdata/traffic.yaml are applied to both real
// gateways and their requests sent through them, with no Go code of the
// item's in this suite. The format is documented in CONTRIBUTING.md.

// TrafficFile is the name of an item's declared traffic cases.
const TrafficFile = "traffic.yaml"

// trafficCase is one document and the requests that show what it does.
type trafficCase struct {
	Name string `json:"name"`
	// Document is a golden input beside the file (default
	// example.in.yaml), made the whole configuration.
	Document string           `json:"document"`
	Requests []trafficRequest `json:"requests"`
}

type trafficRequest struct {
	Method string `json:"method"` // default GET
	// Path is the backend's (harness.Backend): /echo, /text?n=N,
	// /status?code=N, /slow?ms=N.
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	// BodyBytes sends a body of that many bytes.
	BodyBytes int           `json:"bodyBytes"`
	Expect    trafficExpect `json:"expect"`
}

type trafficExpect struct {
	Status int `json:"status"`
	// Headers are response headers and their exact values; Absent are
	// response headers that must not be there.
	Headers map[string]string `json:"headers"`
	Absent  []string          `json:"absent"`
	// MaxBodyBytes bounds the response body as it arrived.
	MaxBodyBytes int `json:"maxBodyBytes"`
	// Upstream are request headers the backend must have seen, and
	// UpstreamAbsent those it must not (the request goes to /echo).
	Upstream       map[string]string `json:"upstream"`
	UpstreamAbsent []string          `json:"upstreamAbsent"`
	// UpstreamBodyBytes is the body size the backend must have seen.
	UpstreamBodyBytes *int `json:"upstreamBodyBytes"`
	// AnsweredBy is who made the response: "backend" (it carries the
	// backend's stamp, harness.BackendHeader) or "gateway" (Envoy answered
	// itself: the request never got an answer from the backend).
	AnsweredBy string `json:"answeredBy"`
	// DecodedBodyBytes is the body's size once decoded as its
	// Content-Encoding says (gzip, or none).
	DecodedBodyBytes *int `json:"decodedBodyBytes"`
}

// Who answered, for expect.answeredBy.
const (
	answeredByBackend = "backend"
	answeredByGateway = "gateway"
)

// readTraffic reads and checks one traffic.yaml: every case names a
// document that exists, and every request asserts a status.
func readTraffic(path string) ([]trafficCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cases []trafficCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no case", path)
	}
	for i, c := range cases {
		if c.Name == "" {
			return nil, fmt.Errorf("%s: case %d has no name", path, i)
		}
		if c.Document == "" {
			cases[i].Document = "example.in.yaml"
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(path), cases[i].Document)); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, c.Name, err)
		}
		if len(c.Requests) == 0 {
			return nil, fmt.Errorf("%s: %s: no request", path, c.Name)
		}
		for j, r := range c.Requests {
			if r.Expect.Status == 0 || !strings.HasPrefix(r.Path, "/") {
				return nil, fmt.Errorf("%s: %s: request %d needs a path and an expected status", path, c.Name, j)
			}
			if a := r.Expect.AnsweredBy; a != "" && a != answeredByBackend && a != answeredByGateway {
				return nil, fmt.Errorf("%s: %s: request %d: answeredBy is %s or %s, not %q", path, c.Name, j, answeredByGateway, answeredByBackend, a)
			}
		}
	}
	return cases, nil
}

// provenInGo are the items whose effect this suite proves in Go tests
// (items_test.go), by the test that does. Every other item must declare
// its traffic cases.
var provenInGo = map[string]string{
	"brotli":         "TestBrotliAndZstdCompress",
	"zstd":           "TestBrotliAndZstdCompress",
	"localRateLimit": "TestLocalRateLimit",
	"ipAccess":       "TestIPAccess",
	"customErrors":   "TestCustomErrors",
	"headers":        "TestHeaders",
	"clientIP":       "TestClientIPFromProxyProtocol",
	"downstream":     "TestDownstreamLimits",
	"upstream":       "TestUpstreamMaxRequestsPerConnection",
	"hardening":      "TestHardening",
	"tls":            "TestTLSPolicyAndHSTS",
	"accessLog":      "TestAccessLog",
	"tracing":        "TestTracingToZipkin",
	// The limits are shared by both gateways and counted by the service
	// across cases: declared cases, run at each gateway in turn, can't
	// say what the second one sees.
	"globalRateLimit": "TestGlobalRateLimitShared",
	// Real auth services, stopped and started, and oauth2-proxy's
	// sign-in form: more than declared requests can say.
	"extAuth": "TestExtAuth",
}

// Every registered item proves its effect at the proxy: by declared
// traffic cases, or by a Go test of this suite.
func TestEveryItemProvenAtTheProxy(t *testing.T) {
	for _, r := range items.All() {
		dir := itemTestdata(t, r.Name)
		_, err := os.Stat(filepath.Join(dir, TrafficFile))
		declared := err == nil
		_, inGo := provenInGo[r.Name]
		switch {
		case !declared && !inGo:
			t.Errorf("item %s proves nothing at the proxy: add %s", r.Name, filepath.Join(dir, TrafficFile))
		case declared && inGo:
			t.Errorf("item %s is proven twice: by %s and by %s", r.Name, TrafficFile, provenInGo[r.Name])
		}
	}
}

// itemTestdata is the testdata folder of item name: the one whose
// example.in.yaml configures it.
func itemTestdata(t *testing.T, name string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "example.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line == name+":" || strings.HasPrefix(line, name+": ") {
				return filepath.Dir(f)
			}
		}
	}
	t.Fatalf("no items/*/testdata/example.in.yaml configures %s", name)
	return ""
}

// TestDeclaredTraffic runs every item's traffic.yaml at both gateways.
func TestDeclaredTraffic(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", TrafficFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no item declares traffic cases")
	}
	ctx := setup(t)
	for _, file := range files {
		cases, err := readTraffic(file)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Base(filepath.Dir(filepath.Dir(file)))
		for _, c := range cases {
			t.Run(pkg+"/"+c.Name, func(t *testing.T) {
				doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), c.Document))
				if err != nil {
					t.Fatal(err)
				}
				use(ctx, t, string(doc))
				each(t, func(t *testing.T, g *gw) {
					for i, r := range c.Requests {
						checkRequest(t, fmt.Sprintf("request %d (%s %s)", i, r.method(), r.Path), g, r)
					}
				})
			})
		}
	}
}

func (r trafficRequest) method() string {
	if r.Method == "" {
		return "GET"
	}
	return r.Method
}

func checkRequest(t *testing.T, what string, g *gw, r trafficRequest) {
	t.Helper()
	resp, err := do(t.Context(), r.method(), g.url(r.Path), r.Headers, strings.Repeat("x", r.BodyBytes))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	e := r.Expect
	if resp.status != e.Status {
		t.Errorf("%s: status %d, want %d: %.200s", what, resp.status, e.Status, resp.body)
	}
	for k, v := range e.Headers {
		if got := resp.header.Get(k); got != v {
			t.Errorf("%s: response header %s: %q, want %q", what, k, got, v)
		}
	}
	for _, k := range e.Absent {
		if _, ok := resp.header[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("%s: response header %s is there: %q", what, k, resp.header.Get(k))
		}
	}
	if e.MaxBodyBytes > 0 && len(resp.body) > e.MaxBodyBytes {
		t.Errorf("%s: body of %d bytes, want at most %d", what, len(resp.body), e.MaxBodyBytes)
	}
	stamped := resp.header.Get(harness.BackendHeader) == harness.BackendName
	switch {
	case e.AnsweredBy == answeredByBackend && !stamped:
		t.Errorf("%s: answered by the gateway (no %s: %s), want the backend: %.200s", what, harness.BackendHeader, harness.BackendName, resp.body)
	case e.AnsweredBy == answeredByGateway && stamped:
		t.Errorf("%s: answered by the backend (%s: %s), want the gateway: %.200s", what, harness.BackendHeader, harness.BackendName, resp.body)
	}
	if n := e.DecodedBodyBytes; n != nil {
		body := resp.body
		switch enc := resp.header.Get("Content-Encoding"); enc {
		case "":
		case "gzip":
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err == nil {
				body, err = io.ReadAll(zr)
			}
			if err != nil {
				t.Fatalf("%s: a gzip body that does not decode: %v", what, err)
			}
		default:
			t.Fatalf("%s: decodedBodyBytes decodes gzip only, not %q", what, enc)
		}
		if len(body) != *n {
			t.Errorf("%s: %d bytes once decoded, want %d", what, len(body), *n)
		}
	}
	if len(e.Upstream)+len(e.UpstreamAbsent) == 0 && e.UpstreamBodyBytes == nil {
		return
	}
	var seen harness.Seen
	if err := json.Unmarshal(resp.body, &seen); err != nil {
		t.Fatalf("%s: not the backend's echo: %v: %.200s", what, err, resp.body)
	}
	for k, v := range e.Upstream {
		if got := seen.Header(k); got != v {
			t.Errorf("%s: the backend saw %s: %q, want %q", what, k, got, v)
		}
	}
	for _, k := range e.UpstreamAbsent {
		if seen.Has(k) {
			t.Errorf("%s: the backend saw %s: %q", what, k, seen.Header(k))
		}
	}
	if n := e.UpstreamBodyBytes; n != nil && seen.BodyBytes != *n {
		t.Errorf("%s: the backend saw a body of %d bytes, want %d", what, seen.BodyBytes, *n)
	}
}
