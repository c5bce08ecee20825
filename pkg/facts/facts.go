// Package facts reads what the cluster says of the services items send to
// (items.ServiceUser): whether istiod builds an outbound cluster for a host
// and port. istiod builds one for the full host name of every Service port
// (NAME.NAMESPACE.svc.DOMAIN) and for every host and port of a
// ServiceEntry, and for nothing else. What a proxy does while the cluster
// is missing is the item's to say (items.ServiceRef.Missing): measured at
// real Envoys, a tracer's collector makes it refuse the listener, while an
// auth or rate-limit filter loads and fails each call. The controller and
// the admission webhook give a Resolver to the renderer (document.Facts);
// the controller also makes it watch the Services and ServiceEntries it
// was asked about (Watch), so that a status follows them within seconds.
package facts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/items"
)

// DefaultDomain is istiod's default domain suffix (its --domain).
const DefaultDomain = "cluster.local"

// Defaults of a Resolver.
const (
	// DefaultTimeout bounds one lookup: the webhook answers within the
	// API server's deadline, and a slow lookup only costs a warning.
	DefaultTimeout = time.Second
	// DefaultTTL is how long an answer is reused: a document is parsed
	// on every sync and every admission review.
	DefaultTTL = 10 * time.Second
)

// DefaultMissing is what the proxies do without the cluster of a service
// whose item says nothing (items.ServiceRef.Missing): Envoy refuses a
// filter or tracer that names a cluster it does not have at load time.
const DefaultMissing = "Envoy refuses every listener that sends to it: each proxy keeps the listeners it had, without the document's changes, and a proxy that starts gets no listener"

// notInEffect joins a missing service's cause and its consequence in a
// warning; NotInEffect reads it back.
const notInEffect = "; until there is one, the item is not in effect: "

// NotInEffect reports whether msg, a warning of Service, says that an
// item is not in effect because its service's cluster is missing, and
// what that means for traffic.
func NotInEffect(msg string) (consequence string, ok bool) {
	_, consequence, ok = strings.Cut(msg, notInEffect)
	return consequence, ok
}

// Resolver answers document.Facts from the API server: Services by
// name, ServiceEntries by host. It is safe for concurrent use.
type Resolver struct {
	Kube  kubernetes.Interface
	Istio istioclient.Interface
	// Domain is istiod's domain suffix (DefaultDomain when empty).
	Domain string
	// Timeout and TTL (defaults above when zero).
	Timeout, TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu       sync.Mutex
	services map[string]cached[[]uint32] // "ns/name" → ports; nil ports: none
	entries  cached[map[string][]uint32] // ServiceEntry host → ports
	w        *watcher                    // nil: no Watch
}

// watching is r's watcher, nil without Watch.
func (r *Resolver) watching() *watcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w
}

// asked records that host was asked about, for Watch.
func (r *Resolver) asked(host string) {
	if w := r.watching(); w != nil {
		w.ask(host)
	}
}

type cached[T any] struct {
	at  time.Time
	val T
	ok  bool // the object exists
	err error
}

// Service implements document.Facts.
func (r *Resolver) Service(ref items.ServiceRef) items.ServiceFact {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout())
	defer cancel()
	cluster := ref.Cluster()
	consequence := ref.Missing
	if consequence == "" {
		consequence = DefaultMissing
	}
	missing := func(what string) items.ServiceFact {
		return items.ServiceFact{Warn: true, Msg: fmt.Sprintf("%s, so istiod builds no cluster %s%s%s", what, cluster, notInEffect, consequence)}
	}
	r.asked(ref.Host)
	entries, err := r.serviceEntries(ctx)
	if err != nil {
		return items.ServiceFact{Warn: true, Msg: fmt.Sprintf("could not look up ServiceEntries for %q: %v", ref.Host, err)}
	}
	if ports, ok := entries[ref.Host]; ok {
		if slices.Contains(ports, ref.Port) {
			return items.ServiceFact{}
		}
		return missing(fmt.Sprintf("the ServiceEntry of %s has no port %d (it has %s)", ref.Host, ref.Port, portList(ports)))
	}
	name, ns, domain, kind := split(ref.Host, r.domain())
	switch kind {
	case fullName:
		ports, found, err := r.service(ctx, ns, name)
		switch {
		case err != nil:
			return items.ServiceFact{Warn: true, Msg: fmt.Sprintf("could not look up Service %s/%s: %v", ns, name, err)}
		case !found:
			return missing(fmt.Sprintf("no Service %s in namespace %s and no ServiceEntry has this host", name, ns))
		case !slices.Contains(ports, ref.Port):
			return missing(fmt.Sprintf("Service %s/%s has no port %d (it has %s)", ns, name, ref.Port, portList(ports)))
		}
		return items.ServiceFact{}
	case partialName, otherDomain:
		// A Service's name written short, or in another domain: istiod
		// names its cluster after the full name, never after this one.
		_, found, err := r.service(ctx, ns, name)
		if err == nil && found {
			full := fmt.Sprintf("%s.%s.svc.%s", name, ns, r.domain())
			why := "a Service's short name"
			if kind == otherDomain {
				why = fmt.Sprintf("in the domain %s, but istiod's is %s", domain, r.domain())
			}
			return items.ServiceFact{Refuse: true, Msg: fmt.Sprintf("%q is %s: istiod names this Service's cluster after %s (outbound|%d||%s), never after %q; write %s",
				ref.Host, why, full, ref.Port, full, ref.Host, full)}
		}
	}
	return missing(fmt.Sprintf("no Service and no ServiceEntry has the host %s", ref.Host))
}

