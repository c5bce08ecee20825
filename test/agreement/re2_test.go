// This file holds internal/re2 to real Envoys: for random regexes, the
// same refusal or the same RE2 program size.

package agreement

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/internal/re2"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// re2RandomRegexes is how many random regexes each Envoy judges.
const re2RandomRegexes = 480

// re2Seed fixes the random regexes, so that a failure reproduces.
const re2Seed = 20260126

// TestRE2AgreesWithEnvoy generates realistic and adversarial regexes and
// requires internal/re2 to give the verdict of every Envoy named by
// GLOBALCONFIG_ENVOY, GLOBALCONFIG_ENVOY_OLD and GLOBALCONFIG_RE2_ENVOYS
// (a path list): the same refusal text, or the same program size. Each
// Envoy is first asked which RE2 dialect it speaks; the newest must speak
// re2.EnvoyDialect, the one re2.Check uses.
func TestRE2AgreesWithEnvoy(t *testing.T) {
	newest := os.Getenv("GLOBALCONFIG_ENVOY")
	if newest == "" {
		t.Skip(toolcache.Unset("the real Envoys", "GLOBALCONFIG_ENVOY"))
	}
	bins := []string{newest}
	if old := os.Getenv("GLOBALCONFIG_ENVOY_OLD"); old != "" {
		bins = append(bins, old)
	}
	bins = append(bins, filepath.SplitList(os.Getenv("GLOBALCONFIG_RE2_ENVOYS"))...)

	seed := uint64(re2Seed)
	if s := os.Getenv("GLOBALCONFIG_RE2_SEED"); s != "" {
		// Another seed explores further; the default keeps CI repeatable.
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GLOBALCONFIG_RE2_SEED: %v", err)
		}
		seed = n
	}
	regexes := re2Generate(rand.New(rand.NewPCG(seed, seed)), re2RandomRegexes)

	type outcome struct {
		oracle   *re2Oracle
		verdicts []re2Verdict
		err      error
		took     time.Duration
	}
	outcomes := make([]outcome, len(bins))
	var wg sync.WaitGroup
	for i, bin := range bins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			o, err := re2NewOracle(bin, t.TempDir())
			if err == nil {
				outcomes[i].oracle = o
				outcomes[i].verdicts, err = o.verdicts(regexes)
			}
			outcomes[i].err, outcomes[i].took = err, time.Since(start)
		}()
	}
	wg.Wait()

	for i, out := range outcomes {
		if out.err != nil {
			t.Fatalf("%s: %v", bins[i], out.err)
		}
		o := out.oracle
		if i == 0 && o.dialect != re2.EnvoyDialect {
			t.Errorf("Envoy %s speaks %v, but re2.Check assumes %v", o.version, o.dialect, re2.EnvoyDialect)
		}
		refused, disagree := 0, 0
		for j, expr := range regexes {
			want := out.verdicts[j]
			if want.err != "" {
				refused++
			}
			got := re2Ours(expr, o.dialect)
			if got != want {
				disagree++
				if disagree <= 40 {
					t.Errorf("Envoy %s, %q: Envoy %v, re2 %v", o.version, expr, want, got)
				}
			}
		}
		t.Logf("Envoy %s (%v): %d regexes, %d refused, %d disagreements, %v",
			o.version, o.dialect, len(regexes), refused, disagree, out.took.Round(time.Millisecond))
	}
}

// TestRE2MaxProgramSizeIsEnvoysDefault loads, with Envoy's default runtime,
// a regex of size re2.MaxProgramSize (accepted) and one a size bigger
// (refused).
func TestRE2MaxProgramSizeIsEnvoysDefault(t *testing.T) {
	bin := os.Getenv("GLOBALCONFIG_ENVOY")
	if bin == "" {
		t.Skip(toolcache.Unset("the real Envoys", "GLOBALCONFIG_ENVOY"))
	}
	// A literal of n characters costs n+4 instructions in every dialect.
	fits := strings.Repeat("x", re2.MaxProgramSize-4)
	for _, expr := range []string{fits, fits + "x"} {
		size, err := re2.Check(expr)
		if err != nil {
			t.Fatal(err)
		}
		o := &re2Oracle{bin: bin, dir: t.TempDir(), defaultRuntime: true}
		_, refusal, err := o.run([]string{expr})
		if err != nil {
			t.Fatal(err)
		}
		if refused := refusal != ""; refused != (size > re2.MaxProgramSize) {
			t.Errorf("size %d: Envoy's default limit refused it: %v (%q); re2.MaxProgramSize is %d",
				size, refused, refusal, re2.MaxProgramSize)
		}
	}
}

