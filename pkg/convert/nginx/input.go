package nginx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
	"go.yaml.in/yaml/v3"
)

// Input is an ingress-nginx controller's global configuration: its
// ConfigMap's data, and the ConfigMaps add-headers and proxy-set-headers
// name, when they were given.
type Input struct {
	// Name and Namespace are the controller ConfigMap's.
	Name, Namespace string
	// Data is the controller ConfigMap's data, every value a string as
	// ingress-nginx reads it.
	Data map[string]string
	// HeaderMaps holds the other ConfigMaps given, by NAMESPACE/NAME.
	HeaderMaps map[string]map[string]string
	// Helm is true when the input was a Helm values file.
	Helm bool
}

// DefaultNamespace is where ingress-nginx's chart and manifests install
// it.
const DefaultNamespace = "ingress-nginx"

// The ConfigMaps ingress-nginx's Helm chart makes of controller.addHeaders
// and controller.proxySetHeaders.
const (
	helmAddHeaders      = "ingress-nginx-custom-add-headers"
	helmProxySetHeaders = "ingress-nginx-custom-headers"
)

type configMap struct {
	name, namespace string
	data            map[string]string
}

// ReadInput reads what `convert --from ingress-nginx -f` is given:
//   - the controller's ConfigMap manifest;
//   - several documents (---) or a List holding it and the ConfigMaps its
//     add-headers and proxy-set-headers name;
//   - a Helm values file, whose controller.config is the ConfigMap's data
//     and whose controller.addHeaders and controller.proxySetHeaders are
//     the header maps.
//
// extra holds the files of --configmap-dir, searched for the header
// ConfigMaps.
func ReadInput(data []byte, extra ...[]byte) (Input, error) {
	if err := out.CheckUTF8(data); err != nil {
		return Input{}, err
	}
	docs, err := decodeAll(data)
	if err != nil {
		return Input{}, err
	}
	in := Input{HeaderMaps: map[string]map[string]string{}}
	var maps []configMap
	var helm configMap // the controller's, from Helm values
	for i, d := range docs {
		if d.Kind != yaml.MappingNode {
			return Input{}, fmt.Errorf("document %d: expected a ConfigMap, a List or Helm values, got %s", i+1, kindName(d))
		}
		switch kind := scalar(d, "kind"); {
		case kind == "ConfigMap":
			cm, err := readConfigMap(d)
			if err != nil {
				return Input{}, fmt.Errorf("document %d: %w", i+1, err)
			}
			maps = append(maps, cm)
		case kind == "List" || strings.HasSuffix(kind, "List"):
			for j, item := range seq(d, "items") {
				if scalar(item, "kind") != "ConfigMap" {
					continue
				}
				cm, err := readConfigMap(item)
				if err != nil {
					return Input{}, fmt.Errorf("document %d, items[%d]: %w", i+1, j, err)
				}
				maps = append(maps, cm)
			}
		case kind == "" && get(d, "controller") != nil:
			if in.Helm {
				return Input{}, fmt.Errorf("document %d: a second Helm values document", i+1)
			}
			cm, headers, err := readHelm(get(d, "controller"))
			if err != nil {
				return Input{}, fmt.Errorf("document %d: %w", i+1, err)
			}
			in.Helm, helm = true, cm
			for k, v := range headers {
				in.HeaderMaps[k] = v
			}
		case kind == "":
			return Input{}, fmt.Errorf("document %d: neither a ConfigMap nor Helm values (no kind, no controller key)", i+1)
		default:
			// Other objects of a manifest bundle (Deployments, Services):
			// not the controller's configuration.
		}
	}
	for _, e := range extra {
		docs, err := decodeAll(e)
		if err != nil {
			return Input{}, err
		}
		for _, d := range docs {
			if d.Kind == yaml.MappingNode && scalar(d, "kind") == "ConfigMap" {
				cm, err := readConfigMap(d)
				if err != nil {
					return Input{}, err
				}
				in.HeaderMaps[cm.namespace+"/"+cm.name] = cm.data
			}
		}
	}
	main := helm
	if !in.Helm {
		if main, err = pickController(maps); err != nil {
			return Input{}, err
		}
	}
	in.Name, in.Namespace, in.Data = main.name, main.namespace, main.data
	for _, cm := range maps {
		if cm.name != main.name || cm.namespace != main.namespace || in.Helm {
			in.HeaderMaps[cm.namespace+"/"+cm.name] = cm.data
		}
	}
	return in, nil
}

