package envoyfilter

import networking "istio.io/api/networking/v1alpha3"

// Stage is a layer of the configuration. It fixes two things for every
// item of the layer: the EnvoyFilter priority, and where a new HTTP filter
// goes in the chain. This file is the one table of both.
//
// Istio applies the EnvoyFilters of one context in ascending priority (ties
// by creation time, then name, which a re-created object would reorder), so
// every item gets a priority of its own: its stage's Priority plus its rank
// by name among the stage's items. Items that insert HTTP filters before
// the router land in the chain in the order they are applied: a later item
// sits closer to the router. A stage holds at most StageWidth items.
type Stage struct {
	// Name is the stage's name in `globalconfig items`.
	Name string
	// Priority is the priority of the stage's first item.
	Priority int32
	// Insert is where the stage's new HTTP filters go.
	Insert Position
}

// Position is where an inserted HTTP filter goes: Operation relative to
// the HTTP filter Anchor. Anchor only on filters every HTTP connection
// manager has (the router); optional filters such as cors may be absent,
// and Istio then drops the patch silently.
type Position struct {
	Operation networking.EnvoyFilter_Patch_Operation
	Anchor    string
}

// StageWidth is the priority gap between stages: the most items a stage
// can hold.
const StageWidth = 10

// beforeRouter is the position every stage uses today: immediately before
// the router, which every HTTP connection manager has.
var beforeRouter = Position{Operation: networking.EnvoyFilter_Patch_INSERT_BEFORE, Anchor: Router}

// The stages, in the order Istio applies them.
var (
	// StageConnection: listener, HCM and cluster protocol settings
	// (timeouts, buffer limits, HTTP/2). Applied first, so later items
	// merge onto settled connection options.
	StageConnection = Stage{Name: "connection", Priority: 10, Insert: beforeRouter}
	// StageHeaders: header manipulation and router options.
	StageHeaders = Stage{Name: "headers", Priority: 20, Insert: beforeRouter}
	// StageObservability: tracing and access logs, merged into the HCM.
	StageObservability = Stage{Name: "observability", Priority: 30, Insert: beforeRouter}
	// StageTrafficPolicy: filters that answer requests themselves (rate
	// limits, body size). Inserted before the compressors, so a request
	// they refuse costs no compression work.
	StageTrafficPolicy = Stage{Name: "trafficPolicy", Priority: 40, Insert: beforeRouter}
	// StageCompression: response compressors. Inserted last, so they sit
	// closest to the router and compress the response every other filter
	// of globalconfig's has produced.
	StageCompression = Stage{Name: "compression", Priority: 50, Insert: beforeRouter}
)

// Stages lists every stage in order.
func Stages() []Stage {
	return []Stage{StageConnection, StageHeaders, StageObservability, StageTrafficPolicy, StageCompression}
}
