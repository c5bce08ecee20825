package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/test/harness"
)

// An item proves its effect at the proxy from its own testdata: the cases
// of items/<package>/testdata/traffic.yaml are applied to both real
// gateways and their requests sent through them, with no Go code of the
// item's in this suite. The format is documented in docs/traffic-yaml.md.

// TrafficFile is the name of an item's declared traffic cases.
const TrafficFile = "traffic.yaml"

// trafficCase is one document and what shows its effect: requests, a
// Go test of the item's own package, or both.
type trafficCase struct {
	Name string `json:"name"`
	// Document is a golden input beside the file (default
	// example.in.yaml), made the whole configuration.
	Document string           `json:"document"`
	Requests []trafficRequest `json:"requests"`
	// GoTest names a test function of the item's own package
	// (items/<pkg>/*_test.go), run as a subprocess at each gateway once
	// the document is in effect there and the requests passed: for what
	// data can't say. It reads the gateway with declared.Proxy (test/harness/declared).
	GoTest string `json:"goTest"`
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
	// MaxBodyBytes bounds the response body as it arrived (0: no body).
	MaxBodyBytes *int `json:"maxBodyBytes"`
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
	// Elapsed bounds the time from sending the request to the last byte
	// of its response body (Go durations: "1.5s", "200ms").
	Elapsed *elapsedBounds `json:"elapsed"`
	// SlowerThanWithout is how much slower the request must be than the
	// same request at the same gateway with the item's top-level key
	// taken out of the case's document (a Go duration).
	SlowerThanWithout string `json:"slowerThanWithout"`

	// timing is Elapsed and SlowerThanWithout parsed by readTraffic.
	timing timing
}

type elapsedBounds struct {
	Min string `json:"min"`
	Max string `json:"max"`
}

// Who answered, for expect.answeredBy.
const (
	answeredByBackend = "backend"
	answeredByGateway = "gateway"
)

// goTestName is what a goTest must look like: a Go test function's name.
var goTestName = regexp.MustCompile(`^Test[A-Z0-9_][A-Za-z0-9_]*$`)

// readTraffic reads and checks one traffic.yaml.
func readTraffic(path string) ([]trafficCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseTraffic(path, data)
}

// parseTraffic checks the cases of the traffic.yaml at path: every case
// names a document that exists and has requests or a goTest (a test
// function of the item's package), every request asserts a status, and
// timing expectations are positive Go durations with min at most max.
func parseTraffic(path string, data []byte) ([]trafficCase, error) {
	var cases []trafficCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no case", path)
	}
	dir := filepath.Dir(path)
	for i, c := range cases {
		if c.Name == "" {
			return nil, fmt.Errorf("%s: case %d has no name", path, i)
		}
		if c.Document == "" {
			cases[i].Document = "example.in.yaml"
		}
		if _, err := os.Stat(filepath.Join(dir, cases[i].Document)); err != nil {
			return nil, fmt.Errorf("%s: case %q: %w", path, c.Name, err)
		}
		if len(c.Requests) == 0 && c.GoTest == "" {
			return nil, fmt.Errorf("%s: case %q has no request and no goTest: give it one or both", path, c.Name)
		}
		if c.GoTest != "" {
			if err := goTestDeclared(filepath.Dir(dir), c.GoTest); err != nil {
				return nil, fmt.Errorf("%s: case %q: %w", path, c.Name, err)
			}
		}
		timed := 0
		for j, r := range c.Requests {
			if r.Expect.Status == 0 || !strings.HasPrefix(r.Path, "/") {
				return nil, fmt.Errorf("%s: case %q: request %d needs a path and an expected status", path, c.Name, j)
			}
			if a := r.Expect.AnsweredBy; a != "" && a != answeredByBackend && a != answeredByGateway {
				return nil, fmt.Errorf("%s: case %q: request %d: answeredBy is %s or %s, not %q", path, c.Name, j, answeredByGateway, answeredByBackend, a)
			}
			tm, err := parseTiming(r.Expect)
			if err != nil {
				return nil, fmt.Errorf("%s: case %q: request %d: %w", path, c.Name, j, err)
			}
			cases[i].Requests[j].Expect.timing = tm
			if tm.any() {
				timed++
			}
		}
		if timed > maxTimedRequests {
			return nil, fmt.Errorf("%s: case %q has %d timed requests, at most %d: each is sent %d times at each gateway; split the case", path, c.Name, timed, maxTimedRequests, timedSends)
		}
	}
	return cases, nil
}

