package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/envoycheck"
)

// envoyFlag adds --envoy to render's and validate's flags.
func envoyFlag(fs *flag.FlagSet) *string {
	return fs.String("envoy", "", "after globalconfig's own checks, load the output into this Envoy binary (envoy --mode validate) as a proxy of its release would get it; exit 1 if Envoy refuses it")
}

// checkWithEnvoy runs envoycheck with the binary at path. Acceptance is
// written to ok; a refusal, naming Envoy's message and the items, to
// stderr with ExitInvalid; a binary that can't be run is ExitIO.
func checkWithEnvoy(cmd, path string, objs []*envoyfilter.Object, ok io.Writer, env Env) int {
	ctx := context.Background()
	bin, err := envoybin.Open(ctx, path)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: --envoy: %v\n", cmd, err)
		return ExitIO
	}
	rep, err := envoycheck.Check(ctx, bin, objs)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: --envoy: %v\n", cmd, err)
		return ExitIO
	}
	as := fmt.Sprintf("envoy %s (a proxy of Istio %s%s)", rep.Envoy, strings.TrimSuffix(rep.Istio, ".0"), beyondKnown(rep.Istio))
	if len(rep.Results) == 0 {
		fmt.Fprintf(ok, "%s: no patch reaches it\n", as)
		return ExitOK
	}
	if rep.OK() {
		var parts []string
		for _, r := range rep.Results {
			noun := "patches"
			if r.Patches == 1 {
				noun = "patch"
			}
			parts = append(parts, fmt.Sprintf("%s (%d %s)", r.Proxies(), r.Patches, noun))
		}
		fmt.Fprintf(ok, "%s accepts: %s\n", as, strings.Join(parts, ", "))
		return ExitOK
	}
	for _, r := range rep.Results {
		if r.Rejected == "" {
			continue
		}
		fmt.Fprintf(env.Stderr, "globalconfig %s: %s rejects the %s configuration: %s\n", cmd, as, r.Proxies(), r.Rejected)
		if len(r.Items) > 0 {
			fmt.Fprintf(env.Stderr, "globalconfig %s: rejected on their own: %s\n", cmd, strings.Join(r.Items, ", "))
		} else {
			fmt.Fprintf(env.Stderr, "globalconfig %s: no item is rejected on its own: only their combination\n", cmd)
		}
	}
	return ExitInvalid
}

// beyondKnown says when istio (a release "1.32.0") is newer than every
// release globalconfig knows: its output for such a proxy is the newest
// known release's.
func beyondKnown(istio string) string {
	v, err := envoyfilter.ParseVersion(istio)
	if err != nil || v.Compare(envoyfilter.Newest().Istio) <= 0 {
		return ""
	}
	return fmt.Sprintf(", newer than any release globalconfig knows: it gets what %s's proxies get", envoyfilter.Newest().Istio)
}
