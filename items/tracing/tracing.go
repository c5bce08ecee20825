// Package tracing is the `tracing` item: the HTTP connection manager's
// tracing provider, sampling and custom tags, in Higress's higress-config
// shape, with zipkin, opentelemetry (gRPC or HTTP), skywalking and datadog
// backends.
package tracing

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tagsv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const Name = "tracing"

// Defaults and limits.
const (
	// DefaultSampling is Higress's: trace every request.
	DefaultSampling = 100.0
	// MaxSampling is sampling's ceiling: a percentage.
	MaxSampling = 100.0
	// DefaultTimeout is Higress's collector timeout.
	DefaultTimeout = 500 * time.Millisecond
	// ZipkinTimeout is the timeout of Envoy's requests to a Zipkin
	// collector named by collector_cluster (its runtime key
	// tracing.zipkin.request_timeout), written out where collector_service
	// needs one, so every proxy of a mixed fleet behaves alike.
	ZipkinTimeout = 5 * time.Second
	// DefaultZipkinPath is the Zipkin v2 JSON span endpoint.
	DefaultZipkinPath = "/api/v2/spans"
	// DefaultOTLPHTTPPath is the OTLP/HTTP trace endpoint.
	DefaultOTLPHTTPPath = "/v1/traces"
	// DatadogDefaultServiceName is used when serviceName is empty, because
	// Envoy requires a service name for Datadog.
	DatadogDefaultServiceName = "envoy"
)

// Tracing is the `tracing` section.
type Tracing struct {
	items.Toggle
	Sampling      float64              `json:"sampling" doc:"Percentage of requests traced, 0 to 100, kept at full precision (0.01 stays 0.01)."`
	Timeout       items.Millis         `json:"timeout" doc:"Collector request timeout for skywalking and opentelemetry; a bare integer is milliseconds (Higress), or a duration such as \"2s\". Zipkin and datadog have none (as in Higress): Envoy's 5 s applies to zipkin."`
	ServiceName   string               `json:"serviceName" doc:"Service name reported to the backend (opentelemetry, skywalking, datadog)."`
	CustomTags    map[string]CustomTag `json:"customTags" doc:"Tags added to every span, by tag name."`
	Zipkin        *Zipkin              `json:"zipkin" doc:"Send spans to a Zipkin collector (HTTP JSON v2)."`
	Skywalking    *Skywalking          `json:"skywalking" doc:"Send spans to a SkyWalking OAP server (gRPC)."`
	OpenTelemetry *OpenTelemetry       `json:"opentelemetry" doc:"Send spans to an OpenTelemetry collector (OTLP over gRPC or HTTP)."`
	Datadog       *Datadog             `json:"datadog" doc:"Send spans to a Datadog agent."`
}

var (
	_ items.Item         = (*Tracing)(nil)
	_ items.Ranger       = (*Tracing)(nil)
	_ items.Versioned    = (*Tracing)(nil)
	_ items.SecretHolder = (*Tracing)(nil)
	_ items.ServiceUser  = (*Tracing)(nil)
	_ items.Texter       = (*Tracing)(nil)
	_ items.Enum         = Protocol("")
)

// Secrets implements items.SecretHolder: the SkyWalking access token.
func (t *Tracing) Secrets() []string {
	if t.Skywalking != nil && t.Skywalking.AccessToken != "" {
		return []string{t.Skywalking.AccessToken}
	}
	return nil
}

// Backend is where spans go: a service of the mesh and its port. The
// collector cluster is Istio's outbound cluster of that port.
type Backend struct {
	Service string     `json:"service" doc:"Fully qualified host of the collector service, e.g. zipkin.istio-system.svc.cluster.local."`
	Port    items.Port `json:"port" doc:"Collector port (a number, or a string as Higress writes it)."`
}

// Zipkin is the zipkin backend.
type Zipkin struct {
	Backend
	Path string `json:"path" doc:"Span endpoint path (default /api/v2/spans)."`
	W3C  bool   `json:"w3c" doc:"Also read and send W3C traceparent headers beside B3 (Envoy's USE_B3_WITH_W3C_PROPAGATION). Needs Istio 1.28 (Envoy 1.36) or newer on every targeted proxy."`
}

// The Envoy releases zipkin settings need.
var (
	// zipkinService is the first Envoy with ZipkinConfig.collector_service
	// (an HttpService: cluster, path, host and timeout in one) and
	// trace_context_option.
	zipkinService = envoyfilter.Version{Major: 1, Minor: 36}
)

// Skywalking is the skywalking backend.
type Skywalking struct {
	Backend
	AccessToken string `json:"access_token" doc:"Token sent to the OAP server. A secret: never logged; it does appear in the generated EnvoyFilter."`
}

