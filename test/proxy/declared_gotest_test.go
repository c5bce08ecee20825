package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/test/harness"
	"github.com/globalconfig/globalconfig/test/harness/declared"
)

// goTestTimeout bounds each step of a declared goTest: the build of its
// package's test binary (a link, with the build cache warm), and each run.
const goTestTimeout = 3 * time.Minute

// goTestBinary is an item package's test binary, built once for a case
// and run at each gateway.
type goTestBinary struct {
	path   string        // the binary
	pkgDir string        // the package's folder, where it runs (as go test runs it)
	pkg    string        // ./items/<pkg>, for messages
	build  time.Duration // how long go test -c took
}

// buildGoTest builds the test binary of the package in pkgDir into dir
// (go test -c, with the race detector when this suite has it, so that
// the build reuses this suite's compiled packages).
func buildGoTest(ctx context.Context, pkgDir, dir string) (*goTestBinary, error) {
	root := harness.RepoRoot()
	rel, err := filepath.Rel(root, pkgDir)
	if err != nil {
		return nil, err
	}
	b := &goTestBinary{path: filepath.Join(dir, filepath.Base(pkgDir)+".test"), pkgDir: pkgDir, pkg: "./" + filepath.ToSlash(rel)}
	args := []string{"test", "-c", "-o", b.path}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(ctx, goTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, b.pkg)...)
	cmd.Dir = root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	b.build = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("go test -c %s: %w\n%s", b.pkg, err, out)
	}
	if _, err := os.Stat(b.path); err != nil {
		return nil, fmt.Errorf("go test -c %s wrote no test binary (a package without test files?): %w", b.pkg, err)
	}
	return b, nil
}

// testEvent is one line of test2json's output (cmd/test2json's TestEvent).
type testEvent struct {
	Action string
	Test   string
	Output string
}

// run runs the test function name of the binary's package at g, as go
// test -count=1 -run '^name$' -json would, with the gateway's base URL and
// Envoy release in declared.EnvProxyURL and declared.EnvProxyEnvoy, and its
// admin in declared.EnvProxyAdmin. It
// returns nil only when that test ran and passed: a skip, a test that
// never ran (no test of that name) and a failure are refused, with the
// test's output. took is how long the run took.
func (b *goTestBinary) run(ctx context.Context, name string, g *gw) (took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, goTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "tool", "test2json", "-t", b.path,
		"-test.v=test2json", "-test.count=1", "-test.timeout="+goTestTimeout.String(), "-test.run=^"+name+"$")
	cmd.Dir = b.pkgDir
	cmd.Env = append(os.Environ(), declared.EnvProxyURL+"="+g.url(""), declared.EnvProxyEnvoy+"="+g.Binary.Version,
		declared.EnvProxyAdmin+"=http://"+g.AdminAddr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	took = time.Since(start)
	var (
		ran    bool
		result string
		output strings.Builder // the test's own lines
		other  strings.Builder // the binary's (no tests to run, a panic before any test)
	)
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			other.WriteString(sc.Text() + "\n")
			continue
		}
		switch {
		case ev.Test == name && ev.Action == "run":
			ran = true
		case ev.Test == name && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			result = ev.Action
		case ev.Action == "output" && (ev.Test == name || strings.HasPrefix(ev.Test, name+"/")):
			output.WriteString(ev.Output)
		case ev.Action == "output":
			other.WriteString(ev.Output)
		}
	}
	what := fmt.Sprintf("goTest %s (%s, %.1fs)", name, b.pkg, took.Seconds())
	switch {
	case !ran:
		exit := "the binary passed"
		if runErr != nil {
			exit = runErr.Error()
		}
		return took, fmt.Errorf("%s did not run, which proves nothing (no test of that name; %s):\n%s%s", what, exit, other.String(), stderr.String())
	case result == "skip":
		return took, fmt.Errorf("%s skipped, which proves nothing: a declared goTest must run at the gateway:\n%s", what, output.String())
	case result != "pass":
		return took, fmt.Errorf("%s failed:\n%s%s", what, output.String(), stderr.String())
	case runErr != nil:
		return took, fmt.Errorf("%s passed, but its binary failed: %w\n%s%s", what, runErr, other.String(), stderr.String())
	}
	return took, nil
}
