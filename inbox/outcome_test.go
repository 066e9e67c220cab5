package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// pgCode matches an error carrying a PostgreSQL error of SQLSTATE code.
func pgCode(code string) func(error) bool {
	return func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == code
	}
}

// TestOutcomeTableBothPaths (PostgreSQL): every row of the package doc's outcome table, on both
// paths: Run (one transaction for the event) and RunBatch (the event between two good items,
// each in a savepoint). The bad event's result must be the same on both; in the batch the good
// items commit, except where the row says the batch stops (a broken deployment).
func TestOutcomeTableBothPaths(t *testing.T) {
	t.Parallel()
	type row struct {
		name string
		fn   func(b *bundle) inbox.Func
		// want checks the bad item's result; processed means it must be processed, one effect.
		want      func(err error) bool
		processed bool
		// stops says the other items of the batch do not commit (ErrBatchStopped).
		stops bool
		// timesOut says the function runs until its timeout: 1 s, long enough for the claim and
		// the first statement on a loaded machine. Every other row has a minute, which it never
		// reaches, so that a slow machine does not turn a processed row into a timeout.
		timesOut bool
	}
	write := func(b *bundle, ctx context.Context, tx pgx.Tx) error { return b.record(nil)(ctx, tx) }
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	rows := []row{
		{name: "returns-error", want: func(err error) bool { return err != nil && err.Error() == "boom" },
			fn: func(b *bundle) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error {
					if err := write(b, ctx, tx); err != nil {
						return err
					}
					return errors.New("boom")
				}
			}},
		{name: "swallows-sql-error", want: func(err error) bool {
			var ae *inbox.TxAbortedError
			return errors.As(err, &ae) && ae.Err != nil && ae.Err.Code == "22012" && errors.Is(err, inbox.ErrTxAborted)
		}, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_, _ = tx.Exec(ctx, `SELECT 1/0`)
				_, _ = tx.Exec(ctx, `SELECT 1`) // 25P02: the error named is still 22012
				return nil
			}
		}},
		{name: "recovers-in-a-savepoint", processed: true, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				_, _ = sp.Exec(ctx, `SELECT 1/0`)
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				return write(b, ctx, tx)
			}
		}},
		{name: "rows-open", want: is(inbox.ErrRowsOpen), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_, err := tx.Query(ctx, `SELECT generate_series(1, 1000)`) //nolint:sqlclosecheck // left open on purpose
				return err
			}
		}},
		{name: "rows-open-then-conn-busy", want: is(inbox.ErrRowsOpen), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Query(ctx, `SELECT generate_series(1, 1000)`); err != nil { //nolint:sqlclosecheck // left open on purpose
					return err
				}
				return write(b, ctx, tx) // conn busy
			}
		}},
		{name: "query-row-not-scanned", want: is(inbox.ErrRowsOpen), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_ = tx.QueryRow(ctx, `SELECT 1`)
				return nil
			}
		}},
		{name: "batch-results-not-closed", want: is(inbox.ErrRowsOpen), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				pb := &pgx.Batch{}
				pb.Queue(`SELECT 1`)
				pb.Queue(`SELECT 2`)
				br := tx.SendBatch(ctx, pb)
				_, err := br.Exec()
				return err
			}
		}},
		{name: "timeout-in-statement", timesOut: true, want: func(err error) bool {
			return errors.Is(err, inbox.ErrTimeout) && !errors.Is(err, inbox.ErrConnectionLost)
		}, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `SELECT pg_sleep(30)`); err != nil {
					return fmt.Errorf("slow: %v", err) //nolint:errorlint // %v: the chain is cut on purpose
				}
				return nil
			}
		}},
		{name: "returns-nil-after-its-timeout", timesOut: true, want: is(inbox.ErrTimeout), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				<-ctx.Done()
				return nil
			}
		}},
		{name: "commits", processed: true, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit, as in pgx
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
		}},
		{name: "statement-after-commit", want: is(pgx.ErrTxClosed), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				if err := tx.Commit(ctx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT 1`)
				return err
			}
		}},
		{name: "rolls-back", want: is(inbox.ErrItemRolledBack), fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				_ = tx.Rollback(ctx)
				return nil
			}
		}},
		{name: "panics", want: func(err error) bool {
			var pe *inbox.PanicError
			return errors.As(err, &pe) && pe.Value == "handler bug"
		}, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				panic("handler bug")
			}
		}},
		{name: "broken-deployment", stops: true, want: func(err error) bool {
			var de *inbox.DeploymentError
			return errors.As(err, &de) && de.Err.Code == "42P01" && errors.Is(err, inbox.ErrBrokenDeployment)
		}, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := write(b, ctx, tx); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.missing VALUES (1)`); err != nil {
					return fmt.Errorf("missing: %v", err) //nolint:errorlint // %v: the chain is cut on purpose
				}
				return nil
			}
		}},
		// RunBatch opens an item's savepoint in the round trip of its first statement: the rows
		// below fail or read before anything else is sent, and the items before them must keep
		// their work (a first statement that does not parse stops its whole round trip).
		{name: "fails-before-any-statement", want: func(err error) bool { return err != nil && err.Error() == "nothing sent" },
			fn: func(*bundle) inbox.Func {
				return func(context.Context, pgx.Tx) error { return errors.New("nothing sent") }
			}},
		{name: "first-statement-does-not-parse", want: pgCode("42601"), fn: func(*bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELEC 1`)
				return err
			}
		}},
		{name: "first-statement-with-arguments-does-not-parse", want: pgCode("42601"), fn: func(*bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELEC $1::int`, 1)
				return err
			}
		}},
		{name: "first-query-does-not-parse", want: pgCode("42601"), fn: func(*bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				var n int
				return tx.QueryRow(ctx, `SELEC $1::int`, 1).Scan(&n)
			}
		}},
		{name: "first-statement-fails-when-run", want: pgCode("22012"), fn: func(*bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT 1/$1::int`, 0)
				return err
			}
		}},
		{name: "reads-first", processed: true, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				var n int
				if err := tx.QueryRow(ctx, `SELECT $1::int`, 7).Scan(&n); err != nil || n != 7 {
					return fmt.Errorf("read %d: %w", n, err)
				}
				rows, err := tx.Query(ctx, `SELECT generate_series(1, 3)`)
				if err != nil {
					return err
				}
				rows.Close()
				return write(b, ctx, tx)
			}
		}},
		{name: "missing-grant-on-a-function", stops: true, want: func(err error) bool {
			var de *inbox.DeploymentError
			return errors.As(err, &de) && de.Err.Code == "42883"
		}, fn: func(b *bundle) inbox.Func {
			return func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT `+b.schema+`.no_such_function()`)
				return err
			}
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			timeout := time.Minute
			if r.timesOut {
				timeout = time.Second
			}
			check := func(path string, out inbox.Outcome, err error) {
				t.Helper()
				switch {
				case r.processed && (err != nil || out != inbox.Processed):
					t.Errorf("%s: %v, %v; want processed", path, out, err)
				case !r.processed && (err == nil || !r.want(err)):
					t.Errorf("%s: %v; not the row's error", path, err)
				}
			}
			// Run, with the timeout set as the worker sets it (the context of the call).
			ctx, cancel := context.WithTimeoutCause(t.Context(), timeout, inbox.ErrTimeout)
			out, err := b.ib.Run(ctx, "run", "bad", r.fn(b))
			cancel()
			check("Run", out, err)
			// RunBatch, between two good items.
			res, st := b.ib.RunBatch(t.Context(), []inbox.Item{
				{Handler: "batch", Key: "good-1", Fn: b.record(nil)},
				{Handler: "batch", Key: "bad", Fn: r.fn(b), Timeout: timeout},
				{Handler: "batch", Key: "good-2", Fn: b.record(nil)},
			}, nil)
			check("RunBatch", res[1].Outcome, res[1].Err)
			for _, j := range []int{0, 2} {
				switch {
				case r.stops && !errors.Is(res[j].Err, inbox.ErrBatchStopped):
					t.Errorf("RunBatch: good item %d: %v, %v; want ErrBatchStopped", j, res[j].Outcome, res[j].Err)
				case !r.stops && (res[j].Err != nil || res[j].Outcome != inbox.Processed):
					t.Errorf("RunBatch: good item %d: %v, %v; want processed", j, res[j].Outcome, res[j].Err)
				}
			}
			want := map[string]int{"good-1": 1, "good-2": 1, "bad": 0}
			if r.stops {
				want = map[string]int{"good-1": 0, "good-2": 0, "bad": 0}
			}
			if r.processed {
				want["bad"] = 1
			}
			for k, n := range want {
				if e, c := b.effects(t, "batch", k), b.claims(t, "batch", k); e != n || c != n {
					t.Errorf("RunBatch: %s: %d effects, %d claims; want %d (stats %+v)", k, e, c, n, st)
				}
			}
			if n := want["bad"]; b.effects(t, "run", "bad") != n || b.claims(t, "run", "bad") != n {
				t.Errorf("Run: %d effects, %d claims; want %d", b.effects(t, "run", "bad"), b.claims(t, "run", "bad"), n)
			}
		})
	}
}

