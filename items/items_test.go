package items_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

type fake struct{ items.Toggle }

func (fake) Validate() error                     { return nil }
func (fake) Build() ([]envoyfilter.Patch, error) { return nil, nil }

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), want) {
			t.Errorf("panic %v, want one mentioning %q", r, want)
		}
	}()
	f()
}

func TestRegister(t *testing.T) {
	newFake := func() items.Item { return &fake{} }
	stage := envoyfilter.StageHeaders
	items.Register(items.Registration{Name: "test-fake", Stage: stage, Slot: 9, Purpose: "tests", Where: "tests", EnabledByDefault: true, New: newFake})
	r, ok := items.Lookup("test-fake")
	if !ok || r.New() == nil {
		t.Fatal("registered item not found")
	}
	if !r.NewItem().Enabled() {
		t.Error("EnabledByDefault did not reach the item's enable key")
	}
	mustPanic(t, "twice", func() { items.Register(items.Registration{Name: "test-fake", Stage: stage, New: newFake}) })
	mustPanic(t, "empty name", func() { items.Register(items.Registration{Stage: stage, New: newFake}) })
	mustPanic(t, "without a factory", func() { items.Register(items.Registration{Name: "test-nofactory", Stage: stage}) })
	mustPanic(t, "no stage", func() { items.Register(items.Registration{Name: "test-nostage", New: newFake}) })
	mustPanic(t, "embed items.Toggle", func() {
		items.Register(items.Registration{Name: "test-notoggle", Stage: stage, New: func() items.Item { return notToggled{} }})
	})
	mustPanic(t, "valid object name", func() { items.Register(items.Registration{Name: "bad_name!", Stage: stage, New: newFake}) })
	mustPanic(t, "a canary rollout gives", func() { items.Register(items.Registration{Name: "gzipCanary", Stage: stage, New: newFake}) })
	for _, name := range []string{"test-nofactory", "test-nostage", "test-notoggle"} {
		if _, ok := items.Lookup(name); ok {
			t.Errorf("the failed registration %s was kept", name)
		}
	}
}

type notToggled struct{}

func (notToggled) Enabled() bool                       { return true }
func (notToggled) Validate() error                     { return nil }
func (notToggled) Build() ([]envoyfilter.Patch, error) { return nil, nil }

// An item's placement is its slot's, whoever else registers: slots count
// up before the router and down at the front of the chain, so the chain
// stands in slot order either way; a slot taken, out of range or without
// a purpose is refused.
func TestPlacement(t *testing.T) {
	fakeItem := func() items.Item { return &fake{} }
	for _, c := range []struct {
		stage envoyfilter.Stage // empty in this test binary
		want  map[int]int32     // slot → priority offset
	}{
		// Inserted before the router: a later slot sits closer to it.
		{envoyfilter.StageObservability, map[int]int32{0: 0, 3: 3, 9: 9}},
		// Inserted first: slot 0 is applied last, so it stands in front.
		{envoyfilter.StageCompression, map[int]int32{0: 9, 3: 6, 9: 0}},
	} {
		prefix := "test-" + strings.ToLower(c.stage.Name) + "-"
		for slot, offset := range c.want {
			name := fmt.Sprintf("%s%d", prefix, slot)
			items.Register(items.Registration{Name: name, Stage: c.stage, Slot: slot, Purpose: "tests", Where: "tests", New: fakeItem})
			r, _ := items.Lookup(name)
			if got := r.Placement(); got.Priority != c.stage.Priority+offset || got.Insert != c.stage.Insert {
				t.Errorf("%s: placement %+v, want priority %d", r.Name, got, c.stage.Priority+offset)
			}
		}
		// Another item in a free slot moves no one.
		before, _ := items.Lookup(prefix + "3")
		items.Register(items.Registration{Name: prefix + "x", Stage: c.stage, Slot: 4, Purpose: "tests", Where: "tests", New: fakeItem})
		if after, _ := items.Lookup(prefix + "3"); after.Placement() != before.Placement() {
			t.Errorf("registering another item moved %s", before.Name)
		}
	}
	st := envoyfilter.StageConnection
	items.Register(items.Registration{Name: "test-slot-1", Stage: st, Slot: 7, Purpose: "tests", Where: "tests", New: fakeItem})
	mustPanic(t, "share slot 7 of stage connection; take a free one where the filter belongs: ", func() {
		items.Register(items.Registration{Name: "test-slot-2", Stage: st, Slot: 7, Purpose: "tests", Where: "tests", New: fakeItem})
	})
	mustPanic(t, "not between 0 and 9", func() {
		items.Register(items.Registration{Name: "test-slot-3", Stage: st, Slot: st.Width, Purpose: "tests", Where: "tests", New: fakeItem})
	})
	mustPanic(t, "no Purpose", func() {
		items.Register(items.Registration{Name: "test-slot-4", Stage: st, Slot: 8, New: fakeItem})
	})
}

