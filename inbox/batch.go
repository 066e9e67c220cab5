package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

// MaxBatch is the most items one [Inbox.RunBatch] takes.
const MaxBatch = 20

// SubtransactionBudget is the most savepoints one transaction of [Inbox.RunBatch] opens before it
// commits early. Each item runs in a savepoint of its own (a subtransaction), and a function may
// open more (a nested Begin). PostgreSQL keeps the ids of a transaction's subtransactions that
// wrote in a per-backend cache of 64; past that, every snapshot of every session must look them
// up in pg_subtrans, and the whole server slows down. So before an item starts, RunBatch commits
// what it has done when that item could cross the budget, counting one savepoint for the item and
// as many as the most any earlier item of the batch opened, and runs the rest in a new
// transaction. Savepoints written as SQL and PL/pgSQL EXCEPTION blocks are not counted: the
// budget leaves room for a few of them.
const SubtransactionBudget = 48

// maxBatchAttempts is how many times RunBatch runs a batch in one transaction before it falls back
// to one transaction per item.
const maxBatchAttempts = 3

// retryJitter bounds the random wait before a batch runs again (times the attempt number).
const retryJitter = 10 * time.Millisecond

// itemSavepoint is the savepoint each item's function runs in.
const itemSavepoint = "sqsinbox_item"

// itemSavepointAgain ends the item savepoint, keeping its work, and opens it again for the next
// item: sent with that item's first statement (txRecord.pre).
var itemSavepointAgain = newPending("RELEASE SAVEPOINT "+itemSavepoint, "SAVEPOINT "+itemSavepoint)

// Item is one event of a batch run by [Inbox.RunBatch].
type Item struct {
	// Handler is the handler processing the event, as for [Inbox.Run]: the items of one batch may
	// have different handlers (a queue that carries several event types).
	Handler string
	// Key is the event's key, as for [Inbox.Run].
	Key string
	// Ctx is the item's own context: Fn runs with it (and the event's key in it), and when it
	// ends before Fn's turn, the item is not run. nil means RunBatch's ctx. It should descend from
	// RunBatch's ctx.
	Ctx context.Context
	// Timeout bounds Fn from the moment its turn comes: its context then ends with the cause
	// [ErrTimeout], and the item fails with an error wrapping it (also when Fn returns nil after
	// it). 0 means no bound of its own.
	Timeout time.Duration
	// Delivery is how the event arrived, recorded with its claim (see [Delivery]).
	Delivery Delivery
	// Fn is the work for the event, as for [Inbox.Run], except that its transaction is shared with
	// the other items of the batch: see [Inbox.RunBatch].
	Fn Func
}

// Order orders the items of a batch: [Inbox.RunBatch] asks it whether an item may run just before
// the item's turn, and tells it which items were not processed. The worker's batches implement it
// for FIFO message groups (worker.Batch), so that the rule "a message not done halts the later
// ones of its group" lives in one place.
type Order interface {
	// Runnable returns nil when item i may run now, or why it must not (an earlier item it follows
	// was not processed). An item that must not run is not run, its claim is released, and the
	// reason is its result.
	Runnable(i int) error
	// Halt tells that item i was not processed: the items that follow it must not run.
	Halt(i int)
}

// Result is what [Inbox.RunBatch] did with one item: Outcome when Err is nil.
type Result struct {
	Outcome Outcome
	Err     error
}

// BatchStats counts what happened inside one [Inbox.RunBatch].
type BatchStats struct {
	// Items is the number of items run in the batch's transactions (not counting invalid keys).
	Items int
	// Commits is the number of transactions the batch committed: 1 normally, more when the
	// subtransaction budget made it commit early (see [SubtransactionBudget]).
	Commits int
	// RolledBack is the number of items whose function failed and was rolled back to its
	// savepoint while the rest of the batch went on.
	RolledBack int
	// Retries is the number of times the whole transaction was rolled back and run again: a
	// deadlock or serialization failure, or an item whose context ended during a statement (which
	// closes the connection). The items run again are not failed.
	Retries int
	// Fallback is true when the batch ended as one transaction per item: a claim waited
	// Config.LockTimeout for another transaction's uncommitted claim (the batch cannot tell which
	// item), or the retries were used up.
	Fallback bool
}

