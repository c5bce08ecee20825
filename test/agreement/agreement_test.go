// Package agreement holds validation to a real Envoy, both ways: what
// `globalconfig validate` (and so the admission webhook) admits, Envoy
// loads; what it refuses, Envoy refuses too, but for a short list of
// deliberate refusals, each with its reason. Documents come from a
// generator built on the registry's own declarations (generate_test.go);
// each is judged by validation and loaded by each real Envoy in validate
// mode, as `validate --envoy` loads it (pkg/envoycheck). `make test` runs
// it against Envoy 1.40 and 1.39; `make fuzz` runs FuzzEnvoyAgreement.
package agreement

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/test/toolcache"
)

// generic are the deliberate refusals about every item: rules the
// document or the items' shared declarations apply to any key. A refusal
// about one item's keys (or one shared package's) is declared beside it,
// in its testdata/deliberate.yaml (deliberate_test.go).
var generic = []deliberateRule{
	rule(`.*`, `^applies to target\.context .* only`,
		"a key an item declares for some contexts only (items.ContextLimit): elsewhere it does nothing, or breaks the proxy in a way the representative configuration does not show (istiod's own settings there)"),
	rule(`.*`, `only applies (to|with) `, "a key that does nothing without another: the author meant something it would not do"),
	rule(`.*`, `(is also|repeats|is listed twice|listed twice)`, "an entry given twice: one of the two is a mistake"),
	rule(`.*`, `sets nothing|needs a body|needs exactly one|needs one backend|is required`, "a section that would do nothing, or less than it says"),
	rule(`.*`, `give either .* not both|give at most one of`, "two ways of saying one thing: one would be dropped"),
	rule(`.*`, `can't be beside .* on one cluster`, "Istio replaces a cluster's HTTP protocol options whole: Envoy loads both, but the EnvoyFilter applied last silently undoes the other's settings"),
}

// deliberate are the refusals stricter than Envoy on purpose: Envoy loads
// such a document, but it would not do at the proxy what its author
// meant, or would fail on a real proxy where Envoy here does not. A
// refused document Envoy accepts is a disagreement unless every one of
// its problems matches an entry. They are the generic ones, then every
// items/**/testdata/deliberate.yaml in path order; deliberateErr says
// why those could not be read (check fails on it).
var deliberate, deliberateErr = loadDeliberate(toolcache.RepoRoot())

func rule(path, msg, why string) deliberateRule {
	return deliberateRule{path: regexp.MustCompile(anchored(path)), msg: regexp.MustCompile(msg), why: why, pathSrc: path}
}

// anchored makes a path pattern match a whole path.
func anchored(path string) string { return `^(?:` + path + `)$` }

// deliberateWhy is the reason of the entry matching problem p, "" when
// none does.
func deliberateWhy(p *fielderr.Error) string {
	for _, d := range deliberate {
		if d.path.MatchString(p.Path) && d.msg.MatchString(p.Msg) {
			return d.why
		}
	}
	return ""
}

// verdict is validation's word on one document, and what Envoy gets.
type verdict struct {
	valid    bool
	problems []*fielderr.Error
	// objs is the document's set: the valid one, or, for a refused
	// document, what it renders to without validation (nil when even
	// that fails: the document does not decode, or Envoy's own proto
	// rules refuse it; see skipped).
	objs    []*envoyfilter.Object
	skipped string
	// doc is the document as decoded without validation, and src its
	// text, for reached.
	doc *document.Document
	src []byte
}

// judge is what validation says of src, as `globalconfig validate` says it.
func judge(src []byte) verdict {
	res := render.New().FromConfigMap(map[string]string{document.DataKey: string(src)})
	if res.Valid() {
		return verdict{valid: true, objs: res.Objects}
	}
	v := verdict{problems: res.Problems, src: src}
	v.doc, v.objs, v.skipped = unvalidated(src)
	return v
}

// unvalidated is what src renders to without validation, as Envoy would
// get it from Build alone; skipped says why there is nothing.
func unvalidated(src []byte) (doc *document.Document, objs []*envoyfilter.Object, skipped string) {
	doc, err := document.Unvalidated().Parse(src)
	if err != nil {
		return nil, nil, "does not decode"
	}
	defer func() {
		if r := recover(); r != nil {
			objs, skipped = nil, fmt.Sprintf("an item's Build panics on what its Validate refuses: %v", r)
		}
	}()
	if objs, err = render.Desired(doc); err != nil {
		return doc, nil, "its patches break Envoy's proto rules, or an item can't build it"
	}
	return doc, objs, ""
}

// envoys are the real Envoys of `make test`, or a skip.
func envoys(t testing.TB) []*envoybin.Binary {
	t.Helper()
	var out []*envoybin.Binary
	for _, env := range []string{"GLOBALCONFIG_ENVOY", "GLOBALCONFIG_ENVOY_OLD"} {
		path := os.Getenv(env)
		if path == "" {
			t.Skip(toolcache.Unset("the real Envoys", env))
		}
		b, err := envoybin.Open(context.Background(), path)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		out = append(out, b)
	}
	return out
}

