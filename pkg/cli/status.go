package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/controller"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/rollout"
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

// StatusReport is what `globalconfig status -o json|yaml` prints.
type StatusReport struct {
	// ConfigMap is the global ConfigMap, NAMESPACE/NAME; ConfigMapFound
	// says whether it exists.
	ConfigMap      string `json:"configMap"`
	ConfigMapFound bool   `json:"configMapFound"`
	// State, Message, Errors and Warnings are the status ConfigMap's keys
	// of those names, one problem per entry.
	State    string   `json:"state"`
	Message  string   `json:"message,omitempty"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
	// Items are the items of the live managed EnvoyFilters.
	Items           []StatusItem `json:"items"`
	LastChange      string       `json:"lastChange,omitempty"`
	LastAppliedTime string       `json:"lastAppliedTime,omitempty"`
	LastAppliedHash string       `json:"lastAppliedHash,omitempty"`
	// Sink and MCPNack are set when the controller serves istiod over MCP.
	Sink    string `json:"sink,omitempty"`
	MCPNack string `json:"mcpNack,omitempty"`
	// RolloutSummary and Rollout are the status's rolloutSummary and
	// rollout keys; Rollout is null when the rollout is not tracked, and
	// RolloutError says why when the key does not read.
	RolloutSummary string          `json:"rolloutSummary,omitempty"`
	Rollout        *rollout.Status `json:"rollout"`
	RolloutError   string          `json:"rolloutError,omitempty"`
}

// StatusItem is one item with its live EnvoyFilter.
type StatusItem struct {
	Item        string `json:"item"`
	EnvoyFilter string `json:"envoyFilter"`
	Namespace   string `json:"namespace"`
	// Change is "added" or "changed" when the last change applied
	// (lastChange) added or changed the item.
	Change string `json:"change,omitempty"`
}

// statusCommand is `globalconfig status`: what the controller last did
// and how far the proxies took it, like istioctl proxy-status.
func statusCommand(args []string, env Env) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var cf clusterFlags
	cf.define(fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, "globalconfig status: takes no arguments")
		return ExitUsage
	}
	ns, name, code := cf.check("status", env)
	if code != ExitOK {
		return code
	}
	kube, istio, code := cf.connect("status", env)
	if code != ExitOK {
		return code
	}
	ctx := context.Background()
	rep := &StatusReport{ConfigMap: ns + "/" + name, Errors: []string{}, Warnings: []string{}, Items: []StatusItem{}}

	_, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig status: read configmap %s: %v\n", rep.ConfigMap, err)
		return ExitAPI
	default:
		rep.ConfigMapFound = true
	}
	statusName := controller.StatusName(name)
	st, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, statusName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(env.Stderr, "globalconfig status: %s (ConfigMap %s/%s not found)\n", NoStatusMessage, ns, statusName)
		return ExitNoStatus
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig status: read configmap %s/%s: %v\n", ns, statusName, err)
		return ExitAPI
	}
	live, err := managedFilters(ctx, istio)
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig status: %v\n", err)
		return ExitAPI
	}

	data := st.Data
	rep.State, rep.Message = data["state"], data["message"]
	rep.Errors, rep.Warnings = lines(data["errors"]), lines(data["warnings"])
	rep.LastChange, rep.LastAppliedTime, rep.LastAppliedHash = data["lastChange"], data["lastAppliedTime"], data["lastAppliedHash"]
	rep.Sink, rep.MCPNack = data["sink"], data["mcpNack"]
	rep.RolloutSummary = data[rollout.SummaryKey]
	if text, ok := data[rollout.StatusKey]; ok {
		if r, err := rollout.Parse(text); err != nil {
			rep.RolloutError = err.Error()
		} else {
			rep.Rollout = r
		}
	}
	// The typed item diff; a status from before it has none, and then
	// no item is marked.
	var last plan.Items
	if text := data[controller.LastChangeItemsKey]; text != "" {
		if err := json.Unmarshal([]byte(text), &last); err != nil {
			fmt.Fprintf(env.Stderr, "globalconfig status: %s: %v\n", controller.LastChangeItemsKey, err)
		}
	}
	for _, l := range live {
		item := StatusItem{Item: l.Labels[envoyfilter.LabelItem], EnvoyFilter: l.Name, Namespace: l.Namespace}
		switch {
		case slices.Contains(last.Added, item.Item):
			item.Change = "added"
		case slices.Contains(last.Changed, item.Item):
			item.Change = "changed"
		}
		rep.Items = append(rep.Items, item)
	}
	slices.SortFunc(rep.Items, func(a, b StatusItem) int {
		return strings.Compare(a.Item+"\x00"+a.Namespace+"/"+a.EnvoyFilter, b.Item+"\x00"+b.Namespace+"/"+b.EnvoyFilter)
	})

	if cf.output == "text" {
		err = writeStatusText(env.Stdout, rep)
	} else {
		err = writeStructured(env.Stdout, cf.output, rep)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig status: %v\n", err)
		return ExitIO
	}
	return ExitOK
}

// lines splits a status value holding one entry per line; never nil.
func lines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// writeStatusText writes the report for people.
func writeStatusText(w io.Writer, rep *StatusReport) error {
	ew := &errWriter{w: w}
	state := rep.State
	if state == "" {
		state = "unknown"
	}
	found := ""
	if !rep.ConfigMapFound {
		found = " (not found)"
	}
	ew.printf("ConfigMap %s%s: %s\n", rep.ConfigMap, found, state)
	if rep.Message != "" {
		ew.printf("message: %s\n", rep.Message)
	}
	for _, l := range []struct {
		name    string
		entries []string
	}{{"errors", rep.Errors}, {"warnings", rep.Warnings}} {
		if len(l.entries) == 0 {
			ew.printf("%s: none\n", l.name)
			continue
		}
		ew.printf("%s:\n", l.name)
		for _, e := range l.entries {
			ew.printf("  %s\n", e)
		}
	}
	if rep.LastAppliedHash != "" {
		change := rep.LastChange
		if change == "" {
			change = "-"
		}
		ew.printf("last change: %s (set %s applied %s)\n", change, rep.LastAppliedHash, orDash(rep.LastAppliedTime))
	}
	if rep.Sink != "" {
		ew.printf("sink: %s\n", rep.Sink)
	}
	if rep.MCPNack != "" {
		ew.printf("istiod's last MCP NACK: %s\n", rep.MCPNack)
	}

	ew.printf("\n")
	if len(rep.Items) == 0 {
		ew.printf("no managed EnvoyFilters\n")
	} else {
		tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "ITEM\tENVOYFILTER\tLAST CHANGE")
		for _, it := range rep.Items {
			change := "-"
			if it.Change != "" {
				change = it.Change + " " + orDash(rep.LastAppliedTime)
			}
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\n", orDash(it.Item), it.Namespace, it.EnvoyFilter, change)
		}
		_ = tw.Flush()
	}

	ew.printf("\n")
	switch {
	case rep.RolloutError != "":
		ew.printf("rollout: unreadable: %s\n", rep.RolloutError)
	case rep.Rollout == nil:
		ew.printf("%s\n", RolloutNotTracked)
	default:
		writeRollout(ew, rep)
	}
	return ew.err
}

// writeRollout writes the rollout summary, its proxies and the istiod
// instances that did not answer.
func writeRollout(ew *errWriter, rep *StatusReport) {
	r := rep.Rollout
	summary := rep.RolloutSummary
	if summary == "" {
		summary = r.Summary()
	}
	ew.printf("rollout: %s\n", summary)
	ew.printf("set %s written %s\n", orDash(r.Version), timeText(r.Since.IsZero(), r.Since.UTC().Format("2006-01-02T15:04:05Z")))
	if r.Version != "" && rep.LastAppliedHash != "" && r.Version != rep.LastAppliedHash {
		ew.printf("the rollout is of set %s, not of the applied set %s: the controller has not asked istiod since\n", r.Version, rep.LastAppliedHash)
	}
	if len(r.Proxies) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTYPE\tISTIO\tISTIOD\tSTATE\tMESSAGE")
		for _, p := range r.Proxies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, orDash(p.Type), orDash(p.IstioVersion), orDash(p.Istiod), p.State, orDash(truncate(p.Message, MaxTableMessage)))
		}
		_ = tw.Flush()
	}
	if r.Unlisted > 0 {
		noun := "proxies"
		if r.Unlisted == 1 {
			noun = "proxy"
		}
		ew.printf("… and %d more %s not listed\n", r.Unlisted, noun)
	}
	for _, i := range r.Unreachable() {
		ew.printf("istiod %s unreachable: %s\n", i.Address, i.Error)
	}
}

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