var (
	// ErrTwinNotProcessed is the error of an item whose (handler, key) an earlier item of the batch
	// also had, when that earlier item was not processed. Nothing of it was written; retry it.
	ErrTwinNotProcessed = errors.New("inbox: not run: an earlier item of the batch had the same key and was not processed")
	// ErrBatchStopped is the error of the items of a batch that stopped at another item's
	// broken deployment ([DeploymentError]): they were not run (or were rolled back unfailed) and
	// nothing of them was written. Retry them once the deployment is fixed.
	ErrBatchStopped = errors.New("inbox: not run: the batch stopped at another item's broken deployment")
)

// RunBatch processes several events in one READ COMMITTED transaction: one COMMIT (and so one WAL
// flush) for all of them, which is what makes a batch faster than as many calls of [Inbox.Run].
// The results come back in the order of items. order, when not nil, orders the items (see
// [Order]).
//
// It claims every item's (handler, key) in one statement, in a stable order (so that two batches
// that share keys wait for each other instead of deadlocking), bounded by Config.LockTimeout and
// Config.IdleInTransactionTimeout as Run's claim is. Then it runs the functions of the fresh
// claims one after the other, in the order of items, each in a savepoint of its own, and decides
// each item's outcome as [Inbox.Run] does, item for item (the package doc's outcome table): an
// item that fails is rolled back to its savepoint, its claim with it, and the others go on and
// commit. Besides:
//   - an item whose key was already claimed is [Duplicate]; of two items with the same handler
//     and key, the first runs and the second is a Duplicate once the first committed, or fails
//     with [ErrTwinNotProcessed] when the first was not processed;
//   - an item whose context ended during a statement closes the connection: it fails, and the
//     items not yet decided run again in a new transaction, unfailed (counted in Retries), as
//     they do after a deadlock or a serialization failure;
//   - an item that meets a broken deployment stops the batch: everything rolls back, that item
//     fails with a *[DeploymentError] and the others not yet decided with [ErrBatchStopped];
//   - when a claim waits out Config.LockTimeout (another transaction holds one of the keys
//     uncommitted), or after 3 attempts, the items left are run one [Inbox.Run] each;
//   - before an item that could take the transaction past [SubtransactionBudget] savepoints, the
//     work so far commits and the rest runs in a new transaction.
//
// If COMMIT's outcome is unknown (the connection broke during it), the batch runs again: its
// claims find the rows the COMMIT wrote (duplicates) or take them and run the items again, as their
// redeliveries would. If that attempt is blocked by the first transaction, or the COMMITs of all 3
// attempts have unknown outcomes, every item not decided before gets an error wrapping
// [ErrCommitUnknown]: it may not be acknowledged. If the connection is lost otherwise, they get errors wrapping
// [ErrConnectionLost].
//
// The functions of a batch run on one connection one after the other: the batch commits after
// the sum of their times, and a slow call inside one delays every item behind it.
func (ib *Inbox) RunBatch(ctx context.Context, items []Item, order Order) ([]Result, BatchStats) {
	res := make([]Result, len(items))
	var st BatchStats
	if len(items) > MaxBatch {
		return fill(res, fmt.Errorf("inbox: RunBatch got %d items; at most %d (MaxBatch)", len(items), MaxBatch)), st
	}
	r := batchRun{ib: ib, ctx: ctx, items: items, order: order, res: res, st: &st,
		decided: make([]bool, len(items)), invalid: make([]error, len(items))}
	for i := range items {
		// Decided in its turn, so that it halts only the items after it.
		if r.invalid[i] = validateClaim(items[i].Handler, items[i].Key); r.invalid[i] == nil {
			r.invalid[i] = ib.checkKeyTime(items[i].Key)
		}
		if r.invalid[i] == nil {
			st.Items++
		}
	}
	for attempt := 1; ; {
		switch r.once() {
		case attemptDone:
			return res, st
		case attemptMore:
			continue // committed early: not a retry
		case attemptRetry:
			if attempt < maxBatchAttempts {
				// A moment's jitter first: a deadlock victim that runs again at once can take the
				// row its survivor was about to lock, and deadlock with it again.
				t := time.NewTimer(time.Duration(rand.Int64N(int64(retryJitter) * int64(attempt))))
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				attempt++
				st.Retries++
				continue
			}
		}
		// The one place a batch gives up on its transaction: a claim blocked by another
		// transaction's uncommitted claim (the batch cannot tell which item), or the attempts
		// used up. Items whose COMMIT's outcome is unknown are left to their redeliveries (a
		// blocked claim then is most likely that COMMIT's own transaction, not yet ended); the
		// others run one transaction each.
		if r.unknown != nil {
			r.unknownAll(r.unknown)
			return res, st
		}
		st.Fallback = true
		r.oneByOne()
		return res, st
	}
}

