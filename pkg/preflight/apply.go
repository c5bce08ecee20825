package preflight

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// Patch is one config patch of an EnvoyFilter that reaches the proxy, with
// its value decoded into the type istiod uses for its applyTo.
type Patch struct {
	Item   string // the item it comes from; the EnvoyFilter's name for others
	Filter string // NAMESPACE/NAME of its EnvoyFilter
	// Priority is its EnvoyFilter's.
	Priority int32
	CP       *networking.EnvoyFilter_EnvoyConfigObjectPatch
	Value    proto.Message
}

func (p Patch) op() networking.EnvoyFilter_Patch_Operation { return p.CP.GetPatch().GetOperation() }

func (p Patch) lm() *networking.EnvoyFilter_ListenerMatch { return p.CP.GetMatch().GetListener() }

func (p Patch) contextMatches(pctx networking.EnvoyFilter_PatchContext) bool {
	c := p.CP.GetMatch().GetContext()
	return c == pctx || c == networking.EnvoyFilter_ANY
}

// byApplyTo groups patches by what they apply to, keeping their order.
type byApplyTo map[networking.EnvoyFilter_ApplyTo][]Patch

// patchSet is the patches of one Apply, and what it could not predict.
type patchSet struct {
	by    byApplyTo
	ports PortMap
	// aborted: istiod panics merging two typed configs of different types
	// and stops patching that kind of resource; what it then sends is not
	// predicted.
	aborted []string
}

func (g *patchSet) mismatch(p Patch, where string, err error) {
	g.aborted = append(g.aborted, fmt.Sprintf("%s: its %s MERGE into %s fails in istiod (%v), which then stops applying EnvoyFilters to the proxy's %s: not predicted", p.Item, p.CP.GetApplyTo(), where, err, kindOf(p.CP.GetApplyTo())))
}

// mergeFilter is istiod's MERGE of a network or HTTP filter (name, cfg)
// with the patch's (userName, userCfg): a name in the patch renames the
// filter, and the typed configs are merged by value; where that merge
// fails, istiod keeps the filter's config, and the failure is reported.
func (g *patchSet) mergeFilter(p Patch, where, name string, cfg *anypb.Any, userName string, userCfg *anypb.Any) (string, *anypb.Any) {
	if userName != "" {
		name = userName
	}
	if userCfg == nil {
		return name, cfg
	}
	merged, err := mergeAnys(cfg, userCfg)
	if err != nil {
		g.mismatch(p, where, err)
		return name, cfg
	}
	return name, merged
}

func kindOf(a networking.EnvoyFilter_ApplyTo) string {
	if a == networking.EnvoyFilter_CLUSTER {
		return "clusters"
	}
	return "listeners"
}

func group(ps []Patch) byApplyTo {
	out := byApplyTo{}
	for _, p := range ps {
		out[p.CP.GetApplyTo()] = append(out[p.CP.GetApplyTo()], p)
	}
	return out
}

// supported are the applyTo kinds Apply predicts; the others are listed
// as not predicted.
var supported = map[networking.EnvoyFilter_ApplyTo]bool{
	networking.EnvoyFilter_LISTENER:            true,
	networking.EnvoyFilter_LISTENER_FILTER:     true,
	networking.EnvoyFilter_FILTER_CHAIN:        true,
	networking.EnvoyFilter_NETWORK_FILTER:      true,
	networking.EnvoyFilter_HTTP_FILTER:         true,
	networking.EnvoyFilter_ROUTE_CONFIGURATION: true,
	networking.EnvoyFilter_VIRTUAL_HOST:        true,
	networking.EnvoyFilter_HTTP_ROUTE:          true,
	networking.EnvoyFilter_CLUSTER:             true,
}

// Kind tells which context istiod patches each resource of a proxy in: a
// gateway's all in GATEWAY; a sidecar's by direction, SIDECAR_INBOUND for
// its inbound listeners (traffic_direction INBOUND), the route
// configurations inline in them and its inbound| clusters, and
// SIDECAR_OUTBOUND for the rest.
type Kind struct{ Sidecar bool }

