package proxy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
)

// wrongTiming is a traffic.yaml for gzip's example with timing
// expectations deliberately wrong (requests 0 to 2) and one right
// (request 3), run by TestDeclaredFailuresAreReported.
const wrongTiming = `
- name: large-text
  requests:
  - path: /text?n=65536
    headers: {Accept-Encoding: gzip}
    expect:
      status: 200
      headers: {content-encoding: gzip}
      elapsed: {min: 1.5s}
  - path: /text?n=65536
    headers: {Accept-Encoding: gzip}
    expect:
      status: 200
      slowerThanWithout: 1s
  - path: /slow?ms=300
    expect:
      status: 200
      elapsed: {max: 100ms}
  - path: /slow?ms=300
    expect:
      status: 200
      elapsed: {min: 300ms, max: 10s}
`

// A deliberately wrong timing expectation, and a goTest that skips, fails
// or doesn't exist, go through the runner TestDeclaredTraffic uses at both
// gateways, and each is refused with a message that names the request (or
// the test) and what was measured; the right expectation and a passing
// goTest are not.
func TestDeclaredFailuresAreReported(t *testing.T) {
	file := filepath.Join(harness.RepoRoot(), "items", "gzip", "testdata", TrafficFile)
	cases, err := parseTraffic(file, []byte(wrongTiming))
	if err != nil {
		t.Fatal(err)
	}
	c := declaredCase{pkg: "gzip", file: file, trafficCase: cases[0]}
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), c.Document))
	if err != nil {
		t.Fatal(err)
	}
	ctx := setup(t)
	base := measureBaseline(ctx, t, c, doc)
	use(ctx, t, string(doc))
	bin, err := buildGoTest(ctx, filepath.Join(harness.RepoRoot(), "test", "proxy", "testdata", "declaredgotest"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, g *gw) {
		v := regexp.QuoteMeta(g.Binary.Version)
		const s = `(\d+\.\d{3})s`
		want := []*regexp.Regexp{
			regexp.MustCompile(`^gzip/large-text request 0 GET /text\?n=65536 at Envoy ` + v + `: took ` + s + `, expected at least 1.5s \(the fastest of 3 sends \(` + s + `, ` + s + `, ` + s + `\) is judged`),
			regexp.MustCompile(`^gzip/large-text request 1 GET /text\?n=65536 at Envoy ` + v + `: took ` + s + `, and ` + s + ` without gzip: -?` + s + ` slower, expected at least 1s slower \(each side's fastest of 3 sends`),
			regexp.MustCompile(`^gzip/large-text request 2 GET /slow\?ms=300 at Envoy ` + v + `: took ` + s + `, expected at most 100ms \(the fastest of 3 sends`),
		}
		got, times := c.requestsAt(ctx, g, base[g])
		// Every timed request's sends are logged, the passing one (3)
		// too, and request 1's with its baseline.
		if len(times) != 4 || !strings.HasPrefix(times[3], "gzip/large-text request 3 GET /slow?ms=300 at Envoy "+g.Binary.Version+": sends took ") ||
			!strings.Contains(times[1], "; without gzip: ") {
			t.Errorf("the logged times, want one line for each of the 4 timed requests, request 1's with its baseline:\n%s", strings.Join(times, "\n"))
		}
		if len(got) != len(want) {
			t.Fatalf("%d failures, want %d (requests 0 to 2, not 3):\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i, re := range want {
			m := re.FindStringSubmatch(got[i])
			if m == nil {
				t.Errorf("failure %d:\n%s\nwant it to match %s", i, got[i], re)
				continue
			}
			took, _ := strconv.ParseFloat(m[1], 64)
			switch i {
			case 0:
				if took >= 1.5 {
					t.Errorf("failure %d names %.3fs, at least the 1.5s it says it missed: %s", i, took, got[i])
				}
			case 2:
				if took < 0.3 {
					t.Errorf("failure %d names %.3fs, less than the backend's own 300 ms: %s", i, took, got[i])
				}
			}
			t.Logf("refused as it should be: %s", got[i])
		}

		if _, err := bin.run(ctx, "TestFixturePasses", g); err != nil {
			t.Errorf("a goTest that passes at the gateway is refused: %v", err)
		}
		for name, want := range map[string]string{
			"TestFixtureSkips":   `skipped, which proves nothing`,
			"TestFixtureFails":   `failed:\n(.|\n)*deliberate failure at Envoy ` + v + `: GET /status\?code=418 answered 418`,
			"TestFixtureMissing": `did not run, which proves nothing`,
		} {
			_, err := bin.run(ctx, name, g)
			if err == nil {
				t.Errorf("goTest %s is accepted", name)
				continue
			}
			if !regexp.MustCompile(`^goTest ` + name + ` \(\./test/proxy/testdata/declaredgotest, [\d.]+s\) ` + want).MatchString(err.Error()) {
				t.Errorf("goTest %s refused with:\n%v\nwant it to say %q", name, err, want)
				continue
			}
			t.Logf("refused as it should be: %.300s", err)
		}
	})
}

