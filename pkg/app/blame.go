package app

import (
	"context"
	"fmt"
	"strings"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// blameLive is the controller's blame (controller.Config.Blame): the
// live proxy's config from the istiods the tracker asks, the home
// cluster's EnvoyFilters, and the set the controller delivered, judged by
// bin. With member clusters, a proxy of a member (MEMBER/POD.NAMESPACE)
// other than home is not blamed: its istiods build its config from its
// own cluster's objects.
func blameLive(tracker *rollout.Tracker, kube kubernetes.Interface, istio istioclient.Interface, bin *envoybin.Binary, root, home string) controller.BlameFunc {
	return func(ctx context.Context, proxy string, ours []*envoyfilter.Object) (*preflight.Blame, error) {
		if member, name, ok := strings.Cut(proxy, "/"); ok {
			if member != home {
				return nil, fmt.Errorf("proxy %s is of member cluster %s: the controller blames the proxies of its home cluster %s only (globalconfig explain --proxy with that member's kubeconfig names the EnvoyFilter)", proxy, member, home)
			}
			proxy = name
		}
		bases, err := homeEndpoints(tracker.Source, home)
		if err != nil {
			return nil, fmt.Errorf("list istiod: %w", err)
		}
		return preflight.BlameLive(ctx, tracker.Client, bases, kube, istio, bin, proxy, root, preflight.FromObjects(ours))
	}
}

// homeEndpoints are the home cluster's istiods: with members, the home
// member's; else every one src lists.
func homeEndpoints(src rollout.Source, home string) ([]string, error) {
	ms, ok := src.(*rollout.Members)
	if !ok {
		return src.Endpoints()
	}
	eps, err := ms.ClusterEndpoints()
	var out []string
	for _, ep := range eps {
		if ep.Cluster == home {
			out = append(out, ep.URL)
		}
	}
	if len(out) == 0 && err != nil {
		return nil, err
	}
	return out, nil
}

// openEnvoy opens the Envoy binary for the blame alone (without the
// webhook's check): it must run and say a release globalconfig can read.
func openEnvoy(ctx context.Context, path string) (*envoybin.Binary, error) {
	bin, err := envoybin.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	if _, err := envoyfilter.ParseVersion(bin.Version); err != nil {
		return nil, fmt.Errorf("envoy %s: version %q: %w", path, bin.Version, err)
	}
	return bin, nil
}
