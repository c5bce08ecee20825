package envoyfilter

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Version is a minor release, of Istio or of Envoy: 1.28.
type Version struct{ Major, Minor int }

// ParseVersion reads "1.28"; a patch level or pre-release suffix
// ("1.28.2", "1.28-dev") is accepted and dropped, since Istio and Envoy
// change their APIs only between minor releases.
func ParseVersion(s string) (Version, error) {
	m := versionSyntax.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("must be a version such as \"1.28\", got %q", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Version{major, minor}, nil
}

var versionSyntax = regexp.MustCompile(`^(\d{1,4})\.(\d{1,4})(?:[.-].*)?$`)

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Compare orders versions: negative when v is older than o.
func (v Version) Compare(o Version) int {
	return cmp.Or(cmp.Compare(v.Major, o.Major), cmp.Compare(v.Minor, o.Minor))
}

// AtLeast reports whether v is o or newer.
func (v Version) AtLeast(o Version) bool { return v.Compare(o) >= 0 }

// DecodeScalar reads the version from the YAML text, so an unquoted 1.30
// is 1.30 and not the number 1.3 (the document decoder finds this method;
// see items.ScalarDecoder).
func (v *Version) DecodeScalar(tag, value string) error {
	if tag != "!!str" && tag != "!!float" {
		return fmt.Errorf("must be a version such as \"1.28\", got %s %q", strings.TrimPrefix(tag, "!!"), value)
	}
	p, err := ParseVersion(value)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// SchemaTypes names the JSON Schema types DecodeScalar accepts.
func (Version) SchemaTypes() []string { return []string{"string", "number"} }

// MarshalText writes "1.28" (section keys, JSON).
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// Release is an Istio minor release and the Envoy minor release its proxy
// is built from.
type Release struct{ Istio, Envoy Version }

// Releases are the Istio releases globalconfig knows, oldest first: the
// Envoy each ships, from istio/proxy's ENVOY_VERSION.txt on each release
// branch and istio/test-infra's proxy update jobs (UPDATE_BRANCH=
// release/v1.3x). `make compat` checks every generated patch with the
// Envoy API of each, through go-control-plane's tag of that Envoy release.
var Releases = []Release{
	{Version{1, 25}, Version{1, 33}},
	{Version{1, 26}, Version{1, 34}},
	{Version{1, 27}, Version{1, 35}},
	{Version{1, 28}, Version{1, 36}},
	{Version{1, 29}, Version{1, 37}},
	{Version{1, 30}, Version{1, 38}},
	{Version{1, 31}, Version{1, 39}},
}

// Newest is the newest Istio release globalconfig knows.
func Newest() Release { return Releases[len(Releases)-1] }

// OldestSupported is the oldest Istio release in upstream support when this
// table was last updated (November 2026: 1.29 reached its end of life six
// weeks after 1.31.0, released 31 August 2026). A target without
// istioVersions renders for it and every newer release.
var OldestSupported = Version{1, 30}

// EnvoyOf returns the Envoy release of an Istio release. An Istio release
// newer than the table is taken to have the newest known Envoy: its proxies
// get what the newest known release gets, which an Envoy API keeps
// understanding (Envoy deprecates fields long before it removes them).
func EnvoyOf(istio Version) (Version, error) {
	for _, r := range Releases {
		if r.Istio == istio {
			return r.Envoy, nil
		}
	}
	newest := Releases[len(Releases)-1]
	if istio.Compare(newest.Istio) > 0 {
		return newest.Envoy, nil
	}
	return Version{}, fmt.Errorf("Istio %s is older than every release globalconfig knows (%s to %s)", istio, Releases[0].Istio, newest.Istio)
}

// IstioOf returns the oldest Istio release whose proxies run Envoy envoy or
// newer, and false when no known release does.
func IstioOf(envoy Version) (Version, bool) {
	for _, r := range Releases {
		if r.Envoy.AtLeast(envoy) {
			return r.Istio, true
		}
	}
	return Version{}, false
}

// IstioForEnvoy is the Istio release whose proxies run Envoy release v:
// the known release that ships it, or, outside the table, the release as
// many minors away as v is from the table's nearest Envoy (Istio ships
// one Envoy minor per minor: Envoy 1.40 is Istio 1.32's, master's while
// this table ends at 1.31).
func IstioForEnvoy(v Version) Version {
	for _, r := range Releases {
		if r.Envoy == v {
			return r.Istio
		}
	}
	near := Releases[0]
	if v.Compare(near.Envoy) > 0 {
		near = Newest()
	}
	return Version{near.Istio.Major, near.Istio.Minor + v.Minor - near.Envoy.Minor}
}

// Fleet returns the Istio releases a target renders for, oldest first: its
// istioVersions, or OldestSupported and every newer known release.
func (t Target) Fleet() []Version {
	if len(t.IstioVersions) > 0 {
		out := slices.Clone(t.IstioVersions)
		slices.SortFunc(out, Version.Compare)
		return slices.Compact(out)
	}
	var out []Version
	for _, r := range Releases {
		if r.Istio.AtLeast(OldestSupported) {
			out = append(out, r.Istio)
		}
	}
	return out
}

// VersionRange returns Istio's proxyVersion match for the Istio releases
// from from up to (not including) until, both of major version 1; a zero
// from means every older release, a zero until every newer one (2.x
// included). Istio matches it unanchored against the proxy's
// ISTIO_VERSION ("1.28.2", "1.29-dev"); the expression anchors itself.
// Both zero is every version: no match is needed, and "" is returned.
func VersionRange(from, until Version) string {
	var alt string
	switch {
	case from == (Version{}) && until == (Version{}):
		return ""
	case until == (Version{}):
		alt = `1\.` + numbersFrom(from.Minor) + `|([2-9]|[1-9]\d+)\.\d+`
	default:
		lo := 0
		if from != (Version{}) {
			lo = from.Minor
		}
		ms := make([]string, 0, until.Minor-lo)
		for m := lo; m < until.Minor; m++ {
			ms = append(ms, strconv.Itoa(m))
		}
		alt = `1\.(` + strings.Join(ms, "|") + `)`
		if from == (Version{}) {
			alt += `|0\.\d+`
		}
	}
	return "^(" + alt + `)(\.|-|$)`
}

// numbersFrom is a regular expression of the decimal numbers n and up,
// without leading zeros: 28 gives (2[8-9]|[3-9]\d|[1-9]\d{2,}).
func numbersFrom(n int) string {
	s := strconv.Itoa(n)
	var alts []string
	for i := len(s) - 1; i >= 0; i-- {
		d := s[i] - '0'
		switch {
		case i == len(s)-1:
			alts = append(alts, fmt.Sprintf("%s[%d-9]", s[:i], d))
		case d < 9:
			alts = append(alts, fmt.Sprintf("%s[%d-9]%s", s[:i], d+1, strings.Repeat(`\d`, len(s)-1-i)))
		}
	}
	alts = append(alts, fmt.Sprintf(`[1-9]\d{%d,}`, len(s)))
	return "(" + strings.Join(alts, "|") + ")"
}

// NeedsMsg is the problem of a setting that proxies older than the first
// Istio release with Envoy envoy can't have.
func NeedsMsg(envoy Version) string {
	if istio, ok := IstioOf(envoy); ok {
		return fmt.Sprintf("needs Istio %s or newer (Envoy %s)", istio, envoy)
	}
	return fmt.Sprintf("needs Envoy %s or newer, which no Istio release globalconfig knows ships", envoy)
}
