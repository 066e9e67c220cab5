package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/migrate"
)

// Defaults for Config.
const (
	// DefaultSchema is the schema that holds the inbox's tables.
	DefaultSchema = "sqsinbox"
	// DefaultRetention is how long inbox rows are kept: 28 days, the longest redelivery horizon
	// any SQS setup can have. A standard queue's horizon is at most 14 days (SQS's longest
	// retention; a dead-lettered message keeps its original enqueue time), but a FIFO message's
	// age restarts when it moves to the dead-letter queue, so a FIFO queue of 14 days with a DLQ
	// of 14 days can deliver an event up to 28 days after it was sent. The rows are small (handler,
	// key, time), so the default is safe for every queue rather than tight for most.
	DefaultRetention = 28 * 24 * time.Hour
	// DefaultPurgeInterval is the pause between purge runs of [Inbox.PurgeLoop].
	DefaultPurgeInterval = time.Hour
	// DefaultPurgeBatchSize is the number of rows one purge statement deletes.
	DefaultPurgeBatchSize = 1000
	// DefaultLockTimeout is how long a claim waits for another transaction's uncommitted claim
	// of the same event before [Inbox.Run] gives up with [ErrClaimBlocked].
	DefaultLockTimeout = 5 * time.Second
	// DefaultIdleInTransactionTimeout is how long the server lets a claim's transaction sit idle
	// (its client sends nothing) before it ends the session, which rolls the claim back.
	DefaultIdleInTransactionTimeout = time.Minute
)

// Config configures an [Inbox]. The zero value is valid and gives the defaults.
type Config struct {
	// Schema is the schema of the inbox's tables. It must match ^[a-z_][a-z0-9_]{0,62}$.
	// Empty means DefaultSchema.
	Schema string

	// Retention is how long a processed row is remembered. It must be at least as long as the
	// longest time upstream can redeliver a message (for SQS, the queue's MessageRetentionPeriod;
	// see [Inbox.CheckRetention]). 0 means DefaultRetention (28 days); negative is an error.
	Retention time.Duration

	// PurgeInterval is the pause between purge runs in [Inbox.PurgeLoop]. 0 means
	// DefaultPurgeInterval; negative is an error.
	PurgeInterval time.Duration

	// PurgeBatchSize is the number of rows deleted per purge statement. 0 means
	// DefaultPurgeBatchSize; negative is an error.
	PurgeBatchSize int

	// AcceptAsyncCommit, when true, lets [Inbox.Check] pass on a server where
	// synchronous_commit is off. That setting can lose a commit after the message was deleted:
	// a lost message. Default false: Check refuses.
	AcceptAsyncCommit bool

	// Logger receives the purge loop's reports, and a warning for each failure record that could
	// not be written ([Inbox.RecordFailures]). nil means slog.Default().
	Logger *slog.Logger

	// LockTimeout bounds how long [Inbox.Run]'s claim waits for another transaction that holds
	// an uncommitted claim of the same (handler, event): normally a twin delivery still running,
	// which commits (this one is then a duplicate) or rolls back (this one runs). When the wait
	// ends, Run returns an error wrapping [ErrClaimBlocked] and the caller retries later. It applies
	// to the claim only, not to the handler's own statements. Whole milliseconds; 0 means
	// DefaultLockTimeout (5 s); negative is an error.
	LockTimeout time.Duration

	// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of [Inbox.Run]'s
	// transactions: a transaction whose client sends nothing for this long (a frozen process, a
	// paused VM, a half-open connection) has its session ended by the server, which rolls its
	// claim back and frees the event for the redelivery. It must be longer than the longest pause
	// between a handler's statements (an external call made inside the transaction). It is also
	// the delay after which a blocked claim is retried (see [Inbox.BlockedRetryDelay]). Whole
	// milliseconds; 0 means DefaultIdleInTransactionTimeout (1 min); negative is an error.
	IdleInTransactionTimeout time.Duration

	// Instance names this process in the rows it writes (see [Delivery]): the worker's instance an
	// operator sees in `sqsinbox events show`. Empty means [DefaultInstance]: the ECS task's ARN
	// in an ECS task, else the hostname.
	Instance string

	// NoFailureRecords, when true, turns [Inbox.RecordFailures] off: handler failures are not
	// recorded in inbox_failures (for a service whose error texts may hold data that must not be
	// stored). Default false: each failure is recorded, for `sqsinbox events show`, the DLQ peek
	// and the console.
	NoFailureRecords bool

	// Hooks, when set, observe each claim and commit of [Inbox.Run] and [Inbox.RunTx] (the
	// workerotel package makes spans of them). nil means none, at no cost.
	Hooks *Hooks
}