// Contexts are the contexts istiod patches the proxy in, in the order it
// adds what ADD patches add.
func (k Kind) Contexts() []networking.EnvoyFilter_PatchContext {
	if k.Sidecar {
		return []networking.EnvoyFilter_PatchContext{networking.EnvoyFilter_SIDECAR_OUTBOUND, networking.EnvoyFilter_SIDECAR_INBOUND}
	}
	return []networking.EnvoyFilter_PatchContext{networking.EnvoyFilter_GATEWAY}
}

func (k Kind) listener(l *listenerv3.Listener) networking.EnvoyFilter_PatchContext {
	switch {
	case !k.Sidecar:
		return networking.EnvoyFilter_GATEWAY
	case l.GetTrafficDirection() == corev3.TrafficDirection_INBOUND || l.GetName() == "virtualInbound":
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

func (k Kind) route(rc *routev3.RouteConfiguration) networking.EnvoyFilter_PatchContext {
	switch {
	case !k.Sidecar:
		return networking.EnvoyFilter_GATEWAY
	case strings.HasPrefix(rc.GetName(), "inbound|"):
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

func (k Kind) cluster(cl *clusterv3.Cluster) networking.EnvoyFilter_PatchContext {
	switch {
	case !k.Sidecar:
		return networking.EnvoyFilter_GATEWAY
	case strings.HasPrefix(cl.GetName(), "inbound|") || strings.HasPrefix(cl.GetName(), "InboundPassthroughCluster"):
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

// reaches tells whether p reaches any context of the proxy.
func (k Kind) reaches(p Patch) bool {
	for _, c := range k.Contexts() {
		if p.contextMatches(c) {
			return true
		}
	}
	return false
}

// Apply returns a copy of c with ps applied in order to a proxy of kind k,
// the way istiod applies EnvoyFilters (pilot/pkg/networking/core/envoyfilter):
// listeners first whole, then their listener filters, filter chains,
// network filters and HTTP filters (a sidecar's inbound route
// configurations, inline in its connection managers, before all that, as
// istiod builds them); route configurations, then virtual hosts; clusters
// merged, then added. MERGE is Istio's proto merge: set scalars replace,
// lists append, a Duration or a nested Any is replaced, and a filter's
// typed config is merged by value.
func Apply(c *Config, k Kind, ports PortMap, ps []Patch) (*Config, error) {
	for _, p := range ps {
		if !supported[p.CP.GetApplyTo()] && k.reaches(p) {
			return nil, fmt.Errorf("%s: applyTo %s is not predicted", p.Filter, p.CP.GetApplyTo())
		}
	}
	out := c.clone()
	g := &patchSet{by: group(ps), ports: ports}
	for _, l := range out.Listeners {
		pctx := k.listener(l)
		if pctx == networking.EnvoyFilter_SIDECAR_INBOUND {
			if err := patchInlineRoutes(pctx, g, l); err != nil {
				return nil, err
			}
		}
		if err := patchListener(pctx, g, l); err != nil {
			return nil, err
		}
	}
	out.Listeners = append(out.Listeners, addedBy[*listenerv3.Listener](k, g.by[networking.EnvoyFilter_LISTENER])...)
	out.Listeners = slices.DeleteFunc(out.Listeners, func(l *listenerv3.Listener) bool { return l.GetName() == "" })

	for i, rc := range out.Routes {
		out.Routes[i] = patchRoute(k.route(rc), g, rc)
	}

	var clusters []*clusterv3.Cluster
	for _, cl := range out.Clusters {
		if patchCluster(k.cluster(cl), g, cl) {
			clusters = append(clusters, cl)
		}
	}
	out.Clusters = append(clusters, addedBy[*clusterv3.Cluster](k, g.by[networking.EnvoyFilter_CLUSTER])...)
	out.aborted = g.aborted
	return out, nil
}

// addedBy are the listeners or clusters the ADD patches of ps add to a
// proxy of kind k, per context in istiod's order; an ADD in context ANY
// adds once, with the outbound (or gateway) ones.
func addedBy[T proto.Message](k Kind, ps []Patch) []T {
	var out []T
	for _, pctx := range k.Contexts() {
		for _, p := range ps {
			if p.op() != networking.EnvoyFilter_Patch_ADD {
				continue
			}
			if p.CP.GetMatch().GetContext() == networking.EnvoyFilter_ANY && pctx != networking.EnvoyFilter_SIDECAR_OUTBOUND && pctx != networking.EnvoyFilter_GATEWAY {
				continue
			}
			if p.contextMatches(pctx) {
				out = append(out, proto.Clone(p.Value).(T))
			}
		}
	}
	return out
}

// patchInlineRoutes patches the route configurations inline in l's
// connection managers.
func patchInlineRoutes(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener) error {
	return eachHCM(l, func(hcm *hcmv3.HttpConnectionManager) bool {
		if rc := hcm.GetRouteConfig(); rc != nil {
			hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: patchRoute(pctx, g, rc)}
			return true
		}
		return false
	})
}

// eachHCM calls f with every HTTP connection manager of l, and packs it
// again when f changed it.
func eachHCM(l *listenerv3.Listener, f func(*hcmv3.HttpConnectionManager) bool) error {
	chains := slices.Clone(l.FilterChains)
	if l.DefaultFilterChain != nil {
		chains = append(chains, l.DefaultFilterChain)
	}
	for _, fc := range chains {
		for _, nf := range fc.GetFilters() {
			if nf.GetName() != "envoy.filters.network.http_connection_manager" || nf.GetTypedConfig() == nil {
				continue
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := nf.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				continue
			}
			if !f(hcm) {
				continue
			}
			a, err := anypb.New(hcm)
			if err != nil {
				return fmt.Errorf("encode the connection manager of listener %s: %w", l.GetName(), err)
			}
			nf.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
		}
	}
	return nil
}

func (c *Config) clone() *Config {
	out := *c
	out.Listeners = cloneAll(c.Listeners)
	out.Routes = cloneAll(c.Routes)
	out.Clusters = cloneAll(c.Clusters)
	return &out
}

func cloneAll[T proto.Message](in []T) []T {
	out := make([]T, len(in))
	for i, m := range in {
		out[i] = proto.Clone(m).(T)
	}
	return out
}

func isMerge(op networking.EnvoyFilter_Patch_Operation) bool {
	return op == networking.EnvoyFilter_Patch_MERGE || op == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST
}

func mergeOp(op networking.EnvoyFilter_Patch_Operation, dst, src proto.Message) {
	if op == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST {
		MergeReplaceLists(dst, src)
		return
	}
	Merge(dst, src)
}

func patchListener(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener) error {
	if l.GetName() == "" {
		return nil
	}
	for _, p := range g.by[networking.EnvoyFilter_LISTENER] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) {
			continue
		}
		if p.op() == networking.EnvoyFilter_Patch_REMOVE {
			l.Name = ""
			return nil
		}
		if isMerge(p.op()) {
			mergeOp(p.op(), l, p.Value)
		}
	}
	patchListenerFilters(pctx, g, l)
	return patchFilterChains(pctx, g, l)
}

func patchListenerFilters(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener) {
	for _, p := range g.by[networking.EnvoyFilter_LISTENER_FILTER] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) {
			continue
		}
		want := p.lm().GetListenerFilter()
		match := func(f *listenerv3.ListenerFilter) bool { return want == "" || f.GetName() == want }
		value := func() *listenerv3.ListenerFilter { return proto.Clone(p.Value).(*listenerv3.ListenerFilter) }
		if p.op() != networking.EnvoyFilter_Patch_MERGE {
			l.ListenerFilters = listOp(l.ListenerFilters, p.op(), want != "", match, value)
			continue
		}
		if want == "" {
			continue
		}
		// Istio merges into every listener filter here, whatever its
		// name, once the patch names one.
		for _, f := range l.ListenerFilters {
			if f.GetTypedConfig() == nil {
				continue
			}
			if src := p.Value.(*listenerv3.ListenerFilter).GetTypedConfig(); src != nil {
				merged, err := mergeAnys(f.GetTypedConfig(), src)
				if err != nil {
					g.mismatch(p, "listener filter "+f.GetName()+" of listener "+l.GetName(), err)
					continue
				}
				f.ConfigType = &listenerv3.ListenerFilter_TypedConfig{TypedConfig: merged}
			}
		}
	}
}

// listOp applies an insert, replace or remove to the list s of filters:
// has tells whether the patch names a filter to place against (match),
// as istiod's insert-before without one inserts first and insert-after
// appends. MERGE is not a list operation and returns s.
func listOp[E any](s []E, op networking.EnvoyFilter_Patch_Operation, has bool, match func(E) bool, value func() E) []E {
	switch op {
	case networking.EnvoyFilter_Patch_ADD:
		return append(s, value())
	case networking.EnvoyFilter_Patch_INSERT_FIRST:
		return slices.Insert(s, 0, value())
	case networking.EnvoyFilter_Patch_INSERT_AFTER:
		if !has {
			return append(s, value())
		}
		return insertAt(s, match, value, 1)
	case networking.EnvoyFilter_Patch_INSERT_BEFORE:
		if !has {
			return slices.Insert(s, 0, value())
		}
		return insertAt(s, match, value, 0)
	case networking.EnvoyFilter_Patch_REPLACE:
		if has {
			replaceFirst(s, match, value)
		}
	case networking.EnvoyFilter_Patch_REMOVE:
		if has {
			return slices.DeleteFunc(s, match)
		}
	}
	return s
}

// insertAt inserts a new value before (off 0) or after (off 1) the first
// element that matches.
func insertAt[E any](s []E, match func(E) bool, value func() E, off int) []E {
	for i, e := range s {
		if match(e) {
			return slices.Insert(s, i+off, value())
		}
	}
	return s
}

func replaceFirst[E any](s []E, match func(E) bool, value func() E) {
	for i, e := range s {
		if match(e) {
			s[i] = value()
			return
		}
	}
}

func patchFilterChains(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener) error {
	for _, fc := range l.FilterChains {
		if fc.Filters == nil {
			continue
		}
		if err := patchFilterChain(pctx, g, l, fc); err != nil {
			return err
		}
	}
	if fc := l.GetDefaultFilterChain(); fc.GetFilters() != nil {
		if err := patchFilterChain(pctx, g, l, fc); err != nil {
			return err
		}
		if fc.Filters == nil {
			l.DefaultFilterChain = nil
		}
	}
	for _, p := range g.by[networking.EnvoyFilter_FILTER_CHAIN] {
		if p.op() == networking.EnvoyFilter_Patch_ADD && p.contextMatches(pctx) && listenerMatch(l, p) {
			l.FilterChains = append(l.FilterChains, proto.Clone(p.Value).(*listenerv3.FilterChain))
		}
	}
	l.FilterChains = slices.DeleteFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool { return fc.Filters == nil })
	return nil
}