// disagreement is one document judged differently.
type disagreement struct {
	gen   generated
	envoy string
	what  string
}

// outcome tallies a run.
type outcome struct {
	mu                          sync.Mutex
	docs, admitted, refused     int
	skipped                     map[string]int
	deliberate                  map[string]int
	envoyRuns, bothRefuse, both int
	// unreached counts problems with a string that never reached Envoy:
	// an item builds nothing from a value its Validate refuses.
	unreached     int
	disagreements []disagreement
}

// check judges gen with validation and every Envoy, and records the
// outcome.
func (o *outcome) check(ctx context.Context, bins []*envoybin.Binary, gen generated) error {
	if deliberateErr != nil {
		return deliberateErr
	}
	v := judge(gen.src)
	o.mu.Lock()
	o.docs++
	if v.valid {
		o.admitted++
	} else {
		o.refused++
	}
	if v.objs == nil {
		o.skipped[v.skipped]++
		o.mu.Unlock()
		return nil
	}
	o.mu.Unlock()
	for _, b := range bins {
		msg, err := envoycheck.Verdict(ctx, b, v.objs)
		if err != nil {
			return fmt.Errorf("envoy %s on\n%s\n%s: %w", b.Version, gen.src, strings.Join(gen.how, "; "), err)
		}
		o.mu.Lock()
		o.envoyRuns++
		switch {
		case v.valid && msg != "":
			o.disagreements = append(o.disagreements, disagreement{gen, b.Version, "admitted, but Envoy refuses it: " + msg})
		case v.valid:
			o.both++
		case msg != "":
			o.bothRefuse++
		default:
			var unmatched []string
			var why string
			for _, p := range v.problems {
				if w := deliberateWhy(p); w != "" {
					why = w
					continue
				}
				if !reached(v, p) {
					o.unreached++
					continue
				}
				unmatched = append(unmatched, p.Error())
			}
			if len(unmatched) > 0 {
				o.disagreements = append(o.disagreements, disagreement{gen, b.Version, "refused, but Envoy loads it: " + strings.Join(unmatched, "; ")})
			} else {
				o.deliberate[why]++
			}
		}
		o.mu.Unlock()
	}
	return nil
}

// docsPerItem is how many documents each item gets: its own, whatever
// else the registry holds (generator).
const docsPerItem = 21

// workers run Envoy at once: a validate run spends most of its time
// waiting, not on a core.
const workers = 8

