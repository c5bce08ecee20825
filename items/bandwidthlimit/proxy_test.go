package bandwidthlimit_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness/declared"
)

// A declared goTest (testdata/traffic.yaml, trailers.in.yaml): at a
// gateway limiting responses to 16 KiB/s with responseTrailers, a 32 KiB
// response fetched over HTTP/2 (cleartext, prior knowledge) arrives whole
// and ends with the trailer bandwidth-response-delay-ms, whose value is
// the time the transfer took, at least the 1 s the limit adds. Trailers
// can't be declared in traffic.yaml, and HTTP/1 responses of a known
// length carry none. Skipped outside test/proxy's runner.
func TestDelayTrailers(t *testing.T) {
	url, envoy := declared.Proxy(t)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	const path, size = "/text?n=32768", 32768
	start := time.Now()
	resp, err := c.Get(url + path)
	if err != nil {
		t.Fatalf("Envoy %s, GET %s over HTTP/2: %v", envoy, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("Envoy %s, GET %s over HTTP/2: reading the body: %v", envoy, path, err)
	}
	elapsed := time.Since(start)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || len(body) != size {
		t.Fatalf("Envoy %s, GET %s: %s, status %d, %d bytes; want HTTP/2, 200, %d bytes", envoy, path, resp.Proto, resp.StatusCode, len(body), size)
	}
	v := resp.Trailer.Get("bandwidth-response-delay-ms")
	ms, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("Envoy %s, GET %s: trailer bandwidth-response-delay-ms is %q, want a number of milliseconds; trailers: %v", envoy, path, v, resp.Trailer)
	}
	if ms < 800 || time.Duration(ms)*time.Millisecond > elapsed {
		t.Errorf("Envoy %s, GET %s: bandwidth-response-delay-ms is %d, want at least 800 (16 KiB held back at 16 KiB/s) and at most the %v the request took", envoy, path, ms, elapsed)
	}
	t.Logf("Envoy %s: %d bytes over HTTP/2 in %v, bandwidth-response-delay-ms: %d", envoy, len(body), elapsed.Round(time.Millisecond), ms)
}
