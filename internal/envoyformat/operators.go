package envoyformat

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/internal/suggest"
)

// syntax is what a command operator accepts besides its name, as Envoy's
// CommandSyntaxChecker sees it; no flag at all (commandOnly) is a bare
// %NAME%.
type syntax uint8

const (
	paramsRequired syntax = 1 << iota // only %NAME(arg)%
	paramsOptional                    // %NAME% or %NAME(arg)%
	lengthAllowed                     // a :N truncation may follow
	// unchecked is an operator of a built-in parser that runs no
	// CommandSyntaxChecker (METADATA, CEL, TYPED_CEL, XFCC_VALUE): any
	// length goes, and its argument check says what an empty one means.
	unchecked
)

// commandOnly is an operator that takes neither an argument nor a length.
const commandOnly syntax = 0

// v is an Envoy minor release, for the table.
func v(minor int) envoyfilter.Version { return envoyfilter.Version{Major: 1, Minor: minor} }

// operator is one command operator Envoy's built-in command parsers know.
type operator struct {
	// since is the oldest Envoy release that knows the operator; zero for
	// one every release globalconfig knows has.
	since  envoyfilter.Version
	syntax syntax
	// older is the syntax releases before changed had, when newer ones
	// accept more (an argument, a length).
	older   syntax
	changed envoyfilter.Version
	// arg checks the argument (and length) once the syntax allows them.
	arg func(c *checker, o call)
	// quotesRequest: the operator substitutes a value the client chose.
	quotesRequest bool
}

// call is one use of an operator.
type call struct {
	name      string
	arg       string
	hasLength bool
	text      string // the whole %…%, for messages
}

// The operators of Envoy's built-in command parsers: stream info
// (stream_info_formatter.cc), HTTP (http_specific_formatter.cc), METADATA,
// CEL/TYPED_CEL and XFCC_VALUE, which Envoy registers as built-in command
// parsers. Each was probed on Envoy 1.36.2, 1.36.4, 1.37.0, 1.38.3, 1.39.3
// and 1.40.0 (%NAME%, %NAME(x)%, %NAME:5%, %NAME(x):5% and argument
// grammars). Since for releases before 1.36, which the tests can't run,
// comes from Envoy's changelogs (1.34: QUERY_PARAM, CUSTOM_FLAGS, PATH,
// RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES), CEL and METADATA built in;
// 1.35: TLS JA4 fingerprinting; 1.36: the decompressed header byte counts
// and TYPED_CEL); an operator 1.36 knows that no changelog since 1.33
// adds is taken to be known by every release globalconfig knows.
var operators = map[string]operator{}