// TestRunBatchSubtransactionBudget (PostgreSQL): 20 items that each open three savepoints of
// their own and write in each: no transaction of the batch opens more than SubtransactionBudget
// savepoints (the batch commits early), and every item is processed once.
func TestRunBatchSubtransactionBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	perTx := map[int64]int{} // savepoints opened per top-level transaction
	fn := func(ctx context.Context, tx pgx.Tx) error {
		var xid int64
		if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
			return err
		}
		perTx[xid]++ // the item's own savepoint
		for range 3 {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := b.record(nil)(ctx, sp); err != nil {
				return err
			}
			if err := sp.Commit(ctx); err != nil {
				return err
			}
			perTx[xid]++
		}
		return nil
	}
	its := make([]inbox.Item, inbox.MaxBatch)
	for i := range its {
		its[i] = inbox.Item{Handler: "h", Key: fmt.Sprint("k", i), Fn: fn}
	}
	res, st := b.ib.RunBatch(t.Context(), its, nil)
	for i, r := range res {
		if r.Err != nil || r.Outcome != inbox.Processed {
			t.Fatalf("item %d: %v, %v", i, r.Outcome, r.Err)
		}
	}
	for xid, n := range perTx {
		if n > inbox.SubtransactionBudget {
			t.Errorf("transaction %d opened %d savepoints, more than the budget of %d", xid, n, inbox.SubtransactionBudget)
		}
	}
	if st.Commits < 2 || len(perTx) != st.Commits {
		t.Errorf("stats %+v, %d transactions; want 2 or more commits, one per transaction", st, len(perTx))
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); got != 3*inbox.MaxBatch {
		t.Errorf("%d effects, want %d", got, 3*inbox.MaxBatch)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != inbox.MaxBatch {
		t.Errorf("%d claims, want %d", got, inbox.MaxBatch)
	}
}

