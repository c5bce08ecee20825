package agreement

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/globalconfig/globalconfig/items"
)

// An item that refuses, on purpose, what Envoy loads declares the rule
// beside itself, in items/<package>/testdata/deliberate.yaml; keys a
// shared package (items/internal/<package>) gives several items have
// theirs beside that package, with a path that names no item. Each file
// is a list of entries:
//
//	- path: 'accessLog\.path'          # a regexp of the problem's path, anchored
//	  message: 'must be an absolute'   # a regexp of its message
//	  why: 'a relative path is ...'    # the reason, counted in the test's log

// deliberateFile is the name of an item's file of deliberate refusals in
// its testdata folder.
const deliberateFile = "deliberate.yaml"

// deliberateRule is one deliberate refusal: problems whose path and
// message match are stricter than Envoy on purpose, for reason why.
type deliberateRule struct {
	path, msg *regexp.Regexp
	why       string
	// file and entry say where the rule is declared (file is "" for the
	// generic ones); pathSrc is its path as written.
	file    string
	entry   int
	pathSrc string
}

func (r deliberateRule) String() string {
	return fmt.Sprintf("%s: entry %d (path %q)", r.file, r.entry, r.pathSrc)
}

// deliberateEntry is an entry as written in a file.
type deliberateEntry struct {
	Path    string `yaml:"path"`
	Message string `yaml:"message"`
	Why     string `yaml:"why"`
}

