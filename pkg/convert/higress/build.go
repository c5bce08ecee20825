package higress

import (
	"fmt"
	"maps"
	"mime"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/items/headers"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// converter builds the globalconfig document and the report.
type converter struct {
	opts    Options
	cfg     *Config
	present map[string]bool
	keys    *docKeys
	report  Report
}

var (
	mapping = out.Mapping
	pair    = out.Pair
	str     = out.Str
	boolean = out.Bool
	float   = out.Float
	list    = out.List
)

func integer[T ~int32 | ~uint32 | ~int](v T) *yaml.Node { return out.Int(v) }

// section collects the keys of one section of the converted document.
type section struct {
	c      *converter
	node   *yaml.Node
	theirs string // the Higress section's path
	ours   string // the globalconfig section's name
}

func (c *converter) section(theirs, ours string) *section {
	return &section{c: c, node: mapping(), theirs: theirs, ours: ours}
}

// set writes our key from their key: a value the user gave is reported
// converted, one Higress filled in is marked as its default. detail, when
// not empty, says what the converted key means.
func (s *section) set(theirKey, ourKey string, value *yaml.Node, detail string) {
	theirs, ours := join(s.theirs, theirKey), join(s.ours, ourKey)
	shown := out.ShownList(value, maxShown)
	key := str(ourKey)
	if s.c.present[theirs] {
		s.c.report.addValue(theirs, shown, Converted, "→ "+ours+suffix(detail))
	} else {
		// On a list, a line comment would shift every later comment
		// (go-yaml): the comment goes above the key instead.
		if value.Kind == yaml.SequenceNode {
			key.HeadComment = "Higress's default:"
		} else {
			value.LineComment = "Higress's default"
		}
		s.c.report.addValue(theirs, shown, DefaultWritten, "→ "+ours+suffix(detail))
	}
	s.node.Content = append(s.node.Content, key, value)
}

// setSecret writes a secret: its value never reaches the report.
func (s *section) setSecret(theirKey, ourKey, value string) {
	theirs, ours := join(s.theirs, theirKey), join(s.ours, ourKey)
	s.c.report.add(theirs, Converted, "→ "+ours+" (a secret: not shown here, nor logged by globalconfig; it is in the generated EnvoyFilter, as it was in Higress's)")
	s.node.Content = append(s.node.Content, str(ourKey), str(value))
}

// raw writes a key with no Higress counterpart.
func (s *section) raw(ourKey string, value *yaml.Node, comment string) {
	value.LineComment = comment
	s.node.Content = append(s.node.Content, str(ourKey), value)
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// maxShown bounds a list of values the report echoes.
const maxShown = 300

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return "; " + detail
}

// document builds the converted document.
func (c *converter) document() *yaml.Node {
	doc := mapping()
	add := func(name string, n *yaml.Node, comment string) {
		k := str(name)
		k.HeadComment = comment
		doc.Content = append(doc.Content, k, n)
	}
	sel := mapping()
	for _, k := range slices.Sorted(maps.Keys(c.opts.selector())) {
		sel.Content = append(sel.Content, str(k), str(c.opts.selector()[k]))
	}
	add("target", mapping(pair("selector", sel)),
		"Higress's gateway. Higress's EnvoyFilters live in its own root namespace and reach its gateways;\nglobalconfig's live in Istio's root namespace and select the gateway by label.")
	add("downstream", c.downstream(), "")
	add("upstream", c.upstream(), "")
	if h := c.headers(); h != nil {
		add("headers", h, "")
	}
	if g := c.gzip(); g != nil {
		add("gzip", g, "")
	}
	if t := c.tracing(); t != nil {
		add("tracing", t, "")
	}
	return doc
}

func (c *converter) downstream() *yaml.Node {
	d := c.cfg.Downstream
	s := c.section("downstream", "downstream")
	s.set("idleTimeout", "idleTimeout", integer(d.IdleTimeout), "Higress also sets the stream idle timeout from it, so downstream.streamIdleTimeout is written with the same value")
	s.raw("streamIdleTimeout", integer(d.IdleTimeout), "Higress sets it from idleTimeout; globalconfig keeps the two apart")
	s.set("maxRequestHeadersKb", "maxRequestHeadersKb", integer(d.MaxRequestHeadersKb), "")
	s.set("connectionBufferLimits", "connectionBufferLimits", integer(d.ConnectionBufferLimits), "listener per_connection_buffer_limit_bytes, as in Higress")
	h := c.section("downstream.http2", "downstream.http2")
	h.set("maxConcurrentStreams", "maxConcurrentStreams", integer(d.HTTP2.MaxConcurrentStreams), "")
	h.set("initialStreamWindowSize", "initialStreamWindowSize", integer(d.HTTP2.InitialStreamWindowSize), "")
	h.set("initialConnectionWindowSize", "initialConnectionWindowSize", integer(d.HTTP2.InitialConnectionWindowSize), "")
	s.node.Content = append(s.node.Content, str("http2"), h.node)
	detail := "0 leaves every route's timeout as Istio set it from its VirtualService, as in Higress"
	if d.RouteTimeout > 0 {
		detail = "overrides the timeout of every route, VirtualServices' included, as in Higress (validate warns about it)"
	}
	s.set("routeTimeout", "routeTimeout", integer(d.RouteTimeout), detail)
	return s.node
}

func (c *converter) upstream() *yaml.Node {
	u := c.cfg.Upstream
	s := c.section("upstream", "upstream")
	s.set("idleTimeout", "idleTimeout", integer(u.IdleTimeout), "")
	c.report.add("upstream.idleTimeout", Difference,
		"Higress merges the deprecated cluster-level common_http_protocol_options.idle_timeout, which Envoy does not apply to Istio's clusters (they carry typed HttpProtocolOptions); globalconfig sets the typed envoy.extensions.upstreams.http.v3.HttpProtocolOptions, so the idle timeout now takes effect. Istio replaces that typed entry whole, so it also carries use_downstream_protocol_config (see the upstream item)")
	s.set("connectionBufferLimits", "connectionBufferLimits", integer(u.ConnectionBufferLimits), "cluster per_connection_buffer_limit_bytes on every cluster, as in Higress")
	return s.node
}

func (c *converter) headers() *yaml.Node {
	s := c.section("", "headers")
	any := false
	if c.cfg.DisableXEnvoyHeaders {
		any = true
		s.set("disableXEnvoyHeaders", "disableXEnvoyHeaders", boolean(true), "")
		c.report.add("disableXEnvoyHeaders", Difference, "Higress REPLACEs the router filter with suppress_envoy_headers: true, dropping router settings other EnvoyFilters made; globalconfig MERGEs suppress_envoy_headers: true into the router, so the others stay")
	}
	if c.cfg.AddXRealIPHeader {
		any = true
		s.set("addXRealIpHeader", "addXRealIpHeader", boolean(true), "")
		c.report.add("addXRealIpHeader", Difference, fmt.Sprintf(
			"Higress sets x-real-ip to %%REQ(X-ENVOY-EXTERNAL-ADDRESS)%%, a header Envoy sets only for clients it considers external, so requests from internal (private) addresses get no x-real-ip; globalconfig sets it to %s, the client address Envoy trusts (after X-Forwarded-For hops), for every request", headers.RealIPValue))
	}
	for _, k := range []struct {
		key string
		on  bool
	}{{"disableXEnvoyHeaders", c.cfg.DisableXEnvoyHeaders}, {"addXRealIpHeader", c.cfg.AddXRealIPHeader}} {
		switch {
		case c.present[k.key] && !k.on:
			c.report.addValue(k.key, "false", Converted, "nothing to write: false is globalconfig's default too")
		case c.keys.given[k.key] && !k.on:
			c.report.add(k.key, Converted, "nothing to write: null is Higress's default, false, which is globalconfig's default too")
		}
	}
	if !any {
		return nil
	}
	return s.node
}

func (c *converter) gzip() *yaml.Node {
	g := c.cfg.Gzip
	s := c.section("gzip", "gzip")
	if !c.present["gzip"] {
		c.report.add("gzip", DefaultWritten, "Higress compresses with gzip when the section is absent; the converted document says so (in globalconfig, an absent section means off)")
	}
	// Envoy lowercases a response's content type and drops its
	// parameters before it looks it up, so a listed type that is not a
	// bare lower-case media type never matched at Higress's gateway.
	var types, rewritten, never, given []string
	seen := map[string]bool{} // types, for a list of thousands
	for _, ct := range g.ContentType {
		given = append(given, out.Cut(ct, 80))
		switch mt, params, err := mime.ParseMediaType(ct); {
		case err != nil:
			never = append(never, strconv.Quote(out.Cut(ct, 80))+" (not a media type)")
		case seen[mt]:
			// A repeat, or the same type written another way.
		case len(params) > 0 || mt != ct:
			seen[mt] = true
			types = append(types, mt)
			rewritten = append(rewritten, fmt.Sprintf("%s (written as %s)", strconv.Quote(out.Cut(ct, 80)), mt))
		default:
			seen[ct] = true
			types = append(types, ct)
		}
	}
	var differences []string
	if len(rewritten) > 0 {
		differences = append(differences, "Envoy lowercases a response's content type and drops its parameters before matching, so at Higress's gateway these entries never matched: "+strings.Join(rewritten, ", ")+"; written as the types that do")
	}
	if len(never) > 0 {
		differences = append(differences, "not carried: "+strings.Join(never, ", ")+"; no response ever matched it at Higress's gateway")
	}
	shownTypes := out.ShownList(list(given), maxShown)
	if len(types) == 0 {
		c.report.add("gzip", Difference, "not written: none of its content types is one Envoy can match, so Higress's gateway compressed nothing")
		c.report.addValue("gzip.contentType", shownTypes, Difference, "none of the entries is a type Envoy can match, so gzip is not written: "+strings.Join(differences, "; "))
		// The rest of the section goes with the content types.
		values := map[string]string{
			"enable": strconv.FormatBool(g.Enable), "minContentLength": strconv.Itoa(int(g.MinContentLength)),
			"disableOnEtagHeader": strconv.FormatBool(g.DisableOnEtagHeader), "memoryLevel": strconv.Itoa(int(g.MemoryLevel)),
			"windowBits": strconv.Itoa(int(g.WindowBits)), "chunkSize": strconv.Itoa(int(g.ChunkSize)),
			"compressionLevel": g.CompressionLevel, "compressionStrategy": g.CompressionStrategy,
		}
		for _, key := range slices.Sorted(maps.Keys(values)) {
			if c.keys.given["gzip."+key] {
				c.report.addValue("gzip."+key, values[key], NotCarried, "gzip is not written: none of gzip.contentType's entries is a type Envoy can match (see its line), so Higress's gateway compressed nothing, and this key has no section to go with")
			}
		}
		return nil
	}
	s.set("enable", "enable", boolean(g.Enable), "")
	s.set("minContentLength", "minContentLength", integer(g.MinContentLength), "")
	s.set("contentType", "contentType", list(types), "")
	if len(differences) > 0 {
		// Replaces the line set gave it: a key is listed once.
		c.report.addValue("gzip.contentType", shownTypes, Difference, "→ gzip.contentType: "+out.ShownList(list(types), maxShown)+"; "+strings.Join(differences, "; "))
	}
	s.set("disableOnEtagHeader", "disableOnEtagHeader", boolean(g.DisableOnEtagHeader), "")
	s.set("memoryLevel", "memoryLevel", integer(g.MemoryLevel), "")
	s.set("windowBits", "windowBits", integer(g.WindowBits), "")
	chunk := g.ChunkSize
	switch {
	case chunk < 4096 || chunk > 65536:
		// Higress wrote check_size, which Istio dropped: Envoy used 4096.
		s.set("chunkSize", "chunkSize", integer(int32(envoyChunkSize)), "")
		c.report.addValue("gzip.chunkSize", strconv.Itoa(int(chunk)), Difference, fmt.Sprintf(
			"Higress emits it as check_size, which Istio drops, so Envoy used its default 4096; %d is outside Envoy's range 4096–65536, so 4096 is written: what Higress put into effect", chunk))
	case chunk != envoyChunkSize:
		s.set("chunkSize", "chunkSize", integer(chunk), "")
		c.report.addValue("gzip.chunkSize", strconv.Itoa(int(chunk)), Difference, fmt.Sprintf(
			"Higress emits it as check_size, which Istio drops, so Envoy used 4096; globalconfig emits chunk_size, so %d now takes effect", chunk))
	default:
		s.set("chunkSize", "chunkSize", integer(chunk), "")
	}
	s.set("compressionLevel", "compressionLevel", str(g.CompressionLevel), "")
	s.set("compressionStrategy", "compressionStrategy", str(g.CompressionStrategy), "")
	if g.Enable {
		c.report.add("gzip", Difference, "Higress inserts the compressor before envoy.filters.http.cors; globalconfig puts the compressors at the front of the HTTP filter chain, so every other filter, Istio's own and WasmPlugins included, sees each response before it is compressed (Higress's position left Istio's filters in front of it); the compressor library is named gzip, not text_optimized")
	}
	return s.node
}

func (c *converter) tracing() *yaml.Node {
	t := c.cfg.Tracing
	if !c.present["tracing"] {
		return nil // Higress's default: off.
	}
	s := c.section("tracing", "tracing")
	s.set("enable", "enable", boolean(t.Enable), "")
	s.set("sampling", "sampling", float(t.Sampling), "")
	if rounded := strconv.FormatFloat(t.Sampling, 'f', 1, 64); strconv.FormatFloat(t.Sampling, 'f', -1, 64) != strings.TrimSuffix(rounded, ".0") && t.Enable {
		c.report.addValue("tracing.sampling", strconv.FormatFloat(t.Sampling, 'f', -1, 64), Difference,
			fmt.Sprintf("Higress formats sampling with one decimal, so Envoy sampled %s%%; globalconfig keeps the full precision", rounded))
	}
	s.set("timeout", "timeout", integer(t.Timeout), "milliseconds, as in Higress; used by skywalking and opentelemetry")
	ns := c.opts.namespace()
	service := "higress-gateway." + ns
	backend := func(name string, b Backend, extra func(*section)) {
		bs := c.section("tracing."+name, "tracing."+name)
		bs.set("service", "service", str(b.Service), "")
		port, _ := strconv.Atoi(b.Port)
		bs.set("port", "port", integer(port), "")
		if extra != nil {
			extra(bs)
		}
		s.node.Content = append(s.node.Content, str(name), bs.node)
	}
	if t.Enable && (t.Skywalking != nil || t.OpenTelemetry != nil) {
		c.report.add("tracing", Difference, "the gRPC collector's cluster gets tracing's HTTP/2 protocol options; Istio replaces a cluster's typed options whole, so upstream.idleTimeout does not reach that one cluster (in Higress it reached no cluster at all)")
	}
	written := ""
	switch {
	case t.Skywalking != nil:
		written = "skywalking"
		s.raw("serviceName", str(service), "the name Higress reports: higress-gateway.<namespace>")
		c.report.add("tracing.skywalking", Converted, "→ tracing.serviceName "+service+", the service name Higress reports")
		backend("skywalking", t.Skywalking.Backend(), func(bs *section) {
			if t.Skywalking.AccessToken != "" {
				bs.setSecret("access_token", "access_token", t.Skywalking.AccessToken)
			}
		})
	case t.OpenTelemetry != nil:
		written = "opentelemetry"
		s.raw("serviceName", str(service), "the name Higress reports: higress-gateway.<namespace>")
		c.report.add("tracing.opentelemetry", Converted, "→ tracing.serviceName "+service+", the service name Higress reports; OTLP over gRPC, as in Higress")
		backend("opentelemetry", *t.OpenTelemetry, nil)
	case t.Zipkin != nil:
		written = "zipkin"
		backend("zipkin", *t.Zipkin, nil)
		if t.Enable {
			c.report.add("tracing.zipkin", Difference, "Higress sends collector_hostname higress-gateway (the Host header of span reports); globalconfig sends the collector's service name. Higress's split_spans_for_request and router start_child_span are deprecated; globalconfig sets their replacement, HCM tracing spawn_upstream_span, which gives the upstream request its own client span as they did")
		}
	}
	if t.Skywalking != nil && t.Skywalking.AccessToken == "" && c.keys.given["tracing.skywalking.access_token"] {
		c.report.add("tracing.skywalking.access_token", Converted, "nothing to write: empty, so no token is sent, as by Higress")
	}
	// Higress accepts several backends while tracing is off; the section
	// takes one. Say which were left out, and their keys with them.
	backends := t.backends()
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		if name == written {
			continue
		}
		c.report.add("tracing."+name, NotCarried, fmt.Sprintf("tracing is off, and globalconfig's tracing takes one backend: %s is written, %s is not (Higress used neither while tracing is off); keep the one you will turn on", written, name))
		why := fmt.Sprintf("tracing.%s is not written (tracing is off, and globalconfig's tracing takes one backend: %s is written), so neither is this key", name, written)
		b := backends[name]
		for _, kv := range [][2]string{{"service", b.Service}, {"port", b.Port}} {
			if path := "tracing." + name + "." + kv[0]; c.keys.given[path] {
				c.report.addValue(path, out.Cut(kv[1], maxShown), NotCarried, why)
			}
		}
		if path := "tracing." + name + ".access_token"; c.keys.given[path] {
			c.report.add(path, NotCarried, why+"; a secret: not shown")
		}
	}
	return s.node
}

// reportEmptySections gives a line to each section the document writes
// null or with no key in it (tracing: {}, downstream: null) that has none
// yet: its keys are Higress's defaults, written out under their own
// names, or nothing is written.
func (c *converter) reportEmptySections() {
	for _, path := range slices.Sorted(maps.Keys(c.keys.empty)) {
		if len(c.report.Find(path)) > 0 {
			continue
		}
		switch {
		case path == "tracing" && !c.present[path]:
			c.report.add(path, Converted, "nothing to write: null leaves tracing off, Higress's default, and globalconfig adds none either")
		case path == "tracing":
			c.report.add(path, DefaultWritten, "empty: Higress's tracing defaults apply (tracing off); each is written out under its own key")
		case strings.HasPrefix(path, "tracing."):
			c.report.add(path, Converted, "nothing to write: null sets no backend")
		default:
			c.report.add(path, DefaultWritten, "empty: Higress applied the section's defaults; each is written out under its own key")
		}
	}
}
