package reliability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sqsinbox/sqsinbox/worker"
)

// The faults only batched inbox commits have (issue 14). The worker's recording handler is the
// inbox handler, a worker.BatchHandler, so every scenario runs batched (Config.HandlerBatch,
// default 10); these ones make batches of several messages sure and look at them through the
// workers' batch logs (WorkerConfig.BatchLog).

// batchScenarios lists the batch scenarios, in fault order.
func batchScenarios() []Scenario {
	return []Scenario{
		{Name: "batch-sigkill", Fault: 1, Run: runBatchSigkill,
			Doc: "worker processes SIGKILLed while each holds an open batch transaction of several messages (stopped first, so that the kill is sure to land in it): nothing of the batch committed or deleted, all of it redelivered, each event applied once"},
		{Name: "control-batch-sigkill-ack-before-commit", Fault: 1, ExpectFail: true, Run: runBatchSigkillControl,
			Doc: "the same with a broken batch handler that deletes the batch's messages before its transaction: the checker must report the killed batch's messages lost and deleted"},
		{Name: "batch-commit-cut", Fault: 4, Run: runBatchCommitCut,
			Doc: "the connection to PostgreSQL cut during every third COMMIT of batches of several messages, before and after the server got it, maxReceiveCount 3: the inbox settles each unknown COMMIT by claiming again (no delete without a committed row), few messages are redelivered, none reaches the DLQ, each event applied once"},
		{Name: "batch-poison", Fault: 8, Run: runBatchPoison,
			Doc: "poison messages (panicking, undecodable, no key) inside batches of good ones: the good ones of the batch commit and are deleted, the poison reaches the DLQ with its message id and has no effect"},
		{Name: "batch-hot-key", Fault: 9, Run: runBatchHotKey,
			Doc: "one event id sent hundreds of times at once, into batches (twins inside a batch) of several workers (across concurrent batches): one effect, no batch retried for a deadlock"},
		{Name: "batch-misbehaving-handlers", Fault: 11, Run: runBatchMisbehaving,
			Doc: "handlers that misbehave with their transaction, chosen by key (misbehave.go): 2 % swallow a failed statement, 1 % leave rows open, 1 % overrun the handler timeout inside a statement, 1 % call Commit; the first three end in the DLQ unapplied, every other event is applied once, and no worker pauses"},
	}
}

// batchConfig is a worker configuration that makes batches of up to n messages and logs them.
func batchConfig(r *Run, id string, n int) WorkerConfig {
	c := r.WorkerConfig(id)
	c.HandlerBatch, c.BatchLog = n, true
	return c
}

// readBatchLogs reads the batch logs of the workers ids.
func readBatchLogs(dir string, ids []string) ([]LoggedBatch, error) {
	var all []LoggedBatch
	for _, id := range ids {
		bs, err := ReadBatchLog(dir, id)
		if err != nil {
			return nil, err
		}
		all = append(all, bs...)
	}
	return all, nil
}

// killedBatch is a batch open in a process when it was SIGKILLed.
type killedBatch struct {
	worker string
	b      LoggedBatch
}

