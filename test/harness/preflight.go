package harness

import (
	"context"
	"net/http"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// ProxyConfig is the configuration ist generates now for the proxy
// POD.NAMESPACE, as diff --proxy reads it.
func (ist *Istiod) ProxyConfig(ctx context.Context, proxy string) (*preflight.Config, preflight.Proxy, error) {
	return preflight.Fetch(ctx, &rollout.Client{HTTP: &http.Client{}}, []string{"http://" + ist.HTTPAddr}, proxy)
}

// Predict is diff --proxy's prediction for the proxy under objs, from
// ist's configuration for it and c's EnvoyFilters, Gateways and Services.
func (c *Cluster) Predict(ctx context.Context, ist *Istiod, proxy string, objs []*envoyfilter.Object) (*preflight.Prediction, error) {
	cur, px, err := ist.ProxyConfig(ctx, proxy)
	if err != nil {
		return nil, err
	}
	in, err := preflight.LiveInput(ctx, c.Admin, c.Istio, cur, px, Namespace, preflight.FromObjects(objs))
	if err != nil {
		return nil, err
	}
	return preflight.Predict(in)
}
