package agreement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// TestFormatAgreesWithEnvoy holds items/internal/format, the one Envoy
// format-string parser, to real Envoys: a few hundred random but
// realistic format strings (access log lines, header values with %,
// percent-encoded URLs, operator typos, lengths, arguments of every
// grammar, CEL, COALESCE, the header values' legacy forms), each put in
// every place globalconfig emits format strings, each loaded by every
// Envoy of `make test`; any string the package and an Envoy judge
// differently fails the test, but for the package's deliberate refusals.
//
// Envoy loads the strings as listeners from a file LDS, one listener per
// string (bind_to_port false), and accepts or rejects each on its own:
// one Envoy process per release and place; a few strings also go through
// validate mode, to prove the two agree. test/agreement can't import the
// internal package, so the package's verdicts come from its own test
// binary (TestFormatVerdicts in items/internal/format).
//
// GLOBALCONFIG_FORMAT_STRINGS and GLOBALCONFIG_FORMAT_SEED change the
// number of strings and the seed, to search further by hand.
func TestFormatAgreesWithEnvoy(t *testing.T) {
	bins := formatEnvoys(t)
	n := formatEnvInt(t, "GLOBALCONFIG_FORMAT_STRINGS", formatStrings)
	seed := uint64(formatEnvInt(t, "GLOBALCONFIG_FORMAT_SEED", formatSeed))
	strs := formatGenerate(seed, n)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	verdicts, err := formatPackageVerdicts(ctx, t.TempDir(), strs)
	if err != nil {
		t.Fatal(err)
	}

	type job struct {
		bin   *envoybin.Binary
		place formatPlace
	}
	type result struct {
		job
		got []formatOutcome
		err error
	}
	jobs := make(chan job)
	results := make(chan result)
	var wg sync.WaitGroup
	for range formatWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				got, err := formatLoad(ctx, t.TempDir(), j.bin, j.place, strs)
				results <- result{j, got, err}
			}
		}()
	}
	go func() {
		for _, b := range bins {
			for _, p := range formatPlaces {
				jobs <- job{b, p}
			}
		}
		close(jobs)
		wg.Wait()
		close(results)
	}()

	var disagreements []string
	deliberate, checked := 0, 0
	firstPlace := map[*envoybin.Binary][]formatOutcome{}
	for r := range results {
		if r.err != nil {
			t.Errorf("Envoy %s, %s: %v", r.bin.Version, r.place.name, r.err)
			continue
		}
		if r.place.name == formatPlaces[0].name {
			firstPlace[r.bin] = r.got
		}
		v, err := envoyfilter.ParseVersion(r.bin.Version)
		if err != nil {
			t.Fatal(err)
		}
		accepted, refused := 0, 0
		for i, s := range strs {
			ours := verdicts[i].Text
			if r.place.header {
				ours = verdicts[i].Header
			}
			envoy := r.got[i]
			if envoy.accepted {
				accepted++
			} else {
				refused++
			}
			if ours.Deliberate {
				deliberate++
				continue
			}
			checked++
			if ours.acceptedBy(v) != envoy.accepted {
				disagreements = append(disagreements, fmt.Sprintf("Envoy %s, %s: %q\n    Envoy: %s\n    package: refused=%v needs=%s %q",
					r.bin.Version, r.place.name, s, envoy.String(), ours.Refused, ours.Needs, ours.Problems))
			}
		}
		// A harness that loads nothing, or everything, proves nothing.
		if accepted == 0 || refused == 0 {
			t.Errorf("Envoy %s, %s: %d accepted, %d refused: the harness is broken", r.bin.Version, r.place.name, accepted, refused)
		}
	}
	// The file LDS is a means: a few strings go through Envoy's validate
	// mode too (what `validate --envoy` runs), which must agree with it.
	for bin, got := range firstPlace {
		if err := formatCrossCheck(ctx, bin, strs, got); err != nil {
			t.Errorf("Envoy %s: %v", bin.Version, err)
		}
	}
	t.Logf("%d strings × %d places × %d Envoys: %d judgements compared, %d deliberate refusals skipped", len(strs), len(formatPlaces), len(bins), checked, deliberate)
	if len(disagreements) > 0 {
		shown := disagreements
		if len(shown) > 30 {
			shown = shown[:30]
		}
		t.Errorf("%d disagreements with Envoy (first %d):\n%s", len(disagreements), len(shown), strings.Join(shown, "\n"))
	}
}

