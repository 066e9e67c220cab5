package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

// MaxBatch is the most items one [Inbox.RunBatch] takes. Each item runs in a savepoint of its
// own, a subtransaction; PostgreSQL keeps the subtransaction ids of a transaction in a per-backend
// cache of 64, and once a transaction has more, every snapshot taken by every session gets slower
// (the server must look subtransactions up in pg_subtrans). 20 items, each of whose functions may
// open one savepoint of its own (a nested pgx Begin), stay well under that.
const MaxBatch = 20

// maxBatchAttempts is how many times RunBatch runs a batch in one transaction before it falls back
// to one transaction per item.
const maxBatchAttempts = 3

// itemSavepoint is the savepoint each item's function runs in.
const itemSavepoint = "sqsinbox_item"

// Item is one event of a batch run by [Inbox.RunBatch].
type Item struct {
	// Key is the event's key, as for [Inbox.Run].
	Key string
	// Group, when not empty, orders the item with the others of the same Group: they run in the
	// order given, and once one of them is not processed (its function failed, its claim was
	// blocked, its context ended), the later ones are not run and get [ErrGroupHalted]. A FIFO
	// queue's message group is one.
	Group string
	// Ctx is the item's own context: Fn runs with it (and the event's key in it), and when it
	// ends before Fn's turn, the item is not run. nil means RunBatch's ctx. It should descend from
	// RunBatch's ctx.
	Ctx context.Context
	// Fn is the work for the event, as for [Inbox.Run], except that its transaction is shared with
	// the other items of the batch: see [Inbox.RunBatch].
	Fn Func
}

// Result is what [Inbox.RunBatch] did with one item: Outcome when Err is nil.
type Result struct {
	Outcome Outcome
	Err     error
}

// BatchStats counts what happened inside one [Inbox.RunBatch].
type BatchStats struct {
	// Items is the number of items run in the batch's transaction (not counting invalid keys).
	Items int
	// RolledBack is the number of items whose function failed and was rolled back to its
	// savepoint while the rest of the batch went on.
	RolledBack int
	// Retries is the number of times the whole transaction was rolled back and run again: a
	// deadlock or serialization failure, or an item whose context ended during a statement (which
	// closes the connection).
	Retries int
	// Fallback is true when the batch ended as one transaction per item: a claim waited
	// Config.LockTimeout for another transaction's uncommitted claim (the batch cannot tell which
	// item), or the retries were used up.
	Fallback bool
}

var (
	// ErrGroupHalted is the error of an item that was not run because an earlier item of its Group
	// was not processed. Nothing of it was written; retry it after the one that failed.
	ErrGroupHalted = errors.New("inbox: not run: an earlier event of its group in the batch was not processed")
	// ErrTwinNotProcessed is the error of an item whose key an earlier item of the batch also had,
	// when that earlier item was not processed. Nothing of it was written; retry it.
	ErrTwinNotProcessed = errors.New("inbox: not run: an earlier item of the batch had the same key and was not processed")
	// ErrItemRolledBack is the error of an item whose function called Rollback on the transaction
	// it was given: its writes were undone, its claim with them.
	ErrItemRolledBack = errors.New("inbox: the function rolled back its transaction")
)

