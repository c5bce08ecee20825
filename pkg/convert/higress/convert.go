package higress

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// Options say where the converted document applies.
type Options struct {
	// Namespace is Higress's namespace (higress-system): Higress names the
	// gateway's tracing service higress-gateway.<namespace>.
	Namespace string
	// Selector selects Higress's gateway pods; empty means
	// higress: <Namespace>-higress-gateway, the label Higress's chart sets.
	Selector map[string]string
	// ConfigMap is NAMESPACE/NAME of the output ConfigMap.
	ConfigMap string
}

// DefaultNamespace is the namespace Higress installs into.
const DefaultNamespace = "higress-system"

// selector returns the gateway selector the options ask for.
func (o Options) selector() map[string]string {
	if len(o.Selector) > 0 {
		return o.Selector
	}
	return map[string]string{"higress": o.namespace() + "-higress-gateway"}
}

func (o Options) namespace() string {
	if o.Namespace == "" {
		return DefaultNamespace
	}
	return o.Namespace
}

// Result is a conversion: the document, the manifest carrying it, and the
// report.
type Result struct {
	// Document is the globalconfig document (config.yaml).
	Document []byte
	// Manifest is a ConfigMap manifest with the document under
	// config.yaml.
	Manifest []byte
	Report   Report
}

// Input is what a higress-config file holds: the higress document, and
// the mesh and meshNetworks keys when it is the ConfigMap.
type Input struct {
	Higress, Mesh, MeshNetworks string
	// Manifest is true when the input was a ConfigMap manifest, and
	// Namespace its metadata.namespace: Higress's namespace.
	Manifest  bool
	Namespace string
	// Wrapped is true when the document came wrapped in a top-level
	// higress: key, as Higress's Helm values hold it.
	Wrapped bool
	// DataKeys are the ConfigMap's data keys, sorted, when the input was
	// a manifest: higress, mesh and meshNetworks are read, any other is
	// reported by name.
	DataKeys []string
}

// ReadInput accepts a higress-config ConfigMap manifest (data key higress)
// or the bare higress document.
func ReadInput(data []byte) (Input, error) {
	if err := out.CheckUTF8(data); err != nil {
		return Input{}, err
	}
	var probe struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := sigsyaml.Unmarshal(data, &probe); err == nil && probe.Kind == "ConfigMap" {
		h, ok := probe.Data["higress"]
		if !ok {
			return Input{}, fmt.Errorf(`data: the ConfigMap has no data key "higress"`)
		}
		return Input{Higress: h, Mesh: probe.Data["mesh"], MeshNetworks: probe.Data["meshNetworks"], Manifest: true, Namespace: probe.Metadata.Namespace,
			DataKeys: slices.Sorted(maps.Keys(probe.Data))}, nil
	}
	// Higress's Helm values hold the document under a higress: key, as a
	// mapping or as the text the chart writes into the ConfigMap.
	var wrapped map[string]any
	if err := sigsyaml.Unmarshal(data, &wrapped); err == nil && len(wrapped) == 1 {
		switch h := wrapped["higress"].(type) {
		case string:
			return Input{Higress: h, Wrapped: true}, nil
		case map[string]any:
			b, err := sigsyaml.Marshal(h)
			if err != nil {
				return Input{}, err
			}
			return Input{Higress: string(b), Wrapped: true}, nil
		}
	}
	return Input{Higress: string(data)}, nil
}

// Decode reads the higress document the way Higress does: onto its
// defaults, with sigs.k8s.io/yaml. A document Higress would refuse (a
// value of the wrong type, or one its validation rejects) is an error
// naming the path; unknown keys, which Higress ignores, are returned.
func Decode(src string) (cfg *Config, present map[string]bool, unknown []string, err error) {
	cfg, keys, err := decode(src)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, keys.present, keys.unknown, nil
}

