// Package pgpurge deletes old rows in short batches, under an advisory lock, by the database's
// clock. The inbox and the HTTP idempotency store share it.
package pgpurge

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/sqlident"
)

// Target says what to purge.
type Target struct {
	// Schema and Table name the table; both must be valid identifiers.
	Schema, Table string
	// Column is the timestamptz column compared with the horizon.
	Column string
	// Retention is how long rows are kept: the horizon is now() - Retention on the server.
	Retention time.Duration
	// BatchSize is the number of rows deleted per statement.
	BatchSize int
	// LockKey names the advisory lock that keeps two purgers of the target apart.
	LockKey string
	// OnBatch, when set, is called after each batch with the running total.
	OnBatch func(deleted int64)
}

// Result reports one purge run.
type Result struct {
	// Deleted is the number of rows deleted.
	Deleted int64
	// Batches is the number of DELETE statements run.
	Batches int
	// Horizon is the database time before which rows were deleted.
	Horizon time.Time
	// Locked is true when another purger held the lock and nothing was done.
	Locked bool
}

// Run deletes the target's rows older than its retention, one batch per statement (each its own
// transaction), until a batch deletes fewer rows than BatchSize or ctx ends. It returns at once,
// with Locked set, if another session holds the target's advisory lock.
func Run(ctx context.Context, pool *pgxpool.Pool, t Target) (Result, error) {
	var res Result
	for _, id := range []string{t.Schema, t.Table, t.Column} {
		if err := sqlident.Validate("purge identifier", id); err != nil {
			return res, err
		}
	}
	if t.Retention <= 0 || t.BatchSize <= 0 {
		return res, fmt.Errorf("purge: retention (%v) and batch size (%d) must be positive", t.Retention, t.BatchSize)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("purge: connect: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", t.LockKey).Scan(&got); err != nil {
		return res, fmt.Errorf("purge: lock: %w", err)
	}
	if !got {
		res.Locked = true
		return res, nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", t.LockKey)
	}()
	if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1)", t.Retention.Seconds()).Scan(&res.Horizon); err != nil {
		return res, fmt.Errorf("purge: read the database clock: %w", err)
	}
	table := sqlident.Quote(t.Schema, t.Table)
	col := sqlident.Quote(t.Column)
	// ctid batches keep each statement, and the locks it takes, short.
	del := "DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
		" WHERE " + col + " < $1 LIMIT $2))"
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		tag, err := conn.Exec(ctx, del, res.Horizon, t.BatchSize)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", table, err)
		}
		res.Batches++
		res.Deleted += tag.RowsAffected()
		if t.OnBatch != nil {
			t.OnBatch(res.Deleted)
		}
		if tag.RowsAffected() < int64(t.BatchSize) {
			return res, nil
		}
	}
}
