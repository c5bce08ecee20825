package app

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// roundTrips answers with the errors in errs, one per call, then 200.
type roundTrips struct {
	errs  []error
	calls int
}

func (r *roundTrips) RoundTrip(*http.Request) (*http.Response, error) {
	r.calls++
	if r.calls <= len(r.errs) {
		return nil, r.errs[r.calls-1]
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func TestReconnectTransport(t *testing.T) {
	newT := func(next http.RoundTripper) *reconnectTransport {
		return &reconnectTransport{next: next, every: time.Millisecond, max: time.Minute, now: time.Now}
	}
	// A list or watch that can't connect waits for the server.
	next := &roundTrips{errs: []error{refused(), refused(), refused()}}
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:6443/api/v1/configmaps?watch=true", nil)
	if resp, err := newT(next).RoundTrip(req); err != nil || resp.StatusCode != http.StatusOK || next.calls != 4 {
		t.Errorf("GET: %v, %d calls; want success on the 4th", err, next.calls)
	}
	// Anything else is not repeated: a write may have reached the server.
	next = &roundTrips{errs: []error{refused()}}
	req, _ = http.NewRequest(http.MethodPatch, "https://127.0.0.1:6443/apis/x", strings.NewReader("{}"))
	if _, err := newT(next).RoundTrip(req); err == nil || next.calls != 1 {
		t.Errorf("PATCH: %v after %d calls; want the error after 1", err, next.calls)
	}
	// An error after the connection was made is not a dial error.
	next = &roundTrips{errs: []error{errors.New("http2: stream closed")}}
	req, _ = http.NewRequest(http.MethodGet, "https://127.0.0.1:6443/api", nil)
	if _, err := newT(next).RoundTrip(req); err == nil || next.calls != 1 {
		t.Errorf("GET with a stream error: %v after %d calls", err, next.calls)
	}
	// The request's context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next = &roundTrips{errs: []error{refused(), refused()}}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:6443/api", nil)
	if _, err := newT(next).RoundTrip(req); err == nil || next.calls != 1 {
		t.Errorf("cancelled GET: %v after %d calls", err, next.calls)
	}
	// And the wait is bounded.
	clock := time.Now()
	tr := newT(&roundTrips{errs: []error{refused(), refused(), refused()}})
	tr.max, tr.now = 2*time.Second, func() time.Time { clock = clock.Add(time.Second); return clock }
	req, _ = http.NewRequest(http.MethodGet, "https://127.0.0.1:6443/api", nil)
	if _, err := tr.RoundTrip(req); err == nil {
		t.Error("the wait did not end at its bound")
	}
}

// Only pkg/app (and the CLI above it) may know the sinks: the controller,
// the MCP server and the webhook never import one another.
func TestSinksDoNotImportEachOther(t *testing.T) {
	sinks := map[string]bool{"controller": true, "mcp": true, "webhook": true}
	dirs, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "app" || d.Name() == "cli" {
			continue
		}
		files, _ := filepath.Glob(filepath.Join("..", d.Name(), "*.go"))
		for _, file := range files {
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				name, ok := strings.CutPrefix(path, "github.com/globalconfig/globalconfig/pkg/")
				if ok && sinks[name] && name != d.Name() {
					t.Errorf("%s imports %s", file, path)
				}
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("only %d files checked", checked)
	}
}