// deliberateFiles lists every items/**/testdata/deliberate.yaml under
// root, in path order.
func deliberateFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(filepath.Join(root, "items"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == deliberateFile && filepath.Base(filepath.Dir(path)) == "testdata" {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find the deliberate refusals: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// loadDeliberate is the generic list, then every item's and shared
// package's file under root.
func loadDeliberate(root string) ([]deliberateRule, error) {
	files, err := deliberateFiles(root)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(generic)
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the deliberate refusals: %w", err))
			continue
		}
		name, err := filepath.Rel(root, f)
		if err != nil {
			name = f
		}
		rules, err := readDeliberate(filepath.ToSlash(name), data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, rules...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// readDeliberate reads one file of deliberate refusals strictly: unknown
// keys, a regexp that does not compile, an empty reason, an entry for
// every path are each an error naming the file and the entry.
func readDeliberate(file string, data []byte) ([]deliberateRule, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var entries []*deliberateEntry
	if err := dec.Decode(&entries); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: holds no entries: list the refusals as '- {path: ..., message: ..., why: ...}', or delete the file", file)
		}
		return nil, fmt.Errorf("%s: must be a list of entries with path, message and why: %w", file, err)
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: holds more than one YAML document: keep every entry in one list", file)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s: holds no entries: list the refusals as '- {path: ..., message: ..., why: ...}', or delete the file", file)
	}
	var out []deliberateRule
	var errs []error
	for i, e := range entries {
		at := fmt.Sprintf("%s: entry %d", file, i+1)
		if e == nil {
			errs = append(errs, fmt.Errorf("%s is empty: give path, message and why", at))
			continue
		}
		r := deliberateRule{why: strings.TrimSpace(e.Why), file: file, entry: i + 1, pathSrc: e.Path}
		var err error
		switch {
		case e.Path == "":
			errs = append(errs, fmt.Errorf("%s: path is required: a regexp of the document paths the refusal is about, e.g. 'accessLog\\.path'", at))
		default:
			if r.path, err = regexp.Compile(anchored(e.Path)); err != nil {
				errs = append(errs, fmt.Errorf("%s: path %q is no regexp Go compiles: %w", at, e.Path, err))
			} else if r.path.MatchString("") || r.path.MatchString("x.y") {
				errs = append(errs, fmt.Errorf("%s: path %q matches any path: a rule about every item belongs to test/agreement's generic list", at, e.Path))
			}
		}
		switch {
		case e.Message == "":
			errs = append(errs, fmt.Errorf("%s: message is required: a regexp of the refusal's message", at))
		default:
			if r.msg, err = regexp.Compile(e.Message); err != nil {
				errs = append(errs, fmt.Errorf("%s: message %q is no regexp Go compiles: %w", at, e.Message, err))
			}
		}
		if r.why == "" {
			errs = append(errs, fmt.Errorf("%s: why is required: say why refusing what Envoy loads is right", at))
		}
		out = append(out, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Every file of deliberate refusals reads, and the list holds the
// generic rules and at least one file's.
func TestDeliberateFilesAreWellFormed(t *testing.T) {
	if deliberateErr != nil {
		t.Fatal(deliberateErr)
	}
	files, err := deliberateFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no items/**/testdata/%s found under %s", deliberateFile, root)
	}
	if len(deliberate) <= len(generic) {
		t.Fatalf("%d deliberate refusals loaded, only the %d generic ones", len(deliberate), len(generic))
	}
}

// A malformed file is refused with its name, the entry and what to fix.
func TestDeliberateFileReadStrictly(t *testing.T) {
	for name, c := range map[string]struct{ src, want string }{
		"unknown key":   {"- path: 'a\\.b'\n  message: 'x'\n  why: 'y'\n  reason: 'z'\n", "field reason not found"},
		"bad path":      {"- path: 'a\\.(b'\n  message: 'x'\n  why: 'y'\n", "entry 1: path \"a\\\\.(b\" is no regexp"},
		"bad message":   {"- path: 'a\\.b'\n  message: 'x['\n  why: 'y'\n", "entry 1: message \"x[\" is no regexp"},
		"empty why":     {"- path: 'a\\.b'\n  message: 'x'\n  why: ' '\n", "entry 1: why is required"},
		"no why":        {"- path: 'a\\.b'\n  message: 'x'\n", "entry 1: why is required"},
		"no path":       {"- path: 'a\\.b'\n  message: 'x'\n  why: 'y'\n- message: 'x'\n  why: 'y'\n", "entry 2: path is required"},
		"no message":    {"- path: 'a\\.b'\n  why: 'y'\n", "entry 1: message is required"},
		"every path":    {"- path: '.*'\n  message: 'x'\n  why: 'y'\n", "matches any path"},
		"empty entry":   {"- \n", "entry 1 is empty"},
		"empty file":    {"# nothing\n", "holds no entries"},
		"empty list":    {"[]\n", "holds no entries"},
		"not a list":    {"path: 'a'\n", "must be a list of entries"},
		"two documents": {"- {path: 'a', message: 'x', why: 'y'}\n---\n- {path: 'b', message: 'x', why: 'y'}\n", "more than one YAML document"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readDeliberate("items/x/testdata/deliberate.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("read:\n%s\nwant an error saying %q", c.src, c.want)
			}
			if !strings.HasPrefix(err.Error(), "items/x/testdata/deliberate.yaml: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q: want the file named and %q", err, c.want)
			}
		})
	}
	rules, err := readDeliberate("f", []byte("- {path: 'a\\.b|a\\.c', message: 'x', why: ' y '}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || !rules[0].path.MatchString("a.c") || rules[0].path.MatchString("a.cd") || rules[0].why != "y" {
		t.Errorf("read %+v: want one rule matching a.b or a.c whole, why y", rules)
	}
}

// declaredPath is a path a problem of a declared key can have, and the
// folder of the package of the item that declares it.
type declaredPath struct{ path, dir string }

// declaredPaths are the document paths the registry's items declare: each
// key's path with an index for a list ([0]) and a name for a map's key
// (k), and every path above it (a list or a map as a whole).
func declaredPaths() []declaredPath {
	step := regexp.MustCompile(`\[\]|\.?[^.\[]+`)
	var out []declaredPath
	seen := map[string]bool{}
	for _, r := range items.All() {
		pkg := reflect.TypeOf(r.NewItem()).Elem().PkgPath()
		dir := strings.TrimPrefix(pkg, "github.com/globalconfig/globalconfig/")
		add := func(p string) {
			if !seen[p] {
				seen[p] = true
				out = append(out, declaredPath{p, dir})
			}
		}
		add(r.Name)
		for _, l := range leavesOf(r) {
			p := r.Name
			for _, s := range step.FindAllString(l.path, -1) {
				switch s {
				case "[]":
					p += "[0]"
				case "*", ".*":
					p += ".k"
				default:
					p += "." + strings.TrimPrefix(s, ".")
				}
				add(p)
			}
		}
	}
	return out
}

// alternatives splits a pattern at its top-level |.
func alternatives(pattern string) []string {
	var out []string
	depth, class, start := 0, false, 0
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\':
			i++
		case class:
			class = c != ']'
		case c == '[':
			class = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			out = append(out, pattern[start:i])
			start = i + 1
		}
	}
	return append(out, pattern[start:])
}

