package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/convert/higress"
	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// convert is `globalconfig convert --from higress|ingress-nginx -f FILE`.
func convert(args []string, env Env) int {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	from := fs.String("from", "", "what the input is: higress (a higress-config ConfigMap or its higress document) or ingress-nginx (the controller's ConfigMap, or Helm values)")
	file := fs.String("f", "", `input file ("-" for stdin)`)
	namespace := fs.String("higress-namespace", higress.DefaultNamespace, "higress: Higress's namespace; its gateway reports traces as higress-gateway.<namespace>")
	selector := fs.String("gateway-selector", "", "labels of the gateway pods, k=v[,k=v] (default: higress=<higress-namespace>-higress-gateway for higress, istio=ingressgateway for ingress-nginx)")
	configMap := fs.String("configmap", DefaultConfigMap, "the output ConfigMap, NAMESPACE/NAME")
	report := fs.String("report", "text", "the report on stderr: text or json")
	noDefaults := fs.Bool("no-nginx-defaults", false, "ingress-nginx: leave out the defaults ingress-nginx applied to keys the ConfigMap doesn't set")
	dir := fs.String("configmap-dir", "", "ingress-nginx: a directory of ConfigMap manifests, searched for those add-headers and proxy-set-headers name")
	hops := fs.Int("trusted-hops", -1, "ingress-nginx: how many proxies stand in front of the gateway; lets use-forwarded-headers become headers.xff.trustedHops")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if (*from != "higress" && *from != "ingress-nginx") || *file == "" || fs.NArg() > 0 || (*report != "text" && *report != "json") || *hops < -1 || *hops > 64 {
		fmt.Fprintln(env.Stderr, "globalconfig convert: usage: convert --from higress|ingress-nginx -f FILE [--gateway-selector k=v] [--configmap NS/NAME] [--report text|json]\n  higress: [--higress-namespace NS]\n  ingress-nginx: [--no-nginx-defaults] [--configmap-dir DIR] [--trusted-hops N (0 to 64)]")
		return ExitUsage
	}
	var sel map[string]string
	if *selector != "" {
		var err error
		if sel, err = parseSelector(*selector); err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig convert: --gateway-selector: %v\n", err)
			return ExitUsage
		}
	}
	if *from == "ingress-nginx" {
		opts := nginx.Options{Selector: sel, ConfigMap: *configMap, NoDefaults: *noDefaults}
		if *hops >= 0 {
			n := uint32(*hops)
			opts.TrustedHops = &n
		}
		return convertNginx(*file, *dir, opts, *report == "json", env)
	}
	jsonReport := *report == "json"
	data, code := readConvertInput(*file, env)
	if code != ExitOK {
		return code
	}
	in, err := higress.ReadInput(data)
	if err != nil {
		printConvertError(*file, "", err, jsonReport, env)
		return ExitInvalid
	}
	// The ConfigMap's own namespace is Higress's, unless the flag says
	// otherwise.
	ns := *namespace
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "higress-namespace" })
	if !explicit && in.Namespace != "" {
		ns = in.Namespace
	}
	res, err := higress.Convert(in, higress.Options{Namespace: ns, Selector: sel, ConfigMap: *configMap})
	if err != nil {
		printConvertError(*file, "higress.", err, jsonReport, env)
		return ExitInvalid
	}
	if _, err := env.Stdout.Write(res.Manifest); err != nil {
		return ExitIO
	}
	if *report == "json" {
		b, _ := json.MarshalIndent(res.Report, "", "  ")
		fmt.Fprintf(env.Stderr, "%s\n", b)
	} else {
		res.Report.Write(env.Stderr)
	}
	return ExitOK
}

// convertNginx is `convert --from ingress-nginx`: the manifest on stdout,
// the report on stderr; ExitNotConverted when some keys did not carry
// over.
func convertNginx(file, dir string, opts nginx.Options, jsonReport bool, env Env) int {
	data, code := readConvertInput(file, env)
	if code != ExitOK {
		return code
	}
	var err error
	var extra [][]byte
	if dir != "" {
		if extra, err = nginx.ReadDir(dir); err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig: --configmap-dir: %v\n", err)
			return ExitIO
		}
	}
	in, err := nginx.ReadInput(data, extra...)
	if err != nil {
		printConvertError(file, "", err, jsonReport, env)
		return ExitInvalid
	}
	res, err := nginx.Convert(in, opts)
	if err != nil {
		printConvertError(file, "data.", err, jsonReport, env)
		return ExitInvalid
	}
	if _, err := env.Stdout.Write(res.Manifest); err != nil {
		return ExitIO
	}
	missed := res.Report.NotConverted()
	if jsonReport {
		b, _ := json.MarshalIndent(struct {
			nginx.Report
			NotConverted int `json:"notConverted"`
		}{res.Report, len(missed)}, "", "  ")
		fmt.Fprintf(env.Stderr, "%s\n", b)
	} else {
		res.Report.Write(env.Stderr)
	}
	if len(missed) > 0 {
		if !jsonReport {
			fmt.Fprintf(env.Stderr, "%d keys or parts of keys were not converted (exit %d); the document carries the rest\n", len(missed), ExitNotConverted)
		}
		return ExitNotConverted
	}
	return ExitOK
}

