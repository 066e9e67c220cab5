// Package pgpurge deletes old rows in short batches, under an advisory lock, by the database's
// clock. The inbox and the HTTP idempotency store share it.
package pgpurge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Target says what to purge.
type Target struct {
	// Schema and Table name the table; both must be valid identifiers.
	Schema, Table string
	// Column is the timestamptz column compared with the horizon: rows whose Column is before
	// it are deleted.
	Column string
	// Retention is how long rows are kept: the horizon is now() - Retention on the server. It
	// must be positive, unless Expiry is set.
	Retention time.Duration
	// Expiry says that Column holds each row's own expiry: the horizon is now() (Retention must
	// be 0).
	Expiry bool
	// Floor, when not nil, also keeps every row younger than its age: a safety margin under a
	// horizon that the rows themselves set.
	Floor *Floor
	// BatchSize is the number of rows deleted per statement.
	BatchSize int
	// LockKey names the advisory lock that keeps two purgers of the target apart: each batch's
	// transaction holds it.
	LockKey string
	// OnBatch, when set, is called after each batch with the running total.
	OnBatch func(deleted int64)
}

// Floor keeps rows whose Column is later than now() - Age.
type Floor struct {
	Column string
	Age    time.Duration
}

// Result reports one purge run. The public packages' PurgeResult is this type.
type Result struct {
	// Deleted is the number of rows deleted.
	Deleted int64
	// Batches is the number of DELETE statements run.
	Batches int
	// Horizon is the database time before which rows were deleted: now() - retention, read from
	// the server's clock.
	Horizon time.Time
	// Skipped is true when another process held the purge lock, so this run did nothing.
	Skipped bool
}

// Run deletes the target's rows older than its retention, one batch per transaction, until a
// batch deletes fewer rows than BatchSize or ctx ends. Each batch's transaction takes the target's
// advisory lock (transaction-scoped, so it is safe behind a transaction pooler such as PgBouncer
// or RDS Proxy and never left behind by a process that dies). Run returns at once, with Skipped
// set, if another process holds the lock at its first batch; if another takes it between two
// batches, Run returns what it deleted so far and leaves the rest to that process.
func Run(ctx context.Context, pool *pgxpool.Pool, t Target) (Result, error) {
	var res Result
	ids := []string{t.Schema, t.Table, t.Column}
	if t.Floor != nil {
		ids = append(ids, t.Floor.Column)
		if t.Floor.Age <= 0 {
			return res, fmt.Errorf("purge: the floor's age (%v) must be positive", t.Floor.Age)
		}
	}
	for _, id := range ids {
		if err := sqlident.Validate("purge identifier", id); err != nil {
			return res, err
		}
	}
	switch {
	case t.BatchSize <= 0:
		return res, fmt.Errorf("purge: batch size (%d) must be positive", t.BatchSize)
	case t.Expiry && t.Retention != 0:
		return res, fmt.Errorf("purge: an expiry column takes no retention (%v)", t.Retention)
	case !t.Expiry && t.Retention <= 0:
		return res, fmt.Errorf("purge: retention (%v) must be positive", t.Retention)
	}
	// Both horizons are read once, in the first batch's transaction, so every batch deletes by
	// the same ones.
	var floor time.Time
	var floorAge float64
	if t.Floor != nil {
		floorAge = t.Floor.Age.Seconds()
	}
	table, col := sqlident.Quote(t.Schema, t.Table), sqlident.Quote(t.Column)
	where := col + " < $1 AND " + col + " >= $3"
	if t.Floor != nil {
		where += " AND " + sqlident.Quote(t.Floor.Column) + " < $4"
	}
	// ctid batches keep each statement, and the locks it takes, short. Each batch walks the
	// column's index (ORDER BY) from where the last one stopped ($3, the latest value it
	// deleted; >= so that rows tied with it that the LIMIT left are found): never from the heap's
	// start or the index's, past the rows earlier batches deleted and vacuum has not yet removed,
	// which makes each batch cost more than the one before.
	del := "WITH d AS (DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
		" WHERE " + where + " ORDER BY " + col + " LIMIT $2)) RETURNING " + col + ") SELECT count(*), max(" + col + ") FROM d"
	from := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var n int64
		var last pgtype.Timestamptz
		var got bool
		// Each batch is a transaction that first takes the target's lock, transaction-scoped: it
		// ends with the batch, on whichever server connection a pooler gave the transaction, and
		// with the connection if the process dies. A session lock would outlive its unlock behind
		// a transaction pooler (the unlock runs on another server connection).
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			if got, err = TryXactLock(ctx, tx, t.LockKey); err != nil || !got {
				return err
			}
			if res.Batches == 0 {
				err = tx.QueryRow(ctx, "SELECT now() - make_interval(secs => $1), now() - make_interval(secs => $2)",
					t.Retention.Seconds(), floorAge).Scan(&res.Horizon, &floor)
				if err != nil {
					return fmt.Errorf("read the database clock: %w", err)
				}
			}
			args := []any{res.Horizon, t.BatchSize, from}
			if t.Floor != nil {
				args = append(args, floor)
			}
			return tx.QueryRow(ctx, del, args...).Scan(&n, &last)
		})
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", table, err)
		}
		if !got {
			// Another process purges the target now: it goes on from here.
			res.Skipped = res.Batches == 0
			return res, nil
		}
		res.Batches++
		res.Deleted += n
		if last.Valid {
			from = last
		}
		if t.OnBatch != nil {
			t.OnBatch(res.Deleted)
		}
		if n < int64(t.BatchSize) {
			return res, nil
		}
	}
}

// Loop runs purge now and then every interval until ctx ends, logging each run to log with
// prefix (such as "inbox") and the schema. A failed run is logged and tried again at the next
// interval. It returns context.Cause(ctx).
func Loop(ctx context.Context, interval time.Duration, log *slog.Logger, prefix, schema string, purge func(context.Context) (Result, error)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		r, err := purge(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return context.Cause(ctx)
		case err != nil:
			log.ErrorContext(ctx, prefix+": purge failed", "schema", schema, "error", err)
		case r.Skipped:
			log.DebugContext(ctx, prefix+": purge skipped, another process holds the lock", "schema", schema)
		default:
			log.InfoContext(ctx, prefix+": purged", "schema", schema, "deleted", r.Deleted,
				"batches", r.Batches, "horizon", r.Horizon)
		}
		t.Reset(interval)
	}
}

// TryXactLock takes the advisory lock named key for the rest of tx, if no other transaction or
// session holds it, and reports whether it did. The lock ends with tx: nothing is left on the
// server connection, which a transaction pooler may give to another client next.
func TryXactLock(ctx context.Context, tx pgx.Tx, key string) (got bool, err error) {
	err = tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", key).Scan(&got)
	return got, err
}
