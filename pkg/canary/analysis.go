package canary

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/internal/fielderr"
	"github.com/globalconfig/globalconfig/items"
)

// Analysis is the traffic gate of a canary phase (rollout.analysis): the
// canaries' own Envoy statistics over the bake time, against the stable
// proxies' over the same time. A canary that answers a larger share of
// errors than the rules allow rolls the change back, with the figures.
//
// A share is counted by one of three measures, each a share of the
// requests the proxies answered (downstream requests completed):
//
//   - 5xx: responses with a 5xx status (always judged);
//   - local replies (LocalReplies): responses a filter made before the
//     router, so that nothing went upstream (a 413 of a body limit, a 403
//     of an access list, a 429 of a rate limit);
//   - connection failures (ConnectFailures): upstream connections that
//     failed to open.
//
// Each measure fails when the canaries served at least MinRequests and
// their share is above MaxShare, or above MaxRatio times the stable
// proxies' share while also above MinRatioShare and at least
// MinRatioCount (a share that small is noise, never a regression by
// ratio).
type Analysis struct {
	MaxRatio            float64             `json:"maxRatio,omitempty" doc:"The canaries' error share may be at most this many times the stable proxies' (default 2, from 1 to 100). Applies once the canaries' share is above 1% and they answered at least 5 such errors."`
	MaxShare            Share               `json:"maxShare,omitempty" doc:"The canaries' error share may never be above this, whatever the stable proxies do: a percentage such as \"5%\" (default \"5%\")."`
	MinRequests         int                 `json:"minRequests,omitempty" doc:"How many requests the canaries must have answered over the bake time before the traffic is judged (default 100, from 1 to 1000000)."`
	LocalReplies        bool                `json:"localReplies,omitempty" doc:"Also judge the share of responses Envoy made itself before the router (a 413 of a body limit, a 403, a 429): a change that refuses requests it should pass. Default false."`
	ConnectFailures     bool                `json:"connectFailures,omitempty" doc:"Also judge the share of upstream connections that failed to open, against the requests answered. Default false."`
	InsufficientTraffic InsufficientTraffic `json:"insufficientTraffic,omitempty" doc:"What happens when the canaries answered fewer than minRequests over the bake time: Promote (default: on the ACKs alone, with a warning in the status and the Event) or RollBack."`
}

// InsufficientTraffic is what a phase does when the canaries served too
// little traffic to judge.
type InsufficientTraffic string

// The choices.
const (
	// PromoteAnyway: promote on the ACKs alone, with a warning.
	PromoteAnyway InsufficientTraffic = "Promote"
	// RollBackWithout: roll back, as for a canary that never answered.
	RollBackWithout InsufficientTraffic = "RollBack"
)

// Values lists the accepted spellings (used by the decoder and the schema).
func (InsufficientTraffic) Values() []string {
	return []string{string(PromoteAnyway), string(RollBackWithout)}
}

// Defaults and bounds of the traffic gate.
const (
	DefaultMaxRatio    = 2.0
	MaxMaxRatio        = 100.0
	DefaultMinRequests = 100
	MaxMinRequests     = 1000000
	// MinRatioShare and MinRatioCount are the share and the count below
	// which the ratio rule never fails: a few errors against none on the
	// stable proxies are noise (a request in flight when the statistics
	// are read can count as a local reply once).
	MinRatioShare = 0.01
	MinRatioCount = 5
)

// DefaultMaxShare is the default ceiling: 5%.
var DefaultMaxShare = Share{Percent: 5}

// Ratio is the ratio rule, its default filled in.
func (a *Analysis) Ratio() float64 {
	if a.MaxRatio == 0 {
		return DefaultMaxRatio
	}
	return a.MaxRatio
}

// Ceiling is the absolute ceiling as a fraction, its default filled in.
func (a *Analysis) Ceiling() float64 {
	if !a.MaxShare.set {
		return DefaultMaxShare.Fraction()
	}
	return a.MaxShare.Fraction()
}

// Minimum is the requests needed before judging, its default filled in.
func (a *Analysis) Minimum() int {
	if a.MinRequests == 0 {
		return DefaultMinRequests
	}
	return a.MinRequests
}

// OnInsufficient is what to do with too little traffic, its default
// filled in.
func (a *Analysis) OnInsufficient() InsufficientTraffic {
	if a.InsufficientTraffic == "" {
		return PromoteAnyway
	}
	return a.InsufficientTraffic
}

// Validate returns every problem of a, with paths relative to it.
func (a *Analysis) Validate() error {
	var errs fielderr.List
	if r := a.MaxRatio; r != 0 && (r < 1 || r > MaxMaxRatio) {
		errs.Addf("maxRatio", "must be between 1 and %g, got %g", MaxMaxRatio, r)
	}
	if n := a.MinRequests; n < 0 || n > MaxMinRequests {
		errs.Addf("minRequests", "must be between 1 and %d, got %d", MaxMinRequests, n)
	}
	return errs.Err()
}

// Share is a percentage, "5%" or "0.5%", from 0% to 100%.
type Share struct {
	Percent float64
	set     bool
}

// Fraction is the share as a fraction of one.
func (s Share) Fraction() float64 { return s.Percent / 100 }

