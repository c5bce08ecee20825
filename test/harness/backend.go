package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Seen is what the backend saw of one request, as it answers it in JSON.
type Seen struct {
	Method    string              `json:"method"`
	Path      string              `json:"path"`
	Headers   map[string][]string `json:"headers"`
	Remote    string              `json:"remote"`
	BodyBytes int                 `json:"bodyBytes"`
}

// Header is the first value of a header the backend saw, "" when none.
func (s Seen) Header(name string) string {
	for k, v := range s.Headers {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Has tells whether the request carried the header.
func (s Seen) Has(name string) bool {
	for k := range s.Headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// Backend is the service behind the gateways, on loopback. Its paths:
//
//	/echo          the request as it arrived, in JSON (every other path too)
//	/text?n=N      N bytes of compressible text; &ct= sets the content type
//	/status?code=N answers N with a body of its own
//	/slow?ms=N     answers after N milliseconds
//
// and ?rh=name:value (repeatable) adds response headers to any of them.
// Every answer carries BackendHeader: BackendName, so a test can tell the
// backend's answers from the gateway's own (a 413, a 429, a health
// check's 200).
type Backend struct {
	srv  *http.Server
	Addr *net.TCPAddr
}

// The header the backend stamps on every answer, and its value.
const (
	BackendHeader = "x-backend"
	BackendName   = "echo"
)

// StartBackend starts the backend on a free loopback port.
func StartBackend() (*Backend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Backend{Addr: ln.Addr().(*net.TCPAddr)}
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

// Close stops the backend; a nil one is fine.
func (b *Backend) Close() {
	if b != nil {
		_ = b.srv.Close()
	}
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	w.Header().Set(BackendHeader, BackendName)
	q := r.URL.Query()
	for _, rh := range q["rh"] {
		if k, v, ok := strings.Cut(rh, ":"); ok {
			w.Header().Set(k, v)
		}
	}
	switch r.URL.Path {
	case "/text":
		size, _ := strconv.Atoi(q.Get("n"))
		ct := q.Get("ct")
		if ct == "" {
			ct = "text/plain"
		}
		w.Header().Set("Content-Type", ct)
		// With its length known, as a file server would send it: Envoy's
		// compressors (like nginx's gzip_min_length) judge minContentLength
		// by Content-Length, and compress a chunked body of any length.
		w.Header().Set("Content-Length", strconv.Itoa(size))
		line := "globalconfig sends the proxy's knobs from one ConfigMap.\n"
		body := strings.Repeat(line, size/len(line)+1)[:size]
		_, _ = io.WriteString(w, body)
		return
	case "/status":
		code, err := strconv.Atoi(q.Get("code"))
		if err != nil || code < 200 || code > 599 {
			code = http.StatusBadRequest
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		fmt.Fprintf(w, "the backend answered %d\n", code)
		return
	case "/slow":
		ms, _ := strconv.Atoi(q.Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Seen{Method: r.Method, Path: r.URL.RequestURI(), Headers: r.Header, Remote: r.RemoteAddr, BodyBytes: int(n)})
}

// Collector is a Zipkin collector on loopback: it keeps the spans posted
// to /api/v2/spans.
type Collector struct {
	srv   *http.Server
	Addr  *net.TCPAddr
	mu    sync.Mutex
	spans []ZipkinSpan
}

// ZipkinSpan is the part of a Zipkin v2 span the tests read.
type ZipkinSpan struct {
	TraceID       string                       `json:"traceId"`
	Name          string                       `json:"name"`
	Kind          string                       `json:"kind"`
	LocalEndpoint struct{ ServiceName string } `json:"localEndpoint"`
	Tags          map[string]string            `json:"tags"`
}

// StartCollector starts the collector on a free loopback port.
func StartCollector() (*Collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Collector{Addr: ln.Addr().(*net.TCPAddr)}
	c.srv = &http.Server{Handler: http.HandlerFunc(c.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// Close stops the collector; a nil one is fine.
func (c *Collector) Close() {
	if c != nil {
		_ = c.srv.Close()
	}
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	var spans []ZipkinSpan
	if r.URL.Path != "/api/v2/spans" || json.NewDecoder(r.Body).Decode(&spans) != nil {
		http.Error(w, "not a Zipkin v2 JSON span list", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.spans = append(c.spans, spans...)
	c.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []ZipkinSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ZipkinSpan(nil), c.spans...)
}
