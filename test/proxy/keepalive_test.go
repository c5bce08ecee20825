package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// downstream.tcpKeepalive and downstream.http2 (keepalive, onInvalidMessage)
// at both real gateways: the listener Istio built carries our keepalive, the
// kernel arms the keepalive timer of the connections it accepts, an idle
// HTTP/2 client is PINGed, and an invalid HTTP/2 request ends its stream or
// its connection as configured. Each effect is shown against the same
// gateway without the setting, so that none of these tests can pass on
// Envoy's defaults.

// userHZ is the unit of /proc/net/tcp's timer column: clock ticks of
// USER_HZ, 100 on every Linux architecture.
const userHZ = 100

// TestDownstreamTCPKeepalive: tcpKeepalive reaches the gateway's own
// listener (in its config dump, beside what Istio set there), the gateway
// still serves, and the connection it accepts has the kernel's keepalive
// timer armed for idleTime, which a connection accepted without the
// setting does not.
func TestDownstreamTCPKeepalive(t *testing.T) {
	ctx := setup(t)
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skipf("no /proc/net/tcp to read the kernel's timers from: %v", err)
	}
	use(ctx, t, "downstream:\n  idleTimeout: 180\n")
	each(t, func(t *testing.T, g *gw) {
		if tr, when := acceptedTimer(ctx, t, g); tr == 2 {
			t.Errorf("without tcpKeepalive the accepted connection already has a keepalive timer (%d ticks): the test below can't tell", when)
		}
	})
	const idle, interval, probes = 600, 7, 3
	use(ctx, t, fmt.Sprintf("downstream:\n  idleTimeout: 180\n  tcpKeepalive:\n    probes: %d\n    idleTime: %ds\n    interval: %d\n", probes, idle, interval))
	each(t, func(t *testing.T, g *gw) {
		l := gatewayListener(ctx, t, g, httpPort)
		ka, _ := l["tcp_keepalive"].(map[string]any)
		if fmt.Sprint(ka["keepalive_probes"], ka["keepalive_time"], ka["keepalive_interval"]) != fmt.Sprint(probes, idle, interval) {
			t.Errorf("listener %v: tcp_keepalive %v, want probes %d, time %d, interval %d", l["name"], l["tcp_keepalive"], probes, idle, interval)
		}
		// Istio's own settings of the listener are still there: the merge
		// added a field, it did not replace the listener.
		if l["filter_chains"] == nil || l["address"] == nil {
			t.Errorf("listener %v lost what Istio built: %v", l["name"], l)
		}
		tr, when := acceptedTimer(ctx, t, g)
		if tr != 2 {
			t.Errorf("accepted connection: timer %d, want 2 (keepalive)", tr)
		}
		// The timer runs for idleTime from the accept (a few seconds
		// may have passed since); the kernel's default would be 7200s.
		if when <= (idle-30)*userHZ || when > idle*userHZ {
			t.Errorf("accepted connection: keepalive fires in %.1fs, want just under %ds", float64(when)/userHZ, idle)
		}
		t.Logf("accepted connection: keepalive timer fires in %.1fs", float64(when)/userHZ)
	})
	// {} turns keepalive on with the kernel's own idle time.
	sysIdle, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time")
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := strconv.ParseInt(strings.TrimSpace(string(sysIdle)), 10, 64)
	if err != nil || kernel == idle {
		t.Fatalf("net.ipv4.tcp_keepalive_time %q: can't tell it from idleTime %d", sysIdle, idle)
	}
	use(ctx, t, "downstream:\n  idleTimeout: 180\n  tcpKeepalive: {}\n")
	each(t, func(t *testing.T, g *gw) {
		tr, when := acceptedTimer(ctx, t, g)
		if tr != 2 || when <= (kernel-30)*userHZ || when > kernel*userHZ {
			t.Errorf("tcpKeepalive {}: timer %d firing in %.1fs, want 2 (keepalive) just under the kernel's %ds", tr, float64(when)/userHZ, kernel)
		}
	})
}

