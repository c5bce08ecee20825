package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// xDS type URLs whose sync decides a proxy's state: an EnvoyFilter
// patches listeners, clusters and route configurations, and a full push
// resends all three.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// watchedTypes are the types checked, with the short names messages use.
var watchedTypes = []struct{ url, short string }{
	{ListenerType, "LDS"}, {ClusterType, "CDS"}, {RouteType, "RDS"},
}

// ProxySync is one entry of istiod's /debug/syncz: one connected proxy.
// Only the fields rollout reads are decoded.
type ProxySync struct {
	ProxyID      string `json:"proxy"`
	ProxyType    string `json:"proxy_type"`
	IstioVersion string `json:"istio_version"`
	// Resources is, per type URL, what istiod sent and what was ACKed.
	Resources map[string]ResourceSync `json:"resources"`
}

// ResourceSync is istiod's record of one xDS type of one proxy.
type ResourceSync struct {
	Sent     string    `json:"sent"`
	Acked    string    `json:"acked"`
	SentTime time.Time `json:"sentTime"`
	// LastError is Envoy's message of the last NACK; istiod clears it on
	// the next ACK.
	LastError string `json:"lastError"`
}

// Namespace is the proxy's namespace, from its node ID
// (TYPE~IP~POD.NAMESPACE~DOMAIN).
func (p ProxySync) Namespace() string {
	_, ns, _ := strings.Cut(p.Name(), ".")
	return ns
}

// Name is POD.NAMESPACE, as istioctl proxy-status shows a proxy.
func (p ProxySync) Name() string {
	parts := strings.Split(p.ProxyID, "~")
	if len(parts) != 4 {
		return p.ProxyID
	}
	return parts[2]
}

// Kind is "gateway" for a router, "sidecar" for a sidecar, else
// istiod's node type (waypoints and ztunnels take no EnvoyFilter).
func (p ProxySync) Kind() string {
	switch p.ProxyType {
	case "router":
		return "gateway"
	case "sidecar":
		return "sidecar"
	}
	if p.ProxyType == "" {
		if t, _, ok := strings.Cut(p.ProxyID, "~"); ok {
			return ProxySync{ProxyType: t}.Kind()
		}
	}
	return p.ProxyType
}

// Source lists the istiod instances to ask.
type Source interface {
	// Endpoints returns the base URLs of istiod's HTTP debug port, e.g.
	// http://10.0.0.12:8080, one per instance; err says why they could not
	// be listed.
	Endpoints() ([]string, error)
}

// Static is a fixed list of istiod base URLs.
type Static []string

// Endpoints returns the list.
func (s Static) Endpoints() ([]string, error) { return s, nil }

// Client asks one istiod for its sync status.
type Client struct {
	HTTP *http.Client
	// TokenFile, when set, holds a ServiceAccount token with the audience
	// istio-ca, sent as a Bearer token: istiod serves its debug endpoints
	// without one only to localhost. It is read on every request (the
	// kubelet rotates it) and never logged.
	TokenFile string
	// ClusterID, when set with TokenFile, is sent as the ClusterID
	// header: the cluster whose API server istiod asks to review the
	// token. The controller's token is its home cluster's, so a member's
	// istiod checks it with its remote secret for the home cluster (a
	// multi-primary mesh has one).
	ClusterID string
	// Read, when set, is told of every answer read: the endpoint (its
	// path, without the query) and its size in bytes.
	Read func(endpoint string, bytes int)
}

// RequestTimeout bounds one request to one istiod.
const RequestTimeout = 5 * time.Second

// MaxResponse bounds the syncz answer read: 64 MiB is well over 100k
// proxies.
const MaxResponse = 64 << 20

// Syncz returns what the istiod at base reports: of every proxy, or
// only of those in the namespaces given (istiod filters on the proxy's
// namespace, one request each).
func (c *Client) Syncz(ctx context.Context, base string, namespaces ...string) ([]ProxySync, error) {
	if len(namespaces) == 0 {
		return c.syncz(ctx, base, "/debug/syncz")
	}
	var out []ProxySync
	for _, ns := range namespaces {
		some, err := c.syncz(ctx, base, "/debug/syncz?namespace="+url.QueryEscape(ns))
		if err != nil {
			return nil, err
		}
		out = append(out, some...)
	}
	return out, nil
}

func (c *Client) syncz(ctx context.Context, base, path string) ([]ProxySync, error) {
	body, err := c.get(ctx, base, path)
	if err != nil {
		return nil, err
	}
	var out []ProxySync
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode /debug/syncz: %w", err)
	}
	return out, nil
}

// adsClient is the part of one entry of istiod's /debug/adsz that
// rollout reads: the connection (node ID and a counter) and the proxy's
// labels.
type adsClient struct {
	ConnectionID string `json:"connectionId"`
	Metadata     struct {
		Labels map[string]string `json:"LABELS"`
	} `json:"metadata"`
}

