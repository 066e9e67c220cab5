package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/logdur"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// Header names.
const (
	// HeaderKey is the request header that carries the key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on every replayed response, and only on those.
	HeaderReplayed = "Idempotent-Replayed"
)

// Defaults for Config.
const (
	// DefaultTTL is how long a stored response is kept and replayed: 24 hours, which is also
	// [MinTTL].
	DefaultTTL = 24 * time.Hour
	// MinTTL is the shortest TTL accepted. Clients are promised at least a day to retry.
	MinTTL = 24 * time.Hour
	// DefaultLease is how long one attempt may hold a key before it is abandoned.
	DefaultLease = 60 * time.Second
	// DefaultWait is how long a retry waits for the attempt in flight to finish (and then
	// replays its response) before it answers 409.
	DefaultWait = 50 * time.Millisecond
	// DefaultRetryAfter is the Retry-After of a 409 answered while the key is in flight.
	DefaultRetryAfter = time.Second
	// DefaultMaxBodyBytes is the largest request body accepted with a key: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxResponseBytes is the largest response body that can be stored: 1 MiB.
	DefaultMaxResponseBytes = 1 << 20
	// DefaultPurgeInterval is the pause between purge runs of [Middleware.PurgeLoop].
	DefaultPurgeInterval = time.Hour
	// DefaultPurgeBatchSize is the number of rows one purge statement deletes.
	DefaultPurgeBatchSize = 1000
)

// DefaultMethods returns the methods covered when Config.Methods is empty: POST and PATCH.
func DefaultMethods() []string { return []string{http.MethodPost, http.MethodPatch} }

// DefaultReplayHeaders returns the response headers stored and replayed when
// Config.ReplayHeaders is empty. They describe the representation, not the session.
func DefaultReplayHeaders() []string {
	return []string{"Content-Type", "Content-Language", "Content-Encoding", "Content-Location",
		"Location", "ETag", "Last-Modified", "Link"}
}

// neverReplayed are headers that carry one session's secrets or state. Config.ReplayHeaders
// may not name them.
var neverReplayed = []string{"Set-Cookie", "Set-Cookie2", "Authorization", "Proxy-Authenticate",
	"Www-Authenticate", HeaderReplayed}

// DefaultStore is the default of Config.Store: it stores every response below 500. A 5xx rolls
// the handler's transaction back, so the retry runs again.
func DefaultStore(status int) bool { return status < 500 }

