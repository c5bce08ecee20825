package gzip_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"github.com/globalconfig/globalconfig/test/harness/declared"
)

// fetch GETs url without letting the client decompress anything.
func fetch(t *testing.T, url, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A declared goTest (testdata/traffic.yaml): at a gateway with the
// example in effect, a compressed body decodes (its gzip checksum
// included) to exactly the bytes a client that doesn't accept gzip
// gets, which traffic.yaml's sizes alone can't say. Skipped outside
// test/proxy's runner.
func TestCompressedBodyDecodesToTheSameBytes(t *testing.T) {
	url, envoy := declared.Proxy(t)
	const path = "/text?n=65536"
	plainResp, plain := fetch(t, url+path, "")
	if plainResp.StatusCode != http.StatusOK || plainResp.Header.Get("Content-Encoding") != "" || len(plain) != 65536 {
		t.Fatalf("Envoy %s, GET %s without Accept-Encoding: status %d, content-encoding %q, %d bytes; want 200, none, 65536",
			envoy, path, plainResp.StatusCode, plainResp.Header.Get("Content-Encoding"), len(plain))
	}
	zResp, z := fetch(t, url+path, "gzip")
	if zResp.StatusCode != http.StatusOK || zResp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Envoy %s, GET %s with Accept-Encoding gzip: status %d, content-encoding %q; want 200 and gzip",
			envoy, path, zResp.StatusCode, zResp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatalf("Envoy %s: the gzip body has no gzip header: %v", envoy, err)
	}
	decoded, err := io.ReadAll(zr) // checks the trailer's CRC-32 and length
	if err != nil {
		t.Fatalf("Envoy %s: the gzip body of %d bytes does not decode whole: %v", envoy, len(z), err)
	}
	if !bytes.Equal(decoded, plain) {
		i := 0
		for i < len(decoded) && i < len(plain) && decoded[i] == plain[i] {
			i++
		}
		t.Errorf("Envoy %s: the gzip body decodes to %d bytes that differ from the %d plain ones from byte %d", envoy, len(decoded), len(plain), i)
	}
}