// DecodeScalar implements the document decoder's scalar hook.
func (s *Share) DecodeScalar(tag, value string) error {
	if tag != "!!str" {
		return fmt.Errorf("expected a percentage such as \"5%%\", got %s", items.DescribeTag(tag))
	}
	num, ok := strings.CutSuffix(value, "%")
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 || f > 100 || strings.ContainsAny(num, "eE+-") {
		return fmt.Errorf("must be a percentage from \"0%%\" to \"100%%\", such as \"5%%\" or \"0.5%%\", got %q", value)
	}
	*s = Share{Percent: f, set: true}
	return nil
}

// SchemaTypes implements the schema hook.
func (Share) SchemaTypes() []string { return []string{"string"} }

func init() {
	items.DeclareLimits[Share](items.Limits{Pattern: `^(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)%$`})
}

// String writes s as the document does.
func (s Share) String() string { return strconv.FormatFloat(s.Percent, 'f', -1, 64) + "%" }

// MarshalJSON writes s as the document does (a section key hashes it).
func (s Share) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// Figures are one group's counters over the window: the sum over its
// proxies of what each served since its own baseline.
type Figures struct {
	// Proxies is how many proxies the group has, Read how many of them
	// the figures come from (their statistics were read).
	Proxies int `json:"proxies"`
	Read    int `json:"read"`
	// Requests answered (downstream requests completed), of which 5xx
	// responses, local replies (made before the router) and upstream
	// connections that failed.
	Requests        float64 `json:"requests"`
	Server5xx       float64 `json:"5xx"`
	LocalReplies    float64 `json:"localReplies"`
	ConnectFailures float64 `json:"connectFailures"`
}

// share is n of f's requests, 0 without any.
func (f Figures) share(n float64) float64 {
	if f.Requests <= 0 {
		return 0
	}
	return n / f.Requests
}

// TrafficVerdict is the traffic gate's figures for a phase: the canaries'
// (each from when it received the change) and the stable proxies' (a
// sample of them, from the same time), and since when. Known is false
// until the canaries' statistics were read; Why says what failed.
type TrafficVerdict struct {
	Known          bool
	Why            string
	Canary, Stable Figures
	Since          time.Time
}

// Traffic is the traffic gate's report in the record: the figures, and
// what they say under the rules.
type Traffic struct {
	Since  time.Time `json:"since"`
	Canary Figures   `json:"canary"`
	Stable Figures   `json:"stable"`
	// Verdict says it in one line: the shares compared, or why the
	// traffic is too little to judge.
	Verdict string `json:"verdict"`
	// Failed says the canaries broke the rules; Insufficient that they
	// served fewer than minRequests.
	Failed       bool `json:"failed,omitempty"`
	Insufficient bool `json:"insufficient,omitempty"`
}

// Report judges v under a: the first measure that fails, or every share
// when none does.
func (v TrafficVerdict) Report(a *Analysis) *Traffic {
	return v.report(a, "the canaries", "the stable proxies")
}

// report is Report with the two groups named as a message names them:
// mine, whose traffic is judged, against theirs.
func (v TrafficVerdict) report(a *Analysis, mine, theirs string) *Traffic {
	t := &Traffic{Since: v.Since.UTC(), Canary: v.Canary, Stable: v.Stable}
	c, s := v.Canary, v.Stable
	if c.Requests < float64(a.Minimum()) {
		t.Insufficient = true
		t.Verdict = fmt.Sprintf("%s answered %.0f requests since %s, %d needed", mine, c.Requests, v.Since.UTC().Format(time.RFC3339), a.Minimum())
		return t
	}
	type measure struct {
		name   string
		c, s   float64
		judged bool
	}
	measures := []measure{
		{"5xx responses", c.Server5xx, s.Server5xx, true},
		{"local replies", c.LocalReplies, s.LocalReplies, a.LocalReplies},
		{"upstream connection failures", c.ConnectFailures, s.ConnectFailures, a.ConnectFailures},
	}
	stableKnown := s.Requests >= float64(a.Minimum())
	var parts []string
	for _, m := range measures {
		if !m.judged {
			continue
		}
		cs, ss := c.share(m.c), s.share(m.s)
		stableText := fmt.Sprintf("%s' %s (%.0f of %.0f)", theirs, pct(ss), m.s, s.Requests)
		if !stableKnown {
			stableText = fmt.Sprintf("%s answered too few requests to compare (%.0f)", theirs, s.Requests)
		}
		line := fmt.Sprintf("%s: %s' share %s (%.0f of %.0f requests), %s", m.name, mine, pct(cs), m.c, c.Requests, stableText)
		switch {
		case cs > a.Ceiling():
			t.Failed, t.Verdict = true, line+fmt.Sprintf(", above the ceiling %s (analysis.maxShare)", pct(a.Ceiling()))
			return t
		case stableKnown && cs > MinRatioShare && m.c >= MinRatioCount && cs > a.Ratio()*ss:
			t.Failed, t.Verdict = true, line+fmt.Sprintf(", more than %g times theirs (analysis.maxRatio)", a.Ratio())
			return t
		}
		parts = append(parts, line)
	}
	t.Verdict = strings.Join(parts, "; ")
	return t
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }
