package nginx_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
)

func TestReadInput(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      string // the controller ConfigMap and its data, or the error
	}{
		{"manifest", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nginx-conf, namespace: edge}\ndata: {use-gzip: \"true\"}\n",
			"edge/nginx-conf map[use-gzip:true]"},
		{"kubectl list", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: h, namespace: edge}, data: {X-A: b}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: edge}, data: {add-headers: edge/h}}\n",
			"edge/c map[add-headers:edge/h]"},
		{"bundle with other objects", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ingress-nginx-controller, namespace: ingress-nginx}\ndata: {keep-alive: \"10\"}\n",
			"ingress-nginx/ingress-nginx-controller map[keep-alive:10]"},
		{"helm values", "controller:\n  replicaCount: 2\n  config:\n    use-gzip: true\n    proxy-body-size: 8m\n  addHeaders:\n    X-Frame-Options: DENY\n",
			"ingress-nginx/ingress-nginx-controller map[add-headers:ingress-nginx/ingress-nginx-custom-add-headers proxy-body-size:8m use-gzip:true]"},
		{"two candidates", "kind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\nmetadata: {name: b}\n",
			"several ConfigMaps could be the controller's"},
		{"nothing", "kind: Service\nmetadata: {name: a}\n", "no ConfigMap in the input"},
		{"not a map", "- a\n- b\n", "expected a ConfigMap, a List or Helm values"},
		{"non-string data", "kind: ConfigMap\nmetadata: {name: a}\ndata:\n  hide-headers: [a, b]\n", "data.hide-headers must be a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, err := nginx.ReadInput([]byte(c.src))
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = in.Namespace + "/" + in.Name + " " + fmtMap(in.Data)
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func fmtMap(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+":"+m[k])
	}
	return "map[" + strings.Join(kv, " ") + "]"
}