func fill(res []Result, err error) []Result {
	for i := range res {
		res[i].Err = err
	}
	return res
}

// pair is a claim: a handler and an event key.
type pair struct{ handler, key string }

func (it *Item) pair() pair { return pair{it.Handler, it.Key} }

// batchRun is the state of one RunBatch across its attempts.
type batchRun struct {
	ib      *Inbox
	ctx     context.Context
	items   []Item
	order   Order
	res     []Result
	st      *BatchStats
	unknown error   // the last COMMIT of this batch whose outcome was unknown
	decided []bool  // res[i] is final
	invalid []error // why item i's handler or key is refused, or nil
	claims  []step  // the claim steps begun and not ended, when the inbox has Hooks
}

// decide makes res item i's final result. An item not processed halts the items that follow it.
func (r *batchRun) decide(i int, res Result) {
	r.res[i], r.decided[i] = res, true
	if res.Err != nil && r.order != nil {
		r.order.Halt(i)
	}
}

func (r *batchRun) itemCtx(i int) context.Context {
	if c := r.items[i].Ctx; c != nil {
		return c
	}
	return r.ctx
}

// runCtx is the context item i's function runs with: its own, bounded by its Timeout from now.
func (r *batchRun) runCtx(i int) (context.Context, context.CancelFunc) {
	ctx := r.itemCtx(i)
	if d := r.items[i].Timeout; d > 0 {
		return context.WithTimeoutCause(ctx, d, ErrTimeout)
	}
	return ctx, func() {}
}

// attempt is how one transaction of the batch ended.
type attempt int

const (
	attemptDone     attempt = iota // every item is decided
	attemptRetry                   // rolled back: run the undecided items again
	attemptMore                    // committed early (the subtransaction budget): run the rest
	attemptFallback                // a claim was blocked: give up the shared transaction
)

// attemptTx is one transaction of the batch, while its items run.
type attemptTx struct {
	tx        pgx.Tx
	owner     map[pair]int  // the first undecided item of each claim
	fresh     map[pair]bool // the claims this transaction inserted
	processed []int         // the items whose work is done, to commit
	unclaim   []pair        // fresh claims of items that did not run or failed
	spFresh   bool          // the item savepoint holds nothing yet
	savepts   int           // savepoints opened in this transaction
	perItem   int           // the most savepoints one item took (its own and its nested ones)
}

