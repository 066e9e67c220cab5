package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
	"github.com/sqsinbox/sqsinbox/migrate"
	"github.com/sqsinbox/sqsinbox/outbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// minOlderThan is the hard floor of --older-than, with or without the queues' check.
const minOlderThan = 7 * 24 * time.Hour

func runPurge(ctx context.Context, e env, args []string) error {
	fs, o := purgeFlags(e)
	words, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, words[0])
	}
	if err := o.check(); err != nil {
		return err
	}
	if len(o.queues) > 0 {
		if err := checkHorizon(ctx, e, fs.timeout, o.queues, o.age, o.olderThan); err != nil {
			return err
		}
	}
	pool, err := o.db.connect(ctx, fs.timeout)
	if err != nil {
		return err
	}
	defer pool.Close()
	return o.purge(ctx, e, pool)
}

// purgeOptions are purge's flags, and the ages check reads from them.
type purgeOptions struct {
	db                                    dbFlags
	olderThan, keysFloor, outboxOlderThan string
	queues                                []string
	skipCheck, skipKeys, skipOutbox       bool
	batch                                 int

	age, keysAge, outboxAge time.Duration // set by check
}

// purgeFlags is purge's flag set, and the options its flags set.
func purgeFlags(e env) (*flags, *purgeOptions) {
	o := &purgeOptions{}
	fs := newFlags(e, "purge", "purge --queue QUEUE... [flags]",
		"  sqsinbox purge --queue warehouse --queue loyalty          # rows older than 28d, if no queue redelivers later\n"+
			"  sqsinbox purge --queue orders.fifo --older-than 30d --batch-size 5000 --schema billing_inbox\n"+
			"  sqsinbox purge --skip-queue-check --older-than 21d --skip-keys\n\n"+
			"An inbox row must outlive every redelivery of its event: a row purged earlier lets a late\n"+
			"redelivery run twice. So the age is checked against the redelivery horizon of every queue\n"+
			"the inbox serves (--queue, repeatable, a name or URL): a standard queue's retention or its\n"+
			"DLQ's, whichever is longer; a FIFO queue's retention plus its DLQ's, since a FIFO message's\n"+
			"age starts again in the DLQ. A DLQ whose retention cannot be read refuses the purge.\n"+
			"Without --queue the purge is refused unless --skip-queue-check says you have checked the\n"+
			"queues yourself. Ages under 7 days are always refused.\n\n"+
			"The HTTP idempotency keys (the idempotency_keys table of the same schema) are purged too,\n"+
			"each once its own expiry has passed: the middleware stores it with the key from its TTL,\n"+
			"so a 72-hour TTL is kept. --keys-older-than adds a floor: keys younger than it stay.\n\n"+
			"Then the outbox's sent rows older than --outbox-older-than go (unsent and parked rows never\n"+
			"do); a schema without the outbox says so in one line. --skip-outbox leaves them.")
	o.db.register(fs)
	fs.StringVar(&o.olderThan, "older-than", durationText(inbox.DefaultRetention),
		"delete inbox rows whose seen_at is older than this (28d, 672h); at least the queues' redelivery horizon and 7d")
	fs.Func("queue", "a queue the inbox serves, by name or URL (repeatable); its redelivery horizon bounds --older-than",
		func(q string) error {
			if q == "" {
				return errors.New("empty queue")
			}
			o.queues = append(o.queues, q)
			return nil
		})
	fs.BoolVar(&o.skipCheck, "skip-queue-check", false,
		"purge without reading the queues' redelivery horizon: you vouch that --older-than outlasts every redelivery")
	fs.StringVar(&o.keysFloor, "keys-older-than", "",
		"a floor for the idempotency keys: keep keys younger than this even if expired (at least "+hoursText(idempotency.MinTTL)+"; default none)")
	fs.BoolVar(&o.skipKeys, "skip-keys", false, "do not purge the idempotency keys")
	fs.StringVar(&o.outboxOlderThan, "outbox-older-than", durationText(outbox.DefaultRetention),
		"delete outbox rows sent longer ago than this (7d, 168h); unsent and parked rows are never deleted")
	fs.BoolVar(&o.skipOutbox, "skip-outbox", false, "do not purge the outbox's sent rows")
	fs.IntVar(&o.batch, "batch-size", inbox.DefaultPurgeBatchSize, "rows (or keys) deleted per statement")
	return fs, o
}

