package rollout

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Expected is a proxy that should be connected to istiod: a running pod
// with an Istio proxy.
type Expected struct {
	// Name is POD.NAMESPACE, as Name names a connected proxy.
	Name string
	// Kind is "gateway" or "sidecar".
	Kind string
	// Since is when the pod started (the API server's clock).
	Since time.Time
	// Labels are the pod's labels now: istiod selects by them.
	Labels map[string]string
	// IP is the pod's address (its statistics are read there).
	IP string
	// Cluster is the member cluster the pod runs in; "" for the tracker's
	// Home.
	Cluster string
}

// ExpectedSource lists the proxies that should be connected; ok is false
// while it can't tell yet (its cache has not synced), and nothing is
// reported unconnected then.
type ExpectedSource interface {
	Expected() (proxies []Expected, ok bool)
}

// Labels and annotations that mark a pod with an Istio proxy, as Istio's
// injection templates write them.
const (
	// LabelCanonicalName is on every pod Istio's sidecar and gateway
	// templates inject.
	LabelCanonicalName = "service.istio.io/canonical-name"
	// AnnotationTemplates names the injection templates of a pod; the
	// gateway chart's pods ask for "gateway".
	AnnotationTemplates = "inject.istio.io/templates"
	// LabelGatewayName is on the pods of a Gateway API gateway; with the
	// class istio-waypoint they are waypoints, which take no EnvoyFilter.
	LabelGatewayName  = "gateway.networking.k8s.io/gateway-name"
	LabelGatewayClass = "gateway.networking.k8s.io/gateway-class-name"
)

// ExpectedFromPods is the proxies pods should have connected: the running
// ones Istio injected (LabelCanonicalName), gateways by their template or
// Gateway API label, waypoints left out.
func ExpectedFromPods(pods []*corev1.Pod) []Expected {
	var out []Expected
	for _, p := range pods {
		if _, ok := p.Labels[LabelCanonicalName]; !ok || p.Status.Phase != corev1.PodRunning || p.Status.StartTime == nil || p.DeletionTimestamp != nil {
			continue
		}
		kind := "sidecar"
		switch {
		case strings.Contains(p.Labels[LabelGatewayClass], "waypoint"):
			continue
		case p.Labels[LabelGatewayName] != "", slices.Contains(strings.Split(p.Annotations[AnnotationTemplates], ","), "gateway"):
			kind = "gateway"
		}
		out = append(out, Expected{Name: p.Name + "." + p.Namespace, Kind: kind, Since: p.Status.StartTime.UTC(), Labels: p.Labels, IP: p.Status.PodIP})
	}
	return out
}

// sync is a ProxySync that names e, for Scope.Reaches.
func (e Expected) sync() ProxySync { return syncOf(e.Kind, e.Name) }

// syncOf is a ProxySync that names a proxy of kind ("gateway" or
// "sidecar") and name (POD.NAMESPACE), for Scope.Reaches.
func syncOf(kind, name string) ProxySync {
	t := "sidecar"
	if kind == "gateway" {
		t = "router"
	}
	return ProxySync{ProxyID: t + "~~" + name + "~", ProxyType: t}
}
