// Package envoybin runs a real Envoy binary: it finds out which Envoy a
// file is, refuses one that is missing, not executable or of another
// version with an error that names what was expected, and loads a
// bootstrap in Envoy's validate mode, returning Envoy's own message when
// Envoy refuses it. The test gateways, the sandbox and `globalconfig
// validate --envoy` all go through it.
package envoybin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Binary is an Envoy binary that ran and said which version it is.
type Binary struct {
	Path string
	// Version is the release it reports, such as "1.40.0".
	Version string
}

// versionLine is Envoy's --version answer:
// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL".
var versionLine = regexp.MustCompile(`version: [0-9a-f]+/(\d+\.\d+\.\d+[^/]*)/`)

// Open checks that path is an executable Envoy and asks it its version.
func Open(ctx context.Context, path string) (*Binary, error) {
	if path == "" {
		return nil, errors.New("envoy: no binary given")
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("envoy: %s does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("envoy: %w", err)
	case st.IsDir():
		return nil, fmt.Errorf("envoy: %s is a directory, not an Envoy binary", path)
	case st.Mode().Perm()&0o111 == 0:
		return nil, fmt.Errorf("envoy: %s is not executable (mode %s)", path, st.Mode().Perm())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	m := versionLine.FindSubmatch(out)
	if err != nil || m == nil {
		return nil, fmt.Errorf("envoy: %s is not an Envoy binary: `%s --version` said %q (%v)", path, path, firstLine(out), err)
	}
	return &Binary{Path: path, Version: string(m[1])}, nil
}

// OpenVersion is Open that also requires the binary to report want.
func OpenVersion(ctx context.Context, path, want string) (*Binary, error) {
	b, err := Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%w; expected Envoy %s there", err, want)
	}
	if b.Version != want {
		return nil, fmt.Errorf("envoy: %s reports version %s, expected %s", path, b.Version, want)
	}
	return b, nil
}

// Minor is the release without its patch level: "1.40".
func (b *Binary) Minor() string {
	parts := strings.SplitN(b.Version, ".", 3)
	if len(parts) < 2 {
		return b.Version
	}
	return parts[0] + "." + parts[1]
}

// Rejected is Envoy refusing a configuration: its own message.
type Rejected struct{ Message string }

func (r *Rejected) Error() string { return "Envoy rejected the configuration: " + r.Message }

// Validate loads bootstrap (JSON or YAML) into the binary in
// `--mode validate`: Envoy builds every listener, cluster and filter it
// names, without binding a port or connecting anywhere, and exits. A
// configuration Envoy refuses is a *Rejected with Envoy's message; a
// binary that fails to run is any other error.
func (b *Binary) Validate(ctx context.Context, bootstrap []byte) error {
	f, err := os.CreateTemp("", "globalconfig-envoy-validate-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(bootstrap); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Path, "--mode", "validate", "--config-path", f.Name(),
		"--log-level", "error", "--disable-hot-restart", "--concurrency", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		return &Rejected{Message: RejectionMessage(out.String())}
	}
	return fmt.Errorf("envoy %s: %w: %s", b.Path, err, firstLine(out.Bytes()))
}

// RejectionMessage picks Envoy's reason out of its validate-mode output:
// the last "error initializing configuration" line (or the last critical
// line), without the log prefix.
func RejectionMessage(output string) string {
	var last string
	for line := range strings.SplitSeq(output, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if i := strings.Index(line, "error initializing configuration '"); i >= 0 {
			msg := line[i:]
			if j := strings.Index(msg, "': "); j >= 0 {
				msg = msg[j+3:]
			}
			last = msg
			continue
		}
		if last == "" && strings.Contains(line, "[critical]") {
			last = stripLogPrefix(line)
		}
	}
	if last == "" {
		last = strings.TrimSpace(output)
	}
	return last
}

// stripLogPrefix drops "[2026-11-25 07:48:00.000][123][critical][main] [source/...:12] ".
func stripLogPrefix(line string) string {
	for strings.HasPrefix(line, "[") {
		i := strings.Index(line, "] ")
		if i < 0 {
			break
		}
		line = line[i+2:]
	}
	return line
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
