package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/globalconfig/globalconfig/test/convertinput"
	"github.com/globalconfig/globalconfig/test/harness"
)

// BenchmarkConvertLimits runs the globalconfig binary's converters on the
// largest inputs they take, each once: a 1 MiB Higress document, a 1 MiB
// ingress-nginx ConfigMap and 65,536 allowed ranges, with their wall time
// and the process's peak RSS (getrusage).
func BenchmarkConvertLimits(b *testing.B) {
	if setupErr != nil {
		b.Skip(setupErr)
	}
	dir := b.TempDir()
	cases := []struct {
		name, from string
		input      []byte
		exit       int
	}{
		{"1 MiB Higress document (a long gzip.contentType list)", "higress", convertinput.HigressContentTypes(1<<20 - 1024), 0},
		{"1 MiB ingress-nginx ConfigMap (keys it does not read, each given a did-you-mean)", "ingress-nginx", convertinput.NginxKeys(1<<20 - 1024), 5},
		{"ingress-nginx whitelist-source-range of 65,536 ranges", "ingress-nginx", convertinput.NginxRanges(65536), 5},
	}
	var rows bytes.Buffer
	for i, c := range cases {
		path := filepath.Join(dir, fmt.Sprintf("in-%d.yaml", i))
		if err := os.WriteFile(path, c.input, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(controlBin, "convert", "--from", c.from, "-f", path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		if code := cmd.ProcessState.ExitCode(); code != c.exit {
			b.Fatalf("%s: exit %d (%v), want %d: %.300s", c.name, code, err, c.exit, stderr.String())
		}
		rss := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // KiB → MiB
		b.ReportMetric(harness.Ms(took), fmt.Sprintf("case%d-ms", i))
		fmt.Fprintf(&rows, "| %s, %d bytes | %.0f ms | %.1f MiB | %d |\n", c.name, len(c.input), harness.Ms(took), rss, c.exit)
	}
	writeReport(b, "convert", fmt.Sprintf(`## Converting the largest inputs

Written by BenchmarkConvertLimits in test/integration: the globalconfig binary's `+"`convert`"+` on the largest inputs it takes (1 MiB, what a ConfigMap holds; larger ones are refused before parsing), each run once; %s.

| input | wall time | peak RSS | exit |
|---|---|---|---|
%s`, harness.RunStamp(), rows.String()))
}
