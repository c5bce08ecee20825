// Package webhook is the validating admission webhook for the global
// ConfigMap: the API server asks it on every CREATE and UPDATE of the
// global ConfigMap (the webhook configuration selects it by name, see
// MatchExpression), and a document the engine
// rejects is refused with every problem and its path — the same messages
// `globalconfig validate` prints. With an Envoy binary (`run --envoy`, the
// fleet's own), an edit that changes the EnvoyFilters is also loaded into
// it and refused with Envoy's message when Envoy refuses it (envoy.go). It
// also keeps its own TLS certificate.
package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Path is where the API server posts AdmissionReviews.
const Path = "/validate"

// NoChangeWarning answers an edit that validates but changes no item's
// EnvoyFilter.
const NoChangeWarning = "globalconfig: this edit changes nothing in the generated EnvoyFilters"

// ChangeWarningPrefix starts the warning that says which items an edit
// adds, changes or removes: the diff the controller reports too.
const ChangeWarningPrefix = "globalconfig: this edit "

// maxReview bounds an AdmissionReview body: a ConfigMap is at most 1 MiB,
// and an UPDATE carries two.
const maxReview = 3 << 20

// Handler answers AdmissionReviews for ConfigMaps.
type Handler struct {
	Log *slog.Logger
	// Manager renders the documents; its cache makes the review of an
	// edit rebuild only the changed items. Nil uses a fresh one per review.
	Manager *render.Renderer
	// Fleet, when set, says which connected proxies the set would reach
	// are labelled label=true (canaries) and which carry neither true nor
	// false: a document whose rollout policy asks for canaries is warned
	// when there are none, or when some proxy is unlabelled.
	Fleet func(ctx context.Context, label string, set []*envoyfilter.Object) (canaries, unlabelled []string, err error)
	// Envoy, when set, loads the output of every edit that changes the
	// EnvoyFilters into the fleet's Envoy binary; nil checks with
	// globalconfig's own validation only.
	Envoy *EnvoyCheck
	// Others, when set, lists the cluster's EnvoyFilters that
	// globalconfig does not manage: an edit that removes or moves a
	// filter one of them anchors on is warned about (dependents.go).
	Others func(ctx context.Context) ([]anchors.Other, error)
	// RootNamespace is Istio's root namespace (istio-system when empty).
	RootNamespace string
}

// reviewShare is the share of the API server's timeout for the review
// (the timeout it sends in the URL) that a review may spend: the rest
// is for the answer to reach it. Past its timeout the API server applies
// the failurePolicy (Ignore: the edit is admitted unchecked).
const reviewShare = 0.8

// FleetTimeout bounds the Fleet question within one review.
const FleetTimeout = 2 * time.Second

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	// The API server says how long it waits (?timeout=5s): answer in time.
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(float64(t)*reviewShare))
		defer cancel()
	}
	resp := h.review(ctx, review.Request)
	resp.UID = review.Request.UID
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// review decides one request within ctx.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Kind != "ConfigMap" || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return allow
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(req.Object.Raw, &cm); err != nil {
		return deny(fmt.Sprintf("globalconfig: cannot read the ConfigMap: %v", err))
	}
	mgr := h.Manager
	if mgr == nil {
		mgr = render.New()
	}
	res := mgr.FromConfigMap(cm.Data)
	if !res.Valid() {
		h.Log.Info("admission denied", "configmap", req.Namespace+"/"+req.Name, "problems", len(res.Problems))
		return deny(fmt.Sprintf("globalconfig rejected %s: %d problem(s):\n%s", document.DataKey, len(res.Problems), render.Describe(res.Problems, "\n")))
	}
	// The old document is only parsed, never built: its section keys say
	// what the edit changes.
	var diff *render.Diff
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		var old corev1.ConfigMap
		if json.Unmarshal(req.OldObject.Raw, &old) == nil {
			if before, ok := render.KeysOf(old.Data); ok {
				d := render.Compare(before, res.Keys)
				diff = &d
			}
		}
	}
	if h.Envoy != nil {
		warning, denied := h.envoyReview(ctx, req, res, diff)
		if denied != nil {
			return denied
		}
		if warning != "" {
			allow.Warnings = append(allow.Warnings, warning)
		}
	}
	for _, w := range res.Warnings {
		allow.Warnings = append(allow.Warnings, "globalconfig: "+render.Describe([]*fielderr.Error{w}, ""))
	}
	allow.Warnings = append(allow.Warnings, h.canaryWarnings(ctx, res)...)
	allow.Warnings = append(allow.Warnings, h.dependentWarnings(ctx, req, res, diff)...)
	switch {
	case diff == nil:
	case diff.Empty():
		allow.Warnings = append(allow.Warnings, NoChangeWarning)
	default:
		allow.Warnings = append(allow.Warnings, ChangeWarningPrefix+diff.String())
	}
	return allow
}

