package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/internal/core/startstop"
	"github.com/sqsinbox/sqsinbox/s3payload"

	"github.com/sqsinbox/sqsinbox/migrate"
)

// Defaults for RelayConfig.
const (
	// DefaultSenders is the number of batches the relay publishes at once when it starts, and
	// the fewest it runs when it sizes them itself (RelayConfig.Senders 0).
	DefaultSenders = 4
	// MaxSenders is the most batches the relay publishes at once when it sizes them itself.
	MaxSenders = 64
	// DefaultPollInterval is how often an idle relay looks for rows when no NOTIFY woke it.
	DefaultPollInterval = time.Second
	// DeafPollInterval is how often an idle relay looks for rows, at most, when its LISTEN
	// connection hears no notifications: behind a transaction pooler (PgBouncer in transaction
	// mode) a LISTEN stays on a server connection that the client no longer holds. A row
	// committed then is claimed within this delay (or PollInterval, if shorter). The relay polls
	// this often too until its probe notification is heard at start, and while its LISTEN
	// connection is down.
	DeafPollInterval = 250 * time.Millisecond
	// listenProbeTimeout bounds the wait for the relay's probe notification, sent through the
	// pool at start and after each reconnect: on a direct connection it arrives in milliseconds.
	listenProbeTimeout = 10 * time.Second
	// DefaultPublishTimeout bounds one SendMessageBatch or PublishBatch call, the SDK's retries
	// included.
	DefaultPublishTimeout = 20 * time.Second
	// DefaultLease is how long a claimed row stays the claimer's: at least twice the publish
	// timeout, so that a live relay stamps its rows before another may take them.
	DefaultLease = time.Minute
	// DefaultMaxAttempts is the number of failed publishes after which a row is parked.
	DefaultMaxAttempts = 10
	// DefaultBackoffMin and DefaultBackoffMax bound the pause before a failed row is tried
	// again: BackoffMin doubled at each failure, at most BackoffMax.
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = 5 * time.Minute
	// DefaultClaimSize is the number of rows the relay claims at once (ten batches).
	DefaultClaimSize = 100
	// DefaultMaxBatchBytes is the payload limit of one batch call: 256 KiB (1 MiB on SQS now).
	DefaultMaxBatchBytes = 256 * 1024
)

// notifyChannel is the channel of the table's trigger; the payload is the schema.
const notifyChannel = "sqsinbox_outbox"

