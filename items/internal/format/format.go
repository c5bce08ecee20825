// Package format checks Envoy substitution format strings (access log
// formats, local reply bodies, header values): every %OPERATOR% must be one
// Envoy knows, with the arguments it takes, since Envoy refuses the whole
// configuration over one unknown operator.
package format

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/globalconfig/globalconfig/internal/suggest"
	"github.com/globalconfig/globalconfig/items"
)

// syntax is what a command operator accepts besides its name, as Envoy's
// CommandSyntaxChecker sees it: no flag at all is a bare %NAME%.
type syntax uint8

const (
	paramsOptional syntax = 1 << iota // %NAME% or %NAME(args)%
	paramsRequired                    // only %NAME(args)%
	lengthAllowed                     // a :N truncation may follow
)

// bare is an operator that takes neither arguments nor a length.
const bare syntax = 0

// commandOperators are the command operators Envoy's substitution
// formatter knows without any formatter extension configured, with what
// each accepts: the built-in stream-info and HTTP operators
// (source/common/formatter/stream_info_formatter.cc and
// http_specific_formatter.cc) plus METADATA, which Envoy registers as a
// built-in parser and istio-proxy builds. A format using any other name is
// refused by Envoy ("Not supported field in StreamInfo"), which rejects the
// whole listener. Operators added by recent Envoy releases (REQUEST_HEADER,
// RESPONSE_HEADER, RESPONSE_TRAILER, PATH, COALESCE, …) are refused by
// older proxies.
var commandOperators = map[string]syntax{
	// Timing.
	"START_TIME":                              paramsOptional,
	"START_TIME_LOCAL":                        paramsOptional,
	"EMIT_TIME":                               paramsOptional,
	"EMIT_TIME_LOCAL":                         paramsOptional,
	"DURATION":                                bare,
	"COMMON_DURATION":                         paramsRequired,
	"REQUEST_DURATION":                        bare,
	"REQUEST_TX_DURATION":                     bare,
	"RESPONSE_DURATION":                       bare,
	"RESPONSE_TX_DURATION":                    bare,
	"DOWNSTREAM_HANDSHAKE_DURATION":           bare,
	"ROUNDTRIP_DURATION":                      bare,
	"UPSTREAM_CONNECTION_POOL_READY_DURATION": bare,

	// Sizes.
	"BYTES_RECEIVED":                                bare,
	"BYTES_SENT":                                    bare,
	"BYTES_RETRANSMITTED":                           bare,
	"PACKETS_RETRANSMITTED":                         bare,
	"UPSTREAM_WIRE_BYTES_SENT":                      bare,
	"UPSTREAM_WIRE_BYTES_RECEIVED":                  bare,
	"UPSTREAM_HEADER_BYTES_SENT":                    bare,
	"UPSTREAM_HEADER_BYTES_RECEIVED":                bare,
	"UPSTREAM_DECOMPRESSED_HEADER_BYTES_SENT":       bare,
	"UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED":   bare,
	"DOWNSTREAM_WIRE_BYTES_SENT":                    bare,
	"DOWNSTREAM_WIRE_BYTES_RECEIVED":                bare,
	"DOWNSTREAM_HEADER_BYTES_SENT":                  bare,
	"DOWNSTREAM_HEADER_BYTES_RECEIVED":              bare,
	"DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_SENT":     bare,
	"DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED": bare,
	"REQUEST_HEADERS_BYTES":                         bare,
	"RESPONSE_HEADERS_BYTES":                        bare,
	"RESPONSE_TRAILERS_BYTES":                       bare,

	// The response.
	"PROTOCOL":                       bare,
	"UPSTREAM_PROTOCOL":              bare,
	"RESPONSE_CODE":                  bare,
	"RESPONSE_CODE_DETAILS":          paramsOptional,
	"CONNECTION_TERMINATION_DETAILS": bare,
	"RESPONSE_FLAGS":                 bare,
	"RESPONSE_FLAGS_LONG":            bare,
	"CUSTOM_FLAGS":                   bare,
	"LOCAL_REPLY_BODY":               bare,
	"ACCESS_LOG_TYPE":                bare,
	"GRPC_STATUS":                    paramsOptional,
	"GRPC_STATUS_NUMBER":             bare,

	// Headers, query and path.
	"REQ":              paramsRequired | lengthAllowed,
	"REQUEST_HEADER":   paramsRequired | lengthAllowed,
	"RESP":             paramsRequired | lengthAllowed,
	"RESPONSE_HEADER":  paramsRequired | lengthAllowed,
	"TRAILER":          paramsRequired | lengthAllowed,
	"RESPONSE_TRAILER": paramsRequired | lengthAllowed,
	"STREAM_INFO_REQ":  paramsRequired | lengthAllowed,
	"QUERY_PARAM":      paramsRequired | lengthAllowed,
	"PATH":             paramsOptional | lengthAllowed,
	"COALESCE":         paramsRequired | lengthAllowed,

	// Routing and upstream.
	"ROUTE_NAME":                        bare,
	"VIRTUAL_CLUSTER_NAME":              bare,
	"UPSTREAM_HOST":                     bare,
	"UPSTREAM_HOST_NAME":                bare,
	"UPSTREAM_HOST_NAME_WITHOUT_PORT":   bare,
	"UPSTREAM_CLUSTER":                  bare,
	"UPSTREAM_CLUSTER_RAW":              bare,
	"UPSTREAM_CONNECTION_ID":            bare,
	"UPSTREAM_REQUEST_ATTEMPT_COUNT":    bare,
	"UPSTREAM_TRANSPORT_FAILURE_REASON": bare,

	// Addresses.
	"UPSTREAM_LOCAL_ADDRESS":                        bare,
	"UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT":           bare,
	"UPSTREAM_LOCAL_PORT":                           bare,
	"UPSTREAM_REMOTE_ADDRESS":                       bare,
	"UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT":          bare,
	"UPSTREAM_REMOTE_PORT":                          bare,
	"DOWNSTREAM_LOCAL_ADDRESS":                      bare,
	"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT":         bare,
	"DOWNSTREAM_LOCAL_PORT":                         bare,
	"DOWNSTREAM_DIRECT_LOCAL_ADDRESS":               bare,
	"DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT":  bare,
	"DOWNSTREAM_DIRECT_LOCAL_PORT":                  bare,
	"DOWNSTREAM_REMOTE_ADDRESS":                     bare,
	"DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT":        bare,
	"DOWNSTREAM_REMOTE_PORT":                        bare,
	"DOWNSTREAM_DIRECT_REMOTE_ADDRESS":              bare,
	"DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT": bare,
	"DOWNSTREAM_DIRECT_REMOTE_PORT":                 bare,
	"CONNECTION_ID":                                 bare,
	"REQUESTED_SERVER_NAME":                         bare,
	"FILTER_CHAIN_NAME":                             bare,
	"HOSTNAME":                                      bare,

	// TLS.
	"DOWNSTREAM_TLS_VERSION":                 bare,
	"DOWNSTREAM_TLS_CIPHER":                  bare,
	"DOWNSTREAM_TLS_SESSION_ID":              bare,
	"DOWNSTREAM_PEER_URI_SAN":                bare,
	"DOWNSTREAM_PEER_DNS_SAN":                bare,
	"DOWNSTREAM_PEER_IP_SAN":                 bare,
	"DOWNSTREAM_PEER_EMAIL_SAN":              bare,
	"DOWNSTREAM_PEER_OTHERNAME_SAN":          bare,
	"DOWNSTREAM_LOCAL_URI_SAN":               bare,
	"DOWNSTREAM_LOCAL_DNS_SAN":               bare,
	"DOWNSTREAM_LOCAL_IP_SAN":                bare,
	"DOWNSTREAM_LOCAL_EMAIL_SAN":             bare,
	"DOWNSTREAM_LOCAL_OTHERNAME_SAN":         bare,
	"DOWNSTREAM_PEER_SUBJECT":                bare,
	"DOWNSTREAM_LOCAL_SUBJECT":               bare,
	"DOWNSTREAM_PEER_ISSUER":                 bare,
	"DOWNSTREAM_PEER_SERIAL":                 bare,
	"DOWNSTREAM_PEER_CERT":                   bare,
	"DOWNSTREAM_PEER_FINGERPRINT_256":        bare,
	"DOWNSTREAM_PEER_FINGERPRINT_1":          bare,
	"DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256": bare,
	"DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1":   bare,
	"DOWNSTREAM_PEER_CHAIN_SERIALS":          bare,
	"DOWNSTREAM_PEER_CERT_V_START":           paramsOptional,
	"DOWNSTREAM_PEER_CERT_V_END":             paramsOptional,
	"DOWNSTREAM_TRANSPORT_FAILURE_REASON":    bare,
	"UPSTREAM_TLS_VERSION":                   bare,
	"UPSTREAM_TLS_CIPHER":                    bare,
	"UPSTREAM_TLS_SESSION_ID":                bare,
	"UPSTREAM_PEER_URI_SAN":                  bare,
	"UPSTREAM_PEER_DNS_SAN":                  bare,
	"UPSTREAM_PEER_IP_SAN":                   bare,
	"UPSTREAM_LOCAL_URI_SAN":                 bare,
	"UPSTREAM_LOCAL_DNS_SAN":                 bare,
	"UPSTREAM_LOCAL_IP_SAN":                  bare,
	"UPSTREAM_PEER_SUBJECT":                  bare,
	"UPSTREAM_PEER_ISSUER":                   bare,
	"UPSTREAM_PEER_CERT":                     bare,
	"UPSTREAM_PEER_CERT_V_START":             paramsOptional,
	"UPSTREAM_PEER_CERT_V_END":               paramsOptional,
	"TLS_JA3_FINGERPRINT":                    bare,
	"TLS_JA4_FINGERPRINT":                    bare,

	// Metadata, filter state, ids and the environment.
	"DYNAMIC_METADATA":      paramsRequired,
	"CLUSTER_METADATA":      paramsRequired,
	"UPSTREAM_METADATA":     paramsRequired,
	"METADATA":              paramsRequired | lengthAllowed,
	"FILTER_STATE":          paramsOptional | lengthAllowed,
	"UPSTREAM_FILTER_STATE": paramsOptional | lengthAllowed,
	"ENVIRONMENT":           paramsRequired | lengthAllowed,
	"UNIQUE_ID":             bare,
	"STREAM_ID":             bare,
	"TRACE_ID":              bare,
}

