package canary

import (
	"fmt"
	"slices"
	"strings"
)

// A Direct change reaches every proxy at once, as it always did; what
// follows is judged by the proxies' answers to the set that carries it
// (Input.Verdict, about that set only):
//
//   - taken (rule not met, every answer in): the document becomes the
//     last good one (Output.Promote); no record, no write beyond that.
//   - refused (Policy.RollbackOn met): every proxy gets the last good set
//     again (the stable set), and a Direct record in phase RolledBack
//     keeps the document rejected until it changes.
//   - neither (istiod did not answer, no proxy answered yet, answers
//     still pending): nothing is rolled back and nothing promoted; the
//     change stays delivered, and Output.Waiting says why when it is not
//     just a matter of time.
//
// After a roll back the restored set is judged once, by the same rule.
// Taken: the roll back stands (Record.Restored Taken), and later answers
// no longer matter. Refused: the refusal is not the change's (another
// EnvoyFilter, an Envoy older than the output assumes), so the document's
// set is delivered again and kept (phase Kept) until the document changes,
// whatever the proxies answer: a document is rolled back at most once and
// kept at most once, so nothing flaps.

// When the controller names the EnvoyFilters the proxies refuse
// (Input.Blame), a refused change is judged by that blame too: while it
// is being found nothing is decided (Output.Waiting); when it names only
// EnvoyFilters globalconfig does not manage, rolling back would not help,
// so the document is kept (phase Kept) and the message names them; when
// it names one of ours, alone or together with a user's, the roll back
// proceeds and the message names the other half; when it failed or named
// nothing, the roll back proceeds as without it (fail closed) and the
// message says why.

// Blame is what the blame of the proxies' refusal says, as the Direct
// decision needs it.
type Blame struct {
	// Set is the hash of the set the blame is about: only the blame of
	// the refused set itself counts.
	Set string
	// Pending says the blame is still being found.
	Pending bool
	// Ours says a fault names an EnvoyFilter globalconfig manages (alone
	// or in a combination).
	Ours bool
	// Culprits names every fault as a user reads it ("the combination of
	// istio-system/x (not managed by globalconfig) and globalconfig's
	// localRateLimit (...)"); empty when the blame named none.
	Culprits string
	// Others names the EnvoyFilters not managed by globalconfig that a
	// fault naming ours holds too (the other half); empty when there is
	// none.
	Others string
	// NotBlamed says why the blame named no EnvoyFilter (Envoy accepts
	// the config now, or refuses it without any EnvoyFilter); Err why it
	// failed (timed out, no proxy, no istiod).
	NotBlamed string
	Err       string
}

// Waiting for the blame of the refused set.
const waitingForBlame = "finding which EnvoyFilter the proxies refuse: the change is neither rolled back nor kept until the blame is known"

// MaxRecordedNACKs bounds the proxies a Direct record lists.
const MaxRecordedNACKs = 10

// The values of Record.Restored.
const (
	RestoredTaken   = "Taken"
	RestoredRefused = "Refused"
)

// outcome is what the answers about one set say under a rule.
type outcome int

const (
	undecided outcome = iota
	taken
	refused
)

// judgeSet says what v says of the set named hash under rule, and, when
// it can't tell for want of answers (not merely because some are still
// pending), why.
func judgeSet(v Verdict, hash string, rule RollbackOn) (outcome, string) {
	if !v.Known || v.Version != hash {
		return undecided, ""
	}
	switch {
	case rule == AnyNACK && v.NACKed > 0:
		return refused, ""
	case rule != AnyNACK && v.Synced > 0:
		// One proxy took it: not every one refuses it, whatever comes.
		return taken, ""
	case v.Partial:
		if v.NACKed > 0 {
			return undecided, fmt.Sprintf("%s NACKed the change, but not every istiod answered: nothing is rolled back on missing answers, and the last good document is not replaced", them2(v.NACKed))
		}
		return undecided, "not every istiod answered, so whether the proxies took the change is not known: nothing is rolled back, and the last good document is not replaced"
	case v.Pending > 0:
		return undecided, ""
	case v.Synced+v.NACKed == 0:
		return undecided, "no proxy the set reaches has answered for it, so whether the proxies take the change is not known: nothing is rolled back, and the last good document is not replaced"
	case rule == AnyNACK:
		return taken, ""
	}
	return refused, ""
}

func them2(n int) string {
	if n == 1 {
		return "1 proxy"
	}
	return fmt.Sprintf("%d proxies", n)
}