func init() {
	bare := func(since envoyfilter.Version, names ...string) {
		for _, n := range names {
			operators[n] = operator{since: since, syntax: commandOnly}
		}
	}
	bare(never,
		"ACCESS_LOG_TYPE", "BYTES_RECEIVED", "BYTES_RETRANSMITTED", "BYTES_SENT",
		"CONNECTION_ID", "CONNECTION_TERMINATION_DETAILS",
		"DOWNSTREAM_DIRECT_LOCAL_ADDRESS", "DOWNSTREAM_DIRECT_LOCAL_PORT",
		"DOWNSTREAM_DIRECT_REMOTE_ADDRESS", "DOWNSTREAM_DIRECT_REMOTE_PORT",
		"DOWNSTREAM_HANDSHAKE_DURATION", "DOWNSTREAM_HEADER_BYTES_RECEIVED", "DOWNSTREAM_HEADER_BYTES_SENT",
		"DOWNSTREAM_LOCAL_ADDRESS", "DOWNSTREAM_LOCAL_PORT",
		"DOWNSTREAM_LOCAL_DNS_SAN", "DOWNSTREAM_LOCAL_EMAIL_SAN", "DOWNSTREAM_LOCAL_IP_SAN",
		"DOWNSTREAM_LOCAL_OTHERNAME_SAN", "DOWNSTREAM_LOCAL_SUBJECT", "DOWNSTREAM_LOCAL_URI_SAN",
		"DOWNSTREAM_PEER_CERT", "DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1", "DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256",
		"DOWNSTREAM_PEER_CHAIN_SERIALS", "DOWNSTREAM_PEER_DNS_SAN", "DOWNSTREAM_PEER_EMAIL_SAN",
		"DOWNSTREAM_PEER_FINGERPRINT_1", "DOWNSTREAM_PEER_FINGERPRINT_256", "DOWNSTREAM_PEER_IP_SAN",
		"DOWNSTREAM_PEER_ISSUER", "DOWNSTREAM_PEER_OTHERNAME_SAN", "DOWNSTREAM_PEER_SERIAL",
		"DOWNSTREAM_PEER_SUBJECT", "DOWNSTREAM_PEER_URI_SAN",
		"DOWNSTREAM_REMOTE_ADDRESS", "DOWNSTREAM_REMOTE_PORT",
		"DOWNSTREAM_TLS_CIPHER", "DOWNSTREAM_TLS_SESSION_ID", "DOWNSTREAM_TLS_VERSION",
		"DOWNSTREAM_TRANSPORT_FAILURE_REASON", "DOWNSTREAM_WIRE_BYTES_RECEIVED", "DOWNSTREAM_WIRE_BYTES_SENT",
		"DURATION", "FILTER_CHAIN_NAME", "GRPC_STATUS_NUMBER", "HOSTNAME", "LOCAL_REPLY_BODY",
		"PACKETS_RETRANSMITTED", "PROTOCOL", "REQUEST_DURATION", "REQUEST_HEADERS_BYTES", "REQUEST_TX_DURATION",
		"RESPONSE_CODE", "RESPONSE_DURATION", "RESPONSE_FLAGS", "RESPONSE_FLAGS_LONG",
		"RESPONSE_HEADERS_BYTES", "RESPONSE_TRAILERS_BYTES", "RESPONSE_TX_DURATION", "ROUNDTRIP_DURATION",
		"ROUTE_NAME", "STREAM_ID", "TLS_JA3_FINGERPRINT", "TRACE_ID", "UNIQUE_ID",
		"UPSTREAM_CLUSTER", "UPSTREAM_CLUSTER_RAW", "UPSTREAM_CONNECTION_ID", "UPSTREAM_CONNECTION_POOL_READY_DURATION",
		"UPSTREAM_HEADER_BYTES_RECEIVED", "UPSTREAM_HEADER_BYTES_SENT", "UPSTREAM_HOST",
		"UPSTREAM_HOST_NAME", "UPSTREAM_HOST_NAME_WITHOUT_PORT",
		"UPSTREAM_LOCAL_ADDRESS", "UPSTREAM_LOCAL_PORT",
		"UPSTREAM_LOCAL_DNS_SAN", "UPSTREAM_LOCAL_IP_SAN", "UPSTREAM_LOCAL_URI_SAN",
		"UPSTREAM_PEER_CERT", "UPSTREAM_PEER_DNS_SAN", "UPSTREAM_PEER_IP_SAN", "UPSTREAM_PEER_ISSUER",
		"UPSTREAM_PEER_SUBJECT", "UPSTREAM_PEER_URI_SAN", "UPSTREAM_PROTOCOL",
		"UPSTREAM_REMOTE_ADDRESS", "UPSTREAM_REMOTE_PORT", "UPSTREAM_REQUEST_ATTEMPT_COUNT",
		"UPSTREAM_TLS_CIPHER", "UPSTREAM_TLS_SESSION_ID", "UPSTREAM_TLS_VERSION",
		"UPSTREAM_TRANSPORT_FAILURE_REASON", "UPSTREAM_WIRE_BYTES_RECEIVED", "UPSTREAM_WIRE_BYTES_SENT",
		"VIRTUAL_CLUSTER_NAME")
	bare(v(34), "CUSTOM_FLAGS")
	bare(v(35), "TLS_JA4_FINGERPRINT")
	bare(v(36),
		"DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED", "DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_SENT",
		"UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED", "UPSTREAM_DECOMPRESSED_HEADER_BYTES_SENT")
	bare(v(37), "DOWNSTREAM_DIRECT_LOCAL_ADDRESS_ENDPOINT_ID", "DOWNSTREAM_LOCAL_ADDRESS_ENDPOINT_ID",
		"UPSTREAM_REMOTE_ADDRESS_ENDPOINT_ID")
	bare(v(38), "DOWNSTREAM_DETECTED_CLOSE_TYPE", "DOWNSTREAM_LOCAL_CLOSE_REASON",
		"DOWNSTREAM_PEER_ISSUER_FINGERPRINT_256", "DOWNSTREAM_PEER_ISSUER_SERIAL", "SPAN_ID",
		"UPSTREAM_CONNECTION_IDS_ATTEMPTED", "UPSTREAM_DETECTED_CLOSE_TYPE", "UPSTREAM_LOCAL_CLOSE_REASON",
		"UPSTREAM_HOSTS_ATTEMPTED", "UPSTREAM_HOSTS_ATTEMPTED_WITHOUT_PORT",
		"UPSTREAM_HOST_NAMES_ATTEMPTED", "UPSTREAM_HOST_NAMES_ATTEMPTED_WITHOUT_PORT")
	bare(v(39), "DOWNSTREAM_TLS_GROUP", "UPSTREAM_SERVER_NAME", "UPSTREAM_TLS_GROUP")
	bare(v(40), "DOWNSTREAM_CX_RTT", "LISTENER_NAME", "ROUTE_RESOLUTION_COUNT", "ROUTE_RESOLUTION_TIME_US")

	// Addresses without the port take an argument (any) since 1.38.
	for _, n := range []string{
		"DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT", "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT",
		"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
		"UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", "UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
	} {
		operators[n] = operator{syntax: paramsOptional, older: commandOnly, changed: v(38)}
	}

	// Times, with an optional strftime-like format.
	for _, n := range []string{
		"START_TIME", "START_TIME_LOCAL", "EMIT_TIME", "EMIT_TIME_LOCAL",
		"DOWNSTREAM_PEER_CERT_V_START", "DOWNSTREAM_PEER_CERT_V_END",
		"UPSTREAM_PEER_CERT_V_START", "UPSTREAM_PEER_CERT_V_END",
	} {
		operators[n] = operator{syntax: paramsOptional, arg: timeFormat}
	}

	// Headers, header?alternative.
	header := operator{syntax: paramsRequired | lengthAllowed, arg: headerPair}
	for _, n := range []string{"REQ", "RESP", "TRAILER", "STREAM_INFO_REQ"} {
		operators[n] = header
	}
	header.since = v(37)
	for _, n := range []string{"REQUEST_HEADER", "RESPONSE_HEADER", "RESPONSE_TRAILER"} {
		operators[n] = header
	}
	for _, n := range []string{"REQ", "REQUEST_HEADER", "STREAM_INFO_REQ"} {
		op := operators[n]
		op.quotesRequest = true
		operators[n] = op
	}

	operators["RESPONSE_CODE_DETAILS"] = operator{syntax: paramsOptional, older: commandOnly, changed: v(34)}
	operators["GRPC_STATUS"] = operator{syntax: paramsOptional, arg: oneOf("the gRPC status form", "CAMEL_STRING", "SNAKE_STRING", "NUMBER")}
	operators["REQUESTED_SERVER_NAME"] = operator{syntax: paramsOptional, older: commandOnly, changed: v(37),
		arg: oneOf("the server name source", "SNI_ONLY", "SNI_FIRST", "HOST_FIRST"), quotesRequest: true}
	operators["QUERY_PARAM"] = operator{since: v(34), syntax: paramsRequired | lengthAllowed, quotesRequest: true}
	operators["QUERY_PARAMS"] = operator{since: v(38), syntax: paramsOptional | lengthAllowed,
		arg: oneOf("the query form", "ORIG", "DECODED"), quotesRequest: true}
	operators["PATH"] = operator{since: v(34), syntax: paramsOptional | lengthAllowed, arg: pathOptions, quotesRequest: true}
	operators["COALESCE"] = operator{since: v(37), syntax: paramsRequired | lengthAllowed, arg: coalesce, quotesRequest: true}
	operators["ENVIRONMENT"] = operator{syntax: paramsRequired | lengthAllowed}
	operators["COMMON_DURATION"] = operator{syntax: paramsRequired, arg: commonDuration}
	operators["DYNAMIC_METADATA"] = operator{syntax: paramsRequired | lengthAllowed, older: paramsRequired, changed: v(37)}
	operators["CLUSTER_METADATA"] = operator{syntax: paramsRequired}
	operators["UPSTREAM_METADATA"] = operator{syntax: paramsRequired}
	operators["FILTER_STATE"] = operator{syntax: paramsOptional | lengthAllowed, arg: filterState}
	operators["UPSTREAM_FILTER_STATE"] = operator{syntax: paramsOptional | lengthAllowed, arg: filterState}
	operators["METADATA"] = operator{since: v(34), syntax: unchecked, arg: metadata}
	operators["CEL"] = operator{since: v(34), syntax: unchecked, arg: celArg, quotesRequest: true}
	operators["TYPED_CEL"] = operator{since: v(36), syntax: unchecked, arg: celArg, quotesRequest: true}
	operators["XFCC_VALUE"] = operator{syntax: unchecked, arg: xfccValue, quotesRequest: true}
}

