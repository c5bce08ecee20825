package rollout

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// DefaultDebugPort is istiod's HTTP debug port (--httpAddr :8080). The
// istiod Service does not expose it, so every ready endpoint is asked on
// it directly: each istiod knows only the proxies connected to it.
const DefaultDebugPort = 8080

// ServiceEndpoints finds every ready istiod behind a Service from its
// EndpointSlices.
type ServiceEndpoints struct {
	Lister          discoverylisters.EndpointSliceLister
	Namespace, Name string
	Port            int
}

// Endpoints returns http://ADDRESS:PORT for every endpoint, ready or
// not: an istiod that is not ready (starting, failing its probe) may
// still serve proxies, and the rollout must hear from it. One that does
// not answer is reported unreachable, and nothing is promoted on its
// proxies' missing answers.
func (s ServiceEndpoints) Endpoints() ([]string, error) {
	slices_, err := s.Lister.EndpointSlices(s.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name}))
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of Service %s/%s: %w", s.Namespace, s.Name, err)
	}
	out := URLs(slices_, s.Port)
	if len(out) == 0 {
		return nil, fmt.Errorf("the Service %s/%s has no endpoints", s.Namespace, s.Name)
	}
	return out, nil
}

// URLs is http://ADDRESS:PORT for every endpoint of the slices, ready or
// not, sorted.
func URLs(eps []*discoveryv1.EndpointSlice, port int) []string {
	var out []string
	for _, sl := range eps {
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				u := "http://" + net.JoinHostPort(a, strconv.Itoa(port))
				if !slices.Contains(out, u) {
					out = append(out, u)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// ReadyURLs is http://ADDRESS:PORT for every ready endpoint of the
// slices, sorted: one istiod to ask for one proxy (preflight).
func ReadyURLs(eps []*discoveryv1.EndpointSlice, port int) []string {
	var ready []*discoveryv1.EndpointSlice
	for _, sl := range eps {
		c := sl.DeepCopy()
		c.Endpoints = slices.DeleteFunc(c.Endpoints, func(ep discoveryv1.Endpoint) bool {
			return ep.Conditions.Ready != nil && !*ep.Conditions.Ready
		})
		ready = append(ready, c)
	}
	return URLs(ready, port)
}