// direct is Step for a Direct change from the stable set: deliver it,
// and judge it when its answers are in.
func direct(in Input) Output {
	out := Output{Deliver: in.Candidate.Objects}
	if !in.Tracking {
		out.Promote = true
		return out
	}
	rule := in.Policy.Rollback()
	o, why := judgeSet(in.Verdict, in.Candidate.Hash, rule)
	switch o {
	case taken:
		out.Promote, out.Direct = true, Promoted
	case refused:
		b := in.Blame
		if b != nil && (b.Pending || b.Set != in.Candidate.Hash) {
			out.Waiting = waitingForBlame
			return out
		}
		now := in.Now.UTC()
		started := in.Verdict.Since.UTC()
		if started.IsZero() {
			started = now
		}
		rec := &Record{
			Strategy: Direct, Phase: RolledBack, Document: in.Document, From: in.Stable.Hash, To: in.Candidate.Hash,
			Items: Changed(in.Stable.Objects, in.Candidate.Objects), RollbackOn: rule, Started: started, Ended: &now,
			NACKs: nacks(in.Verdict),
		}
		rec.Message = refusal(in.Verdict, rule, "rejected the change")
		if b != nil && b.Err == "" && b.NotBlamed == "" && b.Culprits != "" && !b.Ours {
			// Only EnvoyFilters of others: the proxies refuse them
			// whatever globalconfig sends.
			rec.Phase = Kept
			rec.Message = "proxies refuse " + b.Culprits + " on its own: rolling back globalconfig's change would not help, so the document is kept until it changes (" + rec.Message + ")"
			return Output{Deliver: in.Candidate.Objects, Record: rec, Promote: true, Direct: Kept}
		}
		if b != nil {
			rec.Message += "; " + b.rolledBack()
		}
		return Output{Deliver: in.Stable.Objects, Record: rec, Direct: RolledBack}
	default:
		out.Waiting = why
	}
	return out
}

// directRecorded is Step for a document whose Direct record is at hand:
// rolled back (judging the restored set once) or kept.
func directRecorded(in Input) Output {
	r := in.Record
	if r.Phase == Kept {
		return Output{Deliver: in.Candidate.Objects, Record: r, Promote: true}
	}
	if in.Stable == nil {
		// The set to restore is not known here (lost after a restart).
		return Output{Record: r, Hold: true}
	}
	out := Output{Deliver: in.Stable.Objects, Record: r}
	if r.Restored != "" || !in.Tracking {
		return out
	}
	rule := r.RollbackOn
	if rule == "" {
		rule = in.Policy.Rollback()
	}
	switch o, _ := judgeSet(in.Verdict, in.Stable.Hash, rule); o {
	case taken:
		rec := *r
		rec.Restored = RestoredTaken
		out.Record = &rec
	case refused:
		now := in.Now.UTC()
		rec := *r
		rec.Phase, rec.Restored, rec.Ended, rec.NACKs = Kept, RestoredRefused, &now, nacks(in.Verdict)
		rec.Message = refusal(in.Verdict, rule, "refused the restored last good set as well") +
			"; the refusal is not this change's (another EnvoyFilter, or an Envoy older than the output assumes), so the document is kept" +
			" (it was rolled back because " + r.Message + ")"
		return Output{Deliver: in.Candidate.Objects, Record: &rec, Promote: true, Direct: Kept}
	}
	return out
}

// followDirect is follow for a document whose Direct record is at hand:
// the set the record says, holding while the last good copy lags.
func followDirect(in Input) Output {
	r := in.Record
	if r.Phase == Kept {
		return Output{Deliver: in.Candidate.Objects, Record: r}
	}
	if in.Stable == nil || in.Stable.Hash != r.From {
		return Output{Record: r, Hold: true}
	}
	return Output{Deliver: in.Stable.Objects, Record: r}
}

// refusal says who refused a set: the first proxy and Envoy's words, and
// how many answered.
func refusal(v Verdict, rule RollbackOn, what string) string {
	first := "a proxy"
	msg := ""
	if len(v.NACKs) > 0 {
		// Envoy puts one line per refused listener: one line here.
		first, msg = "proxy "+v.NACKs[0].Name, ": "+strings.ReplaceAll(strings.TrimSpace(v.NACKs[0].Message), "\n", "; ")
	}
	answered := v.Synced + v.NACKed
	var count string
	if rule == AnyNACK {
		count = fmt.Sprintf("%d of %d proxies that answered NACKed (rollbackOn %s)", v.NACKed, answered, rule)
	} else {
		count = fmt.Sprintf("every proxy that answered NACKed, %d of %d (rollbackOn %s)", v.NACKed, answered, rule)
	}
	return fmt.Sprintf("%s %s%s; %s", first, what, msg, count)
}

// nacks are v's NACKed proxies to record.
func nacks(v Verdict) []Answer {
	return slices.Clone(v.NACKs[:min(len(v.NACKs), MaxRecordedNACKs)])
}

// rolledBack says what the blame adds to a roll back's message.
func (b *Blame) rolledBack() string {
	switch {
	case b.Err != "":
		return "the blame could not name the EnvoyFilter the proxies refuse (" + b.Err + "), so the change is rolled back"
	case b.NotBlamed != "":
		return "the blame named no EnvoyFilter (" + b.NotBlamed + "), so the change is rolled back"
	case b.Others != "":
		return "the proxies refuse " + b.Culprits + ": globalconfig's change fails together with " + b.Others + " (the other half of the fault)"
	}
	return "the proxies refuse " + b.Culprits
}
