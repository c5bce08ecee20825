package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Options configure the webhook of `globalconfig run`.
type Options struct {
	Addr      string
	Namespace string
	// Secret holds the serving certificate (and, when managed, the CA).
	Secret string
	// ConfigName is the ValidatingWebhookConfiguration whose caBundle is
	// kept equal to the CA.
	ConfigName string
	// Hosts the certificate is for: the Service's DNS names, or IPs.
	Hosts []string
	// ManageCert creates and rotates the certificate; false reads a Secret
	// that something else (cert-manager) keeps, and leaves caBundle alone.
	ManageCert bool
	// Renderer is the process's renderer (a new one when nil).
	Renderer *render.Renderer
	// Fleet is Handler.Fleet (nil: no canary warnings).
	Fleet func(ctx context.Context, label string, set []*envoyfilter.Object) (canaries, unlabelled []string, err error)
	// Envoy is Handler.Envoy (nil: no Envoy check).
	Envoy *EnvoyCheck
	// Others and RootNamespace are Handler.Others and
	// Handler.RootNamespace (nil: no warnings about dependents).
	Others        func(ctx context.Context) ([]anchors.Other, error)
	RootNamespace string
}

// rotationCheck is how often a running replica checks whether the serving
// certificate is due for renewal.
const rotationCheck = time.Hour

// Start listens on opts.Addr and serves the webhook until ctx ends. The
// certificate is loaded (and, when managed, created) in the background;
// Ready tells when the server can answer.
func Start(ctx context.Context, kube kubernetes.Interface, opts Options, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook: listen %s: %w", opts.Addr, err)
	}
	r := opts.Renderer
	if r == nil {
		r = render.New()
	}
	srv := NewServer(&Handler{Log: log, Manager: r, Fleet: opts.Fleet, Envoy: opts.Envoy,
		Others: opts.Others, RootNamespace: opts.RootNamespace})
	go func() {
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("webhook server stopped", "err", err)
		}
	}()
	mgr := &CertManager{Kube: kube, Namespace: opts.Namespace, Secret: opts.Secret, Hosts: opts.Hosts}
	load := func(s *corev1.Secret) {
		cert, err := KeyPair(s)
		if err != nil {
			log.Error("webhook: certificate", "err", err)
			return
		}
		srv.SetCertificate(cert)
		if opts.ManageCert {
			if changed, err := PatchCABundle(ctx, kube, opts.ConfigName, CABundle(s)); err != nil {
				log.Warn("webhook: caBundle not set", "config", opts.ConfigName, "err", err)
			} else if changed {
				log.Info("webhook: caBundle updated", "config", opts.ConfigName)
			}
		}
	}
	// Reload whenever the Secret changes: a rotation by another replica,
	// or cert-manager's renewal, takes effect without a restart.
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.Secret).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { load(o.(*corev1.Secret)) },
		UpdateFunc: func(_, o any) { load(o.(*corev1.Secret)) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if opts.ManageCert {
		go keepCertificate(ctx, mgr, log)
	}
	return srv, nil
}

// certBackoff paces the first attempts to get a certificate: from 1 s,
// doubling up to a minute, until one succeeds; then the certificate is
// checked every rotationCheck.
var certBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 7, Cap: time.Minute}

// keepCertificate ensures the certificate until ctx ends: retrying with
// certBackoff until it exists, then once every rotationCheck.
func keepCertificate(ctx context.Context, mgr *CertManager, log *slog.Logger) {
	backoff := certBackoff
	for {
		delay := rotationCheck
		if _, err := mgr.Ensure(ctx); err != nil {
			delay = backoff.Step()
			log.Warn("webhook: certificate not ready; retrying", "err", err, "in", delay)
		} else {
			backoff = certBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
