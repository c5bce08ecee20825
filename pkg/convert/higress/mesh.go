package higress

import (
	"fmt"
	"maps"
	"slices"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/convert/out"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// meshExpressible are MeshConfig settings a globalconfig item can also
// express, and which.
var meshExpressible = map[string]string{
	"accessLogFile":     "accessLog.path",
	"accessLogFormat":   "accessLog.format (or accessLog.json)",
	"accessLogEncoding": "accessLog.json for JSON",
	"enableTracing":     "tracing.enable",
}

// reportMesh reports the keys the ConfigMap carries besides higress:
// mcpServer, Higress's own feature, and mesh and meshNetworks, Istio's.
func (c *converter) reportMesh(in Input) {
	if c.keys.given["mcpServer"] {
		c.report.add("mcpServer", NotCarried, "a Higress feature (its MCP server for AI agents), not an Envoy setting of the gateway; keep running it with Higress. Its values are not shown: it may hold a password")
	}
	if in.Mesh != "" || slices.Contains(in.DataKeys, "mesh") {
		var mesh map[string]any
		if err := sigsyaml.Unmarshal([]byte(in.Mesh), &mesh); err != nil {
			c.report.add("mesh", NotCarried, "Istio's MeshConfig (it did not parse: "+out.Cut(err.Error(), out.MaxMessage)+"); leave it to Istio")
		} else if len(mesh) == 0 {
			c.report.add("mesh", NotCarried, "Istio's MeshConfig, with no setting in it: nothing to carry")
		}
		for _, k := range slices.Sorted(maps.Keys(mesh)) {
			detail := "Istio's MeshConfig, which istiod applies to every proxy; leave it in the mesh config of the istiod that serves the gateways (istioctl install or Helm meshConfig); the conversion leaves every MeshConfig key to Istio"
			if ours, ok := meshExpressible[k]; ok {
				detail = "Istio's MeshConfig, which istiod applies to every proxy; keep it there. globalconfig can express the same with " + ours + ", but not converting it avoids doing it twice"
			}
			c.report.add("mesh."+k, NotCarried, detail)
		}
	}
	if in.MeshNetworks != "" || slices.Contains(in.DataKeys, "meshNetworks") {
		c.report.add("meshNetworks", NotCarried, "Istio's multi-network topology; leave it to Istio's meshNetworks")
	}
	for _, k := range in.DataKeys {
		if !slices.Contains(dataKeys, k) {
			// Its value is not shown: nobody reads it, and it may be
			// anything.
			c.report.add("data."+k, NotCarried, "Higress reads no such data key of higress-config (only higress, mesh and meshNetworks), so neither does the conversion"+dataSuggestion(k))
		}
	}
}

// dataSuggestion words a hint for an unknown data key.
func dataSuggestion(key string) string {
	if s := document.Suggest(key, dataKeys); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}