func patchFilterChain(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener, fc *listenerv3.FilterChain) error {
	for _, p := range g.by[networking.EnvoyFilter_FILTER_CHAIN] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) {
			continue
		}
		if p.op() == networking.EnvoyFilter_Patch_REMOVE {
			fc.Filters = nil
			return nil
		}
		if isMerge(p.op()) {
			merged, ok := mergeTransportSocket(fc.GetTransportSocket(), p.Value.(*listenerv3.FilterChain).GetTransportSocket())
			if !ok {
				continue
			}
			if !merged {
				mergeOp(p.op(), fc, p.Value)
			}
		}
	}
	return patchNetworkFilters(pctx, g, l, fc)
}

// mergeTransportSocket merges a patch's transport socket into dst's when
// both name the same socket, by value (merged true). ok is false when
// Istio's merge would fail and skip the patch.
func mergeTransportSocket(dst, src *corev3.TransportSocket) (merged, ok bool) {
	if src == nil || dst == nil || src.GetName() != dst.GetName() {
		return false, true
	}
	d, s := dst.GetTypedConfig(), src.GetTypedConfig()
	if d != nil && s != nil {
		m, err := mergeAnys(d, s)
		if err != nil {
			return false, false
		}
		Merge(d, m)
	}
	return true, true
}

