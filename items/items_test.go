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
	items.Register(items.Registration{Name: "test-fake", Stage: stage, EnabledByDefault: true, New: newFake})
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

// Items of one stage get priorities of their own, in name order, and the
// stage's insert position; a full stage is refused.
func TestPlacement(t *testing.T) {
	for _, c := range []struct {
		stage envoyfilter.Stage // empty in this test binary
		ranks map[string]int32
	}{
		// Inserted before the router: a later item sits closer to it.
		{envoyfilter.StageObservability, map[string]int32{"b": 0, "c": 1, "d": 2}},
		// Inserted first: a later item sits in front, so ranks count down.
		{envoyfilter.StageCompression, map[string]int32{"b": 2, "c": 1, "d": 0}},
	} {
		prefix := "test-" + strings.ToLower(c.stage.Name) + "-"
		for _, name := range []string{"c", "b", "d"} {
			items.Register(items.Registration{Name: prefix + name, Stage: c.stage, New: func() items.Item { return &fake{} }})
		}
		for name, rank := range c.ranks {
			r, _ := items.Lookup(prefix + name)
			if got := r.Placement(); got.Priority != c.stage.Priority+rank || got.Insert != c.stage.Insert {
				t.Errorf("%s: placement %+v, want priority %d", r.Name, got, c.stage.Priority+rank)
			}
		}
	}
	full := envoyfilter.StageConnection
	for i := range envoyfilter.StageWidth {
		items.Register(items.Registration{Name: fmt.Sprintf("test-full-%d", i), Stage: full, New: func() items.Item { return &fake{} }})
	}
	mustPanic(t, "is full", func() {
		items.Register(items.Registration{Name: "test-one-too-many", Stage: full, New: func() items.Item { return &fake{} }})
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
		{tag: "!!float", value: "1.5", bad: true},
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

func TestCheckRange(t *testing.T) {
	var p items.Problems
	items.CheckRange(&p, "a", 5, 1, 9)
	items.CheckRange(&p, "b", 10, 1, 9)
	items.CheckRange(&p, "c", 0.5, 1.0, 9.0)
	if err := p.Err(); err == nil || p.Len() != 2 || !strings.Contains(err.Error(), "b: must be between 1 and 9, got 10") {
		t.Errorf("problems: %v", err)
	}
}
