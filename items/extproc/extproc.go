// Package extproc is the `extProc` item: every request through the
// gateway is streamed to one external processing service over Envoy's
// ext_proc gRPC API (envoy.service.ext_proc.v3.ExternalProcessor), the
// way WAF and API-security products plug into Envoy. The service sees the
// request's and the response's headers, and their bodies when asked; it
// may change them, or answer the request itself.
package extproc

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/skip"
)

// Name is the item's key in the document.
const Name = "extProc"

// Filter is the ext_proc filter, under a name of its own: EnvoyFilters
// match filters by name, and a user's own ext_proc filter keeps Envoy's.
const Filter = "globalconfig.ext_proc"

// ScopeFilter is the RBAC filter that marks the requests to process when
// skip lists any (items/internal/skip).
const ScopeFilter = "globalconfig.ext_proc.scope"

// The scope filter's mark: http.<prefix>.rbac.globalconfig_ext_proc_.
// shadow_denied counts the requests processed, .shadow_allowed those
// opted out.
var marker = skip.Marker{StatPrefix: "globalconfig_ext_proc_", Policy: "extProc.check"}

// StatPrefix names the filter's statistics:
// http.<prefix>.ext_proc.globalconfig.streams_started, .streams_failed,
// .failure_mode_allowed, .message_timeouts, ...
const StatPrefix = "globalconfig"

// Defaults and limits.
const (
	// DefaultMessageTimeout is Envoy's own: how long the filter waits for
	// each answer of the service.
	DefaultMessageTimeout = 200 * time.Millisecond
	// MaxMessageTimeout is Envoy's ceiling (message_timeout's rule).
	MaxMessageTimeout = time.Hour
	// MinMessageTimeout is globalconfig's floor: Envoy takes 0, which
	// times out every message at once, so every request would fail.
	MinMessageTimeout = time.Millisecond
)

// statusOnError (failureStatus) came into ext_proc's API with Envoy 1.36
// (go-control-plane envoy/v1.36.0; 1.35's has none): older proxies answer
// a failed request with 500.
var statusOnError = envoyfilter.Version{Major: 1, Minor: 36}

// ExtProc is the `extProc` section.
type ExtProc struct {
	items.Toggle
	Service         string        `json:"service" doc:"Host of the ext_proc service, as istiod names its cluster: a Service's full name (waf.security.svc.cluster.local) or a ServiceEntry's host. Its cluster gets HTTP/2 (gRPC)."`
	Port            items.Port    `json:"port" doc:"The service's gRPC port."`
	RequestHeaders  HeaderMode    `json:"requestHeaders" doc:"SEND (default): the service gets each request's headers, and may change them or answer the request; SKIP: it does not (Envoy's processing_mode.request_header_mode)."`
	ResponseHeaders HeaderMode    `json:"responseHeaders" doc:"SEND (default) or SKIP the responses' headers (processing_mode.response_header_mode)."`
	RequestBody     BodyMode      `json:"requestBody" doc:"How request bodies are sent (processing_mode.request_body_mode): NONE (default); STREAMED, chunk by chunk as they arrive; BUFFERED, whole, once it arrived (a body over the connection's buffer limit is refused with 413); BUFFERED_PARTIAL, up to the buffer limit."`
	ResponseBody    BodyMode      `json:"responseBody" doc:"How response bodies are sent (processing_mode.response_body_mode): NONE (default), STREAMED, BUFFERED (a body over the buffer limit fails) or BUFFERED_PARTIAL."`
	MessageTimeout  *items.Millis `json:"messageTimeout" doc:"How long Envoy waits for each answer of the service, 1ms to 1h; a bare integer is milliseconds (default 200ms, Envoy's). Past it the message fails, and failureMode decides."`
	FailureMode     FailureMode   `json:"failureMode" doc:"When the service fails (unreachable, an error on the stream, a message timed out): deny (default) answers the request with failureStatus; allow lets it through unprocessed (Envoy's failure_mode_allow)."`
	FailureStatus   *uint32       `json:"failureStatus" doc:"The status of a request whose processing failed, with failureMode deny: 400 to 599 as Envoy knows them (Envoy's status_on_error; Istio 1.28 / Envoy 1.36 or newer). Unset: 500, Envoy's."`
	Skip            skip.Skip     `json:"skip" doc:"Requests that are not sent to the service, as for every request-checking item (extAuth, basicAuth, csrf): whole path segments on the normalized path, exact hosts. No default: a WAF sees everything unless told otherwise."`
}