func patchNetworkFilters(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener, fc *listenerv3.FilterChain) error {
	for _, p := range g.by[networking.EnvoyFilter_NETWORK_FILTER] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) {
			continue
		}
		want := p.lm().GetFilterChain().GetFilter().GetName()
		has := p.lm().GetFilterChain().GetFilter() != nil
		match := func(f *listenerv3.Filter) bool { return !has || f.GetName() == want }
		value := func() *listenerv3.Filter { return proto.Clone(p.Value).(*listenerv3.Filter) }
		fc.Filters = listOp(fc.Filters, p.op(), has, match, value)
	}
	for _, f := range fc.Filters {
		if err := patchNetworkFilter(pctx, g, l, fc, f); err != nil {
			return err
		}
	}
	return nil
}

func networkFilterMatch(f *listenerv3.Filter, p Patch) bool {
	m := p.lm().GetFilterChain().GetFilter()
	return m == nil || m.GetName() == f.GetName()
}

func patchNetworkFilter(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener, fc *listenerv3.FilterChain, f *listenerv3.Filter) error {
	for _, p := range g.by[networking.EnvoyFilter_NETWORK_FILTER] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) {
			continue
		}
		if p.op() != networking.EnvoyFilter_Patch_MERGE || f.GetTypedConfig() == nil {
			continue
		}
		user := p.Value.(*listenerv3.Filter)
		var cfg *anypb.Any
		f.Name, cfg = g.mergeFilter(p, "network filter "+f.GetName()+" of listener "+l.GetName(), f.GetName(), f.GetTypedConfig(), user.GetName(), user.GetTypedConfig())
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: cfg}
	}
	if f.GetName() == "envoy.filters.network.http_connection_manager" {
		return patchHTTPFilters(pctx, g, l, fc, f)
	}
	return nil
}

