package preflight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/globalconfig/globalconfig/pkg/plan"
)

// Change is one Envoy resource the prediction changes.
type Change struct {
	Kind   string `json:"kind"` // listener, route, cluster
	Name   string `json:"name"`
	Change string `json:"change"` // added, removed or changed
	// Diff is the unified diff of the resource's JSON, current to
	// predicted.
	Diff string `json:"diff"`
}

// resource is one named resource of a Config.
type resource struct {
	kind, name string
	msg        proto.Message
}

func (c *Config) resources() []resource {
	var out []resource
	for _, l := range c.Listeners {
		out = append(out, resource{"listener", l.GetName(), l})
	}
	for _, r := range c.Routes {
		out = append(out, resource{"route", r.GetName(), r})
	}
	for _, cl := range c.Clusters {
		out = append(out, resource{"cluster", cl.GetName(), cl})
	}
	return out
}

// json is m as indented JSON, typed configs expanded.
func (c *Config) json(m proto.Message) (string, error) {
	r := c.res
	if r == nil {
		r = newResolver()
	}
	b, err := protojson.MarshalOptions{Resolver: r, UseProtoNames: true}.Marshal(m)
	if err == nil {
		b, err = r.expand(b)
	}
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return "", err
	}
	out.WriteByte('\n')
	return out.String(), nil
}

// Changes are the resources that differ between Before and After, in the
// order listeners, routes, clusters, each by name.
func (p *Prediction) Changes() ([]Change, error) {
	type pair struct{ before, after *resource }
	byKey := map[string]*pair{}
	var keys []string
	add := func(rs []resource, after bool) {
		for i := range rs {
			k := rs[i].kind + "\x00" + rs[i].name
			pr := byKey[k]
			if pr == nil {
				pr = &pair{}
				byKey[k] = pr
				keys = append(keys, k)
			}
			if after {
				pr.after = &rs[i]
			} else {
				pr.before = &rs[i]
			}
		}
	}
	add(p.Before.resources(), false)
	add(p.After.resources(), true)
	rank := map[string]int{"listener": 0, "route": 1, "cluster": 2}
	slices.SortFunc(keys, func(a, b string) int {
		ra, rb := byKey[a], byKey[b]
		x, y := ra.before, rb.before
		if x == nil {
			x = ra.after
		}
		if y == nil {
			y = rb.after
		}
		if rank[x.kind] != rank[y.kind] {
			return rank[x.kind] - rank[y.kind]
		}
		if x.name < y.name {
			return -1
		}
		if x.name > y.name {
			return 1
		}
		return 0
	})
	var out []Change
	for _, k := range keys {
		pr := byKey[k]
		var b, a string
		var err error
		ch := Change{}
		switch {
		case pr.before == nil:
			ch.Kind, ch.Name, ch.Change = pr.after.kind, pr.after.name, "added"
		case pr.after == nil:
			ch.Kind, ch.Name, ch.Change = pr.before.kind, pr.before.name, "removed"
		default:
			if proto.Equal(pr.before.msg, pr.after.msg) {
				continue
			}
			ch.Kind, ch.Name, ch.Change = pr.before.kind, pr.before.name, "changed"
		}
		if pr.before != nil {
			if b, err = p.Before.json(pr.before.msg); err != nil {
				return nil, fmt.Errorf("%s %s: %w", ch.Kind, ch.Name, err)
			}
		}
		if pr.after != nil {
			if a, err = p.After.json(pr.after.msg); err != nil {
				return nil, fmt.Errorf("%s %s: %w", ch.Kind, ch.Name, err)
			}
		}
		if a == b {
			// Equal content, different encoding of a typed config.
			continue
		}
		label := ch.Kind + " " + ch.Name
		ch.Diff = plan.Unified(label+" (now)", label+" (predicted)", b, a)
		out = append(out, ch)
	}
	return out, nil
}

// Canonical is c as one text: every listener, route configuration and
// cluster as JSON with typed configs unpacked, sorted by kind and name.
// Two configs are equal as protos exactly when their canonical texts are.
func (c *Config) Canonical() (string, error) {
	rs := c.resources()
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		js, err := c.json(r.msg)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", r.kind, r.name, err)
		}
		parts = append(parts, r.kind+" "+r.name+"\n"+js)
	}
	slices.Sort(parts)
	return strings.Join(parts, ""), nil
}
