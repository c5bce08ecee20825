package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// explain's exit codes, besides ExitOK (Envoy accepts the proxy's config
// now: nothing to blame), ExitUsage, ExitAPI, ExitNoProxy, ExitIstiod,
// ExitBadDump and ExitNotEnvoy.
const (
	// ExitBlamedOurs: a fault names an EnvoyFilter globalconfig manages,
	// alone or together with someone else's.
	ExitBlamedOurs = 15
	// ExitBlamedOthers: every fault names only EnvoyFilters globalconfig
	// does not manage: rolling globalconfig back would not help.
	ExitBlamedOthers = 16
	// ExitBaseRejected: Envoy refuses the proxy's config even without
	// any EnvoyFilter: no EnvoyFilter is to blame.
	ExitBaseRejected = 17
	// ExitEnvoyRelease: --envoy is an Envoy of another release than the
	// proxy's (or the proxy's release is unknown): no blame is given.
	ExitEnvoyRelease = 18
	// ExitBlameBound: the search ran Envoy as often as it may
	// (preflight.MaxBlameRuns) without an answer.
	ExitBlameBound = 19
)

// explainCommand is `globalconfig explain --proxy POD.NS --envoy PATH`:
// which EnvoyFilters make the proxy's Envoy refuse the config istiod
// builds for it.
func explainCommand(args []string, env Env) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var cf clusterFlags
	var pf preflightFlags
	fs.StringVar(&cf.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
	fs.StringVar(&cf.output, "o", "text", "output: text, json or yaml")
	fs.StringVar(&pf.proxy, "proxy", "", "POD.NAMESPACE of the gateway or sidecar whose config Envoy refuses (required)")
	fs.StringVar(&pf.envoy, "envoy", "", "an Envoy binary of the proxy's release, which judges each config the search builds (required)")
	fs.StringVar(&pf.istiod, "istiod-debug-url", "", "istiod's debug base URL(s), comma-separated, e.g. http://localhost:8080 after kubectl port-forward -n istio-system deploy/istiod 8080 (default: every ready endpoint of --istiod-service on port 8080)")
	fs.StringVar(&pf.istiodService, "istiod-service", "istio-system/istiod", "istiod's Service, NAMESPACE/NAME")
	fs.StringVar(&pf.root, "root-namespace", "istio-system", "the mesh's root namespace")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(env.Stderr, "globalconfig explain: "+format+"\n", args...)
		return code
	}
	switch {
	case fs.NArg() > 0:
		return fail(ExitUsage, "takes no arguments, got %q", fs.Args())
	case pf.proxy == "":
		return fail(ExitUsage, "--proxy POD.NAMESPACE is required")
	case pf.envoy == "":
		return fail(ExitUsage, "--envoy PATH is required: an Envoy binary of the proxy's release judges each config the search builds")
	}
	switch cf.output {
	case "text", "json", "yaml":
	default:
		return fail(ExitUsage, "-o must be text, json or yaml, got %q", cf.output)
	}
	ctx := context.Background()
	// The binary first: a wrong one fails before anything is fetched.
	bin, err := envoybin.Open(ctx, pf.envoy)
	if err != nil {
		return fail(ExitNotEnvoy, "--envoy: %v", err)
	}
	kube, istio, code := cf.connect("explain", env)
	if code != ExitOK {
		return code
	}
	bases, code := istiodBases(ctx, "explain", &pf, kube, env)
	if code != ExitOK {
		return code
	}
	b, err := preflight.BlameLive(ctx, &rollout.Client{HTTP: &http.Client{}}, bases, kube, istio, bin, pf.proxy, pf.root, nil)
	var release *preflight.ReleaseError
	var bound *preflight.BoundError
	var clusterErr *preflight.ClusterError
	switch {
	case err == nil:
	case errors.As(err, &release):
		return fail(ExitEnvoyRelease, "--envoy: %v", err)
	case errors.As(err, &bound):
		return fail(ExitBlameBound, "%v", err)
	case errors.As(err, &clusterErr):
		return fail(ExitAPI, "%v", err)
	default:
		var noProxy *preflight.NoProxyError
		var unreachable *preflight.IstiodError
		var dump *preflight.DumpError
		if errors.As(err, &noProxy) || errors.As(err, &unreachable) || errors.As(err, &dump) || strings.HasPrefix(err.Error(), "--proxy") {
			return fetchFailed("explain", err, env)
		}
		return fail(ExitIO, "%v", err)
	}
	report := explainReport{Blame: b, Elapsed: b.Elapsed.Round(1e6).String(), Advice: advice(b)}
	if cf.output == "text" {
		err = report.write(env.Stdout)
	} else {
		err = writeStructured(env.Stdout, cf.output, report)
	}
	if err != nil {
		return fail(ExitIO, "%v", err)
	}
	return explainCode(b)
}

