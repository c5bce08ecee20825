// Package cli implements the globalconfig command line: render, validate,
// convert, items, schema, version, run, diff, status, explain, rollout
// and create-member-secret.
// cmd/globalconfig only wires it to the process.
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/rlsconfig"
)

// Exit codes, as the README documents them.
const (
	ExitOK      = 0 // success; for validate: the document is valid
	ExitInvalid = 1 // the document is invalid; every problem is on stderr
	ExitUsage   = 2 // unknown command or flag, or a missing argument
	ExitIO      = 3 // the input could not be read or the output written
	ExitRun     = 4 // run: the controller stopped on an error (bad kubeconfig, an address in use)
	// ExitNotConverted: convert --from ingress-nginx wrote the document,
	// but some keys (not supported, refused or unknown) did not carry
	// over; the report names them.
	ExitNotConverted = 5
	// ExitChanged: diff found changes, as kubectl diff's 1. diff never
	// returns 1 for an invalid document: that is ExitDiffInvalid.
	ExitChanged = 1
	// ExitDiffInvalid: diff's file holds an invalid document; every
	// problem is on stderr, with its path.
	ExitDiffInvalid = 6
	// ExitAPI: diff or status could not read the cluster (kubeconfig,
	// API server unreachable, access refused).
	ExitAPI = 7
	// ExitNoStatus: status found no status it reads: the controller has
	// not run for this ConfigMap, or it wrote another status version.
	ExitNoStatus = 8
	// ExitNoRollout: rollout promote or abort found no canary phase in
	// progress.
	ExitNoRollout = 9
	// ExitEnvoyRejects: the Envoy binary of --envoy refuses the predicted
	// configuration.
	ExitEnvoyRejects = 10
	// ExitNoProxy: no istiod has the proxy --proxy names connected (or
	// status lists no such proxy, or no cluster --cluster names).
	ExitNoProxy = 11
	// ExitIstiod: no istiod could be asked (unreachable, refused).
	ExitIstiod = 12
	// ExitBadDump: the config dump (--config-dump, or istiod's answer) is
	// not one: truncated, of another tool, or of no proxy.
	ExitBadDump = 13
	// ExitNotEnvoy: --envoy names no runnable Envoy binary.
	ExitNotEnvoy = 14
)

// Version is set at build time with -ldflags "-X …/pkg/cli.Version=v1.2.3".
var Version = ""

// Env is what a command may touch: its arguments and standard streams.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Clients connects diff and status to the cluster; nil is
	// KubeClients, the real API server. Tests inject fake clientsets.
	Clients Clients
}

