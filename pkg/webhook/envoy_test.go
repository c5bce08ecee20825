package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
)

// withoutBrotli is Envoy started without the brotli compressor library,
// as a build without that extension would be (istio-proxy lacks
// envoy.filters.http.custom_response the same way): globalconfig's
// validation accepts a brotli section, and only that binary can say it
// lacks the extension.
const withoutBrotli = "--disable-extensions envoy.compression.compressor/envoy.compression.brotli.compressor"

// realEnvoy is the Envoy `make test` installs.
func realEnvoy(t *testing.T) string {
	t.Helper()
	p := os.Getenv("GLOBALCONFIG_ENVOY")
	if p == "" {
		t.Skip("GLOBALCONFIG_ENVOY is not set: run `make test-one PKG=./pkg/webhook` (or `make test`), which installs Envoy and sets it")
	}
	return p
}

// countingEnvoy wraps the real Envoy in a script that adds args and
// appends a line to the returned file each time it runs in validate mode.
func countingEnvoy(t *testing.T, args string) (path, counter string) {
	t.Helper()
	dir := t.TempDir()
	path, counter = filepath.Join(dir, "envoy"), filepath.Join(dir, "runs")
	script := "#!/bin/sh\n[ \"$1\" = --version ] || echo run >> '" + counter + "'\nexec '" + realEnvoy(t) + "' " + args + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, counter
}