const (
	// formatStrings is how many strings a run generates: enough to reach
	// every operator and grammar a few times, small enough to stay under
	// a few seconds per Envoy.
	formatStrings = 360
	// formatSeed fixes the strings, so a failure reproduces.
	formatSeed = 20261126
	// formatWorkers bounds the Envoys running at once (2 cores shared).
	formatWorkers = 2
)

// formatEnvoys are the real Envoys of `make test`, or a skip.
func formatEnvoys(t *testing.T) []*envoybin.Binary {
	t.Helper()
	var out []*envoybin.Binary
	for _, env := range []string{"GLOBALCONFIG_ENVOY", "GLOBALCONFIG_ENVOY_OLD"} {
		path := os.Getenv(env)
		if path == "" {
			if env == "GLOBALCONFIG_ENVOY" {
				t.Skip(toolcache.Unset("the real Envoys", env))
			}
			continue
		}
		b, err := envoybin.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		out = append(out, b)
	}
	return out
}

func formatEnvInt(t *testing.T, env string, def int) int {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", env, s)
	}
	return n
}

// formatVerdict is the package's judgement of one string in one place.
type formatVerdict struct {
	Refused    bool     `json:"refused"`
	Deliberate bool     `json:"deliberate"`
	Needs      string   `json:"needs"`
	Problems   []string `json:"problems"`
}

func (v formatVerdict) acceptedBy(envoy envoyfilter.Version) bool {
	if v.Refused {
		return false
	}
	needs, err := envoyfilter.ParseVersion(v.Needs)
	return err != nil || envoy.AtLeast(needs)
}

// formatPackageVerdicts is what internal/envoyformat makes of each string
// as a format string and as a header value.
func formatPackageVerdicts(_ context.Context, _ string, strs []string) ([]struct{ Text, Header formatVerdict }, error) {
	verdicts := make([]struct{ Text, Header formatVerdict }, len(strs))
	for i, s := range strs {
		for _, c := range []struct {
			place envoyformat.Place
			out   *formatVerdict
		}{{envoyformat.Text, &verdicts[i].Text}, {envoyformat.Header, &verdicts[i].Header}} {
			a := envoyformat.Analyze(s, c.place)
			v := formatVerdict{Refused: a.Refused(), Needs: a.Needs().String()}
			for _, p := range a.Problems {
				v.Deliberate = v.Deliberate || p.Deliberate
				v.Problems = append(v.Problems, p.Message)
			}
			*c.out = v
		}
	}
	return verdicts, nil
}

// formatPlace is one place globalconfig emits format strings to: it puts
// s into an HTTP connection manager (its typed config, as JSON).
type formatPlace struct {
	name   string
	header bool
	put    func(hcm map[string]any, s string)
}

func formatRouteConfig(hcm map[string]any) map[string]any {
	return hcm["route_config"].(map[string]any)
}

func formatVirtualHost(hcm map[string]any) map[string]any {
	return formatRouteConfig(hcm)["virtual_hosts"].([]any)[0].(map[string]any)
}

func formatHeaders(s string) []any {
	return []any{map[string]any{"header": map[string]any{"key": "x-format", "value": s}}}
}

func formatFileLog(logFormat map[string]any) []any {
	return []any{map[string]any{
		"name": "envoy.access_loggers.file",
		"typed_config": map[string]any{
			"@type":      "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
			"path":       "/dev/null",
			"log_format": logFormat,
		},
	}}
}

