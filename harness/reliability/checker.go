package reliability

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Effect is one effect row.
type Effect struct {
	Key    string
	Value  string
	Worker string
	// BodySHA is the SHA-256 (hex) of the body the handler saw.
	BodySHA string
	// Group is the message's FIFO group, or empty; GroupSeq is the effect's place in the commit
	// order of its group (1, 2, ...).
	Group    string
	GroupSeq int64
}

// DLQMessage is one message read from the dead-letter queue.
type DLQMessage struct {
	Seq int64
	// Key is the message's valid event key, or empty.
	Key string
	// ID is its SQS MessageId (a message moved to the DLQ keeps the one it had).
	ID string
}

// Observations is everything the checker compares.
type Observations struct {
	Sends   []Send
	Effects []Effect
	// DLQ is what the final drain found in the dead-letter queue (before any redrive).
	DLQ []DLQMessage
	// Redriven are the keys the final drain redrove from the DLQ; EffectsBeforeRedrive counts
	// their effects before the redrive.
	Redriven             []string
	EffectsBeforeRedrive int
	// Deletes is the workers' log: deletes, and receives (status Received).
	Deletes []DeleteRecord
	// TotalsSum is the sum of the stacking business write; it must equal len(Effects).
	TotalsSum int64
	// ExpectDLQ, if set, says which good keys must end in the DLQ with no effect (their handler
	// fails them on every delivery, as [ExpectFails] says); every other good key must then be
	// applied once and not be in the DLQ. nil means no expectation: a good message in the DLQ is
	// allowed (a delete that kept failing).
	ExpectDLQ func(key string) bool
}

// Report is the checker's verdict on one run.
type Report struct {
	Scenario string
	Messages int // messages sent (every attempt)
	Workers  int
	Duration time.Duration

	SentOK, SentFailed, SentUnknown int // messages by send status
	Keys                            int // distinct good keys sent (any status)
	Effected                        int // good keys with at least one effect

	// Lost: good keys sent ok at least once, never effected, not in the DLQ; and poison
	// messages sent ok not in the DLQ. Must be 0.
	Lost int
	// Duplicated: keys with more than one effect. Must be 0. ExtraEffects counts the surplus.
	Duplicated, ExtraEffects int
	// Unexpected: effects of keys never sent (or only sent with a refused send). Must be 0.
	Unexpected int
	// UnknownSends: keys sent only with unknown outcome, and how many of them were effected
	// (0 or 1 are both fine).
	UnknownSends, UnknownEffected int
	// PoisonSent and PoisonInDLQ count poison messages.
	PoisonSent, PoisonInDLQ int
	// GoodInDLQ: good messages in the DLQ; ProcessedInDLQ: of those, keys already effected.
	GoodInDLQ, ProcessedInDLQ int
	// Redriven: keys redriven from the DLQ; RedriveSecondEffects: effects they gained (must be 0).
	Redriven, RedriveSecondEffects int
	// Deletes: delete entries the workers sent. DeletesUncommitted: not preceded by a committed
	// inbox row (missing, no key, after an unknown commit, unknown handle, or unverified and
	// still without a row at the end). Must be 0. DeletesUnverified: the database could not be
	// asked at the time (it was down); each must have a row at the end.
	Deletes, DeletesUncommitted, DeletesUnverified int
	// Redelivered: messages received more than once (the faults made them come back).
	Redelivered int
	// BusinessMismatch: the stacking business write differs from the effect count. Must be 0.
	BusinessMismatch int64
	// ExpectedDLQ: good keys sent ok that Observations.ExpectDLQ says must end in the DLQ.
	// WrongEnd: good keys that did not end as it says: applied, or not in the DLQ, when expected
	// there; in the DLQ when not. Must be 0.
	ExpectedDLQ, WrongEnd int
	// Groups: FIFO message groups with effects. Misordered: effects of a group that committed
	// after an effect of an event sent later in the same group (or in another group than the
	// event was sent in). Must be 0. Redriven events are left out: a redrive puts an event
	// behind its group by policy.
	Groups, Misordered int
	// Offloaded: good keys sent ok with their payload offloaded to S3 (Send.Payload).
	// OffloadedApplied: of those, keys with an effect whose handler saw one of the payloads sent.
	// PayloadMismatch: effects of keys sent offloaded whose handler saw a body that is none of
	// those payloads (the pointer, say). Must be 0.
	Offloaded, OffloadedApplied, PayloadMismatch int

	// Checks are the scenario's own failed conditions (a fault that did not happen, a hot loop,
	// a worker that crashed); Notes are its measurements.
	Checks, Notes []string

	// Examples names a few offending keys or sequence numbers per problem.
	Examples []string
}