const usage = `globalconfig turns the global Istio document into EnvoyFilters.

Usage:
  globalconfig render   -f FILE [--envoy PATH]
                                  print the EnvoyFilters as a YAML stream; --envoy: only if that Envoy loads them
  globalconfig validate -f FILE [--envoy PATH] [--kubeconfig K] [--configmap NS/NAME]
                                  check the document; problems go to stderr; --envoy: and load it into that Envoy;
                                  --kubeconfig/--configmap: and warn when it removes or moves a filter that an
                                  EnvoyFilter not managed by globalconfig anchors on
  globalconfig validate --higress -f FILE
                                  which keys of a Higress higress-config change meaning as they are
  globalconfig convert --from higress -f FILE
                                  a global-config ConfigMap from Higress's higress-config; report on stderr
  globalconfig convert --from ingress-nginx -f FILE [--trusted-hops N] [--no-nginx-defaults] [--configmap-dir DIR]
                                  a global-config ConfigMap from ingress-nginx's ConfigMap or Helm values;
                                  a verdict per key on stderr; exit 5 when some keys did not carry over
  globalconfig items              list the items with their defaults
  globalconfig schema             print the JSON Schema of the document
  globalconfig version            print the version
  globalconfig run [flags]        keep the cluster's EnvoyFilters in step with the global ConfigMap
  globalconfig diff -f FILE [--kubeconfig K] [--configmap NS/NAME] [--istio-versions V,...] [-o text|json|yaml]
                                  what applying FILE would change: the item diff, then the managed
                                  EnvoyFilters to create, update or delete, each with a unified diff
  globalconfig diff -f FILE --proxy POD.NS [--istiod-debug-url URL] [--envoy PATH] [-o text|json|yaml]
  globalconfig diff -f FILE --config-dump DUMP.json [--envoy PATH]
                                  preflight of one gateway or sidecar: the Envoy-level change of its listeners,
                                  routes and clusters, predicted from its current config; --envoy: and
                                  whether that Envoy binary loads the result (exit 10 if not)
  globalconfig status [--kubeconfig K] [--configmap NS/NAME] [--state S] [--proxy NAME] [--cluster NAME] [-o text|json|yaml]
                                  the controller's status: the document's state and problems, the
                                  items and their EnvoyFilters, the canary rollout, and the rollout to the proxies
  globalconfig explain --proxy POD.NS --envoy PATH [--istiod-debug-url URL] [-o text|json|yaml]
                                  which EnvoyFilters (globalconfig's or others') make the proxy's Envoy
                                  refuse its config; --envoy: an Envoy of the proxy's release
  globalconfig rollout promote|abort [--kubeconfig K] [--configmap NS/NAME]
                                  end the canary phase in progress: promote the change to every proxy
                                  now, or roll it back now
  globalconfig create-member-secret --name CLUSTER [--kubeconfig K] [--context C] [--server URL]
                                  [--envoyfilter-namespaces NS,...] [--token auto|secret|request]
                                  in a member cluster, the least RBAC and a token for the controller;
                                  prints the member Secret to apply in the home cluster

FILE is a ConfigMap manifest (data key config.yaml) or the bare document;
"-" reads standard input.

Exit codes: 0 ok, 1 invalid document, 2 usage error, 3 input/output error,
4 run stopped on an error, 5 convert: some keys did not carry over.
diff, as kubectl diff: 0 no changes, 1 changes, 6 the file's document is
invalid (never 1). diff, status and validate --kubeconfig: 7 the cluster could not be read;
status: 8 no status ConfigMap yet (is the controller running?).
diff --proxy/--config-dump: 10 the --envoy binary rejects the predicted
config, 11 no istiod has that proxy, 12 no istiod could be asked, 13 the
config dump is not one (truncated, another tool's), 14 --envoy is no Envoy.
rollout: 9 no canary phase in progress.
explain: 0 Envoy accepts the config (nothing to blame), 15 a fault names
globalconfig's EnvoyFilter, 16 only others' EnvoyFilters, 17 Envoy refuses
it without any EnvoyFilter, 18 --envoy is of another release than the
proxy's, 19 the search hit its bound; 11, 12, 14 as diff --proxy.
`

// Main runs the command line args (without the program name) and returns
// the exit code.
func Main(args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "render":
		return renderCmd(args[1:], env)
	case "validate":
		return validate(args[1:], env)
	case "convert":
		return convert(args[1:], env)
	case "items":
		return listItems(args[1:], env)
	case "schema":
		return schema(args[1:], env)
	case "run":
		return runCommand(args[1:], env)
	case "diff":
		return diffCommand(args[1:], env)
	case "rollout":
		return rolloutCommand(args[1:], env)
	case "status":
		return statusCommand(args[1:], env)
	case "explain":
		return explainCommand(args[1:], env)
	case "create-member-secret":
		return createMemberSecretCommand(args[1:], env)
	case "version":
		fmt.Fprintln(env.Stdout, version())
		return ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(env.Stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "globalconfig: unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// istioVersionsUsage is the help of render's and validate's --istio-versions.
const istioVersionsUsage = "Istio releases the proxies run, comma-separated (1.27,1.28,...): render for them instead of what the document's targets declare"

// parseIstioVersions reads --istio-versions; "" is none.
func parseIstioVersions(s string) ([]envoyfilter.Version, error) {
	if s == "" {
		return nil, nil
	}
	var out []envoyfilter.Version
	for _, part := range strings.Split(s, ",") {
		v, err := envoyfilter.ParseVersion(strings.TrimSpace(part))
		if err == nil {
			_, err = envoyfilter.EnvoyOf(v)
		}
		if err != nil {
			return nil, fmt.Errorf("--istio-versions: %v", err)
		}
		out = append(out, v)
	}
	return out, nil
}

func readInput(file string, env Env) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(io.LimitReader(env.Stdin, document.MaxSize+1))
	}
	return os.ReadFile(file)
}

