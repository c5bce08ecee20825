package proxy

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// sdsServer plays istio-agent's part for file-mounted gateway
// certificates. A Gateway server whose TLS names serverCertificate and
// privateKey files makes istiod reference the secret
// "file-cert:<cert>~<key>" from the SDS cluster "sds-grpc", which in a pod
// is istio-agent serving those files over a Unix socket; here it is this
// server on loopback, which reads the files the same way. (A credentialName
// secret would come from istiod over ADS, which istiod sends only to a
// proxy with a verified identity, on its TLS port.)
type sdsServer struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	srv  *grpc.Server
	Addr *net.TCPAddr

	mu     sync.Mutex
	served map[string]int
}

// sdsCluster is the SDS cluster istiod's listeners name.
const sdsCluster = "sds-grpc"

func startSDS() (*sdsServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sdsServer{srv: grpc.NewServer(), Addr: ln.Addr().(*net.TCPAddr), served: map[string]int{}}
	secretv3.RegisterSecretDiscoveryServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sdsServer) Close() { s.srv.Stop() }

// StreamSecrets answers every request for a new set of names, and nothing
// else (an ACK repeats the names with the nonce it acknowledges).
func (s *sdsServer) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	var last string
	nonce := 0
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		names := strings.Join(req.GetResourceNames(), ",")
		if names == last && req.GetResponseNonce() != "" {
			continue
		}
		last = names
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: "1"}
		for _, name := range req.GetResourceNames() {
			secret, err := fileSecret(name)
			if err != nil {
				return err
			}
			a, err := anypb.New(secret)
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
			s.mu.Lock()
			s.served[name]++
			s.mu.Unlock()
		}
		nonce++
		resp.Nonce = strconv.Itoa(nonce)
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

// fileSecret reads "file-cert:<cert>~<key>" into an inline TLS secret.
// The workload's own certificate ("default") and the mesh's root
// ("ROOTCA"), which istio-agent also serves and outbound clusters name for
// Istio mTLS, are the gateway's certificate and that certificate as the
// trusted CA: no test traffic uses mTLS, but Envoy waits for every secret
// a cluster names before it takes its listeners.
func fileSecret(name string) (*tlsv3.Secret, error) {
	inline := func(b []byte) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
	}
	switch name {
	case "default":
		s, err := fileSecret("file-cert:" + certFile + "~" + keyFile)
		if s != nil {
			s.Name = name
		}
		return s, err
	case "ROOTCA":
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(certPEM),
		}}}, nil
	}
	paths, ok := strings.CutPrefix(name, "file-cert:")
	cert, key, ok2 := strings.Cut(paths, "~")
	if !ok || !ok2 {
		return nil, fmt.Errorf("sds: resource %q is not file-cert:<cert>~<key>", name)
	}
	c, err := os.ReadFile(cert)
	if err != nil {
		return nil, fmt.Errorf("sds: %w", err)
	}
	k, err := os.ReadFile(key)
	if err != nil {
		return nil, fmt.Errorf("sds: %w", err)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: inline(c), PrivateKey: inline(k),
	}}}, nil
}
