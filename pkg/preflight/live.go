package preflight

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

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

// GatewayPorts is the PortMap istiod builds for a gateway proxy from the
// Gateways that select it and the Services in its namespace that select
// it: each server's port is resolved to the target port of the Service
// port of that number (the port its RDS name carries), or kept when no
// Service has it. A named target port can't be resolved without the pod;
// those servers are returned in unresolved.
func GatewayPorts(ctx context.Context, kube kubernetes.Interface, istio istioclient.Interface, px Proxy) (PortMap, []string, error) {
	selects := func(sel map[string]string) bool {
		if len(sel) == 0 {
			return false
		}
		for k, v := range sel {
			if got, ok := px.Labels[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
	svcs, err := kube.CoreV1().Services(px.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list services in %s: %w", px.Namespace, err)
	}
	targets := map[int][]intstr.IntOrString{}
	for _, s := range svcs.Items {
		if !selects(s.Spec.Selector) {
			continue
		}
		for _, p := range s.Spec.Ports {
			targets[int(p.Port)] = append(targets[int(p.Port)], p.TargetPort)
		}
	}
	gws, err := istio.NetworkingV1().Gateways(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list gateways: %w", err)
	}
	out := PortMap{}
	var unresolved []string
	add := func(resolved, server int) {
		if !slices.Contains(out[resolved], server) {
			out[resolved] = append(out[resolved], server)
		}
	}
	for _, g := range gws.Items {
		if !selects(g.Spec.GetSelector()) {
			continue
		}
		for _, s := range g.Spec.GetServers() {
			port := int(s.GetPort().GetNumber())
			if port == 0 {
				continue
			}
			ts, ok := targets[port]
			if !ok {
				add(port, port)
				continue
			}
			for _, t := range ts {
				switch {
				case t.Type == intstr.String && t.StrVal != "":
					unresolved = append(unresolved, fmt.Sprintf("Gateway %s/%s port %d: its Service's target port %q is named", g.Namespace, g.Name, port, t.StrVal))
				case t.IntValue() == 0:
					add(port, port)
				default:
					add(t.IntValue(), port)
				}
			}
		}
	}
	return out, unresolved, nil
}

// LiveInput is the prediction's input for the proxy px whose current
// config is cur, read from the cluster: globalconfig's EnvoyFilters and
// the others, and a gateway's port map.
func LiveInput(ctx context.Context, kube kubernetes.Interface, istio istioclient.Interface, cur *Config, px Proxy, root string, desired []Filter) (Input, error) {
	live, others, err := ClusterFilters(ctx, istio)
	if err != nil {
		return Input{}, err
	}
	in := Input{Current: cur, Proxy: px, RootNamespace: root, Live: live, Desired: desired, Others: others}
	if px.Type == "router" {
		ports, unresolved, err := GatewayPorts(ctx, kube, istio, px)
		if err != nil {
			return Input{}, err
		}
		in.Proxy.Ports = ports
		for _, u := range unresolved {
			in.Notes = append(in.Notes, u+": route configuration matches by that port number are not predicted")
		}
	}
	return in, nil
}
