package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/app"
	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/document"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// Clients returns the API clients for a kubeconfig ("" for the default
// rules: $KUBECONFIG, ~/.kube/config, then the in-cluster config).
type Clients func(kubeconfig string) (kubernetes.Interface, istioclient.Interface, error)

// APITimeout bounds each request of diff and status.
const APITimeout = 30 * time.Second

// KubeClients connects to the API server the way `globalconfig run` does
// (app.RESTConfig).
func KubeClients(kubeconfig string) (kubernetes.Interface, istioclient.Interface, error) {
	cfg, err := app.RESTConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = APITimeout
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	istio, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("istio client: %w", err)
	}
	return kube, istio, nil
}

// clusterFlags are the flags diff and status share.
type clusterFlags struct {
	kubeconfig, configMap, output string
}

func (c *clusterFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster config)")
	fs.StringVar(&c.configMap, "configmap", DefaultConfigMap, "the global ConfigMap, NAMESPACE/NAME")
	fs.StringVar(&c.output, "o", "text", "output: text, json or yaml")
}

// check validates the flags; it prints usage errors itself.
func (c *clusterFlags) check(cmd string, env Env) (ns, name string, code int) {
	ns, name, ok := strings.Cut(c.configMap, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		fmt.Fprintf(env.Stderr, "globalconfig %s: --configmap must be NAMESPACE/NAME, got %q\n", cmd, c.configMap)
		return "", "", ExitUsage
	}
	switch c.output {
	case "text", "json", "yaml":
	default:
		fmt.Fprintf(env.Stderr, "globalconfig %s: -o must be text, json or yaml, got %q\n", cmd, c.output)
		return "", "", ExitUsage
	}
	return ns, name, ExitOK
}

// connect returns the clients of env.
func (c *clusterFlags) connect(cmd string, env Env) (kubernetes.Interface, istioclient.Interface, int) {
	clients := env.Clients
	if clients == nil {
		clients = KubeClients
	}
	kube, istio, err := clients(c.kubeconfig)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig %s: %v\n", cmd, err)
		return nil, nil, ExitAPI
	}
	return kube, istio, ExitOK
}

// managedFilters lists the EnvoyFilters globalconfig owns, in every
// namespace, as the controller's informer sees them.
func managedFilters(ctx context.Context, istio istioclient.Interface) ([]*clientnetworking.EnvoyFilter, error) {
	list, err := istio.NetworkingV1alpha3().EnvoyFilters(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("list envoyfilters: %w", err)
	}
	return list.Items, nil
}

// writeStructured writes v as indented JSON or as YAML.
func writeStructured(w io.Writer, format string, v any) error {
	var (
		b   []byte
		err error
	)
	if format == "json" {
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// diffCommand is `globalconfig diff`: what applying the file would change
// in the cluster, with kubectl diff's exit codes.
func diffCommand(args []string, env Env) int {
	var cf clusterFlags
	var pf preflightFlags
	file, fleet, code := docArgs("diff", args, env, func(fs *flag.FlagSet) { cf.define(fs); pf.define(fs) })
	if code != ExitOK {
		return code
	}
	if pf.envoy != "" && !pf.set() {
		fmt.Fprintln(env.Stderr, "globalconfig diff: --envoy needs --proxy or --config-dump")
		return ExitUsage
	}
	ns, name, code := cf.check("diff", env)
	if code != ExitOK {
		return code
	}

	data, err := readInput(file, env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig diff: %v\n", err)
		return ExitIO
	}
	doc, err := document.NewParserFor(fleet).ParseFile(data)
	var desired []*envoyfilter.Object
	if err == nil {
		desired, err = render.Desired(doc)
	}
	if err != nil {
		printProblems(file, err, env.Stderr)
		return ExitDiffInvalid
	}
	printWarnings(file, doc.Warnings(), env.Stderr)
	after := render.SectionKeys(doc)
	if fleet != nil {
		// The item diff is the controller's, which renders what the
		// targets declare: --istio-versions changes the EnvoyFilters
		// only.
		if plain, err := document.ParseFile(data); err == nil {
			after = render.SectionKeys(plain)
		}
	}

	kube, istio, code := cf.connect("diff", env)
	if code != ExitOK {
		return code
	}
	ctx := context.Background()
	if pf.set() {
		return preflightDiff(ctx, &pf, cf.output, desired, kube, istio, env)
	}
	cmKey := ns + "/" + name
	var before map[string]string
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(env.Stderr, "globalconfig diff: ConfigMap %s not found: every item counts as added\n", cmKey)
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig diff: read configmap %s: %v\n", cmKey, err)
		return ExitAPI
	default:
		before = liveKeys(cm, cmKey, env)
	}
	live, err := managedFilters(ctx, istio)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig diff: %v\n", err)
		return ExitAPI
	}

	if doc.Rollout.Enabled() {
		// A canary rollout keeps every item as a pair of copies, one for
		// the canaries and one for the other proxies (docs/rollout.md):
		// the set the controller converges to outside a phase.
		if desired, err = canary.Pair(desired, desired, doc.Rollout.Label()); err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig diff: %v\n", err)
			return ExitDiffInvalid
		}
	}
	p, err := plan.New(before, after, desired, live)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig diff: %v\n", err)
		return ExitIO
	}
	if cf.output == "text" {
		_, err = io.WriteString(env.Stdout, p.String())
	} else {
		err = writeStructured(env.Stdout, cf.output, p)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig diff: %v\n", err)
		return ExitIO
	}
	if p.Empty() {
		return ExitOK
	}
	return ExitChanged
}

// liveKeys are the section keys of the live ConfigMap's document, as the
// webhook reads the old object (render.KeysOf); nil, with a note on
// stderr, when it has none or an invalid one.
func liveKeys(cm *corev1.ConfigMap, key string, env Env) map[string]string {
	keys, ok := render.KeysOf(cm.Data)
	switch {
	case ok:
		return keys
	case !hasKey(cm.Data, document.DataKey):
		fmt.Fprintf(env.Stderr, "globalconfig diff: ConfigMap %s has no data key %q: every item counts as added\n", key, document.DataKey)
	default:
		fmt.Fprintf(env.Stderr, "globalconfig diff: the document in ConfigMap %s is invalid (the controller keeps the last good EnvoyFilters): every item counts as added\n", key)
	}
	return nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