// RelayConfig configures a [Relay].
type RelayConfig struct {
	// Schema is the schema of the outbox's table. Empty means DefaultSchema.
	Schema string

	// SQS publishes the rows whose destination is a queue URL. nil means the relay leaves
	// those rows to a relay that has a client (they stay in the backlog). SQS or SNS is required.
	SQS SQSClient
	// SNS publishes the rows whose destination is a topic ARN; nil as for SQS.
	SNS SNSClient

	// Senders is the number of batches published at once, each by its own goroutine. 0 means
	// the relay sizes it, from DefaultSenders (4) up to MaxSenders (64), to hide the publish
	// call's round trip: by Little's law, R messages a second through a call that takes L
	// seconds need R × L messages in flight, so a relay 20 ms from SQS needs several times the
	// senders of one on the loopback. It measures the fastest call and the rate every 50 ms
	// while batches wait for a sender, and runs twice the senders they call for (the rate
	// grows with them until something else limits it); with no batches waiting it falls back
	// by one a look. A positive count is fixed; negative is an error.
	Senders int

	// ClaimSize is the number of rows the relay claims in one statement, to be published in
	// batches of ten by the senders. The claim runs in the same round trip as the marks (sent,
	// failed, released) of the batches published since the previous one, and the relay claims
	// again when fewer than twice Senders batches are waiting, so that the senders do not wait
	// for the database while there is work, or sooner when a ClaimSize of marks waits for a claim
	// to ride with. 0 means DefaultClaimSize (100); negative or over 1000 is an
	// error.
	ClaimSize int

	// PollInterval is how often an idle relay looks for rows without a NOTIFY: it catches
	// notifications lost while no relay listened, and rows whose backoff ended. 0 means
	// DefaultPollInterval (1 s); negative is an error.
	PollInterval time.Duration

	// PublishTimeout bounds one batch call. 0 means DefaultPublishTimeout (20 s).
	PublishTimeout time.Duration

	// Lease is how long claimed rows are reserved for this relay. It must be at least twice
	// PublishTimeout. A relay that dies holding a lease delays its rows by at most this long.
	// Whole milliseconds; 0 means DefaultLease (1 min).
	Lease time.Duration

	// MaxAttempts is the number of failed publishes of a row after which it is parked (see
	// [Outbox.RetryParked]). 0 means DefaultMaxAttempts (10); negative is an error.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the pause before a failed row is tried again. 0 means
	// DefaultBackoffMin (1 s) and DefaultBackoffMax (5 min); negative is an error.
	BackoffMin, BackoffMax time.Duration

	// MaxBatchBytes is the payload limit of one batch call (the sum of its messages' sizes).
	// 0 means DefaultMaxBatchBytes (256 KiB); more than MaxMessageSizeLimit (1 MiB) is an error.
	MaxBatchBytes int

	// Payloads, when set, offloads to S3 the body of each message over its threshold (or every
	// body, as configured) before publishing it: the message then carries a pointer to the
	// object and the reserved size attribute, in the format of AWS's extended client libraries,
	// which sqsinbox's worker (worker.Config.Payloads) and those libraries read. The object's key
	// comes from the event id and the payload's SHA-256, so publishing an event again (after a
	// crash between the upload and the publish, or a lost lease) writes the same object, not a
	// second one. The relay never deletes objects; a lifecycle rule expires them. Its threshold
	// must not exceed the smallest limit among the destinations (256 KiB by default, which is
	// SNS's). nil means none: a message over its destination's limit fails, and is parked in
	// the end. Accepting such messages is Config.MaxOffloadSize.
	Payloads *s3payload.Writer

	// Logger receives the relay's reports. nil means slog.Default().
	Logger *slog.Logger
}

func (c *RelayConfig) validate() error {
	switch {
	case c.SQS == nil && c.SNS == nil:
		return errors.New("outbox: RelayConfig.SQS and RelayConfig.SNS are both nil; the relay needs a client to publish with")
	case c.Senders < 0:
		return fmt.Errorf("outbox: RelayConfig.Senders is %d; it must be positive (0 means %d)", c.Senders, DefaultSenders)
	case c.ClaimSize < 0 || c.ClaimSize > 1000:
		return fmt.Errorf("outbox: RelayConfig.ClaimSize is %d; it must be from 1 to 1000 (0 means %d)", c.ClaimSize, DefaultClaimSize)
	case c.PollInterval < 0:
		return fmt.Errorf("outbox: RelayConfig.PollInterval is %v; it must be positive (0 means %v)", c.PollInterval, DefaultPollInterval)
	case c.PublishTimeout < 0:
		return fmt.Errorf("outbox: RelayConfig.PublishTimeout is %v; it must be positive (0 means %v)", c.PublishTimeout, DefaultPublishTimeout)
	case c.Lease < 2*c.PublishTimeout || c.Lease%time.Millisecond != 0:
		return fmt.Errorf("outbox: RelayConfig.Lease is %v; it must be whole milliseconds and at least twice PublishTimeout (%v)", c.Lease, c.PublishTimeout)
	case c.MaxAttempts < 0:
		return fmt.Errorf("outbox: RelayConfig.MaxAttempts is %d; it must be positive (0 means %d)", c.MaxAttempts, DefaultMaxAttempts)
	case c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("outbox: RelayConfig.BackoffMin (%v) and BackoffMax (%v) must be positive, BackoffMin the smaller", c.BackoffMin, c.BackoffMax)
	case c.MaxBatchBytes < 0 || c.MaxBatchBytes > MaxMessageSizeLimit:
		return fmt.Errorf("outbox: RelayConfig.MaxBatchBytes is %d; it must be from 1 to %d (0 means %d)", c.MaxBatchBytes, MaxMessageSizeLimit, DefaultMaxBatchBytes)
	}
	return sqlident.Validate("outbox: RelayConfig.Schema", c.Schema)
}

