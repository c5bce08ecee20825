package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/pkg/canary"
	"github.com/globalconfig/globalconfig/pkg/render"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// MaxTableMessage bounds a NACK message in status's text table; yaml and
// json carry it whole.
const MaxTableMessage = 100

// NoStatusMessage is what status says when the controller has written no
// status ConfigMap.
const NoStatusMessage = "no status yet: is the controller running?"

// RolloutNotTracked is status's rollout line when the status has no
// rollout key.
const RolloutNotTracked = "rollout: not tracked (the controller runs with --rollout=false or has not asked istiod yet)"

// statusCommand is `globalconfig status`: what the controller last did
// and how far the proxies took it, like istioctl proxy-status. -o json
// and -o yaml print the status object (package status) exactly as the
// controller wrote it; the text form is drawn from it alone.
func statusCommand(args []string, env Env) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var cf clusterFlags
	cf.define(fs)
	var filter statusFilter
	filter.define(fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, "globalconfig status: takes no arguments")
		return ExitUsage
	}
	if err := filter.check(); err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig status: %v\n", err)
		return ExitUsage
	}
	ns, name, code := cf.check("status", env)
	if code != ExitOK {
		return code
	}
	kube, _, code := cf.connect("status", env)
	if code != ExitOK {
		return code
	}
	statusName := status.ConfigMapName(name)
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(context.Background(), statusName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(env.Stderr, "globalconfig status: %s (ConfigMap %s/%s not found)\n", NoStatusMessage, ns, statusName)
		return ExitNoStatus
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig status: read configmap %s/%s: %v\n", ns, statusName, err)
		return ExitAPI
	}
	st, err := status.Read(cm.Data)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig status: ConfigMap %s/%s: %v (is the controller of another version?)\n", ns, statusName, err)
		return ExitNoStatus
	}
	if filter.cluster != "" {
		var names []string
		for _, c := range st.Clusters {
			names = append(names, c.Name)
		}
		if !slices.Contains(names, filter.cluster) {
			if len(names) == 0 {
				fmt.Fprintf(env.Stderr, "globalconfig status: --cluster %s: the status lists no clusters (the controller has no member Secrets)\n", filter.cluster)
			} else {
				fmt.Fprintf(env.Stderr, "globalconfig status: --cluster %s: no such cluster; the status lists %s\n", filter.cluster, strings.Join(names, ", "))
			}
			return ExitNoProxy
		}
	}
	note, found := "", true
	if filter.active() {
		st, note, found = filter.apply(st)
	}
	if cf.output == "text" {
		err = writeStatusText(env.Stdout, ns+"/"+name, st)
		if err == nil && note != "" {
			_, err = fmt.Fprintln(env.Stdout, note)
		}
	} else {
		err = writeStructured(env.Stdout, cf.output, st)
		if err == nil && note != "" {
			fmt.Fprintf(env.Stderr, "globalconfig status: %s\n", note)
		}
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig status: %v\n", err)
		return ExitIO
	}
	if !found && filter.proxy != "" {
		return ExitNoProxy
	}
	return ExitOK
}

