package envoycheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	matchingv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/matching/v3"
	basicauthv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/basic_auth/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// apply applies one config patch the way istiod applies an EnvoyFilter's:
// MERGE is a proto merge that merges typed configs (Anys) of one type by
// value; inserts place the value relative to the matched filter. Patch
// shapes globalconfig never generates are an error, so that the check
// never claims to have loaded what it skipped.
func (c *config) apply(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) error {
	value, err := envoyfilter.FromStruct(cp.GetApplyTo(), cp.GetPatch().GetValue())
	if err != nil {
		return err
	}
	op := cp.GetPatch().GetOperation()
	lm := cp.GetMatch().GetListener()
	rm := cp.GetMatch().GetRouteConfiguration()
	shape := fmt.Errorf("%s %s is a patch the representative configuration does not model", op, cp.GetApplyTo())
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_LISTENER:
		if op != networking.EnvoyFilter_Patch_MERGE {
			return shape
		}
		for _, l := range c.listenersOn(lm.GetPortNumber()) {
			if err := merge(l, value); err != nil {
				return err
			}
		}
	case networking.EnvoyFilter_LISTENER_FILTER:
		for _, l := range c.listenersOn(lm.GetPortNumber()) {
			f := proto.Clone(value).(*listenerv3.ListenerFilter)
			switch op {
			case networking.EnvoyFilter_Patch_INSERT_FIRST:
				l.ListenerFilters = slices.Insert(l.ListenerFilters, 0, f)
			case networking.EnvoyFilter_Patch_ADD:
				l.ListenerFilters = append(l.ListenerFilters, f)
			default:
				return shape
			}
		}
	case networking.EnvoyFilter_FILTER_CHAIN:
		if op != networking.EnvoyFilter_Patch_MERGE {
			return shape
		}
		for _, l := range c.listenersOn(lm.GetPortNumber()) {
			for _, fc := range l.GetFilterChains() {
				if err := merge(fc, value); err != nil {
					return err
				}
			}
		}
	case networking.EnvoyFilter_NETWORK_FILTER:
		want := lm.GetFilterChain().GetFilter().GetName()
		for _, l := range c.listenersOn(lm.GetPortNumber()) {
			for _, fc := range l.GetFilterChains() {
				if err := c.patchNetworkFilters(fc, want, op, value.(*listenerv3.Filter)); err != nil {
					return err
				}
			}
		}
	case networking.EnvoyFilter_HTTP_FILTER:
		sub := lm.GetFilterChain().GetFilter().GetSubFilter().GetName()
		for _, hcm := range c.hcmsOn(lm.GetPortNumber()) {
			if err := patchHTTPFilters(hcm, sub, op, value.(*hcmv3.HttpFilter)); err != nil {
				return err
			}
		}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		if op != networking.EnvoyFilter_Patch_MERGE || rm.GetVhost() != nil || rm.GetName() != "" {
			return shape
		}
		for _, hcm := range c.hcmsOn(rm.GetPortNumber()) {
			if err := merge(hcm.GetRouteConfig(), value); err != nil {
				return err
			}
		}
	case networking.EnvoyFilter_HTTP_ROUTE:
		if op != networking.EnvoyFilter_Patch_MERGE || rm.GetVhost().GetName() != "" || rm.GetVhost().GetRoute().GetName() != "" {
			return shape
		}
		for _, hcm := range c.hcmsOn(rm.GetPortNumber()) {
			for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if rm.GetVhost().GetRoute().GetAction() == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE && r.GetRoute() == nil {
						continue
					}
					if err := merge(r, value.(*routev3.Route)); err != nil {
						return err
					}
				}
			}
		}
	case networking.EnvoyFilter_CLUSTER:
		if op != networking.EnvoyFilter_Patch_MERGE {
			return shape
		}
		name := cp.GetMatch().GetCluster().GetName()
		for _, cl := range c.clusters {
			if name == "" || cl.GetName() == name {
				if err := merge(cl, value); err != nil {
					return err
				}
			}
		}
	default:
		return shape
	}
	return nil
}

