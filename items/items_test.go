package items_test

import (
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

type fake struct{ items.Toggle }

func (fake) Validate() error                                       { return nil }
func (fake) Build(envoyfilter.Target) ([]envoyfilter.Patch, error) { return nil, nil }

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
	items.Register(items.Registration{Name: "test-fake", New: newFake})
	if r, ok := items.Lookup("test-fake"); !ok || r.New() == nil {
		t.Fatal("registered item not found")
	}
	mustPanic(t, "twice", func() { items.Register(items.Registration{Name: "test-fake", New: newFake}) })
	mustPanic(t, "empty name", func() { items.Register(items.Registration{New: newFake}) })
	mustPanic(t, "without a factory", func() { items.Register(items.Registration{Name: "test-nofactory"}) })
	mustPanic(t, "valid object name", func() { items.Register(items.Registration{Name: "bad_name!", New: newFake}) })
	if _, ok := items.Lookup("test-nofactory"); ok {
		t.Error("a failed registration was kept")
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
