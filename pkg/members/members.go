// Package members reads the config clusters globalconfig delivers to
// besides its own (the home cluster): Secrets in the controller's
// namespace labelled LabelMember, in Istio's remote-secret format (a
// kubeconfig in the Secret's data). It watches them, so members come and
// go at runtime, and hands every change to a callback as the whole list:
// the controller compares it with what it manages. Nothing here writes to
// a cluster, and no credential reaches a message.
package members

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// The Secret's label and annotations.
const (
	// LabelMember marks a Secret as a member cluster's (value "true").
	// Istio's own remote secrets carry istio/multiCluster instead: their
	// reader credentials cannot write EnvoyFilters, so they are never
	// taken as members.
	LabelMember = "globalconfig.io/member"
	// AnnotationCluster names the member; else AnnotationIstioCluster
	// (what `istioctl create-remote-secret` writes); else the Secret's
	// single data key.
	AnnotationCluster      = "globalconfig.io/cluster"
	AnnotationIstioCluster = "networking.istio.io/cluster"
	// AnnotationIstiodDebugURLs lists, comma-separated, the base URLs of
	// the member's istiod debug ports (http://HOST:8080), where the
	// controller can't reach the pod addresses of the member's own istiod
	// EndpointSlices.
	AnnotationIstiodDebugURLs = "globalconfig.io/istiod-debug-urls"
)

// DefaultHome is the home cluster's name when none is given: istiod's
// default CLUSTER_ID.
const DefaultHome = "Kubernetes"

// ValidName says what is wrong with a cluster name, "" when nothing is:
// the one rule of cluster names (envoyfilter.ValidateClusterName).
func ValidName(name string) string {
	if err := envoyfilter.ValidateClusterName(name); err != nil {
		return err.Error()
	}
	return ""
}

// Member is one member cluster, read from its Secret.
type Member struct {
	// Name is the cluster's name: what target.clusters and the status
	// call it.
	Name string
	// Secret is the Secret's namespace/name.
	Secret string
	// Config is the REST config its kubeconfig gives.
	Config *rest.Config
	// DebugURLs are AnnotationIstiodDebugURLs' URLs, nil when not set.
	DebugURLs []string
	// Fingerprint changes whenever anything above does: a Secret whose
	// kubeconfig changes gives a member with new clients.
	Fingerprint string
}

// Problem is a member Secret that gives no member, and why.
type Problem struct {
	Secret  string
	Name    string // the cluster it names, when known
	Message string
}

func (p Problem) Error() string { return fmt.Sprintf("member Secret %s: %s", p.Secret, p.Message) }

// Parse reads one member Secret.
func Parse(s *corev1.Secret) (Member, error) {
	key := s.Namespace + "/" + s.Name
	fail := func(name, format string, args ...any) (Member, error) {
		return Member{}, Problem{Secret: key, Name: name, Message: fmt.Sprintf(format, args...)}
	}
	name := s.Annotations[AnnotationCluster]
	if name == "" {
		name = s.Annotations[AnnotationIstioCluster]
	}
	data := s.Data[name]
	switch {
	case name != "" && data == nil && len(s.Data) == 1:
		for _, v := range s.Data {
			data = v
		}
	case name == "" && len(s.Data) == 1:
		for k, v := range s.Data {
			name, data = k, v
		}
	case name == "":
		return fail("", "names no cluster: give it the annotation %s, or exactly one data key named after the cluster (it has %d)", AnnotationCluster, len(s.Data))
	}
	if msg := ValidName(name); msg != "" {
		return fail(name, "%s", msg)
	}
	if len(data) == 0 {
		return fail(name, "holds no kubeconfig under the key %q", name)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		// The parser's message may quote the file; say only what failed.
		return fail(name, "its kubeconfig does not load: %s", firstLine(err.Error()))
	}
	cfg.UserAgent = "globalconfig"
	m := Member{Name: name, Secret: key, Config: cfg}
	if v := s.Annotations[AnnotationIstiodDebugURLs]; v != "" {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
					return fail(name, "the annotation %s has %q, which is not an http:// or https:// URL", AnnotationIstiodDebugURLs, u)
				}
				m.DebugURLs = append(m.DebugURLs, strings.TrimSuffix(u, "/"))
			}
		}
	}
	h := sha256.New()
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(strings.Join(m.DebugURLs, ",")))
	m.Fingerprint = hex.EncodeToString(h.Sum(nil))[:16]
	return m, nil
}