// gatewayListener is g's active listener on port, from its config dump.
func gatewayListener(ctx context.Context, t *testing.T, g *gw, port int) map[string]any {
	t.Helper()
	doc, err := listenerDump(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range activeListeners(doc) {
		m, _ := l.(map[string]any)
		var p any
		walk(m["address"], func(k string, v any) {
			if k == "port_value" {
				p = v
			}
		})
		if fmt.Sprint(p) == strconv.Itoa(port) {
			return m
		}
	}
	t.Fatalf("gateway %s has no active listener on port %d", g.name, port)
	return nil
}

// acceptedTimer sends a request on a new connection to g's HTTP listener,
// requires the backend's answer, and returns the kernel's timer of the
// gateway's end of that connection, from /proc/net/tcp: its kind (0 none,
// 1 retransmit, 2 keepalive, ...) and when it fires, in USER_HZ ticks.
func acceptedTimer(ctx context.Context, t *testing.T, g *gw) (int, int64) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(g.ip, strconv.Itoa(httpPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /echo HTTP/1.1\r\nHost: proxy.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r, err := readResponse(conn)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 200 || r.header.Get("x-backend") != "echo" {
		t.Fatalf("through the gateway: status %d, x-backend %q", r.status, r.header.Get("x-backend"))
	}
	local := netip.MustParseAddrPort(conn.LocalAddr().String())
	server := netip.MustParseAddrPort(conn.RemoteAddr().String())
	tr, when, err := tcpTimer(server, local)
	if err != nil {
		t.Fatal(err)
	}
	return tr, when
}

// tcpTimer reads the timer of the IPv4 socket bound to local and
// connected to remote from /proc/net/tcp.
func tcpTimer(local, remote netip.AddrPort) (int, int64, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, 0, err
	}
	want := [2]string{procAddr(local), procAddr(remote)}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan() // the header line
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if len(f) < 6 || f[1] != want[0] || f[2] != want[1] {
			continue
		}
		tr, when, ok := strings.Cut(f[5], ":")
		if !ok {
			return 0, 0, fmt.Errorf("/proc/net/tcp: timer column %q", f[5])
		}
		kind, err1 := strconv.ParseInt(tr, 16, 32)
		ticks, err2 := strconv.ParseInt(when, 16, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("/proc/net/tcp: timer column %q: %w", f[5], err)
		}
		return int(kind), ticks, nil
	}
	return 0, 0, fmt.Errorf("no socket %s -> %s in /proc/net/tcp", local, remote)
}

// procAddr is an IPv4 address and port as /proc/net/tcp writes them: the
// address as a little-endian 32-bit word in hex, the port in hex.
func procAddr(a netip.AddrPort) string {
	b := a.Addr().As4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", b[3], b[2], b[1], b[0], a.Port())
}

// TestDownstreamHTTP2Keepalive: with http2.keepalive an HTTP/2 client that
// sends nothing after its preface is PINGed within interval (plus slack);
// without it, the same client waits in silence.
func TestDownstreamHTTP2Keepalive(t *testing.T) {
	ctx := setup(t)
	const quiet = 3 * time.Second
	use(ctx, t, "downstream:\n  http2:\n    maxConcurrentStreams: 100\n")
	each(t, func(t *testing.T, g *gw) {
		c := dialH2(t, g)
		defer c.Close()
		if f, err := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }, quiet); err == nil {
			t.Errorf("without http2.keepalive the gateway PINGed an idle client: %v", f.Header())
		}
	})
	use(ctx, t, "downstream:\n  http2:\n    keepalive:\n      interval: 1s\n      timeout: 2s\n      jitter: 0\n")
	each(t, func(t *testing.T, g *gw) {
		c := dialH2(t, g)
		defer c.Close()
		start := time.Now()
		f, err := c.next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }, quiet)
		if err != nil {
			t.Fatalf("no PING from the gateway within %v of an idle connection: %v", quiet, err)
		}
		took := time.Since(start)
		if took < 500*time.Millisecond {
			t.Errorf("PING after %v, before the 1s interval", took)
		}
		t.Logf("PING after %v", took.Round(10*time.Millisecond))
		// An answered PING keeps the connection: it still serves.
		p := f.(*http2.PingFrame)
		if err := c.fr.WritePing(true, p.Data); err != nil {
			t.Fatal(err)
		}
		if status := c.request(t, 1, nil); status != "200" {
			t.Errorf("request after the PING: status %q, want 200", status)
		}
		// A client that never answers is closed about timeout after the
		// PING.
		mute := dialH2(t, g)
		defer mute.Close()
		if _, err := mute.next(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }, quiet); err != nil {
			t.Fatalf("no PING on the second connection: %v", err)
		}
		pinged := time.Now()
		frames, err := mute.untilClosed(8 * time.Second)
		gone := time.Since(pinged)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a client that never answers a PING is still connected 8s later (frames %v)", frames)
		}
		if gone < 1500*time.Millisecond || gone > 5*time.Second {
			t.Errorf("a client that never answers was closed %v after the PING, want about the 2s timeout", gone.Round(10*time.Millisecond))
		}
		t.Logf("unanswered PING: %v, then closed %v after it (%v)", frames, gone.Round(10*time.Millisecond), err)
	})
}

// untilClosed reads frames until the connection ends, for at most d, and
// returns the GOAWAYs, RST_STREAMs and answers it saw on the way and the
// read's error (os.ErrDeadlineExceeded when the connection stayed open).
func (c *h2conn) untilClosed(d time.Duration) ([]string, error) {
	var seen []string
	deadline := time.Now().Add(d)
	for {
		f, err := c.next(func(f http2.Frame) bool {
			switch f.(type) {
			case *http2.RSTStreamFrame, *http2.GoAwayFrame, *http2.MetaHeadersFrame:
				return true
			}
			return false
		}, time.Until(deadline))
		if err != nil {
			return seen, err
		}
		seen = append(seen, describeFrame(f))
	}
}