// extensionOperators are operators of formatter extensions, which work
// only when the format string's formatters configure the extension; the
// items configure none.
var extensionOperators = map[string]string{
	"REQ_WITHOUT_QUERY": "envoy.formatter.req_without_query",
}

// operatorNames lists the known operator names, sorted.
func operatorNames() []string {
	names := make([]string, 0, len(operators))
	for n := range operators {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// command checks one operator with its argument and length.
func (c *checker) command(name, arg string, hasLength bool, text string) {
	op, known := operators[name]
	if !known {
		c.unknown(name, text)
		return
	}
	if op.since != never {
		c.add(op.since, "%%%s%% is unknown to older Envoys", name)
	}
	o := call{name: name, arg: arg, hasLength: hasLength, text: text}
	if msg := syntaxProblem(op.syntax, o); msg != "" {
		c.add(never, "%s", msg)
		return
	}
	if op.changed != never && syntaxProblem(op.older, o) != "" {
		what := "an argument to"
		if o.arg == "" || op.older&(paramsOptional|paramsRequired) != 0 {
			what = "a :N length on"
		}
		c.add(op.changed, "%s: %s %%%s%%", shown(o.text), what, name)
	}
	if op.arg != nil {
		op.arg(c, o)
	}
}

// syntaxProblem is CommandSyntaxChecker::verifySyntax.
func syntaxProblem(s syntax, o call) string {
	switch {
	case s&unchecked != 0:
		return ""
	case s == commandOnly && (o.arg != "" || o.hasLength):
		return fmt.Sprintf("%s: %%%s%% takes no argument or length", shown(o.text), o.name)
	case s&paramsRequired != 0 && o.arg == "":
		return fmt.Sprintf("%s: %%%s%% needs an argument, %%%s(...)%%", shown(o.text), o.name, o.name)
	case s&lengthAllowed == 0 && o.hasLength:
		return fmt.Sprintf("%s: %%%s%% takes no :N length", shown(o.text), o.name)
	}
	return ""
}

// unknown explains a name no built-in command parser knows.
func (c *checker) unknown(name, text string) {
	switch {
	case extensionOperators[name] != "":
		c.add(never, "%s needs the formatter extension %s, which is not configured here", shown(text), extensionOperators[name])
	case name == "PER_REQUEST_STATE":
		c.add(never, "%s: %%PER_REQUEST_STATE%% works in header values only; write %%FILTER_STATE(key:PLAIN)%%", shown(text))
	default:
		msg := fmt.Sprintf("unknown command operator %%%s%%", name)
		if s := suggest.Closest(name, operatorNames()); s != "" {
			msg += fmt.Sprintf("; did you mean %%%s%%?", s)
		} else {
			msg += "; see Envoy's access log command operators"
		}
		c.add(never, "%s", msg)
	}
}

// oneOf is an argument that must be one of opts, or empty.
func oneOf(what string, opts ...string) func(*checker, call) {
	return func(c *checker, o call) {
		if o.arg != "" && !slices.Contains(opts, o.arg) {
			c.add(never, "%s: %s must be %s, got %s", shown(o.text), what, strings.Join(opts, ", "), shown(o.arg))
		}
	}
}

// timeNewline is Envoy's check on a time format: a %n specifier (a line
// break) is refused, since the value may go into a header.
var timeNewline = regexp.MustCompile(`%[-_0^#]*[1-9]*(E|O)?n`)

func timeFormat(c *checker, o call) {
	if timeNewline.MatchString(o.arg) {
		c.add(never, "%s: the time format holds a %%n specifier (a line break), which Envoy refuses", shown(o.text))
	}
}

// headerPair is SubstitutionFormatUtils::parseSubcommandHeaders: a header
// name and at most one alternative, each empty or a valid header name.
func headerPair(c *checker, o call) {
	names := strings.Split(o.arg, "?")
	if len(names) > 2 {
		c.add(never, "%s: give one header and at most one alternative, header?alternative", shown(o.text))
		return
	}
	for _, n := range names {
		if !validHeaderName(n) {
			c.add(never, "%s: %s is not a header name (letters, digits and !#$%%&'*+-.^_`|~, or a :pseudo-header)", shown(o.text), shown(n))
			return
		}
	}
}

// validHeaderName is HeaderUtility::headerNameIsValid on the lower-cased
// name: an RFC 9110 token, or ":" and a token; empty is valid.
func validHeaderName(n string) bool {
	if n == "" {
		return true
	}
	if rest, pseudo := strings.CutPrefix(n, ":"); pseudo {
		if rest == "" {
			return false
		}
		n = rest
	}
	for i := 0; i < len(n); i++ {
		if !isTokenByte(n[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// pathOptions is %PATH(WQ|NQ:ORIG|PATH|ORIG_OR_PATH)%; Envoy ignores
// anything after a second colon.
func pathOptions(c *checker, o call) {
	query, option, _ := strings.Cut(o.arg, ":")
	option, _, _ = strings.Cut(option, ":")
	switch {
	case query != "" && query != "WQ" && query != "NQ":
		c.add(never, "%s: the query part of %%PATH%% must be WQ or NQ, got %s", shown(o.text), shown(query))
	case option != "" && option != "ORIG" && option != "PATH" && option != "ORIG_OR_PATH":
		c.add(never, "%s: the path part of %%PATH%% must be ORIG, PATH or ORIG_OR_PATH, got %s", shown(o.text), shown(option))
	}
}

// commonDuration is START:END or START:END:PRECISION.
func commonDuration(c *checker, o call) {
	parts := strings.Split(o.arg, ":")
	switch {
	case len(parts) < 2 || len(parts) > 3:
		c.add(never, "%s: %%COMMON_DURATION%% takes START:END or START:END:PRECISION", shown(o.text))
	case len(parts) == 3 && parts[2] != "ms" && parts[2] != "us" && parts[2] != "ns":
		c.add(never, "%s: the precision of %%COMMON_DURATION%% must be ms, us or ns, got %s", shown(o.text), shown(parts[2]))
	}
}

// filterState is KEY, KEY:PLAIN, KEY:TYPED or KEY:FIELD:NAME; Envoy
// ignores anything after a third colon.
func filterState(c *checker, o call) {
	parts := strings.SplitN(o.arg, ":", 4)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	key, form, field := parts[0], parts[1], parts[2]
	switch {
	case key == "":
		c.add(never, "%s: %%%s%% needs a filter state key, %%%s(KEY)%% or %%%s(KEY:PLAIN)%%", shown(o.text), o.name, o.name, o.name)
	case form != "" && form != "PLAIN" && form != "TYPED" && form != "FIELD":
		c.add(never, "%s: the serialization of %%%s%% must be PLAIN, TYPED or FIELD, got %s", shown(o.text), o.name, shown(form))
	case (form == "FIELD") != (field != ""):
		c.add(never, "%s: %%%s%% takes a field name with FIELD and only with it, KEY:FIELD:NAME", shown(o.text), o.name)
	}
}

// metadataKinds are the kinds %METADATA(KIND:NAMESPACE:KEY)% reads.
var metadataKinds = []string{"DYNAMIC", "CLUSTER", "ROUTE", "UPSTREAM_HOST", "LISTENER", "VIRTUAL_HOST"}

func metadata(c *checker, o call) {
	kind, _, _ := strings.Cut(o.arg, ":")
	if !slices.Contains(metadataKinds, kind) {
		c.add(never, "%s: %%METADATA%% takes KIND:NAMESPACE:KEY, KIND one of %s", shown(o.text), strings.Join(metadataKinds, ", "))
	}
}

// xfccKeys are the x-forwarded-client-cert keys %XFCC_VALUE(key)% reads,
// in any case.
var xfccKeys = []string{"by", "hash", "cert", "chain", "subject", "uri", "dns"}

func xfccValue(c *checker, o call) {
	if !slices.Contains(xfccKeys, asciiLower(o.arg)) {
		c.add(never, "%s: %%XFCC_VALUE%% takes one of the keys %s", shown(o.text), strings.Join(xfccKeys, ", "))
	}
}

// asciiLower lower-cases ASCII letters only, as Envoy's LowerCaseString.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func celArg(c *checker, o call) {
	for _, p := range checkCEL(o.arg) {
		if p.deliberate {
			c.deliberate("%s: %s", shown(o.text), p.msg)
		} else {
			c.add(p.since, "%s: %s", shown(o.text), p.msg)
		}
	}
}
