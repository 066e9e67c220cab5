package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

func runPurge(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "purge", "purge [flags]",
		"  sqsinbox purge --older-than 14d\n"+
			"  sqsinbox purge --older-than 21d --keys-older-than 48h --batch-size 5000 --schema billing_inbox\n"+
			"  sqsinbox purge --older-than 14d --skip-keys\n\n"+
			"The age must be at least the queue's MessageRetentionPeriod (and its DLQ's, if you redrive):\n"+
			"a row purged earlier lets a late redelivery run twice. Ages under 7 days are refused.\n"+
			"The HTTP idempotency keys (the idempotency_keys table of the same schema) are purged too:\n"+
			"--keys-older-than must be at least the middleware's Config.TTL, or a client's retry within\n"+
			"the TTL runs the handler again. Ages under "+hoursText(idempotency.MinTTL)+" are refused.")
	db.register(fs)
	olderThan := fs.String("older-than", "14d", "delete rows whose seen_at is older than this (14d, 336h; at least 7d)")
	keysOlderThan := fs.String("keys-older-than", hoursText(idempotency.DefaultTTL),
		"delete idempotency keys whose created_at is older than this (the middleware's TTL; at least "+hoursText(idempotency.MinTTL)+")")
	skipKeys := fs.Bool("skip-keys", false, "do not purge the idempotency keys")
	batch := fs.Int("batch-size", inbox.DefaultPurgeBatchSize, "rows (or keys) deleted per statement")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	age, err := parseAge(*olderThan)
	if err != nil {
		return err
	}
	if age < 7*24*time.Hour {
		return fmt.Errorf("%w: --older-than %s is under 7 days; the inbox must outlive every redelivery", errUsage, *olderThan)
	}
	keysAge, err := parseAge(*keysOlderThan)
	if err != nil {
		return err
	}
	if keysAge < idempotency.MinTTL && !*skipKeys {
		return fmt.Errorf("%w: --keys-older-than %s is under %s; clients are promised at least that long to retry", errUsage, *keysOlderThan, hoursText(idempotency.MinTTL))
	}
	if *batch <= 0 {
		return fmt.Errorf("%w: --batch-size must be positive", errUsage)
	}
	pool, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	ib, err := inbox.New(pool, &inbox.Config{Schema: db.schema, Retention: age, PurgeBatchSize: *batch})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	p := newProgress(e.stderr)
	var rows, keys int64
	start := time.Now()
	show := func() {
		p.update("purging: %d inbox rows, %d idempotency keys deleted (%.0f rows/s)",
			rows, keys, float64(rows+keys)/time.Since(start).Seconds())
	}
	// Each batch commits on its own, so an interrupt leaves no half-done work: what was deleted is
	// gone, the rest stays for the next run.
	res, err := ib.PurgeOlderThan(ctx, age, func(n int64) { rows = n; show() })
	if err != nil {
		return purgeFailed(ctx, e, p, err, res.Deleted, 0)
	}
	p.done()
	summary(e.stdout, "inbox", "rows", res, time.Since(start))
	if *skipKeys {
		fmt.Fprintln(e.stdout, "idempotency keys: not purged (--skip-keys)")
		return nil
	}
	keysStart := time.Now()
	kres, err := idempotency.PurgeExpired(ctx, pool, db.schema, keysAge, *batch, func(n int64) { keys = n; show() })
	if err != nil {
		return purgeFailed(ctx, e, p, keysError(err, db.schema), res.Deleted, kres.Deleted)
	}
	p.done()
	summary(e.stdout, "idempotency keys", "keys", kres, time.Since(keysStart))
	return nil
}

// purgeFailed clears the progress line and, on an interrupt, says what was deleted before it.
func purgeFailed(ctx context.Context, e env, p *progress, err error, rows, keys int64) error {
	p.done()
	if ctx.Err() != nil {
		fmt.Fprintf(e.stdout, "interrupted after deleting %d inbox rows and %d idempotency keys\n", rows, keys)
	}
	return err
}

// hoursText shows a TTL the way the middleware's docs give it: "24h".
func hoursText(d time.Duration) string { return fmt.Sprintf("%gh", d.Hours()) }

// summary prints the line of one table's purge.
func summary(w io.Writer, what, unit string, r inbox.PurgeResult, took time.Duration) {
	if r.Skipped {
		fmt.Fprintf(w, "%s: skipped: another process is purging this table (advisory lock held)\n", what)
		return
	}
	fmt.Fprintf(w, "%s: deleted %d %s older than %s (database time) in %d batches, %.1fs\n",
		what, r.Deleted, unit, r.Horizon.UTC().Format(time.RFC3339), r.Batches, took.Seconds())
}

// keysError names the missing table for a schema migrated before idempotency keys existed.
func keysError(err error, schema string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%s.idempotency_keys does not exist: run `sqsinbox migrate up`, or pass --skip-keys", schema)
	}
	return fmt.Errorf("idempotency keys: %w", err)
}