// decode is Decode, with every key the document holds.
func decode(src string) (*Config, *docKeys, error) {
	// The keys are read on another goroutine: two independent parses of
	// a document up to 1 MiB.
	var (
		keys    *docKeys
		keysErr error
		wg      sync.WaitGroup
	)
	wg.Go(func() { keys, keysErr = readKeys(src) })
	defer wg.Wait()
	cfg := defaults()
	if err := sigsyaml.Unmarshal([]byte(src), cfg); err != nil {
		return nil, nil, fmt.Errorf("Higress would reject the document: %s", strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: "))
	}
	wg.Wait()
	if keysErr != nil {
		return nil, nil, keysErr
	}
	// A section written as null is a section Higress resets to its
	// defaults.
	d := defaults()
	if cfg.Tracing == nil {
		cfg.Tracing = d.Tracing
	}
	if cfg.Gzip == nil {
		cfg.Gzip = d.Gzip
	}
	if cfg.Downstream == nil {
		cfg.Downstream = d.Downstream
	}
	if cfg.Downstream.HTTP2 == nil {
		cfg.Downstream.HTTP2 = d.Downstream.HTTP2
	}
	if cfg.Upstream == nil {
		cfg.Upstream = d.Upstream
	}
	if err := validate(cfg); err != nil {
		return nil, nil, err
	}
	return cfg, keys, nil
}

// knownKeys are the keys Higress reads, as a tree.
var knownKeys = map[string]any{
	"tracing": map[string]any{"enable": nil, "sampling": nil, "timeout": nil,
		"zipkin":        map[string]any{"service": nil, "port": nil},
		"skywalking":    map[string]any{"service": nil, "port": nil, "access_token": nil},
		"opentelemetry": map[string]any{"service": nil, "port": nil}},
	"gzip": map[string]any{"enable": nil, "minContentLength": nil, "contentType": nil, "disableOnEtagHeader": nil, "memoryLevel": nil,
		"windowBits": nil, "chunkSize": nil, "compressionLevel": nil, "compressionStrategy": nil},
	"downstream": map[string]any{"idleTimeout": nil, "maxRequestHeadersKb": nil, "connectionBufferLimits": nil, "routeTimeout": nil,
		"http2": map[string]any{"maxConcurrentStreams": nil, "initialStreamWindowSize": nil, "initialConnectionWindowSize": nil}},
	"upstream":             map[string]any{"idleTimeout": nil, "connectionBufferLimits": nil},
	"disableXEnvoyHeaders": nil,
	"addXRealIpHeader":     nil,
	"mcpServer":            "opaque",
}

// docKeys are the keys a higress document holds, by path, named as
// Higress reads them.
type docKeys struct {
	// present: the known keys with a value (not null).
	present map[string]bool
	// given: the known keys, null ones included.
	given map[string]bool
	// sections: the known keys that hold keys of their own (downstream,
	// tracing.zipkin); empty: the known sections written null or with no
	// key in them (tracing: {}, downstream: null). A path is in one of the
	// two.
	sections, empty map[string]bool
	// unknown: the keys Higress does not know (it ignores them), not
	// looked into.
	unknown []string
}

// readKeys reads the keys of a higress document.
func readKeys(src string) (*docKeys, error) {
	var raw map[string]any
	if err := sigsyaml.Unmarshal([]byte(src), &raw); err != nil {
		return nil, err
	}
	k := &docKeys{present: map[string]bool{}, given: map[string]bool{}, sections: map[string]bool{}, empty: map[string]bool{}}
	k.walk(raw, "", knownKeys)
	for path := range k.sections {
		// Written twice (its name in two cases), once with keys: a
		// section.
		delete(k.empty, path)
	}
	return k, nil
}

// walk records every key path of raw.
func (k *docKeys) walk(raw map[string]any, prefix string, known map[string]any) {
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		// Higress decodes with encoding/json, which matches a key to a
		// field regardless of case: "downstreAm" is downstream.
		name := key
		if _, exact := known[key]; !exact {
			for _, kk := range slices.Sorted(maps.Keys(known)) {
				if strings.EqualFold(kk, key) {
					name = kk
					break
				}
			}
		}
		path := fielderr.Join(prefix, name)
		spec, ok := known[name]
		if !ok {
			k.unknown = append(k.unknown, fielderr.Join(prefix, key))
			continue
		}
		k.given[path] = true
		if raw[key] != nil {
			k.present[path] = true
		}
		sub, isSection := spec.(map[string]any)
		if !isSection {
			continue
		}
		if m, isMap := raw[key].(map[string]any); isMap && len(m) > 0 {
			k.sections[path] = true
			k.walk(m, path, sub)
		} else {
			k.empty[path] = true
		}
	}
}

