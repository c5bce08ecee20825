package preflight

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// NoProxyError: no istiod asked has the proxy connected.
type NoProxyError struct {
	Proxy  string
	Asked  []string
	Reason string
}

func (e *NoProxyError) Error() string {
	if e.Reason != "" {
		return e.Reason
	}
	return fmt.Sprintf("no istiod has a proxy %s connected (asked %s); istioctl proxy-status lists the connected ones", e.Proxy, strings.Join(e.Asked, ", "))
}

// IstiodError: no istiod could be asked, or one failed to answer.
type IstiodError struct{ Reason string }

func (e *IstiodError) Error() string { return e.Reason }

// Fetch finds the proxy NAME (POD.NAMESPACE) on the istiods at bases and
// returns the configuration istiod generates for it now, and how istiod
// knows it (labels from /debug/adsz, type and Istio version from
// /debug/syncz).
func Fetch(ctx context.Context, client *rollout.Client, bases []string, name string) (*Config, Proxy, error) {
	pod, pns, ok := strings.Cut(name, ".")
	if !ok || pod == "" || pns == "" || strings.Contains(pns, ".") {
		return nil, Proxy{}, fmt.Errorf("--proxy must be POD.NAMESPACE, got %q", name)
	}
	var reached, problems []string
	for _, base := range bases {
		conns, err := client.Connected(ctx, base)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		reached = append(reached, base)
		var conn *rollout.Connected
		for i := range conns {
			if conns[i].Name() == name {
				conn = &conns[i]
			}
		}
		if conn == nil {
			continue
		}
		syncs, err := client.Syncz(ctx, base)
		if err != nil {
			return nil, Proxy{}, &IstiodError{fmt.Sprintf("%s: %v", base, err)}
		}
		px := Proxy{Name: name, Namespace: pns, Labels: conn.Labels}
		for _, s := range syncs {
			if s.Name() == name {
				px.Type, px.IstioVersion = s.ProxyType, s.IstioVersion
				if px.Type == "" {
					px.Type, _, _ = strings.Cut(s.ProxyID, "~")
				}
			}
		}
		body, err := client.ConfigDump(ctx, base, conn.ConnectionID)
		var se *rollout.StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			return nil, Proxy{}, &NoProxyError{Proxy: name, Reason: fmt.Sprintf("proxy %s disconnected from %s while it was read", name, base)}
		}
		if err != nil {
			return nil, Proxy{}, &IstiodError{fmt.Sprintf("%s: %v", base, err)}
		}
		cfg, err := ParseDump(body)
		if err != nil {
			var de *DumpError
			if errors.As(err, &de) {
				de.Reason = fmt.Sprintf("istiod %s's dump of %s: %s", base, name, de.Reason)
			}
			return nil, Proxy{}, err
		}
		return cfg, px, nil
	}
	if len(reached) == 0 {
		return nil, Proxy{}, &IstiodError{"no istiod could be asked: " + strings.Join(problems, "; ")}
	}
	return nil, Proxy{}, &NoProxyError{Proxy: name, Asked: reached}
}

// ClusterFilters lists every EnvoyFilter: globalconfig's (live) and the
// others.
func ClusterFilters(ctx context.Context, istio istioclient.Interface) (live, others []Filter, err error) {
	all, err := istio.NetworkingV1alpha3().EnvoyFilters(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list envoyfilters: %w", err)
	}
	for _, ef := range all.Items {
		f := Filter{Namespace: ef.Namespace, Name: ef.Name, Spec: &ef.Spec}
		if ef.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue {
			f.Item = ef.Labels[envoyfilter.LabelItem]
			if f.Item == "" {
				f.Item = ef.Name
			}
			live = append(live, f)
		} else {
			others = append(others, f)
		}
	}
	return live, others, nil
}