// firstLine cuts a message at its first line and at 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Resolve turns the member Secrets into members and problems: a Secret
// that does not parse, that names the home cluster, or that names a
// cluster an earlier Secret (by namespace/name) already names is a
// problem, and gives no member. Members are sorted by name.
func Resolve(secrets []*corev1.Secret, home string) ([]Member, []Problem) {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b *corev1.Secret) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var out []Member
	var problems []Problem
	by := map[string]string{}
	for _, s := range secrets {
		m, err := Parse(s)
		if err != nil {
			problems = append(problems, err.(Problem))
			continue
		}
		switch prev, dup := by[m.Name]; {
		case m.Name == home:
			problems = append(problems, Problem{Secret: m.Secret, Name: m.Name, Message: fmt.Sprintf("names the home cluster %q, where the controller runs; it is a member already", home)})
		case dup:
			problems = append(problems, Problem{Secret: m.Secret, Name: m.Name, Message: fmt.Sprintf("names the cluster %q, which the Secret %s already names; this one is ignored", m.Name, prev)})
		default:
			by[m.Name] = m.Secret
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out, problems
}

// Watcher watches the member Secrets of one namespace and calls OnChange
// with the whole list whenever it changes (from one goroutine, never
// concurrently), and once after the first list.
type Watcher struct {
	Namespace string
	// Home is the home cluster's name.
	Home     string
	OnChange func(members []Member, problems []Problem)
	Log      *slog.Logger

	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
	kick     chan struct{}
	last     string
}

// NewWatcher watches the Secrets labelled LabelMember=true in namespace.
func NewWatcher(kube kubernetes.Interface, namespace, home string, resync time.Duration) *Watcher {
	f := informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelMember + "=true" }))
	w := &Watcher{Namespace: namespace, Home: home, informer: f.Core().V1().Secrets().Informer(), factory: f, kick: make(chan struct{}, 1)}
	kick := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { kick() }, UpdateFunc: func(any, any) { kick() }, DeleteFunc: func(any) { kick() },
	})
	return w
}

// HasSynced reports whether the Secrets were listed.
func (w *Watcher) HasSynced() bool { return w.informer.HasSynced() }

// Run starts the informer and calls OnChange until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.factory.Start(ctx.Done())
	defer w.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		return
	}
	w.changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			w.changed()
		}
	}
}

func (w *Watcher) changed() {
	var secrets []*corev1.Secret
	for _, obj := range w.informer.GetStore().List() {
		if s, ok := obj.(*corev1.Secret); ok {
			secrets = append(secrets, s)
		}
	}
	ms, problems := Resolve(secrets, w.Home)
	// Only a change is handed on: a resync lists the same Secrets again.
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s=%s@%s;", m.Name, m.Secret, m.Fingerprint)
	}
	for _, p := range problems {
		fmt.Fprintf(&b, "!%s;", p.Error())
	}
	if b.String() == w.last {
		return
	}
	w.last = b.String()
	if w.Log != nil {
		names := make([]string, 0, len(ms))
		for _, m := range ms {
			names = append(names, m.Name)
		}
		w.Log.Info("member clusters", "members", names, "problems", len(problems))
		for _, p := range problems {
			w.Log.Warn("member Secret ignored", "secret", p.Secret, "problem", p.Message)
		}
	}
	if w.OnChange != nil {
		w.OnChange(ms, problems)
	}
}