func httpFilterMatch(f *hcmv3.HttpFilter, p Patch) bool {
	m := p.lm().GetFilterChain().GetFilter().GetSubFilter()
	return m == nil || m.GetName() == f.GetName()
}

func patchHTTPFilters(pctx networking.EnvoyFilter_PatchContext, g *patchSet, l *listenerv3.Listener, fc *listenerv3.FilterChain, f *listenerv3.Filter) error {
	hcm := &hcmv3.HttpConnectionManager{}
	if f.GetTypedConfig() != nil {
		if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
			return nil
		}
	}
	for _, p := range g.by[networking.EnvoyFilter_HTTP_FILTER] {
		if !p.contextMatches(pctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) {
			continue
		}
		has := p.lm().GetFilterChain().GetFilter().GetSubFilter() != nil
		match := func(h *hcmv3.HttpFilter) bool { return httpFilterMatch(h, p) }
		value := func() *hcmv3.HttpFilter { return proto.Clone(p.Value).(*hcmv3.HttpFilter) }
		hcm.HttpFilters = listOp(hcm.HttpFilters, p.op(), has, match, value)
	}
	for _, h := range hcm.HttpFilters {
		for _, p := range g.by[networking.EnvoyFilter_HTTP_FILTER] {
			if !p.contextMatches(pctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) || !httpFilterMatch(h, p) {
				continue
			}
			if p.op() != networking.EnvoyFilter_Patch_MERGE || h.GetTypedConfig() == nil {
				continue
			}
			user := p.Value.(*hcmv3.HttpFilter)
			var cfg *anypb.Any
			h.Name, cfg = g.mergeFilter(p, "HTTP filter "+h.GetName()+" of listener "+l.GetName(), h.GetName(), h.GetTypedConfig(), user.GetName(), user.GetTypedConfig())
			h.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}
		}
	}
	if f.GetTypedConfig() != nil {
		a, err := anypb.New(hcm)
		if err != nil {
			return fmt.Errorf("encode the connection manager of listener %s: %w", l.GetName(), err)
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	}
	return nil
}

func listenerMatch(l *listenerv3.Listener, p Patch) bool {
	m := p.lm()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != l.GetName() {
		return false
	}
	if p.CP.GetApplyTo() != networking.EnvoyFilter_LISTENER && (l.GetName() == "virtualInbound" || l.GetName() == "virtualOutbound") {
		return true
	}
	if m.GetPortNumber() != 0 {
		sa := l.GetAddress().GetSocketAddress()
		if sa == nil || sa.GetPortValue() != m.GetPortNumber() {
			return false
		}
	}
	return true
}

