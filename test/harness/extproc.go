package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
)

// What the test ext_proc server does, by request header.
const (
	// ExtProcAdded is the request header the server adds to every request
	// it processes (value ExtProcAddedValue), which the backend then sees.
	ExtProcAdded      = "x-extproc"
	ExtProcAddedValue = "seen"
	// ExtProcResponseAdded is the response header it adds to every
	// response whose headers it gets.
	ExtProcResponseAdded = "x-extproc-response"
	// ExtProcRefuse, on a request, makes the server answer it itself
	// with the status the header's value gives (e.g. 403), and the body
	// ExtProcRefusedBody.
	ExtProcRefuse      = "x-extproc-refuse"
	ExtProcRefusedBody = "refused by ext_proc"
)

// ExtProc is a small ext_proc server on loopback, in the test process,
// built on go-control-plane's envoy.service.ext_proc.v3 gRPC API: to each
// request's headers it answers with a header mutation (ExtProcAdded), or,
// when the request carries ExtProcRefuse, with an immediate response of
// that status; it lets bodies and trailers through unchanged. Stop and
// Start stop and restart it on the same port.
type ExtProc struct {
	Port int
	// Requests counts the request headers it received; Bodies the
	// request body chunks.
	Requests, Bodies atomic.Int64

	mu     sync.Mutex
	server *grpc.Server
}

// StartExtProc starts the server on a free loopback port.
func StartExtProc() (*ExtProc, error) {
	var last error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		x := &ExtProc{Port: port}
		if last = x.Start(); last == nil {
			return x, nil
		}
	}
	return nil, last
}

// Start starts (or restarts) the server on its port.
func (x *ExtProc) Start() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.server != nil {
		return fmt.Errorf("ext_proc server on port %d: already running", x.Port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(x.Port)))
	if err != nil {
		return fmt.Errorf("ext_proc server: %w", err)
	}
	s := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(s, &extProcService{x: x})
	x.server = s
	go func() { _ = s.Serve(l) }()
	return nil
}

// Stop stops the server, closing its streams; its port then refuses
// connections.
func (x *ExtProc) Stop() {
	x.mu.Lock()
	s := x.server
	x.server = nil
	x.mu.Unlock()
	if s == nil {
		return
	}
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.Stop()
	}
}

type extProcService struct {
	extprocv3.UnimplementedExternalProcessorServer
	x *ExtProc
}

// Process answers each message of one HTTP request's stream.
func (s *extProcService) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			s.x.Requests.Add(1)
			if code, ok := refusal(r.RequestHeaders); ok {
				resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)},
					Body:   []byte(ExtProcRefusedBody),
				}}}
				break
			}
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: setHeader(ExtProcAdded, ExtProcAddedValue)}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: setHeader(ExtProcResponseAdded, ExtProcAddedValue)}}
		case *extprocv3.ProcessingRequest_RequestBody:
			s.x.Bodies.Add(1)
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			return fmt.Errorf("ext_proc server: unexpected message %T", req.Request)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// refusal is the status ExtProcRefuse asks for, if the request has it.
func refusal(h *extprocv3.HttpHeaders) (int, bool) {
	for _, kv := range h.GetHeaders().GetHeaders() {
		if kv.GetKey() != ExtProcRefuse {
			continue
		}
		v := kv.GetValue()
		if v == "" {
			v = string(kv.GetRawValue())
		}
		code, err := strconv.Atoi(v)
		if err != nil || code < 200 || code > 599 {
			code = 403
		}
		return code, true
	}
	return 0, false
}

// setHeader is a headers answer that sets one header.
func setHeader(name, value string) *extprocv3.HeadersResponse {
	return &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: name, RawValue: []byte(value)}}},
	}}}
}
