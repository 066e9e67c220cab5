package outbox

import (
	"context"

	"github.com/sqsinbox/sqsinbox/internal/core/pgpurge"
)

// PurgeResult reports one purge run: the rows deleted (Deleted), the DELETE statements run
// (Batches), the database time before which sent rows were deleted (Horizon), and whether another
// process held the purge lock, so this run did nothing (Skipped).
type PurgeResult = pgpurge.Result

// Purge deletes rows sent longer than Config.Retention ago, once, in batches of
// Config.PurgeBatchSize by the database's clock, on one process at a time (an advisory lock;
// Skipped is set when another holds it). Unsent and parked rows are never deleted.
func (ob *Outbox) Purge(ctx context.Context) (PurgeResult, error) {
	return pgpurge.Run(ctx, ob.pool, pgpurge.Target{
		Schema:    ob.cfg.Schema,
		Table:     "outbox_messages",
		Column:    "sent_at",
		Retention: ob.cfg.Retention,
		BatchSize: ob.cfg.PurgeBatchSize,
		LockKey:   "sqsinbox.purge." + ob.cfg.Schema + ".outbox_messages",
	})
}

// PurgeLoop runs [Outbox.Purge] now and then every Config.PurgeInterval until ctx ends, logging
// each run. It returns context.Cause(ctx).
func (ob *Outbox) PurgeLoop(ctx context.Context) error {
	return pgpurge.Loop(ctx, ob.cfg.PurgeInterval, ob.cfg.Logger, "outbox", ob.cfg.Schema, ob.Purge)
}