// load reads, parses and renders a file, for the Istio releases fleet when
// it is given. It prints problems itself and returns the exit code to use
// when it fails.
func load(file string, fleet []envoyfilter.Version, env Env) (*document.Document, []*envoyfilter.Object, int) {
	data, err := readInput(file, env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig: %v\n", err)
		return nil, nil, ExitIO
	}
	doc, err := document.NewParserFor(fleet).ParseFile(data)
	if err == nil {
		var objs []*envoyfilter.Object
		if objs, err = render.Desired(doc); err == nil {
			return doc, objs, ExitOK
		}
	}
	printProblems(file, err, env.Stderr)
	return nil, nil, ExitInvalid
}

// printWarnings writes one line per warning: FILE:LINE: path: warning: message.
func printWarnings(file string, warnings []*fielderr.Error, w io.Writer) {
	for _, p := range warnings {
		fmt.Fprintf(w, "%s: %s: warning: %s\n", location(file, p.Line), p.Path, p.Msg)
	}
}

// location is FILE:LINE, or FILE when the line is unknown.
func location(file string, line int) string {
	name := file
	if file == "-" {
		name = "<stdin>"
	}
	if line > 0 {
		return fmt.Sprintf("%s:%d", name, line)
	}
	return name
}

// printProblems writes one line per problem: FILE:LINE: path: message.
func printProblems(file string, err error, w io.Writer) {
	var de *document.Error
	problems := fielderr.Flatten(err)
	if errors.As(err, &de) {
		problems = de.Problems
	}
	for _, p := range problems {
		fmt.Fprintf(w, "%s: %s\n", location(file, p.Line), p.Error())
	}
}

// docArgs parses the flags render and validate share, -f FILE and
// --istio-versions, after more adds the command's own. It prints usage
// errors itself; the code is ExitOK when the flags are good.
func docArgs(name string, args []string, env Env, more func(*flag.FlagSet)) (string, []envoyfilter.Version, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	file := fs.String("f", "", `document file: a ConfigMap manifest or the bare document ("-" for stdin)`)
	versions := fs.String("istio-versions", "", istioVersionsUsage)
	if more != nil {
		more(fs)
	}
	if err := fs.Parse(args); err != nil {
		return "", nil, ExitUsage
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "globalconfig %s: exactly one -f FILE is required\n", name)
		return "", nil, ExitUsage
	}
	fleet, err := parseIstioVersions(*versions)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: %v\n", name, err)
		return "", nil, ExitUsage
	}
	return *file, fleet, ExitOK
}

func renderCmd(args []string, env Env) int {
	var envoyPath *string
	file, fleet, code := docArgs("render", args, env, func(fs *flag.FlagSet) { envoyPath = envoyFlag(fs) })
	if code != ExitOK {
		return code
	}
	_, objs, code := load(file, fleet, env)
	if code != ExitOK {
		return code
	}
	if *envoyPath != "" {
		// The verdict goes to stderr: stdout stays the YAML stream.
		if code := checkWithEnvoy("render", *envoyPath, objs, env.Stderr, env); code != ExitOK {
			return code
		}
	}
	out, err := render.YAML(objs)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig render: %v\n", err)
		return ExitInvalid
	}
	services, err := serviceConfigs(objs)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig render: %v\n", err)
		return ExitInvalid
	}
	if _, err := env.Stdout.Write(append(out, services...)); err != nil {
		return ExitIO
	}
	return ExitOK
}

