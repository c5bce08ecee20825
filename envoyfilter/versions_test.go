package envoyfilter_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

func TestVersionRangeMatchesAsIstioDoes(t *testing.T) {
	v := func(s string) envoyfilter.Version {
		t.Helper()
		p, err := envoyfilter.ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Istio matches proxyVersion with regexp.MatchString against the
	// proxy's ISTIO_VERSION.
	cases := []struct {
		from, until string // "" is open
		match       []string
		miss        []string
	}{
		{"", "1.28", []string{"1.27.3", "1.27", "1.27-dev", "1.3.1", "1.0.0", "0.8.0", "1.9.9"}, []string{"1.28.0", "1.28-dev", "1.280.0", "1.31.2", "2.0.0", "11.2"}},
		{"1.28", "", []string{"1.28.0", "1.28-dev", "1.28.0-beta.1", "1.29.1", "1.30", "1.99.0", "1.100.0", "2.0.0", "10.1"}, []string{"1.27.9", "1.2.8", "1.3.0", "1.9.0", "0.28.0", ""}},
		{"1.28", "1.31", []string{"1.28.0", "1.29-dev", "1.30.4"}, []string{"1.27.0", "1.31.0", "1.3.0", "1.280.1", "2.28.0"}},
		{"1.9", "", []string{"1.9.0", "1.10.1", "1.31.0", "3.0"}, []string{"1.8.9", "1.1.0", "0.9.0"}},
		{"1.30", "", []string{"1.30.0", "1.39.1", "1.40.0", "1.300.0"}, []string{"1.3.0", "1.29.9", "1.4.0"}},
	}
	for _, c := range cases {
		var from, until envoyfilter.Version
		if c.from != "" {
			from = v(c.from)
		}
		if c.until != "" {
			until = v(c.until)
		}
		re := regexp.MustCompile(envoyfilter.VersionRange(from, until))
		for _, s := range c.match {
			if !re.MatchString(s) {
				t.Errorf("[%s, %s) %q does not match %q", c.from, c.until, re, s)
			}
		}
		for _, s := range c.miss {
			if re.MatchString(s) {
				t.Errorf("[%s, %s) %q matches %q", c.from, c.until, re, s)
			}
		}
	}
	if got := envoyfilter.VersionRange(envoyfilter.Version{}, envoyfilter.Version{}); got != "" {
		t.Errorf("the open range needs no match, got %q", got)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]envoyfilter.Version{"1.28": {1, 28}, "1.28.2": {1, 28}, "1.29-dev": {1, 29}, "1.30.0-beta.1": {1, 30}} {
		got, err := envoyfilter.ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "v1.28", "1.x", "latest"} {
		if _, err := envoyfilter.ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) accepted", in)
		}
	}
}

func TestFleet(t *testing.T) {
	def := envoyfilter.DefaultTarget().Fleet()
	if len(def) == 0 || def[0] != envoyfilter.OldestSupported || def[len(def)-1] != envoyfilter.Newest().Istio {
		t.Errorf("default fleet %v: want %s up to %s", def, envoyfilter.OldestSupported, envoyfilter.Newest().Istio)
	}
	tg := envoyfilter.Target{IstioVersions: []envoyfilter.Version{{1, 31}, {1, 27}, {1, 31}}}
	if got := tg.Fleet(); len(got) != 2 || got[0] != (envoyfilter.Version{1, 27}) || got[1] != (envoyfilter.Version{1, 31}) {
		t.Errorf("fleet = %v, want [1.27 1.31] (sorted, once each)", got)
	}
	if err := (envoyfilter.Target{IstioVersions: []envoyfilter.Version{{1, 24}}}).Validate(); err == nil {
		t.Error("Istio 1.24, older than every known release, was accepted")
	}
	if e, err := envoyfilter.EnvoyOf(envoyfilter.Version{1, 40}); err != nil || e != envoyfilter.Newest().Envoy {
		t.Errorf("a release newer than the table gets the newest known Envoy, got %v, %v", e, err)
	}
}

func TestVersionedObjectScopesOnlyWhatDiffers(t *testing.T) {
	// Releases before 1.29 get chunk 4096 for the second patch, newer ones
	// 8192; the first patch is the same for all.
	build := func(r envoyfilter.Release) ([]envoyfilter.Patch, error) {
		chunk := uint32(8192)
		if !r.Istio.AtLeast(envoyfilter.Version{Major: 1, Minor: 29}) {
			chunk = 4096
		}
		return []envoyfilter.Patch{gzipFilter(t, 16384), gzipFilter(t, chunk)}, nil
	}
	tg := envoyfilter.DefaultTarget()
	tg.IstioVersions = []envoyfilter.Version{{1, 27}, {1, 28}, {1, 29}, {1, 31}}
	obj, err := envoyfilter.NewVersionedObject("gzip", envoyfilter.Placement{Insert: envoyfilter.StageCompression.Insert}, tg, build)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cp := range obj.Spec.GetConfigPatches() {
		got = append(got, cp.GetMatch().GetProxy().GetProxyVersion())
	}
	want := []string{"", envoyfilter.VersionRange(envoyfilter.Version{}, envoyfilter.Version{1, 29}), envoyfilter.VersionRange(envoyfilter.Version{1, 29}, envoyfilter.Version{})}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("proxyVersion of each patch:\n%q\nwant\n%q", got, want)
	}
	if a := obj.Metadata.Annotations[envoyfilter.AnnotationIstioVersions]; a != "1.27,1.28,1.29,1.31" {
		t.Errorf("istio-versions annotation = %q", a)
	}

	// One release: nothing to scope.
	tg.IstioVersions = []envoyfilter.Version{{1, 31}}
	obj, err = envoyfilter.NewVersionedObject("gzip", envoyfilter.Placement{Insert: envoyfilter.StageCompression.Insert}, tg, build)
	if err != nil {
		t.Fatal(err)
	}
	for i, cp := range obj.Spec.GetConfigPatches() {
		if cp.GetMatch().GetProxy() != nil {
			t.Errorf("patch %d is scoped for a fleet of one release", i)
		}
	}

	// A proxyVersion of the user's can't be combined with variants.
	tg.IstioVersions = []envoyfilter.Version{{1, 28}, {1, 29}}
	tg.ProxyVersion = `^1\.2`
	if _, err := envoyfilter.NewVersionedObject("gzip", envoyfilter.Placement{Insert: envoyfilter.StageCompression.Insert}, tg, build); err == nil || !strings.Contains(err.Error(), "proxyVersion") {
		t.Errorf("proxyVersion with two variants: err = %v", err)
	}
}

func TestIstioForEnvoy(t *testing.T) {
	for envoy, want := range map[envoyfilter.Version]envoyfilter.Version{
		{1, 39}: {1, 31}, {1, 36}: {1, 28}, {1, 33}: {1, 25},
		{1, 40}: {1, 32}, {1, 41}: {1, 33}, {1, 32}: {1, 24},
	} {
		if got := envoyfilter.IstioForEnvoy(envoy); got != want {
			t.Errorf("IstioForEnvoy(%s) = %s, want %s", envoy, got, want)
		}
	}
}
