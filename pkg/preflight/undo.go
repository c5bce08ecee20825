package preflight

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
)

// undo takes the patches of live (globalconfig's current EnvoyFilters that
// reach the proxy) off c in place, as far as that is exact, and returns
// what it could not recover. An inserted element is removed. A MERGE is
// taken off field by field: a list loses what the merge appended, and a
// field the merge set loses its value; that value is the one istiod built
// before the merge, which the current config hides, so it is reported
// unless a patch of next (the new set) sets the field again, which makes
// the old value irrelevant.
func undo(c *Config, k Kind, ports PortMap, live, next, others []Patch) []string {
	u := &undoer{k: k, ports: ports}
	var undoable []Patch
	for _, p := range live {
		switch {
		case p.op() == networking.EnvoyFilter_Patch_REMOVE || p.op() == networking.EnvoyFilter_Patch_REPLACE ||
			p.op() == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST:
			u.holef("%s: its %s %s of the current set can't be undone", p.Item, p.op(), p.CP.GetApplyTo())
		case p.op() == networking.EnvoyFilter_Patch_MERGE && p.CP.GetApplyTo() == networking.EnvoyFilter_LISTENER_FILTER:
			u.holef("%s: its MERGE into listener filters of the current set can't be undone", p.Item)
		default:
			undoable = append(undoable, p)
		}
	}
	// istiod merges filters' typed configs on MERGE only.
	filterMerge := func(ps []Patch) []Patch {
		return slices.DeleteFunc(slices.Clone(ps), func(p Patch) bool {
			switch p.CP.GetApplyTo() {
			case networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_LISTENER_FILTER:
				return p.op() == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST
			}
			return false
		})
	}
	u.live, u.next, u.others = group(undoable), group(filterMerge(next)), group(filterMerge(others))
	// What the current set added first: istiod never patches what an ADD
	// adds in the same push.
	for _, p := range u.live[networking.EnvoyFilter_CLUSTER] {
		if p.op() == networking.EnvoyFilter_Patch_ADD {
			c.Clusters = removeEqual(u, c.Clusters, p, "cluster", "")
		}
	}
	for _, p := range u.live[networking.EnvoyFilter_LISTENER] {
		if p.op() == networking.EnvoyFilter_Patch_ADD {
			c.Listeners = removeEqual(u, c.Listeners, p, "listener", "")
		}
	}
	for _, l := range c.Listeners {
		u.listener(l)
	}
	for _, rc := range c.Routes {
		u.route(rc)
	}
	for _, cl := range c.Clusters {
		u.cluster(cl)
	}
	return u.holes
}

type undoer struct {
	k                  Kind
	ports              PortMap
	live, next, others byApplyTo
	holes              []string
}

func (u *undoer) holef(format string, args ...any) {
	h := fmt.Sprintf(format, args...)
	if !slices.Contains(u.holes, h) {
		u.holes = append(u.holes, h)
	}
}

// removeEqual removes the first element equal to p's value.
func removeEqual[E proto.Message](u *undoer, s []E, p Patch, what, where string) []E {
	for i, e := range s {
		if equalOrStandIn(e, p.Value) {
			return slices.Delete(s, i, i+1)
		}
	}
	if where != "" {
		what += " " + where
	}
	u.holef("%s: the %s it inserted is not in the current config as inserted", p.Item, what)
	return s
}

