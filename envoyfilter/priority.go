package envoyfilter

import networking "istio.io/api/networking/v1alpha3"

// Stage is a layer of the configuration. It fixes two things for every
// item of the layer: the EnvoyFilter priority, and where a new HTTP filter
// goes in the chain. This file is the one table of both.
//
// Istio applies the EnvoyFilters of one context in ascending priority (ties
// by creation time, then name, which a re-created object would reorder), so
// every item gets a priority of its own within its stage's range: its
// slot's (At), which its registration names. The stage's filters stand in
// the chain in slot order: an item inserted before the router by a later
// EnvoyFilter sits closer to the router, and one inserted first by a later
// EnvoyFilter sits closer to the front, so At counts up for the one and
// down for the other. A stage has Width slots.
//
// Where a filter stands is what it does. Requests pass the HTTP filters in
// chain order; responses pass them in reverse. So a filter at the front
// sees a request first and a response last.
//
// An item that only merges (into listeners, the HTTP connection manager,
// the router, route configurations or clusters) inserts no filter: for it
// the stage and slot fix only the priority, the order in which Istio
// applies the merges, so a later merge of the same field wins. An item
// that inserts a filter takes both its priority and its place in the
// chain from them. A new item takes a free slot where its filter belongs;
// one that belongs between two taken slots would move other items'
// priorities, which users see, so it is an issue of its own.
type Stage struct {
	// Name is the stage's name in `globalconfig items`.
	Name string
	// Priority is the priority of the stage's first item.
	Priority int32
	// Insert is where the stage's new HTTP filters go.
	Insert Position
	// Width is how many slots the stage has: priorities Priority to
	// Priority+Width-1. Stages don't overlap, and the last ends below
	// 100, so a hand-written EnvoyFilter of priority 100 or more (the
	// usual "after everything" value) is applied after every item.
	Width int
}

// Position is where an inserted HTTP filter goes: Operation relative to
// the HTTP filter Anchor. Anchor only on filters every HTTP connection
// manager has (the router); optional filters such as cors may be absent,
// and Istio then drops the patch silently.
type Position struct {
	Operation networking.EnvoyFilter_Patch_Operation
	Anchor    string
}

// Descending reports whether the items of a stage at this position must
// be applied in reverse name order to stand in the chain in name order:
// each INSERT_FIRST goes in front of the ones applied before it.
func (at Position) Descending() bool {
	return at.Operation == networking.EnvoyFilter_Patch_INSERT_FIRST
}

// At is the placement of slot slot of the stage: slot 0 is the first of
// the stage's filters in the chain. An item declares its slot by what it
// does there (items.Registration.Slot), so its priority never depends on
// which other items exist or how they are named. Istio applies the
// EnvoyFilters of a context in ascending priority; an INSERT_FIRST stage
// counts down, since each insert at the front goes before the ones
// applied before it.
func (st Stage) At(slot int) Placement {
	p := st.Priority + int32(slot)
	if st.Insert.Descending() {
		p = st.Priority + int32(st.Width) - 1 - int32(slot)
	}
	return Placement{Priority: p, Insert: st.Insert}
}

// The two positions. beforeRouter is immediately before the router, which
// every HTTP connection manager has; first is the front of the chain.
var (
	beforeRouter = Position{Operation: networking.EnvoyFilter_Patch_INSERT_BEFORE, Anchor: Router}
	first        = Position{Operation: networking.EnvoyFilter_Patch_INSERT_FIRST}
)

// The stages, in the order Istio applies them.
var (
	// StageConnection: listener, HCM and cluster protocol settings
	// (timeouts, buffer limits, HTTP/2). Applied first, so later items
	// merge onto settled connection options.
	StageConnection = Stage{Name: "connection", Priority: 10, Insert: beforeRouter, Width: 10}
	// StageHeaders: header manipulation and router options.
	StageHeaders = Stage{Name: "headers", Priority: 20, Insert: beforeRouter, Width: 10}
	// StageObservability: tracing and access logs, merged into the HCM.
	StageObservability = Stage{Name: "observability", Priority: 30, Insert: beforeRouter, Width: 10}
	// StageTrafficPolicy: filters that refuse requests themselves (access
	// by address, authorization by an auth service, rate limits, body
	// size), and after them, in the later slots, filters that shape or
	// measure what those let through. At the front of the chain, behind
	// only StageCompression's filters: a request they refuse never
	// reaches Istio's authentication, authorization, WasmPlugins or the
	// router, and costs nothing there. Each item's registration says why
	// its slot (`globalconfig items`, docs/reference.md's stage table).
	StageTrafficPolicy = Stage{Name: "trafficPolicy", Priority: 40, Insert: first, Width: 20}
	// StageCompression: the very front of the chain (applied last of the
	// inserting stages). The response compressors first, so they see each
	// response last: after every other filter, WasmPlugins and Istio's
	// own included, has read or changed the body, and after local replies
	// (429, 413) were made; nothing after them sees a compressed body.
	// Then, in the later slots, filters that answer or cut requests before
	// any policy filter may refuse, buffer or slow them (the load
	// balancers' health checks, loop detection).
	StageCompression = Stage{Name: "compression", Priority: 60, Insert: first, Width: 10}
)

// Stages lists every stage in order.
func Stages() []Stage {
	return []Stage{StageConnection, StageHeaders, StageObservability, StageTrafficPolicy, StageCompression}
}
