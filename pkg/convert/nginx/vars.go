package nginx

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// operator is the Envoy command operator an nginx variable becomes, and
// how its meaning differs, if it does.
type operator struct {
	op   string
	note string
}

// variables are nginx's and ingress-nginx's variables with an Envoy
// command operator. Each carries over with the meaning its note gives;
// every other variable has no equivalent.
var variables = map[string]operator{
	"remote_addr":        {"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", ""},
	"remote_port":        {"%DOWNSTREAM_REMOTE_PORT%", ""},
	"realip_remote_addr": {"%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%", ""},
	"server_addr":        {"%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%", ""},
	"server_port":        {"%DOWNSTREAM_LOCAL_PORT%", ""},
	"time_local":         {"%START_TIME(%d/%b/%Y:%H:%M:%S %z)%", "the time the request started (nginx logs when it ended)"},
	"time_iso8601":       {"%START_TIME(%Y-%m-%dT%H:%M:%S%z)%", "the time the request started (nginx logs when it ended); the offset reads +0000, not +00:00"},
	"msec":               {"%START_TIME(%s.%3f)%", "the time the request started (nginx logs when it ended)"},
	"request":            {"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%", ""},
	"request_method":     {"%REQ(:METHOD)%", ""},
	"request_uri":        {"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", ""},
	"uri":                {"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "with the query string, which nginx's $uri leaves out"},
	"document_uri":       {"%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "with the query string, which nginx's $document_uri leaves out"},
	"host":               {"%REQ(:AUTHORITY)%", "with the port when the client sent one, which nginx's $host strips"},
	"http_host":          {"%REQ(:AUTHORITY)%", ""},
	"server_protocol":    {"%PROTOCOL%", ""},
	"scheme":             {"%REQ(X-FORWARDED-PROTO)%", "the x-forwarded-proto Envoy sets at the gateway"},
	"status":             {"%RESPONSE_CODE%", ""},
	"body_bytes_sent":    {"%BYTES_SENT%", ""},
	"bytes_sent":         {"%DOWNSTREAM_WIRE_BYTES_SENT%", ""},
	"request_length":     {"%DOWNSTREAM_WIRE_BYTES_RECEIVED%", ""},
	"request_time":       {"%DURATION%", "milliseconds, an integer (nginx: seconds with millisecond resolution)"},
	"upstream_addr":      {"%UPSTREAM_HOST%", ""},
	"upstream_response_time": {"%RESPONSE_DURATION%",
		"milliseconds from the request's start to the first byte of the response (nginx: seconds from connecting to the upstream to its last byte)"},
	"upstream_header_time": {"%RESPONSE_DURATION%",
		"milliseconds from the request's start to the first byte of the response (nginx: seconds from connecting to the upstream)"},
	"upstream_response_length": {"%UPSTREAM_WIRE_BYTES_RECEIVED%", "bytes on the wire, headers included"},
	"upstream_bytes_received":  {"%UPSTREAM_WIRE_BYTES_RECEIVED%", ""},
	"upstream_bytes_sent":      {"%UPSTREAM_WIRE_BYTES_SENT%", ""},
	"upstream_status":          {"%RESPONSE_CODE%", "the status sent to the client: the upstream's, or Envoy's own when it answered (nginx logs - then)"},
	"req_id":                   {"%REQ(X-REQUEST-ID)%", ""},
	"request_id":               {"%REQ(X-REQUEST-ID)%", "the x-request-id Envoy generated or kept"},
	"proxy_upstream_name":      {"%UPSTREAM_CLUSTER%", "Istio's cluster name, outbound|PORT||HOST, instead of NAMESPACE-SERVICE-PORT"},
	"ssl_protocol":             {"%DOWNSTREAM_TLS_VERSION%", ""},
	"ssl_cipher":               {"%DOWNSTREAM_TLS_CIPHER%", ""},
	"ssl_session_id":           {"%DOWNSTREAM_TLS_SESSION_ID%", ""},
	"ssl_server_name":          {"%REQUESTED_SERVER_NAME%", ""},
	"ssl_client_s_dn":          {"%DOWNSTREAM_PEER_SUBJECT%", ""},
	"connection":               {"%CONNECTION_ID%", ""},
	"hostname":                 {"%HOSTNAME%", "the gateway pod's name"},
	"upstream_connect_time":    {"", "Envoy logs no upstream connect time"},
}

// variable matches $name and ${name}.
var variable = regexp.MustCompile(`\$(\{[A-Za-z0-9_]+\}|[A-Za-z0-9_]+)`)

// translation is an nginx string with variables turned into Envoy's
// substitution format.
type translation struct {
	text    string
	missing []string // variables with no Envoy equivalent, written as "-"
	notes   []string // how translated variables differ
}

// lookup returns the operator for one variable, by name.
func lookup(name string) (operator, bool) {
	if o, ok := variables[name]; ok {
		return o, o.op != ""
	}
	for _, p := range []struct{ prefix, op, note string }{
		{"http_", "REQ", ""},
		{"sent_http_", "RESP", ""},
		{"upstream_http_", "RESP", "the header as sent to the client"},
	} {
		if h, ok := strings.CutPrefix(name, p.prefix); ok && h != "" {
			return operator{fmt.Sprintf("%%%s(%s)%%", p.op, strings.ToUpper(strings.ReplaceAll(h, "_", "-"))), p.note}, true
		}
	}
	return operator{}, false
}

// translate turns nginx variables into command operators; a literal %
// becomes %%. A variable with no equivalent becomes "-", as nginx logs an
// empty value, and is listed.
func translate(s string) translation {
	var t translation
	var b strings.Builder
	last := 0
	for _, m := range variable.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(strings.ReplaceAll(s[last:m[0]], "%", "%%"))
		last = m[1]
		name := strings.Trim(s[m[2]:m[3]], "{}")
		o, ok := lookup(name)
		if !ok {
			b.WriteString("-")
			if !slices.Contains(t.missing, "$"+name) {
				t.missing = append(t.missing, "$"+name)
			}
			continue
		}
		b.WriteString(o.op)
		if o.note != "" {
			if note := "$" + name + ": " + o.note; !slices.Contains(t.notes, note) {
				t.notes = append(t.notes, note)
			}
		}
	}
	b.WriteString(strings.ReplaceAll(s[last:], "%", "%%"))
	t.text = b.String()
	return t
}

// jsonFormat reads an nginx log format written as a flat JSON object
// (`{"status": $status, "uri": "$request_uri"}`) into field → format
// string; ok is false when it is not one. Variables may stand inside or
// outside the JSON strings.
func jsonFormat(s string) (fields map[string]string, order []string, ok bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return nil, nil, false
	}
	// Quote the variables that stand outside strings, so the text parses
	// as JSON; a variable inside a string stays as it is.
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && ch == '\\':
			escaped = true
		case ch == '"':
			inString = !inString
		case !inString && ch == '$':
			loc := variable.FindStringIndex(s[i:])
			if loc != nil && loc[0] == 0 {
				b.WriteString(`"` + s[i:i+loc[1]] + `"`)
				i += loc[1] - 1
				continue
			}
		}
		b.WriteByte(ch)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(b.String()), &raw); err != nil {
		return nil, nil, false
	}
	fields = map[string]string{}
	dec := json.NewDecoder(strings.NewReader(b.String()))
	if _, err := dec.Token(); err != nil { // {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		key := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		switch v := v.(type) {
		case string:
			fields[key] = v
		case float64, bool:
			fields[key] = fmt.Sprint(v)
		default:
			return nil, nil, false // nested objects, lists and nulls: not flat
		}
		order = append(order, key)
	}
	return fields, order, true
}
