package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/migrate"
)

// Defaults for Config.
const (
	// DefaultSchema is the schema that holds the outbox's table: the inbox's schema, so that one
	// `sqsinbox migrate` target holds both (each has its own version table).
	DefaultSchema = "sqsinbox"
	// DefaultMaxMessageSize is the largest message Add accepts, body and attributes: 256 KiB, the
	// limit of SQS queues made before 2025, of older emulators and of SNS.
	DefaultMaxMessageSize = 256 * 1024
	// MaxMessageSizeLimit is the highest Config.MaxMessageSize: 1 MiB, SQS's limit now.
	MaxMessageSizeLimit = 1024 * 1024
	// DefaultRetention is how long sent rows are kept before the purge deletes them. They are
	// not needed for correctness once sent; a week leaves time to look at what was published.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultPurgeInterval is the pause between purge runs of [Outbox.PurgeLoop].
	DefaultPurgeInterval = time.Hour
	// DefaultPurgeBatchSize is the number of rows one purge statement deletes.
	DefaultPurgeBatchSize = 1000
)

// Config configures an [Outbox]. The zero value is valid and gives the defaults.
type Config struct {
	// Schema is the schema of the outbox's table. It must match ^[a-z_][a-z0-9_]{0,62}$.
	// Empty means DefaultSchema.
	Schema string

	// MaxMessageSize is the largest message, body and attributes together, that Add accepts
	// for an SQS queue (an SNS topic's limit stays MaxSNSMessageSize). It must not exceed the
	// queue's MaximumMessageSize. 0 means DefaultMaxMessageSize (256 KiB); more than
	// MaxMessageSizeLimit (1 MiB) or negative is an error.
	MaxMessageSize int

	// MaxMessageSizes gives the limit of destinations whose MaximumMessageSize is not
	// MaxMessageSize's, by destination (a queue URL or topic ARN, as Message.Destination writes
	// it): a queue raised to 1 MiB, or an SNS topic whose MaximumMessageSize attribute is raised
	// above its 256 KiB default (up to 1 MiB; such a topic serves only SQS, Lambda and Firehose
	// subscriptions, at most 100). Each must be from 1 to MaxMessageSizeLimit. A topic not listed
	// keeps MaxSNSMessageSize.
	MaxMessageSizes map[string]int

	// Retention is how long a sent row is kept before [Outbox.Purge] deletes it. Unsent and
	// parked rows are never purged. 0 means DefaultRetention (7 days); negative is an error.
	Retention time.Duration

	// PurgeInterval is the pause between purge runs in [Outbox.PurgeLoop]. 0 means
	// DefaultPurgeInterval; negative is an error.
	PurgeInterval time.Duration

	// PurgeBatchSize is the number of rows deleted per purge statement. 0 means
	// DefaultPurgeBatchSize; negative is an error.
	PurgeBatchSize int

	// Logger receives the purge loop's reports. nil means slog.Default().
	Logger *slog.Logger

	// Propagate, when set, returns the trace context of Add's ctx as text headers (such as
	// traceparent and tracestate; workerotel.OutboxPropagate makes one), which Add stores as
	// String attributes of the message, so the consumer's span continues the producer's trace.
	// A header is added only when the message does not set an attribute of that name and there
	// is room under SQS's 10 attributes (the event_id included), and only if the message then
	// still fits its size limit: trace context never makes Add fail. nil means none.
	Propagate func(ctx context.Context) map[string]string

	// MaxOffloadSize is the largest body, in bytes, that Add accepts over its destination's size
	// limit: such a message's body goes to S3 when the relay publishes it (RelayConfig.Payloads,
	// whose threshold must not exceed the smallest destination limit), and the message carries a
	// pointer to it. The rest of the message (its attributes and a pointer of about 1 KiB) must
	// still fit the limit. 0 means none: Add refuses a message over its limit. At most
	// MaxOffloadSizeLimit.
	MaxOffloadSize int
}

// MaxOffloadSizeLimit is the highest Config.MaxOffloadSize: 512 MiB (a row holds the body until
// the relay publishes it; PostgreSQL's limit for one value is 1 GiB).
const MaxOffloadSizeLimit = 512 << 20

func (c *Config) fill() error {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.MaxMessageSize = cmp.Or(c.MaxMessageSize, DefaultMaxMessageSize)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, DefaultPurgeInterval)
	c.PurgeBatchSize = cmp.Or(c.PurgeBatchSize, DefaultPurgeBatchSize)
	c.Logger = logdur.Logger(cmp.Or(c.Logger, slog.Default()))
	return c.validate()
}