// extensionOperators are operators of formatter extensions, which work only
// when the format configures the extension; this item configures none.
var extensionOperators = map[string]string{
	"CEL":               "envoy.formatter.cel",
	"REQ_WITHOUT_QUERY": "envoy.formatter.req_without_query",
}

// headerOperators take a header name with an optional alternative
// (%REQ(x-forwarded-for?x-real-ip)%).
var headerOperators = []string{"REQ", "REQUEST_HEADER", "RESP", "RESPONSE_HEADER", "TRAILER", "RESPONSE_TRAILER", "STREAM_INFO_REQ"}

// metadataKinds are the kinds %METADATA(KIND:NAMESPACE:KEY)% reads.
var metadataKinds = []string{"DYNAMIC", "CLUSTER", "ROUTE", "UPSTREAM_HOST", "LISTENER", "VIRTUAL_HOST"}

// operatorPattern is Envoy's command syntax, %NAME(ARGS):LENGTH%, in the
// stricter form every Envoy release accepts: ARGS holds no ")" (recent
// releases allow one inside the parentheses, older ones refuse it).
var operatorPattern = regexp.MustCompile(`^%([A-Z0-9_]+)(?:\(([^)]*)\))?(?::([0-9]+))?%`)

// unclosedPattern is the start of a command operator whose closing % is
// missing.
var unclosedPattern = regexp.MustCompile(`^%[A-Z0-9_]+(?:\([^)]*\))?`)