// matching returns the patches of ps with op kinds merge (true) or insert
// (false) that match by f.
func matching(ps []Patch, merge bool, f func(Patch) bool) []Patch {
	var out []Patch
	for _, p := range ps {
		insert := p.op() == networking.EnvoyFilter_Patch_ADD || p.op() == networking.EnvoyFilter_Patch_INSERT_FIRST ||
			p.op() == networking.EnvoyFilter_Patch_INSERT_BEFORE || p.op() == networking.EnvoyFilter_Patch_INSERT_AFTER
		if (merge && isMerge(p.op())) || (!merge && insert) {
			if f(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func (u *undoer) listener(l *listenerv3.Listener) {
	pctx := u.k.listener(l)
	if pctx == networking.EnvoyFilter_SIDECAR_INBOUND {
		// Its inline route configurations, patched when istiod built them.
		_ = eachHCM(l, func(hcm *hcmv3.HttpConnectionManager) bool {
			if rc := hcm.GetRouteConfig(); rc != nil {
				u.route(rc)
				return true
			}
			return false
		})
	}
	lm := func(p Patch) bool { return p.contextMatches(pctx) && listenerMatch(l, p) }
	// Added filter chains come after everything merged into the listener.
	for _, p := range matching(u.live[networking.EnvoyFilter_FILTER_CHAIN], false, lm) {
		if p.op() == networking.EnvoyFilter_Patch_ADD {
			l.FilterChains = removeEqual(u, l.FilterChains, p, "filter chain", "in listener "+l.GetName())
		}
	}
	u.rebaseMsg("listener "+l.GetName(), l, values(matching(u.live[networking.EnvoyFilter_LISTENER], true, lm)),
		values(matching(u.next[networking.EnvoyFilter_LISTENER], true, lm)), matching(u.others[networking.EnvoyFilter_LISTENER], true, lm))
	for _, p := range matching(u.live[networking.EnvoyFilter_LISTENER_FILTER], false, lm) {
		l.ListenerFilters = removeEqual(u, l.ListenerFilters, p, "listener filter", "in listener "+l.GetName())
	}
	chains := slices.Clone(l.FilterChains)
	if l.DefaultFilterChain != nil {
		chains = append(chains, l.DefaultFilterChain)
	}
	for i, fc := range chains {
		where := fmt.Sprintf("listener %s filter chain %d", l.GetName(), i)
		if fc.GetName() != "" {
			where = fmt.Sprintf("listener %s filter chain %s", l.GetName(), fc.GetName())
		}
		fm := func(p Patch) bool { return lm(p) && filterChainMatch(l, fc, p) }
		var lv, nv []protoreflect.Message
		var tsLive, tsNext []protoreflect.Message
		for _, p := range matching(u.live[networking.EnvoyFilter_FILTER_CHAIN], true, fm) {
			if ts := p.Value.(*listenerv3.FilterChain).GetTransportSocket(); ts != nil && fc.GetTransportSocket().GetName() == ts.GetName() {
				tsLive = append(tsLive, unpack(ts.GetTypedConfig()))
			} else {
				lv = append(lv, p.Value.ProtoReflect())
			}
		}
		for _, p := range matching(u.next[networking.EnvoyFilter_FILTER_CHAIN], true, fm) {
			if ts := p.Value.(*listenerv3.FilterChain).GetTransportSocket(); ts != nil && fc.GetTransportSocket().GetName() == ts.GetName() {
				tsNext = append(tsNext, unpack(ts.GetTypedConfig()))
			} else {
				nv = append(nv, p.Value.ProtoReflect())
			}
		}
		others := matching(u.others[networking.EnvoyFilter_FILTER_CHAIN], true, fm)
		u.rebaseMsg(where, fc, lv, nv, others)
		if len(tsLive) > 0 && fc.GetTransportSocket().GetTypedConfig() != nil {
			u.rebaseAny(where+" transport socket", fc.GetTransportSocket().GetTypedConfig(), tsLive, tsNext, others)
		}
		for _, p := range matching(u.live[networking.EnvoyFilter_NETWORK_FILTER], false, fm) {
			fc.Filters = removeEqual(u, fc.Filters, p, "network filter", "in "+where)
		}
		for _, f := range fc.Filters {
			nm := func(p Patch) bool { return fm(p) && networkFilterMatch(f, p) }
			fw := where + " filter " + f.GetName()
			if f.GetTypedConfig() != nil {
				u.rebaseAny(fw, f.GetTypedConfig(), typedValues(matching(u.live[networking.EnvoyFilter_NETWORK_FILTER], true, nm)),
					typedValues(matching(u.next[networking.EnvoyFilter_NETWORK_FILTER], true, nm)), matching(u.others[networking.EnvoyFilter_NETWORK_FILTER], true, nm))
			}
			if f.GetName() != "envoy.filters.network.http_connection_manager" || f.GetTypedConfig() == nil {
				continue
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				continue
			}
			for _, p := range matching(u.live[networking.EnvoyFilter_HTTP_FILTER], false, nm) {
				hcm.HttpFilters = removeEqual(u, hcm.HttpFilters, p, "HTTP filter", "in "+fw)
			}
			for _, h := range hcm.HttpFilters {
				if h.GetTypedConfig() == nil {
					continue
				}
				hm := func(p Patch) bool { return nm(p) && httpFilterMatch(h, p) }
				u.rebaseAny(fw+" HTTP filter "+h.GetName(), h.GetTypedConfig(), typedValues(matching(u.live[networking.EnvoyFilter_HTTP_FILTER], true, hm)),
					typedValues(matching(u.next[networking.EnvoyFilter_HTTP_FILTER], true, hm)), matching(u.others[networking.EnvoyFilter_HTTP_FILTER], true, hm))
			}
			a, err := anypb.New(hcm)
			if err == nil {
				f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
			}
		}
	}
}

func (u *undoer) route(rc *routev3.RouteConfiguration) {
	pctx := u.k.route(rc)
	rm := func(p Patch) bool { return p.contextMatches(pctx) && routeMatch(pctx, u.ports, rc, p) }
	// Added virtual hosts come after everything merged into the route
	// configuration.
	for _, p := range matching(u.live[networking.EnvoyFilter_VIRTUAL_HOST], false, rm) {
		rc.VirtualHosts = removeEqual(u, rc.VirtualHosts, p, "virtual host", "in route configuration "+rc.GetName())
	}
	u.rebaseMsg("route configuration "+rc.GetName(), rc, values(matching(u.live[networking.EnvoyFilter_ROUTE_CONFIGURATION], true, rm)),
		values(matching(u.next[networking.EnvoyFilter_ROUTE_CONFIGURATION], true, rm)), matching(u.others[networking.EnvoyFilter_ROUTE_CONFIGURATION], true, rm))
	for _, vh := range rc.VirtualHosts {
		vm := func(p Patch) bool { return rm(p) && vhostMatch(vh, p) }
		where := "route configuration " + rc.GetName() + " virtual host " + vh.GetName()
		// Routes first: istiod patched them after the virtual host.
		for _, p := range matching(u.live[networking.EnvoyFilter_HTTP_ROUTE], false, vm) {
			vh.Routes = removeEqual(u, vh.Routes, p, "route", "in "+where)
		}
		for _, r := range vh.Routes {
			hm := func(p Patch) bool { return vm(p) && httpRouteMatch(r, p) }
			u.rebaseMsg(where+" route "+r.GetName(), r, values(matching(u.live[networking.EnvoyFilter_HTTP_ROUTE], true, hm)),
				values(matching(u.next[networking.EnvoyFilter_HTTP_ROUTE], true, hm)), matching(u.others[networking.EnvoyFilter_HTTP_ROUTE], true, hm))
		}
		u.rebaseMsg(where, vh, values(matching(u.live[networking.EnvoyFilter_VIRTUAL_HOST], true, vm)),
			values(matching(u.next[networking.EnvoyFilter_VIRTUAL_HOST], true, vm)), matching(u.others[networking.EnvoyFilter_VIRTUAL_HOST], true, vm))
	}
}

func (u *undoer) cluster(cl *clusterv3.Cluster) {
	pctx := u.k.cluster(cl)
	cm := func(p Patch) bool { return p.contextMatches(pctx) && clusterMatch(cl, p) }
	var lv, nv []protoreflect.Message
	for _, p := range matching(u.live[networking.EnvoyFilter_CLUSTER], true, cm) {
		if p.Value.(*clusterv3.Cluster).GetTransportSocket() != nil {
			u.holef("%s: its transport socket merge into cluster %s is not undone", p.Item, cl.GetName())
			continue
		}
		lv = append(lv, p.Value.ProtoReflect())
	}
	for _, p := range matching(u.next[networking.EnvoyFilter_CLUSTER], true, cm) {
		nv = append(nv, p.Value.ProtoReflect())
	}
	u.rebaseMsg("cluster "+cl.GetName(), cl, lv, nv, matching(u.others[networking.EnvoyFilter_CLUSTER], true, cm))
}

func values(ps []Patch) []protoreflect.Message {
	out := make([]protoreflect.Message, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Value.ProtoReflect())
	}
	return out
}

// typedValues are the unpacked typed configs of filter patches.
func typedValues(ps []Patch) []protoreflect.Message {
	var out []protoreflect.Message
	for _, p := range ps {
		var a *anypb.Any
		switch v := p.Value.(type) {
		case *listenerv3.Filter:
			a = v.GetTypedConfig()
		case *hcmv3.HttpFilter:
			a = v.GetTypedConfig()
		}
		if m := unpack(a); m != nil {
			out = append(out, m)
		}
	}
	return out
}

func unpack(a *anypb.Any) protoreflect.Message {
	if a == nil {
		return nil
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil
	}
	return m.ProtoReflect()
}

// rebaseAny rebases the message packed in a.
func (u *undoer) rebaseAny(where string, a *anypb.Any, live, next []protoreflect.Message, others []Patch) {
	if len(live) == 0 {
		return
	}
	m := unpack(a)
	if m == nil {
		u.holef("%s: its typed config %s can't be read to undo a merge", where, a.GetTypeUrl())
		return
	}
	var lv, nv []protoreflect.Message
	for _, v := range live {
		if v.Descriptor().FullName() == m.Descriptor().FullName() {
			lv = append(lv, v)
		}
	}
	for _, v := range next {
		if v.Descriptor().FullName() == m.Descriptor().FullName() {
			nv = append(nv, v)
		}
	}
	u.rebaseMsg(where, m.Interface(), lv, nv, others)
	packed, err := anypb.New(m.Interface())
	if err == nil {
		a.Value = packed.Value
	}
}

// rebaseMsg takes the merges live off m in place.
func (u *undoer) rebaseMsg(where string, m proto.Message, live, next []protoreflect.Message, others []Patch) {
	if len(live) == 0 {
		return
	}
	for _, o := range others {
		ov := otherValue(o, m)
		if ov == nil {
			continue
		}
		for _, v := range live {
			if overlaps(ov, v) {
				u.holef("%s: EnvoyFilter %s merges into fields globalconfig's current patches set too; which value istiod keeps depends on their order, not predicted", where, o.Filter)
				break
			}
		}
	}
	u.rebase(where, m.ProtoReflect(), live, next)
}

// rebase recovers, field by field, m before the merges live.
func (u *undoer) rebase(where string, m protoreflect.Message, live, next []protoreflect.Message) {
	fields := map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}
	var order []protoreflect.FieldDescriptor
	for _, v := range live {
		v.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if _, ok := fields[fd.Number()]; !ok {
				fields[fd.Number()] = fd
				order = append(order, fd)
			}
			return true
		})
	}
	setsIn := func(ms []protoreflect.Message, fd protoreflect.FieldDescriptor) []protoreflect.Message {
		var out []protoreflect.Message
		for _, v := range ms {
			if v.Has(fd) {
				out = append(out, v)
			}
		}
		return out
	}
	oneofSet := func(ms []protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
		od := fd.ContainingOneof()
		for _, v := range ms {
			if od != nil && !od.IsSynthetic() && v.WhichOneof(od) != nil {
				return true
			}
			if v.Has(fd) {
				return true
			}
		}
		return false
	}
	for _, fd := range order {
		path := where + " › " + string(fd.Name())
		lv, nv := setsIn(live, fd), setsIn(next, fd)
		switch {
		case fd.IsList():
			var appended []protoreflect.Value
			for _, v := range lv {
				l := v.Get(fd).List()
				for i := range l.Len() {
					appended = append(appended, l.Get(i))
				}
			}
			cur := m.Get(fd).List()
			n := cur.Len() - len(appended)
			ok := n >= 0
			for i := 0; ok && i < len(appended); i++ {
				ok = equalValue(fd, cur.Get(n+i), appended[i])
			}
			if ok {
				m.Mutable(fd).List().Truncate(n)
			} else {
				m.Clear(fd)
				u.holef("%s: the list the current patches appended to can't be told apart from istiod's", path)
			}
		case fd.IsMap():
			dm := m.Mutable(fd).Map()
			for _, v := range lv {
				v.Get(fd).Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
					dm.Clear(k)
					covered := false
					for _, w := range nv {
						if w.Get(fd).Map().Has(k) {
							covered = true
						}
					}
					if !covered {
						u.holef("%s[%v]: istiod's value under the current patch is unknown", path, k.Interface())
					}
					return true
				})
			}
		case fd.Message() != nil && fd.Message().FullName() != durationName && m.Has(fd):
			var subLive, subNext []protoreflect.Message
			for _, v := range lv {
				subLive = append(subLive, v.Get(fd).Message())
			}
			for _, w := range nv {
				subNext = append(subNext, w.Get(fd).Message())
			}
			sub := m.Mutable(fd).Message()
			before := len(u.holes)
			u.rebase(path, sub, subLive, subNext)
			if isEmpty(sub) {
				// Assume istiod did not set it; if a field under it was
				// unknown, say so for the message as a whole.
				m.Clear(fd)
				if len(u.holes) > before {
					u.holes = u.holes[:before]
					if len(nv) == 0 {
						u.holef("%s: istiod's value under the current patch is unknown (taken as unset)", path)
					}
				}
			}
		default:
			m.Clear(fd)
			if !oneofSet(nv, fd) {
				u.holef("%s: istiod's value under the current patch is unknown (taken as unset)", path)
			}
		}
	}
}