type re2Verdict struct {
	size int
	err  string
}

func (v re2Verdict) String() string {
	if v.err != "" {
		return "refuses: " + v.err
	}
	return "size " + strconv.Itoa(v.size)
}

func re2Ours(expr string, d re2.Dialect) re2Verdict {
	n, err := re2.CheckDialect(expr, d)
	if err != nil {
		return re2Verdict{err: err.Error()}
	}
	return re2Verdict{size: n}
}

// re2Oracle runs regexes through a real Envoy in validate mode.
type re2Oracle struct {
	bin, dir, version string
	dialect           re2.Dialect
	// defaultRuntime leaves Envoy's program size limits at their defaults
	// (then sizes are not reported).
	defaultRuntime bool
}

var re2VersionRE = regexp.MustCompile(`version: [0-9a-f]+/([0-9.]+)/`)

func re2NewOracle(bin, dir string) (*re2Oracle, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	m := re2VersionRE.FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("%s --version: no version in %q", bin, out)
	}
	o := &re2Oracle{bin: bin, dir: dir, version: string(m[1])}
	// Measure the dialect: only Latin-1 refuses a code point above 0xFF.
	v, err := o.verdicts([]string{`\x{100}`})
	if err != nil {
		return nil, err
	}
	switch v[0] {
	case re2Verdict{err: `invalid escape sequence: \x{100`}:
		o.dialect = re2.Envoy139
	case re2Verdict{size: 6}:
		o.dialect = re2.Envoy136
	default:
		return nil, fmt.Errorf("Envoy %s: unexpected verdict on \\x{100}: %v", o.version, v[0])
	}
	return o, nil
}

// re2NoSizeLimit is an error level no RE2 program reaches, so that Envoy
// refuses only what RE2 itself refuses; a warn level of 0 makes it log
// every program size, in route order.
const (
	re2NoSizeLimit = 2000000
	re2Batch       = 80
)

var re2WarnRE = regexp.MustCompile(`RE2 program size of (\d+) > max program size of 0 set for the warn level threshold\. Increase configured max program size if necessary\.\n`)

// verdicts asks Envoy about every regex. Envoy stops at the first regex
// RE2 refuses, so the regexes re2 expects it to refuse run alone and the
// others in batches; the verdicts are Envoy's whatever the expectation.
func (o *re2Oracle) verdicts(regexes []string) ([]re2Verdict, error) {
	var alone, batched []int
	for i, expr := range regexes {
		if o.dialect != 0 && re2Ours(expr, o.dialect).err != "" {
			alone = append(alone, i)
		} else {
			batched = append(batched, i)
		}
	}
	out := make([]re2Verdict, len(regexes))
	for _, part := range []struct {
		idx   []int
		limit int
	}{{batched, re2Batch}, {alone, 1}} {
		group := make([]string, len(part.idx))
		for k, i := range part.idx {
			group[k] = regexes[i]
		}
		v, err := o.batches(group, part.limit)
		if err != nil {
			return nil, err
		}
		for k, i := range part.idx {
			out[i] = v[k]
		}
	}
	return out, nil
}

// batches puts up to limit regexes into one bootstrap, one route each;
// Envoy stops at the first regex RE2 refuses, which is recorded and
// skipped before the rest are run again.
func (o *re2Oracle) batches(regexes []string, limit int) ([]re2Verdict, error) {
	out := make([]re2Verdict, len(regexes))
	for i := 0; i < len(regexes); {
		j := min(i+limit, len(regexes))
		sizes, refusal, err := o.run(regexes[i:j])
		if err != nil {
			return nil, err
		}
		for k, n := range sizes {
			out[i+k] = re2Verdict{size: n}
		}
		i += len(sizes)
		if refusal != "" {
			out[i] = re2Verdict{err: refusal}
			i++
		} else if i != j {
			return nil, fmt.Errorf("Envoy %s: %d program sizes for %d regexes", o.version, len(sizes), j-i+len(sizes))
		}
	}
	return out, nil
}