// Problems lists the invariant violations of the report; empty means it passed.
func (r *Report) Problems() []string {
	var p []string
	add := func(n int64, what string) {
		if n != 0 {
			p = append(p, fmt.Sprintf("%s: %d", what, n))
		}
	}
	add(int64(r.Lost), "lost")
	add(int64(r.Duplicated), "duplicated keys")
	add(int64(r.Unexpected), "unexpected effects")
	add(int64(r.RedriveSecondEffects), "second effects after redrive")
	add(int64(r.DeletesUncommitted), "deletes not preceded by a committed inbox row")
	add(r.BusinessMismatch, "business write mismatch")
	add(int64(r.Misordered), "effects committed out of send order in their group")
	add(int64(r.WrongEnd), "events that did not end as expected (applied once, or in the DLQ unapplied)")
	add(int64(r.PayloadMismatch), "effects of offloaded events whose handler did not see the payload")
	return append(p, r.Checks...)
}

// Check compares the observations and returns the report.
func Check(o Observations) Report {
	var r Report
	perKind := map[string]int{}
	ex := func(format string, args ...any) { // a few examples of each kind of problem
		kind := strings.Fields(format)[0]
		if perKind[kind] < 4 {
			perKind[kind]++
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	type keyState struct{ ok, unknown, failed int }
	keys := map[string]*keyState{}
	poison := map[int64]Send{}
	for _, s := range o.Sends {
		r.Messages++
		switch s.Status {
		case SendOK:
			r.SentOK++
		case SendFailed:
			r.SentFailed++
		default:
			r.SentUnknown++
		}
		if IsPoison(s.Kind) {
			if s.Status != SendFailed {
				poison[s.Seq] = s
			}
			if s.Status == SendOK {
				r.PoisonSent++
			}
			continue
		}
		ks := keys[s.Key]
		if ks == nil {
			ks = &keyState{}
			keys[s.Key] = ks
		}
		switch s.Status {
		case SendOK:
			ks.ok++
		case SendFailed:
			ks.failed++
		default:
			ks.unknown++
		}
	}
	r.Keys = len(keys)
	effects := map[string]int{}
	for _, e := range o.Effects {
		effects[e.Key]++
	}
	inDLQ := map[string]bool{}
	dlqSeq := map[int64]bool{}
	for _, m := range o.DLQ {
		dlqSeq[m.Seq] = true
		if p, ok := poison[m.Seq]; ok {
			_ = p
			r.PoisonInDLQ++
			continue
		}
		r.GoodInDLQ++
		inDLQ[m.Key] = true
		if effects[m.Key] > 0 {
			r.ProcessedInDLQ++
		}
	}
	for seq, p := range poison {
		if p.Status == SendOK && !dlqSeq[seq] {
			r.Lost++
			ex("lost poison message seq %d (%s)", seq, p.Kind)
		}
	}
	for k, ks := range keys {
		n := effects[k]
		if n > 0 {
			r.Effected++
		}
		if n > 1 {
			r.Duplicated++
			r.ExtraEffects += n - 1
			ex("key %s has %d effects", k, n)
		}
		if o.ExpectDLQ != nil {
			r.checkEnd(k, ks.ok > 0, n, inDLQ[k], o.ExpectDLQ(k), ex)
		}
		switch {
		case ks.ok > 0:
			if n == 0 && !inDLQ[k] {
				r.Lost++
				ex("lost key %s", k)
			}
		case ks.unknown > 0:
			r.UnknownSends++
			if n > 0 {
				r.UnknownEffected++
			}
		default: // only refused sends
			if n > 0 {
				r.Unexpected++
				ex("key %s effected but every send was refused", k)
			}
		}
	}
	for k := range effects {
		if _, ok := keys[k]; !ok {
			r.Unexpected++
			ex("effect of unsent key %q", k)
		}
	}
	r.Redriven = len(o.Redriven)
	after := 0
	for _, k := range o.Redriven {
		after += effects[k]
	}
	if r.Redriven > 0 {
		r.RedriveSecondEffects = after - o.EffectsBeforeRedrive
	}
	receives := map[int64]int{}
	for _, d := range o.Deletes {
		if d.Status == Received {
			receives[d.Seq]++
			continue
		}
		r.Deletes++
		switch d.Status {
		case DeleteCommitted:
		case DeleteUnverified:
			r.DeletesUnverified++
			if effects[d.Key] == 0 {
				r.DeletesUncommitted++
				ex("delete of %s (seq %d) unverified and never committed", d.Key, d.Seq)
			}
		default:
			r.DeletesUncommitted++
			ex("delete of %q (seq %d) by %s: %s", d.Key, d.Seq, d.Worker, d.Status)
		}
	}
	for _, n := range receives {
		if n > 1 {
			r.Redelivered++
		}
	}
	r.BusinessMismatch = o.TotalsSum - int64(len(o.Effects))
	r.checkOrder(o, ex)
	r.checkPayloads(o, ex)
	sort.Strings(r.Examples)
	return r
}

// checkEnd compares the end of good key k (n effects, in the DLQ or not) with the one expected:
// in the DLQ unapplied (dlq), or applied once and not in the DLQ. A key sent only with unknown
// outcome may also have vanished (never stored).
func (r *Report) checkEnd(k string, sentOK bool, n int, inDLQ, dlq bool, ex func(format string, args ...any)) {
	if !dlq {
		if inDLQ {
			r.WrongEnd++
			ex("end: key %s must be applied once, and is in the DLQ (%d effects)", k, n)
		}
		return
	}
	if sentOK {
		r.ExpectedDLQ++
	}
	switch {
	case n > 0:
		r.WrongEnd++
		ex("end: key %s must end in the DLQ unapplied, and has %d effects", k, n)
	case sentOK && !inDLQ:
		r.WrongEnd++
		ex("end: key %s must end in the DLQ unapplied, and is not there", k)
	}
}

// checkOrder compares, in each FIFO group, the order in which the effects committed with the
// order in which their events were sent: the place of an event is its first send the queue did
// not refuse.
func (r *Report) checkOrder(o Observations, ex func(format string, args ...any)) {
	type place struct {
		seq   int64
		group string
	}
	sent := map[string]place{}
	for _, s := range o.Sends {
		if s.Group == "" || s.Status == SendFailed || IsPoison(s.Kind) {
			continue
		}
		if p, ok := sent[s.Key]; !ok || s.Seq < p.seq {
			sent[s.Key] = place{s.Seq, s.Group}
		}
	}
	redriven := map[string]bool{}
	for _, k := range o.Redriven {
		redriven[k] = true
	}
	groups := map[string][]Effect{}
	for _, e := range o.Effects {
		if e.Group != "" {
			groups[e.Group] = append(groups[e.Group], e)
		}
	}
	r.Groups = len(groups)
	for g, effs := range groups {
		sort.Slice(effs, func(i, j int) bool { return effs[i].GroupSeq < effs[j].GroupSeq })
		var last Effect
		var lastSeq int64
		for _, e := range effs {
			p, ok := sent[e.Key]
			switch {
			case redriven[e.Key]:
				continue
			case !ok:
				continue // never sent to a group: counted as unexpected
			case p.group != g:
				r.Misordered++
				ex("misordered: key %s sent in group %s committed in group %s", e.Key, p.group, g)
			case p.seq < lastSeq:
				r.Misordered++
				ex("misordered: group %s: key %s (sent #%d) committed as #%d, after key %s (sent #%d) committed as #%d",
					g, e.Key, p.seq, e.GroupSeq, last.Key, lastSeq, last.GroupSeq)
			default:
				last, lastSeq = e, p.seq
			}
		}
	}
}

// checkPayloads compares the body each effect of an offloaded event saw with the payloads its
// sends put in S3 (any of them: each send of an event puts a payload of its own). A key is sent
// either offloaded or inline; the sends the queue refused are left out.
func (r *Report) checkPayloads(o Observations, ex func(format string, args ...any)) {
	payloads := map[string]map[string]bool{}
	sentOK := map[string]bool{}
	for _, s := range o.Sends {
		if s.Payload == "" || s.Status == SendFailed || IsPoison(s.Kind) {
			continue
		}
		if payloads[s.Key] == nil {
			payloads[s.Key] = map[string]bool{}
		}
		payloads[s.Key][s.Payload] = true
		if s.Status == SendOK {
			sentOK[s.Key] = true
		}
	}
	r.Offloaded = len(sentOK)
	applied := map[string]bool{}
	for _, e := range o.Effects {
		ps, ok := payloads[e.Key]
		switch {
		case !ok:
		case ps[e.BodySHA]:
			applied[e.Key] = true
		default:
			r.PayloadMismatch++
			ex("payload: key %s was applied with a body of SHA-256 %q, none of its %d offloaded payloads", e.Key, e.BodySHA, len(ps))
		}
	}
	for k := range applied {
		if sentOK[k] {
			r.OffloadedApplied++
		}
	}
}

// Observe loads the run's effects and business totals and its delete logs, and adds the sends
// and what the drain found.
func (r *Run) Observe(ctx context.Context, sends []Send, d *DrainResult) (Observations, error) {
	o := Observations{Sends: sends}
	if d != nil {
		o.DLQ, o.Redriven, o.EffectsBeforeRedrive = d.DLQ, d.Redriven, d.EffectsBeforeRedrive
	}
	rows, err := r.Pool.Query(ctx, `SELECT key, value, worker, coalesce(body_sha, ''), coalesce(grp, ''), coalesce(grp_seq, 0) FROM `+r.Schema+`.effects`)
	if err != nil {
		return o, err
	}
	for rows.Next() {
		var e Effect
		if err := rows.Scan(&e.Key, &e.Value, &e.Worker, &e.BodySHA, &e.Group, &e.GroupSeq); err != nil {
			rows.Close()
			return o, err
		}
		o.Effects = append(o.Effects, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return o, err
	}
	if err := r.Pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM `+r.Schema+`.totals`).Scan(&o.TotalsSum); err != nil {
		return o, err
	}
	o.Deletes, err = ReadDeleteLogs(r.AuditDir)
	return o, err
}

// WriteTable prints reports as a table.
func WriteTable(w io.Writer, reports []Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmsgs\twkrs\tsecs\tsent ok/fail/unk\teffected\tlost\tdup\tmisordered\tunexp\tunk→effected\tpoison→DLQ\tprocessed-in-DLQ\tredriven(2nd)\tredelivered\tdeletes\tdel w/o commit\tunverified\tresult\t")
	for _, r := range reports {
		res := "PASS"
		if len(r.Problems()) > 0 {
			res = "FAIL"
		}
		order := "-" // no FIFO groups
		if r.Groups > 0 {
			order = strconv.Itoa(r.Misordered)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d/%d/%d\t%d/%d\t%d\t%d\t%s\t%d\t%d/%d\t%d/%d\t%d\t%d(%d)\t%d\t%d\t%d\t%d\t%s\t\n",
			r.Scenario, r.Messages, r.Workers, r.Duration.Seconds(), r.SentOK, r.SentFailed, r.SentUnknown,
			r.Effected, r.Keys, r.Lost, r.Duplicated, order, r.Unexpected, r.UnknownEffected, r.UnknownSends,
			r.PoisonInDLQ, r.PoisonSent, r.ProcessedInDLQ, r.Redriven, r.RedriveSecondEffects,
			r.Redelivered, r.Deletes, r.DeletesUncommitted, r.DeletesUnverified, res)
	}
	return tw.Flush()
}

// String is the report in one paragraph, with its examples.
func (r *Report) String() string {
	var b strings.Builder
	_ = WriteTable(&b, []Report{*r})
	for _, e := range r.Problems() {
		b.WriteString("  problem: " + e + "\n")
	}
	for _, e := range r.Notes {
		b.WriteString("  note: " + e + "\n")
	}
	for _, e := range r.Examples {
		b.WriteString("  example: " + e + "\n")
	}
	return b.String()
}