// Connected is one proxy connected to an istiod, with the labels its
// EnvoyFilters' workload selectors match. Its ProxySync has the ID only:
// adsz names a proxy by POD.NAMESPACE, without its type.
type Connected struct {
	ProxySync
	Labels map[string]string
	// ConnectionID is istiod's name of the connection: POD.NAMESPACE-N.
	ConnectionID string
}

// Connected returns every proxy connected to the istiod at base
// (/debug/adsz), with its labels. The labels are those the proxy
// connected with: a pod template's labels, not one added to a running pod
// later.
func (c *Client) Connected(ctx context.Context, base string) ([]Connected, error) {
	body, err := c.get(ctx, base, "/debug/adsz")
	if err != nil {
		return nil, err
	}
	var ads struct {
		Clients []adsClient `json:"clients"`
	}
	if err := json.Unmarshal(body, &ads); err != nil {
		return nil, fmt.Errorf("decode /debug/adsz: %w", err)
	}
	out := make([]Connected, 0, len(ads.Clients))
	for _, a := range ads.Clients {
		// A connection ID is the node ID, "-" and a counter.
		id := a.ConnectionID
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			id = id[:i]
		}
		labels := a.Metadata.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		out = append(out, Connected{ProxySync: ProxySync{ProxyID: id}, Labels: labels, ConnectionID: a.ConnectionID})
	}
	return out, nil
}

// labelsByName is the labels of proxies by Name.
func labelsByName(proxies []Connected) map[string]map[string]string {
	out := make(map[string]map[string]string, len(proxies))
	for _, p := range proxies {
		out[p.Name()] = p.Labels
	}
	return out
}

// configObject is the part of one entry of istiod's /debug/configz that
// rollout reads.
type configObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// Configz returns globalconfig's EnvoyFilters as the istiod at base holds
// them in its configuration store (/debug/configz, from the API server or
// over MCP alike): namespace/name → content hash.
func (c *Client) Configz(ctx context.Context, base string) (map[string]string, error) {
	body, err := c.get(ctx, base, "/debug/configz")
	if err != nil {
		return nil, err
	}
	var objs []configObject
	if err := json.Unmarshal(body, &objs); err != nil {
		return nil, fmt.Errorf("decode /debug/configz: %w", err)
	}
	out := map[string]string{}
	for _, o := range objs {
		if o.Kind == "EnvoyFilter" && o.Metadata.Labels[envoyfilter.LabelManagedBy] == envoyfilter.ManagedByValue {
			out[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Metadata.Annotations[envoyfilter.AnnotationContentHash]
		}
	}
	return out, nil
}

// get reads path from the istiod at base.
func (c *Client) get(ctx context.Context, base, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if c.TokenFile != "" {
		tok, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("read token file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		if c.ClusterID != "" {
			req.Header.Set("ClusterID", c.ClusterID)
		}
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
	if c.Read != nil {
		endpoint, _, _ := strings.Cut(path, "?")
		c.Read(endpoint, len(body))
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Path: path, Status: resp.Status, Code: resp.StatusCode, Body: firstLine(string(body), 200)}
	}
	return body, nil
}

// StatusError is an istiod debug endpoint answering other than 200.
type StatusError struct {
	Path, Status string
	Code         int
	Body         string // its first line, cut to 200 bytes
}

func (e *StatusError) Error() string {
	p, _, _ := strings.Cut(e.Path, "?")
	return fmt.Sprintf("%s answered %s: %s", p, e.Status, e.Body)
}

// ConfigDump returns the configuration the istiod at base generates for
// one connected proxy (/debug/config_dump), in the form of Envoy's admin
// config dump, without endpoints. conn is the proxy's connection ID as
// adsz reports it (POD.NAMESPACE-N).
func (c *Client) ConfigDump(ctx context.Context, base, conn string) ([]byte, error) {
	return c.get(ctx, base, "/debug/config_dump?proxyID="+url.QueryEscape(conn))
}

// PushCounter reads istiod's push counter from one of its nonces. istiod
// names each push "TIME/N", N counting its pushes since it started, and a
// nonce is that name followed by a 36-character UUID; pushes are ordered
// by N alone, whatever any clock says.
func PushCounter(nonce string) (uint64, bool) {
	const uuidLen = 36
	i := strings.LastIndexByte(nonce, '/')
	if i < 0 || len(nonce)-i-1 <= uuidLen {
		return 0, false
	}
	n, err := strconv.ParseUint(nonce[i+1:len(nonce)-uuidLen], 10, 64)
	return n, err == nil
}

// maxSent is the highest push counter istiod has sent any of proxies, 0
// when none reads.
func maxSent(proxies []ProxySync) uint64 {
	var top uint64
	for _, p := range proxies {
		for _, r := range p.Resources {
			if n, ok := PushCounter(r.Sent); ok && n > top {
				top = n
			}
		}
	}
	return top
}

// firstLine is s's first line, at most n bytes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return truncate(s, n)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