// imports reports whether the Go package in folder dir (from the
// repository's root) imports the package in folder pkg.
func imports(dir, pkg string) (bool, error) {
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return false, fmt.Errorf("read the imports of %s: %w", dir, err)
	}
	want := strconv.Quote("github.com/globalconfig/globalconfig/" + pkg)
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			return false, fmt.Errorf("read the imports of %s: %w", dir, err)
		}
		for _, i := range f.Imports {
			if i.Path.Value == want {
				return true, nil
			}
		}
	}
	return false, nil
}

// Every item-specific entry is about keys the items declare: each
// alternative of its path matches a declared key's path, and only keys
// of the file's own item when the file is an item's, or of the items
// that import the shared package when it is a shared package's. An entry
// for a key that is gone, or in the wrong file, fails, naming the file
// and the entry.
func TestDeliberateEntriesMatchDeclaredKeys(t *testing.T) {
	if deliberateErr != nil {
		t.Fatal(deliberateErr)
	}
	declared := declaredPaths()
	users := map[[2]string]bool{} // {item folder, shared folder}: the item imports it
	uses := func(item, shared string) bool {
		k := [2]string{item, shared}
		if v, ok := users[k]; ok {
			return v
		}
		v, err := imports(item, shared)
		if err != nil {
			t.Fatal(err)
		}
		users[k] = v
		return v
	}
	checked := 0
	for _, r := range deliberate {
		if r.file == "" {
			continue
		}
		dir := strings.TrimSuffix(r.file, "/testdata/"+deliberateFile)
		shared := strings.HasPrefix(dir, "items/internal/")
		for _, alt := range alternatives(r.pathSrc) {
			re, err := regexp.Compile(anchored(alt))
			if err != nil {
				t.Errorf("%s: alternative %q is no regexp alone: %v", r, alt, err)
				continue
			}
			var own, others []string
			for _, d := range declared {
				if re.MatchString(d.path) {
					if d.dir == dir || shared && uses(d.dir, dir) {
						own = append(own, d.path)
					} else {
						others = append(others, d.path)
					}
				}
			}
			switch {
			case len(others) > 0:
				if shared {
					t.Errorf("%s: %q matches %s, keys of items that don't use %s: narrow the path to the package's keys, or declare the rule in those items' %s", r, alt, strings.Join(others, ", "), dir, deliberateFile)
				} else {
					t.Errorf("%s: %q matches %s, keys of another item: declare the rule in that item's %s, or in a shared package's", r, alt, strings.Join(others, ", "), deliberateFile)
				}
			case len(own) == 0 && shared:
				t.Errorf("%s: %q matches no key an item using %s declares: the key is gone or renamed, so the entry is stale", r, alt, dir)
			case len(own) == 0:
				t.Errorf("%s: %q matches no key %s declares: the key is gone or renamed, so the entry is stale", r, alt, dir)
			}
			checked++
		}
	}
	t.Logf("%d rules, %d path alternatives checked against %d declared paths", len(deliberate), checked, len(declared))
}
