package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

// Outcome says what a claim-and-run did.
type Outcome int

const (
	// Processed means the claim was fresh, the function ran, and its writes committed with the
	// claim (or, for [Inbox.RunTx], are ready to commit with it).
	Processed Outcome = iota + 1
	// Duplicate means the handler had already processed the event: the function did not run and
	// nothing was written. The caller should treat the message as done (delete it).
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return "unknown"
}

// Func is the work done for one event, inside the transaction that claims it. It must do all of
// its database writes through tx. Its effects commit exactly when the claim does.
type Func func(ctx context.Context, tx pgx.Tx) error

// ErrCommitUnknown is wrapped by the error of [Inbox.Run] when COMMIT failed in a way that does
// not say whether the transaction committed (the connection broke). The caller must not
// acknowledge the event: its redelivery finds the row if it did commit and runs again if not.
// Such an error also wraps [ErrConnectionLost].
var ErrCommitUnknown = errors.New("inbox: commit outcome unknown")

// ErrConnectionLost is wrapped by the error of [Inbox.Run] when the inbox's own connection failed:
// none could be had from the pool, BEGIN or the claim failed and left the connection closed, the
// connection was closed when the handler returned its error, or COMMIT's outcome is unknown. It
// is decided from the state of the transaction's connection, not from the type of the error, so
// that a handler's own failure (a truncated body, a downstream timeout) is never mistaken for a
// database outage. A worker pauses on it ([worker.Unavailable] in the inbox handler).
var ErrConnectionLost = errors.New("inbox: database connection lost")

// ErrClaimBlocked is wrapped by the error of [Inbox.Run] when the claim waited Config.LockTimeout
// for another transaction's uncommitted claim of the same event (SQLSTATE 55P03). The event is
// neither processed nor a duplicate yet: retry it after [Inbox.BlockedRetryDelay].
var ErrClaimBlocked = errors.New("inbox: claim blocked by another transaction holding the same event")

// PanicError is the error a panicking [Func] becomes: its Value is what the function panicked
// with, its Stack the goroutine's stack at the panic, and Unwrap returns the value if it is an
// error. It is the same type as worker.PanicError.
type PanicError = panics.Error

// Run processes the event key for handler at most once. It begins a READ COMMITTED transaction,
// inserts the claim (handler, key) first, and calls fn with the transaction only if the claim is
// fresh; then it commits the claim and fn's writes together and returns [Processed].
//
// If the claim exists, Run rolls back, does not call fn, and returns [Duplicate]. If another
// transaction holds an uncommitted claim for the same pair, the insert waits for it: a commit
// there makes this a duplicate, a rollback makes this the one that runs.
//
// If fn fails, everything rolls back, the claim included, and Run returns why: what fn returned,
// a panic as a *[PanicError], a context that ended before the commit as its cause, and what the
// transaction fn was given shows (a swallowed statement error, rows left open, a Rollback, a
// broken deployment): the package doc's outcome table, which [Inbox.RunBatch] follows too. fn's
// own call of Commit commits nothing yet: Run commits its work with the claim.
//
// When the COMMIT's outcome is unknown (the connection broke during it), Run claims the event
// again: the claim finds the row if the COMMIT happened (Duplicate), or takes it and runs fn
// again if it did not, which is what the event's redelivery would do, without waiting for it. If
// that claim is blocked (the first transaction's session is not ended yet), or the COMMITs of 3
// attempts have unknown outcomes, Run returns an error wrapping [ErrCommitUnknown]: the caller
// must not acknowledge the event, and its redelivery settles it.
//
// fn's ctx carries the handler and key: see [EventKey] and [StepKey].
func (ib *Inbox) Run(ctx context.Context, handler, key string, fn Func) (Outcome, error) {
	if err := validateClaim(handler, key); err != nil {
		return 0, err
	}
	out, err := ib.run(ctx, handler, key, fn)
	if err != nil && (ib.layoutMoved(ctx, err) || ib.noGeneration(ctx, err)) {
		// Switched to the generations layout, or the generation was missing and is made now:
		// claim again.
		out, err = ib.run(ctx, handler, key, fn)
	}
	// Whether a COMMIT whose outcome is unknown happened, another claim tells: it finds the row (a
	// duplicate) or takes it and runs fn again, as the event's redelivery would, without spending
	// a receive. A claim blocked by the first transaction (its session not yet ended), or three
	// unknown COMMITs, leave it to the redelivery.
	for attempt := 2; errors.Is(err, ErrCommitUnknown) && ctx.Err() == nil && attempt <= maxBatchAttempts; attempt++ {
		out2, err2 := ib.run(ctx, handler, key, fn)
		if errors.Is(err2, ErrClaimBlocked) {
			return 0, err
		}
		out, err = out2, err2
	}
	return out, err
}