// validateHigress is `globalconfig validate --higress -f FILE`: what a
// Higress document would mean if it were used as globalconfig's document
// unchanged, key by key.
func validateHigress(file string, env Env) int {
	in, code := readHigress(file, env)
	if code != ExitOK {
		return code
	}
	res, err := higress.Convert(in, higress.Options{})
	if err != nil {
		printHigressError(file, err, env)
		return ExitInvalid
	}
	changes := 0
	for _, e := range res.Report.Of(higress.DefaultWritten) {
		if e.Value == "" {
			fmt.Fprintf(env.Stdout, "%s: %s\n", e.Key, e.Detail)
		} else {
			fmt.Fprintf(env.Stdout, "%s: Higress applies its default %s without the key; globalconfig would leave it unset (convert writes it)\n", e.Key, e.Value)
		}
		changes++
	}
	for _, e := range res.Report.Of(higress.Difference) {
		fmt.Fprintf(env.Stdout, "%s: %s\n", e.Key, e.Detail)
		changes++
	}
	for _, e := range res.Report.Of(higress.NotCarried) {
		fmt.Fprintf(env.Stdout, "%s: not carried: %s\n", e.Key, e.Detail)
	}
	asIs := []byte(in.Higress)
	if _, err := document.Parse(asIs); err != nil {
		fmt.Fprintln(env.Stdout, "as globalconfig's document unchanged, it is invalid:")
		name := file
		if in.Manifest {
			name += " (data key higress)" // lines count from the document's first line
		}
		printProblems(name, err, env.Stdout)
		return ExitInvalid
	}
	fmt.Fprintf(env.Stdout, "valid for Higress and for globalconfig; %d keys change meaning unless converted (globalconfig convert --from higress)\n", changes)
	return ExitOK
}

func readHigress(file string, env Env) (higress.Input, int) {
	data, code := readConvertInput(file, env)
	if code != ExitOK {
		return higress.Input{}, code
	}
	in, err := higress.ReadInput(data)
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", location(file, 0), err)
		return higress.Input{}, ExitInvalid
	}
	return in, ExitOK
}

// MaxConvertInput bounds what convert and validate --higress read: a
// ConfigMap's data holds at most 1 MiB, so a larger file is not one the
// API server would store, and it is refused before it is parsed.
const MaxConvertInput = 1 << 20

// readConvertInput reads a converter's input, refusing one over
// MaxConvertInput (exit 1) without reading the rest.
func readConvertInput(file string, env Env) ([]byte, int) {
	var r io.Reader = env.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig: %v\n", err)
			return nil, ExitIO
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxConvertInput+1))
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig: read %s: %v\n", file, err)
		return nil, ExitIO
	}
	if len(data) > MaxConvertInput {
		fmt.Fprintf(env.Stderr, "%s: the input is over %d bytes (1 MiB, what a ConfigMap holds); refused before parsing\n", location(file, 0), MaxConvertInput)
		return nil, ExitInvalid
	}
	return data, ExitOK
}

// printConvertError writes a refused conversion, one problem a line as
// FILE: PREFIX+PATH: MESSAGE, or with --report json as {"errors": [{"path",
// "message"}]}.
func printConvertError(file, prefix string, err error, jsonReport bool, env Env) {
	type problem struct {
		Path    string `json:"path,omitempty"`
		Message string `json:"message"`
	}
	var problems []problem
	for _, p := range fielderr.Flatten(err) {
		path := ""
		if p.Path != "" {
			path = prefix + p.Path
		}
		problems = append(problems, problem{Path: path, Message: p.Msg})
	}
	if jsonReport {
		b, _ := json.MarshalIndent(struct {
			File   string    `json:"file"`
			Errors []problem `json:"errors"`
		}{file, problems}, "", "  ")
		fmt.Fprintf(env.Stderr, "%s\n", b)
		return
	}
	for _, p := range problems {
		if p.Path == "" {
			fmt.Fprintf(env.Stderr, "%s: %s\n", location(file, 0), p.Message)
			continue
		}
		fmt.Fprintf(env.Stderr, "%s: %s: %s\n", location(file, 0), p.Path, p.Message)
	}
}

// printHigressError writes a refused Higress document, one problem a
// line, each path under higress (the ConfigMap's data key).
func printHigressError(file string, err error, env Env) {
	for _, p := range fielderr.Flatten(err) {
		if p.Path == "" {
			fmt.Fprintf(env.Stderr, "%s: %s\n", location(file, 0), p.Msg)
			continue
		}
		fmt.Fprintf(env.Stderr, "%s: higress.%s: %s\n", location(file, 0), p.Path, p.Msg)
	}
}

// parseSelector reads k=v[,k=v].
func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("want k=v[,k=v], got %q", s)
		}
		out[k] = v
	}
	return out, nil
}
