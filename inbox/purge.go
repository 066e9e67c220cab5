package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/internal/core/pgpurge"
)

// PurgeResult reports one purge run: the rows deleted (Deleted), the DELETE statements run
// (Batches), the database time before which rows were deleted (Horizon: now() - retention, by the
// server's clock), and whether another process held the purge lock, so this run did nothing
// (Skipped). The outbox and the HTTP middleware report their purges with it too.
type PurgeResult = pgpurge.Result

// Purge deletes processed rows older than the retention, once, and the failure records
// ([Inbox.RecordFailures]) older than it too (not counted in the result's Deleted). It deletes in batches of
// Config.PurgeBatchSize, each its own short transaction, using the database's clock. Only one
// process purges a schema at a time: if another holds the advisory lock, Purge returns at once
// with Skipped set.
func (ib *Inbox) Purge(ctx context.Context) (PurgeResult, error) {
	return ib.PurgeOlderThan(ctx, ib.cfg.Retention, nil)
}

// PurgeOlderThan is [Inbox.Purge] with an explicit age, for operators. It refuses an age
// shorter than the configured retention. progress, when not nil, is called after each batch
// with the rows deleted so far.
func (ib *Inbox) PurgeOlderThan(ctx context.Context, age time.Duration, progress func(deleted int64)) (PurgeResult, error) {
	if age < ib.cfg.Retention {
		return PurgeResult{}, fmt.Errorf("inbox: purge age %v is shorter than the retention %v: rows still needed to catch redeliveries would go", age, ib.cfg.Retention)
	}
	var res PurgeResult
	err := ib.readRows(ctx, func(l *genLayout) error {
		if l != nil {
			// The generations layout forgets whole generations (generations.go).
			r, err := ib.rotate(ctx, l, age)
			res = PurgeResult{Deleted: r.Rows, Batches: len(r.Dropped), Horizon: r.Horizon, Skipped: r.Skipped}
			return err
		}
		var err error
		res, err = pgpurge.Run(ctx, ib.pool, pgpurge.Target{
			Schema:    ib.cfg.Schema,
			Table:     "processed_messages",
			Column:    "seen_at",
			Retention: age,
			BatchSize: ib.cfg.PurgeBatchSize,
			LockKey:   "sqsinbox.purge." + ib.cfg.Schema + ".processed_messages",
			OnBatch:   progress,
		})
		return err
	})
	if err != nil {
		return res, err
	}
	// A schema from before the failure records (an older binary migrated it) has none to purge.
	if _, err := ib.purgeFailures(ctx, age); err != nil && !undefinedTable(err) {
		return res, fmt.Errorf("inbox: purge the failure records: %w", err)
	}
	return res, nil
}

// PurgeLoop runs [Inbox.Purge] now and then every Config.PurgeInterval until ctx ends, logging
// each run. Errors are logged and retried at the next interval. It returns context.Cause(ctx).
func (ib *Inbox) PurgeLoop(ctx context.Context) error {
	return pgpurge.Loop(ctx, ib.cfg.PurgeInterval, ib.cfg.Logger, "inbox", ib.cfg.Schema, ib.Purge)
}

// undefinedTable reports whether err is PostgreSQL's undefined_table (SQLSTATE 42P01).
func undefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
