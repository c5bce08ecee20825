package preflight

import (
	"context"
	"fmt"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// BlameLive is the blame for the live proxy (POD.NAMESPACE) on the
// istiods at bases: its config as istiod builds it now (Fetch), the
// cluster's EnvoyFilters (ClusterFilters), and a gateway's port map
// (GatewayPorts), given to BlameConfig. ours, when not nil, are
// globalconfig's EnvoyFilters (what an MCP sink serves, which the
// cluster does not list), and the cluster's managed ones are then left
// aside; nil takes the cluster's. Errors are Fetch's (*NoProxyError,
// *IstiodError, *DumpError), *ReleaseError when bin is not of the
// proxy's Envoy release, *ClusterError when the cluster's EnvoyFilters,
// Gateways or Services can't be listed, *BoundError, or others wrapped.
func BlameLive(ctx context.Context, client *rollout.Client, bases []string, kube kubernetes.Interface, istio istioclient.Interface, bin *envoybin.Binary, proxy, root string, ours []Filter) (*Blame, error) {
	cur, px, err := Fetch(ctx, client, bases, proxy)
	if err != nil {
		return nil, err
	}
	// Before anything else is read: a binary of another release gives
	// no blame.
	if err := CheckRelease(bin, px); err != nil {
		return nil, err
	}
	in, err := LiveInput(ctx, kube, istio, cur, px, root, nil)
	if err != nil {
		return nil, &ClusterError{Proxy: proxy, Err: err}
	}
	if ours != nil {
		in.Live = ours
	}
	return BlameConfig(ctx, bin, in)
}

// ClusterError: the cluster's EnvoyFilters, Gateways or Services could
// not be listed for a blame.
type ClusterError struct {
	Proxy string
	Err   error
}

func (e *ClusterError) Error() string {
	return fmt.Sprintf("blame of proxy %s: read the cluster: %v", e.Proxy, e.Err)
}

func (e *ClusterError) Unwrap() error { return e.Err }