// listenersOn are the listeners on port, or all of them for 0.
func (c *config) listenersOn(port uint32) []*listenerv3.Listener {
	var out []*listenerv3.Listener
	for _, l := range c.listeners {
		if port == 0 || l.GetAddress().GetSocketAddress().GetPortValue() == port {
			out = append(out, l)
		}
	}
	return out
}

// hcmsOn are the decoded HTTP connection managers of the listeners on
// port (all for 0).
func (c *config) hcmsOn(port uint32) []*hcmv3.HttpConnectionManager {
	var out []*hcmv3.HttpConnectionManager
	for _, l := range c.listenersOn(port) {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if hcm := c.hcm(f); hcm != nil {
					out = append(out, hcm)
				}
			}
		}
	}
	return out
}

// hcm decodes f's HTTP connection manager once and keeps it until encode.
func (c *config) hcm(f *listenerv3.Filter) *hcmv3.HttpConnectionManager {
	if f.GetName() != envoyfilter.HTTPConnectionManager {
		return nil
	}
	if c.hcms == nil {
		c.hcms = map[*listenerv3.Filter]*hcmv3.HttpConnectionManager{}
	}
	if h, ok := c.hcms[f]; ok {
		return h
	}
	h := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
		return nil
	}
	c.hcms[f] = h
	return h
}

// encode packs the decoded HTTP connection managers back into their filters.
func (c *config) encode() error {
	for f, h := range c.hcms {
		if err := LocalLogs(h); err != nil {
			return err
		}
		typed, err := anypb.New(h)
		if err != nil {
			return err
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: typed}
	}
	c.hcms = nil
	return nil
}

// localRoot holds the check's stand-ins for a proxy's writable folders
// (under "proxy") and the place of every folder a proxy lacks ("absent",
// which nothing creates), per user of this machine.
var localRoot = filepath.Join(os.TempDir(), fmt.Sprintf("globalconfig-envoycheck-%d", os.Getuid()))

// LocalLogs points the file access logs that an Istio proxy writes in
// its own writable folders (items.ProxyWritable), which this machine may
// lack, at the same names in stand-ins for exactly those folders under a
// temporary directory: Envoy opens a log file when it loads the listener,
// and validate mode does too. A log in a sub-folder of them, which no
// proxy has and Envoy does not create, is pointed at a folder that does
// not exist either, so that Envoy refuses it here as it does at a proxy.
// ProxyPaths turns the local names in Envoy's messages back.
//
// It also points the htpasswd files basic_auth reads from the gateway
// pods (basicAuth.usersFile: a Secret mounted there, which this machine
// lacks) at one stand-in: Envoy reads the file when it loads the
// listener, and refuses an empty one; what the mounted file holds can't
// be checked before a pod mounts it.
func LocalLogs(h *hcmv3.HttpConnectionManager) error {
	if err := localMounts(h); err != nil {
		return err
	}
	for _, l := range h.GetAccessLog() {
		if l.GetTypedConfig() == nil || !l.GetTypedConfig().MessageIs(&filev3.FileAccessLog{}) {
			continue
		}
		f := &filev3.FileAccessLog{}
		if err := l.GetTypedConfig().UnmarshalTo(f); err != nil {
			return fmt.Errorf("access log: %w", err)
		}
		local, err := localPath(f.Path)
		if err != nil {
			return err
		}
		if local == f.Path {
			continue
		}
		f.Path = local
		typed, err := anypb.New(f)
		if err != nil {
			return err
		}
		l.ConfigType = &accesslogv3.AccessLog_TypedConfig{TypedConfig: typed}
	}
	return nil
}

// localMounts points every basic_auth users file of h, plain or wrapped
// in a matcher (items/internal/skip), at a stand-in of one user line.
func localMounts(h *hcmv3.HttpConnectionManager) error {
	for _, f := range h.GetHttpFilters() {
		typed := f.GetTypedConfig()
		if typed == nil {
			continue
		}
		if typed.MessageIs(&matchingv3.ExtensionWithMatcher{}) {
			w := &matchingv3.ExtensionWithMatcher{}
			if err := typed.UnmarshalTo(w); err != nil {
				return fmt.Errorf("HTTP filter %s: %w", f.GetName(), err)
			}
			inner, changed, err := localUsers(w.GetExtensionConfig().GetTypedConfig())
			if err != nil || !changed {
				return err
			}
			w.ExtensionConfig.TypedConfig = inner
			if typed, err = anypb.New(w); err != nil {
				return err
			}
			f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}
			continue
		}
		if local, changed, err := localUsers(typed); err != nil {
			return err
		} else if changed {
			f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: local}
		}
	}
	return nil
}