// InputKeys returns the keys of an input the report gives a line each,
// by the name the report gives them:
//   - in the higress document, every key Higress reads that holds no keys
//     of its own (downstream.idleTimeout, gzip.contentType), a null one
//     included; a section written null or with no key in it
//     (tracing: {}); mcpServer whole (its values are never shown); every
//     key Higress does not know, by its path, not looked into;
//   - in a ConfigMap, each key of mesh (mesh.KEY), or mesh itself when it
//     holds none or does not parse; meshNetworks; and any other data key
//     as data.KEY;
//   - higress, when the document came wrapped in a higress: key.
//
// sections are the keys of the document that hold keys of their own
// (downstream, tracing.skywalking): each has at most one line. A document
// that does not parse is an error.
func InputKeys(in Input) (keys, sections []string, err error) {
	k, err := readKeys(in.Higress)
	if err != nil {
		return nil, nil, err
	}
	for path := range k.given {
		if !k.sections[path] {
			keys = append(keys, path)
		}
	}
	keys = append(keys, k.unknown...)
	sections = slices.Sorted(maps.Keys(k.sections))
	if in.Mesh != "" || slices.Contains(in.DataKeys, "mesh") {
		var mesh map[string]any
		if err := sigsyaml.Unmarshal([]byte(in.Mesh), &mesh); err != nil || len(mesh) == 0 {
			keys = append(keys, "mesh")
		}
		for key := range mesh {
			keys = append(keys, "mesh."+key)
		}
	}
	if in.MeshNetworks != "" || slices.Contains(in.DataKeys, "meshNetworks") {
		keys = append(keys, "meshNetworks")
	}
	for _, key := range in.DataKeys {
		if !slices.Contains(dataKeys, key) {
			keys = append(keys, "data."+key)
		}
	}
	if in.Wrapped {
		keys = append(keys, "higress")
	}
	slices.Sort(keys)
	return keys, sections, nil
}

// dataKeys are the data keys of higress-config Higress reads.
var dataKeys = []string{"higress", "mesh", "meshNetworks"}

// validate applies Higress's own checks (each of its item controllers'),
// reporting every failure with its path.
func validate(c *Config) error {
	var p fielderr.List
	d := c.Downstream
	switch {
	case d.MaxRequestHeadersKb > maxRequestHeadersKb:
		p.Addf("downstream.maxRequestHeadersKb", "Higress rejects more than %d", maxRequestHeadersKb)
	case d.MaxRequestHeadersKb == 0:
		// Higress checks only the ceiling, and merges 0 into every
		// connection manager: Envoy refuses it (1 to 8192), so Higress's
		// gateway rejects every listener update.
		p.Addf("downstream.maxRequestHeadersKb", "0 passes Higress's check, but its gateway's Envoy refuses max_request_headers_kb 0 (it takes 1 to %d) and rejects every listener update; write 1 to %d, or leave the key out for Higress's %d", maxRequestHeadersKb, maxRequestHeadersKb, DefaultMaxRequestHeadersKb)
	}
	if h := d.HTTP2; h != nil {
		if h.MaxConcurrentStreams < 1 || h.MaxConcurrentStreams > maxHTTP2 {
			p.Addf("downstream.http2.maxConcurrentStreams", "Higress requires 1 to %d", maxHTTP2)
		}
		if h.InitialStreamWindowSize < minHTTP2Window || h.InitialStreamWindowSize > maxHTTP2 {
			p.Addf("downstream.http2.initialStreamWindowSize", "Higress requires %d to %d", minHTTP2Window, maxHTTP2)
		}
		if h.InitialConnectionWindowSize < minHTTP2Window || h.InitialConnectionWindowSize > maxHTTP2 {
			p.Addf("downstream.http2.initialConnectionWindowSize", "Higress requires %d to %d", minHTTP2Window, maxHTTP2)
		}
	}
	t := c.Tracing
	if t.Timeout <= 0 {
		p.Addf("tracing.timeout", "Higress requires more than 0 (milliseconds)")
	}
	if t.Sampling < 0 || t.Sampling > 100 {
		p.Addf("tracing.sampling", "Higress requires 0 to 100")
	}
	tracers := 0
	for name, b := range t.backends() {
		if b.Service == "" || b.Port == "" {
			p.Addf("tracing."+name, "Higress requires service and port")
			continue
		}
		if _, err := strconv.ParseUint(b.Port, 10, 16); err != nil {
			p.Addf("tracing."+name+".port", "must be a port number, got %q", b.Port)
		}
		tracers++
	}
	if t.Enable && tracers != 1 {
		p.Addf("tracing", "Higress requires exactly one of zipkin, skywalking and opentelemetry when enabled")
	}
	if m := c.McpServer; m != nil {
		// Higress's checks of mcpServer (its MCP server controller): a
		// failing one rejects the whole document.
		if m.EnableUserLevelServer && m.Redis == nil {
			p.Addf("mcpServer.redis", "Higress requires it when enable_user_level_server is true")
		}
		types := []string{"exact", "prefix", "suffix", "contains", "regex"}
		for i, r := range m.MatchList {
			path := fmt.Sprintf("mcpServer.match_list[%d]", i)
			if !slices.Contains(types, r.MatchRuleType) {
				p.Addf(path+".match_rule_type", "Higress requires one of %s", strings.Join(types, ", "))
			}
			if r.UpstreamType != "" && !slices.Contains([]string{"rest", "sse", "streamable"}, r.UpstreamType) {
				p.Addf(path+".upstream_type", "Higress requires rest, sse or streamable")
			}
			if r.EnablePathRewrite && r.UpstreamType != "sse" {
				p.Addf(path+".enable_path_rewrite", "Higress allows a path rewrite only with upstream_type sse")
			}
		}
	}
	g := c.Gzip
	if g.MinContentLength <= 0 {
		p.Addf("gzip.minContentLength", "Higress requires more than 0")
	}
	if len(g.ContentType) == 0 {
		p.Addf("gzip.contentType", "Higress requires at least one content type")
	}
	if g.MemoryLevel < 1 || g.MemoryLevel > 9 {
		p.Addf("gzip.memoryLevel", "Higress requires 1 to 9")
	}
	if g.WindowBits < 9 || g.WindowBits > 15 {
		p.Addf("gzip.windowBits", "Higress requires 9 to 15")
	}
	if g.ChunkSize <= 0 {
		p.Addf("gzip.chunkSize", "Higress requires more than 0")
	}
	if !slices.Contains(gzipLevels, g.CompressionLevel) {
		p.Addf("gzip.compressionLevel", "Higress requires one of %s", strings.Join(gzipLevels, ", "))
	}
	if !slices.Contains(gzipStrategies, g.CompressionStrategy) {
		p.Addf("gzip.compressionStrategy", "Higress requires one of %s", strings.Join(gzipStrategies, ", "))
	}
	return p.Err()
}

