package cli

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// Listing states status --state takes beside the rollout states.
const (
	stateSilent      = "Silent"
	stateUnconnected = "Unconnected"
)

// statusFilter is status's --state and --proxy: the status's lists of
// proxies (the rollout's and the canary record's) cut to the proxies
// asked for. The counts are never cut.
type statusFilter struct{ state, proxy, cluster string }

func (f *statusFilter) define(fs *flag.FlagSet) {
	fs.StringVar(&f.state, "state", "", "list only the proxies in this state: NACKed, Stale, Pending, Synced, Silent or Unconnected")
	fs.StringVar(&f.proxy, "proxy", "", "list only the proxy of this name (POD.NAMESPACE, as istioctl proxy-status shows it)")
	fs.StringVar(&f.cluster, "cluster", "", "list only the proxies, istiods and cluster entries of this config cluster (a name status lists under clusters)")
}

func (f statusFilter) active() bool { return f.state != "" || f.proxy != "" || f.cluster != "" }

// states are the states --state takes, in display order.
func filterStates() []string {
	out := make([]string, 0, len(rollout.States)+2)
	for _, s := range rollout.States {
		out = append(out, string(s))
	}
	return append(out, stateSilent, stateUnconnected)
}

// check makes --state's case canonical, or says what it takes.
func (f *statusFilter) check() error {
	if f.state == "" {
		return nil
	}
	for _, s := range filterStates() {
		if strings.EqualFold(s, f.state) {
			f.state = s
			return nil
		}
	}
	return fmt.Errorf("--state %s: want one of %s", f.state, strings.Join(filterStates(), ", "))
}

func (f statusFilter) keep(name, state string) bool {
	return (f.proxy == "" || name == f.proxy || strings.HasSuffix(name, "/"+f.proxy)) && (f.state == "" || state == f.state)
}

// inCluster says whether an entry of cluster (its member, "" on a
// single-cluster status) is kept.
func (f statusFilter) inCluster(cluster string) bool { return f.cluster == "" || cluster == f.cluster }

// apply is a copy of st with its lists of proxies cut to those f asks
// for, and a note for people on what the status does not list; found
// says whether any proxy is left.
func (f statusFilter) apply(st *status.Status) (out *status.Status, note string, found bool) {
	c := *st
	if f.cluster != "" {
		c.Clusters = slices.DeleteFunc(slices.Clone(st.Clusters), func(e status.Cluster) bool { return e.Name != f.cluster })
	}
	if r := st.Canary; r != nil {
		rec := *r
		rec.Canaries = slices.DeleteFunc(slices.Clone(r.Canaries), func(a canary.Answer) bool { return !f.keep(a.Name, a.State) })
		rec.NACKs = slices.DeleteFunc(slices.Clone(r.NACKs), func(a canary.Answer) bool { return !f.keep(a.Name, a.State) })
		c.Canary = &rec
		found = len(rec.Canaries) > 0 || len(rec.NACKs) > 0
	}
	if st.Rollout == nil {
		return &c, f.missing(st, found), found
	}
	r := *st.Rollout
	r.Proxies = slices.DeleteFunc(slices.Clone(r.Proxies), func(p rollout.Proxy) bool { return !f.keep(p.Name, string(p.State)) || !f.inCluster(p.Cluster) })
	r.Canaries = slices.DeleteFunc(slices.Clone(r.Canaries), func(p rollout.Proxy) bool { return !f.keep(p.Name, string(p.State)) || !f.inCluster(p.Cluster) })
	r.Unlabelled = slices.DeleteFunc(slices.Clone(r.Unlabelled), func(n string) bool {
		cluster, _, ok := strings.Cut(n, "/")
		return f.state != "" || !f.keep(n, "") || (f.cluster != "" && (!ok || cluster != f.cluster))
	})
	r.Silent = slices.DeleteFunc(slices.Clone(r.Silent), func(p rollout.Silent) bool { return !f.keep(p.Name, stateSilent) || !f.inCluster(p.Cluster) })
	r.Unconnected = slices.DeleteFunc(slices.Clone(r.Unconnected), func(p rollout.Unconnected) bool {
		return !f.keep(p.Name, stateUnconnected) || !f.inCluster(p.Cluster)
	})
	if f.cluster != "" {
		r.Istiod = slices.DeleteFunc(slices.Clone(r.Istiod), func(i rollout.Istiod) bool { return i.Cluster != f.cluster })
		r.Clusters = slices.DeleteFunc(slices.Clone(r.Clusters), func(m rollout.ClusterCount) bool { return m.Name != f.cluster })
	}
	// The filtered lists say nothing of the proxies the status leaves
	// out: the note does.
	r.Unlisted, r.CanariesUnlisted, r.UnlabelledUnlisted, r.SilentUnlisted, r.UnconnectedUnlisted = 0, 0, 0, 0, 0
	c.Rollout = &r
	found = found || len(r.Proxies)+len(r.Canaries)+len(r.Unlabelled)+len(r.Silent)+len(r.Unconnected) > 0
	return &c, f.missing(st, found), found
}

// missing says what the status does not list of what f asks for.
func (f statusFilter) missing(st *status.Status, found bool) string {
	r := st.Rollout
	if f.proxy != "" && !found {
		if r == nil {
			return fmt.Sprintf("proxy %s is not in the status: it has no rollout", f.proxy)
		}
		return fmt.Sprintf("proxy %s is not in the status%s: %s", f.proxy, why(r), r.Summary())
	}
	if f.state == "" || r == nil {
		return ""
	}
	var total, listed int
	switch f.state {
	case stateSilent:
		total, listed = len(r.Silent)+r.SilentUnlisted, len(r.Silent)
	case stateUnconnected:
		total, listed = len(r.Unconnected)+r.UnconnectedUnlisted, len(r.Unconnected)
	default:
		total = r.Count(rollout.State(f.state))
		for _, p := range r.Proxies {
			if string(p.State) == f.state {
				listed++
			}
		}
	}
	if listed == total {
		return ""
	}
	return fmt.Sprintf("%d of %d %s proxies listed%s", listed, total, f.state, why(r))
}

// why says why r leaves proxies out.
func why(r *rollout.Status) string {
	if r.Selected > rollout.ListAll {
		return fmt.Sprintf(" (of more than %d proxies the status lists only those that need attention, NACKed and Stale, at most %d of each kind, in at most %d KiB; the counts cover every proxy)",
			rollout.ListAll, rollout.MaxListed, rollout.MaxBytes>>10)
	}
	if r.Unlisted+r.CanariesUnlisted+r.UnlabelledUnlisted+r.SilentUnlisted+r.UnconnectedUnlisted > 0 {
		return fmt.Sprintf(" (the status lists at most %d of each kind, in at most %d KiB; the counts cover every proxy)", rollout.MaxListed, rollout.MaxBytes>>10)
	}
	return ""
}
