package idempotency

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/pgpurge"
)

// Purge deletes expired keys, once: those whose expiry (stored with each key from the TTL of
// the middleware that stored it) has passed. It uses the inbox's purge machinery: batches of
// Config.PurgeBatchSize, each its own short transaction, by the database's clock, on one process
// at a time (if another holds the advisory lock, Purge returns at once with Skipped set). An
// attempt in flight is never deleted: its row is not committed.
func (m *Middleware) Purge(ctx context.Context) (inbox.PurgeResult, error) {
	return PurgeExpired(ctx, m.pool, m.cfg.Schema, 0, m.cfg.PurgeBatchSize, nil)
}

// PurgeExpired is [Middleware.Purge] for a process that serves no requests, such as an
// operator's CLI: it deletes the keys of schema (empty means inbox.DefaultSchema) whose expiry
// has passed, batchSize rows per statement (0 means DefaultPurgeBatchSize). The process needs
// no TTL of its own: each key's expiry was stored with it, so a middleware's 72-hour TTL is
// kept whatever runs the purge.
//
// minAge, when not 0, is a safety floor: keys created less than minAge ago stay even if
// expired. A floor under [MinTTL] is refused: clients are promised at least that long to retry.
// progress, when not nil, is called after each batch with the rows deleted so far. The
// result's Horizon is the database's now(), the expiry before which keys were deleted.
func PurgeExpired(ctx context.Context, pool *pgxpool.Pool, schema string, minAge time.Duration, batchSize int, progress func(deleted int64)) (inbox.PurgeResult, error) {
	if minAge != 0 && minAge < MinTTL {
		return inbox.PurgeResult{}, fmt.Errorf("idempotency: purge floor %v is under the minimum TTL %v: clients are promised that long to retry", minAge, MinTTL)
	}
	schema = cmp.Or(schema, inbox.DefaultSchema)
	target := pgpurge.Target{
		Schema:    schema,
		Table:     table,
		Column:    "expires_at",
		Expiry:    true,
		BatchSize: cmp.Or(batchSize, DefaultPurgeBatchSize),
		LockKey:   "sqsinbox.purge." + schema + "." + table,
		OnBatch:   progress,
	}
	if minAge != 0 {
		target.Floor = &pgpurge.Floor{Column: "created_at", Age: minAge}
	}
	return pgpurge.Run(ctx, pool, target)
}

// PurgeLoop runs [Middleware.Purge] now and then every Config.PurgeInterval until ctx ends,
// logging each run. Errors are logged and retried at the next interval. It returns
// context.Cause(ctx).
func (m *Middleware) PurgeLoop(ctx context.Context) error {
	return pgpurge.Loop(ctx, m.cfg.PurgeInterval, m.cfg.Logger, "idempotency", m.cfg.Schema, m.Purge)
}