// Relay publishes the outbox's committed rows and marks them sent.
type Relay struct {
	pool     *pgxpool.Pool
	cfg      RelayConfig
	kinds    []string
	migrator *migrate.Migrator
	sql      struct{ plan, claim, sent, failed, release string }
	sqsOpt   func(*sqs.Options) // passed on every call (sqsOption)
	snsOpt   func(*sns.Options)

	life      startstop.Base  // started, stopping, stopped; the stop and work contexts
	stopCtx   context.Context // life's: ends when the stop begins
	workCtx   context.Context // life's: ends at a hard stop
	wake      chan struct{}
	jobs      chan *job
	results   chan jobReport
	wg        sync.WaitGroup
	listening atomic.Bool // the LISTEN connection heard its probe and is up
	senders   senders

	published, failures, parked, lost atomic.Int64
	rounds, markRounds                atomic.Int64
	markRoundsHungry                  atomic.Int64 // mark rounds while a claim was coming (tests)
}

// ErrStopping is the cause of the contexts the relay cancels at Stop.
var ErrStopping = errors.New("outbox: relay stopping")

// NewRelay returns a relay that claims rows through pool. It does no I/O: Start does.
func NewRelay(pool *pgxpool.Pool, cfg *RelayConfig) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("outbox: pool is nil")
	}
	if cfg == nil {
		return nil, errors.New("outbox: RelayConfig is nil (RelayConfig.SQS or RelayConfig.SNS is required)")
	}
	c := *cfg
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.ClaimSize = cmp.Or(c.ClaimSize, DefaultClaimSize)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.Lease = cmp.Or(c.Lease, max(DefaultLease, 2*c.PublishTimeout))
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.BackoffMin = cmp.Or(c.BackoffMin, DefaultBackoffMin)
	c.BackoffMax = cmp.Or(c.BackoffMax, max(DefaultBackoffMax, c.BackoffMin))
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, DefaultMaxBatchBytes)
	c.Logger = logdur.Logger(cmp.Or(c.Logger, slog.Default()))
	if err := c.validate(); err != nil {
		return nil, err
	}
	mg, err := newMigrator(pool, c.Schema)
	if err != nil {
		return nil, err
	}
	rl := &Relay{pool: pool, cfg: c, migrator: mg, life: startstop.Base{Cause: ErrStopping, Name: "outbox: relay"}}
	if c.SQS != nil {
		rl.kinds = append(rl.kinds, string(KindSQS))
		rl.sqsOpt = sqsOption(c.SQS)
	}
	if c.SNS != nil {
		rl.kinds = append(rl.kinds, string(KindSNS))
		rl.snsOpt = snsOption(c.SNS)
	}
	t := sqlident.Quote(c.Schema, "outbox_messages")
	// The claim takes rows of one destination: the oldest of the candidates. The candidates are
	// the first unsent rows of standard destinations in id order (past the cursor, $5), read from
	// their range of outbox_messages_unsent_kind_idx, and the heads of the FIFO groups: a FIFO row
	// may go only when no earlier row of its group is unsent, so only a group's first unsent row
	// is a candidate. The heads are found one group at a time, by a skip scan of
	// outbox_messages_group_idx that starts past the group of the last FIFO claim ($6, $7) and
	// wraps around to the first group: every group gets its turn however many there are, and a
	// claim reads one index entry per group it passes, never the rows queued behind a head (read
	// in id order, a FIFO backlog would make each claim pass over every unsent row of the groups:
	// a second a claim with 100,000 rows in ten groups). The conditions on the row's own
	// columns are in the locking query, so that PostgreSQL checks them again on a row another
	// relay claimed and committed meanwhile; so is the head's, which the skip scan read before
	// the lock.
	own := `o.sent_at IS NULL AND o.parked_at IS NULL AND o.available_at <= now()
		AND (o.claimed_until IS NULL OR o.claimed_until < now()) AND o.kind = ANY($1)`
	groupHead := func(from, to string) string {
		return `(SELECT o.destination, o.group_id, o.id FROM ` + t + ` o WHERE o.sent_at IS NULL AND o.fifo
			AND (o.destination, o.group_id) > (` + from + `)` + to + ` ORDER BY o.destination, o.group_id, o.id LIMIT 1)`
	}
	rl.sql.claim = `WITH RECURSIVE
		std AS (SELECT o.id, o.destination, o.fifo FROM ` + t + ` o WHERE o.fifo = false AND ` + own + ` AND o.id > $5 ORDER BY o.fifo, o.id LIMIT $2),
		past(destination, group_id, id) AS (` + groupHead("$6::text, $7::text", "") + `
			UNION ALL SELECT n.* FROM past g, LATERAL ` + groupHead("g.destination, g.group_id", "") + ` n),
		upto(destination, group_id, id) AS (` + groupHead("'', ''", " AND (o.destination, o.group_id) <= ($6::text, $7::text)") + `
			UNION ALL SELECT n.* FROM upto g, LATERAL ` + groupHead("g.destination, g.group_id", " AND (o.destination, o.group_id) <= ($6::text, $7::text)") + ` n),
		heads AS (SELECT id FROM past UNION ALL SELECT id FROM upto),
		fifo AS (SELECT r.id, r.destination, r.fifo FROM heads h, LATERAL (SELECT o.id, o.destination, o.fifo FROM ` + t + ` o WHERE o.id = h.id AND ` + own + ` OFFSET 0) r LIMIT $2),
		cand AS (SELECT id, destination, fifo FROM std UNION ALL SELECT id, destination, fifo FROM fifo),
		first AS (SELECT destination, fifo FROM cand ORDER BY id LIMIT 1),
		pick AS (SELECT o.id FROM ` + t + ` o WHERE o.fifo = (SELECT fifo FROM first)
			AND o.id = ANY(ARRAY(SELECT id FROM cand WHERE destination = (SELECT destination FROM first)))
			AND ` + own + ` AND (NOT o.fifo OR NOT EXISTS (SELECT 1 FROM ` + t + ` p WHERE p.destination = o.destination
				AND p.group_id = o.group_id AND p.fifo AND p.sent_at IS NULL AND p.id < o.id))
			ORDER BY o.id LIMIT $2 FOR UPDATE SKIP LOCKED),
		took AS (UPDATE ` + t + ` o SET claimed_until = now() + make_interval(secs => $3), lease_token = $4
			WHERE o.id = ANY(ARRAY(SELECT id FROM pick))
			RETURNING o.id, o.event_id, o.kind, o.destination, o.fifo, o.body, o.attributes,
				coalesce(o.group_id, '') AS group_id, coalesce(o.dedup_id, '') AS dedup_id, o.delay_seconds)
		SELECT * FROM took ORDER BY destination, group_id` // the last FIFO row's group is where the next skip scan starts
	// The marks take each row with the token of its claim: a row whose lease passed to another
	// claim is left alone.
	rl.sql.sent = `UPDATE ` + t + ` o SET sent_at = now(), claimed_until = NULL, lease_token = NULL, last_error = NULL
		FROM unnest($1::bigint[], $2::text[]) AS m(id, token) WHERE o.id = m.id AND o.lease_token = m.token`
	rl.sql.failed = `WITH u AS (UPDATE ` + t + ` o SET attempts = o.attempts + 1, last_error = f.err, claimed_until = NULL, lease_token = NULL,
			available_at = now() + make_interval(secs => least($4::float8, $5::float8 * power(2, o.attempts))),
			parked_at = CASE WHEN o.attempts + 1 >= $6 THEN now() END
		FROM unnest($1::bigint[], $2::text[], $3::text[]) AS f(id, err, token)
		WHERE o.id = f.id AND o.lease_token = f.token RETURNING o.parked_at)
		SELECT count(*) FILTER (WHERE parked_at IS NOT NULL) FROM u`
	rl.sql.release = `UPDATE ` + t + ` o SET claimed_until = NULL, lease_token = NULL
		FROM unnest($1::bigint[], $2::text[]) AS m(id, token) WHERE o.id = m.id AND o.lease_token = m.token`
	// Every statement of a round finds its rows through an index on a short list of ids or from
	// the front of the unsent index. With statistics that are missing or stale (a table just
	// created or truncated, a backlog that grew since the last ANALYZE), the planner would
	// rather read every unsent row (bitmap scans and sorts, hash joins over the whole table) at
	// each claim: a cost that grows with the backlog, when the backlog is what the relay must
	// work off.
	//
	// A round's commit does not wait for its WAL to reach the disk (synchronous_commit off): the
	// relay writes nothing that a crash of PostgreSQL may not undo. A lost claim or release frees
	// rows that are then claimed again; a lost "sent" publishes its rows again, with the same
	// event ids, as a relay that dies before marking does; a lost "failed" costs an attempt less.
	// The events themselves are committed by the producers' own transactions. The settings last
	// until the end of the round's transaction.
	rl.sql.plan = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
		set_config('synchronous_commit', 'off', true)`
	return rl, nil
}

// Start checks the schema, starts listening for notifications and starts the senders. It
// returns once the relay runs; ctx bounds the start only.
func (rl *Relay) Start(ctx context.Context) error {
	if err := rl.life.BeginStart(); err != nil {
		return err
	}
	if err := pooler.Check(ctx, rl.pool, "outbox relay"); err != nil {
		rl.life.EndStart(ctx, false)
		return err
	}
	if err := rl.migrator.CheckCurrent(ctx); err != nil {
		rl.life.EndStart(ctx, false)
		return fmt.Errorf("outbox: %w", err)
	}
	conn, err := rl.listen(ctx)
	if err != nil {
		rl.life.EndStart(ctx, false)
		return err
	}
	rl.life.EndStart(ctx, true)
	rl.stopCtx, rl.workCtx = rl.life.StopContext(), rl.life.WorkContext()
	rl.wake = make(chan struct{}, 1)
	rl.senders.init(rl.cfg.Senders)
	rl.jobs = make(chan *job, 2*rl.senders.max+rl.cfg.ClaimSize)
	rl.results = make(chan jobReport, rl.senders.max)
	rl.wg.Add(3 + rl.senders.max)
	go rl.listener(conn)
	go rl.feeder()
	go rl.sizeSenders()
	for i := range rl.senders.max {
		go rl.publisher(i)
	}
	go func() { rl.wg.Wait(); rl.life.Finished() }()
	return nil
}

// Stop stops claiming, lets the batches in flight finish and be marked, releases the claimed
// rows that no sender had begun (another relay may take them at once), and returns when every
// goroutine of the relay has ended. If ctx ends first, the publishes in flight are cancelled
// (their rows are released, to be published again) and Stop returns context.Cause(ctx) once
// the goroutines have ended.
func (rl *Relay) Stop(ctx context.Context) error { return rl.stop(ctx, false) }

// StopAndCancel is [Relay.Stop] that cancels the publishes in flight at once, with
// [ErrStopping]. The rows of a cancelled publish are released with no attempt counted, and so
// are the claimed rows that no sender had begun, so that another relay may take them at once;
// the rows whose publish had already succeeded are marked sent. A cancelled publish may still
// have reached SQS or SNS: such a row is published again, with the same event id, which is
// what the consuming inbox absorbs. The marks and releases are written after the cancel, each
// round bounded by RelayConfig.PublishTimeout; if ctx ends first, StopAndCancel returns
// context.Cause(ctx) once the goroutines have ended.
func (rl *Relay) StopAndCancel(ctx context.Context) error { return rl.stop(ctx, true) }

func (rl *Relay) stop(ctx context.Context, cancelNow bool) error {
	if _, err := rl.life.BeginStop(); err != nil {
		return err
	}
	if cancelNow {
		rl.life.CancelWork()
	}
	select {
	case <-rl.life.Done():
		rl.life.CancelWork()
		return nil
	case <-ctx.Done():
		rl.life.CancelWork()
		<-rl.life.Done()
		return context.Cause(ctx)
	}
}

// RelayStats counts what a relay did since Start.
type RelayStats struct {
	// Published is the number of messages published and marked sent.
	Published int64
	// Failures is the number of failed publishes of a message (each retried later or parked).
	Failures int64
	// Parked is the number of messages this relay parked.
	Parked int64
	// LostLeases is the number of published messages whose lease had passed to another relay
	// before they were marked: such a message may be published twice, with the same event id.
	LostLeases int64
	// Senders is the number of batches the relay may publish at once now (RelayConfig.Senders).
	Senders int
	// Rounds is the number of round trips to PostgreSQL the relay made to claim rows or mark
	// them, and MarkRounds those of them that carried marks and no claim.
	Rounds, MarkRounds int64
	// Listening reports whether the relay's LISTEN connection is up and heard its probe
	// notification. It is false while that connection is down, and for good when it heard
	// nothing (behind a transaction pooler): the relay then polls every DeafPollInterval.
	Listening bool
}

// Stats returns the relay's counters.
func (rl *Relay) Stats() RelayStats {
	return RelayStats{Published: rl.published.Load(), Failures: rl.failures.Load(), Parked: rl.parked.Load(), LostLeases: rl.lost.Load(),
		Senders: int(rl.senders.active.Load()), Rounds: rl.rounds.Load(), MarkRounds: rl.markRounds.Load(),
		Listening: rl.listening.Load()}
}

// listen opens the relay's own connection (not one of the pool's: it stays in LISTEN for good).
func (rl *Relay) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, rl.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("outbox: listen: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("outbox: listen: %w", err)
	}
	return conn, nil
}

// probe sends a notification of its own on the relay's channel through the pool (another
// session) and reports whether conn hears it within listenProbeTimeout. Behind a transaction
// pooler it does not: the LISTEN ran on a server connection the client gave back. The schema's
// own notifications heard meanwhile wake the relay.
func (rl *Relay) probe(ctx context.Context, conn *pgx.Conn) (heard bool, err error) {
	token := "probe:" + newToken()
	if _, err := rl.pool.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, token); err != nil {
		return false, fmt.Errorf("outbox: listen: probe: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(pctx)
		switch {
		case err != nil && ctx.Err() == nil && pctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		case n.Payload == token:
			return true, nil
		case n.Payload == rl.cfg.Schema:
			rl.wakeOne()
		}
	}
}

// listener wakes the relay on its schema's notifications, reconnecting when the connection
// breaks. When the connection hears no notifications at all (its probe), the listener ends and
// the relay polls every DeafPollInterval instead, which it logs once.
func (rl *Relay) listener(conn *pgx.Conn) {
	defer rl.wg.Done()
	ctx := rl.stopCtx
	for {
		heard, err := rl.probe(ctx, conn)
		if err == nil && !heard {
			_ = conn.Close(context.WithoutCancel(ctx))
			rl.cfg.Logger.WarnContext(ctx, "outbox: LISTEN hears no notifications on this connection "+
				"(a transaction pooler, such as PgBouncer in transaction mode, between the relay and PostgreSQL?); "+
				"polling for new rows instead", "schema", rl.cfg.Schema, "every", rl.pollInterval())
			rl.wakeOne()
			return
		}
		for err == nil {
			rl.listening.Store(true)
			var n *pgconn.Notification
			if n, err = conn.WaitForNotification(ctx); err == nil && n.Payload == rl.cfg.Schema {
				rl.wakeOne()
			}
		}
		rl.listening.Store(false)
		rl.wakeOne() // the feeder polls at the shorter interval meanwhile
		_ = conn.Close(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return
		}
		rl.cfg.Logger.WarnContext(ctx, "outbox: the LISTEN connection broke; polling until it is back", "schema", rl.cfg.Schema)
		for conn = nil; conn == nil; {
			t := time.NewTimer(rl.cfg.PollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			c, err := rl.listen(ctx)
			if err == nil {
				conn = c
			}
		}
		rl.wakeOne() // notifications may have been missed meanwhile
	}
}

// pollInterval is how often the idle relay looks for rows: PollInterval while its LISTEN
// connection is up and heard its probe, else DeafPollInterval if that is shorter (at start
// until the probe is heard, while the connection is down, and for good when LISTEN hears
// nothing).
func (rl *Relay) pollInterval() time.Duration {
	if !rl.listening.Load() {
		return min(rl.cfg.PollInterval, DeafPollInterval)
	}
	return rl.cfg.PollInterval
}

func (rl *Relay) wakeOne() {
	select {
	case rl.wake <- struct{}{}:
	default:
	}
}

func sortByID(rows []*row) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].id < rows[j-1].id; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
