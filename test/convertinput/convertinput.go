// Package convertinput writes the large converter inputs the benchmarks
// and the limit tests read: the shapes users' files take, at the sizes
// the converters promise to handle.
package convertinput

import (
	"fmt"
	"strings"
)

// NginxKeys is an ingress-nginx ConfigMap of about size bytes: keys
// ingress-nginx does not read, each with a value, as a generated
// ConfigMap might hold.
func NginxKeys(size int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ingress-nginx-controller\n  namespace: ingress-nginx\ndata:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  custom-setting-%06d: \"value-%06d\"\n", i, i)
	}
	return []byte(b.String())
}

// NginxRanges is an ingress-nginx ConfigMap allowing n distinct /24
// ranges (whitelist-source-range).
func NginxRanges(n int) []byte {
	r := make([]string, n)
	for i := range n {
		r[i] = fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256)
	}
	return []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ingress-nginx-controller\n  namespace: ingress-nginx\ndata:\n  whitelist-source-range: \"" + strings.Join(r, ",") + "\"\n")
}

// HigressContentTypes is a higress-config ConfigMap of about size bytes:
// gzip on, with a long list of content types.
func HigressContentTypes(size int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: higress-config\n  namespace: higress-system\ndata:\n  higress: |\n    gzip:\n      enable: true\n      contentType:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "      - application/x-type-%06d\n", i)
	}
	return []byte(b.String())
}