// stopInBatch SIGSTOPs p once it holds an open batch transaction of at least size messages:
// its session is idle in a transaction that has written (the batch's claims) and its batch log
// has a batch of that size that has not closed. It returns, with p stopped, the xids of its open
// transactions and its batches that have not closed. If they committed in between, it lets p
// run again and retries.
func (r *Run) stopInBatch(ctx context.Context, p *Proc, app string, size int, timeout time.Duration) ([]int64, []LoggedBatch, error) {
	deadline := time.Now().Add(timeout)
	openOf := func() ([]LoggedBatch, bool, error) {
		bs, err := ReadBatchLog(r.AuditDir, p.ID)
		var open []LoggedBatch
		big := false
		for _, b := range bs {
			if !b.Closed {
				open = append(open, b)
				big = big || len(b.Open.Seqs) >= size
			}
		}
		return open, big, err
	}
	for {
		held, err := r.heldClaims(ctx, app)
		if err != nil {
			return nil, nil, err
		}
		if held > 0 {
			if _, big, err := openOf(); err != nil {
				return nil, nil, err
			} else if big {
				if err := p.Signal(syscall.SIGSTOP); err != nil {
					return nil, nil, err
				}
				xids, err := r.openXids(ctx, app)
				if err != nil {
					return nil, nil, err
				}
				open, big, err := openOf()
				if err != nil {
					return nil, nil, err
				}
				if len(xids) > 0 && big {
					return xids, open, nil
				}
				if err := p.Signal(syscall.SIGCONT); err != nil {
					return nil, nil, err
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("reliability: worker %s held no open batch of %d messages within %v: %s", p.ID, size, timeout, tail(p.Output(), 1500))
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
}

// openXids returns the xids of the transactions of the sessions named app that are idle after a
// write.
func (r *Run) openXids(ctx context.Context, app string) ([]int64, error) {
	rows, err := r.Pool.Query(ctx, `SELECT backend_xid::text::bigint FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`, app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var x int64
		if err := rows.Scan(&x); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// xactStatus waits until the transaction xid (32 bits, of the current epoch) is no longer in
// progress and returns its status: committed or aborted. The server aborts a killed client's
// transaction when it reads the closed connection.
func (r *Run) xactStatus(ctx context.Context, xid int64, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		var st string
		err := r.Pool.QueryRow(ctx, `SELECT coalesce(txid_status((txid_current() >> 32 << 32) | $1::bigint), 'unknown')`, xid).Scan(&st)
		if err != nil || st != "in progress" || time.Now().After(deadline) {
			return st, err
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
}

func runBatchSigkill(ctx context.Context, e *Env, s Size) (*Report, error) {
	return batchSigkill(ctx, e, s, "batch-sigkill", false)
}

func runBatchSigkillControl(ctx context.Context, e *Env, s Size) (*Report, error) {
	return batchSigkill(ctx, e, Size{Messages: min(s.Messages, 40), Workers: 1}, "control-batch-sigkill-ack-before-commit", true)
}

// batchSigkill sends every event first, then runs worker processes whose batches are slow (a
// pause in every message's work, so a batch of 5 holds its transaction about a second), and
// SIGKILLs each one (up to 2 kills per worker) while it holds an open batch of at least 3
// messages: the process is SIGSTOPped once its session is idle in the batch's transaction and
// its batch log shows the batch open, and killed while stopped. With control, the first process
// of each slot deletes every message of a batch before the batch's transaction (and the kill
// then loses them); the restarted ones are healthy.
func batchSigkill(ctx context.Context, e *Env, s Size, name string, control bool) (*Report, error) {
	const (
		vis   = 3 * time.Second
		batch = 5
		size  = 3 // the smallest open batch a kill waits for
	)
	r, err := e.NewRun(ctx, name, RunOptions{Size: s, Visibility: vis, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	n := min(s.Messages, 120)
	prod := &Producer{Run: r, Retries: 2}
	if err := prod.Send(ctx, GoodEvents("bkill", n), 0); err != nil {
		return nil, err
	}
	workers := max(1, min(s.Workers, 2))
	procs := make([]*Proc, workers)
	apps := make([]string, workers)
	var ids []string
	start := func(i int, id string, broken bool) error {
		c := batchConfig(r, id, batch)
		c.Concurrency, c.SlowDelay = 2, 200*time.Millisecond
		if broken {
			c.Mode = ModeAckBeforeCommit // CrashAt 0: the harness kills it
		}
		apps[i] = r.Schema + "-" + id
		var err error
		if c.DatabaseURL, err = withApplicationName(r.DBURL, apps[i]); err != nil {
			return err
		}
		ids = append(ids, id)
		procs[i], err = r.StartProc(c)
		return err
	}
	for i := range workers {
		if err := start(i, fmt.Sprintf("w%d", i), control); err != nil {
			return nil, err
		}
	}
	var killed []killedBatch
	var checks []string
	kills, gen := 0, 0
	aborted := 0
	for round := range 2 {
		if control && round > 0 {
			break
		}
		for i := range workers {
			xids, open, err := r.stopInBatch(ctx, procs[i], apps[i], size, time.Minute)
			if err != nil {
				return nil, err
			}
			id := procs[i].ID
			procs[i].Kill()
			kills++
			for _, b := range open {
				killed = append(killed, killedBatch{worker: id, b: b})
			}
			for _, x := range xids {
				st, err := r.xactStatus(ctx, x, 30*time.Second)
				if err != nil {
					return nil, err
				}
				if st == "aborted" {
					aborted++
				} else {
					checks = append(checks, fmt.Sprintf("worker %s's transaction %d, open when it was killed, is %s", id, x, st))
				}
			}
			gen++
			if err := start(i, fmt.Sprintf("w%d.%d", i, gen), false); err != nil {
				return nil, err
			}
		}
	}
	if control {
		// The killed batches' messages were deleted unapplied: wait for the queue to empty.
		if err := r.waitQueueEmpty(ctx, s.Wait()); err != nil {
			return nil, err
		}
	} else if err := r.WaitEffects(ctx, n, s.Wait()); err != nil {
		return nil, err
	}
	checks = append(checks, r.termAll(time.Minute)...)
	rep, err := r.finish(ctx, prod, workers, checks, nil)
	if err != nil {
		return rep, err
	}
	// What happened to the batches open at the kills.
	recs, err := ReadDeleteLogs(r.AuditDir)
	if err != nil {
		return nil, err
	}
	type seqWorker struct {
		seq    int64
		worker string
	}
	deleted := map[seqWorker]bool{}
	received := map[int64][]string{}
	for _, d := range recs {
		if d.Status == Received {
			received[d.Seq] = append(received[d.Seq], d.Worker)
		} else {
			deleted[seqWorker{d.Seq, d.Worker}] = true
		}
	}
	rolledBack, committedBefore, msgs, del, redelivered, once := 0, 0, 0, 0, 0, 0
	var sizes []int
	for _, kb := range killed {
		var keys []string
		for _, k := range kb.b.Open.Keys {
			if k != "" {
				keys = append(keys, k)
			}
		}
		var mine int
		if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE worker = $1 AND key = ANY($2)`, kb.worker, keys).Scan(&mine); err != nil {
			return nil, err
		}
		switch mine {
		case 0:
		case len(keys):
			// The stop landed between the batch's COMMIT and its closing line: it committed whole.
			committedBefore++
			continue
		default:
			rep.Checks = append(rep.Checks, fmt.Sprintf("worker %s's batch %d, open at the kill, committed %d of its %d events", kb.worker, kb.b.Open.Batch, mine, len(keys)))
			continue
		}
		rolledBack++
		sizes = append(sizes, len(kb.b.Open.Seqs))
		for j, seq := range kb.b.Open.Seqs {
			msgs++
			if deleted[seqWorker{seq, kb.worker}] {
				del++
			}
			if slices.ContainsFunc(received[seq], func(w string) bool { return w != kb.worker }) {
				redelivered++
			}
			var c int
			if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE key = $1`, kb.b.Open.Keys[j]).Scan(&c); err != nil {
				return nil, err
			}
			if c == 1 {
				once++
			}
		}
	}
	slices.Sort(sizes)
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d SIGKILLs, each while its process was stopped in an open batch transaction; %d open transactions aborted by the server; "+
		"%d batches open at the kills rolled back whole (sizes %v, %d messages): %d of those messages deleted by the killed process, %d redelivered to another, %d applied exactly once; %d batches had committed whole just before",
		kills, aborted, rolledBack, sizes, msgs, del, redelivered, once, committedBefore))
	if !slices.ContainsFunc(sizes, func(n int) bool { return n >= size }) {
		rep.Checks = append(rep.Checks, fmt.Sprintf("no kill hit an open batch of %d messages or more", size))
	}
	if aborted == 0 {
		rep.Checks = append(rep.Checks, "no open transaction was seen aborted after a kill")
	}
	if del > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d messages of batches open at the kills had been deleted by the killed process", del))
	}
	if redelivered != msgs {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of the %d messages of batches open at the kills were redelivered to another worker", redelivered, msgs))
	}
	if once != msgs {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of the %d events of batches open at the kills were applied exactly once", once, msgs))
	}
	return rep, nil
}

// waitQueueEmpty waits until the run's queue holds no message (visible, in flight or delayed).
func (r *Run) waitQueueEmpty(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := r.Count(ctx, r.Queue.URL)
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("reliability: count the queue: %w", err)
			}
			return fmt.Errorf("reliability: %d messages still in the queue after %v", n, timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// pgProxy starts a [PGProxy] in front of the run's database and returns it with the URL that
// goes through it.
func (r *Run) pgProxy() (*PGProxy, string, error) {
	hp, err := hostPort(r.DBURL)
	if err != nil {
		return nil, "", err
	}
	px, err := NewPGProxy(hp)
	if err != nil {
		return nil, "", err
	}
	purl, err := px.URL(r.DBURL)
	if err != nil {
		px.Close()
		return nil, "", err
	}
	return px, purl, nil
}

func runBatchCommitCut(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "batch-commit-cut", RunOptions{Size: s, Visibility: 3 * time.Second, MaxReceive: 3})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	px, purl, err := r.pgProxy()
	if err != nil {
		return nil, err
	}
	defer px.Close()
	n := min(s.Messages, 200)
	prod := &Producer{Run: r, Retries: 2}
	// Every event first, so that batches fill.
	if err := prod.Send(ctx, GoodEvents("bcut", n), 0); err != nil {
		return nil, err
	}
	px.CutEvery.Store(3)
	var set workerSet
	defer set.stopAll(ctx)
	workers := max(1, min(s.Workers, 2))
	var ids []string
	for i := range workers {
		c := batchConfig(r, fmt.Sprintf("w%d", i), 10)
		c.DatabaseURL, c.Concurrency, c.JitterDelay = purl, 2, 5*time.Millisecond
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
		ids = append(ids, c.ID)
	}
	if err := r.WaitEffects(ctx, n, s.Wait()); err != nil {
		return nil, err
	}
	px.CutEvery.Store(0)
	unknown := 0
	for _, w := range set.ws {
		unknown += w.Audit.UnknownCommits()
	}
	checks := set.stopAll(ctx)
	if px.CutBefore.Load() == 0 || px.CutAfter.Load() == 0 {
		checks = append(checks, fmt.Sprintf("the proxy cut %d COMMITs before and %d after the server got them; both kinds must happen",
			px.CutBefore.Load(), px.CutAfter.Load()))
	}
	bs, err := readBatchLogs(r.AuditDir, ids)
	if err != nil {
		return nil, err
	}
	multi, biggest := 0, 0
	for _, b := range bs {
		if b.Closed && len(b.Results) >= 2 {
			multi++
			biggest = max(biggest, len(b.Results))
		}
	}
	if multi == 0 {
		checks = append(checks, "no batch held several messages")
	}
	rep, err := r.finish(ctx, prod, workers, checks, []string{fmt.Sprintf("%d batches through the proxy (%d of 2 or more messages, up to %d), %d COMMITs; "+
		"cut %d before the server got them and %d after; %d deliveries left with an unknown commit (a delete of any is counted as a delete without a committed row)",
		len(bs), multi, biggest, px.Commits(), px.CutBefore.Load(), px.CutAfter.Load(), unknown)})
	// An unknown COMMIT is settled in process (the batch claims again), so a cut hands nothing
	// back to the queue unless the COMMITs of three attempts are cut: with a cut every third
	// COMMIT, few redeliveries. Handing back every cut batch redelivered about half the messages,
	// and the receives it spent ran events into the DLQ unapplied (maxReceiveCount 3: 190 and 198
	// of 200 applied, the run stalled).
	if err == nil && rep.Redelivered > n/3 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d messages were redelivered: cut COMMITs were handed back to the queue instead of settled in process",
			rep.Redelivered, n))
	}
	return rep, err
}

func runBatchPoison(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "batch-poison", RunOptions{Size: s, Visibility: 2 * time.Second, MaxReceive: 3})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prod := &Producer{Run: r, Retries: 2}
	good := min(s.Messages, 90)
	kinds := []string{KindPanic, KindUndecodable, KindMissingKey}
	poison := PoisonEvents("bpoison", 2*len(kinds), kinds)
	// Every event first, so that batches fill, each poison among good ones.
	if err := prod.Send(ctx, shuffle(append(GoodEvents("bgood", good), poison...)), 0); err != nil {
		return nil, err
	}
	met := &counters{}
	var set workerSet
	defer set.stopAll(ctx)
	c := batchConfig(r, "w0", 10)
	c.Concurrency, c.Backoff, c.Metrics = 2, 200*time.Millisecond, met
	if _, err := set.start(ctx, c); err != nil {
		return nil, err
	}
	var checks []string
	if err := r.WaitEffects(ctx, good, s.Wait()); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.Wait())
	for {
		n, err := r.Count(ctx, r.Queue.DLQURL)
		if err == nil && n >= len(poison) {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("%d of %d poison messages in the DLQ after %v", n, len(poison), s.Wait()))
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	checks = append(checks, set.stopAll(ctx)...)
	d, err := r.Drain(ctx, DrainOptions{Timeout: s.Wait()})
	if err != nil {
		return nil, err
	}
	o, err := r.Observe(ctx, prod.Sends(), d)
	if err != nil {
		return nil, err
	}
	rep := Check(o)
	rep.Scenario, rep.Workers, rep.Duration = r.Name, 1, time.Since(r.Started)
	rep.Checks = append(rep.Checks, checks...)
	if r.dlqMismatch != "" {
		rep.Notes = append(rep.Notes, r.dlqMismatch)
	}
	if rep.PoisonInDLQ != rep.PoisonSent {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d poison messages in the DLQ", rep.PoisonInDLQ, rep.PoisonSent))
	}
	if rep.GoodInDLQ > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages in the DLQ", rep.GoodInDLQ))
	}
	// The poison's message ids, as the worker received them, and the DLQ's.
	poisonSeq := map[int64]bool{}
	var poisonKeys []string
	for _, sd := range prod.Sends() {
		if IsPoison(sd.Kind) && sd.Status == SendOK {
			poisonSeq[sd.Seq] = true
			poisonKeys = append(poisonKeys, sd.Key)
		}
	}
	inDLQ := map[int64]string{}
	for _, m := range d.DLQ {
		inDLQ[m.Seq] = m.ID
	}
	bs, err := ReadBatchLog(r.AuditDir, "w0")
	if err != nil {
		return nil, err
	}
	idOK := map[int64]bool{}
	shared, goodDone, goodFailed := 0, 0, 0 // batches with a poison and good messages; their good messages
	for _, b := range bs {
		hasPoison, goods := false, 0
		for j, seq := range b.Open.Seqs {
			if poisonSeq[seq] {
				hasPoison = true
				if id, ok := inDLQ[seq]; ok && id == b.Open.IDs[j] {
					idOK[seq] = true
				}
			} else {
				goods++
			}
		}
		if !hasPoison || goods == 0 || !b.Closed {
			continue
		}
		shared++
		for j, seq := range b.Open.Seqs {
			if poisonSeq[seq] {
				if b.Results[j] == "" {
					rep.Checks = append(rep.Checks, fmt.Sprintf("poison message %d was done in batch %d", seq, b.Open.Batch))
				}
				continue
			}
			if b.Results[j] == "" {
				goodDone++
			} else {
				goodFailed++
			}
		}
	}
	recs, err := ReadDeleteLogs(r.AuditDir)
	if err != nil {
		return nil, err
	}
	committedDeletes := 0
	for _, dr := range recs {
		if dr.Worker == "w0" && dr.Status == DeleteCommitted {
			committedDeletes++
		}
	}
	var poisonEffects int
	if err := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE key = ANY($1)`, poisonKeys).Scan(&poisonEffects); err != nil {
		return nil, err
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d good events and %d poison (%s); %d batches held a poison message and good ones: %d of their good messages done (committed or duplicates), %d not; "+
		"%d poison messages in the DLQ with the message id the worker had received; %d effects of poison keys; worker: %d batches of %d messages, %d rolled back alone, %d batch retries, %d deleted by w0 after a committed row",
		good, len(poison), strings.Join(kinds, ", "), shared, goodDone, goodFailed, len(idOK), poisonEffects,
		met.get(worker.Batches), met.get(worker.BatchedMessages), met.get(worker.RolledBack), met.get(worker.BatchRetries), committedDeletes))
	if shared == 0 || goodDone == 0 {
		rep.Checks = append(rep.Checks, "no batch held a poison message and good ones that committed")
	}
	if goodFailed > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d good messages failed in a batch with a poison one", goodFailed))
	}
	if len(idOK) != len(poisonSeq) {
		rep.Checks = append(rep.Checks, fmt.Sprintf("%d of %d poison messages found in the DLQ under the message id the worker received", len(idOK), len(poisonSeq)))
	}
	if poisonEffects > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("poison keys have %d effects", poisonEffects))
	}
	if met.get(worker.RolledBack) == 0 {
		rep.Checks = append(rep.Checks, "no message of a batch was rolled back alone")
	}
	return &rep, nil
}

func runBatchHotKey(ctx context.Context, e *Env, s Size) (*Report, error) {
	r, err := e.NewRun(ctx, "batch-hot-key", RunOptions{Size: s, Visibility: 10 * time.Second, MaxReceive: 20})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	copies := max(100, min(s.Messages, 400))
	prod := &Producer{Run: r, Retries: 2}
	hot := Event{Key: "batch-hot-1", Value: "hot-value", Kind: KindGood}
	evs := make([]Event, copies)
	for i := range evs {
		evs[i] = hot
	}
	// Every copy first, then every worker at once: each batch holds copies (twins), and the
	// concurrent batches of the workers claim the same key.
	if err := prod.Send(ctx, evs, 0); err != nil {
		return nil, err
	}
	deadlocks := func() (int64, error) {
		var n int64
		err := r.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
		return n, err
	}
	dl0, err := deadlocks()
	if err != nil {
		return nil, err
	}
	met := &counters{}
	var set workerSet
	defer set.stopAll(ctx)
	workers := max(3, s.Workers)
	for i := range workers {
		c := batchConfig(r, fmt.Sprintf("w%d", i), 10)
		c.Concurrency, c.MaxConns, c.Metrics = 4, 4, met
		if _, err := set.start(ctx, c); err != nil {
			return nil, err
		}
	}
	var checks []string
	deadline := time.Now().Add(s.Wait())
	for {
		n, err := r.Count(ctx, r.Queue.URL)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			checks = append(checks, fmt.Sprintf("the hot key did not drain in %v (%d left)", s.Wait(), n))
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	checks = append(checks, set.stopAll(ctx)...)
	dl1, err := deadlocks()
	if err != nil {
		return nil, err
	}
	retries := met.get(worker.BatchRetries)
	if retries != 0 {
		checks = append(checks, fmt.Sprintf("%d batches were rolled back and retried (deadlock or serialization failure)", retries))
	}
	if met.get(worker.Batches) == 0 || met.get(worker.BatchedMessages) <= met.get(worker.Batches) {
		checks = append(checks, fmt.Sprintf("%d batches of %d messages: no batch held several copies", met.get(worker.Batches), met.get(worker.BatchedMessages)))
	}
	notes := []string{fmt.Sprintf("%d copies of one key to %d workers (4 batches of up to 10 each); %d batches of %d messages, %d processed, %d duplicates, %d blocked, %d batch retries; "+
		"pg_stat_database.deadlocks of the test database went from %d to %d (database-wide: scenarios running at the same time count too)",
		copies, workers, met.get(worker.Batches), met.get(worker.BatchedMessages), met.get(worker.Processed), met.get(worker.Duplicates), met.get(worker.Blocked), retries, dl0, dl1)}
	rep, err := r.finish(ctx, prod, workers, checks, notes)
	if err == nil {
		var n int
		if qerr := r.Pool.QueryRow(ctx, `SELECT count(*) FROM `+r.Schema+`.effects WHERE key = $1`, hot.Key).Scan(&n); qerr != nil {
			return nil, qerr
		}
		if n != 1 {
			rep.Checks = append(rep.Checks, fmt.Sprintf("the hot key has %d effects", n))
		}
	}
	return rep, err
}