func (o *re2Oracle) run(regexes []string) (sizes []int, refusal string, err error) {
	routes := make([]any, len(regexes))
	for i, re := range regexes {
		routes[i] = map[string]any{
			"match":           map[string]any{"safe_regex": map[string]any{"regex": re}},
			"direct_response": map[string]any{"status": 200},
		}
	}
	hcm := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "re2",
		"http_filters": []any{map[string]any{
			"name":         "envoy.filters.http.router",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
		}},
		"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
			"name": "re2", "domains": []any{"*"}, "routes": routes,
		}}},
	}
	boot := map[string]any{
		"static_resources": map[string]any{"listeners": []any{map[string]any{
			"name":    "re2",
			"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 10000}},
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
				"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm,
			}}}},
		}}},
	}
	if !o.defaultRuntime {
		boot["layered_runtime"] = map[string]any{"layers": []any{map[string]any{
			"name": "re2",
			"static_layer": map[string]any{
				"re2.max_program_size.error_level": re2NoSizeLimit,
				"re2.max_program_size.warn_level":  0,
			},
		}}}
	}
	data, err := json.Marshal(boot)
	if err != nil {
		return nil, "", err
	}
	f, err := os.CreateTemp(o.dir, "re2-*.json")
	if err != nil {
		return nil, "", err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.bin, "--mode", "validate", "-c", f.Name(),
		"--log-level", "warn", "--log-format", "%v", "--disable-hot-restart")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	runErr := cmd.Run()
	logs := output.String()
	for _, m := range re2WarnRE.FindAllStringSubmatch(logs, -1) {
		n, _ := strconv.Atoi(m[1])
		sizes = append(sizes, n)
	}
	if runErr == nil {
		return sizes, "", nil
	}
	marker := "error initializing configuration '" + f.Name() + "': "
	k := strings.LastIndex(logs, marker)
	if k < 0 || len(sizes) >= len(regexes) {
		return nil, "", fmt.Errorf("Envoy %s: %v: %s", o.version, runErr, logs)
	}
	return sizes, strings.TrimSuffix(logs[k+len(marker):], "\n"), nil
}

// re2Generate makes n regexes of the kinds users write (bot lists, paths,
// user agents, header values) and adversarial ones, some mutated into
// likely syntax errors. None is empty: Envoy refuses that before RE2.
func re2Generate(r *rand.Rand, n int) []string {
	g := &re2Gen{r: r}
	kinds := []func() string{g.botList, g.path, g.userAgent, g.headerValue, g.adversarial, g.adversarial, g.adversarial}
	var out []string
	for len(out) < n {
		expr := kinds[r.IntN(len(kinds))]()
		if r.IntN(8) == 0 {
			expr = g.mutate(expr)
		}
		if expr != "" {
			out = append(out, expr)
		}
	}
	return out
}

type re2Gen struct{ r *rand.Rand }

func (g *re2Gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }
func (g *re2Gen) chance(n int) bool       { return g.r.IntN(n) == 0 }

var re2Bots = []string{
	"googlebot", "bingbot", "slurp", "duckduckbot", "baiduspider", "yandexbot", "sogou", "exabot",
	"facebookexternalhit", "ia_archiver", "ahrefsbot", "semrushbot", "mj12bot", "dotbot", "petalbot",
	"bytespider", "gptbot", "ccbot", "claudebot", "amazonbot", "applebot", "seznambot", "blexbot",
	"dataforseobot", "serpstatbot", "barkrowler", "python-requests", "curl", "wget", "scrapy",
	"go-http-client", "okhttp", "libwww-perl", "headlesschrome", "phantomjs", "bötbot", "яндекс",
	"百度", "crawler", "spider", "bot",
}

func (g *re2Gen) names(k int) []string {
	var out []string
	for i := 0; i < k; i++ {
		name := re2Bots[g.r.IntN(len(re2Bots))]
		if g.chance(6) {
			name = regexp.QuoteMeta(name) + g.pick(`\d*`, `[-_ ]?\d+`, `/[0-9.]+`, `.*`)
		} else {
			name = regexp.QuoteMeta(name)
		}
		out = append(out, name)
	}
	return out
}

func (g *re2Gen) botList() string {
	alts := strings.Join(g.names(1+g.r.IntN(30)), "|")
	return g.pick("(?i)(", "(?i).*(", "(?i)^.*(?:", "(?i)\\b(?:", "(", "^(?:", ".*(?:") + alts +
		g.pick(")", ").*", ")$", ")\\b", ")(?:/|$)")
}