// HeaderMode is whether headers are sent. Envoy's DEFAULT is left out:
// it means SEND for both, and a user's document says which.
type HeaderMode string

// Values implements items.Enum.
func (HeaderMode) Values() []string { return []string{"SEND", "SKIP"} }

// BodyMode is how a body is sent. Envoy's FULL_DUPLEX_STREAMED and GRPC
// are left out: the first needs the trailers sent too and a service that
// answers every chunk in step, the second applies to gRPC requests only;
// neither is what a gateway-wide default can promise.
type BodyMode string

// Values implements items.Enum.
func (BodyMode) Values() []string {
	return []string{"NONE", "STREAMED", "BUFFERED", "BUFFERED_PARTIAL"}
}

// FailureMode is what happens when the service fails.
type FailureMode string

// Values implements items.Enum.
func (FailureMode) Values() []string { return []string{"allow", "deny"} }

var (
	_ items.Item           = (*ExtProc)(nil)
	_ items.Ranger         = (*ExtProc)(nil)
	_ items.Texter         = (*ExtProc)(nil)
	_ items.Versioned      = (*ExtProc)(nil)
	_ items.ContextLimiter = (*ExtProc)(nil)
	_ items.ServiceUser    = (*ExtProc)(nil)
	_ items.Warner         = (*ExtProc)(nil)
	_ items.Enum           = HeaderMode("")
	_ items.Enum           = BodyMode("")
	_ items.Enum           = FailureMode("")
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A gateway-wide external processor (Envoy's ext_proc over gRPC): a WAF or API-security service sees, may change or may refuse every request and response.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             6,
		Purpose:          "streams each request to the ext_proc service after the auth check and the rate limits, so it sees only requests they passed, and before requestBody's size limit",
		Where:            "an ext_proc HTTP filter (with `skip`, wrapped in a matcher, after an RBAC filter in shadow mode that marks the requests to process), and HTTP/2 merged into the service's outbound cluster",
		EnabledByDefault: true,
		New: func() items.Item {
			return &ExtProc{RequestHeaders: "SEND", ResponseHeaders: "SEND", RequestBody: "NONE", ResponseBody: "NONE", FailureMode: "deny"}
		},
		Needs: []items.Need{
			{Setting: "failureStatus", Field: "status_on_error", Envoy: statusOnError, Older: "refused by validation (older proxies answer 500)"},
		},
	})
}

// Ranges implements items.Ranger.
func (*ExtProc) Ranges() []items.Range {
	r := items.ErrorStatuses("failureStatus")
	r.Why = "the codes from 400 Envoy knows: a failed request is no success"
	t := items.DurationRange("messageTimeout", MinMessageTimeout, MaxMessageTimeout)
	t.Why = "Envoy's ceiling is an hour; 0 would time out every message at once"
	return []items.Range{r, t}
}

// Texts implements items.Texter.
func (*ExtProc) Texts() []items.Text {
	return append([]items.Text{{Path: "service", Kind: items.TextServiceHost}}, skip.Texts("skip")...)
}

// Services implements items.ServiceUser.
func (x *ExtProc) Services() []items.ServiceRef {
	if x.Service == "" {
		return nil
	}
	return []items.ServiceRef{{Path: "service", Host: x.Service, Port: uint32(x.Port), Missing: x.missing()}}
}

// missing says what a gateway does while the service has no cluster, as
// measured at Envoy 1.40 and 1.39 with the service stopped (test/proxy
// TestExtProcFailure): the stream can't open, and failureMode decides.
func (x *ExtProc) missing() string {
	if x.FailureMode == "allow" {
		return "every request passes unprocessed (failureMode allow)"
	}
	return fmt.Sprintf("every request is answered with %d (failureMode deny)", x.status())
}