// OpenTelemetry is the opentelemetry backend.
type OpenTelemetry struct {
	Backend
	Protocol Protocol `json:"protocol" doc:"OTLP transport: grpc (default) or http."`
	Path     string   `json:"path" doc:"OTLP/HTTP endpoint path (default /v1/traces); only for protocol http."`
}

// Datadog is the datadog backend.
type Datadog struct {
	Backend
}

// Protocol is the OTLP transport.
type Protocol string

// Values lists the transports.
func (Protocol) Values() []string { return []string{"grpc", "http"} }

// CustomTag is one span tag: exactly one of literal, header or environment.
type CustomTag struct {
	Literal     string `json:"literal" doc:"A fixed value."`
	Header      string `json:"header" doc:"The value of this request header."`
	Environment string `json:"environment" doc:"The value of this environment variable of the proxy."`
	Default     string `json:"default" doc:"Value when the header or variable is absent."`
}

func init() {
	items.Register(items.Registration{
		Name:    Name,
		Summary: "Distributed tracing: provider, sampling and custom tags (Higress-compatible).",
		Stage:   envoyfilter.StageObservability,
		Slot:    1,
		Purpose: "traces each request",
		Where:   "a connection manager merge. A gRPC collector (`skywalking`, `opentelemetry` over `grpc`) also gets HTTP/2 merged into its cluster, an outbound cluster, which Istio does not patch in `SIDECAR_INBOUND`: there the collector is reached over HTTP/2 only if its Service port says gRPC (a `grpc-…` name or `appProtocol: grpc`); otherwise use `ANY` with a `selector`, or a zipkin, datadog or `opentelemetry` `http` collector",
		// Higress's default: tracing is off until `enable: true`.
		EnabledByDefault: false,
		New:              New,
		Needs: []items.Need{
			{Setting: "zipkin", Field: "collector_service", Envoy: zipkinService, Older: "collector_cluster and collector_endpoint, to the same effect"},
			{Setting: "zipkin.w3c", Field: "trace_context_option", Envoy: zipkinService, Older: "refused by validation"},
		},
	})
}

// New returns Higress's defaults.
func New() items.Item {
	return &Tracing{
		Sampling: DefaultSampling,
		Timeout:  items.Millis{Duration: DefaultTimeout},
	}
}

// backends lists the configured backends by key.
func (t *Tracing) backends() map[string]*Backend {
	out := map[string]*Backend{}
	if t.Zipkin != nil {
		out["zipkin"] = &t.Zipkin.Backend
	}
	if t.Skywalking != nil {
		out["skywalking"] = &t.Skywalking.Backend
	}
	if t.OpenTelemetry != nil {
		out["opentelemetry"] = &t.OpenTelemetry.Backend
	}
	if t.Datadog != nil {
		out["datadog"] = &t.Datadog.Backend
	}
	return out
}

// Texts implements items.Texter.
func (*Tracing) Texts() []items.Text {
	return []items.Text{
		{Path: "serviceName", Kind: items.TextPlain},
		{Path: "customTags.*", Key: items.TextPlain},
		{Path: "customTags.*.literal", Kind: items.TextPlain},
		{Path: "customTags.*.header", Kind: items.TextHeaderRead},
		{Path: "customTags.*.environment", Kind: items.TextPlain},
		{Path: "customTags.*.default", Kind: items.TextPlain},
		{Path: "zipkin.service", Kind: items.TextServiceHost},
		{Path: "zipkin.path", Kind: items.TextURLPath},
		{Path: "skywalking.service", Kind: items.TextServiceHost},
		{Path: "skywalking.access_token", Kind: items.TextPlain},
		{Path: "opentelemetry.service", Kind: items.TextServiceHost},
		{Path: "opentelemetry.path", Kind: items.TextURLPath},
		{Path: "datadog.service", Kind: items.TextServiceHost},
	}
}

// missing says what a proxy does while a backend's collector has no
// cluster, measured at Envoy 1.40 and 1.39 (test/proxy TestServiceFailure):
// the zipkin and datadog tracers name the cluster at load time, so Envoy
// refuses the listener (empty: the default, facts.DefaultMissing says
// so); the gRPC and OTLP/HTTP clients of skywalking and opentelemetry load
// and fail each report. With a cluster that has no endpoints or refuses
// connections, every tracer loads and requests are served; spans are
// lost.
var missing = map[string]string{
	"skywalking":    "requests are served, but their traces are dropped: no span reaches a collector",
	"opentelemetry": "requests are served, but their traces are dropped: no span reaches a collector",
}

