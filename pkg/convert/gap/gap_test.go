package gap_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/geoip/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	_ "github.com/globalconfig/globalconfig/items/all"
	"github.com/globalconfig/globalconfig/pkg/convert/gap"
	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// The converters' verdicts that name an Envoy capability globalconfig may
// lack (gap.Use), and what they must agree with: what every registered
// item's golden outputs emit, and what each item declares it provides.

// uses are every converter's gap verdicts. A converter with gap verdicts
// lists them here.
func uses() []gap.Use { return nginx.Gaps() }

// emits maps an item to the capabilities its golden outputs emit, each
// with the first golden input that emits it.
type emits map[string]map[string]string

// goldenEmits renders every item's golden inputs (items/*/testdata/*.in.yaml)
// as the renderer does, for every Istio release globalconfig knows, and
// walks every typed message of what each item builds.
func goldenEmits(t *testing.T) emits {
	t.Helper()
	ins, err := filepath.Glob("../../../items/*/testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs under items/*/testdata (%v)", err)
	}
	out := emits{}
	for _, in := range ins {
		data, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := document.Parse(data)
		if err != nil {
			continue // an invalid case: it emits nothing
		}
		source := strings.TrimPrefix(in, "../../../")
		for _, s := range doc.Sections {
			if !s.Item.Enabled() {
				continue
			}
			for _, p := range build(s.Item) {
				got := map[string]bool{}
				gap.Emitted(p.Value, got)
				if out[s.Name] == nil {
					out[s.Name] = map[string]string{}
				}
				for c := range got {
					if _, ok := out[s.Name][c]; !ok {
						out[s.Name][c] = source
					}
				}
			}
		}
	}
	return out
}

// build returns what it builds for every release (a release it can't
// build for gives nothing).
func build(it items.Item) []envoyfilter.Patch {
	v, ok := it.(items.Versioned)
	if !ok {
		ps, _ := it.Build()
		return ps
	}
	var all []envoyfilter.Patch
	for _, r := range envoyfilter.Releases {
		ps, _ := v.BuildFor(r)
		all = append(all, ps...)
	}
	return all
}

// staleVerdicts returns a message for each verdict whose capability an
// item emits without declaring it in its Registration.Provides: the
// verdict would still call the capability missing.
func staleVerdicts(us []gap.Use, regs []items.Registration, got emits) []string {
	var msgs []string
	for _, u := range us {
		for _, r := range regs {
			source, ok := got[r.Name][u.Gap.Envoy]
			if !ok || slices.ContainsFunc(r.Provides, func(c items.Capability) bool { return u.Gap.Provides(c.Envoy) }) {
				continue
			}
			msgs = append(msgs, fmt.Sprintf("%s: %s says %q, but item %s emits %s (%s): declare it in %s's registration, in its own package: "+
				"Provides: []items.Capability{{Envoy: %q, Setting: \"<the key that sets it>\"}}; the verdict then names %s by itself. "+
				"Then run make docs (docs/migrating-from-ingress-nginx.md's key table shows the new verdict), read it, and if the key's meaning differs from what %s does in a way the verdict doesn't say, or the key could be converted to it, open an issue for the converter",
				u.Converter, u.Key, u.Text(), r.Name, u.Gap.Envoy, source, r.Name, u.Gap.Envoy, r.Name, r.Name))
		}
	}
	return msgs
}