// envoyReview loads the valid document's set res into the fleet's Envoy,
// unless the edit changes no item's EnvoyFilter (diff), and says whether
// Envoy refuses it (denied), or why Envoy gave no verdict (warning: the
// edit is admitted on globalconfig's own validation).
func (h *Handler) envoyReview(ctx context.Context, req *admissionv1.AdmissionRequest, res render.Result, diff *render.Diff) (warning string, denied *admissionv1.AdmissionResponse) {
	c := h.Envoy
	if (diff != nil && diff.Empty()) || len(res.Objects) == 0 {
		c.metrics.checks.WithLabelValues(EnvoyUnchanged).Inc()
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	rep, err := c.check(ctx, res.Objects)
	cm := req.Namespace + "/" + req.Name
	switch {
	case err != nil:
		c.metrics.checks.WithLabelValues(EnvoyFailed).Inc()
		msg := render.Scrub(err.Error(), res.Secrets)
		h.Log.Warn("admission: the Envoy check gave no verdict; admitted on globalconfig's own validation", "configmap", cm, "envoy", c.Binary.Path, "err", msg)
		return EnvoyFailedWarning + msg, nil
	case !rep.OK():
		c.metrics.checks.WithLabelValues(EnvoyRejected).Inc()
		msg := refusal(rep, res.Secrets)
		h.Log.Info("admission denied by Envoy", "configmap", cm, "envoy", rep.Envoy, "message", msg)
		return "", deny(msg)
	default:
		c.metrics.checks.WithLabelValues(EnvoyAccepted).Inc()
		return "", nil
	}
}

// canaryWarnings warn of a canary policy that would roll every change
// back: no proxy is a canary, or some proxy the set reaches carries no
// canary label.
func (h *Handler) canaryWarnings(ctx context.Context, res render.Result) []string {
	p := res.Rollout
	if h.Fleet == nil || !p.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, FleetTimeout)
	defer cancel()
	canaries, unlabelled, err := h.Fleet(ctx, p.Label(), res.Objects)
	if err != nil {
		return []string{"globalconfig: rollout: could not ask istiod which proxies are canaries: " + err.Error()}
	}
	var out []string
	if len(canaries) == 0 {
		out = append(out, fmt.Sprintf("globalconfig: rollout.canaryLabel: no proxy connected to istiod is labelled %s=true: every change will be rolled back after the bake time", p.Label()))
	}
	if n := len(unlabelled); n > 0 {
		listed := unlabelled[:min(n, 5)]
		more := ""
		if n > 5 {
			more = fmt.Sprintf(" and %d more", n-5)
		}
		out = append(out, fmt.Sprintf("globalconfig: rollout.canaryLabel: %d prox%s the EnvoyFilters reach carry no %s label (%s%s): every change will be rolled back; label each true or false",
			n, map[bool]string{true: "y", false: "ies"}[n == 1], p.Label(), strings.Join(listed, ", "), more))
	}
	return out
}

func deny(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity, Message: msg,
	}}
}

// Server serves the webhook over TLS with a certificate that can be
// swapped while it runs.
type Server struct {
	cert atomic.Pointer[tls.Certificate]
	srv  *http.Server
}

// NewServer returns a server for handler; it serves once SetCertificate
// has been called.
func NewServer(handler http.Handler) *Server {
	s := &Server{}
	mux := http.NewServeMux()
	mux.Handle(Path, handler)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				if c := s.cert.Load(); c != nil {
					return c, nil
				}
				return nil, errors.New("no certificate yet")
			},
		},
	}
	return s
}

// SetCertificate replaces the serving certificate; new connections use it.
func (s *Server) SetCertificate(c *tls.Certificate) { s.cert.Store(c) }

// Ready reports whether the server has a certificate to serve with.
func (s *Server) Ready() bool { return s.cert.Load() != nil }

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	err := s.srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