func (x *ExtProc) status() uint32 {
	if x.FailureStatus != nil {
		return *x.FailureStatus
	}
	return 500
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*ExtProc) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "on a sidecar every call between services would wait for the processor, and the processor's own sidecar would process its own traffic"}}
}

// Validate implements items.Item.
func (x *ExtProc) Validate() error {
	var p items.Problems
	items.CheckRanges(&p, x)
	if x.Enable {
		if x.Service == "" {
			p.Addf("service", "is required: the ext_proc service's host")
		}
		if x.Port == 0 {
			p.Addf("port", "is required: the ext_proc service's gRPC port")
		}
	}
	x.Skip.Validate(&p, "skip")
	if x.FailureStatus != nil && x.FailureMode != "deny" {
		p.Addf("failureStatus", "only applies with failureMode: deny")
	}
	if x.RequestHeaders == "SKIP" && x.ResponseHeaders == "SKIP" && x.RequestBody == "NONE" && x.ResponseBody == "NONE" {
		p.Addf("", "sets nothing to send the service (requestHeaders and responseHeaders SKIP, no body): send something, or disable the item")
	}
	return p.Err()
}

// Warnings implements items.Warner.
func (x *ExtProc) Warnings() error {
	var p items.Problems
	if x.FailureMode == "allow" {
		p.Addf("failureMode", "allow lets every request through unprocessed while the service is down or slow (counted in ext_proc.%s.failure_mode_allowed)", StatPrefix)
	}
	if x.RequestBody == "BUFFERED" {
		p.Addf("requestBody", "BUFFERED holds each request's whole body in the gateway before the service sees it: a body over the connection's buffer limit is refused with 413")
	}
	return p.Err()
}

// Build implements items.Item: the patches for the newest Envoy.
func (x *ExtProc) Build() ([]envoyfilter.Patch, error) { return x.BuildFor(envoyfilter.Newest()) }

// BuildFor implements items.Versioned: failureStatus needs Envoy 1.36.
func (x *ExtProc) BuildFor(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
	if x.FailureStatus != nil && !r.Envoy.AtLeast(statusOnError) {
		var p items.Problems
		p.Addf("failureStatus", "%s; older proxies answer 500: leave failureStatus out for them", items.NeedsMsg(statusOnError))
		return nil, p.Err()
	}
	cluster := envoyfilter.OutboundCluster(x.Service, uint32(x.Port))
	// With skip, the filter is wrapped in a matcher that passes the
	// opted-out requests by, and the scope filter before it marks them.
	patches, err := x.Skip.Filters(marker, ScopeFilter, Filter, x.config(cluster))
	if err != nil {
		return nil, err
	}
	h2, err := envoyfilter.GRPCCluster(cluster)
	if err != nil {
		return nil, err
	}
	return append(patches, h2), nil
}

// config is the ext_proc filter's configuration.
func (x *ExtProc) config(cluster string) *extprocv3.ExternalProcessor {
	cfg := &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: x.Service}},
		},
		StatPrefix: StatPrefix,
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:  headerMode(x.RequestHeaders),
			ResponseHeaderMode: headerMode(x.ResponseHeaders),
			RequestBodyMode:    bodyMode(x.RequestBody),
			ResponseBodyMode:   bodyMode(x.ResponseBody),
		},
		FailureModeAllow: x.FailureMode == "allow",
	}
	if x.MessageTimeout != nil {
		cfg.MessageTimeout = durationpb.New(x.MessageTimeout.Duration)
	}
	if x.FailureStatus != nil {
		cfg.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(*x.FailureStatus)}
	}
	return cfg
}

func headerMode(m HeaderMode) extprocv3.ProcessingMode_HeaderSendMode {
	return extprocv3.ProcessingMode_HeaderSendMode(extprocv3.ProcessingMode_HeaderSendMode_value[string(m)])
}

func bodyMode(m BodyMode) extprocv3.ProcessingMode_BodySendMode {
	return extprocv3.ProcessingMode_BodySendMode(extprocv3.ProcessingMode_BodySendMode_value[string(m)])
}