// RunBatch processes several events for handler in one READ COMMITTED transaction: one COMMIT
// (and so one WAL flush) for all of them, which is what makes a batch faster than as many calls
// of [Inbox.Run]. The results come back in the order of items.
//
// It claims every item's key in one statement, in a stable order of the keys (so that two batches
// that share keys wait for each other instead of deadlocking), bounded by Config.LockTimeout and
// Config.IdleInTransactionTimeout as Run's claim is. Then it runs the functions of the fresh
// claims one after the other, in the order of items, each in a savepoint of its own:
//   - a function that fails, panics, or whose item context ends, is rolled back to its savepoint,
//     its claim with it; its error is its result; the others go on and commit;
//   - the transaction a function gets is the batch's, wrapped: Commit does nothing (the batch
//     commits) and Rollback undoes this item's work only and fails the item with
//     [ErrItemRolledBack]; Begin opens a savepoint inside the item's, as usual;
//   - an item whose key was already claimed is [Duplicate]; of two items with the same key, the
//     first runs and the second is a Duplicate once the first committed, or fails with
//     [ErrTwinNotProcessed] when the first was not processed;
//   - items of one Group run in order and halt at the first one not processed ([ErrGroupHalted]).
//
// A deadlock or serialization failure, or a connection closed because an item's context ended
// during a statement, rolls the whole transaction back and runs the items not yet decided again
// (counted in Retries). When a claim waits out Config.LockTimeout (another transaction holds one
// of the keys uncommitted), or after 3 attempts, the items left are run one [Inbox.Run] each.
//
// If COMMIT's outcome is unknown, every item that is not a failure of its own gets an error
// wrapping [ErrCommitUnknown]: nothing of the batch may be acknowledged. If the connection is lost
// otherwise, they get errors wrapping [ErrConnectionLost].
//
// The functions of a batch run on one connection one after the other: the batch commits after
// the sum of their times, and a slow call inside one delays every item behind it.
func (ib *Inbox) RunBatch(ctx context.Context, handler string, items []Item) ([]Result, BatchStats) {
	res := make([]Result, len(items))
	var st BatchStats
	if err := ValidateHandler(handler); err != nil {
		return fill(res, err), st
	}
	if len(items) > MaxBatch {
		return fill(res, fmt.Errorf("inbox: RunBatch got %d items; at most %d (MaxBatch)", len(items), MaxBatch)), st
	}
	r := batchRun{ib: ib, ctx: ctx, handler: handler, items: items, res: res, st: &st,
		decided: make([]bool, len(items))}
	for i := range items {
		if err := ValidateKey(items[i].Key); err != nil {
			r.decide(i, Result{Err: err}) // its group halts from here: see once
			continue
		}
		st.Items++
	}
	for attempt := 1; ; attempt++ {
		retry := r.once()
		if retry == nil {
			break
		}
		if attempt == maxBatchAttempts {
			st.Fallback = true
			r.oneByOne()
			break
		}
		st.Retries++
	}
	return res, st
}

func fill(res []Result, err error) []Result {
	for i := range res {
		res[i].Err = err
	}
	return res
}

// batchRun is the state of one RunBatch across its attempts.
type batchRun struct {
	ib      *Inbox
	ctx     context.Context
	handler string
	items   []Item
	res     []Result
	st      *BatchStats
	decided []bool          // res[i] is final
	halted  map[string]bool // groups with an item not processed, up to the item being run
	claims  []step          // the claim steps begun and not ended, when the inbox has Hooks
}

func (r *batchRun) decide(i int, res Result) {
	r.res[i], r.decided[i] = res, true
}

// halt marks item i's group as halted.
func (r *batchRun) halt(i int) {
	if g := r.items[i].Group; g != "" {
		if r.halted == nil {
			r.halted = map[string]bool{}
		}
		r.halted[g] = true
	}
}

func (r *batchRun) itemCtx(i int) context.Context {
	if c := r.items[i].Ctx; c != nil {
		return c
	}
	return r.ctx
}

// errRetry says that the transaction was rolled back and the undecided items are to run again.
type errRetry struct{ err error }

func (e *errRetry) Error() string { return "inbox: batch rolled back, retrying: " + e.err.Error() }