// TestDownstreamHTTP2OnInvalidMessage: an HTTP/2 request with a header
// the codec refuses (a connection-specific header, which HTTP/2 forbids)
// gets RST_STREAM with TerminateStream, and the same connection serves
// the next request; with TerminateConnection, and without the key
// (Envoy's default, which Istio keeps), the gateway closes the connection (Envoy 1.39 and 1.40 close
// it without a GOAWAY, after their delayed-close second).
func TestDownstreamHTTP2OnInvalidMessage(t *testing.T) {
	ctx := setup(t)
	invalid := []hpack.HeaderField{{Name: "connection", Value: "keep-alive"}}
	use(ctx, t, "downstream:\n  http2:\n    onInvalidMessage: TerminateStream\n")
	each(t, func(t *testing.T, g *gw) {
		c := dialH2(t, g)
		defer c.Close()
		c.send(t, 1, invalid)
		f, err := c.next(func(f http2.Frame) bool {
			switch f.(type) {
			case *http2.RSTStreamFrame, *http2.GoAwayFrame, *http2.HeadersFrame:
				return true
			}
			return false
		}, 5*time.Second)
		if err != nil {
			t.Fatalf("invalid request: no answer: %v", err)
		}
		rst, ok := f.(*http2.RSTStreamFrame)
		if !ok || rst.StreamID != 1 {
			t.Fatalf("invalid request: got %v, want RST_STREAM on stream 1", describeFrame(f))
		}
		t.Logf("invalid request: RST_STREAM %v", rst.ErrCode)
		if status := c.request(t, 3, nil); status != "200" {
			t.Errorf("the next request on the same connection: status %q, want 200", status)
		}
	})
	// TerminateConnection, said or left to Envoy's default (Istio sets
	// none at gateways), closes the connection.
	for _, doc := range []string{"downstream:\n  http2:\n    onInvalidMessage: TerminateConnection\n", "downstream:\n  idleTimeout: 180\n"} {
		use(ctx, t, doc)
		each(t, func(t *testing.T, g *gw) {
			c := dialH2(t, g)
			defer c.Close()
			start := time.Now()
			c.send(t, 1, invalid)
			// The gateway ends the connection: a GOAWAY, if it sends
			// one, then the end of the stream of bytes; never a stream
			// reset or an answer, and never silence.
			frames, err := c.untilClosed(5 * time.Second)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s: invalid request: the connection is still open after 5s (frames: %v)", doc, frames)
			}
			for _, f := range frames {
				if !strings.HasPrefix(f, "GOAWAY") {
					t.Errorf("%s: invalid request: got %s, want the connection closed", doc, f)
				}
			}
			t.Logf("invalid request: %v, then the connection closed after %v (%v)", frames, time.Since(start).Round(10*time.Millisecond), err)
		})
	}
}

// h2conn is a prior-knowledge HTTP/2 (h2c) connection to a gateway's
// plaintext listener, read frame by frame.
type h2conn struct {
	net.Conn
	fr *http2.Framer
}

// dialH2 opens an h2c connection to g: the client preface and an empty
// SETTINGS, then the gateway's SETTINGS, acknowledged.
func dialH2(t *testing.T, g *gw) *h2conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(g.ip, strconv.Itoa(httpPort)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2conn{Conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.next(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() }, 5*time.Second); err != nil {
		t.Fatalf("no SETTINGS from the gateway: %v", err)
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

// next reads frames until one for which want is true, answering the
// gateway's SETTINGS on the way, for at most d.
func (c *h2conn) next(want func(http2.Frame) bool, d time.Duration) (http2.Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if want(f) {
			return f, nil
		}
	}
}

// send writes a GET of /echo on stream id with the extra header fields.
func (c *h2conn) send(t *testing.T, id uint32, extra []hpack.HeaderField) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, h := range append([]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "proxy.test"}, {Name: ":path", Value: "/echo"},
	}, extra...) {
		if err := enc.WriteField(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// request sends a GET on stream id and returns the :status of its answer
// ("" and an error logged when the stream or connection ends instead).
func (c *h2conn) request(t *testing.T, id uint32, extra []hpack.HeaderField) string {
	t.Helper()
	c.send(t, id, extra)
	f, err := c.next(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return f.StreamID == id
		case *http2.RSTStreamFrame:
			return f.StreamID == id
		case *http2.GoAwayFrame:
			return true
		}
		return false
	}, 10*time.Second)
	if err != nil {
		t.Errorf("stream %d: %v", id, err)
		return ""
	}
	if h, ok := f.(*http2.MetaHeadersFrame); ok {
		return h.PseudoValue("status")
	}
	t.Errorf("stream %d: got %v", id, describeFrame(f))
	return ""
}

// describeFrame names a frame for a failure message.
func describeFrame(f http2.Frame) string {
	switch f := f.(type) {
	case *http2.GoAwayFrame:
		return fmt.Sprintf("GOAWAY %v (last stream %d, %q)", f.ErrCode, f.LastStreamID, f.DebugData())
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("RST_STREAM %v on stream %d", f.ErrCode, f.StreamID)
	case *http2.MetaHeadersFrame:
		return fmt.Sprintf("HEADERS :status %s on stream %d", f.PseudoValue("status"), f.StreamID)
	}
	return f.Header().String()
}