// Services implements items.ServiceUser: the collector.
func (t *Tracing) Services() []items.ServiceRef {
	var out []items.ServiceRef
	backends := t.backends()
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		if b := backends[name]; b.Service != "" {
			out = append(out, items.ServiceRef{Path: name + ".service", Host: b.Service, Port: uint32(b.Port), Missing: missing[name]})
		}
	}
	return out
}

// Ranges implements items.Ranger: Validate checks them, and the JSON
// Schema shows them.
func (*Tracing) Ranges() []items.Range {
	return []items.Range{{Path: "sampling", Min: 0, Max: MaxSampling}, items.DurationRange("timeout", time.Nanosecond, 0)}
}

// Warnings implements items.Warner: a serviceName zipkin does not send.
func (t *Tracing) Warnings() error {
	var p items.Problems
	if t.ServiceName != "" && t.Zipkin != nil {
		p.Addf("serviceName", "zipkin does not use it: Envoy's zipkin tracer names the service after the proxy's service cluster (istio-agent sets <app>.<namespace>, e.g. istio-ingressgateway.istio-system); serviceName applies to opentelemetry, skywalking and datadog")
	}
	return p.Err()
}

// Validate implements items.Item. Backend settings are only required when
// tracing is enabled; values that are given are always checked.
func (t *Tracing) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, t)
	backends := t.backends()
	names := slices.Sorted(maps.Keys(backends))
	if t.Enable && len(backends) != 1 {
		if len(backends) == 0 {
			p.Addf("", "enabled tracing needs one backend: zipkin, skywalking, opentelemetry or datadog")
		} else {
			p.Addf("", "enabled tracing needs exactly one backend, got %s", strings.Join(names, ", "))
		}
	}
	for _, name := range names {
		b := backends[name]
		if b.Service == "" && t.Enable {
			p.Addf(name+".service", "is required")
		}
		if b.Port == 0 && t.Enable {
			p.Addf(name+".port", "is required")
		}
	}
	if o := t.OpenTelemetry; o != nil {
		if o.Path != "" && o.Protocol != "http" {
			p.Addf("opentelemetry.path", "only applies to protocol http")
		}
	}
	for _, tag := range slices.Sorted(maps.Keys(t.CustomTags)) {
		if tag == "" {
			p.Addf("customTags", "has a tag whose name is empty (\"\"): a span tag needs a name, such as environment")
			continue
		}
		t.CustomTags[tag].validate(&p, "customTags."+tag)
	}
	return p.Err()
}

func (c CustomTag) validate(p *items.Problems, path string) {
	set := 0
	for _, v := range []string{c.Literal, c.Header, c.Environment} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		p.Addf(path, "needs exactly one of literal, header or environment")
	}
	if c.Literal != "" && c.Default != "" {
		p.Addf(path+".default", "only applies to header and environment tags")
	}
}

// Build implements items.Item: the patches for the newest Envoy.
func (t *Tracing) Build() ([]envoyfilter.Patch, error) {
	return t.BuildFor(envoyfilter.Newest())
}

// BuildFor implements items.Versioned.
func (t *Tracing) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	provider, cluster, grpc, err := t.provider(r.Envoy)
	if err != nil {
		return nil, err
	}
	hcm, err := envoyfilter.MergeHCM(&hcmv3.HttpConnectionManager{
		Tracing: &hcmv3.HttpConnectionManager_Tracing{
			RandomSampling: &typev3.Percent{Value: t.Sampling},
			Provider:       provider,
			CustomTags:     t.customTags(),
			// The current way to give upstream requests their own span;
			// the router's start_child_span is deprecated.
			SpawnUpstreamSpan: wrapperspb.Bool(true),
		},
	})
	if err != nil {
		return nil, err
	}
	patches := []envoyfilter.Patch{hcm}
	if grpc {
		p, err := envoyfilter.GRPCCluster(cluster)
		if err != nil {
			return nil, err
		}
		patches = append(patches, p)
	}
	return patches, nil
}