func filterChainMatch(l *listenerv3.Listener, fc *listenerv3.FilterChain, p Patch) bool {
	m := p.lm()
	if m == nil {
		return true
	}
	virtual := l.GetName() == "virtualInbound" || l.GetName() == "virtualOutbound"
	if virtual && m.GetPortNumber() > 0 && fc.GetFilterChainMatch().GetDestinationPort().GetValue() != m.GetPortNumber() {
		return false
	}
	cm := m.GetFilterChain()
	if cm == nil {
		return true
	}
	fm := fc.GetFilterChainMatch()
	if cm.GetName() != "" && cm.GetName() != fc.GetName() {
		return false
	}
	if cm.GetSni() != "" && !slices.Contains(fm.GetServerNames(), cm.GetSni()) {
		return false
	}
	if cm.GetTransportProtocol() != "" && fm.GetTransportProtocol() != cm.GetTransportProtocol() {
		return false
	}
	if cm.GetApplicationProtocols() != "" {
		if fm == nil {
			return false
		}
		for _, ap := range strings.Split(cm.GetApplicationProtocols(), ",") {
			if !slices.Contains(fm.GetApplicationProtocols(), ap) {
				return false
			}
		}
	}
	if cm.GetDestinationPort() > 0 && (fm.GetDestinationPort() == nil || fm.GetDestinationPort().GetValue() != cm.GetDestinationPort()) {
		return false
	}
	return true
}

// patchRoute patches one route configuration; gateways' RDS names carry
// the port, port name and Gateway that matches read.
func patchRoute(pctx networking.EnvoyFilter_PatchContext, g *patchSet, rc *routev3.RouteConfiguration) *routev3.RouteConfiguration {
	for _, p := range g.by[networking.EnvoyFilter_ROUTE_CONFIGURATION] {
		if isMerge(p.op()) && p.contextMatches(pctx) && routeMatch(pctx, g.ports, rc, p) {
			mergeOp(p.op(), rc, p.Value)
		}
	}
	removed := map[string]bool{}
	for i, vh := range rc.VirtualHosts {
		for _, p := range g.by[networking.EnvoyFilter_VIRTUAL_HOST] {
			if !p.contextMatches(pctx) || !routeMatch(pctx, g.ports, rc, p) || !vhostMatch(vh, p) {
				continue
			}
			if p.op() == networking.EnvoyFilter_Patch_REMOVE {
				removed[vh.GetName()] = true
				break
			} else if isMerge(p.op()) {
				mergeOp(p.op(), vh, p.Value)
			} else if p.op() == networking.EnvoyFilter_Patch_REPLACE {
				vh = proto.Clone(p.Value).(*routev3.VirtualHost)
				rc.VirtualHosts[i] = vh
			}
		}
		if !removed[vh.GetName()] {
			patchHTTPRoutes(pctx, g, rc, vh)
		}
	}
	for _, p := range g.by[networking.EnvoyFilter_VIRTUAL_HOST] {
		if p.op() == networking.EnvoyFilter_Patch_ADD && p.contextMatches(pctx) && routeMatch(pctx, g.ports, rc, p) {
			rc.VirtualHosts = append(rc.VirtualHosts, proto.Clone(p.Value).(*routev3.VirtualHost))
		}
	}
	if len(removed) > 0 {
		rc.VirtualHosts = slices.DeleteFunc(rc.VirtualHosts, func(vh *routev3.VirtualHost) bool { return removed[vh.GetName()] })
	}
	return rc
}

