package status_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

func TestRoundTrip(t *testing.T) {
	since := time.Date(2026, 3, 1, 10, 0, 0, 123, time.UTC)
	st := status.New(status.Invalid)
	st.Errors = []status.Problem{{Path: "gzip.chunkSize", Line: 3, Message: "must be between 4096 and 65536, got 100"}}
	st.Applied = &status.AppliedSet{Hash: "abc", Time: since, EnvoyFilters: []status.EnvoyFilter{{Namespace: "istio-system", Name: "globalconfig-gzip", Item: "gzip"}},
		Change: status.Change{Added: []string{"gzip"}, Changed: []string{}, Removed: []string{}}}
	st.Rollout = &rollout.Status{Version: "abc", Since: since, Selected: 1, Synced: 1, Proxies: []rollout.Proxy{{Name: "gw-0.istio-system", State: rollout.Synced, Sent: &since}}}
	text, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := status.Read(map[string]string{status.Key: text})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Errorf("round trip:\n%+v\n%+v", back, st)
	}
	if got := st.Errors[0].String(); got != "gzip.chunkSize: must be between 4096 and 65536, got 100 (config.yaml line 3)" {
		t.Errorf("problem %q", got)
	}
	if st.Applied.Change.Of("gzip") != "added" || st.Applied.Change.Of("zstd") != "" {
		t.Error("Change.Of")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`{"state": "Applied"}`, "no version"},
		{`{"version": 4, "state": "Applied"}`, "version 4, this globalconfig reads versions 1 to 3"},
		{`{"version": 0, "state": "Applied"}`, "version 0, this globalconfig reads versions 1 to 3"},
		{`{"version": 1, "state": "Applied", "lastChange": "x"}`, `unknown field "lastChange"`},
		{`state: Applied`, "invalid character"},
	} {
		_, err := status.Parse(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.text, err, c.want)
		}
	}
	if _, err := status.Read(map[string]string{"state": "Applied"}); err == nil || !strings.Contains(err.Error(), "no key status.json") {
		t.Errorf("an old status: %v", err)
	}
}

// A version 1 status, as the previous release wrote it (a canary record
// without a strategy), still reads: its canary record survives an
// upgrade, so a rolled back document is not tried again.
func TestParseReadsVersion1(t *testing.T) {
	st, err := status.Parse(`{"version": 1, "state": "RolledBack", "errors": [], "warnings": [], "sink": "kube",
		"canary": {"phase": "RolledBack", "document": "d", "from": "a", "to": "b", "items": ["gzip"], "label": "globalconfig.io/canary",
		"needed": "100%", "bakeTime": "1m0s", "started": "2026-11-26T02:51:33Z"}}`)
	if err != nil || st.Version != 1 || st.Canary == nil || st.Canary.Phase != "RolledBack" || st.Canary.Direct() {
		t.Errorf("%v: %+v", err, st)
	}
}

// docs/status.md names every field of the status, nested ones by their
// dotted path, and its example reads as the current version.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var paths []string
	walk(reflect.TypeOf(status.Status{}), "", &paths)
	if len(paths) < 30 {
		t.Fatalf("walked only %d fields: %v", len(paths), paths)
	}
	for _, p := range paths {
		if !strings.Contains(text, "`"+p+"`") {
			t.Errorf("docs/status.md does not document `%s`", p)
		}
	}
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("docs/status.md has no JSON example")
	}
	if _, err := status.Parse(m[1]); err != nil {
		t.Errorf("the example does not read: %v", err)
	}
}

// walk lists the JSON paths of t's fields: "applied.hash",
// "rollout.proxies[].name".
func walk(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		*out = append(*out, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice {
			walk(ft.Elem(), path+"[].", out)
		} else {
			walk(ft, path+".", out)
		}
	}
}