// envoyRuns is how many times the counting Envoy ran in validate mode.
func envoyRuns(t *testing.T, counter string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

func envoyHandler(t *testing.T, path string) (*Handler, *EnvoyCheck) {
	t.Helper()
	c, err := NewEnvoyCheck(context.Background(), path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Handler{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Envoy: c}, c
}

// A document globalconfig accepts and the given Envoy refuses is denied
// with Envoy's own message, quoted, and the item it refuses on its own;
// one Envoy accepts is admitted.
func TestEnvoyCheckDenies(t *testing.T) {
	path, counter := countingEnvoy(t, withoutBrotli)
	h, c := envoyHandler(t, path)
	ctx := context.Background()

	resp := h.review(ctx, request(t, admissionv1.Create, "brotli: {}\n", ""))
	if resp.Allowed {
		t.Fatalf("admitted: %+v", resp)
	}
	msg := resp.Result.Message
	t.Logf("denial:\n%s", msg)
	for _, want := range []string{
		EnvoyRefusalPrefix,
		"envoy " + c.Binary.Version + " (--envoy; a proxy of Istio " + c.Istio() + ")",
		`GATEWAY configuration: "Didn't find a registered implementation for type: 'envoy.extensions.compression.brotli.compressor.v3.Brotli'"`,
		"refused on their own: brotli",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the denial does not say %q", want)
		}
	}

	before := envoyRuns(t, counter)
	resp = h.review(ctx, request(t, admissionv1.Update, "gzip: {}\n", "brotli: {}\n"))
	if !resp.Allowed {
		t.Fatalf("a document Envoy loads was denied: %s", resp.Result.Message)
	}
	for _, w := range resp.Warnings {
		if strings.HasPrefix(w, EnvoyFailedWarning) {
			t.Errorf("warning %q", w)
		}
	}
	if envoyRuns(t, counter) == before {
		t.Error("the edit was admitted without an Envoy run")
	}
}

// The example document, with every item, is admitted by an Envoy with
// every extension, in one Envoy run.
func TestEnvoyCheckAdmitsTheExample(t *testing.T) {
	path, counter := countingEnvoy(t, "")
	h, c := envoyHandler(t, path)
	doc := exampleDocument(t)
	start := envoyRuns(t, counter)
	resp := h.review(context.Background(), request(t, admissionv1.Create, doc, ""))
	if !resp.Allowed {
		t.Fatalf("the example was denied: %s", resp.Result.Message)
	}
	if got := envoyRuns(t, counter) - start; got != 1 || c.Runs() != 1 {
		t.Errorf("%d Envoy runs (%d checks), want 1", got, c.Runs())
	}
}

// Only an edit that changes the EnvoyFilters pays for an Envoy run: a
// no-op edit, and a set Envoy already judged (the apply after a
// server-side dry run, a refused edit re-applied), reuse what is known.
func TestEnvoyCheckRunsOnlyForChanges(t *testing.T) {
	path, counter := countingEnvoy(t, withoutBrotli)
	h, c := envoyHandler(t, path)
	ctx := context.Background()
	runs := func() int { return envoyRuns(t, counter) }

	start := runs()
	if resp := h.review(ctx, request(t, admissionv1.Create, "gzip: {}\n", "")); !resp.Allowed {
		t.Fatal(resp.Result.Message)
	}
	if runs() != start+1 {
		t.Fatalf("the first document: %d Envoy runs, want 1", runs()-start)
	}
	// A no-op edit of a set this replica never checked (it started after
	// the last change): no run either.
	for name, c := range map[string]struct{ doc, old string }{
		"reformatted, a comment added": {"# reformatted\nbrotli:   {}\n", "brotli: {}\n"},
		"a rollout policy only":        {"brotli: {}\nrollout: {rollbackOn: AnyNACK}\n", "brotli: {}\n"},
	} {
		path, counter := countingEnvoy(t, withoutBrotli)
		fresh, _ := envoyHandler(t, path)
		before := envoyRuns(t, counter)
		resp := fresh.review(ctx, request(t, admissionv1.Update, c.doc, c.old))
		if !resp.Allowed || envoyRuns(t, counter) != before {
			t.Errorf("%s: allowed %v, %d Envoy runs; want admitted without one", name, resp.Allowed, envoyRuns(t, counter)-before)
		}
	}
	before := runs()
	if resp := h.review(ctx, request(t, admissionv1.Create, "gzip: {}\n", "")); !resp.Allowed || runs() != before {
		t.Errorf("the same set again: allowed %v, %d Envoy runs; want its verdict reused", resp.Allowed, runs()-before)
	}
	if resp := h.review(ctx, request(t, admissionv1.Update, "gzip: {}\nbrotli: {}\n", "gzip: {}\n")); resp.Allowed {
		t.Fatal("brotli admitted by an Envoy without it")
	}
	before = runs()
	again := h.review(ctx, request(t, admissionv1.Update, "gzip: {}\nbrotli: {}  # once more\n", "gzip: {}\n"))
	if again.Allowed || runs() != before || !strings.Contains(again.Result.Message, "refused on their own: brotli") {
		t.Errorf("a refused set re-applied: allowed %v, %d Envoy runs, %q; want the refusal again without a run", again.Allowed, runs()-before, again.Result.Message)
	}
	if c.Runs() != 2 {
		t.Errorf("%d checks, want 2", c.Runs())
	}
}

// fakeEnvoy writes a script that answers --version as Envoy 1.40.0 and
// runs body otherwise.
func fakeEnvoy(t *testing.T, body string) *envoybin.Binary {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL'; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := envoybin.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An Envoy that gives no verdict, because it crashes or hangs, never
// blocks admission: the review ends within its time and admits the edit
// on globalconfig's own validation, with a warning that says so.
func TestEnvoyCheckFailsOpen(t *testing.T) {
	h, c := envoyHandler(t, fakeEnvoy(t, "exit 0").Path)
	c.Timeout = 300 * time.Millisecond
	for name, tc := range map[string]struct{ body, want string }{
		"crash": {"echo 'assert failure: boom' >&2\nkill -SEGV $$", "signal: segmentation fault"},
		"hang":  {"exec sleep 60", "context deadline exceeded"},
	} {
		t.Run(name, func(t *testing.T) {
			c.Binary = fakeEnvoy(t, tc.body)
			start := time.Now()
			resp := h.review(context.Background(), request(t, admissionv1.Create, "gzip: {}\n", ""))
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the review took %v", d)
			}
			if !resp.Allowed || len(resp.Warnings) == 0 || !strings.HasPrefix(resp.Warnings[0], EnvoyFailedWarning) || !strings.Contains(resp.Warnings[0], tc.want) {
				t.Fatalf("allowed %v, warnings %q; want admitted with a warning saying %q", resp.Allowed, resp.Warnings, tc.want)
			}
			t.Logf("warning: %s", resp.Warnings[0])
		})
	}
}

// The review answers within the time the API server says it waits
// (?timeout= on the URL), even when --envoy-timeout is longer.
func TestEnvoyCheckAnswersInTheAPIServersTime(t *testing.T) {
	h, c := envoyHandler(t, fakeEnvoy(t, "exit 0").Path)
	c.Timeout = time.Minute
	c.Binary = fakeEnvoy(t, "exec sleep 60")
	body, err := json.Marshal(admissionv1.AdmissionReview{Request: request(t, admissionv1.Create, "gzip: {}\n", "")})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path+"?timeout=1s", bytes.NewReader(body)))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %v; the API server waits 1s", d)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
		t.Fatalf("%v: %s", err, rec.Body.String())
	}
	if !review.Response.Allowed || len(review.Response.Warnings) == 0 || !strings.HasPrefix(review.Response.Warnings[0], EnvoyFailedWarning) {
		t.Errorf("response %+v", review.Response)
	}
}

// A binary that can't check anything is an error at start, naming it.
func TestNewEnvoyCheckRefusesABrokenBinary(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "envoy")
	if _, err := NewEnvoyCheck(ctx, missing, 0, nil); err == nil || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("missing binary: %v", err)
	}
	broken := fakeEnvoy(t, "echo 'error initializing configuration: no' >&2\nexit 1").Path
	if _, err := NewEnvoyCheck(ctx, broken, 0, nil); err == nil || !strings.Contains(err.Error(), broken+" can't validate a configuration here") {
		t.Errorf("binary that validates nothing: %v", err)
	}
}

// exampleDocument is deploy/examples/global-config.yaml's document.
func exampleDocument(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "examples", "global-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["config.yaml"]
}