// check parses the ages and checks them and the other flags, before anything is read.
func (o *purgeOptions) check() error {
	var err error
	if o.age, err = parseAge(o.olderThan); err != nil {
		return err
	}
	if o.age < minOlderThan {
		return fmt.Errorf("%w: --older-than %s is under 7 days; the inbox must outlive every redelivery", errUsage, o.olderThan)
	}
	if o.keysFloor != "" && !o.skipKeys {
		if o.keysAge, err = parseAge(o.keysFloor); err != nil {
			return err
		}
		if o.keysAge < idempotency.MinTTL {
			return fmt.Errorf("%w: --keys-older-than %s is under %s; clients are promised at least that long to retry", errUsage, o.keysFloor, hoursText(idempotency.MinTTL))
		}
	}
	if !o.skipOutbox {
		if o.outboxAge, err = parseAge(o.outboxOlderThan); err != nil {
			return fmt.Errorf("%w: --outbox-older-than %q is not a duration such as 7d or 168h", errUsage, o.outboxOlderThan)
		}
	}
	if o.batch <= 0 {
		return fmt.Errorf("%w: --batch-size must be positive", errUsage)
	}
	switch {
	case len(o.queues) == 0 && !o.skipCheck:
		return fmt.Errorf("%w: name the queues the inbox serves with --queue (repeatable), so that --older-than is checked "+
			"against their redelivery horizon; or pass --skip-queue-check if you have checked it yourself", errUsage)
	case len(o.queues) > 0 && o.skipCheck:
		return fmt.Errorf("%w: give either --queue or --skip-queue-check, not both", errUsage)
	}
	return nil
}

// purge deletes the inbox rows, then the expired idempotency keys, then the outbox's sent rows,
// each part unless skipped, and sums each up.
func (o *purgeOptions) purge(ctx context.Context, e env, pool *pgxpool.Pool) error {
	schema := o.db.schema
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema, Retention: o.age, PurgeBatchSize: o.batch})
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
	res, err := ib.PurgeOlderThan(ctx, o.age, func(n int64) { rows = n; show() })
	if err != nil {
		return purgeFailed(ctx, e, p, notMigrated(err, schema, "processed_messages", ""), res.Deleted, 0)
	}
	p.done()
	summary(e.stdout, "inbox", "row", "older than", res, time.Since(start))
	if o.skipKeys {
		fmt.Fprintln(e.stdout, "idempotency keys: not purged (--skip-keys)")
	} else {
		keysStart := time.Now()
		kres, err := idempotency.PurgeExpired(ctx, pool, schema, o.keysAge, o.batch, func(n int64) { keys = n; show() })
		if err != nil {
			return purgeFailed(ctx, e, p, notMigrated(err, schema, "idempotency_keys", ", or pass --skip-keys"), res.Deleted, kres.Deleted)
		}
		p.done()
		summary(e.stdout, "idempotency keys", "key", "that expired before", kres, time.Since(keysStart))
	}
	if o.skipOutbox {
		fmt.Fprintln(e.stdout, "outbox: not purged (--skip-outbox)")
		return nil
	}
	return purgeOutbox(ctx, e, pool, schema, o.outboxAge, o.batch)
}

// purgeOutbox deletes the outbox's rows sent before age, and prints its summary line. A schema
// without the outbox is a line saying so: not every service that runs an inbox has one.
func purgeOutbox(ctx context.Context, e env, pool *pgxpool.Pool, schema string, age time.Duration, batch int) error {
	ob, err := outbox.New(pool, &outbox.Config{Schema: schema, Retention: age, PurgeBatchSize: batch})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := ob.Check(ctx); errors.Is(err, migrate.ErrBehind) {
		fmt.Fprintf(e.stdout, "outbox: not purged: not migrated in schema %s (pass --skip-outbox to leave it out)\n", schema)
		return nil
	} else if err != nil {
		return err
	}
	start := time.Now()
	r, err := ob.Purge(ctx)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(e.stdout, "outbox: interrupted after deleting %s\n", plural(int(r.Deleted), "sent row"))
		}
		return notMigrated(err, schema, "outbox_messages", ", or pass --skip-outbox")
	}
	summary(e.stdout, "outbox", "row", "sent before", r, time.Since(start))
	return nil
}