// explainCode is the exit code of an answer.
func explainCode(b *preflight.Blame) int {
	switch b.Outcome {
	case preflight.BaseRejected:
		return ExitBaseRejected
	case preflight.Blamed:
		if b.Ours() {
			return ExitBlamedOurs
		}
		return ExitBlamedOthers
	}
	return ExitOK
}

// explainReport is explain's output: the blame, its time as text, and
// what to do.
type explainReport struct {
	*preflight.Blame
	// Elapsed replaces the blame's nanoseconds.
	Elapsed string   `json:"elapsed"`
	Advice  []string `json:"advice"`
}

// advice says what to do about each fault, or about the outcome.
func advice(b *preflight.Blame) []string {
	switch b.Outcome {
	case preflight.NotReproduced:
		return []string{fmt.Sprintf("Envoy %s accepts the config istiod builds for the proxy now: the refusal is not reproduced (fixed since, or the proxy's Envoy build differs from this binary), and nothing is blamed", b.Envoy)}
	case preflight.BaseRejected:
		return []string{"Envoy refuses the config even with every EnvoyFilter's patches taken off: no EnvoyFilter is to blame; look at what istiod builds it from (Gateways, VirtualServices, DestinationRules, Services) and at istiod's own logs"}
	}
	var out []string
	for _, f := range b.Faults {
		var ours, theirs []string
		for _, c := range f.Filters {
			if c.Managed {
				ours = append(ours, c.Item)
			} else {
				theirs = append(theirs, c.Namespace+"/"+c.Name)
			}
		}
		switch {
		case len(f.Filters) > 1:
			either := "either"
			if len(f.Filters) > 2 {
				either = "any one"
			}
			s := fmt.Sprintf("Envoy refuses %s only together: taking %s of them out makes the config load", f, either)
			if len(theirs) > 0 && len(ours) > 0 {
				s += fmt.Sprintf("; have %s fixed by its owner (it patches what globalconfig's %s inserts, or meets it), or turn %s off in the global document (under the Direct rollout the controller rolls a change that brought them together back)",
					strings.Join(theirs, ", "), strings.Join(ours, ", "), strings.Join(ours, ", "))
			}
			out = append(out, s)
		case len(ours) == 1:
			out = append(out, fmt.Sprintf("%s is refused on its own: fix or turn off %s in the global document (under the Direct rollout the controller rolls the change back)", f, ours[0]))
		case len(theirs) == 1:
			ns, name, _ := strings.Cut(theirs[0], "/")
			out = append(out, fmt.Sprintf("%s is refused on its own: its owner must fix or delete it (kubectl delete envoyfilter -n %s %s); rolling globalconfig back would not help", f, ns, name))
		}
	}
	return out
}

func (r explainReport) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s), judged by Envoy %s\n", proxyHeading(r.Proxy), r.Envoy)
	switch r.Outcome {
	case preflight.NotReproduced:
		fmt.Fprintf(&b, "Envoy accepts its config: nothing to blame\n")
	case preflight.BaseRejected:
		fmt.Fprintf(&b, "Envoy refuses its config even without any EnvoyFilter: %s\n", r.Rejected)
	case preflight.Blamed:
		fmt.Fprintf(&b, "Envoy refuses its config: %s\n", r.Rejected)
		if len(r.Faults) == 1 {
			b.WriteString("to blame:\n")
		} else {
			fmt.Fprintf(&b, "to blame, %d faults:\n", len(r.Faults))
		}
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "  %s: Envoy says: %s\n", f, f.Message)
		}
	}
	if len(r.Advice) > 0 {
		b.WriteString("what to do:\n")
		for _, a := range r.Advice {
			fmt.Fprintf(&b, "  %s\n", a)
		}
	}
	for _, s := range r.Inexact {
		fmt.Fprintf(&b, "not exact: %s\n", s)
	}
	for _, s := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", s)
	}
	if len(r.Removed) > 0 {
		fmt.Fprintf(&b, "taken out for upstream Envoy (Istio's own extensions): %s\n", summarize(r.Removed))
	}
	fmt.Fprintf(&b, "%d EnvoyFilters reach the proxy; Envoy ran %d times; %s\n", r.Filters, r.Runs, r.Elapsed)
	_, err := io.WriteString(w, b.String())
	return err
}
