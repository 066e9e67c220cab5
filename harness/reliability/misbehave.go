package reliability

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/worker"
)

// Misbehaviour is what the recording handler does wrong with the transaction of an event when
// WorkerConfig.Misbehave is set: the faults of the inbox's outcome table that a user's handler
// code can commit. [MisbehaviourOf] chooses it from the event's key, so the handler does the same
// on every delivery, and the checker knows each event's expected end.
type Misbehaviour int

const (
	// Behaves writes the effect and the stacking write and returns nil.
	Behaves Misbehaviour = iota
	// SwallowsError writes the effect, runs a statement that fails (SELECT 1/0: SQLSTATE 22012,
	// which aborts the transaction), ignores its error and returns nil.
	SwallowsError
	// LeavesRowsOpen writes the effect, runs a query, reads one row and returns nil with the rows
	// still open.
	LeavesRowsOpen
	// OverrunsTimeout writes the effect, then runs a statement (pg_sleep) far past the handler
	// timeout, and returns the statement's error wrapped with %v (not %w).
	OverrunsTimeout
	// CommitsItself writes the effect and the stacking write and returns tx.Commit, with the usual
	// deferred tx.Rollback.
	CommitsItself
)

// Misbehaviours lists every Misbehaviour, in order.
var Misbehaviours = []Misbehaviour{Behaves, SwallowsError, LeavesRowsOpen, OverrunsTimeout, CommitsItself}

// MisbehaviourOf is the rule, the one place both the handler and the checker read: the FNV-1a
// hash of "misbehave/" and the key, mod 100: 0 and 1 swallow an error (2 %), 2 leaves rows open,
// 3 overruns the timeout, 4 commits itself (1 % each); the rest behave.
func MisbehaviourOf(key string) Misbehaviour {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "misbehave/"+key)
	switch h.Sum64() % 100 {
	case 0, 1:
		return SwallowsError
	case 2:
		return LeavesRowsOpen
	case 3:
		return OverrunsTimeout
	case 4:
		return CommitsItself
	}
	return Behaves
}

// Result is the kind of result (see [ResultKind]) the inbox's outcome table gives every delivery
// of an event whose handler misbehaves so: done for Behaves and CommitsItself (the inbox commits
// the work with its claim), a failure otherwise.
func (m Misbehaviour) Result() string {
	switch m {
	case SwallowsError:
		return ResultTxAborted + " 22012" // division_by_zero, the SQLSTATE of SELECT 1/0
	case LeavesRowsOpen:
		return ResultRowsOpen
	case OverrunsTimeout:
		return ResultTimeout
	}
	return ResultDone
}

// Fails reports whether every delivery of such an event fails, so that the event ends in the DLQ
// (at maxReceiveCount) with no effect; otherwise it is applied exactly once and never reaches the
// DLQ.
func (m Misbehaviour) Fails() bool { return m.Result() != ResultDone }

func (m Misbehaviour) String() string {
	switch m {
	case Behaves:
		return "behaves"
	case SwallowsError:
		return "swallows-error"
	case LeavesRowsOpen:
		return "leaves-rows-open"
	case OverrunsTimeout:
		return "overruns-timeout"
	case CommitsItself:
		return "commits-itself"
	}
	return fmt.Sprintf("misbehaviour(%d)", int(m))
}

// ExpectFails is [Observations.ExpectDLQ] for a run whose workers misbehave: the rule's failing
// classes, and only they, end in the DLQ unapplied.
func ExpectFails(key string) bool { return MisbehaviourOf(key).Fails() }