// requestOperators substitute values the client chose.
var requestOperators = []string{"REQ", "REQUEST_HEADER", "QUERY_PARAM", "PATH", "STREAM_INFO_REQ", "COALESCE"}

// QuotesRequest reports whether format substitutes a value the client
// chose (a header, the path, a query parameter).
func QuotesRequest(format string) bool {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		if strings.HasPrefix(format[i:], "%%") {
			i++
			continue
		}
		m := operatorPattern.FindStringSubmatch(format[i:])
		if m == nil {
			return false
		}
		if slices.Contains(requestOperators, m[1]) {
			return true
		}
		i += len(m[0]) - 1
	}
	return false
}

// maxShown bounds the text quoted back in a message.
const maxShown = 40

// Check records a problem at path for each command operator in format
// that Envoy's substitution formatter would refuse: an unknown name, an
// argument or :N length the operator doesn't take, a missing argument, or a
// % that starts no operator (a literal percent sign is written %%). Envoy
// refuses the whole configuration for any of them.
func Check(p *items.Problems, path, format string) {
	for i := 0; i < len(format); {
		if format[i] != '%' {
			i++
			continue
		}
		if strings.HasPrefix(format[i:], "%%") {
			i += 2
			continue
		}
		m := operatorPattern.FindStringSubmatch(format[i:])
		if m == nil {
			p.Addf(path, "%s", notAnOperator(format[i:]))
			return // Envoy stops here too: the rest can't be split reliably.
		}
		checkOperator(p, path, m[0], m[1], m[2], m[3])
		i += len(m[0])
	}
}