// once runs the undecided items in one transaction. It returns a non-nil *errRetry when the
// transaction was rolled back for a reason that another attempt can get past; otherwise every
// item is decided when it returns.
func (r *batchRun) once() *errRetry {
	// The keys to claim, distinct and sorted; the first undecided item of each key owns it.
	var keys []string
	owner := make(map[string]int, len(r.items))
	for i := range r.items {
		if r.decided[i] {
			continue
		}
		if _, ok := owner[r.items[i].Key]; !ok {
			owner[r.items[i].Key] = i
			keys = append(keys, r.items[i].Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	r.beginClaims(owner)
	defer r.endClaims(errors.New("inbox: batch rolled back before this item's turn"))
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	b.Queue(r.ib.sql.batchClaim, r.handler, keys)
	b.Queue(resetLockTimeout)
	b.Queue("SAVEPOINT " + itemSavepoint)
	br := r.ib.pool.SendBatch(r.ctx, b)
	tx := br.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.ctx)) }()
	_, beginErr := br.Exec()
	fresh, claimErr := claimedKeys(br)
	_, resetErr := br.Exec()
	_, spErr := br.Exec()
	if err := cmp.Or(beginErr, claimErr, resetErr, spErr, br.Close()); err != nil {
		err = claimError(r.ctx, err)
		r.endClaims(err)
		return r.failAll(tx, err, true)
	}
	spFresh := true // the savepoint holds nothing yet
	var processed []int
	var unclaim []string // keys claimed for items that did not run
	r.halted = nil
	for i := range r.items {
		if r.decided[i] {
			if r.res[i].Err != nil {
				r.halt(i) // the later items of its group must not run
			}
			continue
		}
		it := &r.items[i]
		ictx := r.itemCtx(i)
		switch {
		case it.Group != "" && r.halted[it.Group]:
			r.notRun(i, ErrGroupHalted, &unclaim, owner)
			continue
		case owner[it.Key] != i:
			// A twin: a Duplicate once its owner commits, unless the owner has already failed.
			if o := owner[it.Key]; r.decided[o] && r.res[o].Err != nil {
				r.decide(i, Result{Err: ErrTwinNotProcessed})
				r.halt(i)
			}
			continue
		case !fresh[it.Key]:
			r.decide(i, Result{Outcome: Duplicate})
			r.hookClaim(i, 0)
			continue
		}
		if err := context.Cause(ictx); err != nil {
			r.notRun(i, err, &unclaim, owner)
			continue
		}
		if !spFresh {
			if _, err := tx.Exec(r.ctx, "RELEASE SAVEPOINT "+itemSavepoint+"; SAVEPOINT "+itemSavepoint); err != nil {
				return r.failAll(tx, fmt.Errorf("inbox: savepoint: %w", err), false)
			}
		}
		spFresh = false
		r.hookClaim(i, 1)
		itx := &itemTx{Tx: tx}
		err := call(withEvent(ictx, r.handler, it.Key), itx, it.Fn)
		if err == nil && itx.rolledBack {
			err = ErrItemRolledBack
		}
		if err == nil {
			processed = append(processed, i)
			continue
		}
		if pgtx.ConnLost(tx) {
			if r.ctx.Err() == nil && (ictx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				// The item's own context ended during a statement, which closes the connection:
				// the item failed; the others run again on another connection.
				r.decide(i, Result{Err: err})
				r.halt(i)
				return &errRetry{err}
			}
			return r.failAll(tx, fmt.Errorf("%w: %w", ErrConnectionLost, err), false)
		}
		if retryable(err) {
			return &errRetry{err}
		}
		if _, rbErr := tx.Exec(r.ctx, "ROLLBACK TO SAVEPOINT "+itemSavepoint); rbErr != nil {
			r.decide(i, Result{Err: err})
			r.halt(i)
			return r.failAll(tx, fmt.Errorf("inbox: rollback to savepoint: %w", rbErr), false)
		}
		spFresh = true
		r.st.RolledBack++
		r.decide(i, Result{Err: err})
		r.halt(i)
		// The rollback to the savepoint did not undo the claim, taken before it.
		unclaim = append(unclaim, it.Key)
	}
	if err := context.Cause(r.ctx); err != nil {
		return r.failAll(tx, err, false) // a hard stop must not commit
	}
	if len(unclaim) > 0 {
		if _, err := tx.Exec(r.ctx, r.ib.sql.unclaim, r.handler, unclaim); err != nil {
			if retryable(err) {
				return &errRetry{err}
			}
			return r.failAll(tx, fmt.Errorf("inbox: releasing the claims of failed items: %w", err), false)
		}
	}
	if len(processed) == 0 {
		r.settleTwins(owner)
		return nil
	}
	commits := r.beginCommits(processed)
	if err := tx.Commit(r.ctx); err != nil {
		if retryable(err) {
			r.endCommits(commits, err)
			return &errRetry{err}
		}
		err = commitError(err)
		r.endCommits(commits, err)
		r.unknownAll(err)
		return nil
	}
	r.endCommits(commits, nil)
	for _, i := range processed {
		r.decide(i, Result{Outcome: Processed})
	}
	r.settleTwins(owner)
	return nil
}

// claimedKeys reads the keys the batch claim inserted.
func claimedKeys(br pgx.BatchResults) (map[string]bool, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	fresh := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		fresh[k] = true
	}
	rows.Close()
	return fresh, rows.Err()
}

// notRun decides item i with err before its function ran; its claim, if it owns one, is
// released at the end of the batch.
func (r *batchRun) notRun(i int, err error, unclaim *[]string, owner map[string]int) {
	r.decide(i, Result{Err: err})
	r.halt(i)
	if owner[r.items[i].Key] == i {
		*unclaim = append(*unclaim, r.items[i].Key)
	}
}

// settleTwins decides the items that share their key with an earlier one, once the owners are
// decided.
func (r *batchRun) settleTwins(owner map[string]int) {
	for i := range r.items {
		o, ok := owner[r.items[i].Key]
		if r.decided[i] || !ok || o == i || !r.decided[o] {
			continue
		}
		if r.res[o].Err != nil {
			r.decide(i, Result{Err: ErrTwinNotProcessed})
		} else {
			r.decide(i, Result{Outcome: Duplicate})
			r.hookClaim(i, 0)
		}
	}
}