// misbehave does m's wrong thing, after the effect was written, and returns what the handler
// returns. timeout is the worker's handler timeout.
func misbehave(ctx context.Context, tx pgx.Tx, m Misbehaviour, timeout time.Duration) error {
	switch m {
	case SwallowsError:
		_, _ = tx.Exec(ctx, `SELECT 1/0`)
		return nil
	case LeavesRowsOpen:
		// Left open on purpose: the inbox must close them and fail the event.
		rows, err := tx.Query(ctx, `SELECT g FROM generate_series(1, 1000) AS g`) //nolint:sqlclosecheck,rowserrcheck // see above
		if err != nil {
			return err
		}
		rows.Next()
		return nil
	case OverrunsTimeout:
		// Far past the timeout: the handler's context ends inside the statement, pgx cancels it
		// and closes the connection.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, (10 * timeout).Seconds()); err != nil {
			return fmt.Errorf("reliability: overran the timeout: %v", err) //nolint:errorlint // not %w on purpose: the inbox must not need the chain
		}
		return nil
	case CommitsItself:
		return tx.Commit(ctx)
	}
	return nil
}

// Result kinds of a message's result in a batch ([BatchRecord.Kinds]).
const (
	ResultDone        = "done"
	ResultDuplicate   = "duplicate"
	ResultTxAborted   = "tx-aborted"
	ResultRowsOpen    = "rows-open"
	ResultTimeout     = "timeout"
	ResultCanceled    = "canceled"
	ResultRolledBack  = "rolled-back"
	ResultNotRun      = "not-run"
	ResultBlocked     = "blocked"
	ResultUnknown     = "commit-unknown"
	ResultUnavailable = "unavailable"
	ResultBroken      = "broken-deployment"
	ResultError       = "error"
)

// pauseLine is what a worker logs when it pauses its receives, at Warn (a dependency is
// unavailable) or Error (a broken deployment).
const pauseLine = "pausing receives"

// countPauses counts the lines of the run's log (in-process workers, AuditDir/log.txt) and of its
// worker processes' outputs in which a worker paused.
func countPauses(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "out-*.txt"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range append(files, filepath.Join(dir, "log.txt")) {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		n += strings.Count(string(b), pauseLine)
	}
	return n, nil
}

// allBatchLogs reads the batch logs of every worker of the run in dir (the drain's included).
func allBatchLogs(dir string) ([]LoggedBatch, error) {
	files, err := filepath.Glob(filepath.Join(dir, "batches-*.jsonl"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, f := range files {
		ids = append(ids, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "batches-"), ".jsonl"))
	}
	return readBatchLogs(dir, ids)
}

// misbehaviourEnds summarises, per class, how the events of o ended: sent, applied exactly once,
// applied more than once, in the DLQ. Keys of refused sends only are left out.
func misbehaviourEnds(o Observations) string {
	type end struct{ keys, once, more, dlq int }
	ends := map[Misbehaviour]*end{}
	sent := map[string]bool{}
	bySeq := map[int64]string{}
	for _, s := range o.Sends {
		if s.Kind != KindGood || s.Status == SendFailed {
			continue
		}
		bySeq[s.Seq] = s.Key
		if !sent[s.Key] {
			sent[s.Key] = true
			m := MisbehaviourOf(s.Key)
			if ends[m] == nil {
				ends[m] = &end{}
			}
			ends[m].keys++
		}
	}
	effects := map[string]int{}
	for _, e := range o.Effects {
		effects[e.Key]++
	}
	inDLQ := map[string]bool{}
	for _, d := range o.DLQ {
		if k, ok := bySeq[d.Seq]; ok {
			inDLQ[k] = true
		}
	}
	for k := range sent {
		e := ends[MisbehaviourOf(k)]
		switch n := effects[k]; {
		case n == 1:
			e.once++
		case n > 1:
			e.more++
		}
		if inDLQ[k] {
			e.dlq++
		}
	}
	var parts []string
	for _, m := range Misbehaviours {
		e := ends[m]
		if e == nil {
			e = &end{}
		}
		want := "applied once, not in the DLQ"
		if m.Fails() {
			want = "in the DLQ unapplied"
		}
		parts = append(parts, fmt.Sprintf("%s (must end %s): %d events, %d applied once, %d more than once, %d in the DLQ",
			m, want, e.keys, e.once, e.more, e.dlq))
	}
	return strings.Join(parts, "; ")
}