// pickController finds the controller's ConfigMap among those given: the
// only one no add-headers or proxy-set-headers names.
func pickController(maps []configMap) (configMap, error) {
	if len(maps) == 0 {
		return configMap{}, errors.New("no ConfigMap in the input: give ingress-nginx's controller ConfigMap (kubectl -n ingress-nginx get configmap ingress-nginx-controller -o yaml) or a Helm values file with controller.config")
	}
	referenced := map[string]bool{}
	for _, cm := range maps {
		for _, k := range []string{"add-headers", "proxy-set-headers"} {
			if ref, ok := cm.data[k]; ok {
				referenced[qualify(ref, cm.namespace)] = true
			}
		}
	}
	var candidates []configMap
	for _, cm := range maps {
		if !referenced[cm.namespace+"/"+cm.name] {
			candidates = append(candidates, cm)
		}
	}
	if len(candidates) == 1 {
		return candidates[0], nil
	}
	var names []string
	for _, cm := range candidates {
		if cm.name == "ingress-nginx-controller" {
			return cm, nil
		}
		names = append(names, cm.namespace+"/"+cm.name)
	}
	return configMap{}, fmt.Errorf("several ConfigMaps could be the controller's (%s); give its ConfigMap and only the ones it names in add-headers and proxy-set-headers", strings.Join(names, ", "))
}

// qualify turns an add-headers or proxy-set-headers reference into
// NAMESPACE/NAME; ingress-nginx's references are NAMESPACE/NAME, a bare
// name is read in the controller's namespace here.
func qualify(ref, namespace string) string {
	ref = strings.TrimSpace(ref)
	if strings.Contains(ref, "/") {
		return ref
	}
	return namespace + "/" + ref
}

func readConfigMap(n *yaml.Node) (configMap, error) {
	meta := get(n, "metadata")
	cm := configMap{name: scalar(meta, "name"), namespace: scalar(meta, "namespace"), data: map[string]string{}}
	if cm.namespace == "" {
		cm.namespace = DefaultNamespace
	}
	data := get(n, "data")
	if data == nil || data.Tag == "!!null" {
		return cm, nil
	}
	if data.Kind != yaml.MappingNode {
		return cm, fmt.Errorf("ConfigMap %s: data must be a mapping", cm.name)
	}
	for i := 0; i+1 < len(data.Content); i += 2 {
		k, v := data.Content[i].Value, data.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return cm, fmt.Errorf("ConfigMap %s: data.%s must be a string, got %s", cm.name, k, kindName(v))
		}
		cm.data[k] = v.Value
	}
	return cm, nil
}

// readHelm reads ingress-nginx's chart values: controller.config, where
// the chart quotes every value, and the header maps the chart turns into
// ConfigMaps of its own.
func readHelm(controller *yaml.Node) (configMap, map[string]map[string]string, error) {
	cm := configMap{name: "ingress-nginx-controller", namespace: DefaultNamespace, data: map[string]string{}}
	headers := map[string]map[string]string{}
	if controller.Kind != yaml.MappingNode {
		return cm, nil, errors.New("controller must be a mapping")
	}
	read := func(key string) (map[string]string, error) {
		n := get(controller, key)
		if n == nil || n.Tag == "!!null" {
			return nil, nil
		}
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("controller.%s must be a mapping, got %s", key, kindName(n))
		}
		m := map[string]string{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("controller.%s.%s must be a single value, got %s", key, k, kindName(v))
			}
			m[k] = v.Value
		}
		return m, nil
	}
	config, err := read("config")
	if err != nil {
		return cm, nil, err
	}
	for k, v := range config {
		cm.data[k] = v
	}
	for _, h := range []struct{ values, key, name string }{
		{"addHeaders", "add-headers", helmAddHeaders},
		{"proxySetHeaders", "proxy-set-headers", helmProxySetHeaders},
	} {
		m, err := read(h.values)
		if err != nil {
			return cm, nil, err
		}
		if len(m) == 0 {
			continue
		}
		ref := DefaultNamespace + "/" + h.name
		headers[ref] = m
		if _, set := cm.data[h.key]; !set {
			cm.data[h.key] = ref // what the chart writes
		}
	}
	return cm, headers, nil
}

// MaxDirFile bounds each file ReadDir reads: a ConfigMap holds at most
// 1 MiB.
const MaxDirFile = 1 << 20

// ReadDir reads the YAML and JSON files of a --configmap-dir; a file over
// MaxDirFile is an error naming it, found before it is read.
func ReadDir(dir string) ([][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, e := range entries {
		if e.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
			continue
		}
		if info, err := e.Info(); err == nil && info.Size() > MaxDirFile {
			return nil, fmt.Errorf("%s is over %d bytes (1 MiB, what a ConfigMap holds)", e.Name(), MaxDirFile)
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func decodeAll(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not YAML: %w", err)
		}
		if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
			continue // an empty document between separators
		}
		docs = append(docs, n.Content[0])
	}
}

func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func scalar(n *yaml.Node, key string) string {
	if v := get(n, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func seq(n *yaml.Node, key string) []*yaml.Node {
	if v := get(n, key); v != nil && v.Kind == yaml.SequenceNode {
		return v.Content
	}
	return nil
}

func kindName(n *yaml.Node) string { return items.DescribeTag(n.ShortTag()) }