// patchHTTPRoutes patches the routes of one virtual host, as istiod does
// right after the virtual host's own patches: each route is removed,
// merged into or replaced by the patches that match it, in order; then
// the adds and inserts, each against the routes as they stand.
func patchHTTPRoutes(pctx networking.EnvoyFilter_PatchContext, g *patchSet, rc *routev3.RouteConfiguration, vh *routev3.VirtualHost) {
	matches := func(p Patch) bool {
		return p.contextMatches(pctx) && routeMatch(pctx, g.ports, rc, p) && vhostMatch(vh, p)
	}
	removed := false
	for i := range vh.Routes {
		for _, p := range g.by[networking.EnvoyFilter_HTTP_ROUTE] {
			if !matches(p) || !httpRouteMatch(vh.Routes[i], p) {
				continue
			}
			switch {
			case p.op() == networking.EnvoyFilter_Patch_REMOVE:
				vh.Routes[i] = nil
				removed = true
			case isMerge(p.op()):
				mergeOp(p.op(), vh.Routes[i], p.Value)
			case p.op() == networking.EnvoyFilter_Patch_REPLACE:
				vh.Routes[i] = proto.Clone(p.Value).(*routev3.Route)
			}
			if vh.Routes[i] == nil {
				break
			}
		}
	}
	if removed {
		vh.Routes = slices.DeleteFunc(vh.Routes, func(r *routev3.Route) bool { return r == nil })
	}
	for _, p := range g.by[networking.EnvoyFilter_HTTP_ROUTE] {
		if !matches(p) {
			continue
		}
		r := func() *routev3.Route { return proto.Clone(p.Value).(*routev3.Route) }
		switch p.op() {
		case networking.EnvoyFilter_Patch_ADD:
			vh.Routes = append(vh.Routes, r())
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			vh.Routes = slices.Insert(vh.Routes, 0, r())
		case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER:
			// istiod inserts at the first route the match names, and
			// nowhere when none does.
			at := slices.IndexFunc(vh.Routes, func(x *routev3.Route) bool { return httpRouteMatch(x, p) })
			if at < 0 {
				continue
			}
			if p.op() == networking.EnvoyFilter_Patch_INSERT_AFTER {
				at++
			}
			vh.Routes = slices.Insert(vh.Routes, at, r())
		}
	}
}

// httpRouteMatch is istiod's route match: by name, and by the kind of
// action.
func httpRouteMatch(r *routev3.Route, p Patch) bool {
	m := p.CP.GetMatch().GetRouteConfiguration().GetVhost().GetRoute()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != r.GetName() {
		return false
	}
	switch m.GetAction() {
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE:
		return r.GetRoute() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_REDIRECT:
		return r.GetRedirect() != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_DIRECT_RESPONSE:
		return r.GetDirectResponse() != nil
	}
	return true
}

func routeMatch(pctx networking.EnvoyFilter_PatchContext, ports PortMap, rc *routev3.RouteConfiguration, p Patch) bool {
	m := p.CP.GetMatch().GetRouteConfiguration()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != rc.GetName() {
		return false
	}
	if pctx != networking.EnvoyFilter_GATEWAY {
		if m.GetPortNumber() != 0 {
			port, _ := strconv.Atoi(rc.GetName())
			if strings.HasPrefix(rc.GetName(), "inbound") {
				_, _, port = parseSubsetKey(rc.GetName())
			}
			if int(m.GetPortNumber()) != port {
				return false
			}
		}
		return true
	}
	port, portName, gateway := gatewayRouteName(rc.GetName())
	if m.GetPortName() != "" && m.GetPortName() != portName {
		return false
	}
	if m.GetGateway() != "" && m.GetGateway() != gateway {
		return false
	}
	if m.GetPortNumber() != 0 {
		if servers, ok := ports[port]; ok {
			return slices.Contains(servers, int(m.GetPortNumber()))
		}
		return int(m.GetPortNumber()) == port
	}
	return true
}

// PortMap is, for a gateway, the Gateway server ports behind each port its
// RDS names carry (the target port a Service maps a server port to):
// istiod matches a route configuration's portNumber against those.
type PortMap map[int][]int

// gatewayRouteName reads a gateway RDS name: http.PORT, or
// https.PORT.PORTNAME.GATEWAY.NAMESPACE.
func gatewayRouteName(name string) (port int, portName, gateway string) {
	if rest, ok := strings.CutPrefix(name, "http."); ok {
		port, _ = strconv.Atoi(rest)
		return port, "", ""
	}
	if rest, ok := strings.CutPrefix(name, "https."); ok && strings.Count(name, ".") == 4 {
		parts := strings.Split(rest, ".")
		port, _ = strconv.Atoi(parts[0])
		return port, parts[1], parts[3] + "/" + parts[2]
	}
	return 0, "", ""
}

