package nginx_test

import (
	"testing"

	"github.com/globalconfig/globalconfig/pkg/convert/nginx"
	"github.com/globalconfig/globalconfig/test/convertinput"
)

// BenchmarkConvertLarge converts a ConfigMap of 1 MiB of unknown keys
// (each looked up for a "did you mean") and one allowing 65,536 ranges;
// test/integration's BenchmarkConvertLimits times the CLI on them, with
// its peak memory, into docs/benchmarks.md.
func BenchmarkConvertLarge(b *testing.B) {
	for name, src := range map[string][]byte{
		"1MiB-unknown-keys": convertinput.NginxKeys(1<<20 - 1024),
		"65536-ranges":      convertinput.NginxRanges(65536),
	} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				in, err := nginx.ReadInput(src)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := nginx.Convert(in, nginx.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