// checkHorizon reads the redelivery horizon of each queue and refuses an age shorter than the
// longest. A queue whose dead-letter queue cannot be read has no known horizon: refused too.
func checkHorizon(ctx context.Context, e env, timeout time.Duration, queues []string, age time.Duration, ageText string) error {
	c, err := sqsClient(ctx, timeout)
	if err != nil {
		return err
	}
	var longest *worker.Queue
	for _, name := range queues {
		q, err := worker.DescribeQueue(ctx, c, name)
		var dle *worker.DeadLetterError
		switch {
		case errors.As(err, &dle):
			return fmt.Errorf("queue %s: the retention of its dead-letter queue %s cannot be read (%s), so its redelivery horizon "+
				"is unknown and the purge is refused; grant sqs:GetQueueUrl and sqs:GetQueueAttributes on the dead-letter queue",
				dle.Queue, dle.ARN, apiError(dle.Err))
		case err != nil:
			return fmt.Errorf("queue %s: %s", name, apiError(err))
		}
		if longest == nil || q.RedeliveryHorizon() > longest.RedeliveryHorizon() {
			longest = q
		}
	}
	h := longest.RedeliveryHorizon()
	if age < h {
		return fmt.Errorf("%w: --older-than %s is shorter than the redelivery horizon of queue %s, %s (%s): "+
			"a message redelivered after its row was purged would be processed twice; use --older-than %s or more",
			errUsage, ageText, longest.Name, durationText(h), horizonText(longest), durationText(h))
	}
	fmt.Fprintf(e.stdout, "redelivery horizon: %s (queue %s: %s); purging inbox rows older than %s\n",
		durationText(h), longest.Name, horizonText(longest), durationText(age))
	return nil
}

// horizonText says where a queue's redelivery horizon comes from.
func horizonText(q *worker.Queue) string {
	ret := durationText(q.MessageRetentionPeriod)
	switch {
	case q.DeadLetterTargetARN == "":
		return "its retention " + ret + ", no dead-letter queue"
	case q.FIFO:
		return "its retention " + ret + " plus its dead-letter queue's " + durationText(q.DeadLetterRetentionPeriod) +
			": a FIFO message's age starts again in the dead-letter queue"
	}
	return "the longer of its retention " + ret + " and its dead-letter queue's " + durationText(q.DeadLetterRetentionPeriod)
}

// purgeFailed clears the progress line and, on an interrupt, says what was deleted before it.
func purgeFailed(ctx context.Context, e env, p *progress, err error, rows, keys int64) error {
	p.done()
	if ctx.Err() != nil {
		fmt.Fprintf(e.stdout, "interrupted after deleting %s and %s\n", plural(int(rows), "inbox row"), plural(int(keys), "idempotency key"))
	}
	return err
}

// hoursText shows a TTL the way the middleware's docs give it: "24h".
func hoursText(d time.Duration) string { return fmt.Sprintf("%gh", d.Hours()) }

// summary prints the line of one table's purge: "deleted 3 rows older than <horizon>".
func summary(w io.Writer, what, unit, relation string, r inbox.PurgeResult, took time.Duration) {
	if r.Skipped {
		fmt.Fprintf(w, "%s: skipped: another process is purging this table (advisory lock held)\n", what)
		return
	}
	fmt.Fprintf(w, "%s: deleted %s %s %s (database time) in %s, %.1fs\n",
		what, plural(int(r.Deleted), unit), relation, r.Horizon.UTC().Format(time.RFC3339), plural(r.Batches, "batch"), took.Seconds())
}

// notMigrated turns "no such table" or "no such column" from PostgreSQL into the fix: migrate
// the schema. alternative is appended to the advice.
func notMigrated(err error, schema, table, alternative string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01": // undefined_table
			return fmt.Errorf("%s.%s does not exist (is the schema migrated?): run `sqsinbox migrate up`%s", schema, table, alternative)
		case "42703": // undefined_column
			return fmt.Errorf("%s.%s is not migrated to the latest version (%s): run `sqsinbox migrate up`%s",
				schema, table, strings.TrimSuffix(pgErr.Message, "."), alternative)
		}
	}
	return fmt.Errorf("%s.%s: %w", schema, table, err)
}
