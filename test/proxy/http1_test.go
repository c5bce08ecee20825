package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	clientnetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/test/harness"
)

// downstream.http1 and hardening.stripTrailingHostDot, at both gateways:
// each effect is shown with the keys and, first, without them, so that the
// test fails if the keys do nothing.
//
// The echo backend is a Go server, which canonicalizes header names
// (x-mixed-case and X-MiXeD-CaSe both become X-Mixed-Case), so it can't
// show the case a header arrived in. The raw backend here answers with the
// bytes of the request head and trailers exactly as they arrived; it is
// in the mesh as rawHost, which one VirtualService routes to by host, so
// an answer from it also shows that a request was routed as rawHost (and
// not by the catch-all route to the echo backend).
const (
	rawHost = "raw.proxy.test"
	rawPort = 8080
	// rawName is the raw backend's x-backend value.
	rawName = "raw"
)

// rawBackend answers every request 200 with a text body: the request line
// and header lines as they arrived, a line "--trailers--", then the
// trailer lines as they arrived. The answer carries a header in mixed
// case, X-Backend-CaSe: kept, is chunked and ends with a trailer,
// x-backend-trailer: sent.
type rawBackend struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startRawBackend() (*rawBackend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &rawBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.serve(c)
			}()
		}
	}()
	return b, nil
}

func (b *rawBackend) port() int { return b.ln.Addr().(*net.TCPAddr).Port }

func (b *rawBackend) close() {
	_ = b.ln.Close()
	b.wg.Wait()
}

// serve answers the requests of one connection until it closes or idles
// for 30 s.
func (b *rawBackend) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		head, chunked, length, err := readHead(r)
		if err != nil {
			return
		}
		var trailers []string
		switch {
		case chunked:
			if trailers, err = readChunked(r); err != nil {
				return
			}
		case length > 0:
			if _, err := io.CopyN(io.Discard, r, int64(length)); err != nil {
				return
			}
		}
		body := strings.Join(head, "\r\n") + "\r\n--trailers--\r\n" + strings.Join(trailers, "\r\n")
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Backend-CaSe: kept\r\n%s: %s\r\nTrailer: x-backend-trailer\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\nx-backend-trailer: sent\r\n\r\n",
			harness.BackendHeader, rawName, len(body), body); err != nil {
			return
		}
	}
}

// readHead reads a request's line and header lines, as they arrived.
func readHead(r *bufio.Reader) (lines []string, chunked bool, length int, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, false, 0, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return lines, chunked, length, nil
		}
		lines = append(lines, line)
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "transfer-encoding":
			chunked = strings.EqualFold(value, "chunked")
		case "content-length":
			length, _ = strconv.Atoi(value)
		}
	}
}

// readChunked reads a chunked body and returns its trailer lines.
func readChunked(r *bufio.Reader) ([]string, error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		sizeText, _, _ := strings.Cut(strings.TrimSpace(line), ";")
		size, err := strconv.ParseInt(sizeText, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("chunk size %q: %w", line, err)
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(io.Discard, r, size+2); err != nil { // the chunk and its CRLF
			return nil, err
		}
	}
	var trailers []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line = strings.TrimRight(line, "\r\n"); line == "" {
			return trailers, nil
		}
		trailers = append(trailers, line)
	}
}

// rawRoute puts the raw backend in the mesh as rawHost and routes requests
// for that host at both gateways to it; it waits until both gateways do,
// and takes it all away when the test ends.
func rawRoute(ctx context.Context, t *testing.T) {
	t.Helper()
	b, err := startRawBackend()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	if err := cluster.CreateLoopbackService(ctx, rawHost, rawPort, b.port()); err != nil {
		t.Fatalf("raw backend service entry: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.Istio.NetworkingV1().ServiceEntries(ns).Delete(context.Background(), rawHost, metav1.DeleteOptions{})
	})
	var names []string
	for _, g := range gateways {
		names = append(names, ns+"/"+g.name)
	}
	vs := &clientnetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "to-raw", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{rawHost},
			Gateways: names,
			Http: []*networkingv1.HTTPRoute{{
				Route: []*networkingv1.HTTPRouteDestination{{Destination: &networkingv1.Destination{
					Host: rawHost, Port: &networkingv1.PortSelector{Number: rawPort},
				}}},
			}},
		},
	}
	if _, err := cluster.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create virtual service: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.Istio.NetworkingV1().VirtualServices(ns).Delete(context.Background(), vs.Name, metav1.DeleteOptions{})
	})
	waitRawRoute(ctx, t)
}