// goTestDeclared checks that the package in pkgDir has a test function
// name in one of its _test.go files.
func goTestDeclared(pkgDir, name string) error {
	if !goTestName.MatchString(name) {
		return fmt.Errorf("goTest %q is not a Go test function's name (Test followed by an upper-case letter, a digit or _)", name)
	}
	files, err := filepath.Glob(filepath.Join(pkgDir, "*_test.go"))
	if err != nil {
		return err
	}
	decl := regexp.MustCompile(`(?m)^func ` + name + `\(\w+ \*testing\.T\) \{`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if decl.Match(src) {
			return nil
		}
	}
	return fmt.Errorf("goTest %s: no func %s(t *testing.T) in %s", name, name, filepath.Join(pkgDir, "*_test.go"))
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
// traffic cases (requests, goTests of its own package, or both), or by a
// Go test of this suite, never both.
func TestEveryItemProvenAtTheProxy(t *testing.T) {
	for _, r := range items.All() {
		dir := itemTestdata(t, r.Name)
		file := filepath.Join(dir, TrafficFile)
		_, err := os.Stat(file)
		declared := err == nil
		_, inGo := provenInGo[r.Name]
		switch {
		case !declared && !inGo:
			t.Errorf("item %s proves nothing at the proxy: add %s", r.Name, file)
		case declared && inGo:
			t.Errorf("item %s is proven twice: by %s and by %s", r.Name, TrafficFile, provenInGo[r.Name])
		case declared:
			if _, err := readTraffic(file); err != nil {
				t.Errorf("item %s: %v", r.Name, err)
			}
		}
	}
}

// itemTestdata is the testdata folder of item name: the one whose
// example.in.yaml configures it.
func itemTestdata(t testing.TB, name string) string {
	t.Helper()
	dir, err := testdataOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func testdataOf(name string) (string, error) {
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "items", "*", "testdata", "example.in.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line == name+":" || strings.HasPrefix(line, name+": ") {
				return filepath.Dir(f), nil
			}
		}
	}
	return "", fmt.Errorf("no items/*/testdata/example.in.yaml configures %s", name)
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
	k := 0
	for _, file := range files {
		cases, err := readTraffic(file)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Base(filepath.Dir(filepath.Dir(file)))
		for _, c := range cases {
			if k++; !mine(k) {
				continue // another shard's
			}
			t.Run(pkg+"/"+c.Name, func(t *testing.T) {
				runCase(ctx, t, declaredCase{pkg: pkg, file: file, trafficCase: c})
			})
		}
	}
}

// declaredCase is one case of an item's traffic.yaml, with where it comes
// from.
type declaredCase struct {
	pkg  string // the item's package folder, items/<pkg>
	file string // its traffic.yaml
	trafficCase
}

// pkgDir is the item's package folder.
func (c declaredCase) pkgDir() string { return filepath.Dir(filepath.Dir(c.file)) }

// runCase applies the case's document to both gateways and proves it at
// each: its requests (with their timing), then its goTest. A case with a
// slowerThanWithout first measures the same requests without the item.
func runCase(ctx context.Context, t *testing.T, c declaredCase) {
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(c.file), c.Document))
	if err != nil {
		t.Fatal(err)
	}
	var base baselines
	if c.needsBaseline() {
		base = measureBaseline(ctx, t, c, doc)
	}
	var bin *goTestBinary
	if c.GoTest != "" {
		if bin, err = buildGoTest(ctx, c.pkgDir(), t.TempDir()); err != nil {
			t.Fatalf("%s/%s: goTest %s: %v", c.pkg, c.Name, c.GoTest, err)
		}
		t.Logf("goTest %s: %s built in %.1fs", c.GoTest, bin.pkg, bin.build.Seconds())
	}
	use(ctx, t, string(doc))
	each(t, func(t *testing.T, g *gw) {
		problems, times := c.requestsAt(ctx, g, base[g])
		for _, line := range times {
			t.Log(line)
		}
		for _, msg := range problems {
			t.Error(msg)
		}
		if bin == nil {
			return
		}
		if t.Failed() {
			t.Fatalf("goTest %s not run at Envoy %s: the case's requests failed", c.GoTest, g.Binary.Version)
		}
		took, err := bin.run(ctx, c.GoTest, g)
		if err != nil {
			t.Errorf("%s/%s at Envoy %s: %v", c.pkg, c.Name, g.Binary.Version, err)
			return
		}
		t.Logf("goTest %s ran and passed at Envoy %s in %.1fs", c.GoTest, g.Binary.Version, took.Seconds())
	})
}