// writeStatusText writes the status for people.
func writeStatusText(w io.Writer, configMap string, st *status.Status) error {
	ew := &errWriter{w: w}
	state := orDash(string(st.State))
	if n := len(st.NotInEffect); n > 0 {
		// Applied is not green while an item does nothing.
		what := "item is"
		if n > 1 {
			what = "items are"
		}
		state += fmt.Sprintf(", but %d %s not in effect", n, what)
	}
	ew.printf("ConfigMap %s: %s\n", configMap, state)
	if st.Message != "" {
		ew.printf("message: %s\n", st.Message)
	}
	if len(st.NotInEffect) > 0 {
		// Delivered, but doing nothing the document says: never to be
		// read as green.
		ew.printf("not in effect:\n")
		for _, p := range st.NotInEffect {
			ew.printf("  %s: %s\n", p.Path, p.Message)
		}
	}
	for _, l := range []struct {
		name    string
		entries []status.Problem
	}{{"errors", st.Errors}, {"warnings", st.Warnings}} {
		if len(l.entries) == 0 {
			ew.printf("%s: none\n", l.name)
			continue
		}
		ew.printf("%s:\n", l.name)
		for _, e := range l.entries {
			ew.printf("  %s\n", e)
		}
	}
	a := st.Applied
	if a != nil {
		change := render.Diff{Added: a.Change.Added, Changed: a.Change.Changed, Removed: a.Change.Removed}.String()
		if a.Change.Empty() {
			change = "-"
		}
		ew.printf("last change: %s (set %s applied %s)\n", change, a.Hash, a.Time.UTC().Format(time.RFC3339))
	}
	if r := st.Canary; r != nil && r.Direct() {
		writeDirect(ew, r)
	} else if r != nil {
		writeCanary(ew, r)
	}
	if lg := st.LastGood; lg != nil && lg.Problem != "" {
		ew.printf("last good copy (set %s): %s\n", orDash(lg.Hash), lg.Problem)
	}
	if a := st.Admission; a != nil && !a.Guarded {
		ew.printf("admission: edits are not checked before they are saved: %s\n", a.Reason)
	}
	if st.Sink != "" && st.Sink != "kube" {
		ew.printf("sink: %s\n", st.Sink)
	}
	if st.MCPNack != "" {
		ew.printf("istiod's last MCP NACK: %s\n", st.MCPNack)
	}
	writeClusters(ew, st.Clusters)
	writeDependents(ew, st.Dependents)
	writeBlame(ew, st.Blame)

	ew.printf("\n")
	if a == nil || len(a.EnvoyFilters) == 0 {
		ew.printf("no managed EnvoyFilters\n")
	} else {
		tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "ITEM\tENVOYFILTER\tLAST CHANGE")
		for _, ef := range a.EnvoyFilters {
			change := "-"
			if c := a.Change.Of(ef.Item); c != "" {
				change = c + " " + a.Time.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\n", orDash(ef.Item), ef.Namespace, ef.Name, change)
		}
		_ = tw.Flush()
	}

	ew.printf("\n")
	if st.Rollout == nil {
		if st.RolloutSummary != "" {
			ew.printf("rollout: %s\n", st.RolloutSummary)
		} else {
			ew.printf("%s\n", RolloutNotTracked)
		}
	} else {
		writeRollout(ew, st)
	}
	return ew.err
}

// MaxCanaryRows bounds the canaries status's text lists; -o json and -o
// yaml list every one the phase judges.
const MaxCanaryRows = 20

// writeCanary writes the canary rollout: its phase, what it rolls out,
// what it waits for, the traffic gate's figures, the canary proxies'
// answers and how it ended.
func writeCanary(ew *errWriter, r *canary.Record) {
	ew.printf("canary rollout: %s (document %s, set %s → %s): %s to proxies labelled %s=true first; bake time %s, %s must ACK with the canary copy; started %s\n",
		r.Phase, orDash(r.Document), orDash(r.From), orDash(r.To), orDash(strings.Join(r.Items, ", ")), r.Label, r.BakeTime, r.Needed,
		r.Started.UTC().Format(time.RFC3339))
	if r.PhaseTimeout != "" || r.Coverage != "" {
		ew.printf("  phase timeout %s, coverage %s", orDash(r.PhaseTimeout), orDash(r.Coverage))
		if r.Delivered != nil {
			ew.printf(", canary copies delivered %s", r.Delivered.UTC().Format(time.RFC3339))
		}
		ew.printf("\n")
	}
	if r.Waiting != "" {
		what := "waiting"
		if r.Phase == canary.Held {
			what = "held"
		}
		ew.printf("  %s: %s\n", what, r.Waiting)
	}
	if r.Ended != nil {
		by := ""
		if r.By != "" {
			by = " by an " + r.By
		}
		ew.printf("  %s%s %s: %s\n", r.Phase, by, r.Ended.UTC().Format(time.RFC3339), orDash(r.Message))
	}
	switch {
	case r.Phase == canary.Promoted && r.Confirmed != nil:
		ew.printf("  confirmed %s: every proxy answered for the promoted set without a NACK\n", r.Confirmed.UTC().Format(time.RFC3339))
	case r.Phase == canary.Promoted:
		ew.printf("  watching every proxy's answer to the promoted set: a NACK rolls it back\n")
	}
	if r.Warning != "" {
		ew.printf("  warning: %s\n", r.Warning)
	}
	if t := r.Traffic; t != nil {
		ew.printf("  traffic since %s: canaries %s; stable proxies %s\n  traffic: %s\n", t.Since.UTC().Format(time.RFC3339),
			figuresText(t.Canary), figuresText(t.Stable), t.Verdict)
	}
	if r.Phase == canary.InCanary {
		ew.printf("  promote now: globalconfig rollout promote; roll back: globalconfig rollout abort\n")
	}
	if len(r.Canaries) == 0 {
		if r.Phase != canary.Held {
			ew.printf("  no canary proxy has answered\n")
		}
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "  CANARY\tSTATE\tRECEIVED\tMESSAGE")
	for i, a := range r.Canaries {
		if i == MaxCanaryRows {
			break
		}
		received := "no"
		if a.Received {
			received = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Name, a.State, received, orDash(truncate(a.Message, MaxTableMessage)))
	}
	_ = tw.Flush()
	if n := len(r.Canaries) - MaxCanaryRows; n > 0 {
		ew.printf("  … and %d more canaries, every one judged (globalconfig status -o json lists them)\n", n)
	}
}