// The timing keys and goTest are checked when traffic.yaml is read, each
// error naming the file, the case and the request; the rule judging
// slowerThanWithout passes a request slower by the amount and refuses one
// that is not. No gateway needed.
func TestTrafficFileChecked(t *testing.T) {
	file := filepath.Join(harness.RepoRoot(), "items", "gzip", "testdata", TrafficFile)
	req := func(expect string) string {
		return "- name: c\n  requests:\n  - path: /echo\n    expect: {status: 200, " + expect + "}\n  - path: /echo\n    expect: {status: 200}\n"
	}
	for in, want := range map[string]string{
		req("elapsed: {min: 2s, max: 1s}"): `case "c": request 0: elapsed.min \(2s\) is more than elapsed.max \(1s\)`,
		req("elapsed: {min: 2}"):           `case "c": request 0: elapsed.min is a Go duration such as 1.5s or 200ms, not "2"`,
		req("elapsed: {max: -1s}"):         `case "c": request 0: elapsed.max must be more than 0 and at most 15s, got -1s`,
		req("elapsed: {max: 1m}"):          `case "c": request 0: elapsed.max must be more than 0 and at most 15s, got 1m`,
		req("elapsed: {}"):                 `case "c": request 0: elapsed needs min, max or both`,
		req("slowerThanWithout: 0s"):       `case "c": request 0: slowerThanWithout must be more than 0`,
		req("elapsed: {mn: 1s}"):           `unknown field "mn"`,
		"- name: c\n":                      `case "c" has no request and no goTest`,
		"- name: c\n  requests:\n" + strings.Repeat("  - path: /echo\n    expect: {status: 200, elapsed: {max: 1s}}\n", 9): `case "c" has 9 timed requests, at most 8`,
		"- name: c\n  goTest: TestNope\n":   `case "c": goTest TestNope: no func TestNope\(t \*testing.T\) in .*items/gzip/\*_test.go`,
		"- name: c\n  goTest: testLower\n":  `case "c": goTest "testLower" is not a Go test function's name`,
		"- name: c\n  goTest: TestGolden\n": ``,
		req("elapsed: {min: 1ms, max: 2s}"): ``,
	} {
		_, err := parseTraffic(file, []byte(in))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", in, err)
		case want == "":
		case err == nil:
			t.Errorf("%s: accepted, want %s", in, want)
		case !strings.HasPrefix(err.Error(), file+": ") || !regexp.MustCompile(want).MatchString(err.Error()):
			t.Errorf("%s: %v\nwant %s: ... %s", in, err, file, want)
		}
	}

	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, n := range v {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	tm := timing{min: time.Second, max: 5 * time.Second, slower: time.Second}
	if got := tm.judge("r", ms(2100, 4000, 2500), ms(30, 900, 40), "x"); len(got) != 0 {
		t.Errorf("2.1 s at the fastest against 0.03 s without the item, within 1 to 5 s and 1 s slower, is refused: %v", got)
	}
	got := tm.judge("r", ms(900, 6000, 6000), ms(30, 30, 30), "x")
	if len(got) != 2 || !strings.HasPrefix(got[0], "r: took 0.900s, expected at least 1s") ||
		!strings.HasPrefix(got[1], "r: took 0.900s, and 0.030s without x: 0.870s slower, expected at least 1s slower") {
		t.Errorf("0.9 s at the fastest against 0.03 s without: %q", got)
	}
	if got := (timing{max: time.Second}).judge("r", ms(5000, 800, 5000), nil, "x"); len(got) != 0 {
		t.Errorf("a max met by the fastest of three sends is refused: %v", got)
	}
	// A passing request's times are logged: every send, and the baseline's.
	if got, want := tm.times("r", ms(2100, 4000, 2500), ms(30, 900, 40), "x"),
		"r: sends took 2.100s, 4.000s, 2.500s (fastest 2.100s; elapsed at least 1s and at most 5s); without x: 0.030s, 0.900s, 0.040s (fastest 0.030s): 2.070s slower, slowerThanWithout 1s"; got != want {
		t.Errorf("the log line of a passing timed request:\n%s\nwant\n%s", got, want)
	}
	if got, want := (timing{max: time.Second}).times("r", ms(5000, 800, 5000), nil, "x"), "r: sends took 5.000s, 0.800s, 5.000s (fastest 0.800s; elapsed at most 1s)"; got != want {
		t.Errorf("the log line of a timed request without a baseline:\n%s\nwant\n%s", got, want)
	}
}