// batchResults tallies, per class, the kinds of result its messages got in the batches of bs,
// and, per failing class, the batches that held one of its messages with messages of classes
// that do not fail, and those messages' results.
type batchResults struct {
	kinds map[Misbehaviour]map[string]int
	// shared counts, per failing class, the batches that held one of its messages with a message
	// of a class that does not fail; sharedDone and sharedNotDone count those messages by result.
	shared, sharedDone, sharedNotDone map[Misbehaviour]int
}

func tallyBatches(bs []LoggedBatch) batchResults {
	t := batchResults{kinds: map[Misbehaviour]map[string]int{}, shared: map[Misbehaviour]int{},
		sharedDone: map[Misbehaviour]int{}, sharedNotDone: map[Misbehaviour]int{}}
	for _, b := range bs {
		if !b.Closed {
			continue
		}
		failing := map[Misbehaviour]bool{}
		for j, k := range b.Open.Keys {
			m := MisbehaviourOf(k)
			if t.kinds[m] == nil {
				t.kinds[m] = map[string]int{}
			}
			kind := ResultError
			if j < len(b.Kinds) {
				kind = b.Kinds[j]
			}
			t.kinds[m][kind]++
			if m.Fails() {
				failing[m] = true
			}
		}
		for m := range failing {
			done, notDone := 0, 0
			for j, k := range b.Open.Keys {
				if MisbehaviourOf(k).Fails() || j >= len(b.Kinds) {
					continue
				}
				if b.Kinds[j] == ResultDone || b.Kinds[j] == ResultDuplicate {
					done++
				} else {
					notDone++
				}
			}
			if done+notDone > 0 {
				t.shared[m]++
				t.sharedDone[m] += done
				t.sharedNotDone[m] += notDone
			}
		}
	}
	return t
}

