// Package basicauth is the `basicAuth` item: every request through the
// gateway must carry the user name and password of one of a list of users
// (HTTP basic authentication, RFC 7617), checked by Envoy's basic_auth
// filter against htpasswd lines: a file mounted into the gateway pods from
// a Secret, or lines inline in the document (ingress-nginx's auth-type:
// basic, Envoy Gateway's SecurityPolicy basicAuth). Requests opt out by
// path and host with the `skip` keys every request-checking item shares
// (items/internal/skip).
package basicauth

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"path"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	basicauthv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/basic_auth/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/items"
	"github.com/globalconfig/globalconfig/items/internal/skip"
)

// Name is the item's key in the document.
const Name = "basicAuth"

// The filters the item inserts, under names of its own (EnvoyFilters
// match filters by name).
const (
	// AuthFilter is the basic_auth filter.
	AuthFilter = "globalconfig.basic_auth"
	// ScopeFilter is the RBAC filter that marks the requests to check
	// (items/internal/skip).
	ScopeFilter = "globalconfig.basic_auth.scope"
	// StripFilter removes the client's own forwardUsername header before
	// anything else: a request that skips the check must not carry a
	// forged user name to the backend either.
	StripFilter = "globalconfig.basic_auth.strip"
)

// The scope filter's mark.
const (
	// ShadowStatPrefix prefixes the scope filter's statistics
	// (http.<prefix>.rbac.globalconfig_basic_auth_.shadow_denied: requests
	// checked; .shadow_allowed: requests opted out).
	ShadowStatPrefix = "globalconfig_basic_auth_"
	// PolicyCheck is the policy of the requests to check.
	PolicyCheck = "basicAuth.check"
)

var marker = skip.Marker{StatPrefix: ShadowStatPrefix, Policy: PolicyCheck}

// Limits.
const (
	// MaxUsers bounds the inline users: each is kept in every gateway's
	// memory, and the document is stored in a ConfigMap.
	MaxUsers = 1000
	// shaScheme is the only hash scheme Envoy's basic_auth accepts: the
	// base64 of the password's SHA-1 digest (htpasswd -s).
	shaScheme = "{SHA}"
	// shaLength is the length of that base64 (Envoy refuses any other).
	shaLength = 28
)

// BasicAuth is the `basicAuth` section.
type BasicAuth struct {
	items.Toggle
	Users           string    `json:"users" doc:"htpasswd lines, inline: user:{SHA}base64-of-SHA-1, one per line, as htpasswd -nbs user password prints them; empty lines and lines starting with # are ignored. Envoy accepts only the {SHA} scheme (no bcrypt, MD5 or crypt). The hashes end up in the EnvoyFilter, readable by anyone who can read EnvoyFilters: prefer usersFile."`
	UsersFile       string    `json:"usersFile" doc:"The absolute path of an htpasswd file in the gateway pods (Envoy's users.filename), mounted from a Secret (see the reference). Envoy reads it when the listener loads: a missing or malformed file makes the gateway refuse the listener, and a change to the file needs the gateway to reload (a restart, or a change of this section)."`
	ForwardUsername string    `json:"forwardUsername" doc:"A request header that carries the authenticated user's name to the backend (Envoy's forward_username_header), e.g. x-user. The client's own headers of that name are removed first, on every request, opted out or not."`
	Skip            skip.Skip `json:"skip" doc:"Requests that pass without credentials, as for every request-checking item. Default: paths [/.well-known/acme-challenge] (Let's Encrypt's HTTP-01 challenges)."`
}

var (
	_ items.Item           = (*BasicAuth)(nil)
	_ items.ContextLimiter = (*BasicAuth)(nil)
	_ items.Texter         = (*BasicAuth)(nil)
	_ items.Warner         = (*BasicAuth)(nil)
	_ items.SecretHolder   = (*BasicAuth)(nil)
)