// The shapes of a host.
const (
	external    = iota
	fullName    // NAME.NAMESPACE.svc.DOMAIN
	partialName // NAME.NAMESPACE, NAME.NAMESPACE.svc[.…], short of the domain
	otherDomain // NAME.NAMESPACE.svc.OTHER
)

// split reads host as a Service's name, as far as it is one.
func split(host, domain string) (name, ns, hostDomain string, kind int) {
	labels := strings.Split(host, ".")
	if len(labels) < 2 {
		return "", "", "", external
	}
	name, ns = labels[0], labels[1]
	switch {
	case len(labels) == 2:
		return name, ns, "", partialName
	case labels[2] != "svc":
		return "", "", "", external
	}
	rest := strings.Join(labels[3:], ".")
	switch {
	case rest == domain:
		return name, ns, rest, fullName
	case rest == "" || strings.HasPrefix(domain, rest+"."):
		return name, ns, rest, partialName
	}
	return name, ns, rest, otherDomain
}

// service reads the ports of Service ns/name, cached for the TTL.
func (r *Resolver) service(ctx context.Context, ns, name string) ([]uint32, bool, error) {
	if w := r.watching(); w != nil {
		if ports, found, ok := w.service(ns, name); ok {
			return ports, found, nil
		}
	}
	key := ns + "/" + name
	r.mu.Lock()
	c, ok := r.services[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl() {
		return c.val, c.ok, c.err
	}
	c = cached[[]uint32]{at: r.now()}
	svc, err := r.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		c.err = err
	default:
		c.ok = true
		for _, p := range svc.Spec.Ports {
			c.val = append(c.val, uint32(p.Port))
		}
	}
	r.mu.Lock()
	if r.services == nil {
		r.services = map[string]cached[[]uint32]{}
	}
	r.services[key] = c
	r.mu.Unlock()
	return c.val, c.ok, c.err
}

// serviceEntries reads every ServiceEntry's hosts and ports, cached for
// the TTL. A wildcard host is kept as written: istiod names its cluster
// after the wildcard, so it gives no cluster to a host it matches.
func (r *Resolver) serviceEntries(ctx context.Context) (map[string][]uint32, error) {
	if w := r.watching(); w != nil {
		if m, ok := w.entryMap(); ok {
			return m, nil
		}
	}
	r.mu.Lock()
	c := r.entries
	r.mu.Unlock()
	if !c.at.IsZero() && r.now().Sub(c.at) < r.ttl() {
		return c.val, c.err
	}
	c = cached[map[string][]uint32]{at: r.now(), val: map[string][]uint32{}}
	list, err := r.Istio.NetworkingV1().ServiceEntries(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.err = err
	} else {
		for _, se := range list.Items {
			for _, h := range se.Spec.GetHosts() {
				for _, p := range se.Spec.GetPorts() {
					c.val[h] = append(c.val[h], p.GetNumber())
				}
			}
		}
	}
	r.mu.Lock()
	r.entries = c
	r.mu.Unlock()
	return c.val, c.err
}

func (r *Resolver) domain() string {
	if r.Domain == "" {
		return DefaultDomain
	}
	return r.Domain
}

func (r *Resolver) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

func (r *Resolver) ttl() time.Duration {
	if r.TTL <= 0 {
		return DefaultTTL
	}
	return r.TTL
}

func (r *Resolver) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func portList(ports []uint32) string {
	if len(ports) == 0 {
		return "none"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ")
}