// otherValue is the part of another EnvoyFilter's patch value that merges
// into a message of m's type: the value itself, or a filter's typed
// config.
func otherValue(o Patch, m proto.Message) protoreflect.Message {
	want := m.ProtoReflect().Descriptor().FullName()
	if o.Value.ProtoReflect().Descriptor().FullName() == want {
		return o.Value.ProtoReflect()
	}
	for _, v := range typedValues([]Patch{o}) {
		if v.Descriptor().FullName() == want {
			return v
		}
	}
	return nil
}

// overlaps tells whether a and b set a common field (for messages, a
// common field under it).
func overlaps(a, b protoreflect.Message) bool {
	found := false
	a.Range(func(fd protoreflect.FieldDescriptor, av protoreflect.Value) bool {
		if !b.Has(fd) {
			return true
		}
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() && fd.Message().FullName() != durationName {
			found = overlaps(av.Message(), b.Get(fd).Message())
		} else {
			found = true
		}
		return !found
	})
	return found
}

func isEmpty(m protoreflect.Message) bool {
	empty := true
	m.Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool {
		empty = false
		return false
	})
	return empty
}

func equalValue(fd protoreflect.FieldDescriptor, a, b protoreflect.Value) bool {
	if fd.Message() != nil {
		return proto.Equal(a.Message().Interface(), b.Message().Interface())
	}
	return a.Equal(b)
}