func init() {
	items.Register(items.Registration{
		Name:             Name,
		Summary:          "Gateway-wide HTTP basic authentication (ingress-nginx auth-type: basic): users from an htpasswd file mounted from a Secret or inline, with opt-outs by path and host and the user's name forwarded in a header.",
		Stage:            envoyfilter.StageTrafficPolicy,
		Slot:             1,
		Purpose:          "refuses requests without a known user's password, a check in the proxy's memory, before the auth service's call and the rate limits, which may key on the user",
		Where:            "HTTP filters (a header mutation that removes the client's own `forwardUsername` header, an RBAC filter in shadow mode that marks the requests to check when `skip` lists any, and basic_auth, wrapped in a matcher that skips it for the requests not marked)",
		EnabledByDefault: true,
		New: func() items.Item {
			return &BasicAuth{Skip: skip.Skip{Paths: []string{skip.ACMEChallenge}}}
		},
	})
}

// Texts implements items.Texter.
func (*BasicAuth) Texts() []items.Text {
	return append([]items.Text{
		{Path: "users", Kind: items.TextPlain},
		{Path: "usersFile", Kind: items.TextPlain},
		{Path: "forwardUsername", Kind: items.TextHeaderRead},
	}, skip.Texts("skip")...)
}

// ContextLimits implements items.ContextLimiter: the item is for gateways.
func (*BasicAuth) ContextLimits() []items.ContextLimit {
	return []items.ContextLimit{{Contexts: []envoyfilter.Context{envoyfilter.ContextGateway},
		Why: "a sidecar's callers are other services, which carry no user's password; for a workload, use a RequestAuthentication and an AuthorizationPolicy"}}
}

// Secrets implements items.SecretHolder: the inline hashes.
func (b *BasicAuth) Secrets() []string {
	var out []string
	for _, u := range ParseUsers(b.Users) {
		if u.Hash != "" {
			out = append(out, u.Hash)
		}
	}
	return out
}

// User is one htpasswd line as Envoy reads it.
type User struct {
	// Line is the line's number, from 1.
	Line int
	// Name is the user's name, before the first colon.
	Name string
	// Hash is what follows the colon, {SHA} included.
	Hash string
	// Err says why Envoy would refuse the line; nil when it takes it.
	Err error
}

// ParseUsers reads htpasswd lines as Envoy's basic_auth reads its users
// (source/extensions/filters/http/basic_auth/config.cc): lines split at
// \n only, empty lines and lines starting with # skipped, the name before
// the first colon, the {SHA} scheme with a 28-character hash, no name
// twice. Nothing is trimmed: Envoy trims nothing either, so a \r or a
// trailing space is part of the hash, whose length is then wrong.
func ParseUsers(s string) []User {
	var out []User
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), len(s)+1)
	sc.Split(splitNewline)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		u := User{Line: n}
		name, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			u.Err = fmt.Errorf("is no user:hash pair (no colon)")
		case name == "" || hash == "":
			u.Name, u.Hash = name, hash
			u.Err = fmt.Errorf("has an empty user name or hash")
		default:
			u.Name, u.Hash = name, hash
			if j, dup := seen[name]; dup {
				u.Err = fmt.Errorf("repeats the user %q of line %d", name, j)
			} else if !strings.HasPrefix(hash, shaScheme) {
				u.Err = fmt.Errorf("hashes %q's password with a scheme Envoy does not accept; it takes only {SHA} (htpasswd -nbs %s PASSWORD prints such a line), not bcrypt ($2y$), MD5 ($apr1$) or crypt", name, name)
			} else if l := len(hash) - len(shaScheme); l != shaLength {
				u.Err = fmt.Errorf("has a {SHA} hash of %d characters for %q; Envoy takes the 28-character base64 of a SHA-1 digest (a \\r or a space at the end counts)", l, name)
			}
			if _, dup := seen[name]; !dup {
				seen[name] = n
			}
		}
		out = append(out, u)
	}
	return out
}

