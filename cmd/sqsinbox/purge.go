package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

func runPurge(ctx context.Context, e env, args []string) error {
	var db dbFlags
	fs := newFlags(e, "purge", "purge [flags]",
		"  sqsinbox purge --older-than 14d\n"+
			"  sqsinbox purge --older-than 21d --batch-size 5000 --schema billing_inbox\n\n"+
			"The age must be at least the queue's MessageRetentionPeriod (and its DLQ's, if you redrive):\n"+
			"a row purged earlier lets a late redelivery run twice. Ages under 7 days are refused.")
	db.register(fs)
	olderThan := fs.String("older-than", "14d", "delete rows whose seen_at is older than this (14d, 336h; at least 7d)")
	batch := fs.Int("batch-size", inbox.DefaultPurgeBatchSize, "rows deleted per statement")
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
	start := time.Now()
	// Each batch commits on its own, so an interrupt leaves no half-done work: what was deleted is
	// gone, the rest stays for the next run.
	res, err := ib.PurgeOlderThan(ctx, age, func(n int64) {
		p.update("purging: %d rows deleted (%.0f rows/s)", n, float64(n)/time.Since(start).Seconds())
	})
	p.done()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(e.stdout, "interrupted after deleting %d rows older than %s in %d batches\n",
				res.Deleted, res.Horizon.UTC().Format(time.RFC3339), res.Batches)
		}
		return err
	}
	if res.Skipped {
		fmt.Fprintln(e.stdout, "skipped: another process is purging this schema (advisory lock held)")
		return nil
	}
	fmt.Fprintf(e.stdout, "deleted %d rows older than %s (database time) in %d batches, %.1fs\n",
		res.Deleted, res.Horizon.UTC().Format(time.RFC3339), res.Batches, time.Since(start).Seconds())
	return nil
}
