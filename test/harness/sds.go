package harness

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// SDSServer plays istio-agent's part for file-mounted gateway
// certificates. A Gateway server whose TLS names serverCertificate and
// privateKey files makes istiod reference the secret
// "file-cert:<cert>~<key>" from the SDS cluster "sds-grpc", which in a pod
// is istio-agent serving those files over a Unix socket; here it is this
// server on loopback, which reads the files the same way. (A credentialName
// secret would come from istiod over ADS, which istiod sends only to a
// proxy with a verified identity, on its TLS port.)
type SDSServer struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	srv  *grpc.Server
	Addr *net.TCPAddr

	certFile, keyFile string
}

// SDSCluster is the SDS cluster istiod's listeners name.
const SDSCluster = "sds-grpc"

// StartSDS starts the SDS server on a free loopback port. It serves the
// certificate and key in certFile and keyFile as the workload's own
// ("default") and the certificate as the mesh root ("ROOTCA").
func StartSDS(certFile, keyFile string) (*SDSServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SDSServer{srv: grpc.NewServer(), Addr: ln.Addr().(*net.TCPAddr), certFile: certFile, keyFile: keyFile}
	secretv3.RegisterSecretDiscoveryServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server; a nil one is fine.
func (s *SDSServer) Close() {
	if s != nil {
		s.srv.Stop()
	}
}

// StreamSecrets answers every request for a new set of names, and nothing
// else (an ACK repeats the names with the nonce it acknowledges).
func (s *SDSServer) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
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
			secret, err := s.secret(name)
			if err != nil {
				return err
			}
			a, err := anypb.New(secret)
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
		}
		nonce++
		resp.Nonce = strconv.Itoa(nonce)
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

// secret reads "file-cert:<cert>~<key>" into an inline TLS secret.
// The workload's own certificate ("default") and the mesh's root
// ("ROOTCA"), which istio-agent also serves and outbound clusters name for
// Istio mTLS, are the gateway's certificate and that certificate as the
// trusted CA: no test traffic uses mTLS, but Envoy waits for every secret
// a cluster names before it takes its listeners.
func (s *SDSServer) secret(name string) (*tlsv3.Secret, error) {
	inline := func(b []byte) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
	}
	switch name {
	case "default":
		sec, err := s.secret("file-cert:" + s.certFile + "~" + s.keyFile)
		if sec != nil {
			sec.Name = name
		}
		return sec, err
	case "ROOTCA":
		ca, err := os.ReadFile(s.certFile)
		if err != nil {
			return nil, fmt.Errorf("sds: %w", err)
		}
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(ca),
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

// BootstrapCluster is the gateway bootstrap's "sds-grpc" cluster: this
// server, over HTTP/2.
func (s *SDSServer) BootstrapCluster() *clusterv3.Cluster {
	c := StaticCluster(SDSCluster, "127.0.0.1", strconv.Itoa(s.Addr.Port))
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": http2Options()}
	return c
}