// standInUsers is the stand-in htpasswd: one user whose password is
// empty, a line Envoy takes.
const standInUsers = "stand-in:{SHA}2jmj7l5rSw0yVb/vlWAYkK/YBwk=\n"

// localUsers is typed with its basic_auth users file pointed at the
// stand-in; changed is false when typed is no basic_auth reading a file.
func localUsers(typed *anypb.Any) (out *anypb.Any, changed bool, err error) {
	if typed == nil || !typed.MessageIs(&basicauthv3.BasicAuth{}) {
		return typed, false, nil
	}
	b := &basicauthv3.BasicAuth{}
	if err := typed.UnmarshalTo(b); err != nil {
		return nil, false, fmt.Errorf("basic_auth: %w", err)
	}
	if name := b.GetUsers().GetFilename(); name == "" || !filepath.IsAbs(name) || filepath.Clean(name) != name {
		// A relative path is relative to the proxy's working directory,
		// where no Secret is mounted: Envoy refuses it there as here.
		return typed, false, nil
	}
	dir := filepath.Join(localRoot, "mounted")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("a stand-in for a mounted htpasswd file: %w", err)
	}
	standIn := filepath.Join(dir, "htpasswd")
	if err := writeStandIn(standIn, []byte(standInUsers)); err != nil {
		return nil, false, fmt.Errorf("a stand-in for a mounted htpasswd file: %w", err)
	}
	b.Users = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: standIn}}
	out, err = anypb.New(b)
	return out, err == nil, err
}

