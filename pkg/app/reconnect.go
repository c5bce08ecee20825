package app

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// After an API server outage, client-go's reflectors retry their list and
// watch with an exponential backoff of up to 30 s plus as much jitter, so
// an informer could come back a minute after the API server did. The
// informers' clients therefore wait out a refused connection themselves:
// a GET (list or watch) that cannot connect is tried again every
// reconnectEvery, for up to reconnectFor, before the error reaches the
// reflector. Once the API server listens again, the informers are back
// within reconnectEvery.
const (
	reconnectEvery = 250 * time.Millisecond
	reconnectFor   = 2 * time.Minute
)

// waitForReconnect wraps the informers' transport.
func waitForReconnect(next http.RoundTripper) http.RoundTripper {
	return &reconnectTransport{next: next, every: reconnectEvery, max: reconnectFor, now: time.Now}
}

type reconnectTransport struct {
	next       http.RoundTripper
	every, max time.Duration
	now        func() time.Time
}

func (t *reconnectTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return t.next.RoundTrip(req)
	}
	deadline := t.now().Add(t.max)
	for {
		resp, err := t.next.RoundTrip(req)
		if err == nil || !isDialError(err) || t.now().After(deadline) {
			return resp, err
		}
		select {
		case <-req.Context().Done():
			return nil, err
		case <-time.After(t.every):
		}
	}
}

// isDialError reports whether err means no connection could be opened:
// the request never reached a server, so sending it again is safe.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
