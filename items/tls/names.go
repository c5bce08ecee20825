package tls

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/globalconfig/globalconfig/items"
)

// CipherSuites are the TLS 1.0-1.2 cipher suites Envoy accepts in
// cipher_suites, by their OpenSSL names: the suites of BoringSSL, Envoy's
// TLS library, less those needing a pre-shared key, which Envoy never
// configures. It is the list Istio documents for a Gateway server's
// tls.cipherSuites. Envoy's default for servers is
// [ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305],
// [ECDHE-RSA-AES128-GCM-SHA256|ECDHE-RSA-CHACHA20-POLY1305],
// ECDHE-ECDSA-AES256-GCM-SHA384, ECDHE-RSA-AES256-GCM-SHA384. The suites
// ending in -SHA are CBC suites, the only ones TLS 1.0 and 1.1 can use.
var CipherSuites = []string{
	"ECDHE-ECDSA-AES128-GCM-SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256",
	"ECDHE-ECDSA-AES256-GCM-SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-CHACHA20-POLY1305",
	"ECDHE-RSA-CHACHA20-POLY1305",
	"ECDHE-ECDSA-AES128-SHA",
	"ECDHE-RSA-AES128-SHA",
	"ECDHE-ECDSA-AES256-SHA",
	"ECDHE-RSA-AES256-SHA",
	"AES128-GCM-SHA256",
	"AES256-GCM-SHA384",
	"AES128-SHA",
	"AES256-SHA",
	"DES-CBC3-SHA",
}

// ianaNames maps the IANA (RFC) names of the suites to their OpenSSL
// names, which are the ones Envoy's cipher_suites take.
var ianaNames = map[string]string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256":       "ECDHE-ECDSA-AES128-GCM-SHA256",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256":         "ECDHE-RSA-AES128-GCM-SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384":       "ECDHE-ECDSA-AES256-GCM-SHA384",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384":         "ECDHE-RSA-AES256-GCM-SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256":   "ECDHE-RSA-CHACHA20-POLY1305",
	"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA":          "ECDHE-ECDSA-AES128-SHA",
	"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA":            "ECDHE-RSA-AES128-SHA",
	"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA":          "ECDHE-ECDSA-AES256-SHA",
	"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA":            "ECDHE-RSA-AES256-SHA",
	"TLS_RSA_WITH_AES_128_GCM_SHA256":               "AES128-GCM-SHA256",
	"TLS_RSA_WITH_AES_256_GCM_SHA384":               "AES256-GCM-SHA384",
	"TLS_RSA_WITH_AES_128_CBC_SHA":                  "AES128-SHA",
	"TLS_RSA_WITH_AES_256_CBC_SHA":                  "AES256-SHA",
	"TLS_RSA_WITH_3DES_EDE_CBC_SHA":                 "DES-CBC3-SHA",
}

// tls13Suites are TLS 1.3 suite names, IANA's and BoringSSL's older
// AEAD-* spellings. BoringSSL always offers its TLS 1.3 suites and lets
// none be configured; Envoy rejects these names in cipher_suites.
var tls13Suites = map[string]bool{
	"TLS_AES_128_GCM_SHA256":        true,
	"TLS_AES_256_GCM_SHA384":        true,
	"TLS_CHACHA20_POLY1305_SHA256":  true,
	"TLS_AES_128_CCM_SHA256":        true,
	"TLS_AES_128_CCM_8_SHA256":      true,
	"AEAD-AES128-GCM-SHA256":        true,
	"AEAD-AES256-GCM-SHA384":        true,
	"AEAD-CHACHA20-POLY1305-SHA256": true,
}

// opensslName is the shape of an OpenSSL cipher suite name.
var opensslName = regexp.MustCompile(`^[A-Z0-9]+(-[A-Z0-9]+)+$`)

// checkCipherSuites records a problem for every entry of cipherSuites
// Envoy would reject, and for every suite listed twice.
func checkCipherSuites(p *items.Problems, suites []string) {
	seen := map[string]int{}
	for i, entry := range suites {
		path := fmt.Sprintf("cipherSuites[%d]", i)
		members := []string{entry}
		if strings.HasPrefix(entry, "[") {
			inner, ok := strings.CutSuffix(entry[1:], "]")
			if !ok {
				p.Addf(path, "a group of equal preference is [A|B], with a closing bracket, got %q", entry)
				continue
			}
			members = strings.Split(inner, "|")
		}
		for _, m := range members {
			if msg := checkSuite(m); msg != "" {
				if len(members) > 1 || m != entry {
					msg = "in group " + entry + ": " + msg
				}
				p.Addf(path, "%s", msg)
				continue
			}
			if j, dup := seen[m]; dup {
				p.Addf(path, "%s is also in cipherSuites[%d]", m, j)
				continue
			}
			seen[m] = i
		}
	}
}