// failAll rolls the transaction back and gives err to every item not decided. With claim set, err
// came from the claim: a blocked claim falls back to one transaction per item, and a deadlock is
// retried.
func (r *batchRun) failAll(tx pgx.Tx, err error, claim bool) *errRetry {
	_ = tx.Rollback(context.WithoutCancel(r.ctx))
	if r.ctx.Err() == nil {
		switch {
		case claim && errors.Is(err, ErrClaimBlocked):
			r.st.Fallback = true
			r.oneByOne()
			return nil
		case retryable(err):
			return &errRetry{err}
		}
	}
	if pgtx.ConnLost(tx) && !errors.Is(err, ErrConnectionLost) {
		err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	for i := range r.items {
		if !r.decided[i] {
			r.decide(i, Result{Err: err})
		}
	}
	return nil
}

// unknownAll gives err (a COMMIT whose outcome is unknown, or refused) to every item that is not
// a failure of its own: duplicates included, so that nothing of the batch is acknowledged.
func (r *batchRun) unknownAll(err error) {
	for i := range r.items {
		if !r.decided[i] || r.res[i].Err == nil {
			r.decide(i, Result{Err: err})
		}
	}
}

// oneByOne runs every undecided item in a transaction of its own, with [Inbox.Run], keeping the
// group order.
func (r *batchRun) oneByOne() {
	r.halted = nil
	for i := range r.items {
		if r.decided[i] {
			if r.res[i].Err != nil {
				r.halt(i)
			}
			continue
		}
		it := &r.items[i]
		if it.Group != "" && r.halted[it.Group] {
			r.decide(i, Result{Err: ErrGroupHalted})
			continue
		}
		out, err := r.ib.Run(r.itemCtx(i), r.handler, it.Key, it.Fn)
		r.decide(i, Result{Outcome: out, Err: err})
		if err != nil {
			r.halt(i)
		}
	}
}

// step is an observation of one item's claim or commit by the inbox's Hooks.
type step struct {
	ctx context.Context
	s   *StepInfo
}

// beginClaims starts the claim step of each key's owner, before the batch's claim statement.
func (r *batchRun) beginClaims(owner map[string]int) {
	h := r.ib.cfg.Hooks
	if h == nil {
		return
	}
	if r.claims == nil {
		r.claims = make([]step, len(r.items))
	}
	for _, i := range owner {
		ctx, s := h.begin(r.itemCtx(i), StepClaim, r.handler, r.items[i].Key, false)
		r.claims[i] = step{ctx, s}
	}
}

// hookClaim ends item i's claim step: rows 1 for a fresh claim, 0 for a duplicate. A twin's
// claim, which had no step of its own, is begun and ended here.
func (r *batchRun) hookClaim(i int, rows int64) {
	h := r.ib.cfg.Hooks
	if h == nil {
		return
	}
	st := r.claims[i]
	if st.s == nil {
		st.ctx, st.s = h.begin(r.itemCtx(i), StepClaim, r.handler, r.items[i].Key, false)
	}
	r.claims[i] = step{}
	h.claimDone(st.ctx, st.s, rows, nil)
}

// endClaims ends the claim steps still open, with err.
func (r *batchRun) endClaims(err error) {
	h := r.ib.cfg.Hooks
	if h == nil {
		return
	}
	for i, st := range r.claims {
		if st.s != nil {
			r.claims[i] = step{}
			h.claimDone(st.ctx, st.s, 0, err)
		}
	}
}

func (r *batchRun) beginCommits(processed []int) []step {
	h := r.ib.cfg.Hooks
	if h == nil {
		return nil
	}
	steps := make([]step, len(processed))
	for j, i := range processed {
		steps[j].ctx, steps[j].s = h.begin(r.itemCtx(i), StepCommit, r.handler, r.items[i].Key, false)
	}
	return steps
}

func (r *batchRun) endCommits(steps []step, err error) {
	if h := r.ib.cfg.Hooks; h != nil {
		for _, st := range steps {
			h.commitDone(st.ctx, st.s, err)
		}
	}
}

// retryable reports a deadlock or serialization failure: the transaction was rolled back by the
// server and can be run again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// itemTx is the transaction an item's function gets: the batch's, whose Commit and Rollback
// concern this item only.
type itemTx struct {
	pgx.Tx
	rolledBack bool
}

// Commit does nothing: the batch commits every item's work at its end.
func (t *itemTx) Commit(context.Context) error { return nil }

// Rollback undoes this item's work (back to its savepoint) and fails the item.
func (t *itemTx) Rollback(ctx context.Context) error {
	t.rolledBack = true
	_, err := t.Exec(ctx, "ROLLBACK TO SAVEPOINT "+itemSavepoint)
	return err
}