// Inbox records which handler has processed which event, in the caller's PostgreSQL database.
type Inbox struct {
	pool     *pgxpool.Pool
	cfg      Config
	sql      statements
	migrator *migrate.Migrator
	sources  sources
	failures failureStats
	lay      atomic.Pointer[genLayout] // the generations layout, or nil (generations.go)
	layRead  atomic.Bool               // the layout has been read
	now      func() time.Time          // the clock of the generations; tests move it
	// keyTimeHorizon is how far ahead of now a key's time is still a time, in the keytime
	// layout (keytime.go); tests shorten it to show what a wrong one breaks.
	keyTimeHorizon time.Duration
}

type statements struct {
	claim string // RunTx's: the caller owns the transaction and its settings
	// boundedClaim is Run's claim: one statement that bounds the claim's lock wait and the
	// transaction's idle time, inserts, and (when it inserted) sets the lock wait back to what it
	// was for the handler's statements.
	boundedClaim string
	// batchClaim is RunBatch's: boundedClaim for an array of keys, inserted in a stable order,
	// returning the keys it inserted.
	batchClaim string
	unclaim    string // deletes the claims of a batch's items that were not processed
	// recordFailures inserts failure records and trims each event's to FailuresKept.
	recordFailures string
	stats          string
}

// New returns an inbox that uses pool. It does no I/O: call [Inbox.Check] at start, after
// [Migrate].
func New(pool *pgxpool.Pool, cfg *Config) (*Inbox, error) {
	if pool == nil {
		return nil, errors.New("inbox: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, DefaultPurgeInterval)
	c.PurgeBatchSize = cmp.Or(c.PurgeBatchSize, DefaultPurgeBatchSize)
	c.Logger = logdur.Logger(cmp.Or(c.Logger, slog.Default()))
	c.LockTimeout = cmp.Or(c.LockTimeout, DefaultLockTimeout)
	c.IdleInTransactionTimeout = cmp.Or(c.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	if err := c.validate(); err != nil {
		return nil, err
	}
	mg, err := newMigrator(pool, c.Schema)
	if err != nil {
		return nil, err
	}
	return &Inbox{
		pool:           pool,
		cfg:            c,
		migrator:       mg,
		now:            time.Now,
		keyTimeHorizon: keyTimeHorizon(c.Retention),
		sql: statements{
			claim: "INSERT INTO " + sqlident.Quote(c.Schema, "processed_messages") +
				" (handler, event_id, " + deliveryColumns + ") VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
			boundedClaim: boundedClaim(c),
			batchClaim:   batchClaim(c),
			unclaim: "DELETE FROM " + sqlident.Quote(c.Schema, "processed_messages") +
				" WHERE (handler, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
			recordFailures: failuresInsert(c.Schema),
			stats: "SELECT handler, count(*), min(seen_at), max(seen_at) FROM " + sqlident.Quote(c.Schema, "processed_messages") +
				" GROUP BY handler ORDER BY handler",
		},
	}, nil
}

// boundedClaim is the claim of Run in one statement, so that the timeouts cost no statement of
// their own: the CTE sets lock_timeout and idle_in_transaction_session_timeout for the
// transaction (set_config(..., true) is SET LOCAL, gone at its end, so nothing leaks onto the
// pooled connection) before the INSERT reads its row from it, and so before any wait for another
// claim's lock; RETURNING, evaluated only for an inserted row, sets lock_timeout back to the value
// it had, so the handler's own statements wait as long as they would without the inbox. A
// duplicate inserts nothing and rolls back at once, which ends the settings too. The timeouts
// are integers we format (milliseconds), never user text.
func boundedClaim(c Config) string {
	return fmt.Sprintf("WITH s AS (SELECT current_setting('lock_timeout') AS lock_timeout, "+
		"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true)) "+
		"INSERT INTO %s (handler, event_id, "+deliveryColumns+") SELECT $1, $2, $3, $4, $5, $6 FROM s ON CONFLICT DO NOTHING "+
		"RETURNING (SELECT set_config('lock_timeout', s.lock_timeout, true) FROM s)",
		c.LockTimeout.Milliseconds(), c.IdleInTransactionTimeout.Milliseconds(), sqlident.Quote(c.Schema, "processed_messages"))
}

// batchClaim is boundedClaim for RunBatch: the claims come as arrays (handlers, keys, and their
// deliveries' columns) and are inserted in byte order, so that every batch takes its claims' locks in the same order, and it
// returns the claims it inserted. The lock wait cannot be reset in RETURNING here (that would run
// after the first row, before the others' waits), so the CTE keeps its old value in
// sqsinbox.lock_timeout, a setting of the transaction's own, and resetLockTimeout, queued right
// after, sets it back.
func batchClaim(c Config) string {
	return fmt.Sprintf("WITH s AS (SELECT set_config('sqsinbox.lock_timeout', current_setting('lock_timeout'), true), "+
		"set_config('lock_timeout', '%d', true), set_config('idle_in_transaction_session_timeout', '%d', true)) "+
		"INSERT INTO %s (handler, event_id, "+deliveryColumns+") SELECT u.h, u.k, u.s, u.m, u.r, u.t "+
		"FROM s, unnest($1::text[], $2::text[], $3::int[], $4::uuid[], $5::int2[], $6::bytea[]) AS u(h, k, s, m, r, t) "+
		"ORDER BY u.h COLLATE \"C\", u.k COLLATE \"C\" ON CONFLICT DO NOTHING RETURNING handler, event_id",
		c.LockTimeout.Milliseconds(), c.IdleInTransactionTimeout.Milliseconds(), sqlident.Quote(c.Schema, "processed_messages"))
}

// deliveryColumns are the columns of a claim's [Delivery], bound after the handler and the key.
const deliveryColumns = "source, message_id, receive_count, trace_id"

// resetLockTimeout follows batchClaim.
const resetLockTimeout = "SELECT set_config('lock_timeout', current_setting('sqsinbox.lock_timeout'), true)"

func (c *Config) validate() error {
	if err := sqlident.Validate("inbox: Config.Schema", c.Schema); err != nil {
		return err
	}
	if c.Retention < 0 {
		return fmt.Errorf("inbox: Config.Retention is %v; it must be positive (0 means %v)", c.Retention, DefaultRetention)
	}
	if c.PurgeInterval < 0 {
		return fmt.Errorf("inbox: Config.PurgeInterval is %v; it must be positive (0 means %v)", c.PurgeInterval, DefaultPurgeInterval)
	}
	if c.LockTimeout < 0 || c.LockTimeout%time.Millisecond != 0 {
		return fmt.Errorf("inbox: Config.LockTimeout is %v; it must be positive whole milliseconds (0 means %v)", c.LockTimeout, DefaultLockTimeout)
	}
	if c.IdleInTransactionTimeout < 0 || c.IdleInTransactionTimeout%time.Millisecond != 0 {
		return fmt.Errorf("inbox: Config.IdleInTransactionTimeout is %v; it must be positive whole milliseconds (0 means %v)",
			c.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	}
	if c.PurgeBatchSize < 0 {
		return fmt.Errorf("inbox: Config.PurgeBatchSize is %d; it must be positive (0 means %d)", c.PurgeBatchSize, DefaultPurgeBatchSize)
	}
	return nil
}

// Schema returns the schema of the inbox's tables.
func (ib *Inbox) Schema() string { return ib.cfg.Schema }

// Retention returns how long processed rows are kept.
func (ib *Inbox) Retention() time.Duration { return ib.cfg.Retention }

// BlockedRetryDelay is how long a caller should wait before it retries an event whose claim was
// blocked ([ErrClaimBlocked]): Config.IdleInTransactionTimeout. By then a holder that was frozen
// has had its session ended by the server, and a holder that was running has most likely
// committed, so the retry runs or is a duplicate instead of blocking again.
func (ib *Inbox) BlockedRetryDelay() time.Duration { return ib.cfg.IdleInTransactionTimeout }

// IdleInTransactionTimeout returns Config.IdleInTransactionTimeout with its default filled in.
func (ib *Inbox) IdleInTransactionTimeout() time.Duration { return ib.cfg.IdleInTransactionTimeout }

// Pool returns the pool the inbox uses.
func (ib *Inbox) Pool() *pgxpool.Pool { return ib.pool }

// Check verifies, at start, that the pool's query mode works where the pool connects (see
// [ErrPoolerQueryMode]), that the schema is migrated and that commits are durable (see
// [ErrAsyncCommit]). Workers call it before they receive anything.
func (ib *Inbox) Check(ctx context.Context) error {
	if err := pooler.Check(ctx, ib.pool, "inbox"); err != nil {
		return err
	}
	if err := ib.migrator.CheckCurrent(ctx); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	if _, _, err := ib.Layout(ctx); err != nil {
		return err
	}
	if l := ib.generations(); l != nil {
		// The generations around now must exist before the first claim.
		if _, err := ib.ensure(ctx, l, nil, nil); err != nil {
			return err
		}
	}
	return ib.CheckDurability(ctx)
}
