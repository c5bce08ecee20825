package higress

import (
	"maps"
	"slices"

	sigsyaml "sigs.k8s.io/yaml"
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
	if c.present["mcpServer"] {
		c.report.add("mcpServer", NotCarried, "a Higress feature (its MCP server for AI agents), not an Envoy setting of the gateway; keep running it with Higress. Its values are not shown: it may hold a password")
	}
	if in.Mesh != "" {
		var mesh map[string]any
		if err := sigsyaml.Unmarshal([]byte(in.Mesh), &mesh); err != nil {
			c.report.add("mesh", NotCarried, "Istio's MeshConfig (it did not parse: "+err.Error()+"); leave it to Istio")
		}
		for _, k := range slices.Sorted(maps.Keys(mesh)) {
			detail := "Istio's MeshConfig, which istiod applies to every proxy; leave it in the mesh config of the istiod that serves the gateways (istioctl install or Helm meshConfig). globalconfig has no key for it"
			if ours, ok := meshExpressible[k]; ok {
				detail = "Istio's MeshConfig, which istiod applies to every proxy; keep it there. globalconfig can express the same with " + ours + ", but not converting it avoids doing it twice"
			}
			c.report.add("mesh."+k, NotCarried, detail)
		}
	}
	if in.MeshNetworks != "" {
		c.report.add("meshNetworks", NotCarried, "Istio's multi-network topology; leave it to Istio's meshNetworks")
	}
}
