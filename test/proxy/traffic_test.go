package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"time"
)

// response is what a client got through a gateway.
type response struct {
	status int
	header http.Header
	body   []byte
}

// client sends one request a connection and never decompresses, so the
// tests see the bytes the gateway sent.
var client = &http.Client{
	Timeout: 20 * time.Second,
	Transport: &http.Transport{
		DisableCompression: true,
		DisableKeepAlives:  true,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test gateway's self-signed certificate
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// get sends GET url with headers (name: value) through a gateway.
func get(ctx context.Context, url string, headers map[string]string) (*response, error) {
	return do(ctx, http.MethodGet, url, headers, "")
}

func do(ctx context.Context, method, url string, headers map[string]string, body string) (*response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range headers {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return read(client.Do(req))
}

// read takes an HTTP response whole.
func read(resp *http.Response, err error) (*response, error) {
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}
