package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The transaction a Func gets, on both paths ([Inbox.Run] and [Inbox.RunBatch]), is the inbox's
// own wrapped in a watchedTx. The wrapper records what the function did with it: each failed
// statement's *pgconn.PgError, whether the statement's context had ended, the savepoints it
// opened, the rows and batch results it left open, and whether it called Commit or Rollback.
// When the function returns, the inbox decides the item's outcome from that record and from the
// connection's own state (its transaction status), never from the error the function returned,
// which a function can swallow or wrap without %w (see verdict).
//
// What bypasses the record: statements sent through tx.Conn() or tx.LargeObjects(), and a
// SAVEPOINT written as SQL (or a PL/pgSQL EXCEPTION block, which is a subtransaction inside one
// statement). The connection's status still shows an aborted transaction or a busy connection, so
// such a function still fails; only the SQLSTATE named in the error, and the savepoint count of
// RunBatch's subtransaction budget, may miss them.

// Errors of a function's outcome. Each fails the item alone: its writes and its claim are rolled
// back, and the other items of a batch go on.
var (
	// ErrTxAborted is wrapped by the error of an item whose function returned nil although one
	// of its statements had failed and aborted the transaction (SQLSTATE 25P02 for every statement
	// after it): a swallowed error. The error is a *[TxAbortedError] naming the SQLSTATE.
	ErrTxAborted = errors.New("inbox: a statement of the function failed and aborted its transaction")
	// ErrRowsOpen is wrapped by the error of an item whose function returned with rows (Query,
	// QueryRow not scanned) or batch results (SendBatch) still open. The inbox closes them and
	// rolls the item back.
	ErrRowsOpen = errors.New("inbox: the function returned with rows or batch results still open")
	// ErrItemRolledBack is the error of an item whose function called Rollback on the
	// transaction it was given: nothing of it commits, its claim included.
	ErrItemRolledBack = errors.New("inbox: the function rolled back its transaction")
	// ErrTimeout is the cause with which an item's context ends when its function runs past
	// Item.Timeout (RunBatch), and is wrapped by that item's error.
	ErrTimeout = errors.New("inbox: the function ran past its timeout")
	// ErrBrokenDeployment is wrapped by the error of an item whose statement failed because the
	// deployment is broken, not the event: see [DeploymentError].
	ErrBrokenDeployment = errors.New("inbox: broken deployment")
)

// TxAbortedError is the error of an item whose function returned nil although its transaction was
// aborted by a failed statement. Err is the statement's error, when the wrapped transaction saw it
// (nil when the statement went around it, through tx.Conn()).
type TxAbortedError struct {
	Err *pgconn.PgError
}

func (e *TxAbortedError) Error() string {
	if e.Err == nil {
		return "inbox: the function returned nil, but its transaction was aborted by a failed statement; nothing of it commits"
	}
	return fmt.Sprintf("inbox: the function returned nil, but a statement failed with SQLSTATE %s (%s) and aborted its transaction; nothing of it commits",
		e.Err.Code, e.Err.Message)
}

// Unwrap returns ErrTxAborted and the statement's error.
func (e *TxAbortedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrTxAborted}
	}
	return []error{ErrTxAborted, e.Err}
}

// DeploymentError is the error of an item whose statement (its function's, or the inbox's own
// claim) failed in a way that says the deployment is broken, not the event: a table, column,
// function, schema or object that does not exist, or a missing privilege (SQLSTATE 42P01, 42703,
// 42883, 42704, 3F000, 42501). Every event would fail the same way, so a worker pauses on it
// instead of spending the queue's receive counts (the inbox handler returns worker.BrokenDeployment).
type DeploymentError struct {
	Err *pgconn.PgError
}

func (e *DeploymentError) Error() string {
	return fmt.Sprintf("inbox: broken deployment: SQLSTATE %s: %s", e.Err.Code, e.Err.Message)
}

// Unwrap returns ErrBrokenDeployment and the statement's error.
func (e *DeploymentError) Unwrap() []error { return []error{ErrBrokenDeployment, e.Err} }

// deploymentCode reports the SQLSTATEs of a broken deployment.
func deploymentCode(code string) bool {
	switch code {
	case "42P01", // undefined_table
		"42703", // undefined_column
		"42883", // undefined_function
		"42704", // undefined_object
		"42501", // insufficient_privilege
		"3F000": // invalid_schema_name
		return true
	}
	return false
}

