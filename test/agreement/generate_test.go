package agreement

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// The generator builds documents from the registry's own declarations:
// each item's valid golden inputs are the seeds (realistic sections as
// users write them), and a mutation replaces one key with a value made
// from what the item declares of it: its Range, its enum values, its
// value type, its Text kind (format strings, regexes, header names and
// values, paths, hosts). A document holds one or two items, under a
// target context the items may take.

// root is the repository's root, from this package's directory.
const root = "../.."

// leaf is one key an item declares: its path as a Range's ("perHeader[].maxTokens"),
// its Go type, and what the item declares of it.
type leaf struct {
	path  string
	typ   reflect.Type
	rng   *items.Range
	text  items.TextKind
	isKey bool // the keys of a map
}

// schemaOf lists every key of an item's section, with its declarations.
func leavesOf(r items.Registration) []leaf {
	it := r.NewItem()
	ranges := map[string]items.Range{}
	if rg, ok := it.(items.Ranger); ok {
		for _, x := range rg.Ranges() {
			ranges[x.Path] = x
		}
	}
	texts := map[string]items.Text{}
	if tx, ok := it.(items.Texter); ok {
		for _, t := range tx.Texts() {
			texts[t.Path] = t
		}
	}
	var out []leaf
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if _, ok := items.LimitsOf(t); ok || isEnum(t) || t.Kind() != reflect.Struct && t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
			l := leaf{path: path, typ: t}
			if x, ok := ranges[path]; ok {
				l.rng = &x
			}
			if x, ok := texts[path]; ok {
				l.text = x.Kind
			}
			out = append(out, l)
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			for _, f := range items.Fields(t) {
				if f.Name == "enable" {
					continue
				}
				walk(t.FieldByIndex(f.Index).Type, join(path, f.Name))
			}
		case reflect.Slice:
			walk(t.Elem(), path+"[]")
		case reflect.Map:
			if x, ok := texts[path+".*"]; ok && x.Key != "" {
				out = append(out, leaf{path: path + ".*", typ: t.Key(), text: x.Key, isKey: true})
			}
			walk(t.Elem(), path+".*")
		}
	}
	walk(reflect.TypeOf(it), "")
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func isEnum(t reflect.Type) bool { _, ok := items.EnumValues(t); return ok }

// seed is one valid document of an item's golden inputs.
type seed struct {
	item string
	file string
	doc  *yaml.Node // the document's mapping
}

// loadSeeds reads every item's valid golden inputs.
func loadSeeds() (map[string][]seed, error) {
	out := map[string][]seed{}
	for _, r := range items.All() {
		pkg := reflect.TypeOf(r.NewItem()).Elem().PkgPath()
		dir := filepath.Join(root, strings.TrimPrefix(pkg, "github.com/globalconfig/globalconfig/"), "testdata")
		files, err := filepath.Glob(filepath.Join(dir, "*.in.yaml"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if _, err := document.Parse(data); err != nil {
				continue // an invalid case of the golden tests
			}
			var n yaml.Node
			if err := yaml.Unmarshal(data, &n); err != nil || n.Kind != yaml.DocumentNode || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
				continue
			}
			out[r.Name] = append(out[r.Name], seed{item: r.Name, file: filepath.Base(f), doc: n.Content[0]})
		}
		if len(out[r.Name]) == 0 {
			return nil, fmt.Errorf("item %s has no valid golden input in %s", r.Name, dir)
		}
	}
	return out, nil
}

// generator makes documents. Each document has a random stream of its
// own, keyed by the run's seed, its item and its number: an item's
// documents are the same whatever else the registry holds, so a new item
// adds its own documents and changes no other item's sample (but for the
// documents it becomes the partner of: see partner).
type generator struct {
	seed   uint64
	rng    *rand.Rand // the stream of the document being made
	seeds  map[string][]seed
	leaves map[string][]leaf
	names  []string
}

func newGenerator(seed uint64, seeds map[string][]seed) *generator {
	g := &generator{seed: seed, seeds: seeds, leaves: map[string][]leaf{}}
	for _, r := range items.All() {
		g.names = append(g.names, r.Name)
		g.leaves[r.Name] = leavesOf(r)
	}
	return g
}