// backends lists the tracing backends that are set.
func (t *Tracing) backends() map[string]Backend {
	out := map[string]Backend{}
	if t.Zipkin != nil {
		out["zipkin"] = *t.Zipkin
	}
	if t.Skywalking != nil {
		out["skywalking"] = t.Skywalking.Backend()
	}
	if t.OpenTelemetry != nil {
		out["opentelemetry"] = *t.OpenTelemetry
	}
	return out
}

// Convert turns a higress-config input into a globalconfig document.
func Convert(in Input, opts Options) (*Result, error) {
	cfg, keys, err := decode(in.Higress)
	if err != nil {
		return nil, out.Bound(err)
	}
	c := &converter{opts: opts, cfg: cfg, present: keys.present, keys: keys}
	doc := c.document()
	c.reportEmptySections()
	for _, k := range keys.unknown {
		c.report.add(k, NotCarried, "Higress does not know this key and ignores it; so does the converted document"+suggestion(k))
	}
	c.reportMesh(in)
	if in.Wrapped {
		c.report.add("higress", Converted, "the document was read from under its higress: key, where Higress's Helm values hold it")
	}
	c.report.oneLinePerKey()
	var manifest []byte
	var manifestErr error
	b, err := out.Document(doc, func(b []byte) { manifest, manifestErr = Manifest(b, opts.ConfigMap) })
	if err != nil {
		return nil, out.Bound(higressPaths(err))
	}
	if manifestErr != nil {
		return nil, manifestErr
	}
	return &Result{Document: b, Manifest: manifest, Report: c.report}, nil
}

// higressPaths restates the problems of a converted document that
// globalconfig refuses (a value Higress passes on unchecked, such as a
// tracing service that is no host name) as problems of the Higress keys
// they came from: the converted document names its keys as Higress does.
func higressPaths(err error) error {
	var errs fielderr.List
	for _, p := range fielderr.Flatten(err) {
		msg := strings.TrimPrefix(p.Msg, "converts to a value globalconfig refuses: ")
		errs.Addf(p.Path, "Higress takes this value as it is, and globalconfig's validation refuses it: %s", msg)
	}
	return errs.Err()
}

// Manifest wraps a document in the global ConfigMap, labelled for the
// admission webhook.
func Manifest(doc []byte, configMap string) ([]byte, error) {
	return out.Manifest(doc, configMap, "Converted from Higress's higress-config by `globalconfig convert --from higress`.")
}
