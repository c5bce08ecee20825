package nginx

import (
	"fmt"
	"maps"
	"math"
	"mime"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/headers"
	"github.com/globalconfig/globalconfig/items/ipaccess"
	"github.com/globalconfig/globalconfig/items/tls"
	"github.com/globalconfig/globalconfig/pkg/convert/out"
)

// ingress-nginx's defaults (internal/ingress/controller/config/config.go)
// that the converter needs as text.
const (
	defaultCiphers     = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES128-GCM-SHA256"
	defaultGzipTypes   = "application/atom+xml application/javascript application/x-javascript application/json application/rss+xml application/vnd.ms-fontobject application/x-font-ttf application/x-web-app-manifest+json application/xhtml+xml application/xml font/opentype image/svg+xml image/x-icon text/css text/javascript text/plain text/x-component"
	defaultBrotliTypes = "application/xml+rss " + defaultGzipTypes
	defaultLogFormat   = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id`
	defaultLogPath     = "/var/log/nginx/access.log"
)

// envoyDefaultCiphers is the set of suites Envoy offers TLS 1.2 clients by
// default.
var envoyDefaultCiphers = []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"}

func (c *converter) bodySize() {
	v := c.get("proxy-body-size", "1m")
	n := c.size(v)
	buffering := c.get("proxy-request-buffering", "on")
	switch {
	case n == 0 && v.set:
		c.report.AddValue(v.key, v.raw, Converted, "→ no requestBody section: 0 turns nginx's limit off, and Envoy sets none")
	case n > math.MaxUint32:
		c.report.AddValue(v.key, v.raw, NotSupported, "more than 4 GiB, the largest body Envoy's buffer filter can hold; no limit is written")
	case n > 0:
		c.put(v, "requestBody.maxSize", byteSize(n),
			"larger requests are answered 413, as by nginx; Envoy holds the body in memory up to this size before forwarding it (nginx spilled past client-body-buffer-size to a temporary file)",
			"Envoy accepts request bodies of any size")
	}
	switch {
	case buffering.raw == "on":
		c.verdict(buffering, DefaultAlready, "requestBody buffers each request before forwarding it, as nginx did")
	case buffering.raw == "off" && n > 0:
		c.report.AddValue(buffering.key, buffering.raw, NotSupported, "Envoy enforces requestBody.maxSize by buffering the whole request; it can't stream a request and limit its size too, so requests are buffered (set proxy-body-size to 0 to stream without a limit)")
	case buffering.raw == "off":
		c.report.AddValue(buffering.key, buffering.raw, DefaultAlready, "without requestBody, Envoy streams requests to services")
	default:
		c.probs.Addf(buffering.key, "must be on or off, got %q", buffering.raw)
	}
}

func (c *converter) headerSize() {
	v := c.get("large-client-header-buffers", "4 8k")
	f := strings.Fields(v.raw)
	if len(f) != 2 {
		c.probs.Addf(v.key, "must be a number and a size, such as \"4 8k\", got %q", v.raw)
		return
	}
	num := c.integer(value{key: v.key, raw: f[0]}, 1)
	each := c.size(value{key: v.key, raw: f[1]})
	kb := (uint64(num)*each + 1023) / 1024
	kb = min(max(kb, 1), 8192)
	c.put(v, "downstream.maxRequestHeadersKb", out.Int(kb),
		fmt.Sprintf("nginx allowed %d buffers of %s, one header line each; Envoy limits the whole header block (431 beyond it) and has no limit per line", num, f[1]),
		"Envoy's 60 KiB applies")
}

func (c *converter) clientIP() {
	forwarded := c.get("use-forwarded-headers", "false")
	realIP := c.get("enable-real-ip", "false")
	proxy := c.get("use-proxy-protocol", "false")
	header := c.get("forwarded-for-header", "X-Forwarded-For")
	cidrs := c.get("proxy-real-ip-cidr", "0.0.0.0/0")
	full := c.get("compute-full-forwarded-for", "false")
	useForwarded, useReal, useProxy := c.boolean(forwarded), c.boolean(realIP), c.boolean(proxy)

	if useProxy {
		c.put(proxy, "clientIP.proxyProtocol", out.Bool(true), "the address in the PROXY header is the client address, and connections without the header are closed, as by nginx", "")
	} else {
		c.verdict(proxy, DefaultAlready, "Envoy reads no PROXY header unless clientIP.proxyProtocol is set")
	}

	var ranges []string
	for _, r := range list(cidrs) {
		if _, err := parseRange(r); err != nil {
			c.probs.Addf(cidrs.key, "%q is not an address or a CIDR range", r)
		}
		ranges = append(ranges, r)
	}
	trustAll := slices.Contains(ranges, "0.0.0.0/0") || slices.Contains(ranges, "::/0")
	switch {
	case useProxy:
		// nginx's real_ip_header is proxy_protocol whenever
		// use-proxy-protocol is on: the PROXY header's address is the
		// client, and no X-Forwarded-For entry is read. Trusting
		// X-Forwarded-For hops behind an L4 balancer, which appends none,
		// would let every client choose its own address.
		const why = "with use-proxy-protocol nginx took the client address from the PROXY header (real_ip_header proxy_protocol) and read no X-Forwarded-For entry; the gateway does the same: clientIP.proxyProtocol, no trusted X-Forwarded-For hop"
		c.verdict(forwarded, NotNeeded, why)
		c.verdict(realIP, NotNeeded, why)
		c.verdict(header, NotNeeded, why)
		if trustAll || !cidrs.set {
			c.verdict(cidrs, NotNeeded, why)
		} else {
			c.report.AddValue(cidrs.key, cidrs.raw, NotSupported, "nginx believed the PROXY header only from these ranges; Envoy believes it from any peer that reaches the gateway's port: keep the port reachable from the load balancer only (a NetworkPolicy, or the balancer's own firewall)")
		}
		if hops := c.opts.TrustedHops; hops != nil {
			c.report.AddValue("--trusted-hops", strconv.FormatUint(uint64(*hops), 10), NotNeeded,
				"ignored: use-proxy-protocol makes the PROXY header the client address, as in nginx; behind an L4 balancer nobody appends X-Forwarded-For, so trusting its entries would let any client choose its address")
		}
		c.clientSource("the PROXY protocol header's source address (use-proxy-protocol), as nginx; X-Forwarded-For is not trusted")
	case !useForwarded && !useReal:
		const peer = "Istio's gateways trust no X-Forwarded-For entry by default (xff_num_trusted_hops 0): the client address is the connection's peer, or the PROXY header's address"
		c.verdict(forwarded, DefaultAlready, peer)
		c.verdict(realIP, DefaultAlready, peer)
		c.verdict(header, NotNeeded, "read only when use-forwarded-headers or enable-real-ip is true")
		c.verdict(cidrs, NotNeeded, "read only when use-forwarded-headers or enable-real-ip is true")
		c.clientSource("the connection's peer address, as nginx without use-forwarded-headers, enable-real-ip or use-proxy-protocol")
	default:
		on := forwarded
		if !useForwarded {
			on = realIP
		}
		if name := strings.ToLower(header.raw); name == "cf-connecting-ip" && c.opts.TrustedHops != nil {
			c.report.AddValue(header.key, header.raw, Converted, "→ X-Forwarded-For with the hop count of --trusted-hops: Cloudflare appends the address it puts in CF-Connecting-IP to X-Forwarded-For too, so the two agree when every request comes through Cloudflare")
		} else if name != "x-forwarded-for" {
			detail := "Envoy takes the client address from another header only through original_ip_detection_extensions, which can't be used beside the use_remote_address Istio sets on every gateway (clientIP.header works on sidecars only)"
			if name == "cf-connecting-ip" {
				detail += "; Cloudflare also appends the client address to X-Forwarded-For, so --trusted-hops 1 finds the same address when every request comes through Cloudflare"
			}
			c.report.AddValue(header.key, header.raw, NotSupported, detail)
		} else {
			c.verdict(header, DefaultAlready, "Envoy reads X-Forwarded-For")
		}
		if hops := c.opts.TrustedHops; hops != nil {
			c.write("headers.xff.trustedHops", out.Int(*hops), fmt.Sprintf("--trusted-hops; ingress-nginx trusted the proxies in proxy-real-ip-cidr (%s)", cidrs.raw))
			detail := fmt.Sprintf("→ headers.xff.trustedHops: %d (--trusted-hops): the client address is X-Forwarded-For's entry %d from the right; nginx took the rightmost entry not added by proxy-real-ip-cidr's ranges. The two agree when exactly %d proxies stand in front of the gateway", *hops, *hops, *hops)
			if trustAll {
				detail += "; nginx's proxy-real-ip-cidr 0.0.0.0/0 trusted every entry and took the leftmost, which any client can forge, and a hop count can't"
			}
			c.report.AddValue(on.key, on.raw, Converted, detail)
			c.verdict(cidrs, Converted, "a hop count (--trusted-hops) replaces the ranges: Envoy at a gateway trusts hops by number, not by address")
			c.clientSource(fmt.Sprintf("X-Forwarded-For's entry %d from the right (--trusted-hops %d)", *hops, *hops))
		} else {
			detail := "nginx trusts the X-Forwarded-For entries added by the ranges in proxy-real-ip-cidr; Envoy at a gateway trusts a number of hops from the right, not ranges (xff_trusted_cidrs needs original_ip_detection_extensions, which Istio's gateways can't use)"
			if trustAll {
				detail = "with proxy-real-ip-cidr 0.0.0.0/0 (the default) nginx trusts every X-Forwarded-For entry and takes the leftmost, which any client can forge; Envoy trusts a number of hops from the right"
			}
			detail += ". Convert again with --trusted-hops N, N the proxies in front of the gateway (1 behind one load balancer or CDN), or set gatewayTopology.numTrustedProxies in the gateway's proxy.istio.io/config"
			c.report.AddValue(on.key, on.raw, NotSupported, detail)
			c.verdict(cidrs, NotSupported, "see "+on.key)
			c.clientSource("the connection's peer address: without --trusted-hops no X-Forwarded-For entry is trusted, where nginx trusted some")
		}
		switch {
		case useForwarded && useReal && c.opts.TrustedHops != nil:
			// Not Envoy's default: it takes effect with
			// use-forwarded-headers, whose line says how.
			c.report.AddValue(realIP.key, realIP.raw, Converted, "together with use-forwarded-headers, which it repeats: see that line")
		case useForwarded && useReal:
			c.report.AddValue(realIP.key, realIP.raw, NotSupported, "together with use-forwarded-headers, which it repeats, and not supported for the same reason: see that line")
		case useForwarded:
			c.verdict(realIP, NotNeeded, "false changes nothing for the client address: use-forwarded-headers true turns the same detection on; see that line")
		default:
			c.verdict(forwarded, NotNeeded, "false changes nothing for the client address: enable-real-ip true turns its detection on by itself; see that line")
		}
	}

	// Towards services: nginx sends X-Forwarded-For: $remote_addr, unless
	// it computes the full chain (use-forwarded-headers with
	// compute-full-forwarded-for), as Envoy always does.
	if useForwarded && c.boolean(full) {
		c.verdict(full, DefaultAlready, "Envoy appends the connection's peer to X-Forwarded-For, as nginx did")
	} else {
		detail := "nginx sent services X-Forwarded-For with the client address alone, dropping what the client sent; Envoy would append to it, so the document sets it"
		if full.set && c.boolean(full) {
			detail = "ingress-nginx computes the full chain only with use-forwarded-headers, so it sent X-Forwarded-For with the client address alone; the document sets it"
		}
		c.put(full, "headers.request.set.x-forwarded-for", out.Str(headers.RealIPValue), detail, "services get X-Forwarded-For as the client sent it, with the peer's address appended")
	}
	c.put(value{key: "(built in) X-Real-IP", raw: "$remote_addr"}, "headers.addXRealIpHeader", out.Bool(true),
		"ingress-nginx always sends services X-Real-IP with the client address", "services get no x-real-ip")
}

// maxNotes bounds the notes one key's report line carries.
const maxNotes = 10

// upstreamProtocolNote ends the report of a key that writes upstream's
// connection options.
const upstreamProtocolNote = "; note: with it, every gateway cluster's upstream protocol follows the client's (HTTP/1.1 or HTTP/2), because Istio replaces a cluster's protocol options whole (docs/reference.md#upstream); per service, a DestinationRule's connectionPool.http keeps Istio's choice"

// putSetOnly is put for a key whose nginx default is not written even
// without --no-nginx-defaults: writing it would change more than the key
// meant (upstreamProtocolNote).
func (c *converter) putSetOnly(v value, path string, n *yaml.Node, detail, without string) {
	if v.set {
		c.put(v, path, n, detail+upstreamProtocolNote, without)
		return
	}
	c.report.AddValue(v.key, v.raw, DefaultSkipped, "not written: it would make every gateway cluster's upstream protocol follow the client's (Istio replaces a cluster's protocol options whole); "+without)
}

// ClientAddressKey is the report line that says where the gateway takes
// the client address from.
const ClientAddressKey = "(client address)"

// clientSource says in the report where the client address comes from,
// and why.
func (c *converter) clientSource(detail string) {
	c.report.AddValue(ClientAddressKey, "", Converted, "the gateway takes the client address from "+detail)
}

// parseRange reads an address or a CIDR range.
func parseRange(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

var tlsVersions = map[string]string{"TLSv1": "TLSv1_0", "TLSv1.1": "TLSv1_1", "TLSv1.2": "TLSv1_2", "TLSv1.3": "TLSv1_3"}

func (c *converter) tls() {
	suites, cbc := c.ciphers()
	lo := c.protocols(cbc)
	switch {
	case len(suites) > 0 && lo == "TLSv1_3":
		// ciphers gave the key its line before ssl-protocols was read.
		c.amend("ssl-ciphers", Converted, NotNeeded, "with TLS 1.3 only (ssl-protocols), the suites have no effect (TLS 1.3's can't be configured); not written")
	case len(suites) > 0:
		c.write("tls.cipherSuites", out.List(suites), "ssl-ciphers")
	}
	c.curves()
	c.hsts()
}

// protocols converts ssl-protocols to a range of versions; it returns the
// lowest version written (Envoy's TLSv1_2 when none is).
func (c *converter) protocols(cbc bool) string {
	v := c.get("ssl-protocols", "TLSv1.2 TLSv1.3")
	var versions, dropped []string
	for _, p := range strings.Fields(v.raw) {
		switch {
		case tlsVersions[p] != "":
			versions = append(versions, tlsVersions[p])
		case p == "SSLv2" || p == "SSLv3":
			dropped = append(dropped, p)
		default:
			c.probs.Addf(v.key, "%q is not a protocol nginx knows (SSLv2, SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)", p)
		}
	}
	if len(versions) == 0 {
		if len(dropped) > 0 {
			c.report.AddValue(v.key, v.raw, NotSupported, "Envoy speaks no SSL; TLS 1.2 and 1.3 stay on")
		}
		return "TLSv1_2"
	}
	slices.Sort(versions) // TLSv1_0 < TLSv1_1 < …
	lo, hi := versions[0], versions[len(versions)-1]
	var notes []string
	if len(dropped) > 0 {
		notes = append(notes, strings.Join(dropped, " and ")+" dropped: Envoy speaks no SSL")
	}
	all := []string{"TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3"}
	for _, x := range all[slices.Index(all, lo):slices.Index(all, hi)] {
		if !slices.Contains(versions, x) {
			notes = append(notes, fmt.Sprintf("%s is allowed too: Envoy takes a range", x))
		}
	}
	switch {
	case lo < "TLSv1_2" && c.ciphersDropped:
		works := "TLS 1.2"
		if hi == "TLSv1_3" {
			works = "TLS 1.2 and 1.3"
		}
		notes = append(notes, "only "+works+" will work: TLS 1.0 and 1.1 need CBC suites, which ssl-ciphers' expression gave nginx and the document does not carry; list CBC suites by name in ssl-ciphers to keep them")
		var old []string
		for _, x := range versions {
			if x < "TLSv1_2" {
				old = append(old, map[string]string{"TLSv1_0": "TLSv1", "TLSv1_1": "TLSv1.1"}[x])
			}
		}
		c.report.AddValue(v.key+" (old versions)", strings.Join(old, " "), NotSupported, "clients of these versions could connect to nginx and can't to the gateway: see ssl-protocols")
		lo = "TLSv1_2"
	case lo < "TLSv1_2" && !cbc:
		notes = append(notes, "TLS 1.0 and 1.1 kept at bay: none of the cipher suites is one they can use (CBC), so they could not connect to nginx either")
		lo = "TLSv1_2"
	}
	if lo == "TLSv1_2" && hi == "TLSv1_3" {
		c.verdict(v, DefaultAlready, "Envoy accepts TLS 1.2 and 1.3"+suffix(strings.Join(notes, "; ")))
		return lo
	}
	c.write("tls.minVersion", out.Str(lo), "ssl-protocols: "+v.raw)
	c.write("tls.maxVersion", out.Str(hi), "")
	c.report.AddValue(v.key, v.raw, Converted, fmt.Sprintf("→ tls.minVersion: %s, tls.maxVersion: %s on the HTTPS ports (tls.ports)%s", lo, hi, suffix(strings.Join(notes, "; "))))
	return lo
}

// ciphers converts ssl-ciphers; it returns the suites to write (none when
// Envoy's default set is what nginx had) and whether any is a CBC suite,
// the only ones TLS 1.0 and 1.1 can use.
func (c *converter) ciphers() (suites []string, cbc bool) {
	v := c.get("ssl-ciphers", defaultCiphers)
	var kept, dhe, tls13, unknown, exprs []string
	for _, s := range strings.Split(v.raw, ":") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case slices.Contains(tls.CipherSuites, s):
			if !slices.Contains(kept, s) {
				kept = append(kept, s)
			}
		case strings.HasPrefix(s, "DHE-") || strings.HasPrefix(s, "EDH-"):
			dhe = append(dhe, s)
		case strings.HasPrefix(s, "TLS_"):
			tls13 = append(tls13, s)
		case strings.ContainsAny(s, "!+@") || strings.HasPrefix(s, "-") || !strings.Contains(s, "-"):
			// Operators, and keywords (HIGH, aNULL, kEECDH): every suite
			// name has a dash.
			exprs = append(exprs, s)
		default:
			unknown = append(unknown, s)
		}
	}
	for _, s := range kept {
		cbc = cbc || strings.HasSuffix(s, "-SHA")
	}
	if len(exprs) > 0 && len(kept) == 0 {
		c.report.AddValue(v.key, v.raw, NotSupported, fmt.Sprintf("an OpenSSL cipher expression (%s): Envoy takes suites by name; Envoy's default suites apply. List the suites by name in tls.cipherSuites", strings.Join(exprs, ", ")))
		c.ciphersDropped = true
		return nil, false
	}
	if len(exprs) > 0 {
		// Suites by name beside an expression: the named ones carry over;
		// what the expression added does not, so the gateway offers
		// fewer suites than nginx did.
		c.ciphersDropped = true
		c.report.AddValue(v.key+" (expression)", strings.Join(exprs, ":"), NotSupported, "an OpenSSL cipher expression: Envoy takes suites by name, so only the suites named in the list are carried, and clients that needed a suite only the expression added can't connect; list every suite you need by name")
	}
	var notes []string
	if len(dhe) > 0 {
		notes = append(notes, fmt.Sprintf("%s dropped: BoringSSL, Envoy's TLS library, has no DHE suites, and every client offering DHE offers ECDHE too", strings.Join(dhe, ", ")))
	}
	if len(tls13) > 0 {
		notes = append(notes, fmt.Sprintf("%s dropped: BoringSSL always offers its TLS 1.3 suites and lets none be configured", strings.Join(tls13, ", ")))
	}
	notImplemented := fmt.Sprintf("%s: not suites BoringSSL implements (no CAMELLIA, ARIA, CCM, RC4 or SHA-2 CBC suites)", strings.Join(unknown, ", "))
	switch {
	case len(kept) == 0:
		if v.set {
			detail := "none of the suites is one Envoy has; Envoy's default suites apply"
			if len(unknown) > 0 {
				detail += "; " + notImplemented
			}
			c.report.AddValue(v.key, v.raw, NotSupported, detail+suffix(strings.Join(notes, "; ")))
		}
		return nil, false
	case len(unknown) > 0:
		// A part of the key: its line says what the rest became.
		c.report.AddValue(v.key+" (not carried)", strings.Join(unknown, ":"), NotSupported, notImplemented+"; the others are converted")
	}
	if sameSet(kept, envoyDefaultCiphers) {
		c.verdict(v, DefaultAlready, "the suites Envoy offers by default"+suffix(strings.Join(notes, "; ")))
		return nil, false
	}
	c.report.AddValue(v.key, v.raw, Converted, "→ tls.cipherSuites: "+out.Shown(out.List(kept))+suffix(strings.Join(notes, "; ")))
	return kept, cbc
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// curveNames maps OpenSSL's group names to those Envoy takes.
var curveNames = map[string]string{
	"X25519": "X25519", "x25519": "X25519", "prime256v1": "P-256", "secp256r1": "P-256", "P-256": "P-256",
	"secp384r1": "P-384", "P-384": "P-384", "secp521r1": "P-521", "P-521": "P-521", "X25519MLKEM768": "X25519MLKEM768",
}

func (c *converter) curves() {
	v := c.get("ssl-ecdh-curve", "auto")
	if v.raw == "auto" {
		c.verdict(v, DefaultAlready, "Envoy's default groups: X25519 and P-256")
		return
	}
	var kept, unknown []string
	for _, s := range strings.Split(v.raw, ":") {
		if n, ok := curveNames[strings.TrimSpace(s)]; ok && !slices.Contains(kept, n) {
			kept = append(kept, n)
		} else if !ok {
			unknown = append(unknown, s)
		}
	}
	notOffered := fmt.Sprintf("%s: not groups Envoy offers (%s)", strings.Join(unknown, ", "), strings.Join(tls.Curves, ", "))
	if len(kept) == 0 {
		c.report.AddValue(v.key, v.raw, NotSupported, notOffered)
		return
	}
	if len(unknown) > 0 {
		// A part of the key: its line says what the rest became.
		c.report.AddValue(v.key+" (not carried)", strings.Join(unknown, ":"), NotSupported, notOffered+"; the others are converted")
	}
	c.write("tls.ecdhCurves", out.List(kept), "ssl-ecdh-curve: "+v.raw)
	c.report.AddValue(v.key, v.raw, Converted, "→ tls.ecdhCurves: "+out.Shown(out.List(kept)))
}

func (c *converter) hsts() {
	on := c.get("hsts", "true")
	age := c.get("hsts-max-age", "31536000")
	sub := c.get("hsts-include-subdomains", "true")
	preload := c.get("hsts-preload", "false")
	if !c.boolean(on) {
		c.report.AddValue(on.key, on.raw, Converted, "→ no tls.hsts: nginx sent no Strict-Transport-Security")
		for _, v := range []value{age, sub, preload} {
			c.verdict(v, NotNeeded, "hsts is false")
		}
		return
	}
	if !on.set && c.opts.NoDefaults && !age.set && !sub.set && !preload.set {
		c.report.AddValue(on.key, on.raw, DefaultSkipped, "not written; no Strict-Transport-Security is sent")
		return
	}
	where := "on responses of the HTTPS route configurations of tls.ports (443 and 8443; add the gateway's other HTTPS ports), as nginx sent it on HTTPS responses"
	if on.set {
		c.report.AddValue(on.key, on.raw, Converted, "→ tls.hsts "+where)
	} else {
		c.report.AddValue(on.key, on.raw, DefaultWritten, "→ tls.hsts "+where)
	}
	n := c.integer(age, 0)
	s, p := c.boolean(sub), c.boolean(preload)
	c.put(age, "tls.hsts.maxAge", out.Int(n), "seconds", "globalconfig's default, 31536000")
	c.put(sub, "tls.hsts.includeSubDomains", out.Bool(s), "", "globalconfig's default, true")
	switch {
	case p && (!s || n < 31536000):
		c.report.AddValue(preload.key, preload.raw, NotSupported, "the browsers' preload list takes no site without includeSubDomains and a max-age of a year, and globalconfig refuses the combination; preload is left out")
	case p:
		c.put(preload, "tls.hsts.preload", out.Bool(true), "", "")
	default:
		c.verdict(preload, DefaultAlready, "globalconfig's default: no preload")
	}
}

func (c *converter) responseHeaders() {
	tokens := c.get("server-tokens", "false")
	backend := c.get("allow-backend-server-header", "false")
	show, pass := c.boolean(tokens), c.boolean(backend)
	switch {
	case !show:
		c.put(tokens, "headers.server.mode", out.Str("strip"), "nginx removed the Server header from every response, services' included", "Envoy sends server: istio-envoy")
		c.verdict(backend, NotNeeded, "with server-tokens false, ingress-nginx removes the Server header anyway")
	case pass:
		c.write("headers.server.mode", out.Str("passThrough"), "server-tokens and allow-backend-server-header")
		c.report.AddValue(backend.key, backend.raw, Converted, "→ headers.server.mode: passThrough: services' Server headers reach clients")
		c.report.AddValue(tokens.key, tokens.raw, DefaultAlready, "Envoy adds no server header of its own in passThrough mode")
	default:
		c.report.AddValue(tokens.key, tokens.raw, DefaultAlready, "Envoy sends server: istio-envoy, as nginx sent its name and version")
		c.verdict(backend, DefaultAlready, "Envoy replaces services' Server headers with its own")
	}

	if v := c.get("hide-headers", ""); v.set {
		var names, skipped []string
		for _, h := range list(v) {
			h = strings.ToLower(h)
			var p items.Problems
			items.CheckHeader(&p, "", h, "")
			switch {
			case h == "server":
				skipped = append(skipped, "server is governed by server-tokens")
			case p.Err() != nil:
				skipped = append(skipped, fmt.Sprintf("%s: %v", h, p.Err()))
			case !slices.Contains(names, h):
				names = append(names, h)
			}
		}
		if len(names) > 0 {
			c.write("headers.response.remove", out.List(names), "hide-headers")
			c.report.AddValue(v.key, v.raw, Converted, "→ headers.response.remove: removed from every response"+suffix(strings.Join(skipped, "; ")))
		} else if len(skipped) > 0 {
			c.report.AddValue(v.key, v.raw, NotSupported, strings.Join(skipped, "; "))
		} else {
			c.report.AddValue(v.key, shownRaw(v.raw), DefaultAlready, "names no header: nothing to remove")
		}
	}
	c.headerMapTo("add-headers", "headers.responseHeaders", "set on every response, replacing the service's, as nginx's more_set_headers did")
}

func (c *converter) requestHeaders() {
	c.headerMapTo("proxy-set-headers", "headers.request.set", "set on every request to services, replacing what the client sent, as nginx's proxy_set_header did")
}

// headerMapTo converts add-headers or proxy-set-headers: the ConfigMap the
// key names becomes a header map at path.
func (c *converter) headerMapTo(key, path, meaning string) {
	v := c.get(key, "")
	if !v.set || v.raw == "" {
		return
	}
	ref := qualify(v.raw, c.in.Namespace)
	m, ok := c.in.HeaderMaps[ref]
	if !ok {
		c.report.AddValue(key, v.raw, NotSupported, fmt.Sprintf("names the ConfigMap %s, which was not given: add it to the input (its manifest after ---) or to a --configmap-dir, and convert again", ref))
		return
	}
	var done []string
	writtenBy := map[string]string{} // header → the entry that wrote it
	for _, name := range slices.Sorted(maps.Keys(m)) {
		h := strings.ToLower(name)
		t := translate(m[name])
		var p items.Problems
		items.CheckHeader(&p, "", h, t.text)
		entry := key + ": " + name
		switch {
		case p.Err() != nil:
			c.report.AddValue(entry, m[name], NotSupported, p.Err().Error())
		case len(t.missing) > 0:
			c.report.AddValue(entry, m[name], NotSupported, fmt.Sprintf("%s: no Envoy equivalent; the header is left out", strings.Join(t.missing, ", ")))
		default:
			if earlier, ok := writtenBy[h]; ok {
				// Two entries for one header, their names in another
				// case: the later one replaces the earlier in the
				// document, and the earlier says so.
				replaced := fmt.Sprintf("%s, later in the ConfigMap, sets the same header (header names ignore case), and the gateway sets one value per header: this entry is not carried", entry)
				if !c.amend(key+": "+earlier, Converted, NotSupported, replaced) {
					c.report.Add(key+": "+earlier, NotSupported, replaced)
				}
			} else {
				done = append(done, h)
			}
			writtenBy[h] = name
			c.write(path+"."+h, out.Str(t.text), "")
			if len(t.notes) > 0 {
				c.report.AddValue(entry, m[name], Converted, "→ "+path+"."+h+": "+t.text+suffix(strings.Join(t.notes, "; ")))
			}
		}
	}
	switch ref := qualify(v.raw, c.in.Namespace); {
	case len(done) > 0:
		c.report.AddValue(key, v.raw, Converted, fmt.Sprintf("→ %s (%s): %s", path, strings.Join(done, ", "), meaning))
	case len(m) == 0:
		c.report.AddValue(key, v.raw, DefaultAlready, fmt.Sprintf("names the ConfigMap %s, which holds no header: nothing to set", ref))
	default:
		c.report.AddValue(key, v.raw, NotSupported, fmt.Sprintf("none of the headers of the ConfigMap %s carried over: see the %s: lines", ref, key))
	}
}

func (c *converter) timeouts() {
	connect := c.get("proxy-connect-timeout", "5")
	c.put(connect, "upstream.connectTimeout", seconds(c.integer(connect, 1)), "the time to open a connection to a service, as in nginx", "Istio's 10s applies")

	// nginx's three per-read timeouts become Envoy's stream idle timeout,
	// the largest of them, so no stream nginx kept open is cut.
	idle := []value{c.get("proxy-read-timeout", "60"), c.get("proxy-send-timeout", "60"), c.get("client-body-timeout", "60")}
	longest, written := 0, false
	for _, v := range idle {
		if n := c.integer(v, 1); c.carry(v) && n > longest {
			longest, written = n, true
		}
	}
	meanings := []string{
		"nginx's limit between two reads from the service, not on the whole response",
		"nginx's limit between two writes of the request to the service",
		"nginx's limit between two reads of the request body from the client",
	}
	longestKey := ""
	for _, v := range idle {
		if n := c.integer(v, 1); c.carry(v) && n == longest && longestKey == "" {
			longestKey = v.key
		}
	}
	for i, v := range idle {
		detail := fmt.Sprintf("%s; Envoy's stream idle timeout is the closest: the time a request may pass with no data either way, set to the largest of proxy-read-timeout, proxy-send-timeout and client-body-timeout (%ds). Envoy answers 408 before the response starts, or resets the stream (nginx answered 504 or 408)", meanings[i], longest)
		if n := c.integer(v, 1); n < longest {
			// Its own value is not the one the gateway uses: say so.
			detail = fmt.Sprintf("%s; its %ds is not used: Envoy has one stream idle timeout for all three, set to %ds from %s, so a stream idle %ds to %ds is no longer cut as nginx cut it", meanings[i], n, longest, longestKey, n, longest)
		}
		switch {
		case v.set:
			c.report.AddValue(v.key, v.raw, Converted, "→ downstream.streamIdleTimeout; "+detail)
		case c.opts.NoDefaults:
			c.report.AddValue(v.key, v.raw, DefaultSkipped, "not written; Envoy's stream idle timeout of 5 minutes applies")
		default:
			c.report.AddValue(v.key, v.raw, DefaultWritten, "→ downstream.streamIdleTimeout; "+detail)
		}
	}
	if written {
		c.write("downstream.streamIdleTimeout", seconds(longest), "proxy-read-timeout, proxy-send-timeout, client-body-timeout")
	}

	hdr := c.get("client-header-timeout", "60")
	c.put(hdr, "downstream.requestHeadersTimeout", seconds(c.integer(hdr, 1)), "the time to receive a request's headers (Envoy answers 408, as nginx did)", "Envoy sets no limit")

	ka := c.get("keep-alive", "75")
	kaRequests := c.get("keep-alive-requests", "1000")
	if n := c.integer(ka, 0); n == 0 {
		c.put(ka, "hardening.maxRequestsPerConnection", out.Int(1), "0 turns keep-alive off in nginx: Envoy closes each client connection after one request", "")
		c.verdict(kaRequests, NotNeeded, "keep-alive is 0")
	} else {
		c.put(ka, "downstream.idleTimeout", seconds(n), "a client connection with no request in flight is closed after this, as by nginx's keepalive_timeout", "Envoy's 1h applies")
		if kaRequests.set {
			c.put(kaRequests, "hardening.maxRequestsPerConnection", out.Int(c.integer(kaRequests, 1)), "client connections are closed after this many requests, as by nginx", "")
		}
	}

	// The upstream keys ride on a cluster option Istio replaces whole, so
	// writing them also makes every gateway cluster's protocol follow the
	// client's (docs/reference.md#upstream). Only a key the ConfigMap
	// sets is worth that; nginx's defaults are left to Envoy's.
	uIdle := c.get("upstream-keepalive-timeout", "60")
	c.putSetOnly(uIdle, "upstream.idleTimeout", seconds(c.integer(uIdle, 1)), "an idle connection to a service is closed after this, as in nginx", "Envoy's 1h applies")
	uConns := c.get("upstream-keepalive-connections", "320")
	uReq := c.get("upstream-keepalive-requests", "10000")
	if n := c.integer(uConns, 0); n == 0 {
		c.write("upstream.maxRequestsPerConnection", out.Int(1), "upstream-keepalive-connections: 0")
		c.report.AddValue(uConns.key, uConns.raw, Converted, "→ upstream.maxRequestsPerConnection: 1: 0 turns nginx's connection reuse off; Envoy opens a connection per request"+upstreamProtocolNote)
		c.verdict(uReq, NotNeeded, "upstream-keepalive-connections is 0: nginx reused no connection, so none served more than one request; the document sets one request per connection (see that line)")
	} else {
		c.putSetOnly(uReq, "upstream.maxRequestsPerConnection", out.Int(c.integer(uReq, 1)), "a connection to a service is closed after this many requests, as in nginx", "Envoy sets no limit")
		c.verdict(uConns, NotNeeded, "nginx caches this many idle connections per worker and closes the rest; Envoy keeps every idle connection until upstream.idleTimeout (upstream-keepalive-timeout)")
	}

	streams := c.get("http2-max-concurrent-streams", "128")
	c.put(streams, "downstream.http2.maxConcurrentStreams", out.Int(c.integer(streams, 1)), "", "Envoy allows 2147483647")
}

func (c *converter) compression() {
	type codec struct {
		on, level, minLength, types string
		levelDefault, lengthDefault string
		typesDefault                string
		section, levelKey           string
		levelNode                   func(int) *yaml.Node
		maxLevel                    int
		fixed                       [][2]string // keys nginx doesn't expose, with nginx's values
	}
	for _, k := range []codec{
		{on: "use-gzip", level: "gzip-level", minLength: "gzip-min-length", types: "gzip-types",
			levelDefault: "1", lengthDefault: "256", typesDefault: defaultGzipTypes, section: "gzip", levelKey: "compressionLevel",
			levelNode: func(n int) *yaml.Node { return out.Str(fmt.Sprintf("COMPRESSION_LEVEL_%d", n)) }, maxLevel: 9,
			fixed: [][2]string{{"windowBits", "15"}, {"memoryLevel", "8"}}},
		{on: "enable-brotli", level: "brotli-level", minLength: "brotli-min-length", types: "brotli-types",
			levelDefault: "4", lengthDefault: "20", typesDefault: defaultBrotliTypes, section: "brotli", levelKey: "quality",
			levelNode: func(n int) *yaml.Node { return out.Int(n) }, maxLevel: 11,
			fixed: [][2]string{{"windowBits", "19"}}},
	} {
		on := c.get(k.on, "false")
		level, length, types := c.get(k.level, k.levelDefault), c.get(k.minLength, k.lengthDefault), c.get(k.types, k.typesDefault)
		if !c.boolean(on) {
			c.verdict(on, DefaultAlready, "Envoy compresses nothing by default")
			for _, v := range []value{level, length, types} {
				c.verdict(v, NotNeeded, k.on+" is false")
			}
			continue
		}
		c.write(k.section+".enable", out.Bool(true), k.on+": "+on.raw)
		c.report.AddValue(on.key, on.raw, Converted, fmt.Sprintf("→ %s: responses are compressed for clients that accept it, with Vary: Accept-Encoding, as by nginx", k.section))
		lo := 1
		if k.section == "brotli" {
			lo = 0
		}
		n := c.integer(level, lo)
		if n > k.maxLevel {
			c.probs.Addf(level.key, "must be at most %d, got %d", k.maxLevel, n)
		}
		c.put(level, k.section+"."+k.levelKey, k.levelNode(n), "", "globalconfig's default level applies")
		c.put(length, k.section+".minContentLength", out.Int(c.integer(length, 0)), "responses whose Content-Length is smaller stay uncompressed, as in nginx", "globalconfig's default applies")
		// nginx compares media types ignoring case; Envoy lowercases the
		// response's type, so the list is written in lower case, and an
		// entry that is no media type (it never matched) is left out.
		var list, never []string
		for _, ct := range strings.Fields(types.raw) {
			if ct == "*" {
				list = append(list, ct)
				continue
			}
			mt, _, err := mime.ParseMediaType(ct)
			switch {
			case err != nil:
				never = append(never, strconv.Quote(out.Cut(ct, 80)))
			case !slices.Contains(list, mt):
				list = append(list, mt)
			}
		}
		if len(never) > 0 {
			c.report.AddValue(types.key+" (not carried)", strings.Join(never, ", "), NotNeeded, "not media types: nginx never matched a response to them")
		}
		switch {
		case slices.Contains(list, "*"):
			c.report.AddValue(types.key, types.raw, NotSupported, "Envoy compresses only the content types it lists; globalconfig's default list applies")
		default:
			detail := "the content types compressed"
			if !slices.Contains(list, "text/html") {
				list = append([]string{"text/html"}, list...)
				detail += "; text/html added, since nginx always compresses it"
			}
			c.put(types, k.section+".contentType", out.List(list), detail, "globalconfig's default list applies")
		}
		for _, f := range k.fixed {
			n, _ := strconv.Atoi(f[1])
			c.write(k.section+"."+f[0], out.Int(n), "nginx's, which ingress-nginx does not expose")
		}
	}
}

func (c *converter) accessLog() {
	off := c.get("disable-access-log", "false")
	offHTTP := c.get("disable-http-access-log", "false")
	path := c.get("access-log-path", defaultLogPath)
	httpPath := c.get("http-access-log-path", "")
	format := c.get("log-format-upstream", defaultLogFormat)
	escape := c.get("log-format-escape-json", "false")
	if c.boolean(off) || c.boolean(offHTTP) {
		for i, v := range []value{off, offHTTP} {
			if c.boolean(v) {
				c.report.AddValue(v.key, v.raw, Converted, "→ no accessLog section: globalconfig adds no access log (Istio's own, meshConfig.accessLogFile, is separate)")
			} else {
				other := []value{offHTTP, off}[i]
				c.verdict(v, NotNeeded, other.key+" is true: access logging is off anyway")
			}
		}
		for _, v := range []value{path, httpPath, format, escape} {
			c.verdict(v, NotNeeded, "access logging is off")
		}
		return
	}
	anySet := off.set || offHTTP.set || path.set || httpPath.set || format.set || escape.set
	if c.opts.NoDefaults && !anySet {
		c.report.AddValue(off.key, off.raw, DefaultSkipped, "not written; globalconfig adds no access log (Istio's own is meshConfig.accessLogFile)")
		return
	}
	c.write("accessLog.enable", out.Bool(true), "")
	logged := "→ accessLog: a line per request, as nginx logged (Istio's own access log, meshConfig.accessLogFile, is separate: with both on, each request is logged twice)"
	if off.set {
		c.report.AddValue(off.key, off.raw, Converted, logged)
	} else {
		c.report.AddValue(off.key, off.raw, DefaultWritten, logged)
	}
	c.verdict(offHTTP, Converted, "→ accessLog: HTTP requests are logged, as by nginx (see disable-access-log)")

	file, source := path, "access-log-path"
	if httpPath.set && httpPath.raw != "" {
		file, source = httpPath, "http-access-log-path"
		c.verdict(path, NotNeeded, "http-access-log-path takes precedence")
	}
	dest, detail := file.raw, "a file in the istio-proxy container, on an emptyDir Istio mounts"
	switch file.raw {
	case defaultLogPath:
		dest, detail = "/dev/stdout", "ingress-nginx's image links "+defaultLogPath+" to /dev/stdout"
	case "/dev/stdout", "/dev/stderr":
		detail = ""
	}
	var writable items.Problems
	items.CheckProxyFile(&writable, "", dest)
	switch {
	case writable.Len() > 0:
		c.write("accessLog.path", out.Str("/dev/stdout"), source+": "+file.raw+" can't be written by an Istio proxy")
		c.report.AddValue(file.key, file.raw, NotSupported, "→ accessLog.path: /dev/stdout: an Istio proxy can't write "+file.raw+
			" (its root filesystem is read-only, and Envoy refuses every listener whose log it can't open); to keep a file, mount a volume under "+
			strings.Join(items.ProxyWritable, " or ")+" and set accessLog.path to a file there")
	case source == "http-access-log-path" || file.set:
		c.write("accessLog.path", out.Str(dest), source+": "+file.raw)
		c.report.AddValue(file.key, file.raw, Converted, "→ accessLog.path: "+dest+suffix(detail))
	default:
		c.write("accessLog.path", out.Str(dest), "ingress-nginx default ("+source+": "+file.raw+")")
	}

	esc := c.boolean(escape)
	var missing, notes []string
	if fields, order, ok := jsonFormat(format.raw); ok {
		m := out.Mapping()
		for _, f := range order {
			t := translate(fields[f])
			m.Content = append(m.Content, out.Str(f), out.Str(t.text))
			missing = append(missing, t.missing...)
			notes = append(notes, t.notes...)
		}
		c.write("accessLog.json", m, "log-format-upstream")
		if esc {
			c.report.AddValue(escape.key, escape.raw, DefaultAlready, "Envoy escapes the values of JSON formats itself")
		} else {
			notes = append(notes, "Envoy escapes the values, which nginx did only with log-format-escape-json")
			c.verdict(escape, NotNeeded, "Envoy escapes the values of JSON formats itself and can't be told not to (nginx's own \\xHH escaping, which false kept, is not JSON); see log-format-upstream")
		}
		c.reportFormat(format, "→ accessLog.json: a JSON object per line, its fields in Envoy's command operators", dedupe(missing), dedupe(notes))
		return
	}
	t := translate(format.raw)
	c.write("accessLog.format", out.Str(t.text+"\n"), "")
	if esc {
		c.report.AddValue(escape.key, escape.raw, NotSupported, "Envoy escapes values only in JSON formats (accessLog.json); write log-format-upstream as a JSON object to convert it to one")
	} else {
		c.verdict(escape, NotNeeded, "Envoy applies no JSON escaping to text formats either (it writes their values as they are, where nginx escaped \" and control characters as \\xHH)")
	}
	c.reportFormat(format, "→ accessLog.format: nginx's variables become Envoy's command operators", dedupe(t.missing), dedupe(t.notes))
}

func (c *converter) reportFormat(format value, to string, missing, notes []string) {
	detail := to + suffix(strings.Join(notes, "; "))
	gap := fmt.Sprintf("%s: no Envoy equivalent, written as -", strings.Join(missing, ", "))
	switch {
	case !format.set:
		if len(missing) > 0 {
			detail += "; " + gap
		}
		c.report.Add(format.key, DefaultWritten, "ingress-nginx's default format "+detail)
	default:
		c.report.Add(format.key, Converted, detail)
		if len(missing) > 0 {
			// A part of the key: the format is converted, these
			// variables are not.
			c.report.Add(format.key+" (not carried)", NotSupported, gap)
		}
	}
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func (c *converter) tracing() {
	on := c.get("enable-opentelemetry", "false")
	host := c.get("otlp-collector-host", "")
	port := c.get("otlp-collector-port", "4317")
	name := c.get("otel-service-name", "nginx")
	sampler := c.get("otel-sampler", "AlwaysOn")
	ratio := c.get("otel-sampler-ratio", "0.01")
	parent := c.get("otel-sampler-parent-based", "true")
	trust := c.get("opentelemetry-trust-incoming-span", "true")
	rest := []value{host, port, name, sampler, ratio, parent, trust}
	if !c.boolean(on) {
		c.verdict(on, DefaultAlready, "globalconfig adds no tracing by default")
		for _, v := range rest {
			c.verdict(v, NotNeeded, "enable-opentelemetry is false")
		}
		return
	}
	// The other keys go with the collector: without one there is no
	// tracing section for them to go with.
	dependents := []value{port, name, sampler, ratio, parent, trust}
	if host.raw == "" {
		c.report.AddValue(on.key, on.raw, NotSupported, "no otlp-collector-host: nginx had nowhere to send spans, and tracing needs a collector")
		if host.set {
			c.report.AddValue(host.key, `""`, NotSupported, "empty: nginx had nowhere to send spans; give the collector's service name")
		}
		c.notCarried("enable-opentelemetry was not converted (no otlp-collector-host: no collector to send spans to), so no tracing section is written for this key to go with", dependents...)
		return
	}
	service, note, refused := serviceHost(host.raw, c.in.Namespace)
	if refused != "" {
		c.report.AddValue(host.key, out.Cut(host.raw, maxShownValue), NotSupported, note)
		c.report.AddValue(on.key, on.raw, NotSupported, "otlp-collector-host was refused ("+refused+"), and tracing needs a collector: see otlp-collector-host")
		c.notCarried("otlp-collector-host was refused ("+refused+"), so no tracing section is written for this key to go with; convert again once it names the collector's service", dependents...)
		return
	}
	p := c.integer(port, 1)
	if p > 65535 {
		c.probs.Addf(port.key, "must be a port number, got %d", p)
	}
	var sampling float64
	switch sampler.raw {
	case "AlwaysOn":
		sampling = 100
	case "AlwaysOff":
		sampling = 0
	case "TraceIdRatioBased":
		r, err := strconv.ParseFloat(ratio.raw, 64)
		if err != nil || r < 0 || r > 1 {
			c.probs.Addf(ratio.key, "must be a ratio from 0 to 1, got %q", ratio.raw)
		}
		sampling = r * 100
	default:
		c.probs.Addf(sampler.key, "must be AlwaysOn, AlwaysOff or TraceIdRatioBased, got %q", sampler.raw)
	}
	c.write("tracing.enable", out.Bool(true), "enable-opentelemetry: "+on.raw)
	c.report.AddValue(on.key, on.raw, Converted, "→ tracing.opentelemetry: spans exported with OTLP over gRPC, as by nginx")
	c.put(sampler, "tracing.sampling", out.Float(sampling), "percent of requests traced", "globalconfig's default, 100 percent")
	if sampler.raw == "TraceIdRatioBased" {
		c.verdict(ratio, Converted, fmt.Sprintf("→ tracing.sampling: %v (percent)", sampling))
	} else {
		c.verdict(ratio, NotNeeded, "read only for otel-sampler TraceIdRatioBased")
	}
	c.put(name, "tracing.serviceName", out.Str(name.raw), "the service name spans are reported under", "Envoy reports the gateway's own name")
	c.write("tracing.opentelemetry.service", out.Str(service), "otlp-collector-host: "+host.raw)
	c.report.AddValue(host.key, host.raw, Converted, "→ tracing.opentelemetry.service: "+service+suffix(note))
	if !port.set && c.opts.NoDefaults {
		// The collector needs a port, and Envoy has no default for it.
		c.write("tracing.opentelemetry.port", out.Int(p), "ingress-nginx default (otlp-collector-port: "+port.raw+")")
		c.report.AddValue(port.key, port.raw, DefaultWritten, "→ tracing.opentelemetry.port: "+port.raw+"; written despite --no-nginx-defaults: the collector needs a port, and Envoy has no default")
	} else {
		c.put(port, "tracing.opentelemetry.port", out.Int(p), "", "")
	}
	if c.boolean(parent) {
		c.verdict(parent, DefaultAlready, "Envoy keeps the sampling decision of an incoming traceparent")
	} else {
		c.report.AddValue(parent.key, parent.raw, NotSupported, "Envoy always keeps the sampling decision of an incoming traceparent")
	}
	if c.boolean(trust) {
		c.verdict(trust, DefaultAlready, "Envoy continues the trace of an incoming traceparent")
	} else {
		c.report.AddValue(trust.key, trust.raw, NotSupported, "Envoy always continues the trace of an incoming traceparent")
	}
}

// serviceHost turns nginx's collector host into the service host name
// Istio names the collector's cluster by: SERVICE.NAMESPACE.svc.cluster.local.
// A host it can't turn into one is refused: refused says why in a few
// words, note at length.
func serviceHost(host, namespace string) (service, note, refused string) {
	if isPlaceholder(host) {
		return "", "otlp-collector-host is a template placeholder, not a host name: convert the ConfigMap as it is deployed (helm template, or after your pipeline substitutes the value)", "a template placeholder"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", "otlp-collector-host is an address; the tracing item sends spans to a service Istio knows (a Service, or a ServiceEntry for one outside the cluster): give its host name", "an address, not a service name"
	}
	// Host names ignore case; Istio's service names are lower case.
	host = strings.ToLower(host)
	if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(host, ".")); len(msgs) > 0 {
		return "", "otlp-collector-host is not a host name, so nginx could not resolve it either: " + msgs[0], "not a host name"
	}
	switch parts := strings.Split(strings.TrimSuffix(host, "."), "."); {
	case strings.HasSuffix(host, ".svc.cluster.local"):
		return host, "", ""
	case len(parts) == 1:
		return fmt.Sprintf("%s.%s.svc.cluster.local", host, namespace), "a short name, which nginx resolved in its own namespace " + namespace, ""
	case len(parts) == 2 || len(parts) == 3 && parts[2] == "svc":
		return fmt.Sprintf("%s.%s.svc.cluster.local", parts[0], parts[1]), "the service's full name in a cluster whose domain is cluster.local", ""
	}
	return host, "a host outside the cluster: Istio needs a ServiceEntry for it", ""
}

// isPlaceholder reports whether a value is a template's placeholder left
// in the ConfigMap ({{ .Values.x }}, $HOST, ${HOST}) rather than a value.
func isPlaceholder(s string) bool {
	return strings.Contains(s, "{{") || strings.HasPrefix(s, "$")
}

func (c *converter) ipAccess() {
	c.ipRanges()
	c.blockUserAgents()
	refs := c.get("block-referers", "")
	if refs.set && refs.raw == "" {
		c.report.AddValue(refs.key, `""`, DefaultAlready, "empty: nothing to block")
		return
	}
	c.verdict(refs, NotSupported, "the conversion refuses no request by its Referer header; an AuthorizationPolicy with action DENY and a when condition on request.headers[Referer] does it (exact values and prefix or suffix wildcards; nginx's ~ regular expressions don't carry over)")
}

// ipRanges converts the address ranges: whitelist-source-range,
// denylist-source-range and block-cidrs.
func (c *converter) ipRanges() {
	allow := c.get("whitelist-source-range", "")
	deny := c.get("denylist-source-range", "")
	block := c.get("block-cidrs", "")
	type entry struct {
		key string
		pfx netip.Prefix
	}
	read := func(v value) []entry {
		var out []entry
		for _, s := range list(v) {
			p, err := parseRange(s)
			if err != nil {
				c.probs.Addf(v.key, "%q is not an address or a CIDR range", s)
				continue
			}
			out = append(out, entry{v.key, p})
		}
		return out
	}
	notes := map[string][]string{}
	noted := map[string]int{}
	note := func(key, msg string) {
		// A long list gets its first notes, and a count of the rest.
		if noted[key]++; noted[key] <= maxNotes {
			notes[key] = append(notes[key], msg)
		}
	}
	// widest is the widest range of set that holds pfx, itself excluded:
	// one lookup per shorter prefix length, so a list is cleaned in
	// linear time, whatever its length.
	widest := func(set map[netip.Prefix]bool, pfx netip.Prefix) (netip.Prefix, bool) {
		for bits := 0; bits < pfx.Bits(); bits++ {
			if w := netip.PrefixFrom(pfx.Addr(), bits).Masked(); set[w] {
				return w, true
			}
		}
		return netip.Prefix{}, false
	}
	// clean drops host bits, repeats and ranges inside another of the
	// same list, as nginx matches them anyway.
	clean := func(es []entry) ([]entry, map[netip.Prefix]bool) {
		set := make(map[netip.Prefix]bool, len(es))
		for i := range es {
			if m := es[i].pfx.Masked(); m != es[i].pfx {
				note(es[i].key, fmt.Sprintf("%s read as %s, as nginx does", es[i].pfx, m))
				es[i].pfx = m
			}
			set[es[i].pfx] = true
		}
		var kept []entry
		seen := make(map[netip.Prefix]bool, len(es))
		for _, e := range es {
			if w, ok := widest(set, e.pfx); ok {
				note(e.key, fmt.Sprintf("%s dropped: inside %s", e.pfx, w))
				continue
			}
			if seen[e.pfx] {
				note(e.key, fmt.Sprintf("%s dropped: listed twice", e.pfx))
				continue
			}
			seen[e.pfx] = true
			kept = append(kept, e)
		}
		return kept, set
	}
	denyEntries, blockEntries := read(deny), read(block)
	denied, deniedSet := clean(append(slices.Clone(denyEntries), blockEntries...))
	cleanAllow, _ := clean(read(allow))
	var allowed []entry
	for _, a := range cleanAllow {
		if a.pfx.Bits() == 0 {
			note(a.key, fmt.Sprintf("%s allows every client: nothing to write", a.pfx))
			continue
		}
		if _, in := widest(deniedSet, a.pfx); in || deniedSet[a.pfx] {
			note(a.key, fmt.Sprintf("%s dropped: denied by a deny range, as in nginx", a.pfx))
			continue
		}
		allowed = append(allowed, a)
	}
	for key, n := range noted {
		if n > maxNotes {
			notes[key] = append(notes[key], fmt.Sprintf("and %d more", n-maxNotes))
		}
	}
	strs := func(es []entry, key string) []string {
		var out []string
		for _, e := range es {
			if key == "" || e.key == key {
				out = append(out, e.pfx.String())
			}
		}
		return out
	}
	// A deny range of every address is refused, and the address ranges
	// are written together or not at all.
	var everyone []string
	for _, x := range []struct {
		v  value
		es []entry
	}{{deny, denyEntries}, {block, blockEntries}} {
		if i := slices.IndexFunc(x.es, func(e entry) bool { return e.pfx.Bits() == 0 }); i >= 0 {
			everyone = append(everyone, x.v.key)
			c.report.AddValue(x.v.key, shownRaw(x.v.raw), NotSupported, x.es[i].pfx.Masked().String()+" denies every client; globalconfig refuses a deny range that wide: scale the gateway to zero, or remove its Gateway servers")
		}
	}
	if len(everyone) > 0 {
		was := " was refused"
		if len(everyone) > 1 {
			was = " were refused"
		}
		for _, v := range []value{allow, deny, block} {
			if v.set && v.raw != "" && !slices.Contains(everyone, v.key) {
				c.report.AddValue(v.key, shownRaw(v.raw), NotCarried, strings.Join(everyone, " and ")+was+" (a range that denies every client), and the address ranges are written together or not at all: none is written")
			}
		}
		return
	}
	if n := len(allowed) + len(denied); n > ipaccess.MaxRanges {
		for _, v := range []value{allow, deny, block} {
			if v.set && v.raw != "" {
				c.report.AddValue(v.key, "", NotSupported, fmt.Sprintf("%d address ranges in all (allow %d, deny %d) after dropping repeats and ranges inside others; ipAccess takes at most %d, as Envoy tries them one by one on every request: block large feeds at a firewall or the load balancer", n, len(allowed), len(denied), ipaccess.MaxRanges))
			}
		}
		return
	}
	if len(allowed) > 0 {
		c.write("ipAccess.allow", out.List(strs(allowed, "")), "whitelist-source-range")
	}
	if len(denied) > 0 {
		c.write("ipAccess.deny", out.List(strs(denied, "")), "denylist-source-range, block-cidrs")
	}
	for _, x := range []struct {
		v      value
		to     string
		kept   []string
		detail string
	}{
		{allow, "ipAccess.allow", strs(allowed, allow.key), "clients outside these ranges are answered 403, as by nginx; matched against the client address Envoy detected (see use-forwarded-headers)"},
		{deny, "ipAccess.deny", strs(denied, deny.key), "answered 403, as by nginx"},
		{block, "ipAccess.deny", strs(denied, block.key), "answered 403, as by nginx (ipAccess.denyConnections would close the connections before any HTTP, but can't read X-Forwarded-For)"},
	} {
		if !x.v.set || x.v.raw == "" {
			continue
		}
		if len(x.kept) == 0 {
			c.report.AddValue(x.v.key, x.v.raw, Converted, "→ nothing to write"+suffix(strings.Join(notes[x.v.key], "; ")))
			continue
		}
		c.report.AddValue(x.v.key, x.v.raw, Converted, fmt.Sprintf("→ %s: %s; %s%s", x.to, strings.Join(x.kept, ", "), x.detail, suffix(strings.Join(notes[x.v.key], "; "))))
	}
}

// blockUserAgents converts block-user-agents, nginx map source values,
// to ipAccess.denyUserAgents, which reads them the same way; an entry
// Envoy's regular expression engine can't run is reported.
func (c *converter) blockUserAgents() {
	v := c.get("block-user-agents", "")
	if !v.set {
		return
	}
	var kept, refused []string
	for _, e := range list(v) {
		if _, err := ipaccess.ParseUserAgent(e); err != nil || len(e) > ipaccess.MaxUserAgent {
			refused = append(refused, strconv.Quote(out.Cut(e, 80)))
			continue
		}
		if !slices.Contains(kept, e) {
			kept = append(kept, e)
		}
	}
	switch {
	case len(kept) == 0 && len(refused) == 0:
		c.report.AddValue(v.key, `""`, DefaultAlready, "empty: nothing to block")
		return
	case len(kept) > ipaccess.MaxUserAgents:
		c.report.AddValue(v.key, "", NotSupported, fmt.Sprintf("%d user agents; ipAccess.denyUserAgents takes at most %d, each tried on every request", len(kept), ipaccess.MaxUserAgents))
		return
	}
	const cantRun = "regular expressions Envoy's RE2 engine can't run (lookaround, backreferences), or empty entries: those clients are no longer blocked; rewrite them in RE2 syntax"
	if len(kept) == 0 {
		c.report.AddValue(v.key, out.Cut(strings.Join(refused, ", "), maxShownValue), NotSupported, "none carried: "+cantRun)
		return
	}
	c.write("ipAccess.denyUserAgents", out.List(kept), "block-user-agents")
	c.report.AddValue(v.key, out.Cut(v.raw, maxShownValue), Converted, "→ ipAccess.denyUserAgents: requests with these User-Agents are answered 403, as by nginx; read as nginx's map reads them (a plain value whole and ignoring case, ~ and ~* regular expressions)")
	if len(refused) > 0 {
		c.report.AddValue(v.key+" (not carried)", strings.Join(refused, ", "), NotSupported, cantRun)
	}
}

func (c *converter) paths() {
	gen := c.get("generate-request-id", "true")
	g := c.boolean(gen)
	detail := "Envoy generates x-request-id for requests without one"
	if !g {
		detail = "Envoy generates no x-request-id"
	}
	c.put(gen, "headers.requestId.generate", out.Bool(g), detail, "Envoy generates x-request-id")
	c.put(value{key: "(built in) X-Request-ID", raw: "$req_id"}, "headers.requestId.preserveExternal", out.Bool(true),
		"ingress-nginx passes on the x-request-id clients send; Envoy at a gateway replaces it unless told to keep it", "Envoy replaces the x-request-id of requests from outside")

	underscores := c.get("enable-underscores-in-headers", "false")
	invalid := c.get("ignore-invalid-headers", "true")
	allowUnderscores, ignore := c.boolean(underscores), c.boolean(invalid)
	switch {
	case !allowUnderscores && ignore:
		c.put(underscores, "hardening.headersWithUnderscores", out.Str("DROP_HEADER"), "request headers with underscores in their names are dropped, as by nginx", "Envoy passes them on")
	case allowUnderscores:
		c.report.AddValue(underscores.key, underscores.raw, DefaultAlready, "Envoy passes on headers with underscores")
	default:
		c.verdict(underscores, DefaultAlready, "with ignore-invalid-headers false, nginx passed them on, as Envoy does")
	}
	if ignore {
		c.verdict(invalid, DefaultAlready, "Envoy answers 400 to header names with characters HTTP forbids, where nginx dropped the header; underscores: see enable-underscores-in-headers")
	} else {
		c.report.AddValue(invalid.key, invalid.raw, NotSupported, "Envoy can't be told to accept header names with characters HTTP forbids (400); headers with underscores are passed on")
	}

	snippets := c.get("allow-snippet-annotations", "false")
	if c.boolean(snippets) {
		c.report.AddValue(snippets.key, snippets.raw, Insecure, "lets Ingress annotations inject "+snippet)
	} else {
		c.verdict(snippets, DefaultAlready, "globalconfig takes no raw configuration")
	}
}

// edge carries what nginx does at the edge with no ConfigMap key: it
// serves HTTP/1.0, matches a host with a trailing dot as the host without
// it, and passes header names on in the case they arrived in. Envoy, left
// alone, answers HTTP/1.0 426, routes example.com. by a wildcard host only,
// and lower-cases header names.
func (c *converter) edge() {
	c.put(value{key: "(built in) HTTP/1.0", raw: "served"}, "downstream.http1.acceptHttp10", out.Bool(true),
		"nginx serves HTTP/1.0 clients, which Envoy answers 426 unless told to; one without a Host header gets 400 from Envoy, where ingress-nginx gave it to its default server (404): set downstream.http1.defaultHost to route such requests",
		"Envoy answers HTTP/1.0 requests 426 Upgrade Required")
	c.put(value{key: "(built in) trailing dot in Host", raw: "ignored"}, "hardening.stripTrailingHostDot", out.Bool(true),
		"nginx matches example.com. as example.com; Envoy strips the dot before routing, as nginx",
		"a host with a trailing dot matches only a wildcard host (*), else Envoy answers 404")
	c.report.AddValue("(built in) header name case", "kept", DefaultSkipped,
		"not written: nginx passes header names on in the case they arrived in, Envoy lower-cases them (HTTP/2 and most services ignore case); downstream.http1.preserveHeaderCase keeps the case, but it also replaces every gateway cluster's HTTP protocol options, which the ConfigMap never asked for: set it if a client or a service relies on header case")
}

func (c *converter) statusCodes() {
	if v := c.get("custom-http-errors", ""); v.set && v.raw != "" {
		for _, s := range list(v) {
			if n, err := strconv.Atoi(s); err != nil || n < 300 || n > 599 {
				c.probs.Addf(v.key, "%q is not an HTTP status from 300 to 599", s)
			}
		}
		c.report.AddValue(v.key, v.raw, NotSupported, "ingress-nginx answers these statuses, the services' and its own, with a page fetched from its default backend; Envoy can't fetch an error page from a service. customErrors.localReplies sets a body of your own for Envoy's own replies (no route, no healthy upstream, timeouts); customErrors.upstream would replace services' responses too, but istio-proxy is built without the filter it needs")
	}
	if v := c.get("disable-proxy-intercept-errors", "false"); v.set {
		c.report.AddValue(v.key, v.raw, NotNeeded, "governs custom-http-errors, which is not converted")
	}
	for _, x := range []struct{ key, detail string }{
		{"limit-req-status-code", "the status of the limit-rps and limit-rpm annotations of Ingresses, which are not part of the global ConfigMap; when you recreate those limits with localRateLimit.limits (one per Ingress: match.hosts and match.pathPrefix for its rules, perClient: true and requests per second or minute for limit-rps or limit-rpm), set localRateLimit.statusCode: %s (globalconfig's default is 429)"},
		{"limit-conn-status-code", "the status of the limit-connections annotation of Ingresses; Envoy has no per-client connection limit, and hardening.maxConnections closes connections over its total instead of answering %s"},
	} {
		v := c.get(x.key, "503")
		if n := c.integer(v, 100); n > 599 {
			c.probs.Addf(v.key, "must be an HTTP status, got %d", n)
		}
		c.verdict(v, NotSupported, fmt.Sprintf(x.detail, v.raw))
	}
}
