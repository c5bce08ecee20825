// Command envoy-compat decodes the patch values of EnvoyFilter manifests
// strictly with the Envoy API of one go-control-plane release, the one its
// build module pins (build.sh builds one binary per release).
//
//	envoy-compat --istio 1.27 [--all] FILE...
//
// Each FILE is a multi-document YAML stream; documents that are not
// EnvoyFilters are skipped. A patch is checked when it applies to the given
// Istio minor version: the EnvoyFilter's globalconfig.io/istio-versions
// annotation, when present, lists that version or only older ones, and the
// patch's match.proxy.proxyVersion regexp, when set, matches "<version>.0"
// (unanchored, as istiod matches it). --all checks every patch.
//
// A patch value is decoded with protojson's defaults, into the Envoy type
// istiod decodes it into (istio pkg/config/xds BuildXDSObjectFromStruct):
// an unknown field, an unknown enum name or an unknown "@type" is a
// problem. Every Envoy and xDS proto package the items, the patch IR,
// validate --envoy and the MCP server link is imported by a file build.sh
// generates, so an unknown "@type" means the type is missing from this
// Envoy API, not from the binary.
//
// Exit status: 0 no problem, 1 problems (one line each), 2 usage or input
// error.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// versionsAnnotation lists the Istio minor versions an EnvoyFilter was
// rendered for; newer versions get what the newest listed one gets.
const versionsAnnotation = "globalconfig.io/istio-versions"

const envoyModule = "github.com/envoyproxy/go-control-plane/envoy"

// newValue returns an empty message of the type istiod decodes a patch
// value of applyTo into.
var newValue = map[string]func() proto.Message{
	"LISTENER":            func() proto.Message { return &listener.Listener{} },
	"FILTER_CHAIN":        func() proto.Message { return &listener.FilterChain{} },
	"NETWORK_FILTER":      func() proto.Message { return &listener.Filter{} },
	"HTTP_FILTER":         func() proto.Message { return &hcm.HttpFilter{} },
	"ROUTE_CONFIGURATION": func() proto.Message { return &route.RouteConfiguration{} },
	"VIRTUAL_HOST":        func() proto.Message { return &route.VirtualHost{} },
	"HTTP_ROUTE":          func() proto.Message { return &route.Route{} },
	"CLUSTER":             func() proto.Message { return &cluster.Cluster{} },
	"EXTENSION_CONFIG":    func() proto.Message { return &core.TypedExtensionConfig{} },
	"BOOTSTRAP":           func() proto.Message { return &bootstrap.Bootstrap{} },
	"LISTENER_FILTER":     func() proto.Message { return &listener.ListenerFilter{} },
}

// envoyFilter is the part of an EnvoyFilter manifest the check reads.
type envoyFilter struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		ConfigPatches []struct {
			ApplyTo string `json:"applyTo"`
			Match   *struct {
				Proxy *struct {
					ProxyVersion string `json:"proxyVersion"`
				} `json:"proxy"`
			} `json:"match"`
			Patch *struct {
				Operation string          `json:"operation"`
				Value     json.RawMessage `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

// minor is an Istio minor version, e.g. 1.27.
type minor struct{ major, minor int }

func parseMinor(s string) (minor, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || x < 0 || y < 0 {
		return minor{}, fmt.Errorf("%q is not an Istio minor version like 1.27", s)
	}
	return minor{x, y}, nil
}

func (v minor) less(w minor) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

func (v minor) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// forVersion reports whether an EnvoyFilter with the given annotations is
// meant for proxies of Istio v.
func forVersion(annotations map[string]string, v minor) (bool, error) {
	list, ok := annotations[versionsAnnotation]
	if !ok {
		return true, nil
	}
	newer := true // v is newer than every listed version
	for _, s := range strings.Split(list, ",") {
		w, err := parseMinor(s)
		if err != nil {
			return true, fmt.Errorf("annotation %s: %v", versionsAnnotation, err)
		}
		if w == v {
			return true, nil
		}
		if !w.less(v) {
			newer = false
		}
	}
	return newer, nil
}

type checker struct {
	istio    minor
	all      bool
	out      io.Writer
	patches  int
	problems int
}

func (c *checker) problem(format string, args ...any) {
	c.problems++
	fmt.Fprintf(c.out, format+"\n", args...)
}

// checkFile checks every EnvoyFilter of one YAML stream. An error is an
// input error (unreadable file, a document that isn't YAML).
func (c *checker) checkFile(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for i, doc := range splitDocuments(data) {
		var ef envoyFilter
		if err := yaml.Unmarshal(doc, &ef); err != nil {
			return fmt.Errorf("%s: document %d: %v", file, i+1, err)
		}
		if ef.Kind != "EnvoyFilter" || !strings.HasPrefix(ef.APIVersion, "networking.istio.io/") {
			continue
		}
		c.checkFilter(file, &ef)
	}
	return nil
}

func (c *checker) checkFilter(file string, ef *envoyFilter) {
	name := ef.Metadata.Name
	if !c.all {
		ok, err := forVersion(ef.Metadata.Annotations, c.istio)
		if err != nil {
			c.problem("%s: EnvoyFilter %s: %v", file, name, err)
		}
		if !ok {
			return
		}
	}
	proxyVersion := c.istio.String() + ".0"
	for i, cp := range ef.Spec.ConfigPatches {
		where := fmt.Sprintf("%s: EnvoyFilter %s patch[%d] (%s)", file, name, i, cp.ApplyTo)
		if cp.Match != nil && cp.Match.Proxy != nil && cp.Match.Proxy.ProxyVersion != "" {
			re, err := regexp.Compile(cp.Match.Proxy.ProxyVersion)
			if err != nil {
				c.problem("%s: match.proxy.proxyVersion: %v", where, err)
				continue
			}
			if !c.all && !re.MatchString(proxyVersion) {
				continue
			}
		}
		if cp.Patch == nil || len(cp.Patch.Value) == 0 || string(cp.Patch.Value) == "null" {
			continue // REMOVE and friends: nothing to decode
		}
		c.patches++
		newMsg, ok := newValue[cp.ApplyTo]
		if !ok {
			c.problem("%s: unknown applyTo", where)
			continue
		}
		if err := protojson.Unmarshal(cp.Patch.Value, newMsg()); err != nil {
			c.problem("%s: %v", where, err)
		}
	}
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(cur.Bytes())) > 0 {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		t := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

// envoyAPIVersion is the go-control-plane release this binary was built
// with.
func envoyAPIVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == envoyModule {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(unknown)"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("envoy-compat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: envoy-compat --istio 1.27 [--all] FILE...\n")
		fs.PrintDefaults()
	}
	istio := fs.String("istio", "", "Istio minor version whose proxies the patches are checked for, e.g. 1.27")
	all := fs.Bool("all", false, "check every patch, whatever Istio version it is for")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	c := &checker{all: *all, out: stdout}
	switch {
	case *istio != "":
		v, err := parseMinor(*istio)
		if err != nil {
			fmt.Fprintf(stderr, "envoy-compat: --istio: %v\n", err)
			return 2
		}
		c.istio = v
	case !*all:
		fs.Usage()
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	for _, file := range fs.Args() {
		if err := c.checkFile(file); err != nil {
			fmt.Fprintf(stderr, "envoy-compat: %v\n", err)
			return 2
		}
	}
	fmt.Fprintf(stdout, "checked %d patches, %d problems (Envoy API of go-control-plane %s)\n",
		c.patches, c.problems, envoyAPIVersion())
	if c.problems > 0 {
		return 1
	}
	return 0
}