// TestEnvoyAgreement generates documents from the registry and fails on
// every one validation and a real Envoy judge differently.
func TestEnvoyAgreement(t *testing.T) {
	bins := envoys(t)
	seeds, err := loadSeeds()
	if err != nil {
		t.Fatal(err)
	}
	perItem := docsPerItem
	if s := os.Getenv("GLOBALCONFIG_AGREEMENT_PER_ITEM"); s != "" {
		if perItem, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(1)
	if s := os.Getenv("GLOBALCONFIG_AGREEMENT_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	docs := newGenerator(seed, seeds).documents(perItem)
	o := &outcome{skipped: map[string]int{}, deliberate: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	work := make(chan generated)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := range work {
				if err := o.check(ctx, bins, gen); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, d := range docs {
		work <- d
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d documents (seed %d) in %s: %d admitted, %d refused; %d Envoy runs; admitted and loaded %d, refused by both %d; deliberate refusals %v; refused strings that never reached Envoy %d; not put to Envoy %v",
		o.docs, seed, time.Since(start).Round(time.Millisecond), o.admitted, o.refused, o.envoyRuns, o.both, o.bothRefuse, o.deliberate, o.unreached, o.skipped)
	slices.SortFunc(o.disagreements, func(a, b disagreement) int { return strings.Compare(a.what, b.what) })
	for i, d := range o.disagreements {
		if i == 25 {
			t.Errorf("… and %d more disagreements", len(o.disagreements)-i)
			break
		}
		t.Errorf("envoy %s: %s\n  made by: %s\n%s", d.envoy, d.what, strings.Join(d.gen.how, "; "), indent(string(d.gen.src)))
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// reached reports whether problem p's value reached Envoy. A value an
// item's Build leaves out, because Validate refuses it or another key
// overrides it, tells nothing of Envoy's verdict on it. A string (a map's
// key or value, a list's element) reached it when it is in the set Envoy
// loaded; any other value when the set changes without it.
func reached(v verdict, p *fielderr.Error) bool {
	if v.doc != nil {
		// A disabled item is validated, so that enabling it holds no
		// surprise, but it builds nothing.
		for _, s := range v.doc.Sections {
			if !s.Item.Enabled() && (p.Path == s.Name || strings.HasPrefix(p.Path, s.Name+".") || strings.HasPrefix(p.Path, s.Name+"[")) {
				return false
			}
		}
	}
	strs := stringsAt(v.doc, p.Path)
	if strs == nil {
		return changesWithOther(v, p.Path)
	}
	var all strings.Builder
	for _, o := range v.objs {
		b, err := json.Marshal(o)
		if err != nil {
			return true
		}
		all.Write(b)
	}
	for _, s := range strs {
		if s == "" {
			continue
		}
		q, _ := json.Marshal(s)
		if strings.Contains(all.String(), strings.Trim(string(q), `"`)) {
			return true
		}
	}
	return false
}

// changesWithOther reports whether the document renders to another set
// with another value at path (true when that can't be told: the key isn't
// found, or the document doesn't build then). The other value is near the
// refused one (a number plus one, a bool flipped, a duration a second
// longer), not the key taken out: a refused value equal to the default
// would render as if it were absent, and hide a refusal of the default.
func changesWithOther(v verdict, path string) bool {
	var root yaml.Node
	if v.src == nil || yaml.Unmarshal(v.src, &root) != nil || len(root.Content) != 1 || !alterAt(root.Content[0], path) {
		return true
	}
	src, err := yaml.Marshal(&root)
	if err != nil {
		return true
	}
	_, objs, skipped := unvalidated(src)
	if skipped != "" {
		return true
	}
	before, err1 := json.Marshal(v.objs)
	after, err2 := json.Marshal(objs)
	return err1 != nil || err2 != nil || string(before) != string(after)
}

// other is a scalar value near n's: false when n is none of a number, a
// bool or a duration.
func other(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode {
		return false
	}
	if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
		n.Value, n.Tag, n.Style = strconv.FormatFloat(f+1, 'f', -1, 64), "", 0
		return true
	}
	if b, err := strconv.ParseBool(n.Value); err == nil {
		n.Value, n.Tag, n.Style = strconv.FormatBool(!b), "", 0
		return true
	}
	if d, err := time.ParseDuration(n.Value); err == nil {
		n.Value = (d + time.Second).String()
		return true
	}
	return false
}

// alterAt sets the scalar at path in n, a document's mapping, to a value
// near it (other); false when path names no such scalar there.
func alterAt(n *yaml.Node, path string) bool {
	for path != "" {
		m := pathSegment.FindStringSubmatch(path)
		if m == nil {
			return false
		}
		path = path[len(m[0]):]
		last := path == ""
		if m[3] != "" {
			i, _ := strconv.Atoi(m[3])
			if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				return false
			}
			if last {
				return other(n.Content[i])
			}
			n = n.Content[i]
			continue
		}
		key := m[1]
		if m[2] != "" {
			key, _ = strconv.Unquote(m[2])
		}
		if n.Kind != yaml.MappingNode {
			return false
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != key {
				continue
			}
			if last {
				return other(n.Content[i+1])
			}
			n, found = n.Content[i+1], true
			break
		}
		if !found {
			return false
		}
	}
	return false
}

// pathSegment is one step of a problem's path: a key, ["quoted key"] or
// [index].
var pathSegment = regexp.MustCompile(`^(?:\.?([^.\[]+)|\[("(?:[^"\\]|\\.)*")\]|\[(\d+)\])`)

// stringsAt returns the strings at path in doc's sections: the string
// there, or the key that names it in a map; nil when path names no string.
func stringsAt(doc *document.Document, path string) []string {
	if doc == nil {
		return nil
	}
	var v reflect.Value
	var key string
	for path != "" {
		m := pathSegment.FindStringSubmatch(path)
		if m == nil {
			return nil
		}
		path = path[len(m[0]):]
		seg := m[1]
		if m[2] != "" {
			seg, _ = strconv.Unquote(m[2])
		}
		if !v.IsValid() {
			for _, s := range doc.Sections {
				if s.Name == seg {
					v = reflect.ValueOf(s.Item)
				}
			}
			if !v.IsValid() {
				return nil
			}
			continue
		}
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		switch {
		case m[3] != "":
			i, _ := strconv.Atoi(m[3])
			if v.Kind() != reflect.Slice || i >= v.Len() {
				return nil
			}
			v = v.Index(i)
		case v.Kind() == reflect.Map:
			key = seg
			v = v.MapIndex(reflect.ValueOf(seg))
			if !v.IsValid() {
				return []string{seg}
			}
		case v.Kind() == reflect.Struct:
			f, ok := fieldByKey(v.Type(), seg)
			if !ok {
				return nil
			}
			v = v.FieldByIndex(f)
		default:
			return nil
		}
	}
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.String {
		if key != "" {
			return []string{key}
		}
		return nil
	}
	if key != "" && v.String() == "" {
		return []string{key}
	}
	return []string{v.String()}
}

func fieldByKey(t reflect.Type, name string) ([]int, bool) {
	for _, f := range items.Fields(t) {
		if f.Name == name {
			return f.Index, true
		}
	}
	return nil, false
}