// An enum whose Values has a pointer receiver is still an enum.
type pointerEnum string

func (*pointerEnum) Values() []string { return []string{"ONE", "TWO"} }

func TestCapabilitiesOnEitherReceiver(t *testing.T) {
	if v, ok := items.EnumValues(reflect.TypeFor[pointerEnum]()); !ok || len(v) != 2 {
		t.Errorf("pointer-receiver enum not found: %v %v", v, ok)
	}
	if _, ok := items.EnumValues(reflect.TypeFor[string]()); ok {
		t.Error("a plain string is an enum")
	}
	if types, ok := items.SchemaTypes(reflect.TypeFor[items.Seconds]()); !ok || len(types) != 2 {
		t.Errorf("Seconds schema types: %v %v", types, ok)
	}
	var s items.Seconds
	if _, ok := items.AsScalarDecoder(reflect.ValueOf(&s).Elem()); !ok {
		t.Error("Seconds is not a scalar decoder")
	}
}

func TestDurations(t *testing.T) {
	cases := []struct {
		tag, value string
		seconds    time.Duration
		millis     time.Duration
		bad        bool
	}{
		{tag: "!!int", value: "90", seconds: 90 * time.Second, millis: 90 * time.Millisecond},
		{tag: "!!str", value: "1m30s", seconds: 90 * time.Second, millis: 90 * time.Second},
		{tag: "!!str", value: "250ms", seconds: 250 * time.Millisecond, millis: 250 * time.Millisecond},
		{tag: "!!int", value: "-1", bad: true},
		{tag: "!!str", value: "-5s", bad: true},
		{tag: "!!str", value: "soon", bad: true},
		// A fraction of the unit: Higress writes fillInterval: 0.05.
		{tag: "!!float", value: "1.5", seconds: 1500 * time.Millisecond, millis: 1500 * time.Microsecond},
		{tag: "!!float", value: "0.05", seconds: 50 * time.Millisecond, millis: 50 * time.Microsecond},
		{tag: "!!float", value: "-0.5", bad: true},
		{tag: "!!float", value: ".nan", bad: true},
		{tag: "!!float", value: ".inf", bad: true},
		{tag: "!!float", value: "1e30", bad: true},
		// Past Go's range (about 290 years): refused, as too long.
		{tag: "!!str", value: "999999999999h", bad: true},
		{tag: "!!int", value: "99999999999999999999", bad: true},
	}
	for _, c := range cases {
		var s items.Seconds
		var m items.Millis
		errS, errM := s.DecodeScalar(c.tag, c.value), m.DecodeScalar(c.tag, c.value)
		if c.bad {
			if errS == nil || errM == nil {
				t.Errorf("%s %q accepted", c.tag, c.value)
			}
			continue
		}
		if errS != nil || errM != nil || s.Duration != c.seconds || m.Duration != c.millis {
			t.Errorf("%s %q: seconds %v (%v), millis %v (%v)", c.tag, c.value, s.Duration, errS, m.Duration, errM)
		}
	}
}