// provider builds the tracer config of the one backend. It returns the
// collector cluster and whether the backend speaks gRPC.
func (t *Tracing) provider(envoy envoyfilter.Version) (*tracev3.Tracing_Http, string, bool, error) {
	var (
		name string
		cfg  proto.Message
		b    Backend
		grpc bool
	)
	timeout := durationpb.New(t.Timeout.Duration)
	var err error
	switch {
	case t.Zipkin != nil:
		b = t.Zipkin.Backend
		name = envoyfilter.TracerZipkin
		if cfg, err = t.zipkin(envoy); err != nil {
			return nil, "", false, err
		}
	case t.Skywalking != nil:
		b, grpc = t.Skywalking.Backend, true
		name = envoyfilter.TracerSkyWalking
		client := &tracev3.ClientConfig{ServiceName: t.ServiceName}
		if t.Skywalking.AccessToken != "" {
			client.BackendTokenSpecifier = &tracev3.ClientConfig_BackendToken{BackendToken: t.Skywalking.AccessToken}
		}
		cfg = &tracev3.SkyWalkingConfig{GrpcService: grpcService(b, timeout), ClientConfig: client}
	case t.OpenTelemetry != nil:
		b = t.OpenTelemetry.Backend
		name = envoyfilter.TracerOpenTelemetry
		otel := &tracev3.OpenTelemetryConfig{ServiceName: t.ServiceName}
		if t.OpenTelemetry.Protocol == "http" {
			otel.HttpService = httpService(b, cmp.Or(t.OpenTelemetry.Path, DefaultOTLPHTTPPath), timeout)
		} else {
			grpc = true
			otel.GrpcService = grpcService(b, timeout)
		}
		cfg = otel
	case t.Datadog != nil:
		b = t.Datadog.Backend
		name = envoyfilter.TracerDatadog
		cfg = &tracev3.DatadogConfig{
			CollectorCluster:  envoyfilter.OutboundCluster(b.Service, uint32(b.Port)),
			CollectorHostname: b.Service,
			ServiceName:       cmp.Or(t.ServiceName, DatadogDefaultServiceName),
		}
	default:
		return nil, "", false, fmt.Errorf("no tracing backend configured")
	}
	typed, err := envoyfilter.Any(cfg)
	if err != nil {
		return nil, "", false, fmt.Errorf("pack %s config: %w", name, err)
	}
	provider := &tracev3.Tracing_Http{Name: name, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: typed}}
	return provider, envoyfilter.OutboundCluster(b.Service, uint32(b.Port)), grpc, nil
}

// zipkin is the Zipkin tracer config for proxies of envoy. From Envoy 1.36
// it is collector_service, which the older fields are to be deprecated
// for; older Envoys know only collector_cluster and collector_endpoint, as
// Higress sends them.
func (t *Tracing) zipkin(envoy envoyfilter.Version) (*tracev3.ZipkinConfig, error) {
	z := t.Zipkin
	path := cmp.Or(z.Path, DefaultZipkinPath)
	cfg := &tracev3.ZipkinConfig{CollectorEndpointVersion: tracev3.ZipkinConfig_HTTP_JSON}
	if !envoy.AtLeast(zipkinService) {
		if z.W3C {
			return nil, &fielderr.Error{Path: "zipkin.w3c", Msg: items.NeedsMsg(zipkinService)}
		}
		cfg.CollectorCluster = envoyfilter.OutboundCluster(z.Service, uint32(z.Port))
		cfg.CollectorEndpoint = path
		cfg.CollectorHostname = z.Service
		return cfg, nil
	}
	cfg.CollectorService = httpService(z.Backend, path, durationpb.New(ZipkinTimeout))
	if z.W3C {
		cfg.TraceContextOption = tracev3.ZipkinConfig_USE_B3_WITH_W3C_PROPAGATION
	}
	return cfg, nil
}

func httpService(b Backend, path string, timeout *durationpb.Duration) *corev3.HttpService {
	return &corev3.HttpService{HttpUri: &corev3.HttpUri{
		Uri:              fmt.Sprintf("http://%s:%d%s", b.Service, b.Port, path),
		HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: envoyfilter.OutboundCluster(b.Service, uint32(b.Port))},
		Timeout:          timeout,
	}}
}

func grpcService(b Backend, timeout *durationpb.Duration) *corev3.GrpcService {
	return &corev3.GrpcService{
		TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
			ClusterName: envoyfilter.OutboundCluster(b.Service, uint32(b.Port)),
			Authority:   b.Service,
		}},
		Timeout: timeout,
	}
}

// customTags converts the tags, sorted by name for deterministic output.
func (t *Tracing) customTags() []*tagsv3.CustomTag {
	var out []*tagsv3.CustomTag
	for _, n := range slices.Sorted(maps.Keys(t.CustomTags)) {
		c := t.CustomTags[n]
		tag := &tagsv3.CustomTag{Tag: n}
		switch {
		case c.Literal != "":
			tag.Type = &tagsv3.CustomTag_Literal_{Literal: &tagsv3.CustomTag_Literal{Value: c.Literal}}
		case c.Header != "":
			tag.Type = &tagsv3.CustomTag_RequestHeader{RequestHeader: &tagsv3.CustomTag_Header{Name: c.Header, DefaultValue: c.Default}}
		default:
			tag.Type = &tagsv3.CustomTag_Environment_{Environment: &tagsv3.CustomTag_Environment{Name: c.Environment, DefaultValue: c.Default}}
		}
		out = append(out, tag)
	}
	return out
}
