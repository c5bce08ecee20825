package facts

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/globalconfig/globalconfig/items"
)

// Clusters answers document.Facts for every config cluster at once: the
// home cluster's Resolver and one per member. A service is in order only
// where every cluster has it: a member that lacks it is a warning that
// names the member (its proxies do what the item says they do without
// the service), and a reference istiod would never resolve in the home
// cluster is refused as before. With no member, it answers exactly as the
// home Resolver does. It is safe for concurrent use.
type Clusters struct {
	Home     *Resolver
	HomeName string

	mu      sync.Mutex
	members map[string]*Resolver
}

// Set makes r the Resolver of member name (nil removes it).
func (c *Clusters) Set(name string, r *Resolver) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members == nil {
		c.members = map[string]*Resolver{}
	}
	if r == nil {
		delete(c.members, name)
		return
	}
	c.members[name] = r
}

func (c *Clusters) snapshot() ([]string, map[string]*Resolver) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.members))
	for n := range c.members {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, c.members
}

// Service implements document.Facts.
func (c *Clusters) Service(ref items.ServiceRef) items.ServiceFact {
	home := c.Home.Service(ref)
	names, members := c.snapshot()
	if len(names) == 0 || home.Refuse {
		return home
	}
	var warned []string
	if home.Warn {
		warned = append(warned, fmt.Sprintf("in cluster %s (home): %s", c.HomeName, home.Msg))
	}
	for _, n := range names {
		if f := members[n].Service(ref); f.Warn || f.Refuse {
			// A name istiod would not resolve is the home cluster's to
			// refuse; in a member it only means no cluster there.
			warned = append(warned, fmt.Sprintf("in cluster %s: %s", n, f.Msg))
		}
	}
	if len(warned) == 0 {
		return items.ServiceFact{}
	}
	return items.ServiceFact{Warn: true, Msg: joinClusterWarnings(warned)}
}

// joinClusterWarnings joins per-cluster warnings so that NotInEffect
// still reads the consequence: it is said once, at the end.
func joinClusterWarnings(ws []string) string {
	var causes []string
	consequence := ""
	for _, w := range ws {
		cause, cons, ok := strings.Cut(w, notInEffect)
		if ok {
			consequence = cons
		}
		causes = append(causes, cause)
	}
	msg := strings.Join(causes, "; ")
	if consequence != "" {
		msg += notInEffect + consequence
	}
	return msg
}