func vhostMatch(vh *routev3.VirtualHost, p Patch) bool {
	m := p.CP.GetMatch().GetRouteConfiguration().GetVhost()
	if m == nil {
		return true
	}
	return (m.GetName() == "" || m.GetName() == vh.GetName()) && (m.GetDomainName() == "" || slices.Contains(vh.GetDomains(), m.GetDomainName()))
}

// patchCluster merges the cluster patches into cl; false when one removes
// it.
func patchCluster(pctx networking.EnvoyFilter_PatchContext, g *patchSet, cl *clusterv3.Cluster) bool {
	for _, p := range g.by[networking.EnvoyFilter_CLUSTER] {
		if p.op() == networking.EnvoyFilter_Patch_REMOVE && p.contextMatches(pctx) && clusterMatch(cl, p) {
			return false
		}
		if pctx == networking.EnvoyFilter_SIDECAR_INBOUND && p.contextMatches(pctx) && p.CP.GetMatch().GetCluster().GetService() != "" && p.CP.GetMatch().GetCluster().GetName() == "" {
			// istiod matches an inbound cluster's service against the
			// workload's Services, which the dump does not name.
			g.aborted = append(g.aborted, fmt.Sprintf("%s: its CLUSTER match on service %s against the inbound cluster %s is not predicted (istiod matches the workload's Services)", p.Item, p.CP.GetMatch().GetCluster().GetService(), cl.GetName()))
			continue
		}
		if !isMerge(p.op()) || !p.contextMatches(pctx) || !clusterMatch(cl, p) {
			continue
		}
		src := p.Value.(*clusterv3.Cluster)
		if ts := src.GetTransportSocket(); ts != nil {
			var dst *corev3.TransportSocket
			if len(cl.GetTransportSocketMatches()) > 0 {
				for _, m := range cl.GetTransportSocketMatches() {
					if m.GetTransportSocket() != nil && m.GetTransportSocket().GetName() == ts.GetName() {
						dst = m.GetTransportSocket()
						break
					}
				}
				if dst == nil {
					continue
				}
			} else if cl.GetTransportSocket() != nil && cl.GetTransportSocket().GetName() == ts.GetName() {
				dst = cl.GetTransportSocket()
			}
			if dst == nil {
				cl.TransportSocket = ts
				continue
			}
			if _, ok := mergeTransportSocket(dst, ts); !ok {
				continue
			}
			continue
		}
		mergeOp(p.op(), cl, p.Value)
	}
	return true
}

// parseSubsetKey reads DIRECTION|PORT|SUBSET|HOST, or the SNI-DNAT form
// outbound_.PORT_.SUBSET_.HOST, as Istio does: the parts there are.
func parseSubsetKey(name string) (subset, host string, port int) {
	sep := "|"
	if strings.HasPrefix(name, "outbound_.") || strings.HasPrefix(name, "inbound_.") {
		sep = "_."
	}
	_, rest, ok := strings.Cut(name, sep)
	if !ok {
		return "", "", 0
	}
	p, rest, ok := strings.Cut(rest, sep)
	if !ok {
		return "", "", 0
	}
	port, _ = strconv.Atoi(p)
	subset, rest, ok = strings.Cut(rest, sep)
	if !ok {
		return "", "", port
	}
	if strings.Contains(rest, sep) {
		return subset, "", port
	}
	return subset, rest, port
}

// clusterMatch follows Istio's: a name matches exactly; otherwise the
// subset, service and port are read from the outbound|PORT|SUBSET|HOST
// name.
func clusterMatch(cl *clusterv3.Cluster, p Patch) bool {
	m := p.CP.GetMatch().GetCluster()
	if m == nil {
		return true
	}
	if m.GetName() != "" {
		return m.GetName() == cl.GetName()
	}
	subset, host, port := parseSubsetKey(cl.GetName())
	if m.GetSubset() != "" && m.GetSubset() != subset {
		return false
	}
	if m.GetService() != "" && m.GetService() != host {
		return false
	}
	if m.GetPortNumber() != 0 && int(m.GetPortNumber()) != port {
		return false
	}
	return true
}