// kindsString renders a tally of result kinds, in a stable order.
func kindsString(k map[string]int) string {
	var parts []string
	for kind, n := range k {
		parts = append(parts, fmt.Sprintf("%s %d", kind, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// unexpectedKinds counts the results of class m's messages that are not the one the outcome table
// gives it (a duplicate counts as done).
func unexpectedKinds(m Misbehaviour, k map[string]int) int {
	n := 0
	for kind, c := range k {
		switch {
		case kind == m.Result(), m.Result() == ResultDone && kind == ResultDuplicate:
		default:
			n += c
		}
	}
	return n
}

// runBatchMisbehaving sends every event first (so that batches fill), then runs in-process
// workers whose recording handler misbehaves by key ([MisbehaviourOf]), batched, with a short
// handler timeout and maxReceiveCount 3, until the queue is empty; the drain's worker misbehaves
// the same way. The checker expects the rule's failing classes, and only they, in the DLQ
// unapplied, and every other event applied once; the batch logs say what each delivery's result
// was, and the workers' logs whether any paused.
func runBatchMisbehaving(ctx context.Context, e *Env, s Size) (*Report, error) {
	const (
		batch          = 10
		handlerTimeout = 2 * time.Second
	)
	r, err := e.NewRun(ctx, "batch-misbehaving-handlers", RunOptions{Size: s, Visibility: 4 * time.Second, MaxReceive: 3})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	evs := GoodEvents("mis", s.Messages)
	perClass := map[Misbehaviour]int{}
	for _, ev := range evs {
		perClass[MisbehaviourOf(ev.Key)]++
	}
	var checks []string
	for _, m := range Misbehaviours {
		if perClass[m] == 0 {
			checks = append(checks, fmt.Sprintf("no event of class %s among %d: the size is too small for the fault", m, len(evs)))
		}
	}
	prod := &Producer{Run: r, Retries: 2}
	if err := prod.Send(ctx, evs, 0); err != nil {
		return nil, err
	}
	met := &counters{}
	config := func(id string) WorkerConfig {
		c := batchConfig(r, id, batch)
		c.Concurrency, c.Misbehave, c.HandlerTimeout, c.Backoff, c.Metrics = 4, true, handlerTimeout, 200*time.Millisecond, met
		return c
	}
	var set workerSet
	defer set.stopAll(ctx)
	workers := max(1, min(s.Workers, 4))
	for i := range workers {
		if _, err := set.start(ctx, config(fmt.Sprintf("w%d", i))); err != nil {
			return nil, err
		}
	}
	// Settled: the queue holds nothing (visible, in flight or delayed), so every message was
	// deleted or moved to the DLQ; the checker compares each event's end with its class's.
	if err := r.waitQueueEmpty(ctx, s.Wait()); err != nil {
		return nil, err
	}
	checks = append(checks, set.stopAll(ctx)...)
	dc := config("drain")
	dc.Metrics = nil
	d, err := r.Drain(ctx, DrainOptions{Timeout: s.Wait(), Worker: &dc})
	if err != nil {
		return nil, err
	}
	o, err := r.Observe(ctx, prod.Sends(), d)
	if err != nil {
		return nil, err
	}
	o.ExpectDLQ = ExpectFails
	rep := Check(o)
	rep.Scenario, rep.Workers, rep.Duration = r.Name, workers, time.Since(r.Started)
	rep.Checks = append(rep.Checks, checks...)
	if r.dlqMismatch != "" {
		rep.Notes = append(rep.Notes, r.dlqMismatch)
	}
	rep.Notes = append(rep.Notes, misbehaviourEnds(o))
	// What each delivery's result was, by class, from the batch logs.
	bs, err := allBatchLogs(r.AuditDir)
	if err != nil {
		return nil, err
	}
	t := tallyBatches(bs)
	var kinds []string
	for _, m := range Misbehaviours {
		kinds = append(kinds, fmt.Sprintf("%s: %s", m, kindsString(t.kinds[m])))
		if n := unexpectedKinds(m, t.kinds[m]); n > 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("%d results of events of class %s were not %s, as the outcome table says (%s)", n, m, m.Result(), kindsString(t.kinds[m])))
		}
		ran := 0 // deliveries that ended as the table says
		for kind, n := range t.kinds[m] {
			if kind == m.Result() {
				ran += n
			}
		}
		if m != Behaves && perClass[m] > 0 && ran == 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("no delivery of an event of class %s ended as the outcome table says (%s)", m, m.Result()))
		}
		if !m.Fails() || perClass[m] == 0 {
			continue
		}
		kinds = append(kinds, fmt.Sprintf("%d batches held an event of class %s and others: %d of those done, %d not",
			t.shared[m], m, t.sharedDone[m], t.sharedNotDone[m]))
		if t.shared[m] == 0 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("no batch held an event of class %s and one that does not fail", m))
		}
	}
	rep.Notes = append(rep.Notes, "results per delivery, from the batch logs: "+strings.Join(kinds, "; "))

	// No worker paused: none of the misbehaviours says that a dependency is unavailable.
	pauses, err := countPauses(r.AuditDir)
	if err != nil {
		return nil, err
	}
	if pauses > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("workers paused their receives %d times (%q in their logs)", pauses, pauseLine))
	}
	if n := met.get(worker.BrokenDeployments); n > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("the workers counted %d broken deployments", n))
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("workers (before the drain): %d batches of %d messages; processed %d, failed %d, retried %d, rolled back alone %d, batch retries %d, blocked %d, leases lost %d, broken deployments %d; pauses logged (drain included) %d",
		met.get(worker.Batches), met.get(worker.BatchedMessages), met.get(worker.Processed), met.get(worker.Failed), met.get(worker.Retried),
		met.get(worker.RolledBack), met.get(worker.BatchRetries), met.get(worker.Blocked), met.get(worker.LeasesLost), met.get(worker.BrokenDeployments), pauses))
	return &rep, nil
}