// Config configures a [Middleware].
type Config struct {
	// Schema is the schema that holds the idempotency_keys table, created by [inbox.Migrate]
	// for the same schema. Empty means inbox.DefaultSchema.
	Schema string

	// Principal returns the authenticated client of a request. Keys are scoped by it: two
	// clients that send the same key never see each other's responses. An error gives 401 (the
	// error is logged, not sent), and so does an empty string: callers without an identity
	// would otherwise share one key space, and one would be replayed another's response
	// ([ErrEmptyPrincipal]). Required: a single-tenant API can return a constant.
	Principal func(*http.Request) (string, error)

	// Methods are the request methods the middleware covers; others pass straight through.
	// Empty means DefaultMethods(): POST and PATCH.
	Methods []string

	// RequireKey, when set, reports whether a covered request must carry a key; a request
	// without one gets 400. nil means no request must, except through
	// [Middleware.RequireKey]. Without a key, a request passes through untouched.
	RequireKey func(*http.Request) bool

	// Route returns the route part of a request's fingerprint. nil means the path and query as
	// sent (r.URL.RequestURI()).
	Route func(*http.Request) string

	// ReplayHeaders are the response headers stored and replayed (case-insensitive). Every
	// other header reaches the first response only. It may not name Set-Cookie,
	// Authorization or the authenticate headers. Empty means DefaultReplayHeaders().
	ReplayHeaders []string

	// Store reports whether a response with the given status is stored. When it returns false
	// the handler's transaction rolls back, its response goes to the client once, and a retry
	// runs the handler again. nil means DefaultStore: everything below 500.
	Store func(status int) bool

	// TTL is how long a stored response is replayed. It is stored with each key (its
	// expires_at, now() + TTL by the database's clock when the response is stored): past it the
	// key is a new request, and the purge deletes it. A key keeps the TTL it was stored with
	// when the TTL is changed later. 0 means DefaultTTL; less than MinTTL is an error.
	TTL time.Duration

	// Lease bounds one attempt: the handler's context ends after it (and the attempt rolls
	// back), and the database ends a session left idle in the attempt's transaction, or a
	// statement running in it, for longer. So a key held by a hung or crashed process becomes
	// claimable after at most about the lease. 0 means DefaultLease; negative is an error.
	Lease time.Duration

	// Wait is how long a retry waits for the attempt in flight to finish before it answers 409
	// (when that attempt finishes in time, the retry replays its response instead). A waiting
	// retry holds a pool connection, so keep it short. 0 means DefaultWait; negative means do
	// not wait (1 ms, the database's smallest lock_timeout).
	Wait time.Duration

	// RetryAfter is the Retry-After sent with a 409, rounded up to whole seconds. 0 means
	// DefaultRetryAfter; negative is an error.
	RetryAfter time.Duration

	// MaxBodyBytes is the largest request body accepted with a key; a larger one gets 413
	// before anything is stored. 0 means DefaultMaxBodyBytes; negative is an error.
	MaxBodyBytes int64

	// MaxResponseBytes is the largest response body stored. A handler that writes more gets
	// an error from Write, its transaction rolls back and the client gets 500, so nothing
	// half-stored is ever replayed. 0 means DefaultMaxResponseBytes; negative is an error.
	MaxResponseBytes int

	// PurgeInterval is the pause between purge runs of [Middleware.PurgeLoop]. 0 means
	// DefaultPurgeInterval; negative is an error.
	PurgeInterval time.Duration

	// PurgeBatchSize is the number of rows deleted per purge statement. 0 means
	// DefaultPurgeBatchSize; negative is an error.
	PurgeBatchSize int

	// Logger receives failures (never keys). nil means slog.Default().
	Logger *slog.Logger

	// Hooks, when set, observe each request that carries a key or lacks a required one, with
	// its outcome (the idemotel package makes spans of them). nil means none.
	Hooks *Hooks
}

// Middleware is HTTP Idempotency-Key middleware backed by a PostgreSQL table.
type Middleware struct {
	pool    *pgxpool.Pool
	cfg     Config
	methods map[string]bool
	replay  map[string]bool
	// settings are run in the attempt's transaction, pipelined with its BEGIN and claim.
	settings []string
	sql      statements
	retry    string
	waitMs   int64
}

