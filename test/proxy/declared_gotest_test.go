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
)

// goTestTimeout bounds one declared goTest: its build (a link, with the
// build cache warm) and its run.
const goTestTimeout = 3 * time.Minute

// testEvent is one line of go test -json (cmd/test2json's TestEvent).
type testEvent struct {
	Action string
	Test   string
	Output string
}

// runGoTest runs the test function name of the package in pkgDir as a
// subprocess, go test -count=1 -run '^name$' -json, with the gateway's
// base URL and Envoy release in harness.EnvProxyURL and
// harness.EnvProxyEnvoy. It returns nil only when that test ran and
// passed: a skip, a test that never ran (no such test, a build failure)
// and a failure are refused, with the test's output. took is how long the
// subprocess ran, its build included.
func runGoTest(ctx context.Context, pkgDir, name string, g *gw) (took time.Duration, err error) {
	root := harness.RepoRoot()
	rel, err := filepath.Rel(root, pkgDir)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, goTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", goTestTimeout.String(), "-run", "^"+name+"$", "-json", "./"+filepath.ToSlash(rel))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), harness.EnvProxyURL+"="+g.url(""), harness.EnvProxyEnvoy+"="+g.Binary.Version)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	took = time.Since(start)
	var (
		ran    bool
		result string
		output strings.Builder // the test's own lines
		other  strings.Builder // the package's (build errors, no tests to run)
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
		case ev.Action == "output" || ev.Action == "build-output":
			other.WriteString(ev.Output)
		}
	}
	what := fmt.Sprintf("goTest %s (go test -run '^%s$' ./%s, %.1fs)", name, name, filepath.ToSlash(rel), took.Seconds())
	switch {
	case !ran:
		exit := "go test passed"
		if runErr != nil {
			exit = runErr.Error()
		}
		return took, fmt.Errorf("%s did not run, which proves nothing (no test of that name, or the package does not build; %s):\n%s%s", what, exit, other.String(), stderr.String())
	case result == "skip":
		return took, fmt.Errorf("%s skipped, which proves nothing: a declared goTest must run at the gateway:\n%s", what, output.String())
	case result != "pass":
		return took, fmt.Errorf("%s failed:\n%s%s", what, output.String(), stderr.String())
	case runErr != nil:
		return took, fmt.Errorf("%s passed, but go test failed: %w\n%s%s", what, runErr, other.String(), stderr.String())
	}
	return took, nil
}