var formatPlaces = []formatPlace{
	{"access log text_format_source", false, func(h map[string]any, s string) {
		h["access_log"] = formatFileLog(map[string]any{"text_format_source": map[string]any{"inline_string": s}})
	}},
	{"access log json_format value", false, func(h map[string]any, s string) {
		h["access_log"] = formatFileLog(map[string]any{"json_format": map[string]any{"message": s}})
	}},
	{"local reply body_format", false, func(h map[string]any, s string) {
		h["local_reply_config"] = map[string]any{"body_format": map[string]any{"text_format_source": map[string]any{"inline_string": s}}}
	}},
	{"virtual host request_headers_to_add", true, func(h map[string]any, s string) {
		formatVirtualHost(h)["request_headers_to_add"] = formatHeaders(s)
	}},
	{"route configuration response_headers_to_add", true, func(h map[string]any, s string) {
		formatRouteConfig(h)["response_headers_to_add"] = formatHeaders(s)
	}},
	{"local reply mapper headers_to_add", true, func(h map[string]any, s string) {
		h["local_reply_config"] = map[string]any{"mappers": []any{map[string]any{
			"filter":         map[string]any{"status_code_filter": map[string]any{"comparison": map[string]any{"op": "GE", "value": map[string]any{"default_value": 400, "runtime_key": "k"}}}},
			"headers_to_add": formatHeaders(s),
		}}}
	}},
	{"local rate limit response_headers_to_add", true, func(h map[string]any, s string) {
		filters := h["http_filters"].([]any)
		h["http_filters"] = append([]any{map[string]any{
			"name": "envoy.filters.http.local_ratelimit",
			"typed_config": map[string]any{
				"@type":                   "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
				"stat_prefix":             "rl",
				"token_bucket":            map[string]any{"max_tokens": 10, "tokens_per_fill": 10, "fill_interval": "1s"},
				"filter_enabled":          map[string]any{"default_value": map[string]any{"numerator": 100}, "runtime_key": "e"},
				"filter_enforced":         map[string]any{"default_value": map[string]any{"numerator": 100}, "runtime_key": "f"},
				"response_headers_to_add": formatHeaders(s),
			},
		}}, filters...)
	}},
}

// formatListener is listener i, carrying s in place p.
func formatListener(i int, p formatPlace, s string) map[string]any {
	hcm := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "f",
		"route_config": map[string]any{"name": "r", "virtual_hosts": []any{map[string]any{
			"name": "v", "domains": []any{"*"},
			"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"}, "direct_response": map[string]any{"status": 200}}},
		}}},
		"http_filters": []any{map[string]any{"name": "envoy.filters.http.router",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
	}
	p.put(hcm, s)
	return map[string]any{
		"@type":        "type.googleapis.com/envoy.config.listener.v3.Listener",
		"name":         fmt.Sprintf("f%d", i),
		"address":      map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 20000 + i}},
		"bind_to_port": false,
		"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
			"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm,
		}}}},
	}
}

// formatOutcome is what Envoy did with one listener.
type formatOutcome struct {
	accepted bool
	reason   string
}

func (o formatOutcome) String() string {
	if o.accepted {
		return "accepted"
	}
	return "refused: " + o.reason
}

// formatRejected is Envoy's log line for a listener it rejects (1.37 and
// newer), and the list of "name: reason" lines older releases log.
var (
	formatRejected     = regexp.MustCompile(`lds: listener 'f(\d+)' config rejected: (.*)`)
	formatRejectedList = regexp.MustCompile(`(?m)^(?:.*Error adding/updating listener\(s\) )?f(\d+): (.*)$`)
)

var (
	formatApplied = regexp.MustCompile(`lds\.update_(success|rejected): [1-9]`)
	formatWarmed  = regexp.MustCompile(`total_listeners_warming: 0\b`)
)

