package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
	"github.com/globalconfig/globalconfig/pkg/preflight"
	"github.com/globalconfig/globalconfig/pkg/rollout"
)

// preflightFlags are diff's flags for one live proxy.
type preflightFlags struct {
	proxy, dump, envoy, istiod, istiodService, root string
}

func (p *preflightFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&p.proxy, "proxy", "", "POD.NAMESPACE of a gateway or a sidecar: show the Envoy-level change of its listeners, routes and clusters, predicted from its current config as istiod generates it")
	fs.StringVar(&p.dump, "config-dump", "", "instead of asking istiod, read the proxy's current config from this file: `istioctl proxy-config all POD -o json`, or Envoy's admin /config_dump")
	fs.StringVar(&p.envoy, "envoy", "", "with --proxy or --config-dump: load the predicted config into this Envoy binary (envoy --mode validate); exit 10 if it refuses it")
	fs.StringVar(&p.istiod, "istiod-debug-url", "", "istiod's debug base URL(s), comma-separated, e.g. http://localhost:8080 after kubectl port-forward -n istio-system deploy/istiod 8080 (default: every ready endpoint of --istiod-service on port 8080)")
	fs.StringVar(&p.istiodService, "istiod-service", "istio-system/istiod", "istiod's Service, NAMESPACE/NAME")
	fs.StringVar(&p.root, "root-namespace", "istio-system", "the mesh's root namespace")
}

func (p *preflightFlags) set() bool { return p.proxy != "" || p.dump != "" }

// preflightDiff is diff --proxy / --config-dump: the proxy's Envoy-level
// change, and with --envoy, that Envoy's verdict.
func preflightDiff(ctx context.Context, pf *preflightFlags, format string, desired []*envoyfilter.Object, kube kubernetes.Interface, istio istioclient.Interface, env Env) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(env.Stderr, "globalconfig diff: "+format+"\n", args...)
		return code
	}
	var bin *envoybin.Binary
	if pf.envoy != "" {
		// The binary first: a wrong one fails before anything is fetched.
		var err error
		if bin, err = envoybin.Open(ctx, pf.envoy); err != nil {
			return fail(ExitNotEnvoy, "--envoy: %v", err)
		}
	}
	var (
		current *preflight.Config
		px      preflight.Proxy
	)
	if pf.dump != "" {
		data, err := os.ReadFile(pf.dump)
		if err != nil {
			return fail(ExitIO, "--config-dump: %v", err)
		}
		if current, err = preflight.ParseDump(data); err != nil {
			return fail(ExitBadDump, "--config-dump %s: %v", pf.dump, err)
		}
		if px, err = proxyOfDump(current); err != nil {
			return fail(ExitBadDump, "--config-dump %s: %v", pf.dump, err)
		}
		if pf.proxy != "" && pf.proxy != px.Name {
			return fail(ExitUsage, "--proxy %s, but the dump is of %s", pf.proxy, px.Name)
		}
	} else {
		code := 0
		current, px, code = fetchProxy(ctx, pf, kube, env)
		if code != ExitOK {
			return code
		}
	}

	in, err := preflight.LiveInput(ctx, kube, istio, current, px, pf.root, preflight.FromObjects(desired))
	if err != nil {
		return fail(ExitAPI, "%v", err)
	}
	pred, err := preflight.Predict(in)
	if err != nil {
		return fail(ExitIO, "predict %s: %v", px.Name, err)
	}
	changes, err := pred.Changes()
	if err != nil {
		return fail(ExitIO, "%v", err)
	}
	var verdict *preflight.Verdict
	if bin != nil {
		verdict, err = preflight.Validate(ctx, bin, in, pred)
		if err != nil {
			return fail(ExitIO, "--envoy: %v", err)
		}
	}
	report := preflightReport{Proxy: px, Items: pred.Changed, Changes: changes, Inexact: pred.Inexact, Notes: pred.Notes, Opaque: current.Opaque, Dropped: current.Dropped, Envoy: verdict}
	if report.Changes == nil {
		report.Changes = []preflight.Change{}
	}
	if format == "text" {
		err = report.write(env.Stdout)
	} else {
		err = writeStructured(env.Stdout, format, report)
	}
	if err != nil {
		return fail(ExitIO, "%v", err)
	}
	switch {
	case verdict != nil && verdict.Rejected != "" && verdict.BaseRejected == "":
		return ExitEnvoyRejects
	case len(changes) > 0:
		return ExitChanged
	}
	return ExitOK
}