// key hashes the run's seed and parts into one stream key.
func (g *generator) key(parts ...string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d", g.seed)
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return h.Sum64()
}

// stream is g drawing from the stream of parts alone.
func (g *generator) stream(parts ...string) *generator {
	c := *g
	k := g.key(parts...)
	c.rng = rand.New(rand.NewPCG(k, k^0x9e3779b97f4a7c15))
	return &c
}

// generated is one document and how it was made.
type generated struct {
	src  []byte
	how  []string // seeds and mutations, for the failure message
	item string   // the item mutated
}

// documents makes perItem documents of each registered item.
func (g *generator) documents(perItem int) []generated {
	var out []generated
	for _, name := range g.names {
		for i := range perItem {
			out = append(out, g.document(name, i))
		}
	}
	return out
}

// document makes item name's i-th document: one of its seeds, mutated
// once or twice, sometimes beside a second item's seed (what items do
// together), sometimes under another target context.
func (g *generator) document(name string, i int) generated {
	d := g.stream("document", name, strconv.Itoa(i))
	s := d.pick(name)
	doc := clone(s.doc)
	gen := generated{item: name, how: []string{"seed " + name + "/" + s.file}}
	for range 1 + d.rng.IntN(2) {
		gen.how = append(gen.how, d.mutate(doc, name))
	}
	if d.rng.IntN(3) == 0 {
		if other := g.partner(name, i); other != "" {
			o := g.stream("partner", name, strconv.Itoa(i), other).pick(other)
			if merge(doc, o.doc, other) {
				gen.how = append(gen.how, "beside "+other+"/"+o.file)
			}
		}
	}
	if d.rng.IntN(4) == 0 {
		ctx := []string{"GATEWAY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "ANY"}[d.rng.IntN(4)]
		setTarget(doc, ctx)
		gen.how = append(gen.how, "target.context "+ctx)
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}})
	if err != nil {
		panic(err)
	}
	gen.src = out
	return gen
}

// partner is the item beside item name's i-th document, when it has one:
// of the other items, the one whose hash with the document is least
// (rendezvous hashing). A new item takes over only the documents it
// hashes least for, about one in as many items as there are; every other
// document keeps its partner.
func (g *generator) partner(name string, i int) string {
	best, least := "", uint64(math.MaxUint64)
	for _, other := range g.names {
		if other == name {
			continue
		}
		if h := g.key("partner", name, strconv.Itoa(i), other); h <= least {
			best, least = other, h
		}
	}
	return best
}

func (g *generator) pick(name string) seed {
	list := g.seeds[name]
	return list[g.rng.IntN(len(list))]
}

// mutate sets one declared key of item name's section in doc to a
// generated value, and says what it did.
func (g *generator) mutate(doc *yaml.Node, name string) string {
	leaves := g.leaves[name]
	// Free-form strings are what Envoy parses; they get half the turns.
	var texts []leaf
	for _, l := range leaves {
		if l.text != "" && l.text != items.TextPlain {
			texts = append(texts, l)
		}
	}
	l := leaves[g.rng.IntN(len(leaves))]
	if len(texts) > 0 && g.rng.IntN(2) == 0 {
		l = texts[g.rng.IntN(len(texts))]
	}
	section := mappingValue(doc, name)
	if section == nil {
		section = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		doc.Content = append(doc.Content, str(name), section)
	}
	value := g.value(l)
	keys := items.Range{Path: l.path}.Keys()
	if l.isKey {
		// A map's key: add an entry under a generated name, with a value
		// from a seed entry or a plain one.
		keys = keys[:len(keys)-1]
		m := ensure(section, keys, g)
		var v *yaml.Node = str("x")
		if len(m.Content) >= 2 {
			v = clone(m.Content[1])
		}
		m.Kind, m.Tag = yaml.MappingNode, "!!map"
		m.Content = append(m.Content, value, v)
		return fmt.Sprintf("%s.%s: add key %q", name, l.path, value.Value)
	}
	if (l.text == items.TextHostName || l.text == items.TextMethod) && strings.HasSuffix(l.path, "[]") && g.rng.IntN(2) == 0 {
		// A whole list, as users write them: items build one matcher
		// from it, which must fit Envoy's limits however long it is.
		list := g.list(l.text)
		target := ensure(section, keys[:len(keys)-1], g)
		*target = *list
		return fmt.Sprintf("%s.%s = %d entries %s", name, strings.TrimSuffix(l.path, "[]"), len(list.Content), describe(list))
	}
	target := ensure(section, keys, g)
	*target = *value
	return fmt.Sprintf("%s.%s = %s", name, l.path, describe(value))
}

