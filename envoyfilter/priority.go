package envoyfilter

// EnvoyFilter priorities, one table for every item.
//
// Istio applies the EnvoyFilters of one context in ascending priority (ties
// by creation time, then name), so where two items touch the same place the
// order below decides. Items that insert HTTP filters before the router land
// in the chain in the order they are applied: a later item sits closer to
// the router. Gaps leave room for new items.
const (
	// PriorityConnection: listener, HCM and cluster protocol settings
	// (timeouts, buffer limits, HTTP/2). Applied first so later items merge
	// onto settled connection options.
	PriorityConnection int32 = 10
	// PriorityHeaders: header manipulation and router options.
	PriorityHeaders int32 = 20
	// PriorityObservability: tracing and access logs, merged into the HCM.
	PriorityObservability int32 = 30
	// PriorityTrafficPolicy: filters that answer requests themselves (rate
	// limits, body size), inserted before the router ahead of compression.
	PriorityTrafficPolicy int32 = 40
	// PriorityCompression: response compressors; they sit closest to the
	// router so they compress what every other filter has produced.
	PriorityCompression int32 = 50
)
