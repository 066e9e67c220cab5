package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/pgtx"
)

// verdict is what one item's function came to, decided by [watchedTx.verdict].
type verdict struct {
	// err is nil when the function's work may commit; otherwise the item's error.
	err error
	// lost says the transaction's connection is gone; own says it went because the item's own
	// context ended during a statement (pgx closes a connection whose statement's context ends),
	// so the other items of a batch may run again on another connection without being failed.
	lost, own bool
	// retry says the server rolled the transaction back for a deadlock or a serialization failure:
	// run it again.
	retry bool
	// deploy is set when the item failed on a broken deployment.
	deploy *DeploymentError
}

// verdict decides, once the function has returned fnErr, what its item came to. ctx is the context
// the function ran with. The decision comes from the record and the connection, in this order:
//
//  1. the connection is gone (or left busy for good): the item's own failure if its context had
//     ended (that cause), if it left rows open ([ErrRowsOpen]), or if a statement's own context
//     had ended; else [ErrConnectionLost];
//  2. its context ended (its timeout, a lost lease, a stop): that cause;
//  3. the statement that failed last says the deployment is broken: a *[DeploymentError];
//  4. it says deadlock or serialization failure: retry the transaction;
//  5. the function's own error (named [ErrRowsOpen] too when it left rows open);
//  6. it called Rollback: [ErrItemRolledBack];
//  7. the transaction is aborted although it returned nil: a *[TxAbortedError];
//  8. it left rows open: [ErrRowsOpen];
//
// and otherwise its work may commit (also when it called Commit: the inbox commits). Rows and
// batch results left open are closed first, so that the connection can roll the item back.
func (t *watchedTx) verdict(ctx context.Context, fnErr error) verdict {
	open, closeErr := t.rec.closeOpen()
	cause := context.Cause(ctx) // the item's own: its timeout, a lost lease, a stop
	if pgtx.ConnLost(t.tx) || t.busy() {
		switch {
		case cause != nil:
			return verdict{err: causeErr(cause, fnErr), lost: true, own: true}
		case open > 0:
			// Rows left open: pgx closes the connection when a context their statement ran with
			// ends before they are read (a function's own `defer cancel()`, or Batch.Run's), and
			// leaves it busy for good when a statement was sent while they were open.
			why := cmp.Or(fnErr, closeErr, errors.New("the connection closed"))
			return verdict{err: fmt.Errorf("%w: %w", ErrRowsOpen, why), lost: true, own: true}
		case t.rec.ctxCause != nil:
			// A statement's own context ended (a deadline the function set itself).
			return verdict{err: causeErr(t.rec.ctxCause, fnErr), lost: true, own: true}
		}
		why := cmp.Or(fnErr, closeErr, errors.New("the connection closed while the function ran"))
		return verdict{err: fmt.Errorf("%w: %w", ErrConnectionLost, why), lost: true}
	}
	if cause == nil {
		cause = t.rec.ctxCause // a statement's own context (a deadline the function set itself)
	}
	if cause != nil {
		return verdict{err: causeErr(cause, fnErr)}
	}
	aborted := t.aborted()
	failed := fnErr != nil || aborted || open > 0 || t.rec.ended == endedRollback
	if !failed {
		return verdict{}
	}
	last := t.rec.cause
	if last == nil {
		last = pgErrorOf(fnErr)
	}
	if last != nil && (aborted || fnErr != nil) {
		if deploymentCode(last.Code) {
			d := &DeploymentError{Err: last}
			return verdict{err: d, deploy: d}
		}
		if retryableCode(last.Code) {
			return verdict{err: cmp.Or(fnErr, error(&TxAbortedError{Err: last})), retry: true}
		}
	}
	switch {
	case fnErr != nil && open > 0:
		return verdict{err: fmt.Errorf("%w: %w", ErrRowsOpen, fnErr)}
	case fnErr != nil:
		return verdict{err: fnErr}
	case t.rec.ended == endedRollback:
		return verdict{err: ErrItemRolledBack}
	case aborted:
		return verdict{err: &TxAbortedError{Err: last}}
	}
	return verdict{err: fmt.Errorf("%w (%d left open; closed by the inbox)", ErrRowsOpen, open)}
}

// busy reports whether the connection is still in the middle of a result: nothing more can be sent
// on it.
func (t *watchedTx) busy() bool {
	c := t.tx.Conn()
	return c != nil && c.PgConn() != nil && c.PgConn().IsBusy()
}

// aborted reports whether the transaction is in the failed state: a statement failed and
// nothing rolled back to a savepoint before it.
func (t *watchedTx) aborted() bool {
	c := t.tx.Conn()
	return c != nil && c.PgConn() != nil && c.PgConn().TxStatus() == 'E'
}

// causeErr is the error of an item whose context ended with cause while its function ran.
func causeErr(cause, fnErr error) error {
	if fnErr == nil || errors.Is(fnErr, cause) {
		return cmp.Or(fnErr, cause)
	}
	return fmt.Errorf("%w: %w", cause, fnErr)
}

func pgErrorOf(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return nil
}

// retryableCode reports a deadlock or serialization failure: the server rolled the transaction
// back, and it can be run again.
func retryableCode(code string) bool { return code == "40P01" || code == "40001" }

// retryable reports err as a deadlock or serialization failure.
func retryable(err error) bool {
	if errors.Is(err, errLayoutMoved) {
		return true
	}
	pgErr := pgErrorOf(err)
	return pgErr != nil && retryableCode(pgErr.Code)
}

// errLayoutMoved marks a batch's claim that found processed_messages gone (the inbox moved to the
// generations layout since) or its generation not made yet (made now): it is claimed again.
var errLayoutMoved = errors.New("inbox: the claim's table or generation was missing and is there now; claimed again")