func (c *Config) validate() error {
	if err := sqlident.Validate("outbox: Config.Schema", c.Schema); err != nil {
		return err
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > MaxMessageSizeLimit {
		return fmt.Errorf("outbox: Config.MaxMessageSize is %d; it must be from 1 to %d (0 means %d)", c.MaxMessageSize, MaxMessageSizeLimit, DefaultMaxMessageSize)
	}
	for dest, n := range c.MaxMessageSizes {
		if _, err := ParseDestination(dest); err != nil {
			return fmt.Errorf("outbox: Config.MaxMessageSizes: %w", err)
		}
		if n < 1 || n > MaxMessageSizeLimit {
			return fmt.Errorf("outbox: Config.MaxMessageSizes[%q] is %d; it must be from 1 to %d", dest, n, MaxMessageSizeLimit)
		}
	}
	if c.MaxOffloadSize < 0 || c.MaxOffloadSize > MaxOffloadSizeLimit {
		return fmt.Errorf("outbox: Config.MaxOffloadSize is %d; it must be from 0 (none) to %d", c.MaxOffloadSize, MaxOffloadSizeLimit)
	}
	if c.Retention < 0 {
		return fmt.Errorf("outbox: Config.Retention is %v; it must be positive (0 means %v)", c.Retention, DefaultRetention)
	}
	if c.PurgeInterval < 0 {
		return fmt.Errorf("outbox: Config.PurgeInterval is %v; it must be positive (0 means %v)", c.PurgeInterval, DefaultPurgeInterval)
	}
	if c.PurgeBatchSize < 0 {
		return fmt.Errorf("outbox: Config.PurgeBatchSize is %d; it must be positive (0 means %d)", c.PurgeBatchSize, DefaultPurgeBatchSize)
	}
	return nil
}

// Outbox writes events into the outbox table, in the caller's transactions.
type Outbox struct {
	pool     *pgxpool.Pool
	cfg      Config
	insert   string
	stats    string
	retry    string
	migrator *migrate.Migrator
}

// New returns an outbox that uses pool (for Check, Stats, Purge; Add uses the caller's
// transaction). It does no I/O: call [Outbox.Check] at start, after [Migrate].
func New(pool *pgxpool.Pool, cfg *Config) (*Outbox, error) {
	if pool == nil {
		return nil, errors.New("outbox: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.fill(); err != nil {
		return nil, err
	}
	mg, err := newMigrator(pool, c.Schema)
	if err != nil {
		return nil, err
	}
	ob := &Outbox{pool: pool, cfg: c, migrator: mg}
	ob.prepare()
	return ob, nil
}

func (ob *Outbox) prepare() {
	t := sqlident.Quote(ob.cfg.Schema, "outbox_messages")
	ob.insert = "INSERT INTO " + t + " (event_id, kind, destination, fifo, body, attributes, group_id, dedup_id, delay_seconds)" +
		" VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9) ON CONFLICT (destination, event_id) DO NOTHING"
	ob.stats = "SELECT count(*) FILTER (WHERE parked_at IS NULL), count(*) FILTER (WHERE parked_at IS NOT NULL)," +
		" coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE parked_at IS NULL)), 0)::float8" +
		" FROM " + t + " WHERE sent_at IS NULL"
	ob.retry = "UPDATE " + t + " SET parked_at = NULL, attempts = 0, available_at = now()" +
		" WHERE parked_at IS NOT NULL AND sent_at IS NULL AND (cardinality($1::bigint[]) = 0 OR id = ANY($1))"
}

// Schema returns the schema of the outbox's table.
func (ob *Outbox) Schema() string { return ob.cfg.Schema }

// Check verifies, at start, that the pool's query mode works where the pool connects (behind a
// transaction pooler it refuses pgx's default, naming the fix; see inbox.ErrPoolerQueryMode)
// and that the schema is migrated.
func (ob *Outbox) Check(ctx context.Context) error {
	if err := pooler.Check(ctx, ob.pool, "outbox"); err != nil {
		return err
	}
	if err := ob.migrator.CheckCurrent(ctx); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// ErrDuplicateEvent is returned by Add for an event id that the outbox already holds for the
// same destination. Nothing is inserted and the transaction stays usable: a producer that
// retries its operation with the same event id has already recorded the event.
var ErrDuplicateEvent = errors.New("outbox: the event is already in the outbox for this destination")

// Add inserts msg in tx, the caller's transaction, and returns its event id (msg.EventID, or
// the one generated). The event is published after tx commits, and never if it rolls back. A
// message that SQS or SNS would refuse is refused here with a *[MessageError] that names the
// field, before anything is written.
func (ob *Outbox) Add(ctx context.Context, tx pgx.Tx, msg Message) (string, error) {
	d, err := msg.validate(ob.limit(msg.Destination))
	if err != nil {
		return "", err
	}
	if ob.cfg.Propagate != nil {
		msg = ob.withTraceContext(ctx, msg)
	}
	attrs := make(map[string]storedAttribute, len(msg.Attributes))
	for k, a := range msg.Attributes {
		attrs[k] = storedAttribute(a)
	}
	aj, err := json.Marshal(attrs)
	if err != nil {
		return "", fmt.Errorf("outbox: encode attributes: %w", err)
	}
	// The attributes go as text cast to jsonb: in the exec and simple_protocol query modes pgx
	// sends a []byte as bytea, which jsonb refuses.
	tag, err := tx.Exec(ctx, ob.insert, msg.EventID, string(d.Kind), msg.Destination, d.FIFO, msg.Body, string(aj),
		nullable(msg.GroupID), nullable(msg.DeduplicationID), int(msg.Delay/time.Second))
	if err != nil {
		return "", fmt.Errorf("outbox: add event %q: %w", msg.EventID, err)
	}
	if tag.RowsAffected() == 0 {
		return msg.EventID, fmt.Errorf("%w (event %q, %s)", ErrDuplicateEvent, msg.EventID, msg.Destination)
	}
	return msg.EventID, nil
}

// withTraceContext returns msg with the trace headers of ctx added as String attributes, where
// there is room and the message still fits (see Config.Propagate); else msg as it was.
func (ob *Outbox) withTraceContext(ctx context.Context, msg Message) Message {
	headers := ob.cfg.Propagate(ctx)
	if len(headers) == 0 {
		return msg
	}
	out := msg
	out.Attributes = make(map[string]Attribute, len(msg.Attributes)+len(headers))
	maps.Copy(out.Attributes, msg.Attributes)
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		if _, set := out.Attributes[k]; set || len(out.Attributes) >= MaxAttributes-1 {
			continue
		}
		out.Attributes[k] = StringAttribute(headers[k])
	}
	if _, err := out.validate(ob.limit(msg.Destination)); err != nil {
		return msg // too large with them, or a header SQS would refuse: send it without
	}
	return out
}

// limit is the size limit of a message to dest: its entry in MaxMessageSizes, else
// MaxMessageSize (for a topic, at most MaxSNSMessageSize).
func (ob *Outbox) limit(dest string) sizeLimit {
	if n, ok := ob.cfg.MaxMessageSizes[dest]; ok {
		return sizeLimit{n: n, set: true, offload: ob.cfg.MaxOffloadSize}
	}
	return sizeLimit{n: ob.cfg.MaxMessageSize, offload: ob.cfg.MaxOffloadSize}
}

// Add is [Outbox.Add] with the default Config: the table of DefaultSchema, and messages up to
// DefaultMaxMessageSize.
func Add(ctx context.Context, tx pgx.Tx, msg Message) (string, error) {
	return defaultOutbox.Add(ctx, tx, msg)
}

var defaultOutbox = func() *Outbox {
	ob := &Outbox{}
	_ = ob.cfg.fill()
	ob.prepare()
	return ob
}()

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// storedAttribute is an attribute as the table's jsonb holds it.
type storedAttribute struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"` // base64 in JSON
}

// Stats is the state of the outbox's unsent rows.
type Stats struct {
	// Backlog is the number of rows waiting to be published (parked ones excluded).
	Backlog int64
	// Parked is the number of rows the relay gave up on, waiting for [Outbox.RetryParked].
	Parked int64
	// OldestUnsent is the age of the oldest row of the backlog, by the database's clock; 0 when
	// the backlog is empty.
	OldestUnsent time.Duration
}

// Stats reports the backlog, its oldest age and the parked rows.
func (ob *Outbox) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var age float64
	if err := ob.pool.QueryRow(ctx, ob.stats).Scan(&s.Backlog, &s.Parked, &age); err != nil {
		return s, fmt.Errorf("outbox: stats: %w", err)
	}
	s.OldestUnsent = time.Duration(age * float64(time.Second))
	return s, nil
}

// RetryParked puts parked rows back in the backlog, with their attempts reset: the rows whose
// ids are given, or every parked row when none is. It returns the number of rows re-queued.
func (ob *Outbox) RetryParked(ctx context.Context, ids ...int64) (int64, error) {
	if ids == nil {
		ids = []int64{}
	}
	tag, err := ob.pool.Exec(ctx, ob.retry, ids)
	if err != nil {
		return 0, fmt.Errorf("outbox: retry parked: %w", err)
	}
	return tag.RowsAffected(), nil
}
