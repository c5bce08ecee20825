// Package toolcache is the test side of the tools cache the Makefile
// fills (~/.cache/globalconfig/tools): the command that runs one suite
// with the tools' environment, and the check that a test-side tool built
// from this checkout's sources (the compat decoders, and any tool built
// the same way) is not stale.
//
// A tool built from the checkout records what it was built from in a
// manifest beside the binary, <binary>.inputs, written by its build
// script each time it runs:
//
//	key <the build key, as in <binary>.key>
//	file <path from the repository root> <sha256>
//	deps <package pattern>...
//	match <regexp>
//	import <package>
//
// "file" lines are the sources the build copies; "deps", "match" and
// "import" say that the tool links every package matching the regexp
// among the dependencies of those packages (for the compat decoders: the
// Envoy API packages our output can name), and which ones that was. Check
// recomputes each from the checkout, so a tool built before an item
// imported a new Envoy extension is reported as stale, with the make
// target that rebuilds it, instead of failing on the type it lacks.
package toolcache

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// RepoRoot is the root of the checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Command is the command that runs the current test package (and the
// test -run names, when it was given one) with the tools built and their
// environment set: `make test-one PKG=./test/proxy RUN=TestDeclaredTraffic`.
func Command() string {
	pkg := "./test/<suite>"
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(RepoRoot(), wd); err == nil && !strings.HasPrefix(rel, "..") {
			pkg = "./" + filepath.ToSlash(rel)
		}
	}
	cmd := "make test-one PKG=" + pkg
	for _, a := range os.Args[1:] {
		if run, ok := strings.CutPrefix(a, "-test.run="); ok && run != "" {
			cmd += " RUN='" + run + "'"
		}
	}
	return cmd
}

// Unset is the error for a tool's environment variable that is not set:
// it names the command that sets it.
func Unset(what string, envs ...string) error {
	verb := "is"
	if len(envs) > 1 {
		verb = "are"
	}
	return fmt.Errorf("$%s %s not set: %s come from the tools cache; run this suite with `%s` (`make test` runs them all), "+
		"or set the tools' environment in your shell with `eval \"$(make -s test-env)\"`",
		strings.Join(envs, " and $"), verb, what, Command())
}

// StaleError says that a tool is not what the checkout builds, why, and
// which make target rebuilds it.
type StaleError struct {
	Binary  string
	Reasons []string
	Rebuild string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s is stale (%s): rebuild it with `make %s`", e.Binary, strings.Join(e.Reasons, "; "), e.Rebuild)
}

// ManifestSuffix is the suffix of a tool's manifest beside its binary.
const ManifestSuffix = ".inputs"

// Check reports a *StaleError when the tool bin is not what the checkout
// would build now, by its manifest (bin.inputs) against the checkout:
// a source that changed, a package it should link and doesn't (or links
// and no longer should), or a binary rebuilt from other sources since
// (bin.key). rebuild is the make target that rebuilds it. A missing binary
// is an error too, with the same advice.
func Check(bin, rebuild string) error {
	stale := func(reasons ...string) error { return &StaleError{Binary: bin, Reasons: reasons, Rebuild: rebuild} }
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w: build it with `make %s`", err, rebuild)
	}
	m, err := readManifest(bin + ManifestSuffix)
	if os.IsNotExist(err) {
		return stale("no record of what it was built from: " + bin + ManifestSuffix + " is missing")
	}
	if err != nil {
		return err
	}
	var reasons []string
	if key, err := os.ReadFile(bin + ".key"); err != nil || strings.TrimSpace(string(key)) != m.key {
		reasons = append(reasons, "rebuilt from other sources since its manifest was written (another checkout?)")
	}
	root := RepoRoot()
	for _, f := range m.files {
		sum, err := fileSum(filepath.Join(root, f.path))
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("its source %s: %v", f.path, err))
		} else if sum != f.sum {
			reasons = append(reasons, "its source "+f.path+" changed")
		}
	}
	if len(m.deps) > 0 {
		want, err := depsMatching(root, m.deps, m.match)
		if err != nil {
			return fmt.Errorf("%s: %w", bin, err)
		}
		if missing := minus(want, m.imports); len(missing) > 0 {
			reasons = append(reasons, "it lacks "+list(missing)+", which the checkout's "+strings.Join(m.deps, " ")+" import")
		}
		if extra := minus(m.imports, want); len(extra) > 0 {
			reasons = append(reasons, "it was built with "+list(extra)+", which the checkout no longer imports")
		}
	}
	if len(reasons) > 0 {
		return stale(reasons...)
	}
	return nil
}

// list names up to three packages, and how many more.
func list(pkgs []string) string {
	if len(pkgs) <= 3 {
		return strings.Join(pkgs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(pkgs[:3], ", "), len(pkgs)-3)
}

// minus is the elements of a not in b, sorted.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

type manifest struct {
	key   string
	files []struct{ path, sum string }
	deps  []string
	match *regexp.Regexp
	// imports are the packages it links.
	imports []string
}

func readManifest(path string) (*manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &manifest{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		kind, rest, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		fields := strings.Fields(rest)
		bad := func() error {
			return fmt.Errorf("%s:%d: not `%s`", path, n, map[string]string{"key": "key KEY", "file": "file PATH SHA256", "deps": "deps PACKAGE...", "match": "match REGEXP", "import": "import PACKAGE"}[kind])
		}
		switch kind {
		case "":
		case "key", "import":
			if len(fields) != 1 {
				return nil, bad()
			}
			if kind == "key" {
				m.key = fields[0]
			} else {
				m.imports = append(m.imports, fields[0])
			}
		case "file":
			if len(fields) != 2 {
				return nil, bad()
			}
			m.files = append(m.files, struct{ path, sum string }{fields[0], fields[1]})
		case "deps":
			if len(fields) == 0 {
				return nil, bad()
			}
			m.deps = fields
		case "match":
			if m.match, err = regexp.Compile(rest); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
		default:
			return nil, fmt.Errorf("%s:%d: unknown line %q", path, n, kind)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if m.key == "" || (len(m.deps) > 0) != (m.match != nil) {
		return nil, fmt.Errorf("%s: needs a key, and deps and match together", path)
	}
	return m, nil
}

func fileSum(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

var (
	depsMu    sync.Mutex
	depsCache = map[string][]string{}
)

// depsMatching lists the dependencies of the packages patterns (in the
// main module, from root) whose import path match matches: as `go list
// -deps` gives them, once per process.
func depsMatching(root string, patterns []string, match *regexp.Regexp) ([]string, error) {
	depsMu.Lock()
	defer depsMu.Unlock()
	key := strings.Join(patterns, " ") + "\x00" + match.String()
	if d, ok := depsCache[key]; ok {
		return d, nil
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return nil, fmt.Errorf("go list -deps %s: %w: %s", strings.Join(patterns, " "), err, stderr)
	}
	var d []string
	for _, p := range strings.Fields(string(out)) {
		if match.MatchString(p) {
			d = append(d, p)
		}
	}
	slices.Sort(d)
	depsCache[key] = d
	return d, nil
}
