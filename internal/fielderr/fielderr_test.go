package fielderr

import (
	"errors"
	"fmt"
	"testing"
)

func TestListPrefixesNestedPaths(t *testing.T) {
	var inner List
	inner.Addf("port", "is required")
	inner.Addf("", "needs one backend")
	var outer List
	outer.Add("tracing.zipkin", inner.Err())
	outer.Add("gzip", errors.New("plain"))
	got := fmt.Sprint(Flatten(outer.Err()))
	want := "[tracing.zipkin.port: is required tracing.zipkin: needs one backend gzip: plain]"
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	var empty List
	if empty.Err() != nil || Flatten(nil) != nil {
		t.Error("an empty list is not nil")
	}
}

func TestJoin(t *testing.T) {
	for _, c := range [][3]string{{"a", "b", "a.b"}, {"a", "[1]", "a[1]"}, {"", "b", "b"}, {"a", "", "a"}} {
		if got := Join(c[0], c[1]); got != c[2] {
			t.Errorf("Join(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestSortByLineThenPath(t *testing.T) {
	errs := []*Error{{Path: "b", Line: 0}, {Path: "z", Line: 3}, {Path: "a", Line: 3}, {Path: "c", Line: 1}}
	Sort(errs)
	got := ""
	for _, e := range errs {
		got += e.Path
	}
	if got != "cazb" {
		t.Errorf("order %s, want cazb (line order, path within a line, unknown lines last)", got)
	}
}