// equalOrStandIn is proto.Equal, or, where a typed config is a stand-in for a
// type this build does not link, the same JSON once its keys are in one
// case: a stand-in keeps its JSON as written, in camelCase in istiod's
// config dump and in snake_case in an EnvoyFilter's patch, so a user's
// filter of such a type (a health check, in the controller's binary) is
// found in the config it was inserted into.
func equalOrStandIn(a, b proto.Message) bool {
	if proto.Equal(a, b) {
		return true
	}
	ja, okA := standInJSON(a)
	jb, okB := standInJSON(b)
	return okA && okB && ja == jb
}

// standInJSON is m as JSON with its stand-ins expanded and every key in
// snake_case; false when m holds no stand-in (proto.Equal then said it
// all).
func standInJSON(m proto.Message) (string, bool) {
	r := newResolver()
	js, err := protojson.MarshalOptions{Resolver: r, UseProtoNames: true}.Marshal(m)
	if err != nil || len(r.opaque) == 0 {
		return "", false
	}
	if js, err = r.expand(js); err != nil {
		return "", false
	}
	v, err := decodeJSON(js)
	if err != nil {
		return "", false
	}
	out, err := encodeJSON(snakeKeys(v))
	if err != nil {
		return "", false
	}
	return string(out), true
}

// snakeKeys is v with every object key in snake_case ("passThroughMode"
// → "pass_through_mode"; "@type" as it is).
func snakeKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[snake(k)] = snakeKeys(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = snakeKeys(e)
		}
		return out
	}
	return v
}

func snake(k string) string {
	if strings.HasPrefix(k, "@") {
		return k
	}
	var b strings.Builder
	for _, r := range k {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