// once runs the undecided items in one transaction.
func (r *batchRun) once() attempt {
	a := attemptTx{owner: make(map[pair]int, len(r.items)), spFresh: true, savepts: 1, perItem: 1}
	var claims []pair
	for i := range r.items {
		if r.decided[i] || r.invalid[i] != nil {
			continue
		}
		if _, ok := a.owner[r.items[i].pair()]; !ok {
			a.owner[r.items[i].pair()] = i
			claims = append(claims, r.items[i].pair())
		}
	}
	if len(claims) == 0 {
		for i := range r.items {
			if !r.decided[i] {
				r.decide(i, Result{Err: r.invalid[i]})
			}
		}
		return attemptDone
	}
	r.beginClaims(a.owner)
	defer r.endClaims(errors.New("inbox: batch rolled back before this item's turn"))
	if err := r.claim(&a, claims); err != nil {
		return r.claimFailed(a.tx, err)
	}
	defer func() { _ = a.tx.Rollback(context.WithoutCancel(r.ctx)) }()
	for i := range r.items {
		if r.decided[i] {
			continue
		}
		it := &r.items[i]
		if r.invalid[i] != nil {
			r.decide(i, Result{Err: r.invalid[i]})
			continue
		}
		if r.order != nil {
			if err := r.order.Runnable(i); err != nil {
				r.notRun(&a, i, err)
				continue
			}
		}
		switch o := a.owner[it.pair()]; {
		case o != i:
			// A twin: a Duplicate once its owner commits, unless the owner has already failed.
			if r.decided[o] && r.res[o].Err != nil {
				r.decide(i, Result{Err: ErrTwinNotProcessed})
			}
			continue
		case !a.fresh[it.pair()]:
			r.decide(i, Result{Outcome: Duplicate})
			r.hookClaim(i, 0)
			continue
		}
		if err := context.Cause(r.itemCtx(i)); err != nil {
			r.notRun(&a, i, err)
			continue
		}
		if len(a.processed) > 0 && a.savepts+a.perItem > SubtransactionBudget {
			return r.commitEarly(&a, i)
		}
		if out, stop := r.runItem(&a, i); stop {
			return out
		}
	}
	if err := context.Cause(r.ctx); err != nil {
		return r.failAll(a.tx, err) // a hard stop must not commit
	}
	return r.commit(&a)
}

// claim begins the transaction, claims every key and opens the first item savepoint, in one round
// trip.
func (r *batchRun) claim(a *attemptTx, claims []pair) error {
	slices.SortFunc(claims, func(x, y pair) int {
		return cmp.Or(strings.Compare(x.handler, y.handler), strings.Compare(x.key, y.key))
	})
	handlers, keys := make([]string, len(claims)), make([]string, len(claims))
	srcs, ids, counts, traces := make([]pgtype.Int4, len(claims)), make([]pgtype.UUID, len(claims)),
		make([]pgtype.Int2, len(claims)), make([][]byte, len(claims))
	for j, c := range claims {
		handlers[j], keys[j] = c.handler, c.key
		d := r.ib.deliveryArgs(r.ctx, r.items[a.owner[c]].Delivery)
		srcs[j], ids[j], counts[j], traces[j] = d.source, d.messageID, d.receiveCount, d.traceID
	}
	a.fresh = make(map[pair]bool, len(claims))
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	read := func(rows pgx.Rows) error {
		for rows.Next() {
			var p pair
			if err := rows.Scan(&p.handler, &p.key); err != nil {
				return err
			}
			a.fresh[p] = true
		}
		return rows.Err()
	}
	if l := r.ib.generations(); l != nil {
		c, err := r.ib.genClaimFor(l, false, handlers, keys, srcs, ids, counts, traces)
		if err != nil {
			r.endClaims(err)
			return err
		}
		c.queue(b).Query(read)
	} else {
		b.Queue(r.ib.sql.batchClaim, handlers, keys, srcs, ids, counts, traces).Query(read)
		b.Queue(resetLockTimeout)
	}
	b.Queue("SAVEPOINT " + itemSavepoint)
	br := r.ib.pool.SendBatch(r.ctx, b)
	a.tx = br.Tx()
	if err := br.Close(); err != nil { // the first statement's error: they run in order
		if r.ib.layoutMoved(r.ctx, err) || r.ib.noGeneration(r.ctx, err) {
			err = fmt.Errorf("%w: %w", errLayoutMoved, err) // claimed again, in the generations layout
		} else {
			err = claimError(r.ctx, err)
		}
		r.endClaims(err)
		return err
	}
	return nil
}

// claimFailed ends an attempt whose claim failed: a deadlock is retried, a blocked claim gives up
// the shared transaction, and anything else fails every undecided item.
func (r *batchRun) claimFailed(tx pgx.Tx, err error) attempt {
	if r.ctx.Err() == nil && (errors.Is(err, ErrClaimBlocked) || retryable(err)) {
		_ = tx.Rollback(context.WithoutCancel(r.ctx))
		if retryable(err) {
			return attemptRetry
		}
		return attemptFallback
	}
	return r.failAll(tx, err)
}