func (g *re2Gen) pathSegment() string {
	switch g.r.IntN(9) {
	case 0:
		return `[^/]+`
	case 1:
		return `\d+`
	case 2:
		return `[a-z0-9-]{1,63}`
	case 3:
		return "(?:v1|v2|v3)"
	case 4:
		return `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	case 5:
		return g.pick("api", "users", "orders", "static", "assets", "wp-admin", "health", "café", "用户")
	case 6:
		return `[\w.-]+\.(?:js|css|png|jpe?g|gif|svg|woff2?)`
	case 7:
		return `.*`
	}
	return g.pick("items", "v1", "graphql", "metrics", "login") + g.pick("", `/?`, `(?:/.*)?`)
}

func (g *re2Gen) path() string {
	var b strings.Builder
	if !g.chance(4) {
		b.WriteString("^")
	}
	for i := 1 + g.r.IntN(5); i > 0; i-- {
		b.WriteString("/" + g.pathSegment())
	}
	b.WriteString(g.pick("", "$", "/?$", `(?:\?.*)?$`))
	return b.String()
}

func (g *re2Gen) userAgent() string {
	return g.pick(
		`^Mozilla/5\.0 \(`+g.pick("Windows NT 10\\.0", "Macintosh", "X11; Linux x86_64", "iPhone.*")+`.*\) AppleWebKit/[0-9.]+`,
		`(?i)(?:`+strings.Join(g.names(2+g.r.IntN(4)), "|")+`)/\d+(?:\.\d+)*`,
		`(?i)^(?:curl|wget|httpie)/[0-9.]+$`,
		`Chrome/1[0-2]\d\.\d+\.\d+\.\d+`,
		`(?i)mobile|android|iphone|ipad`,
		`^(?:`+strings.Join(g.names(1+g.r.IntN(3)), "|")+`)$`,
		`.*(?i:headless).*`,
		`^[^()]*\([^)]*\b`+g.pick("Android", "iOS", "Windows")+`\b[^)]*\).*$`,
	)
}

func (g *re2Gen) headerValue() string {
	return g.pick(
		`^(?:gzip|br|deflate|zstd)(?:,\s*(?:gzip|br|deflate|zstd))*$`,
		`^[A-Za-z0-9+/]+={0,2}$`,
		`^Bearer [A-Za-z0-9._~+/-]+=*$`,
		`^text/html(?:;\s*charset=(?i:utf-8))?$`,
		`^application/(?:json|grpc|x-www-form-urlencoded)(?:\+proto)?`,
		`^[0-9]{1,3}(?:\.[0-9]{1,3}){3}$`,
		`^(?:\d{1,3}\.){3}\d{1,3}(?:,\s*(?:\d{1,3}\.){3}\d{1,3})*$`,
		`^[a-f0-9]{32}$`,
		`(?i)^(?:no-cache|no-store|max-age=\d+)$`,
		`^`+g.pick("de", "fr", "en", "zh")+`(?:-[A-Z]{2})?(?:,.*)?$`,
		`^(?:[a-z0-9-]+\.)+`+g.pick("example\\.com", "local", "svc\\.cluster\\.local")+`$`,
		`[^\x00-\x7f]`,
		`^[\x20-\x7e]*$`,
		`(?s)^.{0,`+strconv.Itoa(g.r.IntN(200))+`}$`,
	)
}

// re2Atoms are pieces adversarial regexes are built from: every escape
// and construct where Go's regexp, RE2 in UTF-8 and RE2 in Latin-1 may
// differ.
var re2Atoms = []string{
	"a", "b", "x", "abc", "foo", "é", "ü", "中", "😀", "ÿ", "Ä", "ß", "ſ", "K", "k", "S", "µ", "σ",
	`\x41`, `\x{41}`, `\xe9`, `\x{ff}`, `\x{100}`, `\x{4e00}`, `\x{10ffff}`, `\x{d800}`, `\0`, `\101`, `\377`,
	`\.`, `\*`, `\\`, `\-`, `\_`, `\/`, `\n`, `\t`, `\v`, `\f`, `\a`,
	`.`, `\C`, `\d`, `\D`, `\s`, `\S`, `\w`, `\W`, `\b`, `\B`, `\A`, `\z`, `^`, `$`,
	`\pL`, `\pN`, `\p{Greek}`, `\p{Han}`, `\p{Lu}`, `\P{L}`, `\p{^Latin}`, `\p{Any}`, `\PN`, `\p{Zs}`,
	`[a-z]`, `[^a-z]`, `[é]`, `[^é]`, `[à-ÿ]`, `[\d\s]`, `[[:alpha:]]`, `[[:^space:]]`, `[\p{L}\d]`,
	`[a-é]`, `[\x00-\x{ff}]`, `[^\n]`, `[-.]`, `[]a]`, `[^]]`, `[\x{100}-\x{200}]`, `[k]`, `[Kk]`,
	`\Qa.b*\E`, `\Q(é)\E`,
}

// re2Bad are tokens that are (or may be) syntax errors somewhere.
var re2Bad = []string{
	`\8`, `\1`, `\777`, `\400`, `\Z`, `\G`, `\é`, `\x{}`, `\x{110000}`, `\xZZ`, `[z-a]`, `[[:foo:]]`,
	`\p{Foo}`, `(?P<n>`, `(?<n>`, `(?P=n)`, `(?<=a)`, `(?=a)`, `(?!a)`, `(?#c)`, `(?x)`, `(?i-)`,
	`{1001}`, `**`, `*`, `+?+`, `(`, `)`, `[`, `]`, `\`, `a{2}{3}`, `(?P<é>x)`, `(?P<ê>x)`, `(?P<>x)`,
	`\Q`, `\E`, `\p`, `\pé`, `[\p]`, `(?`, `\cA`, `\N{x}`,
}

func (g *re2Gen) adversarial() string {
	e := g.expr(3)
	if g.chance(3) {
		e = g.pick("(?i)", "(?s)", "(?m)", "(?U)", "(?is)", "(?i-s)", "^", "") + e
	}
	return e
}

func (g *re2Gen) expr(depth int) string {
	if depth == 0 {
		return g.atom()
	}
	switch g.r.IntN(7) {
	case 0:
		var alts []string
		for i := 2 + g.r.IntN(4); i > 0; i-- {
			alts = append(alts, g.expr(depth-1))
		}
		return strings.Join(alts, "|")
	case 1, 2:
		var b strings.Builder
		for i := 1 + g.r.IntN(4); i > 0; i-- {
			b.WriteString(g.expr(depth - 1))
		}
		return b.String()
	case 3:
		return g.pick("(", "(?:", "(?i:", "(?-i:", "(?s:", "(?U:", "(?P<g"+strconv.Itoa(g.r.IntN(9))+">", "(?<n>") +
			g.expr(depth-1) + ")"
	case 4:
		return g.group(g.expr(depth-1)) + g.repeat()
	}
	return g.atom() + g.repeat()
}

func (g *re2Gen) group(e string) string {
	if strings.ContainsAny(e, "|") || len(e) > 1 {
		return "(?:" + e + ")"
	}
	return e
}

func (g *re2Gen) atom() string {
	a := re2Atoms[g.r.IntN(len(re2Atoms))]
	if g.chance(25) {
		a = re2Bad[g.r.IntN(len(re2Bad))]
	}
	return a
}

func (g *re2Gen) repeat() string {
	lazy := ""
	if g.chance(4) {
		lazy = "?"
	}
	switch g.r.IntN(10) {
	case 0, 1:
		return "*" + lazy
	case 2, 3:
		return "+" + lazy
	case 4:
		return "?" + lazy
	case 5:
		return "{" + strconv.Itoa(g.r.IntN(12)) + "}" + lazy
	case 6:
		lo := g.r.IntN(6)
		return "{" + strconv.Itoa(lo) + "," + strconv.Itoa(lo+g.r.IntN(8)) + "}" + lazy
	case 7:
		return "{" + strconv.Itoa(g.r.IntN(5)) + ",}" + lazy
	}
	return ""
}

// mutate inserts, deletes or duplicates a piece, to reach error paths.
func (g *re2Gen) mutate(e string) string {
	rs := []rune(e)
	if len(rs) == 0 {
		return e
	}
	i := g.r.IntN(len(rs))
	switch g.r.IntN(3) {
	case 0:
		return string(rs[:i]) + re2Bad[g.r.IntN(len(re2Bad))] + string(rs[i:])
	case 1:
		return string(rs[:i]) + string(rs[i+1:])
	}
	return string(rs[:i]) + string(rs[i]) + string(rs[i:])
}