// splitNewline splits at \n only, as std::getline does.
func splitNewline(data []byte, atEOF bool) (int, []byte, error) {
	if i := strings.IndexByte(string(data), '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// Validate implements items.Item.
func (b *BasicAuth) Validate() error {
	var p items.Problems
	switch {
	case b.Users != "" && b.UsersFile != "":
		p.Addf("usersFile", "give either users or usersFile, not both: Envoy reads the users from one source")
	case b.Enable && b.Users == "" && b.UsersFile == "":
		p.Addf("users", "is required: the htpasswd lines of the users to let in, or usersFile, the path of an htpasswd file mounted into the gateway pods")
	}
	if b.Users != "" {
		users := ParseUsers(b.Users)
		n := 0
		for _, u := range users {
			if u.Err != nil {
				p.Addf("users", "line %d %v", u.Line, u.Err)
				continue
			}
			n++
		}
		switch {
		case len(users) > MaxUsers:
			p.Addf("users", "has %d users; at most %d inline: put more in usersFile", len(users), MaxUsers)
		case len(users) == 0:
			p.Addf("users", "has no user line, only empty lines and comments: it sets nothing, and every request would be refused")
		}
	}
	if f := b.UsersFile; f != "" && (!strings.HasPrefix(f, "/") || path.Clean(f) != f || strings.ContainsAny(f, "\n\x00")) {
		p.Addf("usersFile", "must be an absolute, clean file path in the gateway pods, such as /etc/basic-auth/htpasswd, got %q", f)
	}
	switch h := strings.ToLower(b.ForwardUsername); {
	case h == "authorization":
		p.Addf("forwardUsername", "authorization carries the credentials basic_auth reads; name another header, such as x-user")
	case strings.HasPrefix(h, ":") || h == "host":
		p.Addf("forwardUsername", "%s routes the request: the user's name there would send it elsewhere; name another header, such as x-user", h)
	}
	b.Skip.Validate(&p, "skip")
	return p.Err()
}

// Warnings implements items.Warner.
func (b *BasicAuth) Warnings() error {
	var p items.Problems
	if b.UsersFile != "" {
		p.Addf("usersFile", "Envoy reads %s when it loads the listener: a gateway that does not mount it (or mounts an empty or malformed file) refuses the listener and serves nothing on it; target only the gateways that mount it (target.selector). Its content can't be checked before a pod mounts it", b.UsersFile)
	}
	if b.Users != "" {
		p.Addf("users", "the password hashes end up in the EnvoyFilter, readable by anyone who can read EnvoyFilters (and SHA-1 hashes are fast to guess): mount an htpasswd file from a Secret and give usersFile instead")
		for _, u := range ParseUsers(b.Users) {
			if u.Err != nil {
				continue
			}
			if d, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(u.Hash, shaScheme)); err != nil || len(d) != 20 {
				p.Addf("users", "line %d: %q's hash is no base64 of a SHA-1 digest: Envoy loads it, but no password matches it", u.Line, u.Name)
			}
		}
	}
	return p.Err()
}

// Build implements items.Item.
func (b *BasicAuth) Build() ([]envoyfilter.Patch, error) {
	cfg := &basicauthv3.BasicAuth{ForwardUsernameHeader: strings.ToLower(b.ForwardUsername)}
	if b.UsersFile != "" {
		cfg.Users = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: b.UsersFile}}
	} else {
		cfg.Users = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.Users}}
	}
	patches, err := b.Skip.Filters(marker, ScopeFilter, AuthFilter, cfg)
	if err != nil {
		return nil, err
	}
	if b.ForwardUsername != "" {
		strip, err := envoyfilter.InsertHTTPFilter(StripFilter, &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
			RequestMutations: []*mutationrulesv3.HeaderMutation{{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: strings.ToLower(b.ForwardUsername)}}},
		}})
		if err != nil {
			return nil, err
		}
		patches = append(patches, strip)
	}
	return patches, nil
}