// checkOperator checks one well-formed %NAME(args):N% against the table.
func checkOperator(p *items.Problems, path, token, name, args, length string) {
	flags, known := commandOperators[name]
	switch {
	case !known:
		if ext, ok := extensionOperators[name]; ok {
			p.Addf(path, "%s needs the formatter extension %s, which this item does not configure", shown(token), ext)
			return
		}
		msg := fmt.Sprintf("unknown command operator %%%s%%", name)
		if s := suggest.Closest(name, operatorNames()); s != "" {
			msg += fmt.Sprintf("; did you mean %%%s%%?", s)
		} else {
			msg += "; see Envoy's access log command operators"
		}
		p.Addf(path, "%s", msg)
		return
	case flags == bare && (args != "" || length != ""):
		p.Addf(path, "%s: %%%s%% takes no argument or length", shown(token), name)
		return
	case flags&paramsRequired != 0 && args == "":
		p.Addf(path, "%s: %%%s%% needs an argument, %%%s(...)%%", shown(token), name, name)
		return
	case flags&lengthAllowed == 0 && length != "":
		p.Addf(path, "%s: %%%s%% takes no :N length", shown(token), name)
		return
	}
	if length != "" {
		if _, err := strconv.ParseUint(length, 10, 64); err != nil {
			p.Addf(path, "%s: length %s is too large", shown(token), length)
		}
	}
	if name == "METADATA" {
		if kind, _, _ := strings.Cut(args, ":"); !slices.Contains(metadataKinds, kind) {
			p.Addf(path, "%s: the metadata kind must be one of %s", shown(token), strings.Join(metadataKinds, ", "))
		}
	}
	if slices.Contains(headerOperators, name) {
		if strings.Count(args, "?") > 1 {
			p.Addf(path, "%s: give one header and at most one alternative, header?alternative", shown(token))
		}
		if strings.ContainsAny(args, "\x00\r\n") {
			p.Addf(path, "%s: a header name can't hold NUL or a line break", shown(token))
		}
	}
}

// notAnOperator explains a % that starts no valid command operator.
func notAnOperator(rest string) string {
	end := strings.IndexByte(rest[1:], '%')
	if end < 0 {
		if name := unclosedPattern.FindString(rest); name != "" {
			return fmt.Sprintf("%s has no closing \"%%\"; a literal percent sign is written \"%%%%\"", shown(name))
		}
		return `a lone "%" must be written "%%" (Envoy reads "%" as the start of a command operator)`
	}
	token := rest[:end+2]
	if upper := strings.ToUpper(token); upper != token {
		if m := operatorPattern.FindStringSubmatch(upper); m != nil && m[0] == upper {
			if _, ok := commandOperators[m[1]]; ok {
				return fmt.Sprintf("%s: command operators are upper case; did you mean %s?", shown(token), upper)
			}
		}
	}
	return fmt.Sprintf("%s is not a command operator (%%NAME%%, %%NAME(args)%% or %%NAME(args):N%%); write a literal percent sign as %%%%", shown(token))
}

// shown quotes s for a message, shortened to maxShown characters.
func shown(s string) string {
	if r := []rune(s); len(r) > maxShown {
		s = string(r[:maxShown]) + "…"
	}
	return strconv.Quote(s)
}

// operatorNames lists the known operator names, sorted.
func operatorNames() []string {
	names := make([]string, 0, len(commandOperators))
	for n := range commandOperators {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