// figuresText is one group's traffic figures in a line.
func figuresText(f canary.Figures) string {
	return fmt.Sprintf("%.0f requests (%d of %d proxies read), %.0f 5xx, %.0f local replies, %.0f connection failures",
		f.Requests, f.Read, f.Proxies, f.Server5xx, f.LocalReplies, f.ConnectFailures)
}

// writeDirect writes a Direct rollout the proxies refused: what it rolled
// out, how it ended, what the proxies did with the restored set, and the
// proxies that refused.
func writeDirect(ew *errWriter, r *canary.Record) {
	ew.printf("direct rollout: %s (document %s, set %s → %s): %s to every proxy at once (rollbackOn %s); delivered %s\n",
		r.Phase, orDash(r.Document), orDash(r.From), orDash(r.To), orDash(strings.Join(r.Items, ", ")), orDash(string(r.RollbackOn)),
		r.Started.UTC().Format(time.RFC3339))
	if r.Ended != nil {
		ew.printf("  %s %s: %s\n", r.Phase, r.Ended.UTC().Format(time.RFC3339), orDash(r.Message))
	}
	switch {
	case r.Phase == canary.Kept && r.Restored != canary.RestoredRefused:
		// Kept on the blame of the refusal: never rolled back.
		ew.printf("  never rolled back: the blame named only EnvoyFilters globalconfig does not manage; the document is kept until it changes\n")
	case r.Phase == canary.Kept:
		ew.printf("  the restored last good set was refused as well: the document is kept until it changes\n")
	case r.Restored == canary.RestoredTaken:
		ew.printf("  the proxies took the restored last good set\n")
	default:
		ew.printf("  waiting for the proxies' answer to the restored last good set\n")
	}
	if len(r.NACKs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "  REFUSED BY\tMESSAGE")
	for _, a := range r.NACKs {
		fmt.Fprintf(tw, "  %s\t%s\n", a.Name, orDash(truncate(a.Message, MaxTableMessage)))
	}
	_ = tw.Flush()
}