// falseProvides returns a message for each capability an item declares
// that none of its golden outputs emits.
func falseProvides(regs []items.Registration, got emits) []string {
	var msgs []string
	for _, r := range regs {
		for _, c := range r.Provides {
			if _, ok := got[r.Name][c.Envoy]; !ok {
				msgs = append(msgs, fmt.Sprintf("item %s declares Provides %s, but none of its golden outputs emits it: add a golden input that sets %s (every key: all.in.yaml), or drop the declaration",
					r.Name, c.Envoy, cmpOr(c.Setting, r.Name)))
			}
		}
	}
	return msgs
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Every item that emits a capability a verdict calls missing declares it,
// so the verdict names the item; and every declaration is true of the
// item's golden outputs.
func TestVerdictsAgreeWithTheRegistry(t *testing.T) {
	got := goldenEmits(t)
	if len(got) < 10 {
		t.Fatalf("golden outputs of only %d items walked", len(got))
	}
	for _, m := range staleVerdicts(uses(), items.All(), got) {
		t.Error(m)
	}
	for _, m := range falseProvides(items.All(), got) {
		t.Error(m)
	}
}

// The walk finds what items are known to emit, so that the test above can
// fail: gzip's compressor, a field deep in the upstream item's typed
// protocol options, and a filter packed in an Any.
func TestGoldenEmitsSeesWhatItemsBuild(t *testing.T) {
	got := goldenEmits(t)
	for item, want := range map[string]string{
		"gzip":      "envoy.extensions.compression.gzip.compressor.v3.Gzip.chunk_size",
		"upstream":  "envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options.idle_timeout",
		"hardening": "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.common_http_protocol_options.max_connection_duration",
	} {
		if _, ok := got[item][want]; !ok {
			t.Errorf("the walk of %s's golden outputs misses %s", item, want)
		}
	}
	// hardening's max_connection_duration is the clients' connections': it
	// must not count as the clusters' (upstream-keepalive-time's gap).
	if _, ok := got["hardening"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions.common_http_protocol_options.max_connection_duration"]; ok {
		t.Error("the walk puts hardening's connection manager field under the clusters' protocol options")
	}
}

// Each gap names a message or field Envoy's API has.
func TestGapsNameEnvoysAPI(t *testing.T) {
	us := uses()
	if len(us) == 0 {
		t.Fatal("no gap verdicts")
	}
	for _, u := range us {
		if err := items.CheckEnvoyName(u.Gap.Envoy); err != nil {
			t.Errorf("%s: %s: %v", u.Converter, u.Key, err)
		}
	}
	if err := items.CheckEnvoyName("envoy.config.listener.v3.Listener.no_such_field"); err == nil {
		t.Error("CheckEnvoyName takes a field the listener lacks")
	}
}

// fakeGap is an item, for the tests only, that emits the capability of a
// gap no registered item provides (chosen when the test runs, so no item
// that fills a gap ever has to edit these tests).
type fakeGap struct {
	items.Toggle
	Value string `json:"value" doc:"A test's value."`
	// capability is what Build emits: a gap's Envoy name.
	capability string
}

func (*fakeGap) Validate() error { return nil }

func (f *fakeGap) Build() ([]envoyfilter.Patch, error) {
	m, err := capabilityMessage(f.capability)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{wrap(m)}, nil
}

// capabilityMessage instantiates the message a capability names, by its
// full name, with the path of fields after it set: each message on the
// way present, the last field non-zero.
func capabilityMessage(capability string) (proto.Message, error) {
	parts := strings.Split(capability, ".")
	for i := len(parts); i > 0; i-- {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(strings.Join(parts[:i], ".")))
		if err != nil {
			continue
		}
		m := mt.New()
		if err := setPath(m, parts[i:]); err != nil {
			return nil, fmt.Errorf("capability %s: %w", capability, err)
		}
		return m.Interface(), nil
	}
	return nil, fmt.Errorf("capability %s names no message the binary links", capability)
}

// setPath sets the field path below m: every message on the way present,
// the last field non-zero.
func setPath(m protoreflect.Message, path []string) error {
	if len(path) == 0 {
		return nil
	}
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	if fd == nil {
		return fmt.Errorf("%s has no field %q", m.Descriptor().FullName(), path[0])
	}
	if len(path) > 1 {
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return fmt.Errorf("the path goes below %s, which is no single message", fd.FullName())
		}
		return setPath(m.Mutable(fd).Message(), path[1:])
	}
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		if fd.Message() != nil {
			l.Append(protoreflect.ValueOfMessage(l.NewElement().Message()))
		} else {
			l.Append(nonZero(fd))
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		v := mp.NewValue()
		if fd.MapValue().Message() == nil {
			v = nonZero(fd.MapValue())
		}
		mp.Set(nonZero(fd.MapKey()).MapKey(), v)
	case fd.Message() != nil:
		m.Mutable(fd) // present: the walk counts a set message
	default:
		m.Set(fd, nonZero(fd))
	}
	return nil
}

// nonZero is a value of fd's scalar kind other than its zero value.
func nonZero(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		for i := range fd.Enum().Values().Len() {
			if n := fd.Enum().Values().Get(i).Number(); n != 0 {
				return protoreflect.ValueOfEnum(n)
			}
		}
		return protoreflect.ValueOfEnum(0)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(1)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	}
	panic(fmt.Sprintf("no non-zero value for %s", fd.FullName()))
}

