// Package localratelimit is the `localRateLimit` item: one token bucket per
// proxy for all requests; requests over the limit are answered 429. The
// filterEnabled and filterEnforced percentages let a limit run in shadow
// mode (counted, not enforced) before it is rolled out.
package localratelimit

import (
	"maps"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
)

// Name is the item's key in the document.
const (
	Name = "localRateLimit"
	// StatPrefix names the filter's statistics (http_local_rate_limiter.*).
	StatPrefix = "http_local_rate_limiter"
	// MinFillInterval is Envoy's floor for a token bucket's fill interval.
	MinFillInterval = 50 * time.Millisecond
	// percentScale turns a percentage with up to four decimals into
	// Envoy's per-million fraction.
	percentScale = 10000
)

// LocalRateLimit is the `localRateLimit` section.
type LocalRateLimit struct {
	items.Toggle
	MaxTokens       uint32            `json:"maxTokens" doc:"Bucket size: the burst allowed, at least 1."`
	TokensPerFill   uint32            `json:"tokensPerFill" doc:"Tokens added every fillInterval (default 1; set it to maxTokens for a fixed window)."`
	FillInterval    items.Seconds     `json:"fillInterval" doc:"How often tokens are added, at least 50ms (default 1s)."`
	ResponseHeaders map[string]string `json:"responseHeaders" doc:"Headers added to 429 responses, e.g. x-local-rate-limit: \"true\"."`
	FilterEnabled   float64           `json:"filterEnabled" doc:"Percentage of requests the limit is checked for (default 100)."`
	FilterEnforced  float64           `json:"filterEnforced" doc:"Percentage of checked requests over the limit that are refused (default 100; 0 is shadow mode: counted, not refused)."`
}

var _ items.Item = (*LocalRateLimit)(nil)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "A global token bucket per proxy; requests over the limit are answered 429.",
		Stage:            envoyfilter.StageTrafficPolicy,
		EnabledByDefault: true,
		New: func() items.Item {
			return &LocalRateLimit{
				TokensPerFill:  1,
				FillInterval:   items.Seconds{Duration: time.Second},
				FilterEnabled:  100,
				FilterEnforced: 100,
			}
		},
	})
}

// Validate implements items.Item.
func (l *LocalRateLimit) Validate() error {
	var p items.Problems
	if l.MaxTokens < 1 && l.Enable {
		p.Addf("maxTokens", "is required and must be at least 1")
	}
	if l.TokensPerFill < 1 {
		p.Addf("tokensPerFill", "must be at least 1")
	}
	if l.FillInterval.Duration < MinFillInterval {
		p.Addf("fillInterval", "must be at least %v (Envoy's floor), got %v", MinFillInterval, l.FillInterval.Duration)
	}
	items.CheckRange(&p, "filterEnabled", l.FilterEnabled, 0, 100)
	items.CheckRange(&p, "filterEnforced", l.FilterEnforced, 0, 100)
	for _, name := range slices.Sorted(maps.Keys(l.ResponseHeaders)) {
		items.CheckHeader(&p, "responseHeaders."+name, name, l.ResponseHeaders[name])
	}
	return p.Err()
}

// fraction is a percentage as Envoy's runtime fractional percent.
func fraction(percent float64, key string) *corev3.RuntimeFractionalPercent {
	return &corev3.RuntimeFractionalPercent{
		DefaultValue: &typev3.FractionalPercent{Numerator: uint32(percent*percentScale + 0.5), Denominator: typev3.FractionalPercent_MILLION},
		RuntimeKey:   key,
	}
}

// Build implements items.Item.
func (l *LocalRateLimit) Build() ([]envoyfilter.Patch, error) {
	cfg := &ratelimitv3.LocalRateLimit{
		StatPrefix: StatPrefix,
		TokenBucket: &typev3.TokenBucket{
			MaxTokens:     l.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(l.TokensPerFill),
			FillInterval:  durationpb.New(l.FillInterval.Duration),
		},
		FilterEnabled:  fraction(l.FilterEnabled, "globalconfig.local_rate_limit.enabled"),
		FilterEnforced: fraction(l.FilterEnforced, "globalconfig.local_rate_limit.enforced"),
		Status:         &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
	}
	for _, name := range slices.Sorted(maps.Keys(l.ResponseHeaders)) {
		cfg.ResponseHeadersToAdd = append(cfg.ResponseHeadersToAdd, envoyfilter.SetHeader(name, l.ResponseHeaders[name]))
	}
	p, err := envoyfilter.InsertHTTPFilter(envoyfilter.LocalRateLimit, cfg)
	if err != nil {
		return nil, err
	}
	return []envoyfilter.Patch{p}, nil
}
