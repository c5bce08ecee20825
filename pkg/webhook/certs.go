package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Certificate lifetimes. The serving certificate is renewed when less than
// RenewBefore of it is left; the CA lives long enough that renewing the
// serving certificate rarely needs a new caBundle.
const (
	CALifetime      = 10 * 365 * 24 * time.Hour
	ServingLifetime = 365 * 24 * time.Hour
	RenewBefore     = 30 * 24 * time.Hour
)

// Secret data keys (a kubernetes.io/tls Secret, plus the CA).
const (
	keyCert   = corev1.TLSCertKey
	keyKey    = corev1.TLSPrivateKeyKey
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
)

// CertManager keeps the webhook's serving certificate in a Secret.
type CertManager struct {
	Kube      kubernetes.Interface
	Namespace string
	Secret    string
	// Hosts are the DNS names and IPs the certificate is for.
	Hosts []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (m *CertManager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Ensure returns a valid certificate from the Secret, creating or rotating
// the CA and the serving certificate as needed. Replicas race safely: the
// Secret is created once and updated with optimistic concurrency.
func (m *CertManager) Ensure(ctx context.Context) (*corev1.Secret, error) {
	secrets := m.Kube.CoreV1().Secrets(m.Namespace)
	var out *corev1.Secret
	// A Conflict (another replica updated first) or AlreadyExists (another
	// replica created first) is retried from a fresh read.
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		s, err := secrets.Get(ctx, m.Secret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			data, err := m.issue(nil)
			if err != nil {
				return err
			}
			out, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: m.Secret, Namespace: m.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "globalconfig"}},
				Type:       corev1.SecretTypeTLS,
				Data:       data,
			}, metav1.CreateOptions{})
			return err
		case err != nil:
			return fmt.Errorf("read webhook secret: %w", err)
		}
		if m.current(s.Data) {
			out = s
			return nil
		}
		data, err := m.issue(s.Data)
		if err != nil {
			return err
		}
		s.Data, s.Type = data, corev1.SecretTypeTLS
		out, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// current reports whether data holds a CA and a serving certificate that
// match, cover every host and are not due for renewal.
func (m *CertManager) current(data map[string][]byte) bool {
	ca, _, err := parsePair(data[keyCACert], data[keyCAKey])
	if err != nil || m.now().Add(RenewBefore).After(ca.NotAfter) {
		return false
	}
	cert, _, err := parsePair(data[keyCert], data[keyKey])
	if err != nil || m.now().Add(RenewBefore).After(cert.NotAfter) || cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, h := range m.Hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// issue returns Secret data with a serving certificate for m.Hosts, signed
// by the CA in old when that is still good, else by a new CA.
func (m *CertManager) issue(old map[string][]byte) (map[string][]byte, error) {
	now := m.now()
	ca, caKey, err := parsePair(old[keyCACert], old[keyCAKey])
	caPEM, caKeyPEM := old[keyCACert], old[keyCAKey]
	if err != nil || now.Add(RenewBefore).After(ca.NotAfter) {
		if ca, caKey, caPEM, caKeyPEM, err = newCA(now); err != nil {
			return nil, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "globalconfig-webhook"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServingLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range m.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		keyCACert: caPEM,
		keyCAKey:  caKeyPEM,
	}, nil
}

func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "globalconfig-webhook-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return ca, key,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// parsePair parses a PEM certificate and its EC key.
func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("missing PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// KeyPair turns a TLS Secret into a certificate to serve.
func KeyPair(s *corev1.Secret) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(s.Data[keyCert], s.Data[keyKey])
	if err != nil {
		return nil, fmt.Errorf("webhook secret %s: %w", s.Name, err)
	}
	return &c, nil
}

// PatchCABundle sets caBundle on every webhook of the named
// ValidatingWebhookConfiguration, writing only when it differs.
func PatchCABundle(ctx context.Context, kube kubernetes.Interface, name string, caPEM []byte) (bool, error) {
	vwcs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vwc, err := vwcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read webhook configuration %s: %w", name, err)
		}
		changed = false
		for i := range vwc.Webhooks {
			if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, caPEM) {
				vwc.Webhooks[i].ClientConfig.CABundle = slices.Clone(caPEM)
				changed = true
			}
		}
		if !changed {
			return nil
		}
		_, err = vwcs.Update(ctx, vwc, metav1.UpdateOptions{})
		return err
	})
	return changed && err == nil, err
}

// CABundle is the CA certificate a Secret carries (ours, or cert-manager's).
func CABundle(s *corev1.Secret) []byte { return s.Data[keyCACert] }