// requestsAt sends the case's requests to g and returns what differed
// from their expectations, each naming the request, and the times of each
// timed request's sends (with the baseline's), for the log whether or not
// they pass. base holds, by request index, the times without the item
// (for slowerThanWithout).
func (c declaredCase) requestsAt(ctx context.Context, g *gw, base map[int][]time.Duration) (out, times []string) {
	for i, r := range c.Requests {
		what := fmt.Sprintf("%s/%s request %d %s %s at Envoy %s", c.pkg, c.Name, i, r.method(), r.Path, g.Binary.Version)
		n := 1
		if r.Expect.timing.any() {
			n = timedSends
		}
		var took []time.Duration
		for k := range n {
			start := time.Now()
			resp, err := do(ctx, r.method(), g.url(r.Path), r.Headers, strings.Repeat("x", r.BodyBytes))
			d := time.Since(start)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", what, err))
				break
			}
			if p := checkResponse(r.Expect, resp); len(p) > 0 {
				for _, m := range p {
					if n > 1 {
						m = fmt.Sprintf("send %d of %d: %s", k+1, n, m)
					}
					out = append(out, what+": "+m)
				}
				break
			}
			took = append(took, d)
		}
		if len(took) == n && n > 1 {
			times = append(times, r.Expect.timing.times(what, took, base[i], c.without()))
			out = append(out, r.Expect.timing.judge(what, took, base[i], c.without())...)
		}
	}
	return out, times
}

func (r trafficRequest) method() string {
	if r.Method == "" {
		return "GET"
	}
	return r.Method
}

// checkResponse returns how resp differs from e, one sentence a
// difference (the timing aside: see timing.judge).
func checkResponse(e trafficExpect, resp *response) []string {
	var out []string
	if resp.status != e.Status {
		out = append(out, fmt.Sprintf("status %d, want %d: %.200s", resp.status, e.Status, resp.body))
	}
	for k, v := range e.Headers {
		if got := resp.header.Get(k); got != v {
			out = append(out, fmt.Sprintf("response header %s: %q, want %q", k, got, v))
		}
	}
	for _, k := range e.Absent {
		if _, ok := resp.header[http.CanonicalHeaderKey(k)]; ok {
			out = append(out, fmt.Sprintf("response header %s is there: %q", k, resp.header.Get(k)))
		}
	}
	if n := e.MaxBodyBytes; n != nil && len(resp.body) > *n {
		out = append(out, fmt.Sprintf("body of %d bytes, want at most %d", len(resp.body), *n))
	}
	stamped := resp.header.Get(harness.BackendHeader) == harness.BackendName
	switch {
	case e.AnsweredBy == answeredByBackend && !stamped:
		out = append(out, fmt.Sprintf("answered by the gateway (no %s: %s), want the backend: %.200s", harness.BackendHeader, harness.BackendName, resp.body))
	case e.AnsweredBy == answeredByGateway && stamped:
		out = append(out, fmt.Sprintf("answered by the backend (%s: %s), want the gateway: %.200s", harness.BackendHeader, harness.BackendName, resp.body))
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
				return append(out, fmt.Sprintf("a gzip body that does not decode: %v", err))
			}
		default:
			return append(out, fmt.Sprintf("decodedBodyBytes decodes gzip only, not %q", enc))
		}
		if len(body) != *n {
			out = append(out, fmt.Sprintf("%d bytes once decoded, want %d", len(body), *n))
		}
	}
	if len(e.Upstream)+len(e.UpstreamAbsent) == 0 && e.UpstreamBodyBytes == nil {
		return out
	}
	var seen harness.Seen
	if err := json.Unmarshal(resp.body, &seen); err != nil {
		return append(out, fmt.Sprintf("not the backend's echo: %v: %.200s", err, resp.body))
	}
	for k, v := range e.Upstream {
		if got := seen.Header(k); got != v {
			out = append(out, fmt.Sprintf("the backend saw %s: %q, want %q", k, got, v))
		}
	}
	for _, k := range e.UpstreamAbsent {
		if seen.Has(k) {
			out = append(out, fmt.Sprintf("the backend saw %s: %q", k, seen.Header(k)))
		}
	}
	if n := e.UpstreamBodyBytes; n != nil && seen.BodyBytes != *n {
		out = append(out, fmt.Sprintf("the backend saw a body of %d bytes, want %d", seen.BodyBytes, *n))
	}
	return out
}
