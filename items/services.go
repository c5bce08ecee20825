package items

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// An item that sends to a service of the mesh (a tracing collector, an
// auth or a rate-limit service) names it by host and port, and its patches
// name the Envoy cluster istiod builds for that host and port
// (envoyfilter.OutboundCluster). istiod builds outbound clusters only for
// the full host names of Services (NAME.NAMESPACE.svc.DOMAIN) and the hosts
// of ServiceEntries; a patch naming any other cluster leaves the item
// not in effect (ServiceRef.Missing says how). The item declares its services (ServiceUser):
// the document checks each host's syntax with CheckServiceHost, and the
// controller and the admission webhook check the cluster's own facts
// (does the Service exist, with that port) through document.Facts.

// ServiceRef is a service an item's patches send to.
type ServiceRef struct {
	// Path is the key of the host, relative to the section
	// ("zipkin.service").
	Path string
	Host string
	Port uint32
	// Missing says what the proxies do while istiod builds no cluster for
	// the service, as measured at real Envoys (limits not enforced, every
	// request denied, traces dropped); empty, Envoy refuses every listener
	// that sends to it (the zipkin and datadog tracers' collectors).
	Missing string
}

// Cluster is the outbound cluster istiod builds for the service.
func (s ServiceRef) Cluster() string { return envoyfilter.OutboundCluster(s.Host, s.Port) }

// ServiceUser is implemented by items whose patches send to services of
// the mesh. Services lists those the section names, set or not enabled;
// a reference without a host is left out.
type ServiceUser interface {
	Services() []ServiceRef
}

// CheckServiceHost is the one rule for the host of a service an item sends
// to: a DNS name that istiod can name a cluster after. A name of one label
// ("zipkin") or one ending in ".svc" is a Service's short name, which
// istiod never uses: it names the cluster after the full host. Only the
// syntax is checked for an item that is not enabled: it sends nothing.
func CheckServiceHost(p *Problems, path, host string, enabled bool) {
	if host == "" {
		return
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		p.Addf(path, "must be a service host name: %s", strings.Join(msgs, "; "))
		return
	}
	if !enabled {
		return
	}
	switch {
	case !strings.Contains(host, "."):
		p.Addf(path, "%q is a short Service name; istiod names clusters after full host names, so no proxy has a cluster for it and the item would not be in effect; write the Service's full name, %s.<namespace>.svc.cluster.local (or its ServiceEntry host)", host, host)
	case strings.HasSuffix(host, ".svc"):
		p.Addf(path, "%q lacks the cluster domain; istiod names the cluster after the full host name, so no proxy has a cluster for it and the item would not be in effect; write %s.cluster.local (the mesh's domain)", host, host)
	}
}

// CheckServices checks the host of every service the item it names
// (CheckServiceHost).
func CheckServices(p *Problems, it interface {
	ServiceUser
	Enabled() bool
}) {
	for _, s := range it.Services() {
		CheckServiceHost(p, s.Path, s.Host, it.Enabled())
	}
}

// ServiceFact is what the cluster says of one ServiceRef.
type ServiceFact struct {
	// Refuse says istiod will never build the cluster as the reference is
	// written (a Service's short name that exists under its full one);
	// Warn that it builds none now (no such Service or port yet). Msg
	// says why, naming the host istiod would use.
	Refuse, Warn bool
	Msg          string
}
