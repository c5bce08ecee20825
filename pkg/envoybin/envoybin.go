// Package envoybin runs a real Envoy binary: it finds out which Envoy a
// file is, refuses one that is missing, not executable or of another
// version with an error that names what was expected, and loads a
// bootstrap in Envoy's validate mode, returning Envoy's own message when
// Envoy refuses it. A binary copied out of its image together with its
// dynamic loader and libraries (into LibDir beside it) runs through that
// loader where the system lacks one. The test gateways, the sandbox,
// `globalconfig validate --envoy` and the admission webhook's Envoy check
// all go through it.
package envoybin

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Binary is an Envoy binary that ran and said which version it is.
type Binary struct {
	Path string
	// Version is the release it reports, such as "1.40.0".
	Version string
	// loader, when set, runs Path: the dynamic loader copied beside it
	// (see Open), then its arguments.
	loader []string
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
	b := &Binary{Path: path, loader: copiedLoader(path)}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := b.command(ctx, "--version")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	m := versionLine.FindSubmatch(out.Bytes())
	if err != nil || m == nil {
		hint := ""
		if b.loader == nil {
			hint = loaderHint(path, err)
		}
		return nil, fmt.Errorf("envoy: %s is not an Envoy binary: `%s --version` said %q (%v)%s", path, path, firstLine(out.Bytes()), err, hint)
	}
	b.Version = string(m[1])
	return b, nil
}

// LibDir is where Open looks, beside the binary, for the dynamic loader
// and libraries it was copied with.
const LibDir = "lib"

// copiedLoader returns how to run path when its ELF interpreter (the
// dynamic loader it names, e.g. /lib64/ld-linux-x86-64.so.2) is missing
// here but was copied with it into LibDir beside it: that loader, with
// LibDir as its library path. A binary copied out of istio/proxyv2 into a
// distroless static image (globalconfig's) runs so. Nil runs path itself.
func copiedLoader(path string) []string {
	interp := interpreter(path)
	if interp == "" || exists(interp) {
		return nil
	}
	libs := filepath.Join(filepath.Dir(path), LibDir)
	loader := filepath.Join(libs, filepath.Base(interp))
	if !exists(loader) {
		return nil
	}
	return []string{loader, "--library-path", libs}
}

// loaderHint explains an exec failure of path caused by its missing ELF
// interpreter.
func loaderHint(path string, err error) string {
	interp := interpreter(path)
	if err == nil || interp == "" || exists(interp) {
		return ""
	}
	return fmt.Sprintf("; its dynamic loader %s is missing here: copy it, with the libraries `ldd %s` lists, into %s",
		interp, path, filepath.Join(filepath.Dir(path), LibDir))
}

// interpreter is the ELF interpreter path names, "" for a static binary
// or a file that is not ELF.
func interpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}

// exists is a variable so that tests can take a system file away.
var exists = func(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// command runs the binary with args, through its copied loader if any.
// A process that outlives ctx is killed; its output pipes are closed a
// second later even if something it started still holds them.
func (b *Binary) command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append(slices.Clone(b.loader), b.Path), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	return cmd
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
// binary that fails to run, is killed (by a signal: a crash, the kernel's
// OOM killer) or outlives ctx is any other error.
func (b *Binary) Validate(ctx context.Context, bootstrap []byte) error {
	return b.validate(ctx, bootstrap, ".json")
}

// ValidateBinary is Validate of a bootstrap in protobuf's binary encoding,
// the encoding xDS delivers: a typed config (Any) of a type the binary
// does not link stays opaque until a filter needs it, so an optional
// filter the binary lacks is skipped as a proxy skips it, where a JSON
// bootstrap can't even be parsed ("could not find @type").
func (b *Binary) ValidateBinary(ctx context.Context, bootstrap []byte) error {
	return b.validate(ctx, bootstrap, ".pb")
}

// validate writes bootstrap to a file whose extension (.json, .pb) tells
// Envoy its encoding, and validates it.
func (b *Binary) validate(ctx context.Context, bootstrap []byte, ext string) error {
	f, err := os.CreateTemp("", "globalconfig-envoy-validate-*"+ext)
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
	cmd := b.command(ctx, "--mode", "validate", "--config-path", f.Name(),
		"--log-level", "error", "--disable-hot-restart", "--concurrency", "1")
	// Validate mode opens the files a configuration names (access logs):
	// a relative path lands in the temporary directory, not in the
	// caller's working directory.
	cmd.Dir = filepath.Dir(f.Name())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err == nil {
		return nil
	}
	// Envoy's verdict is an exit of its own; a signal is not one.
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Exited() && ctx.Err() == nil {
		return &Rejected{Message: RejectionMessage(out.String())}
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	if said := lastLine(out.Bytes()); said != "" {
		return fmt.Errorf("envoy %s: %w: %s", b.Path, err, said)
	}
	return fmt.Errorf("envoy %s: %w", b.Path, err)
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

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return stripLogPrefix(s)
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