// formatLoad runs bin with one listener per string, carrying it in place
// p, from a file LDS, and reports which listeners Envoy took.
func formatLoad(ctx context.Context, dir string, bin *envoybin.Binary, p formatPlace, strs []string) ([]formatOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resources := make([]any, len(strs))
	for i, s := range strs {
		resources[i] = formatListener(i, p, s)
	}
	lds, err := json.Marshal(map[string]any{"version_info": "1", "resources": resources})
	if err != nil {
		return nil, err
	}
	ldsPath, bootPath, adminPath, logPath := filepath.Join(dir, "lds.json"), filepath.Join(dir, "bootstrap.json"),
		filepath.Join(dir, "admin"), filepath.Join(dir, "envoy.log")
	boot, err := json.Marshal(map[string]any{
		"node":  map[string]any{"id": "format", "cluster": "format"},
		"admin": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}},
		"dynamic_resources": map[string]any{"lds_config": map[string]any{
			"resource_api_version": "V3", "path_config_source": map[string]any{"path": ldsPath},
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(ldsPath, lds, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(bootPath, boot, 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, bin.Path, "-c", bootPath, "--admin-address-path", adminPath,
		"--disable-hot-restart", "--concurrency", "1", "--log-level", "warning")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	names, err := formatAcceptedListeners(ctx, adminPath, exited)
	if err != nil {
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\n%s", err, formatTail(log))
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	reasons := map[int]string{}
	for _, re := range []*regexp.Regexp{formatRejected, formatRejectedList} {
		for _, m := range re.FindAllStringSubmatch(string(log), -1) {
			if i, err := strconv.Atoi(m[1]); err == nil && reasons[i] == "" {
				reasons[i] = m[2]
			}
		}
	}
	out := make([]formatOutcome, len(strs))
	for i := range strs {
		out[i] = formatOutcome{accepted: names[fmt.Sprintf("f%d", i)], reason: reasons[i]}
	}
	return out, nil
}

// formatCrossCheck loads a few strings Envoy accepted and a few it
// refused from the file LDS as a static listener in validate mode, and
// reports a string the two ways judge differently.
func formatCrossCheck(ctx context.Context, bin *envoybin.Binary, strs []string, got []formatOutcome) error {
	var picked []int
	accepted, refused := 0, 0
	for i, o := range got {
		if o.accepted && accepted < 3 {
			accepted++
			picked = append(picked, i)
		} else if !o.accepted && refused < 3 {
			refused++
			picked = append(picked, i)
		}
	}
	for _, i := range picked {
		l := formatListener(i, formatPlaces[0], strs[i])
		delete(l, "@type")
		boot, err := json.Marshal(map[string]any{"static_resources": map[string]any{"listeners": []any{l}}})
		if err != nil {
			return err
		}
		err = bin.Validate(ctx, boot)
		var rejected *envoybin.Rejected
		switch {
		case err != nil && !errors.As(err, &rejected):
			return err
		case (err == nil) != got[i].accepted:
			return fmt.Errorf("%q: the file LDS says %s, validate mode says %v", strs[i], got[i], err)
		}
	}
	return nil
}

// formatAcceptedListeners waits until Envoy has applied its LDS file and
// returns the names of the listeners it took.
func formatAcceptedListeners(ctx context.Context, adminPath string, exited <-chan error) (map[string]bool, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(addr, path string) ([]byte, error) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	var addr string
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("envoy exited: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if addr == "" {
			b, _ := os.ReadFile(adminPath)
			addr = strings.TrimSpace(string(b))
			continue
		}
		// Applied, and no listener still warming (/listeners shows the
		// active ones).
		stats, err := get(addr, "/stats?filter=listener_manager.(lds.update_(success|rejected)|total_listeners_warming)")
		if err != nil || !formatApplied.Match(stats) || !formatWarmed.Match(stats) {
			continue
		}
		body, err := get(addr, "/listeners?format=json")
		if err != nil {
			return nil, err
		}
		var ls struct {
			ListenerStatuses []struct {
				Name string `json:"name"`
			} `json:"listener_statuses"`
		}
		if err := json.Unmarshal(body, &ls); err != nil {
			return nil, fmt.Errorf("admin /listeners: %w", err)
		}
		names := map[string]bool{}
		for _, l := range ls.ListenerStatuses {
			names[l.Name] = true
		}
		return names, nil
	}
}

func formatTail(log []byte) string {
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return string(log)
}

// formatGen writes realistic format strings, good and bad.
type formatGen struct{ r *rand.Rand }

func formatGenerate(seed uint64, n int) []string {
	g := formatGen{rand.New(rand.NewPCG(seed, seed^0x5eed))}
	out := make([]string, n)
	for i := range out {
		out[i] = g.format()
	}
	return out
}

func (g *formatGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *formatGen) chance(p float64) bool    { return g.r.Float64() < p }

func (g *formatGen) format() string {
	if g.chance(0.08) {
		// A well-known whole line.
		return g.pick(
			`[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`+"\n",
			`{"status": %RESPONSE_CODE%, "path": "%REQ(:PATH)%", "ms": %DURATION%}`,
			"<html><body><h1>%RESPONSE_CODE%</h1><p>%LOCAL_REPLY_BODY%</p></body></html>",
			"upstream=%UPSTREAM_CLUSTER% host=%UPSTREAM_HOST% rt=%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%ms",
			"https://auth.example.com/login?next=%REQ(:path)%&reason=expired%20session",
			"%DYNAMIC_METADATA(istio.mixer:status)% %FILTER_STATE(envoy.network.upstream_server_name:PLAIN)%",
		)
	}
	var b strings.Builder
	for range 1 + g.r.IntN(5) {
		switch x := g.r.Float64(); {
		case x < 0.32:
			b.WriteString(g.literal())
		case x < 0.82:
			b.WriteString(g.operator())
		case x < 0.9:
			b.WriteString(g.percent())
		default:
			b.WriteString(g.typo())
		}
	}
	return b.String()
}

func (g *formatGen) literal() string {
	return g.pick(" ", " ", "-", "\"", "[", "]", " | ", "status=", "rt=", "ms", "ok", "upstream ", ": ", "{\"a\":", "}",
		"é", "中文", "😀", "\t", "\n", "'", "\\", ",", "(", ")", "?", "a=b&c=d", "GET /api/v1", "%%", "100%%", "%%%%")
}

// percent is a percent sign people write meaning a literal one.
func (g *formatGen) percent() string {
	return g.pick("50% off", "100%", "%", "a%20b", "https://x/a%20b", "https://x/a%2Fb%2Fc", "%2F%", "%20%", "% ", "%z",
		"%%%", "discount: 15%.", "%é", "%)", "x%y%", "%1%", "%_%")
}

// typo is an operator written wrong.
func (g *formatGen) typo() string {
	return g.pick("%response_code%", "%Response_Code%", "%RESPONSE_COD%", "%RESPONSECODE%", "%REQUEST_METHOD%",
		"%REQ(:path)", "%REQ(:path%", "%REQ:path%", "%REQ(x-a)x%", "%UPSTREAM_HOST %", "% DURATION%", "%START_TIME(%)%)%",
		"%REQ_WITHOUT_QUERY(:path)%", "%PER_REQUEST_STATE(k)%", "%PER_REQUEST_STATE(a:b)%", "%PER_REQUEST_STATE()%",
		`%UPSTREAM_METADATA(["ns","key"])%`, `%UPSTREAM_METADATA([""])%`, `%DYNAMIC_METADATA(["a", "b"])%`, `%DYNAMIC_METADATA([x])%`,
		`%UPSTREAM_METADATA(["a",1])%`, "%CUSTOM_TAG%", "%ENV(HOME)%", "%HOSTNAME()%", "%UNIQUE_ID:8%", "%NOT_AN_OPERATOR%")
}

// formatBare are operators that take neither argument nor length (some only in newer
// Envoys).
var formatBare = []string{"RESPONSE_CODE", "PROTOCOL", "DURATION", "BYTES_SENT", "BYTES_RECEIVED", "RESPONSE_FLAGS",
	"RESPONSE_FLAGS_LONG", "UPSTREAM_HOST", "UPSTREAM_CLUSTER", "UPSTREAM_LOCAL_ADDRESS", "DOWNSTREAM_REMOTE_ADDRESS",
	"DOWNSTREAM_LOCAL_ADDRESS", "ROUTE_NAME", "REQUESTED_SERVER_NAME", "UPSTREAM_TRANSPORT_FAILURE_REASON",
	"CONNECTION_TERMINATION_DETAILS", "LOCAL_REPLY_BODY", "TRACE_ID", "UNIQUE_ID", "STREAM_ID", "HOSTNAME",
	"REQUEST_DURATION", "RESPONSE_DURATION", "RESPONSE_TX_DURATION", "UPSTREAM_REQUEST_ATTEMPT_COUNT",
	"DOWNSTREAM_TLS_VERSION", "DOWNSTREAM_PEER_SUBJECT", "GRPC_STATUS_NUMBER", "ACCESS_LOG_TYPE", "VIRTUAL_CLUSTER_NAME",
	"CUSTOM_FLAGS", "TLS_JA4_FINGERPRINT", "UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED", "DOWNSTREAM_LOCAL_ADDRESS_ENDPOINT_ID",
	"SPAN_ID", "UPSTREAM_HOSTS_ATTEMPTED", "DOWNSTREAM_DETECTED_CLOSE_TYPE", "UPSTREAM_LOCAL_CLOSE_REASON",
	"UPSTREAM_TLS_GROUP", "UPSTREAM_SERVER_NAME", "LISTENER_NAME", "DOWNSTREAM_CX_RTT", "ROUTE_RESOLUTION_COUNT"}

func (g *formatGen) length() string {
	if !g.chance(0.25) {
		return ""
	}
	return g.pick(":5", ":0", ":64", ":18446744073709551615", ":18446744073709551616", ":", ":x", ":-1", ":007")
}

func (g *formatGen) operator() string {
	name, arg := "", ""
	switch x := g.r.IntN(20); {
	case x < 5:
		name = g.pick(formatBare...)
		if g.chance(0.15) {
			arg = g.pick("x", "", "ALLOW_WHITESPACES")
		}
	case x < 8:
		name = g.pick("REQ", "REQ", "RESP", "TRAILER", "REQUEST_HEADER", "RESPONSE_HEADER", "STREAM_INFO_REQ")
		arg = g.header()
		if g.chance(0.4) {
			arg += "?" + g.header()
		}
		if g.chance(0.05) {
			arg += "?" + g.header()
		}
	case x == 8:
		name = g.pick("START_TIME", "START_TIME_LOCAL", "EMIT_TIME", "DOWNSTREAM_PEER_CERT_V_END")
		arg = g.pick("", "%Y-%m-%dT%H:%M:%S%z", "%s.%3f", "%s", "%9f", "%Y%n", "%%n", "%10n", "%E", "é %d", "%H)x")
	case x == 9:
		name = g.pick("DYNAMIC_METADATA", "CLUSTER_METADATA", "UPSTREAM_METADATA")
		arg = g.pick("istio.mixer:status", "envoy.lb", "ns:key:sub", ":key", "", "a b", `["ns","key"]`)
	case x == 10:
		name = "METADATA"
		arg = g.pick("DYNAMIC:ns:key", "ROUTE:ns", "CLUSTER", "VIRTUAL_HOST:a:b", "LISTENER:x", "UPSTREAM_HOST:m",
			"dynamic:ns", "REQUEST:ns", "", ":ns")
	case x == 11:
		name = g.pick("FILTER_STATE", "UPSTREAM_FILTER_STATE")
		arg = g.pick("k", "k:PLAIN", "k:TYPED", "k:FIELD:f", "k:FIELD", "k:plain", ":PLAIN", "", "envoy.string:PLAIN", "k:PLAIN:x")
	case x == 12:
		name = "CEL"
		if g.chance(0.2) {
			name = "TYPED_CEL"
		}
		arg = g.cel(2)
	case x == 13:
		name = "COALESCE"
		arg = g.coalesce()
	case x == 14:
		name = g.pick("PATH", "QUERY_PARAMS", "GRPC_STATUS", "REQUESTED_SERVER_NAME", "RESPONSE_CODE_DETAILS")
		arg = g.pick("", "WQ", "NQ", "NQ:ORIG", "WQ:PATH", "ORIG", "DECODED", "CAMEL_STRING", "SNAKE_STRING", "NUMBER",
			"SNI_ONLY", "HOST_FIRST", "ALLOW_WHITESPACES", "x", "wq")
	case x == 15:
		name = "COMMON_DURATION"
		arg = g.pick("DS_RX_BEG:DS_TX_END", "US_CX_BEG:US_CX_END:us", "a:b:ns", "a:b:s", "a", "a:b:ms:x", ":")
	case x == 16:
		name = g.pick("QUERY_PARAM", "ENVIRONMENT", "XFCC_VALUE")
		arg = g.pick("q", "page", "HOME", "uri", "URI", "dns", "by", "a b", "", "x?y", "é")
	case x == 17:
		name = g.pick("DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT")
		arg = g.pick("", "", "24", "MASK_PREFIX_LEN:16", "x")
	default:
		name = g.pick(formatBare...)
	}
	s := "%" + name
	if arg != "" || g.chance(0.05) {
		s += "(" + arg + ")"
	}
	return s + g.length() + "%"
}

func (g *formatGen) header() string {
	return g.pick(":path", ":authority", ":METHOD", "x-request-id", "user-agent", "X-Forwarded-For", "x-envoy-original-path",
		"x_b3", "", "x a", "a/b", "é", ":", "a:b", "x-ú", "!#$&'*+-.^_`|~")
}

func (g *formatGen) cel(depth int) string {
	if depth == 0 || g.chance(0.35) {
		return g.pick("request.path", "request.headers['x-a']", "response.code", "'s'", "\"d\"", "1", "1u", "2.5", "true",
			"null", "x", "xds.node.id", "b'x'", "r'\\d+'", "9223372036854775808", "'\\q'", "if", "é", "a.`b c`", "")
	}
	a, b := g.cel(depth-1), g.cel(depth-1)
	return g.pick(a+" + "+b, a+" == "+b, a+" && "+b, "!"+a, "-"+a, a+" ? "+b+" : 'c'", "size("+a+")",
		a+".startsWith("+b+")", a+".matches('a.*')", "matches("+a+", '[')", "foo("+a+")", a+".map(x, x)",
		"has("+a+".f)", "has("+a+")", "["+a+", "+b+"]", "{'k': "+a+"}", "("+a+")", a+"["+b+"]", a+" +", "string("+a+")",
		"re.extract("+a+", 'x', 'y')", a+".?f", "google.protobuf.Duration{seconds: 1}", a+" in "+b)
}

func (g *formatGen) coalesce() string {
	entry := func() string {
		return g.pick(`"PROTOCOL"`, `"REQUESTED_SERVER_NAME"`, `{"command":"REQ","param":":authority"}`, `{"command":"REQ"}`,
			`"NOPE"`, `{"command":"REQ","param":"x","max_length":5}`, `{"command":"REQ","param":"x","max_length":0}`,
			`{"command":"CEL","param":"request.path"}`, `{"command":"START_TIME","param":"%Y"}`, `5`, `{"param":"x"}`)
	}
	switch g.r.IntN(6) {
	case 0:
		return g.pick(`{"operators":[]}`, `["PROTOCOL"]`, `{"ops":["PROTOCOL"]}`, `{"operators":"PROTOCOL"}`, `{"operators":["PROTOCOL",]}`, "")
	case 1:
		return `{"operators":[` + entry() + `]}`
	default:
		return `{"operators":[` + entry() + `,` + entry() + `]}`
	}
}
