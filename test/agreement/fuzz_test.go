package agreement

import (
	"context"
	"strings"
	"testing"
	"time"
)

// FuzzEnvoyAgreement mutates the generator's documents as text and holds
// validation to the real Envoys on each (make fuzz).
func FuzzEnvoyAgreement(f *testing.F) {
	bins := envoys(f)
	seeds, err := loadSeeds()
	if err != nil {
		f.Fatal(err)
	}
	for _, gen := range newGenerator(7, seeds).documents(2) {
		f.Add(gen.src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 1<<16 {
			return
		}
		o := &outcome{skipped: map[string]int{}, deliberate: map[string]int{}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gen := generated{src: src, how: []string{"fuzzed"}}
		if err := o.check(ctx, bins, gen); err != nil {
			t.Fatal(err)
		}
		for _, d := range o.disagreements {
			t.Errorf("envoy %s: %s\n%s", d.envoy, d.what, indent(strings.ToValidUTF8(string(src), "?")))
		}
	})
}