// wrap puts m in the patch that carries it: a merge of the object Istio
// decodes into m's type, or, for any other message (a filter's or a
// cluster's typed config), an HTTP filter whose typed config packs m in an
// Any, which the walk unpacks as a root of its own.
func wrap(m proto.Message) envoyfilter.Patch {
	for n := range networking.EnvoyFilter_ApplyTo_name {
		at := networking.EnvoyFilter_ApplyTo(n)
		if v, err := envoyfilter.ValueType(at); err == nil && v.ProtoReflect().Descriptor() == m.ProtoReflect().Descriptor() {
			return envoyfilter.Patch{ApplyTo: at, Operation: networking.EnvoyFilter_Patch_MERGE, Value: m}
		}
	}
	p, err := envoyfilter.InsertHTTPFilter("globalconfig.fake_gap", m)
	if err != nil {
		panic(err) // a message that can't be marshaled
	}
	return p
}

// openGap returns a gap verdict whose capability no registered item
// provides, the first in the converters' order.
func openGap(t *testing.T) gap.Use {
	t.Helper()
	for _, u := range uses() {
		if len(u.Gap.Providers()) == 0 {
			t.Logf("the fake item emits %s, the capability of %s's verdict (%s)", u.Gap.Envoy, u.Key, u.Converter)
			return u
		}
	}
	t.Fatalf("every gap of the converters' verdicts is provided by an item (%d verdicts), so no fake item can show a stale one: "+
		"add a gap.Gap to a converter's verdict for a capability no item provides, or make these tests register a fake capability of their own", len(uses()))
	return gap.Use{}
}

// fakeSetting is the fake item's key, named by a declaration's Setting.
const fakeSetting = "value"

func fakeRegistration(capability string, provides []items.Capability) items.Registration {
	return items.Registration{
		Name:     "fakeGap",
		Summary:  "A test's item.",
		Stage:    envoyfilter.StageTrafficPolicy,
		Slot:     items.FreeSlots(envoyfilter.StageTrafficPolicy)[0],
		Purpose:  "a test's",
		Where:    "a test's",
		New:      func() items.Item { return &fakeGap{capability: capability} },
		Provides: provides,
	}
}

func fakeEmits(t *testing.T, capability string) map[string]string {
	t.Helper()
	ps, err := (&fakeGap{capability: capability}).Build()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range ps {
		gap.Emitted(p.Value, got)
	}
	if !got[capability] {
		t.Fatalf("the fake item's output does not emit %s; it emits %v", capability, slices.Sorted(maps.Keys(got)))
	}
	out := map[string]string{}
	for c := range got {
		out[c] = "fake/testdata/all.in.yaml"
	}
	return out
}

// The fake item can emit every gap's capability, whichever is open when
// the tests run: a new gap whose name it can't instantiate fails here,
// not on the day the gaps before it are filled.
func TestTheFakeEmitsEveryGap(t *testing.T) {
	for _, u := range uses() {
		fakeEmits(t, u.Gap.Envoy)
	}
}

// An item that emits a gap's capability without declaring it makes the
// check fail with a message that names the converter, the key, the verdict
// that would go stale and the item.
func TestAnUndeclaredItemFailsNamingTheVerdict(t *testing.T) {
	u := openGap(t)
	c := u.Gap.Envoy
	got := emits{"fakeGap": fakeEmits(t, c)}
	msgs := staleVerdicts(uses(), append(items.All(), fakeRegistration(c, nil)), got)
	var verdict string
	for _, m := range msgs {
		if strings.Contains(m, ": "+u.Key+" says ") {
			verdict = m
		}
	}
	for _, want := range []string{
		u.Converter + ": " + u.Key + " says ",
		u.Gap.Name + " (" + c + ") is not an item of globalconfig",
		"but item fakeGap emits " + c + " (fake/testdata/all.in.yaml)",
		"declare it in fakeGap's registration",
	} {
		if !strings.Contains(verdict, want) {
			t.Errorf("the failure for %s lacks %q; the failures:\n%s", u.Key, want, strings.Join(msgs, "\n"))
		}
	}
	// One failure for each verdict whose capability the fake emits (keys
	// may share a gap), and none for any other.
	var keys []string
	for _, v := range uses() {
		if _, ok := got["fakeGap"][v.Gap.Envoy]; ok {
			keys = append(keys, v.Key)
		}
	}
	if len(msgs) != len(keys) {
		t.Errorf("%d failures, want one for each of %s:\n%s", len(msgs), strings.Join(keys, ", "), strings.Join(msgs, "\n"))
	}
	// Declared, it is no failure; declared falsely, it is one.
	declared := fakeRegistration(c, []items.Capability{{Envoy: c, Setting: fakeSetting}})
	if msgs := staleVerdicts(uses(), append(items.All(), declared), got); len(msgs) > 0 {
		t.Errorf("a declared capability still fails:\n%s", strings.Join(msgs, "\n"))
	}
	never := "envoy.extensions.filters.http.geoip.v3.Geoip"
	if strings.HasPrefix(c, never) {
		never = "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit"
	}
	lying := fakeRegistration(c, []items.Capability{{Envoy: never}})
	if msgs := falseProvides([]items.Registration{lying}, got); len(msgs) != 1 || !strings.Contains(msgs[0], "item fakeGap declares Provides "+never+", but none of its golden outputs emits it") {
		t.Errorf("a false declaration: %q", msgs)
	}
}