// writeRollout writes the rollout summary, its proxies and the istiod
// instances that did not answer.
func writeRollout(ew *errWriter, st *status.Status) {
	r := st.Rollout
	summary := st.RolloutSummary
	if summary == "" {
		summary = r.Summary()
	}
	ew.printf("rollout: %s\n", summary)
	ew.printf("set %s written %s\n", orDash(r.Version), timeText(r.Since.IsZero(), r.Since.UTC().Format("2006-01-02T15:04:05Z")))
	if a := st.Applied; r.Version != "" && a != nil && r.Version != a.Hash {
		ew.printf("the rollout is of set %s, not of the applied set %s: the controller has not asked istiod since\n", r.Version, a.Hash)
	}
	if len(r.Proxies) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTYPE\tISTIO\tISTIOD\tSTATE\tMESSAGE")
		for _, p := range r.Proxies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, orDash(p.Type), orDash(p.IstioVersion), orDash(p.Istiod), p.State, orDash(truncate(p.Message, MaxTableMessage)))
		}
		_ = tw.Flush()
	}
	if r.CanariesUnlisted > 0 {
		ew.printf("… the status lists %d canaries and leaves %d out; the canary record judges every one\n", len(r.Canaries), r.CanariesUnlisted)
	}
	if r.Unlisted > 0 {
		noun := "proxies"
		if r.Unlisted == 1 {
			noun = "proxy"
		}
		ew.printf("… and %d more %s not listed%s\n", r.Unlisted, noun, why(r))
	}
	if r.UnlabelledUnlisted > 0 {
		ew.printf("… and %d more proxies without the canary label not listed\n", r.UnlabelledUnlisted)
	}
	for _, p := range r.Silent {
		ew.printf("silent: %s %s, no istiod reports it since %s (%s ago)\n", orDash(p.Type), p.Name,
			p.LastSeen.UTC().Format(time.RFC3339), now().Sub(p.LastSeen).Round(time.Second))
	}
	if r.SilentUnlisted > 0 {
		ew.printf("… and %d more silent proxies not listed\n", r.SilentUnlisted)
	}
	for _, p := range r.Unconnected {
		ew.printf("never connected: %s %s, its pod running since %s (%s)\n", orDash(p.Type), p.Name,
			p.Since.UTC().Format(time.RFC3339), now().Sub(p.Since).Round(time.Second))
	}
	if r.UnconnectedUnlisted > 0 {
		ew.printf("… and %d more never connected proxies not listed\n", r.UnconnectedUnlisted)
	}
	for _, i := range r.Unreachable() {
		ew.printf("istiod %s unreachable: %s\n", i.Address, i.Error)
	}
}

// now is the clock status prints durations against (tests).
var now = time.Now

// truncate puts s on one line of at most n characters, ending in "…" when
// cut.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeText(zero bool, s string) string {
	if zero {
		return "-"
	}
	return s
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

// writeClusters writes the config clusters the set goes to (multi-cluster
// only): each one's reach, the set it holds and since when.
func writeClusters(ew *errWriter, clusters []status.Cluster) {
	if len(clusters) == 0 {
		return
	}
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSECRET\tREACHED\tSET\tENVOYFILTERS\tSINCE\tERROR")
	for _, c := range clusters {
		name, secret := orDash(c.Name), orDash(c.Secret)
		if c.Home {
			name, secret = c.Name+" (home)", "-"
		}
		since := "-"
		if c.Since != nil {
			since = c.Since.UTC().Format(time.RFC3339)
		}
		reached := "no"
		if c.Reachable {
			reached = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", name, secret, reached, orDash(c.Set), c.Objects, since, orDash(truncate(c.Error, MaxTableMessage)))
	}
	_ = tw.Flush()
}

// writeDependents lists the EnvoyFilters of others that anchor on a
// filter an item inserts: removing or moving that item changes or
// breaks them.
func writeDependents(ew *errWriter, deps []status.Dependent) {
	for _, d := range deps {
		ew.printf("dependents: %s\n", d)
		if d.Note != "" {
			ew.printf("  (%s)\n", d.Note)
		}
	}
}

// writeBlame writes the blame of each kind of proxy that refuses the set:
// what it found in one sentence, then each fault with Envoy's words.
func writeBlame(ew *errWriter, blames []status.Blame) {
	for _, b := range blames {
		ew.printf("blame of the NACK (%s %s, set %s): %s: %s\n", orDash(b.Kind), b.Proxy, orDash(b.Set), b.Outcome, b.Message)
		for _, f := range b.Faults {
			ew.printf("  %s: Envoy: %s\n", f.Fault, orDash(f.Message))
		}
		if b.Envoy != "" {
			ew.printf("  judged by Envoy %s: %d runs in %s\n", b.Envoy, b.Runs, orDash(b.Elapsed))
		}
	}
}