// preflightReport is diff --proxy's output.
type preflightReport struct {
	Proxy   preflight.Proxy    `json:"proxy"`
	Items   []string           `json:"items"`
	Changes []preflight.Change `json:"changes"`
	Inexact []string           `json:"inexact,omitempty"`
	Notes   []string           `json:"notes,omitempty"`
	Opaque  []string           `json:"opaqueTypes,omitempty"`
	Dropped string             `json:"droppedFields,omitempty"`
	Envoy   *preflight.Verdict `json:"envoy,omitempty"`
}

// proxyHeading names px as a report's first line does: "proxy
// gw.istio-system (gateway, Istio 1.31.0".
func proxyHeading(px preflight.Proxy) string {
	kind := px.Type
	if kind == "router" {
		kind = "gateway"
	}
	s := fmt.Sprintf("proxy %s (%s", px.Name, kind)
	if px.IstioVersion != "" {
		s += ", Istio " + px.IstioVersion
	}
	return s
}

func (r preflightReport) write(w io.Writer) error {
	var b strings.Builder
	b.WriteString(proxyHeading(r.Proxy) + ")\n")
	if len(r.Items) == 0 {
		b.WriteString("no item's patches for this proxy change\n")
	} else {
		fmt.Fprintf(&b, "items whose patches for this proxy change: %s\n", strings.Join(r.Items, ", "))
	}
	if len(r.Changes) == 0 {
		b.WriteString("its Envoy configuration does not change\n")
	} else {
		var parts []string
		for _, c := range r.Changes {
			parts = append(parts, fmt.Sprintf("%s %s %s", c.Kind, c.Name, c.Change))
		}
		fmt.Fprintf(&b, "its Envoy configuration changes: %s\n\n", strings.Join(parts, "; "))
		for _, c := range r.Changes {
			b.WriteString(c.Diff)
		}
	}
	for _, s := range r.Inexact {
		fmt.Fprintf(&b, "not predicted exactly: %s\n", s)
	}
	for _, s := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", s)
	}
	if len(r.Opaque) > 0 {
		fmt.Fprintf(&b, "note: typed configs of types this build does not link, compared as the dump's JSON: %s\n", strings.Join(r.Opaque, ", "))
	}
	if r.Dropped != "" {
		fmt.Fprintf(&b, "note: fields this build does not know were dropped from the dump (a newer Envoy API?): %s\n", r.Dropped)
	}
	if v := r.Envoy; v != nil {
		if len(v.Removed) > 0 {
			fmt.Fprintf(&b, "envoy %s: taken out for upstream Envoy (Istio's own extensions): %s\n", v.Envoy, summarize(v.Removed))
		}
		switch {
		case v.Rejected == "":
			fmt.Fprintf(&b, "envoy %s accepts the predicted configuration\n", v.Envoy)
		case v.BaseRejected != "":
			fmt.Fprintf(&b, "envoy %s rejects the predicted configuration, but it rejects the current one too, so this says nothing of the change: %s\n", v.Envoy, v.BaseRejected)
		default:
			fmt.Fprintf(&b, "envoy %s REJECTS the predicted configuration: %s\n", v.Envoy, v.Rejected)
			if len(v.Items) > 0 {
				fmt.Fprintf(&b, "rejected on its own: the change of %s\n", strings.Join(v.Items, ", "))
			} else {
				b.WriteString("no item's change is rejected on its own: only their combination\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summarize counts "WHERE: WHAT" entries by WHAT: "HTTP filter
// istio.alpn (2 listeners)", in order of first appearance.
func summarize(entries []string) string {
	var order []string
	where := map[string]map[string]bool{}
	for _, e := range entries {
		at, what, ok := strings.Cut(e, ": ")
		if !ok {
			at, what = "", e
		}
		if where[what] == nil {
			where[what] = map[string]bool{}
			order = append(order, what)
		}
		where[what][at] = true
	}
	parts := make([]string, 0, len(order))
	for _, what := range order {
		n := len(where[what])
		kind := "listener"
		for at := range where[what] {
			kind, _, _ = strings.Cut(at, " ")
		}
		if n == 1 {
			parts = append(parts, fmt.Sprintf("%s (1 %s)", what, kind))
		} else {
			parts = append(parts, fmt.Sprintf("%s (%d %ss)", what, n, kind))
		}
	}
	return strings.Join(parts, "; ")
}

// proxyOfDump reads the proxy's identity from the dump's bootstrap node.
func proxyOfDump(c *preflight.Config) (preflight.Proxy, error) {
	n := c.Node
	if n == nil {
		return preflight.Proxy{}, errors.New("it names no proxy (no bootstrap node: istiod's own dump has none); use --proxy to read the proxy from istiod instead")
	}
	parts := strings.Split(n.GetId(), "~")
	if len(parts) != 4 {
		return preflight.Proxy{}, fmt.Errorf("its node ID %q is not an Istio proxy's (TYPE~IP~POD.NAMESPACE~DOMAIN)", n.GetId())
	}
	px := preflight.Proxy{Type: parts[0], Name: parts[2]}
	_, px.Namespace, _ = strings.Cut(parts[2], ".")
	md := n.GetMetadata().GetFields()
	if v := md["NAMESPACE"].GetStringValue(); v != "" {
		px.Namespace = v
	}
	px.IstioVersion = md["ISTIO_VERSION"].GetStringValue()
	if l := md["LABELS"].GetStructValue(); l != nil {
		px.Labels = map[string]string{}
		for k, v := range l.GetFields() {
			px.Labels[k] = v.GetStringValue()
		}
	}
	return px, nil
}

// fetchProxy finds the proxy on the istiods and reads its config.
func fetchProxy(ctx context.Context, pf *preflightFlags, kube kubernetes.Interface, env Env) (*preflight.Config, preflight.Proxy, int) {
	bases, code := istiodBases(ctx, "diff", pf, kube, env)
	if code != ExitOK {
		return nil, preflight.Proxy{}, code
	}
	cfg, px, err := preflight.Fetch(ctx, &rollout.Client{HTTP: &http.Client{}}, bases, pf.proxy)
	if err != nil {
		return nil, preflight.Proxy{}, fetchFailed("diff", err, env)
	}
	return cfg, px, ExitOK
}

// istiodBases are the debug URLs of the istiods to ask: --istiod-debug-url,
// or the ready endpoints of --istiod-service. It prints its errors.
func istiodBases(ctx context.Context, cmd string, pf *preflightFlags, kube kubernetes.Interface, env Env) ([]string, int) {
	fail := func(code int, format string, args ...any) ([]string, int) {
		fmt.Fprintf(env.Stderr, "globalconfig "+cmd+": "+format+"\n", args...)
		return nil, code
	}
	var bases []string
	if pf.istiod != "" {
		for _, u := range strings.Split(pf.istiod, ",") {
			if u = strings.TrimSpace(u); u != "" {
				bases = append(bases, u)
			}
		}
	} else {
		sns, sname, ok := strings.Cut(pf.istiodService, "/")
		if !ok {
			return fail(ExitUsage, "--istiod-service must be NAMESPACE/NAME, got %q", pf.istiodService)
		}
		list, err := kube.DiscoveryV1().EndpointSlices(sns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + sname})
		if err != nil {
			return fail(ExitAPI, "list the endpoints of %s: %v", pf.istiodService, err)
		}
		eps := make([]*discoveryv1.EndpointSlice, len(list.Items))
		for i := range list.Items {
			eps[i] = &list.Items[i]
		}
		bases = rollout.ReadyURLs(eps, rollout.DefaultDebugPort)
		if len(bases) == 0 {
			return fail(ExitIstiod, "the Service %s has no ready endpoint; give --istiod-debug-url", pf.istiodService)
		}
	}
	return bases, ExitOK
}

// fetchFailed prints an error of preflight.Fetch and returns its exit
// code.
func fetchFailed(cmd string, err error, env Env) int {
	var noProxy *preflight.NoProxyError
	var unreachable *preflight.IstiodError
	var dump *preflight.DumpError
	code := ExitUsage
	switch {
	case errors.As(err, &noProxy):
		code = ExitNoProxy
	case errors.As(err, &unreachable):
		code = ExitIstiod
	case errors.As(err, &dump):
		code = ExitBadDump
	}
	fmt.Fprintf(env.Stderr, "globalconfig %s: %v\n", cmd, err)
	return code
}
