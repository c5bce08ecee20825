package harness

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// RunStamp says when and where a benchmark ran: "2026-11-25 10:30 UTC, 2
// cores, go1.26.8".
func RunStamp() string {
	return fmt.Sprintf("run %s on %d cores, %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.Version())
}

// BenchReportTitle heads docs/benchmarks.md.
const BenchReportTitle = "# Benchmarks\n\nWritten by `make bench`: each section by the benchmark it names, replaced by its latest run. The Envoy-level figures are in [benchmarks-envoy.md](benchmarks-envoy.md).\n"

// WriteReportSection writes body as the section name of the report at
// path, between "<!-- name: begin -->" and "<!-- name: end -->" lines: it
// replaces the section of an earlier run, or is added at the end; a
// missing file starts from title. Each figure of a report has one
// section, written by the benchmark that measures it.
func WriteReportSection(path, title, name, body string) error {
	data, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		data = []byte(title)
	case err != nil:
		return err
	}
	begin, end := fmt.Sprintf("<!-- %s: begin -->\n", name), fmt.Sprintf("<!-- %s: end -->\n", name)
	section := begin + strings.TrimRight(body, "\n") + "\n" + end
	text := string(data)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i >= 0 && j > i {
		text = text[:i] + section + text[j+len(end):]
	} else {
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