// serviceConfigs is the rate-limit service's side of the set, in the
// service's file format, as YAML comments after the EnvoyFilters: the
// stream stays one kubectl applies. The controller serves the same over
// xDS (--ratelimit-config-addr).
func serviceConfigs(objs []*envoyfilter.Object) ([]byte, error) {
	cfgs, err := rlsconfig.Configs(objs)
	if err != nil || len(cfgs) == 0 {
		return nil, err
	}
	files, err := rlsconfig.Files(cfgs)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&b, "# The rate-limit service's configuration, %s (what `globalconfig run --ratelimit-config-addr` serves it over xDS):\n", name)
		for _, line := range strings.Split(strings.TrimRight(string(files[name]), "\n"), "\n") {
			b.WriteString("#   " + line + "\n")
		}
	}
	return b.Bytes(), nil
}

func validate(args []string, env Env) int {
	var asHigress *bool
	var envoyPath *string
	var vc validateClusterFlags
	file, fleet, code := docArgs("validate", args, env, func(fs *flag.FlagSet) {
		asHigress = fs.Bool("higress", false, "the file is Higress's higress-config: say which keys change meaning in globalconfig as they are")
		envoyPath = envoyFlag(fs)
		vc.define(fs)
	})
	if code != ExitOK {
		return code
	}
	if *asHigress {
		return validateHigress(file, env)
	}
	doc, objs, code := load(file, fleet, env)
	if code != ExitOK {
		return code
	}
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.Metadata.Namespace+"/"+o.Metadata.Name)
	}
	fmt.Fprintf(env.Stdout, "valid: %d items, %d EnvoyFilters", len(doc.Sections), len(names))
	if len(names) > 0 {
		fmt.Fprintf(env.Stdout, " (%s)", strings.Join(names, ", "))
	}
	fmt.Fprintln(env.Stdout)
	printWarnings(file, doc.Warnings(), env.Stderr)
	if vc.set() {
		if code := compareWithCluster(&vc, file, objs, env); code != ExitOK {
			return code
		}
	}
	if *envoyPath != "" {
		return checkWithEnvoy("validate", *envoyPath, objs, env.Stdout, env)
	}
	return ExitOK
}

func listItems(args []string, env Env) int {
	if len(args) > 0 {
		fmt.Fprintln(env.Stderr, "globalconfig items: takes no arguments")
		return ExitUsage
	}
	for i, r := range items.All() {
		defaults, err := yaml.Marshal(r.NewItem())
		if err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig items: %s: %v\n", r.Name, err)
			return ExitIO
		}
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		fmt.Fprintf(env.Stdout, "# %s — %s\n", r.Name, r.Summary)
		fmt.Fprintf(env.Stdout, "# stage %s, slot %d: %s\n", r.Stage.Name, r.Slot, r.Purpose)
		for _, line := range r.Support() {
			fmt.Fprintf(env.Stdout, "# %s\n", line)
		}
		fmt.Fprintf(env.Stdout, "%s:\n", r.Name)
		for _, line := range strings.Split(strings.TrimRight(string(defaults), "\n"), "\n") {
			fmt.Fprintf(env.Stdout, "  %s\n", line)
		}
	}
	// Where a new item can go: each stage's free slots, and the
	// priority each gives.
	fmt.Fprintln(env.Stdout, "\n# free slots (priority), by stage:")
	for _, st := range envoyfilter.Stages() {
		var free []string
		for _, slot := range items.FreeSlots(st) {
			free = append(free, fmt.Sprintf("%d (%d)", slot, st.At(slot).Priority))
		}
		fmt.Fprintf(env.Stdout, "#   %s: %s\n", st.Name, strings.Join(free, ", "))
	}
	return ExitOK
}

func schema(args []string, env Env) int {
	if len(args) > 0 {
		fmt.Fprintln(env.Stderr, "globalconfig schema: takes no arguments")
		return ExitUsage
	}
	b, err := json.MarshalIndent(document.JSONSchema(), "", "  ")
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig schema: %v\n", err)
		return ExitIO
	}
	fmt.Fprintf(env.Stdout, "%s\n", b)
	return ExitOK
}
