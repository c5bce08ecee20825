package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/globalconfig/globalconfig/test/harness"
)

// The extProc item at real gateways, against the small ext_proc server of
// test/harness (go-control-plane's ext_proc v3 gRPC API) in the test
// process, put in the mesh under a host of its own by a ServiceEntry that
// says GRPC.
const (
	extProcHost = "ext-proc.waf.svc.cluster.local"
	extProcPort = 9100
)

var (
	extProcOnce sync.Once
	extProcErr  error
	extProcSrv  *harness.ExtProc
)

// extProcMesh starts the server once for the suite and puts it in the
// mesh.
func extProcMesh(ctx context.Context, t testing.TB) {
	t.Helper()
	extProcOnce.Do(func() {
		if extProcSrv, extProcErr = harness.StartExtProc(); extProcErr != nil {
			return
		}
		if err := cluster.CreateServiceEntry(ctx, extProcHost, extProcPort, "GRPC", extProcSrv.Port); err != nil && !apierrors.IsAlreadyExists(err) {
			extProcErr = fmt.Errorf("service entry %s: %w", extProcHost, err)
		}
	})
	if extProcErr != nil {
		t.Fatal(extProcErr)
	}
}

// extProcDoc is an extProc section for the test server, with extra keys.
func extProcDoc(extra string) string {
	return fmt.Sprintf("extProc:\n  service: %s\n  port: %d\n%s", extProcHost, extProcPort, extra)
}

// TestExtProc: every request is processed by the server: the header it
// adds reaches the backend, and the one it adds to the response reaches
// the client; a buffered body reaches the server and the backend whole,
// one over the buffer limit is refused with 413; a request it refuses
// gets its status and body, and never reaches the backend.
func TestExtProc(t *testing.T) {
	ctx := setup(t)
	extProcMesh(ctx, t)
	use(ctx, t, extProcDoc("  requestBody: BUFFERED\n"))
	each(t, func(t *testing.T, g *gw) {
		before := extProcSrv.Requests.Load()
		r := mustGet(ctx, t, g.url("/echo"), nil)
		s := echoed(t, r)
		if v := s.Header(harness.ExtProcAdded); v != harness.ExtProcAddedValue {
			t.Errorf("the backend saw %s: %q, want %q (the header the ext_proc server adds)", harness.ExtProcAdded, v, harness.ExtProcAddedValue)
		}
		if v := r.header.Get(harness.ExtProcResponseAdded); v != harness.ExtProcAddedValue {
			t.Errorf("the client got %s: %q, want %q (the response header the ext_proc server adds)", harness.ExtProcResponseAdded, v, harness.ExtProcAddedValue)
		}
		if extProcSrv.Requests.Load() == before {
			t.Errorf("the ext_proc server got no request headers")
		}
		// A body, buffered and sent to the server, arrives whole.
		bodies := extProcSrv.Bodies.Load()
		rb, err := do(ctx, "POST", g.url("/echo"), nil, strings.Repeat("b", 3000))
		if err != nil {
			t.Fatal(err)
		}
		if got := echoed(t, rb).BodyBytes; got != 3000 {
			t.Errorf("POST of 3000 bytes: the backend saw %d", got)
		}
		if extProcSrv.Bodies.Load() == bodies {
			t.Errorf("requestBody BUFFERED: the ext_proc server got no body")
		}
		// A body over the connection's buffer limit can't be buffered
		// whole: the gateway refuses it with 413.
		big, err := do(ctx, "POST", g.url("/echo"), nil, strings.Repeat("b", 4<<20))
		if err != nil {
			t.Fatal(err)
		}
		if big.status != 413 || big.header.Get("x-backend") != "" {
			t.Errorf("requestBody BUFFERED, a POST of 4 MiB: status %d (x-backend %q), want 413 from the gateway", big.status, big.header.Get("x-backend"))
		}
		// Refused by the server: its status and body, from the gateway.
		for _, code := range []string{"403", "429"} {
			r := mustGet(ctx, t, g.url("/echo"), map[string]string{harness.ExtProcRefuse: code})
			if fmt.Sprint(r.status) != code || string(r.body) != harness.ExtProcRefusedBody || r.header.Get("x-backend") != "" {
				t.Errorf("refused by the server with %s: status %d, body %q, x-backend %q; want %s, %q, from the gateway", code, r.status, r.body, r.header.Get("x-backend"), code, harness.ExtProcRefusedBody)
			}
		}
	})
}

// TestExtProcFailure: with the server stopped, failureMode deny answers
// failureStatus (500 by default, Envoy's), and allow lets the request
// through unprocessed (the added header absent at the backend) and counts
// it.
func TestExtProcFailure(t *testing.T) {
	ctx := setup(t)
	extProcMesh(ctx, t)
	extProcSrv.Stop()
	t.Cleanup(func() {
		if err := extProcSrv.Start(); err != nil {
			t.Errorf("restart the ext_proc server: %v", err)
		}
	})
	for _, c := range []struct {
		doc    string
		status int
	}{{"", 500}, {"  failureStatus: 503\n", 503}} {
		use(ctx, t, extProcDoc(c.doc))
		each(t, func(t *testing.T, g *gw) {
			r := mustGet(ctx, t, g.url("/echo"), nil)
			if r.status != c.status || r.header.Get("x-backend") != "" {
				t.Errorf("server stopped, failureMode deny %q: status %d (x-backend %q), want %d from the gateway", strings.TrimSpace(c.doc), r.status, r.header.Get("x-backend"), c.status)
			}
		})
	}
	use(ctx, t, extProcDoc("  failureMode: allow\n"))
	each(t, func(t *testing.T, g *gw) {
		before := statSum(ctx, t, g, "http.", "ext_proc.globalconfig.failure_mode_allowed")
		s := echoed(t, mustGet(ctx, t, g.url("/echo"), nil))
		if v := s.Header(harness.ExtProcAdded); v != "" {
			t.Errorf("server stopped, failureMode allow: the backend saw %s: %q, want none (unprocessed)", harness.ExtProcAdded, v)
		}
		if after := statSum(ctx, t, g, "http.", "ext_proc.globalconfig.failure_mode_allowed"); after <= before {
			t.Errorf("failure_mode_allowed went from %d to %d, want more", before, after)
		}
	})
}