// ensure walks keys from n, creating what is missing ("[]" is a list's
// first element, "*" a map's first value), and returns the node there.
func ensure(n *yaml.Node, keys []string, g *generator) *yaml.Node {
	for _, k := range keys {
		switch k {
		case "[]":
			if n.Kind != yaml.SequenceNode {
				*n = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			}
			if len(n.Content) == 0 {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
			}
			n = n.Content[g.rng.IntN(len(n.Content))]
		case "*":
			if n.Kind != yaml.MappingNode {
				*n = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			if len(n.Content) == 0 {
				n.Content = append(n.Content, str("generated"), &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
			}
			i := 2 * g.rng.IntN(len(n.Content)/2)
			n = n.Content[i+1]
		default:
			if n.Kind != yaml.MappingNode {
				*n = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			v := mappingValue(n, k)
			if v == nil {
				v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				n.Content = append(n.Content, str(k), v)
			}
			n = v
		}
	}
	return n
}

// value makes a value for l.
func (g *generator) value(l leaf) *yaml.Node {
	if l.text != "" {
		return str(g.text(l.text))
	}
	if values, ok := items.EnumValues(l.typ); ok {
		v := values[g.rng.IntN(len(values))]
		if g.rng.IntN(8) == 0 {
			v = strings.ToUpper(v)
		}
		return str(v)
	}
	if unit, ok := items.DurationUnit(l.typ); ok {
		return g.duration(l, unit)
	}
	switch l.typ {
	case reflect.TypeFor[items.Port]():
		return num(pickOne(g, []float64{0, 1, 80, 443, 8080, 8443, 9411, 15021, 65535, 65536}))
	case reflect.TypeFor[items.ByteSize]():
		return str(pickOne(g, []string{"0", "1", "1Ki", "512Ki", "10Mi", "1Gi", "4Gi"}))
	}
	switch l.typ.Kind() {
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(g.rng.IntN(2) == 0)}
	case reflect.String:
		return str(g.text(items.TextPlain))
	}
	if r := l.rng; r != nil {
		lo, hi := r.Min, r.Max
		if math.IsInf(hi, 1) {
			hi = lo + 1000
		}
		cands := []float64{lo, hi, lo - 1, hi + 1, lo + math.Floor(g.rng.Float64()*(hi-lo))}
		if r.OneOf != nil {
			cands = append(cands, r.OneOf[g.rng.IntN(len(r.OneOf))])
		}
		return num(pickOne(g, cands))
	}
	return num(pickOne(g, []float64{0, 1, 2, 7, 100, 4096, 65536, 1 << 31}))
}

func (g *generator) duration(l leaf, unit time.Duration) *yaml.Node {
	if r := l.rng; r != nil && r.Duration {
		lo := time.Duration(r.Min * float64(time.Second))
		c := []time.Duration{lo, lo - time.Millisecond, lo + time.Second}
		if !math.IsInf(r.Max, 1) {
			hi := time.Duration(r.Max * float64(time.Second))
			c = append(c, hi, hi+time.Second)
		}
		d := c[g.rng.IntN(len(c))]
		if d < 0 {
			d = 0
		}
		return str(d.String())
	}
	if g.rng.IntN(3) == 0 {
		return num(pickOne(g, []float64{0, 1, 5, 60, 3600}))
	}
	return str(pickOne(g, []string{"0s", "1ms", "49ms", "50ms", "250ms", "1s", "90s", "1m30s", "1h", "87600h"}))
}

// text makes a string of kind k: mostly what users write, often with
// the mistakes they make, sometimes adversarial.
func (g *generator) text(k items.TextKind) string {
	switch k {
	case items.TextFormat, items.TextHeaderValue:
		return g.format(k == items.TextHeaderValue)
	case items.TextHeaderName, items.TextHeaderRead:
		return pickOne(g, []string{"x-request-id", "x-api-key", "x-tenant", "X-Api-Key", "cf-connecting-ip", "true-client-ip",
			":authority", ":path", ":method", "host", "x-forwarded-for", "x_underscore", "bad header", "", "x-é", "content-type", "user-agent"})
	case items.TextURLPath:
		return pickOne(g, []string{"/api/v2/spans", "/v1/traces", "/", "/a b", "api/v2", "/a?b=c", "/a#x", "/a%20b", "/é", "//x"})
	case items.TextFilePath:
		return pickOne(g, []string{"/dev/stdout", "/dev/stderr", "/var/lib/istio/data/access.log", "/etc/istio/proxy/access.log",
			"/var/log/envoy/access.log", "/tmp/access.log", "access.log", "/nonexistent/dir/a.log", "/var/lib/istio/data/", "/dev/null",
			"/var/lib/istio/data/logs/access.log", "/etc/istio/proxy/" + strings.Repeat("a", 256) + ".log", "/var/lib/istio/data/" + strings.Repeat("a", 251) + ".log"})
	case items.TextPattern:
		return g.pattern()
	case items.TextServiceHost:
		return pickOne(g, []string{"zipkin.istio-system.svc.cluster.local", "zipkin", "zipkin.istio-system", "zipkin.istio-system.svc",
			"otel-collector.observability.svc.cluster.local", "collector.example.com", "Zipkin.istio-system.svc.cluster.local", "a_b.example.com"})
	case items.TextCIDR:
		return pickOne(g, []string{"10.0.0.0/8", "192.168.1.0/24", "203.0.113.7", "2001:db8::/32", "::1", "10.0.0.1/8", "0.0.0.0/0",
			"::/0", "256.1.1.1", "10.0.0.0/33", "fe80::1%eth0", "1.2.3.4/32"})
	case items.TextHostName:
		if g.rng.IntN(4) == 0 {
			return pickOne(g, []string{"API.Example.com", "api.example.com:8443", "*.example.com", "example", "-bad.example.com", "a_b.example.com", "xn--bcher-kva.example", "", "api.example.com.", strings.Repeat("a", 64) + ".example.com"})
		}
		return pickOne(g, realisticHosts)
	case items.TextMethod:
		if g.rng.IntN(4) == 0 {
			return pickOne(g, []string{"get", "Post", "BREW", "M-SEARCH", "", "GET POST", "X_CUSTOM"})
		}
		return pickOne(g, realisticMethods)
	case items.TextMediaType:
		return pickOne(g, []string{"text/html", "application/json", "text/plain; charset=utf-8", "Text/HTML", "text/*", "*/*", "application/problem+json", "bad", "text/html,text/css"})
	}
	return pickOne(g, []string{"edge", "gateway", "x", "", " ", "é", "a\tb", strings.Repeat("y", 300), "50%", "%%", "TLS_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "P-256", "X25519"})
}

// realisticHosts and realisticMethods are what users list in a match:
// ordinary host names (six of them already make a regex over Envoy's
// limit) and the methods of HTTP and WebDAV (twenty do too).
var (
	realisticHosts = []string{"api.example.com", "www.example.com", "shop.example.com", "checkout.example.com", "accounts.example.com",
		"login.example.com", "example.com", "admin.example.com", "static.example.com", "cdn.example.com", "m.example.com", "app.example.org",
		"payments.eu-west-1.example.net", "auth.internal.example.com", "grafana.ops.example.com", "status.example.io",
		"customer-portal.production.example.com", "api-v2.example.com", "search.example.com", "docs.example.com", "blog.example.com",
		"mail.example.com", "kafka-ui.platform.example.com", "s3.backup.example.com", "k8s.example.com", "sso.example.co.uk"}
	realisticMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PROPFIND", "PROPPATCH",
		"MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "PURGE", "LINK", "UNLINK", "MKCALENDAR", "ACL", "BIND", "REBIND",
		"UNBIND", "CHECKOUT", "CHECKIN", "UPDATE", "LABEL", "MERGE", "ORDERPATCH", "MKACTIVITY", "VERSION-CONTROL", "BASELINE-CONTROL"}
)

// listDocument makes item name's i-th list document: one of its seeds with each of
// its host and method lists replaced by a generated list: what users
// write in them, long ones included.
func (g *generator) listDocument(name string, i int) generated {
	g = g.stream("list", name, strconv.Itoa(i))
	s := g.pick(name)
	doc := clone(s.doc)
	gen := generated{item: name, how: []string{"seed " + name + "/" + s.file}}
	section := mappingValue(doc, name)
	for _, l := range g.leaves[name] {
		if (l.text != items.TextHostName && l.text != items.TextMethod) || !strings.HasSuffix(l.path, "[]") {
			continue
		}
		keys := items.Range{Path: l.path}.Keys()
		list := g.list(l.text)
		*ensure(section, keys[:len(keys)-1], g) = *list
		gen.how = append(gen.how, fmt.Sprintf("%s.%s = %d entries %s", name, strings.TrimSuffix(l.path, "[]"), len(list.Content), describe(list)))
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}})
	if err != nil {
		panic(err)
	}
	gen.src = out
	return gen
}

// listItems are the items with a host or method list.
func (g *generator) listItems() []string {
	var out []string
	for _, name := range g.names {
		for _, l := range g.leaves[name] {
			if l.text == items.TextHostName || l.text == items.TextMethod {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// list makes a list of kind k as users write it: mostly distinct entries,
// short or long (past what one regex holds, sometimes past the item's
// bound), now and then with a repeat or a mistake.
func (g *generator) list(k items.TextKind) *yaml.Node {
	pool := realisticHosts
	if k == items.TextMethod {
		pool = realisticMethods
	}
	n := pickOne(g, []int{1, 2, 3, 5, 6, 8, 12, 20, len(pool)})
	perm := g.rng.Perm(len(pool))
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, i := range perm[:n] {
		seq.Content = append(seq.Content, str(pool[i]))
	}
	switch g.rng.IntN(8) {
	case 0:
		seq.Content = append(seq.Content, str(seq.Content[0].Value))
	case 1:
		seq.Content = append(seq.Content, str(g.text(k)))
	case 2:
		if k == items.TextHostName {
			// Past the bound of 64 hosts.
			for i := range 70 - n {
				seq.Content = append(seq.Content, str(fmt.Sprintf("h%d.example.com", i)))
			}
		}
	}
	return seq
}

// operators are a sample of Envoy's command operators as users write them,
// with the arguments and lengths they give, right and wrong.
var operators = []string{
	"%START_TIME%", "%START_TIME(%Y-%m-%dT%H:%M:%S%z)%", "%START_TIME(%s.%3f)%", "%REQ(:METHOD)%", "%REQ(X-REQUEST-ID)%",
	"%REQ(:AUTHORITY):20%", "%REQ(X-FORWARDED-FOR?X-REAL-IP)%", "%REQ(A?B?C)%", "%RESP(CONTENT-TYPE)%", "%RESPONSE_CODE%",
	"%RESPONSE_CODE(x)%", "%RESPONSE_FLAGS%", "%DURATION%", "%DURATION:5%", "%BYTES_SENT%", "%UPSTREAM_HOST%",
	"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "%DYNAMIC_METADATA(envoy.lb:canary)%", "%DYNAMIC_METADATA(envoy.lb:canary):10%",
	"%DYNAMIC_METADATA(envoy.lb)%", "%FILTER_STATE(key)%", "%FILTER_STATE(key:PLAIN)%", "%FILTER_STATE(key:TYPED):5%",
	"%METADATA(ROUTE:ns:key)%", "%METADATA(REQUEST:ns)%", "%ENVIRONMENT(HOSTNAME)%", "%ENVIRONMENT(HOME):3%", "%GRPC_STATUS(SNAKE_STRING)%",
	"%GRPC_STATUS(PASCAL)%", "%COMMON_DURATION(DS_RX_BEG:DS_TX_END:ms)%", "%COMMON_DURATION(x:y:z)%", "%PATH%", "%PATH(WQ:ORIG)%",
	"%PATH(X)%", "%QUERY_PARAM(q)%", "%UNIQUE_ID%", "%TRACE_ID%", "%LOCAL_REPLY_BODY%", "%RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES)%",
	"%REQ_WITHOUT_QUERY(:PATH)%", "%CEL(request.path)%", "%UPSTREAM_METADATA(ns:key)%", "%CLUSTER_METADATA(ns:key)%",
	"%DOWNSTREAM_PEER_CERT_V_START(%Y)%", "%HOSTNAME%", "%UPSTREAM_PEER_CERT_V_END%", "%ROUTE_NAME%", "%START_TIME_LOCAL%",
	"%EMIT_TIME%", "%REQ()%", "%REQ(:METHOD):x%", "%resp(x)%", "%NOT_AN_OPERATOR%", "%RESPONSE_CODE:%", "%REQUEST_HEADER(x-a)%",
	"%COALESCE(x)%", "%CUSTOM_FLAGS%", "%VIRTUAL_CLUSTER_NAME%",
}

var literals = []string{"", " ", "-", "[", "]", "\"", "ok", "status=", "50%", "%", "%%", "a%20b", "100%%", "% ", "%x", "\n", "é", "{\"a\":1}", "https://x.example/a%2Fb", "%%%", "x%"}

func (g *generator) format(header bool) string {
	var b strings.Builder
	for range 1 + g.rng.IntN(4) {
		if g.rng.IntN(3) == 0 {
			b.WriteString(literals[g.rng.IntN(len(literals))])
		} else {
			b.WriteString(operators[g.rng.IntN(len(operators))])
		}
	}
	if header && g.rng.IntN(3) == 0 {
		return pickOne(g, []string{"nosniff", "SAMEORIGIN", "max-age=31536000; includeSubDomains", "true", "50%", "10% off", "%REQ(x)%", "a\r\nb"})
	}
	return b.String()
}

// pattern makes a User-Agent pattern: nginx map source values.
func (g *generator) pattern() string {
	bots := []string{"bot", "crawler", "spider", "curl", "wget", "python-requests", "Go-http-client", "sqlmap", "nikto", "masscan",
		"zgrab", "AhrefsBot", "SemrushBot", "MJ12bot", "DotBot", "PetalBot", "Bytespider", "GPTBot", "CCBot", "ClaudeBot", "Amazonbot",
		"facebookexternalhit", "Scrapy", "HeadlessChrome", "PhantomJS", "libwww-perl", "Java/", "okhttp", "axios", "node-fetch",
		"httpclient", "BLEXBot", "YandexBot", "Baiduspider", "Sogou", "Exabot", "SeznamBot", "ia_archiver", "archive.org_bot", "Nutch"}
	switch g.rng.IntN(6) {
	case 0:
		return bots[g.rng.IntN(len(bots))]
	case 1:
		return "~*" + bots[g.rng.IntN(len(bots))]
	case 2:
		n := 2 + g.rng.IntN(len(bots)-2)
		start := g.rng.IntN(len(bots) - n + 1)
		prefix := pickOne(g, []string{"~*", "~", "~*^", "~*("})
		alt := strings.Join(bots[start:start+n], "|")
		if strings.HasSuffix(prefix, "(") {
			alt += ")"
		}
		return prefix + alt
	case 3:
		return pickOne(g, []string{"~^Mozilla/5\\.0 \\(compatible; [A-Za-z]+bot", "~*\\x{4e00}", "~*\\p{Han}+", "~(?=bot)", "~*bot\\d+", "~a{1001}",
			"~*(a|b", "~*[", "~\\C", "~*\\Qa.b\\E", "~(?P<n>bot)", "~(?<n>bot)", "~*[[:alpha:]]+bot", "~*é", "~(a*)*b", "~((a{10}){10}){10}", "~.{0,100}bot"})
	case 4:
		return pickOne(g, []string{"", " ", "~", "~*", strings.Repeat("a", 1025), "Go-http-client/1.1"})
	}
	return "~*" + strings.Repeat("(?:x|y)", 1+g.rng.IntN(30))
}

func pickOne[T any](g *generator, list []T) T { return list[g.rng.IntN(len(list))] }

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func num(f float64) *yaml.Node {
	if f == math.Trunc(f) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatFloat(f, 'f', -1, 64)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f, 'f', -1, 64)}
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	out, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(out))
}

func clone(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, child := range n.Content {
		c.Content[i] = clone(child)
	}
	return &c
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// merge adds other's section of item name (and keys it lacks, such as a
// target) to doc, unless doc has that item already.
func merge(doc, other *yaml.Node, name string) bool {
	if mappingValue(doc, name) != nil {
		return false
	}
	for i := 0; i+1 < len(other.Content); i += 2 {
		k := other.Content[i].Value
		if k != document.TargetKey && mappingValue(doc, k) == nil {
			doc.Content = append(doc.Content, clone(other.Content[i]), clone(other.Content[i+1]))
		}
	}
	return true
}

// setTarget sets the document target's context.
func setTarget(doc *yaml.Node, ctx string) {
	t := mappingValue(doc, document.TargetKey)
	if t == nil {
		t = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		doc.Content = append([]*yaml.Node{str(document.TargetKey), t}, doc.Content...)
	}
	if c := mappingValue(t, "context"); c != nil {
		*c = *str(ctx)
		return
	}
	t.Content = append(t.Content, str("context"), str(ctx))
}

// TestAnItemsDocumentsAreItsOwn: registering an item changes no other
// item's generated documents, but for those it becomes the partner of. A
// shared stream would reshuffle every sample each time an item arrives,
// and a new item's author would meet refusals of other items' keys that
// a new draw happened to reach. Each item in turn plays the new one: the
// generator without it must make every other item's documents alike.
func TestAnItemsDocumentsAreItsOwn(t *testing.T) {
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	const perItem = docsPerItem
	full := newGenerator(1, seeds)
	docs := map[string]generated{}
	for _, name := range full.names {
		for i := range perItem {
			docs[fmt.Sprint(name, i)] = full.document(name, i)
			docs[fmt.Sprint("list ", name, i)] = full.listDocument(name, i)
		}
	}
	compared, partnered := 0, 0
	for _, added := range full.names {
		without := newGenerator(1, seeds)
		without.names = slices.DeleteFunc(slices.Clone(without.names), func(n string) bool { return n == added })
		for _, name := range without.names {
			for i := range perItem {
				before := without.document(name, i)
				after := docs[fmt.Sprint(name, i)]
				if slices.ContainsFunc(after.how, func(h string) bool { return strings.HasPrefix(h, "beside "+added+"/") }) {
					partnered++
					continue
				}
				compared++
				if string(before.src) != string(after.src) {
					t.Errorf("registering %s changes %s's document %d:\n  without it: %s\n  with it:    %s", added, name, i, strings.Join(before.how, "; "), strings.Join(after.how, "; "))
				}
				if l := without.listDocument(name, i); string(l.src) != string(docs[fmt.Sprint("list ", name, i)].src) {
					t.Errorf("registering %s changes %s's list document %d", added, name, i)
				}
			}
		}
	}
	t.Logf("%d items each in turn the new one: %d documents of the others unchanged, %d taken as its partner", len(full.names), compared, partnered)
	if compared == 0 || partnered == 0 {
		t.Errorf("compared %d documents, %d partnered: the test shows nothing", compared, partnered)
	}
}