func TestPort(t *testing.T) {
	for value, want := range map[string]items.Port{"9411": 9411, "1": 1, "65535": 65535} {
		for _, tag := range []string{"!!int", "!!str"} {
			var p items.Port
			if err := p.DecodeScalar(tag, value); err != nil || p != want {
				t.Errorf("%s %q: %d, %v", tag, value, p, err)
			}
		}
	}
	for _, value := range []string{"0", "65536", "http", "-1", ""} {
		var p items.Port
		if err := p.DecodeScalar("!!str", value); err == nil {
			t.Errorf("port %q accepted", value)
		}
	}
}

// oneOfItem has a key that takes only some values.
type oneOfItem struct {
	Code uint32 `json:"code"`
}

func (*oneOfItem) Ranges() []items.Range {
	r := items.OneOf("code", 400, 401, 402, 404, 500)
	r.Why = "the codes it knows"
	return []items.Range{r}
}

func TestOneOf(t *testing.T) {
	for code, want := range map[uint32]string{
		401: "",
		500: "",
		403: "code: must be one of 400-402, 404, 500, got 403: the codes it knows",
		399: "code: must be one of 400-402, 404, 500, got 399: the codes it knows",
		501: "code: must be one of 400-402, 404, 500, got 501: the codes it knows",
	} {
		var p items.Problems
		items.CheckRanges(&p, &oneOfItem{Code: code})
		got := ""
		if err := p.Err(); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%d: %q, want %q", code, got, want)
		}
	}
}

// ctxItem has a key that works on gateways only, and a section that works
// on gateways and inbound sidecars.
type ctxItem struct {
	Proxy bool     `json:"proxy"`
	List  []string `json:"list"`
	Sub   *struct {
		N int `json:"n"`
	} `json:"sub"`
}

func (*ctxItem) ContextLimits() []items.ContextLimit {
	gw := []envoyfilter.Context{envoyfilter.ContextGateway}
	return []items.ContextLimit{
		{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway, envoyfilter.ContextSidecarInbound}, Why: "the section's reason"},
		{Path: "proxy", Contexts: gw, Why: "proxy's reason"},
		{Path: "list", Contexts: gw, Why: "list's reason"},
		{Path: "sub.n", Contexts: gw, Why: "n's reason"},
	}
}

func TestCheckContexts(t *testing.T) {
	check := func(it *ctxItem, c envoyfilter.Context) string {
		var p items.Problems
		items.CheckContexts(&p, it, c)
		if err := p.Err(); err != nil {
			return err.Error()
		}
		return ""
	}
	if got := check(&ctxItem{List: []string{}}, envoyfilter.ContextSidecarInbound); got != "" {
		t.Errorf("unset keys on an allowed section: %q", got)
	}
	got := check(&ctxItem{Proxy: true, List: []string{"a"}, Sub: &struct {
		N int `json:"n"`
	}{N: 1}}, envoyfilter.ContextSidecarInbound)
	want := "proxy: applies to target.context GATEWAY only (got SIDECAR_INBOUND): proxy's reason\n" +
		"list: applies to target.context GATEWAY only (got SIDECAR_INBOUND): list's reason\n" +
		"sub.n: applies to target.context GATEWAY only (got SIDECAR_INBOUND): n's reason"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := check(&ctxItem{}, envoyfilter.ContextAny); got != "applies to target.context GATEWAY or SIDECAR_INBOUND only (got ANY): the section's reason" {
		t.Errorf("the section on ANY: %q", got)
	}
}

type badCtxItem struct{}

func (*badCtxItem) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Path: "nope", Contexts: []envoyfilter.Context{envoyfilter.ContextGateway}}}
}

func TestCheckContextsBadPath(t *testing.T) {
	mustPanic(t, "has no key \"nope\"", func() {
		var p items.Problems
		items.CheckContexts(&p, &badCtxItem{}, envoyfilter.ContextAny)
	})
}