// writeStandIn makes path hold data. Checks run at once (the webhook's,
// test/agreement's workers) share the file while their Envoys read it, so
// it is never truncated in place: a file that holds data already is left
// alone, and another is replaced whole by a rename.
func writeStandIn(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".stand-in-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// localPath is where the check has Envoy open a proxy's file: a file
// directly in a writable folder of the proxy in that folder's stand-in
// (made here), a file deeper in one under "absent"; any other path as it
// is.
func localPath(file string) (string, error) {
	for _, dir := range items.ProxyWritable {
		rest, ok := strings.CutPrefix(file, dir)
		if !ok || rest == "" {
			continue
		}
		if strings.Contains(rest, "/") {
			return filepath.Join(localRoot, "absent", file), nil
		}
		standIn := filepath.Join(localRoot, "proxy", dir)
		if err := os.MkdirAll(standIn, 0o700); err != nil {
			return "", fmt.Errorf("a stand-in for the proxy's folder %s: %w", dir, err)
		}
		return filepath.Join(standIn, rest), nil
	}
	return file, nil
}

// ProxyPaths is Envoy's message msg with the local stand-ins of a proxy's
// files (LocalLogs) named as the proxy names them.
func ProxyPaths(msg string) string {
	msg = strings.ReplaceAll(msg, filepath.Join(localRoot, "absent"), "")
	return strings.ReplaceAll(msg, filepath.Join(localRoot, "proxy"), "")
}

// patchNetworkFilters applies a NETWORK_FILTER patch to one filter chain:
// MERGE into the filter named want, or an insert relative to it.
func (c *config) patchNetworkFilters(fc *listenerv3.FilterChain, want string, op networking.EnvoyFilter_Patch_Operation, value *listenerv3.Filter) error {
	i := slices.IndexFunc(fc.GetFilters(), func(f *listenerv3.Filter) bool { return want == "" || f.GetName() == want })
	if i < 0 {
		return nil
	}
	switch op {
	case networking.EnvoyFilter_Patch_MERGE:
		f := fc.Filters[i]
		if hcm := c.hcm(f); hcm != nil && value.GetTypedConfig() != nil {
			patch := &hcmv3.HttpConnectionManager{}
			if err := value.GetTypedConfig().UnmarshalTo(patch); err != nil {
				return fmt.Errorf("merge into the HTTP connection manager: %w", err)
			}
			return merge(hcm, patch)
		}
		return merge(f, value)
	case networking.EnvoyFilter_Patch_INSERT_BEFORE:
		fc.Filters = slices.Insert(fc.Filters, i, proto.Clone(value).(*listenerv3.Filter))
	case networking.EnvoyFilter_Patch_INSERT_AFTER:
		fc.Filters = slices.Insert(fc.Filters, i+1, proto.Clone(value).(*listenerv3.Filter))
	case networking.EnvoyFilter_Patch_INSERT_FIRST:
		fc.Filters = slices.Insert(fc.Filters, 0, proto.Clone(value).(*listenerv3.Filter))
	default:
		return fmt.Errorf("%s NETWORK_FILTER is a patch the representative configuration does not model", op)
	}
	return nil
}

// patchHTTPFilters applies an HTTP_FILTER patch to one HTTP connection
// manager, relative to its filter sub (none: the chain).
func patchHTTPFilters(hcm *hcmv3.HttpConnectionManager, sub string, op networking.EnvoyFilter_Patch_Operation, value *hcmv3.HttpFilter) error {
	fs := hcm.GetHttpFilters()
	i := slices.IndexFunc(fs, func(f *hcmv3.HttpFilter) bool { return f.GetName() == sub })
	v := proto.Clone(value).(*hcmv3.HttpFilter)
	switch op {
	case networking.EnvoyFilter_Patch_INSERT_FIRST:
		hcm.HttpFilters = slices.Insert(fs, 0, v)
	case networking.EnvoyFilter_Patch_ADD:
		hcm.HttpFilters = append(fs, v)
	case networking.EnvoyFilter_Patch_INSERT_BEFORE:
		if i >= 0 {
			hcm.HttpFilters = slices.Insert(fs, i, v)
		}
	case networking.EnvoyFilter_Patch_INSERT_AFTER:
		if i >= 0 {
			hcm.HttpFilters = slices.Insert(fs, i+1, v)
		}
	case networking.EnvoyFilter_Patch_MERGE:
		if i >= 0 {
			return merge(fs[i], value)
		}
	default:
		return fmt.Errorf("%s HTTP_FILTER is a patch the representative configuration does not model", op)
	}
	return nil
}

// merge merges src into dst as istiod does: proto merge semantics (set
// scalars replace, lists append, maps replace entries, messages merge),
// except that an Any of the same type on both sides is merged by value,
// not replaced.
func merge(dst, src proto.Message) error {
	return mergeMessage(dst.ProtoReflect(), src.ProtoReflect())
}

func mergeMessage(dst, src protoreflect.Message) error {
	var err error
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			dl := dst.Mutable(fd).List()
			for i := range v.List().Len() {
				dl.Append(cloneValue(fd, v.List().Get(i)))
			}
		case fd.IsMap():
			dm := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				dm.Set(k, cloneValue(fd.MapValue(), mv))
				return true
			})
		case fd.Message() != nil:
			if fd.Message().FullName() == "google.protobuf.Any" && dst.Has(fd) {
				err = mergeAny(dst.Mutable(fd).Message().Interface().(*anypb.Any), v.Message().Interface().(*anypb.Any))
			} else {
				err = mergeMessage(dst.Mutable(fd).Message(), v.Message())
			}
		default:
			dst.Set(fd, v)
		}
		return err == nil
	})
	return err
}

// mergeAny merges src into dst by value when both hold the same type, and
// replaces dst otherwise.
func mergeAny(dst, src *anypb.Any) error {
	if dst.GetTypeUrl() != src.GetTypeUrl() {
		proto.Reset(dst)
		proto.Merge(dst, src)
		return nil
	}
	d, err := dst.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("merge %s: %w", dst.GetTypeUrl(), err)
	}
	s, err := src.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("merge %s: %w", src.GetTypeUrl(), err)
	}
	if err := merge(d, s); err != nil {
		return err
	}
	return dst.MarshalFrom(d)
}

// cloneValue copies a list element or map value so that the two
// configurations never share a message.
func cloneValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) protoreflect.Value {
	if fd.Message() != nil {
		return protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
	}
	return v
}