func (ib *Inbox) run(ctx context.Context, handler, key string, fn Func) (Outcome, error) {
	// BEGIN and the claim, which also bounds the transaction's waits (see boundedClaim), travel
	// in one round trip.
	d := ib.deliveryArgs(ctx, deliveryFrom(ctx))
	var tag pgconn.CommandTag
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if l := ib.generations(); l != nil {
		c, err := ib.genClaimFor(l, false, []string{handler}, []string{key}, []pgtype.Int4{d.source}, []pgtype.UUID{d.messageID}, []pgtype.Int2{d.receiveCount}, [][]byte{d.traceID})
		if err != nil {
			return 0, err
		}
		c.queue(b).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	} else {
		b.Queue(ib.sql.boundedClaim, handler, key, d.source, d.messageID, d.receiveCount, d.traceID).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}
	hctx, step := ib.cfg.Hooks.start(ctx, StepClaim, handler, key, false)
	br := ib.pool.SendBatch(hctx, b)
	tx := br.Tx()
	err := br.Close() // the first error says what went wrong: the statements run in order
	// The rollback must happen even when ctx is done. After a commit it is a no-op.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err != nil {
		if pgtx.ConnLost(tx) {
			err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		err = claimError(ctx, err)
	}
	ib.cfg.Hooks.claimed(hctx, step, tag.RowsAffected(), err)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() == 0 {
		return Duplicate, nil
	}
	wtx := watch(tx)
	if v := wtx.verdict(ctx, call(withEvent(ctx, handler, key), wtx, fn)); v.err != nil {
		return 0, v.err
	}
	hctx, step = ib.cfg.Hooks.start(ctx, StepCommit, handler, key, false)
	if err := tx.Commit(hctx); err != nil {
		err = commitError(err)
		ib.cfg.Hooks.committed(hctx, step, err)
		return 0, err
	}
	ib.cfg.Hooks.committed(hctx, step, nil)
	return Processed, nil
}

func claimError(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available: Config.LockTimeout
		err = fmt.Errorf("%w: %w", ErrClaimBlocked, err)
	case errors.As(err, &pgErr) && deploymentCode(pgErr.Code): // the inbox's table or grant is missing
		err = &DeploymentError{Err: pgErr}
	}
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("inbox: claim: %w (%w)", cause, err)
	}
	return fmt.Errorf("inbox: claim: %w", err)
}

// commitError tells a commit the server refused (it did not happen) from one whose outcome is
// unknown (the connection failed during COMMIT).
func commitError(err error) error {
	if pgtx.CommitUnknown(err) {
		return fmt.Errorf("%w: %w: %w", ErrCommitUnknown, ErrConnectionLost, err)
	}
	return fmt.Errorf("inbox: commit: %w", err)
}

// RunTx is [Inbox.Run] for a caller that owns the transaction. It inserts the claim in tx and
// calls fn only if the claim is fresh. It neither commits nor rolls back: on [Processed] the
// caller commits (and only then may acknowledge the event); on [Duplicate] or an error the
// caller rolls back. tx should be READ COMMITTED: under REPEATABLE READ or SERIALIZABLE, a
// concurrent claim fails with a serialization error instead of waiting to be a duplicate.
func (ib *Inbox) RunTx(ctx context.Context, tx pgx.Tx, handler, key string, fn Func) (Outcome, error) {
	if err := validateClaim(handler, key); err != nil {
		return 0, err
	}
	return ib.runTx(ctx, tx, handler, key, fn)
}

func (ib *Inbox) runTx(ctx context.Context, tx pgx.Tx, handler, key string, fn Func) (Outcome, error) {
	d := ib.deliveryArgs(ctx, deliveryFrom(ctx))
	hctx, step := ib.cfg.Hooks.start(ctx, StepClaim, handler, key, true)
	var tag pgconn.CommandTag
	var err error
	if l := ib.generations(); l != nil {
		tag, err = ib.claimTxGen(hctx, tx, l, handler, key, d)
	} else {
		tag, err = tx.Exec(hctx, ib.sql.claim, handler, key, d.source, d.messageID, d.receiveCount, d.traceID)
		if err != nil && ib.layoutMoved(ctx, err) {
			err = fmt.Errorf("%w (the inbox has moved to the generations layout since; run the transaction again)", err)
		}
	}
	if err != nil {
		err = claimError(ctx, err)
	}
	ib.cfg.Hooks.claimed(hctx, step, tag.RowsAffected(), err)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() == 0 {
		return Duplicate, nil
	}
	if err := call(withEvent(ctx, handler, key), tx, fn); err != nil {
		return 0, err
	}
	return Processed, nil
}

func call(ctx context.Context, tx pgx.Tx, fn Func) error {
	return panics.Call(func() error { return fn(ctx, tx) })
}

func validateClaim(handler, key string) error {
	if err := ValidateHandler(handler); err != nil {
		return err
	}
	return ValidateKey(key)
}

// claimTxGen is RunTx's claim in the generations layout: the key's lock, then the probe and the
// insert, in the caller's transaction.
func (ib *Inbox) claimTxGen(ctx context.Context, tx pgx.Tx, l *genLayout, handler, key string, d deliveryArgs) (pgconn.CommandTag, error) {
	c, err := ib.genClaimFor(l, true, []string{handler}, []string{key}, []pgtype.Int4{d.source}, []pgtype.UUID{d.messageID}, []pgtype.Int2{d.receiveCount}, [][]byte{d.traceID})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if c.lock != "" {
		if _, err := tx.Exec(ctx, c.lock, c.lockArgs...); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	return tx.Exec(ctx, c.claim, c.claimArgs...)
}