// TestClaimOnBrokenDeployment (PostgreSQL): an inbox whose table is missing (a schema never
// migrated) fails the claim with a DeploymentError on both paths, not with a plain error.
func TestClaimOnBrokenDeployment(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 0)
	schema := "t_" + randHex(6)
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, pgx.Tx) error { return nil }
	var de *inbox.DeploymentError
	if _, err := ib.Run(t.Context(), "h", "k", noop); !errors.As(err, &de) || de.Err.Code != "42P01" {
		t.Errorf("Run: %v; want a DeploymentError with 42P01", err)
	}
	res, _ := ib.RunBatch(t.Context(), []inbox.Item{{Handler: "h", Key: "a", Fn: noop}, {Handler: "h", Key: "b", Fn: noop}}, nil)
	for i, r := range res {
		if !errors.As(r.Err, &de) || de.Err.Code != "42P01" {
			t.Errorf("RunBatch item %d: %v; want a DeploymentError with 42P01", i, r.Err)
		}
	}
}

// TestRowsOpenUnderACancelledContext (PostgreSQL): a function that leaves rows open and cancels
// the context they were read with as it returns (`defer cancel()`) fails with ErrRowsOpen, on
// both paths, every time: pgx may close the connection at the cancel before the inbox closes the
// rows, and that must not read as the item's own context ending (a race: before the fix, 12 to 23
// of 50 batches said "context canceled"). The batch's other items are processed either way.
func TestRowsOpenUnderACancelledContext(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	leave := func(ctx context.Context, tx pgx.Tx) error {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := tx.Query(fctx, `SELECT generate_series(1, 1000)`) //nolint:sqlclosecheck // left open on purpose
		return err
	}
	for i := range 30 {
		if _, err := b.ib.Run(t.Context(), "run", fmt.Sprint("bad-", i), leave); !errors.Is(err, inbox.ErrRowsOpen) {
			t.Fatalf("Run %d: %v; want ErrRowsOpen", i, err)
		}
		res, _ := b.ib.RunBatch(t.Context(), []inbox.Item{{Handler: "batch", Key: fmt.Sprint("good-", i), Fn: b.record(nil)},
			{Handler: "batch", Key: fmt.Sprint("bad-", i), Fn: leave}}, nil)
		if res[0].Err != nil || !errors.Is(res[1].Err, inbox.ErrRowsOpen) {
			t.Fatalf("RunBatch %d: %v, %v; want processed and ErrRowsOpen", i, res[0].Err, res[1].Err)
		}
	}
}