// runItem runs item i's function in the item savepoint and decides it, or says how the attempt
// ends (stop).
func (r *batchRun) runItem(a *attemptTx, i int) (attempt, bool) {
	it := &r.items[i]
	r.hookClaim(i, 1)
	ctx, cancel := r.runCtx(i)
	wtx := watch(a.tx)
	if !a.spFresh {
		// The item savepoint holds the items before this one: release it and open it again for
		// this one, in the round trip of the function's first statement (one round trip a
		// message instead of two when the function writes once). A function that sends no
		// statement leaves it as it is.
		wtx.rec.pre, wtx.rec.ctx = itemSavepointAgain, ctx
	}
	v := wtx.verdict(ctx, call(withEvent(ctx, it.Handler, it.Key), wtx, it.Fn))
	cancel()
	own := a.spFresh || wtx.rec.preSent // the item savepoint holds this item's work alone
	if wtx.rec.preSent {
		a.savepts++
	}
	a.spFresh = false
	a.savepts += wtx.rec.savepoints
	a.perItem = max(a.perItem, 1+wtx.rec.savepoints)
	switch {
	case v.err == nil:
		a.processed = append(a.processed, i)
		return 0, false
	case v.lost && v.own:
		// The item's own context ended during a statement, which closed the connection: the item
		// failed; the others run again on another connection.
		r.decide(i, Result{Err: v.err})
		return attemptRetry, true
	case v.lost:
		return r.failAll(a.tx, v.err), true
	case v.retry:
		return attemptRetry, true
	case v.deploy != nil:
		r.decide(i, Result{Err: v.err})
		return r.failAll(a.tx, ErrBatchStopped), true
	case wtx.rec.preErr != nil:
		// The round trip that carried the item savepoint failed. A statement that fails to
		// parse stops the round trip before anything in it runs, so the savepoint may still
		// hold the items before this one, and rolling back to it would undo them: this item
		// failed; the others run again in a new transaction.
		if v.err == nil {
			v.err = fmt.Errorf("inbox: savepoint: %w", wtx.rec.preErr)
		}
		r.decide(i, Result{Err: v.err})
		return attemptRetry, true
	}
	if !own {
		// The function sent nothing: nothing of it is on the connection, and the savepoint holds
		// the items before it, which must not be undone.
		r.st.RolledBack++
		r.decide(i, Result{Err: v.err})
		a.unclaim = append(a.unclaim, it.pair())
		return 0, false
	}
	if _, err := a.tx.Exec(r.ctx, "ROLLBACK TO SAVEPOINT "+itemSavepoint); err != nil {
		r.decide(i, Result{Err: v.err})
		return r.failAll(a.tx, fmt.Errorf("inbox: rollback to savepoint: %w", err)), true
	}
	a.spFresh = true
	r.st.RolledBack++
	r.decide(i, Result{Err: v.err})
	// The rollback to the savepoint did not undo the claim, taken before it.
	a.unclaim = append(a.unclaim, it.pair())
	return 0, false
}

// commitEarly commits the items processed so far, releasing the claims of the items from next on
// (they run in the next transaction).
func (r *batchRun) commitEarly(a *attemptTx, next int) attempt {
	for i := next; i < len(r.items); i++ {
		if p := r.items[i].pair(); !r.decided[i] && a.owner[p] == i && a.fresh[p] {
			a.unclaim = append(a.unclaim, p)
		}
	}
	if out := r.commit(a); out != attemptDone {
		return out
	}
	return attemptMore
}