// waitRawRoute waits until both gateways route rawHost to the raw backend.
func waitRawRoute(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, g := range gateways {
		start := time.Now()
		var r *response
		var err error
		for {
			r, err = get(ctx, g.url("/ready"), map[string]string{"Host": rawHost})
			if err == nil && r.header.Get(harness.BackendHeader) == rawName {
				break
			}
			if time.Since(start) > 30*time.Second {
				status := 0
				if r != nil {
					status = r.status
				}
				t.Fatalf("gateway %s (Envoy %s) does not route %s to the raw backend after 30 s: status %d, %v", g.name, g.Binary.Version, rawHost, status, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if d := time.Since(start); d > time.Second {
			t.Logf("gateway %s (Envoy %s) routed %s to the raw backend after %v", g.name, g.Binary.Version, rawHost, d.Round(10*time.Millisecond))
		}
	}
}

// rawExchange sends req as it is on a new connection to g's HTTP listener
// and reads one response's head; raw gets the bytes as they arrive.
func rawExchange(t *testing.T, g *gw, req string, raw *bytes.Buffer) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(g.ip, strconv.Itoa(httpPort)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	var r io.Reader = conn
	if raw != nil {
		r = io.TeeReader(conn, raw)
	}
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		t.Fatalf("no HTTP answer to %q: %v", req, err)
	}
	return resp
}

// bodyOf reads resp's body whole (which also reads its trailers).
func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// The requests of TestHTTP1AndTrailingHostDot.
const (
	// An HTTP/1.0 request without Host, as load balancers' health checks
	// send it.
	http10NoHost = "GET /health HTTP/1.0\r\n\r\n"
	// A chunked HTTP/1.1 request with a header name in mixed case and a
	// trailer.
	mixedCaseWithTrailer = "POST /upload HTTP/1.1\r\nHost: " + rawHost + "\r\nX-MiXeD-CaSe: kept\r\nTransfer-Encoding: chunked\r\nTrailer: x-checksum\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: 5d41402a\r\n\r\n"
)

// hostRoutedTo is the x-backend of the answer to a request for host:
// rawName when the gateway routed it as rawHost, the echo backend's name
// when it took the catch-all route; and the answer's body.
func hostRoutedTo(ctx context.Context, t *testing.T, g *gw, host string) (string, string) {
	t.Helper()
	r, err := get(ctx, g.url("/where"), map[string]string{"Host": host})
	if err != nil {
		t.Fatalf("GET with Host %s: %v", host, err)
	}
	if r.status != 200 {
		t.Fatalf("GET with Host %s: status %d: %s", host, r.status, r.body)
	}
	return r.header.Get(harness.BackendHeader), string(r.body)
}

func TestHTTP1AndTrailingHostDot(t *testing.T) {
	ctx := setup(t)
	// Without the keys first: a document of another item's (what an
	// earlier test left, an auth or IP policy, would refuse the host).
	use(ctx, t, "downstream:\n  idleTimeout: 60s\n")
	rawRoute(ctx, t)

	t.Run("without the keys", func(t *testing.T) {
		each(t, func(t *testing.T, g *gw) {
			if resp := rawExchange(t, g, http10NoHost, nil); resp.StatusCode != http.StatusUpgradeRequired {
				t.Errorf("HTTP/1.0: status %d, want Envoy's 426", resp.StatusCode)
			}
			if got, _ := hostRoutedTo(ctx, t, g, rawHost+"."); got != harness.BackendName {
				t.Errorf("Host %s. was answered by %q, want the catch-all route's %q", rawHost, got, harness.BackendName)
			}
			var raw bytes.Buffer
			resp := rawExchange(t, g, mixedCaseWithTrailer, &raw)
			body := bodyOf(t, resp)
			if !strings.Contains(body, "\nx-mixed-case: kept") {
				t.Errorf("the backend saw:\n%s\nwant x-mixed-case lower-cased", body)
			}
			if !strings.Contains(raw.String(), "\nx-backend-case: kept") {
				t.Errorf("the client got:\n%s\nwant x-backend-case lower-cased", raw.String())
			}
			if strings.Contains(strings.ToLower(body), "x-checksum: 5d41402a") {
				t.Errorf("the request trailer reached the backend:\n%s", body)
			}
			if v := resp.Trailer.Get("x-backend-trailer"); v != "" {
				t.Errorf("the response trailer reached the client: %q", v)
			}
		})
	})

	t.Run("with the keys", func(t *testing.T) {
		use(ctx, t, "downstream:\n  http1:\n    acceptHttp10: true\n    defaultHost: "+rawHost+"\n    preserveHeaderCase: true\n    enableTrailers: true\nhardening:\n  stripTrailingHostDot: true\n")
		waitRawRoute(ctx, t)
		each(t, func(t *testing.T, g *gw) {
			// HTTP/1.0 without Host: served, and routed as the default host.
			resp := rawExchange(t, g, http10NoHost, nil)
			body := bodyOf(t, resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(harness.BackendHeader) != rawName {
				t.Errorf("HTTP/1.0 without Host: status %d from %q, want 200 from the backend routed as defaultHost %s:\n%s",
					resp.StatusCode, resp.Header.Get(harness.BackendHeader), rawHost, body)
			}
			// A trailing dot: routed like the host without it, with a port
			// too.
			// The service receives the host without the dot.
			for sent, want := range map[string]string{
				rawHost + ".":                           rawHost,
				rawHost + ".:" + strconv.Itoa(httpPort): rawHost + ":" + strconv.Itoa(httpPort),
			} {
				got, body := hostRoutedTo(ctx, t, g, sent)
				if got != rawName {
					t.Errorf("Host %s was answered by %q, want %q, as %s is", sent, got, rawName, rawHost)
				}
				if !strings.Contains(strings.ToLower(body), "\nhost: "+want+"\r\n") {
					t.Errorf("Host %s: the backend saw:\n%s\nwant host %s", sent, body, want)
				}
			}
			// Header case and trailers, both ways.
			var raw bytes.Buffer
			resp = rawExchange(t, g, mixedCaseWithTrailer, &raw)
			body = bodyOf(t, resp)
			if !strings.Contains(body, "\nX-MiXeD-CaSe: kept") {
				t.Errorf("the backend saw:\n%s\nwant X-MiXeD-CaSe as the client wrote it", body)
			}
			if !strings.Contains(raw.String(), "\nX-Backend-CaSe: kept") {
				t.Errorf("the client got:\n%s\nwant X-Backend-CaSe as the backend wrote it", raw.String())
			}
			if !strings.Contains(strings.ToLower(body), "--trailers--\r\nx-checksum: 5d41402a") {
				t.Errorf("the request trailer x-checksum did not reach the backend, which saw:\n%s", body)
			}
			if v := resp.Trailer.Get("x-backend-trailer"); v != "sent" {
				t.Errorf("the response trailer x-backend-trailer: %q at the client, want sent", v)
			}
		})
	})
}