// checkSuite returns what is wrong with one suite name, or "".
func checkSuite(name string) string {
	for _, known := range CipherSuites {
		if name == known {
			return ""
		}
		if strings.EqualFold(name, known) {
			return fmt.Sprintf("%q: suite names are case-sensitive; write %s", name, known)
		}
	}
	switch {
	case name == "":
		return "an empty suite name"
	case strings.Contains(name, ":"):
		return fmt.Sprintf("%q holds several suites joined by ':' (ingress-nginx's ssl-ciphers format); give each as its own list entry", name)
	case strings.ContainsAny(name, "[]|"):
		return fmt.Sprintf("%q: a group of equal preference is one entry [A|B] of suite names, without nested brackets", name)
	case tls13Suites[name]:
		return fmt.Sprintf("%s is a TLS 1.3 suite: BoringSSL, Envoy's TLS library, always offers its TLS 1.3 suites (AES-GCM and ChaCha20-Poly1305) and lets none be configured, and Envoy rejects the name; remove it (cipherSuites only govern TLS 1.0-1.2)", name)
	case ianaNames[name] != "":
		return fmt.Sprintf("%s is the IANA name; Envoy takes the OpenSSL name %s", name, ianaNames[name])
	case strings.HasPrefix(name, "!") || strings.HasPrefix(name, "+") || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "@") || !strings.ContainsAny(name, "-_"):
		return fmt.Sprintf("%q is not a suite name: OpenSSL cipher-string keywords and operators (HIGH, ALL, !aNULL, +, -) are not accepted here; list the suites by name", name)
	case strings.HasPrefix(name, "DHE-") || strings.HasPrefix(name, "EDH-"):
		return fmt.Sprintf("%s is an OpenSSL suite Envoy can't offer: BoringSSL, Envoy's TLS library, has no finite-field Diffie-Hellman (DHE) key exchange%s", name, instead(strings.Replace(strings.Replace(name, "EDH-", "ECDHE-", 1), "DHE-", "ECDHE-", 1)))
	case opensslName.MatchString(name) && (strings.HasSuffix(name, "-SHA256") || strings.HasSuffix(name, "-SHA384")) && !strings.Contains(name, "-GCM-"):
		return fmt.Sprintf("%s is an OpenSSL suite Envoy can't offer: BoringSSL, Envoy's TLS library, has no CBC suites with SHA-256 or SHA-384 MACs%s", name, instead(strings.TrimSuffix(strings.TrimSuffix(name, "-SHA256"), "-SHA384")+"-GCM"+name[strings.LastIndex(name, "-"):]))
	case opensslName.MatchString(name):
		return fmt.Sprintf("%s is not a suite BoringSSL, Envoy's TLS library, implements (it has no DHE, CAMELLIA, ARIA, CCM, RC4 or PSK suites); Envoy accepts %s", name, strings.Join(CipherSuites, ", "))
	}
	return fmt.Sprintf("%q is not a cipher suite Envoy accepts; Envoy accepts %s", name, strings.Join(CipherSuites, ", "))
}

// instead suggests the suite with the same cipher, when Envoy has it.
func instead(suite string) string {
	for _, known := range CipherSuites {
		if suite == known {
			return "; use " + known
		}
	}
	return ""
}

// Curves are the key exchange groups Envoy accepts in ecdh_curves, by
// BoringSSL's names. X25519MLKEM768 is the hybrid post-quantum group
// (X25519 with ML-KEM-768), TLS 1.3 only; proxies from Istio 1.26 (Envoy
// 1.34) on have it. Envoy's default is X25519, P-256.
var Curves = []string{"X25519", "P-256", "P-384", "P-521", "X25519MLKEM768"}

// postQuantum is the one group that works with TLS 1.3 only, and only with
// clients that offer it.
const postQuantum = "X25519MLKEM768"

// curveAliases maps OpenSSL's names of the groups to BoringSSL's.
var curveAliases = map[string]string{
	"prime256v1": "P-256",
	"secp256r1":  "P-256",
	"secp384r1":  "P-384",
	"secp521r1":  "P-521",
}

// checkCurves records a problem for every curve Envoy would reject, and
// for every curve listed twice.
func checkCurves(p *items.Problems, curves []string) {
	seen := map[string]int{}
	for i, c := range curves {
		path := fmt.Sprintf("ecdhCurves[%d]", i)
		if msg := checkCurve(c); msg != "" {
			p.Addf(path, "%s", msg)
			continue
		}
		if j, dup := seen[c]; dup {
			p.Addf(path, "%s is also ecdhCurves[%d]", c, j)
			continue
		}
		seen[c] = i
	}
}

// checkCurve returns what is wrong with one curve name, or "".
func checkCurve(name string) string {
	for _, known := range Curves {
		if name == known {
			return ""
		}
		if strings.EqualFold(name, known) {
			return fmt.Sprintf("%q: curve names are case-sensitive; write %s", name, known)
		}
	}
	switch {
	case curveAliases[name] != "":
		return fmt.Sprintf("%s is OpenSSL's name; write %s", name, curveAliases[name])
	case name == "auto":
		return "auto is ingress-nginx's way of asking for the library's defaults; leave ecdhCurves out for Envoy's (X25519, P-256)"
	case strings.Contains(name, ":"):
		return fmt.Sprintf("%q holds several curves joined by ':' (ingress-nginx's ssl-ecdh-curve format); give each as its own list entry", name)
	case strings.EqualFold(name, "X25519Kyber768Draft00"):
		return "X25519Kyber768Draft00 is the pre-standard draft of X25519MLKEM768; use X25519MLKEM768"
	case name == "P-224" || name == "secp224r1":
		return fmt.Sprintf("%s is not accepted: it is below 128-bit security and no browser offers it", name)
	}
	return fmt.Sprintf("%q is not a curve Envoy accepts; use %s", name, strings.Join(Curves, ", "))
}