// commit releases the claims of the items that did not run and commits the others' work.
func (r *batchRun) commit(a *attemptTx) attempt {
	if len(a.unclaim) > 0 {
		handlers, keys := make([]string, len(a.unclaim)), make([]string, len(a.unclaim))
		for j, p := range a.unclaim {
			handlers[j], keys[j] = p.handler, p.key
		}
		unclaim := r.ib.sql.unclaim
		if l := r.ib.generations(); l != nil {
			unclaim = l.unclaim
		}
		if _, err := a.tx.Exec(r.ctx, unclaim, handlers, keys); err != nil {
			if retryable(err) {
				return attemptRetry
			}
			return r.failAll(a.tx, fmt.Errorf("inbox: releasing the claims of items not processed: %w", err))
		}
	}
	if len(a.processed) == 0 {
		r.settleTwins(a.owner)
		return attemptDone
	}
	commits := r.beginCommits(a.processed)
	if err := a.tx.Commit(r.ctx); err != nil {
		if retryable(err) {
			r.endCommits(commits, err)
			return attemptRetry
		}
		err = commitError(err)
		r.endCommits(commits, err)
		if errors.Is(err, ErrCommitUnknown) && r.ctx.Err() == nil {
			// Whether it committed, the next attempt tells: its claims find the rows
			// (duplicates) or take them and run the items again, as their redeliveries would.
			r.unknown = err
			return attemptRetry
		}
		r.unknownAll(err)
		return attemptDone
	}
	r.endCommits(commits, nil)
	r.st.Commits++
	for _, i := range a.processed {
		r.decide(i, Result{Outcome: Processed})
	}
	r.settleTwins(a.owner)
	return attemptDone
}

// notRun decides item i with err before its function ran; its claim, if it owns a fresh one, is
// released at the end of the transaction.
func (r *batchRun) notRun(a *attemptTx, i int, err error) {
	r.decide(i, Result{Err: err})
	if p := r.items[i].pair(); a.owner[p] == i && a.fresh[p] {
		a.unclaim = append(a.unclaim, p)
	}
}

// settleTwins decides the items that share their claim with an earlier one, once the owners are
// decided.
func (r *batchRun) settleTwins(owner map[pair]int) {
	for i := range r.items {
		o, ok := owner[r.items[i].pair()]
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

// failAll rolls the transaction back and gives err to every item not decided.
func (r *batchRun) failAll(tx pgx.Tx, err error) attempt {
	if tx != nil {
		// Asked before the rollback, which hands the connection back to the pool.
		if pgtx.ConnLost(tx) && !errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrBatchStopped) {
			err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		_ = tx.Rollback(context.WithoutCancel(r.ctx))
	}
	for i := range r.items {
		if !r.decided[i] {
			r.decide(i, Result{Err: err})
		}
	}
	return attemptDone
}

// unknownAll gives err (a COMMIT whose outcome is unknown, or refused) to every item not decided:
// the work of this transaction's items. An item decided before it (a duplicate: another
// transaction's row; or committed early) keeps its result.
func (r *batchRun) unknownAll(err error) {
	for i := range r.items {
		if !r.decided[i] {
			r.decide(i, Result{Err: err})
		}
	}
}

// oneByOne runs every undecided item in a transaction of its own, with [Inbox.Run], in order.
func (r *batchRun) oneByOne() {
	for i := range r.items {
		if r.decided[i] {
			continue
		}
		if r.order != nil {
			if err := r.order.Runnable(i); err != nil {
				r.decide(i, Result{Err: err})
				continue
			}
		}
		it := &r.items[i]
		ctx, cancel := r.runCtx(i)
		out, err := r.ib.Run(ctx, it.Handler, it.Key, it.Fn)
		cancel()
		r.decide(i, Result{Outcome: out, Err: err})
	}
}

// step is an observation of one item's claim or commit by the inbox's Hooks.
type step struct {
	ctx context.Context
	s   *StepInfo
}

// beginClaims starts the claim step of each claim's owner, before the batch's claim statement.
func (r *batchRun) beginClaims(owner map[pair]int) {
	h := r.ib.cfg.Hooks
	if h == nil {
		return
	}
	if r.claims == nil {
		r.claims = make([]step, len(r.items))
	}
	for _, i := range owner {
		ctx, s := h.begin(r.itemCtx(i), StepClaim, r.items[i].Handler, r.items[i].Key, false)
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
		st.ctx, st.s = h.begin(r.itemCtx(i), StepClaim, r.items[i].Handler, r.items[i].Key, false)
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
		steps[j].ctx, steps[j].s = h.begin(r.itemCtx(i), StepCommit, r.items[i].Handler, r.items[i].Key, false)
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