// How a function ended its transaction.
const (
	endedNot = iota
	endedCommit
	endedRollback
)

// txRecord is what one item's function did with its transaction, shared by the item's nested
// transactions.
type txRecord struct {
	// cause is the last statement error other than 25P02 (in_failed_sql_transaction, which
	// every statement after a failed one gets): the one that aborted the transaction.
	cause      *pgconn.PgError
	ctxCause   error    // the cause of a failed statement's context, if it had ended
	ended      int      // endedCommit or endedRollback once the function called either
	savepoints int      // nested transactions (SAVEPOINTs) opened
	open       []closer // rows and batch results handed out, open or closed

	// pre are statements to send before the function's first one, in the same round trip where
	// the statement allows (RunBatch's item savepoint: see withPre); nil once sent, or if none.
	pre     *pending
	preSent bool            // pre was sent
	preErr  error           // and failed: the item savepoint is not where RunBatch expects it
	ctx     context.Context // the function's context, for a send with no statement's own
}

type closer interface {
	closed() bool
	close() error
}

// note records a statement's error.
func (r *txRecord) note(ctx context.Context, err error) {
	if err == nil {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code != "25P02" {
		r.cause = pgErr
	}
	if ctx != nil && ctx.Err() != nil && r.ctxCause == nil {
		r.ctxCause = context.Cause(ctx)
	}
}

// closeOpen closes the rows and batch results the function left open and reports how many there
// were, and the first error of closing them.
func (r *txRecord) closeOpen() (int, error) {
	n := 0
	var first error
	for _, c := range r.open {
		if c.closed() {
			continue
		}
		n++
		if err := c.close(); err != nil && first == nil {
			first = err
		}
	}
	r.open = nil
	return n, first
}

// watchedTx is the transaction a Func gets: tx (the inbox's transaction, or a savepoint of it
// for a nested Begin) with the record of what the function did. Commit and Rollback of the
// function's own level do not end the inbox's transaction: Commit marks the work done (the inbox
// commits it with the claim, as it would have without the call), and Rollback marks the item
// failed ([ErrItemRolledBack]); either way, later statements fail with pgx.ErrTxClosed, as they
// would on a transaction that had ended, and a later Rollback (the usual deferred one) is a
// no-op. Nested transactions (Begin) are savepoints and behave as pgx's do.
type watchedTx struct {
	tx     pgx.Tx
	rec    *txRecord
	nested bool
	done   bool // Commit or Rollback was called on this level
}

// watched is a function's own transaction and its record, in one allocation.
type watched struct {
	watchedTx
	record txRecord
}

func watch(tx pgx.Tx) *watchedTx {
	w := &watched{watchedTx: watchedTx{tx: tx}}
	w.rec = &w.record
	return &w.watchedTx
}

var _ pgx.Tx = (*watchedTx)(nil)

// closedErr returns pgx.ErrTxClosed once this level or the function's transaction has ended.
func (t *watchedTx) closedErr() error {
	if t.done || t.rec.ended != endedNot {
		return pgx.ErrTxClosed
	}
	return nil
}

// Begin opens a savepoint inside the function's transaction.
func (t *watchedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.closedErr(); err != nil {
		return nil, err
	}
	if err := t.sendPre(ctx); err != nil {
		return nil, err
	}
	inner, err := t.tx.Begin(ctx)
	t.rec.note(ctx, err)
	if err != nil {
		return nil, err
	}
	t.rec.savepoints++
	return &watchedTx{tx: inner, rec: t.rec, nested: true}, nil
}

// Commit releases a nested transaction's savepoint. On the function's own transaction it commits
// nothing yet: the inbox commits the function's work with its claim once the function returns.
// After it, statements fail with pgx.ErrTxClosed. On an aborted transaction it returns an error
// wrapping pgx.ErrTxCommitRollback, as pgx does.
func (t *watchedTx) Commit(ctx context.Context) error {
	if err := t.closedErr(); err != nil {
		return err
	}
	t.done = true
	if t.nested {
		err := t.tx.Commit(ctx)
		t.rec.note(ctx, err)
		return err
	}
	t.rec.ended = endedCommit
	if c := t.tx.Conn(); c != nil && c.PgConn() != nil && c.PgConn().TxStatus() == 'E' {
		return fmt.Errorf("%w: the transaction was aborted by an earlier statement", pgx.ErrTxCommitRollback)
	}
	return nil
}

// Rollback rolls a nested transaction back to its savepoint. On the function's own transaction it
// marks the item failed ([ErrItemRolledBack]); the inbox undoes its work, claim included. After a
// Commit or Rollback it returns pgx.ErrTxClosed and does nothing.
func (t *watchedTx) Rollback(ctx context.Context) error {
	if err := t.closedErr(); err != nil {
		return err
	}
	t.done = true
	if t.nested {
		err := t.tx.Rollback(ctx)
		t.rec.note(ctx, err)
		return err
	}
	t.rec.ended = endedRollback
	return nil
}

// pending are statements sent before a function's first one: one by one in a batch, or joined
// at the head of a simple query.
type pending struct {
	stmts []string
	sql   string
}

func newPending(stmts ...string) *pending {
	return &pending{stmts: stmts, sql: strings.Join(stmts, "; ")}
}

// sendPre sends the pending statements (txRecord.pre) alone, before a statement that cannot
// carry them.
func (t *watchedTx) sendPre(ctx context.Context) error {
	r := t.rec
	if r.pre == nil {
		return nil
	}
	pre := r.pre
	r.pre, r.preSent = nil, true
	_, err := t.tx.Exec(ctx, pre.sql)
	r.note(ctx, err)
	r.preErr = err
	return err
}

// withPre sends the pending statements in one batch with the function's statement sql, reads
// their results and returns the batch, at the function's statement's result. It returns nil
// when none are pending, or when args ask for what a batch does not take (a QueryExecMode or
// the result formats of one statement, which pgx honours only outside a batch): the pending
// ones are then sent alone. An error from the pending ones may be the function's statement's
// own: pgx prepares a batch's new statements before it runs any, so one that does not parse
// fails the whole batch (preErr says so).
func (t *watchedTx) withPre(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if t.rec.pre == nil {
		return nil, nil
	}
	if len(args) > 0 {
		switch args[0].(type) {
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return nil, t.sendPre(ctx)
		}
	}
	pre := t.rec.pre
	t.rec.pre, t.rec.preSent = nil, true
	b := &pgx.Batch{}
	for _, q := range pre.stmts {
		b.Queue(q)
	}
	b.Queue(sql, args...)
	br := t.tx.SendBatch(ctx, b)
	for range pre.stmts {
		if _, err := br.Exec(); err != nil {
			t.rec.note(ctx, err)
			t.rec.preErr = err
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (t *watchedTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.closedErr(); err != nil {
		return 0, err
	}
	if err := t.sendPre(ctx); err != nil {
		return 0, err
	}
	n, err := t.tx.CopyFrom(ctx, table, cols, src)
	t.rec.note(ctx, err)
	return n, err
}

func (t *watchedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.closedErr(); err != nil {
		return &errBatch{err: err}
	}
	if err := t.sendPre(ctx); err != nil {
		return &errBatch{err: err}
	}
	br := &watchedBatch{br: t.tx.SendBatch(ctx, b), ctx: ctx, t: t}
	t.rec.open = append(t.rec.open, br)
	return br
}

// LargeObjects goes around the record (see the package's outcome table).
func (t *watchedTx) LargeObjects() pgx.LargeObjects {
	_ = t.sendPre(t.rec.ctx)
	return t.tx.LargeObjects()
}

func (t *watchedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.closedErr(); err != nil {
		return nil, err
	}
	if err := t.sendPre(ctx); err != nil {
		return nil, err
	}
	sd, err := t.tx.Prepare(ctx, name, sql)
	t.rec.note(ctx, err)
	return sd, err
}

func (t *watchedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.closedErr(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if t.rec.pre != nil && len(args) == 0 {
		// pgx sends a statement without arguments as a simple query, which may hold several
		// statements: the pending ones go at its head. If it fails, the pending ones may not
		// have run (a query string that does not parse runs none of its statements): preErr
		// says so, and RunBatch does not roll back to a savepoint that may hold the items
		// before this one.
		pre := t.rec.pre
		t.rec.pre, t.rec.preSent = nil, true
		tag, err := t.tx.Exec(ctx, pre.sql+"; "+sql)
		t.rec.note(ctx, err)
		t.rec.preErr = err
		return tag, err
	}
	br, err := t.withPre(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if br != nil {
		tag, err := br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		t.rec.note(ctx, err)
		return tag, err
	}
	tag, err := t.tx.Exec(ctx, sql, args...)
	t.rec.note(ctx, err)
	return tag, err
}

func (t *watchedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.closedErr(); err != nil {
		return &errRows{err: err}, err
	}
	br, err := t.withPre(ctx, sql, args)
	if err != nil {
		return &errRows{err: err}, err
	}
	var rows pgx.Rows
	if br == nil {
		rows, err = t.tx.Query(ctx, sql, args...)
	} else if rows, err = br.Query(); err != nil {
		_ = br.Close()
	} else {
		rows = &batchRows{Rows: rows, br: br}
	}
	t.rec.note(ctx, err)
	if err != nil {
		return rows, err
	}
	wr := &watchedRows{Rows: rows, ctx: ctx, rec: t.rec}
	t.rec.open = append(t.rec.open, wr)
	return wr, nil
}

func (t *watchedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &watchedRow{rows: rows, err: err}
}

// Conn returns the connection; statements sent through it go around the record.
func (t *watchedTx) Conn() *pgx.Conn {
	_ = t.sendPre(t.rec.ctx)
	return t.tx.Conn()
}

// batchRows are the rows of the last statement of a batch (the pending statements, then the
// function's query): closing them, or reading past the last row, closes the batch too, which
// frees the connection.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	done   bool
	endErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.end()
}

func (r *batchRows) end() {
	if !r.done {
		r.done = true
		r.endErr = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.endErr
}

// watchedRows records the error a result ends with, and when it is closed (by Close, or by Next
// returning false, which closes pgx's rows).
type watchedRows struct {
	pgx.Rows
	ctx  context.Context
	rec  *txRecord
	shut bool
}

func (r *watchedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *watchedRows) Close() {
	r.Rows.Close()
	r.finish()
}

func (r *watchedRows) finish() {
	if !r.shut {
		r.shut = true
		r.rec.note(r.ctx, r.Err())
	}
}

func (r *watchedRows) closed() bool { return r.shut }

func (r *watchedRows) close() error {
	r.Close()
	return r.Err()
}

// watchedRow is QueryRow's result, read as pgx reads its own: the first row, then closed.
type watchedRow struct {
	rows pgx.Rows
	err  error
}

func (r *watchedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	rows := r.rows
	defer rows.Close()
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			return errors.New("cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	_ = rows.Scan(dest...)
	rows.Close()
	return rows.Err()
}

// watchedBatch records the errors of a SendBatch's results and when it is closed.
type watchedBatch struct {
	br   pgx.BatchResults
	ctx  context.Context
	t    *watchedTx
	shut bool
}

func (b *watchedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.br.Exec()
	b.t.rec.note(b.ctx, err)
	return tag, err
}

func (b *watchedBatch) Query() (pgx.Rows, error) {
	rows, err := b.br.Query()
	b.t.rec.note(b.ctx, err)
	if err != nil {
		return rows, err
	}
	return &watchedRows{Rows: rows, ctx: b.ctx, rec: b.t.rec}, nil
}

func (b *watchedBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return &watchedRow{rows: rows, err: err}
}

func (b *watchedBatch) Close() error {
	if b.shut {
		return nil
	}
	b.shut = true
	err := b.br.Close()
	b.t.rec.note(b.ctx, err)
	return err
}

func (b *watchedBatch) Tx() pgx.Tx { return b.t }

func (b *watchedBatch) closed() bool { return b.shut }
func (b *watchedBatch) close() error { return b.Close() }

// errBatch is SendBatch's result on an ended transaction.
type errBatch struct{ err error }

func (b *errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b *errBatch) Query() (pgx.Rows, error)         { return &errRows{err: b.err}, b.err }
func (b *errBatch) QueryRow() pgx.Row                { return &watchedRow{err: b.err} }
func (b *errBatch) Close() error                     { return b.err }
func (b *errBatch) Tx() pgx.Tx                       { return nil }

// errRows is Query's result on an ended transaction: closed, with its error.
type errRows struct{ err error }

func (r *errRows) Close()                                       {}
func (r *errRows) Err() error                                   { return r.err }
func (r *errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *errRows) Next() bool                                   { return false }
func (r *errRows) Scan(...any) error                            { return r.err }
func (r *errRows) Values() ([]any, error)                       { return nil, r.err }
func (r *errRows) RawValues() [][]byte                          { return nil }
func (r *errRows) Conn() *pgx.Conn                              { return nil }
func (r *errRows) TypeMap() *pgtype.Map                         { return nil }