// With an item registered that declares the capability, the converter's
// verdict names it by itself, with no edit to the converter. The fake
// registers in a child process, so no other test sees it.
func TestADeclaredItemIsNamedByTheVerdict(t *testing.T) {
	if os.Getenv("GAP_FAKE_ITEM") == "1" {
		fakeItemProcess(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestADeclaredItemIsNamedByTheVerdict$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GAP_FAKE_ITEM=1")
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "fake item checked") {
		t.Fatalf("the child with the fake item: %v\n%s", err, b)
	}
}

func fakeItemProcess(t *testing.T) {
	u := openGap(t)
	c := u.Gap.Envoy
	before := convertKey(t, u.Key)
	if !strings.Contains(before, "is not an item of globalconfig") {
		t.Fatalf("%s's verdict before the fake item: %q", u.Key, before)
	}
	items.Register(fakeRegistration(c, []items.Capability{{Envoy: c, Setting: fakeSetting}}))
	after := convertKey(t, u.Key)
	for _, want := range []string{
		u.Theirs + "; ",
		"globalconfig's fakeGap." + fakeSetting + " sets " + u.Gap.Name + " (" + c + "): A test's item",
		"The conversion does not carry this key there: compare what fakeGap." + fakeSetting + " does with the above, and set it by hand if it fits (docs/reference.md, fakeGap)",
	} {
		if !strings.Contains(after, want) {
			t.Errorf("%s's verdict with the fake item lacks %q: %q", u.Key, want, after)
		}
	}
	if strings.Contains(after, "not an item") {
		t.Errorf("%s's verdict with the fake item still says not an item: %q", u.Key, after)
	}
	// And the agreement check passes with it.
	got := emits{"fakeGap": fakeEmits(t, c)}
	if msgs := append(staleVerdicts(uses(), items.All(), got), falseProvides([]items.Registration{fakeRegistration(c, nil)}, got)...); len(msgs) > 0 {
		t.Errorf("with the fake item declared: %s", strings.Join(msgs, "\n"))
	}
	fmt.Println("fake item checked")
}

// convertKey converts a ConfigMap of the key alone, with a value that
// turns nothing off, and returns its verdict's detail.
func convertKey(t *testing.T, key string) string {
	t.Helper()
	res, err := nginx.Convert(nginx.Input{Name: "ingress-nginx-controller", Namespace: "ingress-nginx", Data: map[string]string{key: "5s"}}, nginx.Options{NoDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	es := res.Report.Find(key)
	if len(es) != 1 || es[0].Verdict != nginx.NotSupported {
		t.Fatalf("%s's report lines: %+v", key, es)
	}
	return es[0].Detail
}

// gapPhrase is how a verdict says globalconfig lacks something. A verdict
// that says so in its own words, not through a gap.Gap, would go stale
// unnoticed when an item arrives.
var gapPhrase = regexp.MustCompile(`(?i)not an item|\bno item\b|has no item|globalconfig (does not|doesn't|has no|sets no|can't|cannot|lacks)|not a globalconfig key|item (sets|has) no|is not in globalconfig|no globalconfig item`)

// Every verdict of the converters that names a capability globalconfig
// lacks goes through a gap: no string of their code, and no line of their
// migration guides, says so in its own words.
func TestEveryGapVerdictIsDeclared(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !gapPhrase.MatchString(s) {
				return true
			}
			if filepath.ToSlash(path) == "../gap/gap.go" {
				return true // the wording of every gap
			}
			t.Errorf("pkg/convert/%s: %q says globalconfig lacks something (%q) in its own words: name the Envoy capability it would need with a gap.Gap and word the verdict with its Verdict, so the verdict names the item that provides it once one does",
				strings.TrimPrefix(fset.Position(lit.Pos()).String(), "../"), cut(s), gapPhrase.FindString(s))
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d files of pkg/convert read", checked)
	}
	for _, doc := range []string{"migrating-from-ingress-nginx.md", "migrating-from-higress.md"} {
		b, err := os.ReadFile("../../../docs/" + doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := gapPhrase.FindString(line); m != "" && !strings.Contains(line, "is not an item of globalconfig") {
				t.Errorf("docs/%s:%d says globalconfig lacks something (%q) in its own words: say it through the report's verdict, which names the item once one provides it", doc, i+1, m)
			}
		}
	}
}

// An "is not an item of globalconfig" in the migration guides is a gap
// verdict the generated table shows; it is true of today's registry.
func TestGuidesShowTodaysGapVerdicts(t *testing.T) {
	b, err := os.ReadFile("../../../docs/migrating-from-ingress-nginx.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uses() {
		if strings.Contains(string(b), "| `"+u.Key+"` |") && !strings.Contains(string(b), u.Text()) {
			t.Errorf("docs/migrating-from-ingress-nginx.md does not show %s's verdict as it is today, %q: run make docs", u.Key, u.Text())
		}
	}
}

func cut(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// Register refuses a capability the binary's Envoy API does not have, and
// a setting the item's section lacks, naming the item.
func TestRegisterRefusesAWrongCapability(t *testing.T) {
	for _, c := range []struct {
		provides items.Capability
		want     string
	}{
		{items.Capability{Envoy: "envoy.extensions.filters.http.no_such.v3.Filter"}, `items: "fakeGap" Provides "envoy.extensions.filters.http.no_such.v3.Filter" names no proto message the binary links`},
		{items.Capability{Envoy: "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit.limit_kbs"}, `envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit has no field "limit_kbs"`},
		{items.Capability{Envoy: "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit", Setting: "rates"}, `at setting "rates", which is not a key of its section`},
	} {
		got := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			items.Register(fakeRegistration("envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit", []items.Capability{c.provides}))
			return "registered"
		}()
		if !strings.Contains(got, c.want) {
			t.Errorf("Register with %+v: %q, want %q", c.provides, got, c.want)
		}
	}
	if _, ok := items.Lookup("fakeGap"); ok {
		t.Error("a refused registration is in the registry")
	}
}

// One capability can serve two keys: an item that declares a part of a
// gap's capability at a setting provides the gap, but the verdict names
// that setting only for the gap that is the part itself (ingress-nginx's
// limit-rate needs the bandwidth_limit filter's limit_kbps; its
// limit-rate-after needs the filter, and limitKbps does not set it).
func TestASettingIsNamedOnlyForWhatItSets(t *testing.T) {
	const filter = "envoy.extensions.filters.http.bandwidth_limit.v3.BandwidthLimit"
	r := fakeRegistration(filter, []items.Capability{{Envoy: filter + ".limit_kbps", Setting: fakeSetting}})
	for _, c := range []struct {
		gap      string
		provides bool
		key      string
	}{
		{filter + ".limit_kbps", true, "fakeGap." + fakeSetting},
		{filter, true, "fakeGap"},
		{filter + ".fill_interval", false, ""},
	} {
		p, ok := gap.Gap{Envoy: c.gap}.ProviderOf(r)
		if ok != c.provides || ok && p.Key() != c.key {
			t.Errorf("a declaration of %s.limit_kbps at %s, for a gap of %s: provides %v as %q, want %v as %q", filter, fakeSetting, c.gap, ok, p.Key(), c.provides, c.key)
		}
	}
	// A declaration of the capability itself wins over one of its parts,
	// whatever their order.
	both := fakeRegistration(filter, []items.Capability{{Envoy: filter + ".limit_kbps", Setting: fakeSetting}, {Envoy: filter, Setting: "enable"}})
	if p, _ := (gap.Gap{Envoy: filter}).ProviderOf(both); p.Key() != "fakeGap.enable" {
		t.Errorf("with the filter declared at enable too: %q, want fakeGap.enable", p.Key())
	}
}
