// Package envoyfilter turns item patches — typed go-control-plane messages —
// into Istio EnvoyFilter objects, and checks every patch value strictly on
// the way: the value must survive the trip through Istio's Struct encoding
// unchanged and pass Envoy's own validation rules.
//
// It imports neither items nor pkg; items import it.
package envoyfilter

import (
	"strings"
	"unicode"
)

// Well-known Envoy filter and extension names. Patches match on these;
// never spell them inline.
const (
	HTTPConnectionManager = "envoy.filters.network.http_connection_manager"
	Router                = "envoy.filters.http.router"
	// Compressor is the compressor filter; each library's instance is
	// named Compressor + "." + library ("envoy.filters.http.compressor.gzip").
	Compressor     = "envoy.filters.http.compressor"
	LocalRateLimit = "envoy.filters.http.local_ratelimit"
	Buffer         = "envoy.filters.http.buffer"

	FileAccessLog = "envoy.access_loggers.file"

	TracerZipkin        = "envoy.tracers.zipkin"
	TracerOpenTelemetry = "envoy.tracers.opentelemetry"
	TracerSkyWalking    = "envoy.tracers.skywalking"
	TracerDatadog       = "envoy.tracers.datadog"

	// HTTPProtocolOptionsKey is the typed_extension_protocol_options key
	// of envoy.extensions.upstreams.http.v3.HttpProtocolOptions.
	HTTPProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// Labels and annotations on every generated EnvoyFilter.
const (
	// LabelManagedBy marks objects globalconfig owns; the controller only
	// ever touches EnvoyFilters carrying it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "globalconfig"
	// LabelItem names the document item an EnvoyFilter was built from.
	LabelItem = "globalconfig.io/item"
	// AnnotationContentHash is a hash of the spec, so a reader (and the
	// controller) can tell at a glance whether two specs differ.
	AnnotationContentHash = "globalconfig.io/content-hash"
	// AnnotationIstioVersions lists the Istio releases the object was
	// rendered for ("1.30,1.31"): the target's fleet. Proxies of older
	// releases get the oldest one's patches, newer ones the newest's.
	AnnotationIstioVersions = "globalconfig.io/istio-versions"
	// AnnotationServiceConfig carries what a service the patches call
	// must be configured with to match them (a rate-limit service's
	// limits, items.ServiceConfigurer), as protojson of an Any: it travels
	// with the set, so whatever set the proxies get, the service gets the
	// same (pkg/rlsconfig). Its content is also in the spec's own values,
	// so the content hash changes with it.
	AnnotationServiceConfig = "globalconfig.io/service-config"
	// AnnotationClusters lists the config clusters an EnvoyFilter goes to
	// ("eu-west-1,us-east-1": sorted, comma-joined), from its item's
	// target.clusters; an EnvoyFilter without it goes to every one
	// (ForCluster).
	AnnotationClusters = "globalconfig.io/clusters"

	// NamePrefix starts the name of every generated EnvoyFilter.
	NamePrefix = "globalconfig-"
	// CanarySuffix ends the name of an item's new version during a canary
	// rollout (package canary); no item's own name may end in it.
	CanarySuffix = "-canary"
)

// ObjectName is the name of the EnvoyFilter generated for item: the item
// key in kebab case, since object names are lower case, with a run of
// capitals kept as one word (localRateLimit → globalconfig-local-rate-limit,
// clientIP → globalconfig-client-ip).
func ObjectName(item string) string {
	var b strings.Builder
	b.WriteString(NamePrefix)
	rs := []rune(item)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			startsWord := i > 0 && (!unicode.IsUpper(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1]))
			if startsWord {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
