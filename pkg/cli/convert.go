package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/pkg/convert/higress"
	"github.com/globalconfig/globalconfig/pkg/document"
)

// convert is `globalconfig convert --from higress -f FILE`.
func convert(args []string, env Env) int {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	from := fs.String("from", "", "what the input is: higress (a higress-config ConfigMap or its higress document)")
	file := fs.String("f", "", `input file ("-" for stdin)`)
	var opts higress.Options
	fs.StringVar(&opts.Namespace, "higress-namespace", higress.DefaultNamespace, "Higress's namespace: its gateway reports traces as higress-gateway.<namespace>")
	selector := fs.String("gateway-selector", "", "labels of the gateway pods, k=v[,k=v] (default higress=<higress-namespace>-higress-gateway, the label Higress's chart sets)")
	fs.StringVar(&opts.ConfigMap, "configmap", DefaultConfigMap, "the output ConfigMap, NAMESPACE/NAME")
	report := fs.String("report", "text", "the report on stderr: text or json")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if *from != "higress" || *file == "" || fs.NArg() > 0 || (*report != "text" && *report != "json") {
		fmt.Fprintln(env.Stderr, "globalconfig convert: usage: convert --from higress -f FILE [--higress-namespace NS] [--gateway-selector k=v] [--configmap NS/NAME] [--report text|json]")
		return ExitUsage
	}
	if *selector != "" {
		sel, err := parseSelector(*selector)
		if err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig convert: --gateway-selector: %v\n", err)
			return ExitUsage
		}
		opts.Selector = sel
	}
	in, code := readHigress(*file, env)
	if code != ExitOK {
		return code
	}
	res, err := higress.Convert(in, opts)
	if err != nil {
		printHigressError(*file, err, env)
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
	data, err := readInput(file, env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig: %v\n", err)
		return higress.Input{}, ExitIO
	}
	in, err := higress.ReadInput(data)
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", location(file, 0), err)
		return higress.Input{}, ExitInvalid
	}
	return in, ExitOK
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
