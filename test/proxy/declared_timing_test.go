package proxy

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	yaml3 "go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/items"
)

// Timing in traffic.yaml: expect.elapsed (min, max) and
// expect.slowerThanWithout. A request with either is sent timedSends
// times, one after the other, each on a new connection, and every send
// must meet the request's other expectations. On a loaded machine, load
// only adds time, so each side is judged by its fastest send:
//
//   - elapsed.min: the fastest send took at least min (so every send did);
//   - elapsed.max: the fastest send took at most max (one send slowed by
//     load can't fail the case; a request slower than max every time does);
//   - slowerThanWithout: the fastest send with the item, minus the fastest
//     send of the same request at the same gateway without the item's
//     top-level key, is at least that much. Load on the side without the
//     item only shrinks the difference; to fake the effect, load would
//     have to slow every one of the item's sends by the whole amount.
const (
	// timedSends is how many times a timed request is sent, on each side.
	timedSends = 3
	// maxTimed bounds every timing expectation, under the test client's
	// own timeout (20 s): a send never waits for longer than it.
	maxTimed = 15 * time.Second
	// maxTimedRequests bounds a case's timed requests: each is sent
	// timedSends times at each gateway (and as many without the item).
	maxTimedRequests = 8
)

// timing is a request's timing expectations, parsed; zero when unset.
type timing struct {
	min, max, slower time.Duration
}

func (tm timing) any() bool { return tm.min > 0 || tm.max > 0 || tm.slower > 0 }

// parseTiming reads expect.elapsed and expect.slowerThanWithout: Go
// durations, more than 0 and at most maxTimed, min at most max.
func parseTiming(e trafficExpect) (timing, error) {
	var tm timing
	parse := func(key, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s is a Go duration such as 1.5s or 200ms, not %q", key, v)
		}
		if d <= 0 || d > maxTimed {
			return 0, fmt.Errorf("%s must be more than 0 and at most %s, got %s", key, maxTimed, v)
		}
		return d, nil
	}
	var err error
	if e.Elapsed != nil {
		if e.Elapsed.Min == "" && e.Elapsed.Max == "" {
			return tm, fmt.Errorf("elapsed needs min, max or both")
		}
		if tm.min, err = parse("elapsed.min", e.Elapsed.Min); err != nil {
			return tm, err
		}
		if tm.max, err = parse("elapsed.max", e.Elapsed.Max); err != nil {
			return tm, err
		}
		if tm.max > 0 && tm.min > tm.max {
			return tm, fmt.Errorf("elapsed.min (%s) is more than elapsed.max (%s)", tm.min, tm.max)
		}
	}
	if tm.slower, err = parse("slowerThanWithout", e.SlowerThanWithout); err != nil {
		return tm, err
	}
	return tm, nil
}

// secs shows a measured time in seconds, to the millisecond.
func secs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func sends(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = secs(d)
	}
	return strings.Join(s, ", ")
}

// judge compares the times of a request's sends (took) with its timing
// expectations; base are the same request's times without the item (its
// key, named by without). It returns one sentence a bound not met,
// starting with what (the request).
func (tm timing) judge(what string, took, base []time.Duration, without string) []string {
	var out []string
	fastest := slices.Min(took)
	measured := fmt.Sprintf("the fastest of %d sends (%s) is judged: load only adds time", len(took), sends(took))
	if tm.min > 0 && fastest < tm.min {
		out = append(out, fmt.Sprintf("%s: took %s, expected at least %s (%s)", what, secs(fastest), tm.min, measured))
	}
	if tm.max > 0 && fastest > tm.max {
		out = append(out, fmt.Sprintf("%s: took %s, expected at most %s (%s)", what, secs(fastest), tm.max, measured))
	}
	if tm.slower > 0 {
		if len(base) == 0 {
			return append(out, fmt.Sprintf("%s: slowerThanWithout: no time measured without %s", what, without))
		}
		bf := slices.Min(base)
		if diff := fastest - bf; diff < tm.slower {
			out = append(out, fmt.Sprintf("%s: took %s, and %s without %s: %s slower, expected at least %s slower (each side's fastest of %d sends is judged, with %s: %s; without: %s; load only adds time, so it can fake the effect only by slowing every send with the item)",
				what, secs(fastest), secs(bf), without, secs(diff), tm.slower, len(took), without, sends(took), sends(base)))
		}
	}
	return out
}