// New returns middleware that stores keys and responses in pool's database. It does no I/O:
// run [inbox.Migrate] first, and [Middleware.Check] at start.
func New(pool *pgxpool.Pool, cfg *Config) (*Middleware, error) {
	if pool == nil {
		return nil, errors.New("idempotency: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = cmp.Or(c.Schema, inbox.DefaultSchema)
	if len(c.Methods) == 0 {
		c.Methods = DefaultMethods()
	}
	if len(c.ReplayHeaders) == 0 {
		c.ReplayHeaders = DefaultReplayHeaders()
	}
	if c.Route == nil {
		c.Route = func(r *http.Request) string { return r.URL.RequestURI() }
	}
	if c.Store == nil {
		c.Store = DefaultStore
	}
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Wait = cmp.Or(c.Wait, DefaultWait)
	c.RetryAfter = cmp.Or(c.RetryAfter, DefaultRetryAfter)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, DefaultPurgeInterval)
	c.PurgeBatchSize = cmp.Or(c.PurgeBatchSize, DefaultPurgeBatchSize)
	c.Logger = logdur.Logger(cmp.Or(c.Logger, slog.Default()))
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{pool: pool, cfg: c, methods: map[string]bool{}, replay: map[string]bool{}}
	for _, meth := range c.Methods {
		m.methods[meth] = true
	}
	for _, h := range c.ReplayHeaders {
		m.replay[http.CanonicalHeaderKey(h)] = true
	}
	m.waitMs = max(c.Wait.Milliseconds(), 1)
	leaseMs := max(c.Lease.Milliseconds(), 1)
	// The settings are integers we format (milliseconds), never user text. SET LOCAL ends with
	// the transaction, so nothing leaks onto the pooled connection.
	// settings[0] must stay lock_timeout: claims and takeovers set it again.
	m.settings = []string{
		fmt.Sprintf("SET LOCAL lock_timeout = %d", m.waitMs),
		fmt.Sprintf("SET LOCAL statement_timeout = %d", leaseMs),
		fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", leaseMs),
	}
	m.sql = newStatements(sqlident.Quote(c.Schema, table))
	m.retry = fmt.Sprint(int64((c.RetryAfter + time.Second - 1) / time.Second))
	return m, nil
}

func (c *Config) validate() error {
	if err := sqlident.Validate("idempotency: Config.Schema", c.Schema); err != nil {
		return err
	}
	if c.Principal == nil {
		return errors.New("idempotency: Config.Principal is nil; it must return the authenticated client " +
			"(keys are scoped by it), or a constant for a single-tenant API")
	}
	for _, meth := range c.Methods {
		if meth == "" || strings.ToUpper(meth) != meth {
			return fmt.Errorf("idempotency: Config.Methods holds %q; methods are upper-case, like POST", meth)
		}
	}
	for _, h := range c.ReplayHeaders {
		if slices.Contains(neverReplayed, http.CanonicalHeaderKey(h)) {
			return fmt.Errorf("idempotency: Config.ReplayHeaders holds %q, which must never be replayed", h)
		}
	}
	switch {
	case c.TTL < MinTTL:
		return fmt.Errorf("idempotency: Config.TTL is %v; keys live at least %v (0 means %v)", c.TTL, MinTTL, DefaultTTL)
	case c.Lease < 0:
		return fmt.Errorf("idempotency: Config.Lease is %v; it must be positive (0 means %v)", c.Lease, DefaultLease)
	case c.Lease >= c.TTL:
		return fmt.Errorf("idempotency: Config.Lease (%v) must be shorter than Config.TTL (%v)", c.Lease, c.TTL)
	case c.Wait >= c.Lease:
		return fmt.Errorf("idempotency: Config.Wait (%v) must be shorter than Config.Lease (%v)", c.Wait, c.Lease)
	case c.RetryAfter < 0:
		return fmt.Errorf("idempotency: Config.RetryAfter is %v; it must be positive (0 means %v)", c.RetryAfter, DefaultRetryAfter)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("idempotency: Config.MaxBodyBytes is %d; it must be positive (0 means %d)", c.MaxBodyBytes, DefaultMaxBodyBytes)
	case c.MaxResponseBytes < 0:
		return fmt.Errorf("idempotency: Config.MaxResponseBytes is %d; it must be positive (0 means %d)", c.MaxResponseBytes, DefaultMaxResponseBytes)
	case c.PurgeInterval < 0:
		return fmt.Errorf("idempotency: Config.PurgeInterval is %v; it must be positive (0 means %v)", c.PurgeInterval, DefaultPurgeInterval)
	case c.PurgeBatchSize < 0:
		return fmt.Errorf("idempotency: Config.PurgeBatchSize is %d; it must be positive (0 means %d)", c.PurgeBatchSize, DefaultPurgeBatchSize)
	}
	return nil
}

// TTL returns how long stored responses are replayed.
func (m *Middleware) TTL() time.Duration { return m.cfg.TTL }

// ErrNotMigrated is wrapped by [Middleware.Check] when the table does not exist, or lacks a
// column a later migration adds.
var ErrNotMigrated = errors.New("idempotency: the idempotency_keys table is missing or not migrated to the latest version")

// Check verifies, at start, that the table exists with every column the middleware uses (that
// [inbox.Migrate] has run for the schema).
func (m *Middleware) Check(ctx context.Context) error {
	var exists, current bool
	err := m.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
	EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'expires_at' AND NOT attisdropped)`,
		sqlident.Quote(m.cfg.Schema, table)).Scan(&exists, &current)
	switch {
	case err != nil:
		return fmt.Errorf("idempotency: check: %w", err)
	case !exists:
		return fmt.Errorf("%w: schema %q has no %s table; run inbox.Migrate (`sqsinbox migrate up`)", ErrNotMigrated, m.cfg.Schema, table)
	case !current:
		return fmt.Errorf("%w: %s.%s has no expires_at column (migration 0003); run inbox.Migrate (`sqsinbox migrate up`)", ErrNotMigrated, m.cfg.Schema, table)
	}
	return nil
}