// times is a line for the log of a timed request that was judged, pass or
// fail: the times of its sends, and of the sends without the item (its key,
// named by without) when it has a baseline, so that -v shows how near its
// bounds a passing case is.
func (tm timing) times(what string, took, base []time.Duration, without string) string {
	line := fmt.Sprintf("%s: sends took %s (fastest %s", what, sends(took), secs(slices.Min(took)))
	var bounds []string
	if tm.min > 0 {
		bounds = append(bounds, "at least "+tm.min.String())
	}
	if tm.max > 0 {
		bounds = append(bounds, "at most "+tm.max.String())
	}
	if len(bounds) > 0 {
		line += "; elapsed " + strings.Join(bounds, " and ")
	}
	line += ")"
	if len(base) > 0 {
		diff := slices.Min(took) - slices.Min(base)
		line += fmt.Sprintf("; without %s: %s (fastest %s): %s slower, slowerThanWithout %s", without, sends(base), secs(slices.Min(base)), secs(diff), tm.slower)
	}
	return line
}

// baselines are the times of a case's requests without the item, by
// gateway and request index.
type baselines map[*gw]map[int][]time.Duration

func (c declaredCase) needsBaseline() bool {
	for _, r := range c.Requests {
		if r.Expect.timing.slower > 0 {
			return true
		}
	}
	return false
}

// itemKeys are the top-level keys of the items whose testdata holds the
// case's file.
func (c declaredCase) itemKeys() []string {
	var keys []string
	for _, r := range items.All() {
		if dir, err := testdataOf(r.Name); err == nil && dir == filepath.Dir(c.file) {
			keys = append(keys, r.Name)
		}
	}
	return keys
}

// without names the item's keys, for a message.
func (c declaredCase) without() string { return strings.Join(c.itemKeys(), " and ") }

// measureBaseline makes the case's document without the item's keys the
// whole configuration at both gateways (waiting for their ACK, as for the
// case), and times each request that has a slowerThanWithout there.
func measureBaseline(ctx context.Context, t *testing.T, c declaredCase, doc []byte) baselines {
	t.Helper()
	keys := c.itemKeys()
	stripped, err := withoutKeys(doc, keys)
	if err != nil {
		t.Fatalf("%s/%s: slowerThanWithout: %v", c.pkg, c.Name, err)
	}
	use(ctx, t, string(stripped))
	out := baselines{}
	for _, g := range gateways {
		out[g] = map[int][]time.Duration{}
		for i, r := range c.Requests {
			if r.Expect.timing.slower == 0 {
				continue
			}
			for range timedSends {
				start := time.Now()
				if _, err := do(ctx, r.method(), g.url(r.Path), r.Headers, strings.Repeat("x", r.BodyBytes)); err != nil {
					t.Fatalf("%s/%s request %d %s %s at Envoy %s without %s: %v", c.pkg, c.Name, i, r.method(), r.Path, g.Binary.Version, strings.Join(keys, " and "), err)
				}
				out[g][i] = append(out[g][i], time.Since(start))
			}
		}
	}
	return out
}

// withoutKeys is doc with the top-level keys taken out, the rest (and its
// comments) as it was. It fails when doc has none of them: the case's
// document doesn't configure the item, so there is nothing to compare.
func withoutKeys(doc []byte, keys []string) ([]byte, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if root.Kind != yaml3.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml3.MappingNode {
		return nil, fmt.Errorf("the document is not a mapping")
	}
	m := root.Content[0]
	var kept []*yaml3.Node
	removed := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		if slices.Contains(keys, m.Content[i].Value) {
			removed = true
			continue
		}
		kept = append(kept, m.Content[i], m.Content[i+1])
	}
	if !removed {
		return nil, fmt.Errorf("the document does not configure %s, so there is no document without it to compare with", strings.Join(keys, " or "))
	}
	m.Content = kept
	var buf bytes.Buffer
	enc := yaml3.NewEncoder(&buf)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
