package inboxtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
	"github.com/sqsinbox/sqsinbox/migrate"
)

// EnvURL names the environment variable that points the fixture at a database.
const EnvURL = "TEST_DATABASE_URL"

// errNoDatabase is New's failure when no database is named. It offers the databases nearest to
// hand first: `make dev`'s, then one of the developer's own, and Docker last.
var errNoDatabase = errors.New(EnvURL + " is not set: set it to a PostgreSQL database in which the tests may create " +
	"and drop schemas, or pass WithDatabaseURL. With `make dev` running (in the sqsinbox repository), use the " +
	"DATABASE_URL it prints: " + EnvURL + "=$DATABASE_URL. Any local PostgreSQL works too: " + EnvURL +
	"=postgres://user:password@127.0.0.1:5432/database. Or, with Docker, " +
	"`docker compose -f localstack/docker-compose.yml up -d --wait` in the sqsinbox repository starts one: " +
	EnvURL + "=postgres://sqsinbox:sqsinbox@127.0.0.1:5433/sqsinbox?sslmode=disable")

// SchemaPrefix begins the name of every schema the fixture creates. A test binary that was
// killed leaves its schemas behind in a database named by TEST_DATABASE_URL; they can be
// dropped by this prefix.
const SchemaPrefix = "inboxtest_"

// cleanupTimeout bounds the DROP SCHEMA at the end of a test.
const cleanupTimeout = time.Minute

// DB is one test's database: a schema of its own, with the inbox's tables and the test's.
type DB struct {
	// Pool is connected to the database with search_path set to Schema (then public).
	Pool *pgxpool.Pool
	// Inbox is an inbox whose tables are in Schema.
	Inbox *inbox.Inbox
	// Schema is the test's schema: generated, a valid identifier that needs no quoting.
	Schema string
}

// Option configures [New].
type Option func(*options) error

type options struct {
	url   string // "" means TEST_DATABASE_URL
	steps []step // the test's own schema changes, in order
	inbox inbox.Config
}

// step is one of the test's schema changes; n is its place among them, from 1 (a set of
// migrations names its version table with it).
type step struct {
	what string
	run  func(ctx context.Context, db *DB, n int) error
}

// WithDatabaseURL has the fixture use the database at url instead of TEST_DATABASE_URL's.
func WithDatabaseURL(url string) Option {
	return func(o *options) error {
		if url == "" {
			return errors.New("WithDatabaseURL: the URL is empty (leave the option out to use " + EnvURL + ")")
		}
		if _, err := pgxpool.ParseConfig(url); err != nil {
			return fmt.Errorf("WithDatabaseURL: %w", err)
		}
		o.url = url
		return nil
	}
}

// WithMigrations applies the numbered migrations in dir of fsys (NNNN_name.up.sql and
// NNNN_name.down.sql, as the migrate package reads them) to the test's schema, after the inbox's.
// {{schema}} in a file is the test's schema. Their versions are recorded in a table of the schema
// of their own, so a test can apply several sets.
func WithMigrations(fsys fs.FS, dir string) Option {
	return func(o *options) error {
		if fsys == nil {
			return errors.New("WithMigrations: fsys is nil")
		}
		// Read them now, so that a bad file fails before any database work.
		if _, err := migrate.New(nil, fsys, dir, "inboxtest_check", "inboxtest_check"); err != nil {
			return fmt.Errorf("WithMigrations(%s): %w", dir, err)
		}
		o.steps = append(o.steps, step{what: "migrations in " + dir, run: func(ctx context.Context, db *DB, n int) error {
			_, err := migrate.Up(ctx, db.Pool, fsys, dir, db.Schema, fmt.Sprintf("inboxtest_migrations_%d", n))
			return err
		}})
		return nil
	}
}

// WithSQL runs sql (each string may hold several statements) in one transaction in the test's
// schema, after the inbox's migrations: CREATE TABLE pick_tasks (...) creates it there.
func WithSQL(sql ...string) Option {
	return func(o *options) error {
		for i, s := range sql {
			if strings.TrimSpace(s) == "" {
				return fmt.Errorf("WithSQL: statement %d is empty", i+1)
			}
		}
		o.steps = append(o.steps, step{what: "SQL", run: func(ctx context.Context, db *DB, _ int) error {
			return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				for _, s := range sql {
					if _, err := tx.Exec(ctx, s); err != nil {
						return fmt.Errorf("%s: %w", firstLine(s), err)
					}
				}
				return nil
			})
		}})
		return nil
	}
}

// WithSetup runs fn in one transaction in the test's schema, after the inbox's migrations: for
// schema changes or rows that need Go.
func WithSetup(fn func(ctx context.Context, tx pgx.Tx) error) Option {
	return func(o *options) error {
		if fn == nil {
			return errors.New("WithSetup: fn is nil")
		}
		o.steps = append(o.steps, step{what: "setup", run: func(ctx context.Context, db *DB, _ int) error {
			return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
		}})
		return nil
	}
}

// WithInboxConfig configures the test's inbox (a copy of cfg is taken). cfg.Schema must be empty:
// the inbox's tables are in the test's schema.
func WithInboxConfig(cfg *inbox.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			return errors.New("WithInboxConfig: cfg is nil")
		}
		if cfg.Schema != "" {
			return fmt.Errorf("WithInboxConfig: Config.Schema is %q; leave it empty: the inbox's tables are in the test's own schema", cfg.Schema)
		}
		o.inbox = *cfg
		return nil
	}
}

// New returns a fresh schema for t with the inbox's migrations and the options' schema changes
// applied, a pool set to it and an inbox on it (see the package doc). The schema is dropped, with
// everything in it, and the pool closed when t ends (after the cleanups t registers later). It
// fails t when an option is invalid, when no database can be had, or when a migration fails.
func New(t testing.TB, opts ...Option) *DB {
	t.Helper()
	var o options
	for _, opt := range opts {
		if opt == nil {
			t.Fatal("inboxtest: an Option is nil")
		}
		if err := opt(&o); err != nil {
			t.Fatalf("inboxtest: %v", err)
		}
	}
	url := cmp.Or(o.url, os.Getenv(EnvURL))
	if url == "" {
		t.Fatalf("inboxtest: %v", errNoDatabase)
	}
	schema := schemaName(t.Name())
	if err := sqlident.Validate("inboxtest: schema", schema); err != nil {
		t.Fatal(err) // schemaName makes valid names; this guards it
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("inboxtest: %s: %v", urlSource(o.url), err)
	}
	// The test's unqualified names (its tables, its queries) resolve in its schema; public stays
	// on the path for extensions installed there.
	cfg.ConnConfig.RuntimeParams["search_path"] = sqlident.Quote(schema) + ", public"
	ctx := t.Context()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("inboxtest: %s: %v", urlSource(o.url), err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+sqlident.Quote(schema)); err != nil {
		pool.Close()
		t.Fatalf("inboxtest: create schema %s in the database of %s: %v", schema, urlSource(o.url), err)
	}
	t.Cleanup(func() {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+sqlident.Quote(schema)+" CASCADE"); err != nil {
			t.Errorf("inboxtest: drop schema %s: %v", schema, err)
		}
	})
	db := &DB{Pool: pool, Schema: schema}
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("inboxtest: the inbox's migrations: %v", err)
	}
	for i, s := range o.steps {
		if err := s.run(ctx, db, i+1); err != nil {
			t.Fatalf("inboxtest: %s: %v", s.what, err)
		}
	}
	ic := o.inbox
	ic.Schema = schema
	if db.Inbox, err = inbox.New(pool, &ic); err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	return db
}

// urlSource says where the database's URL came from, for errors.
func urlSource(url string) string {
	if url != "" {
		return "WithDatabaseURL"
	}
	return EnvURL
}

// maxNameLen is how much of the test's name a schema's name keeps.
const maxNameLen = 63 - len(SchemaPrefix) - 1 - 12

// schemaName returns a fresh schema name for the test named name: SchemaPrefix, the name's letters
// and digits (lower case, other runs as _, cut short), and 12 random hex digits.
func schemaName(name string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			under = false
		} else if !under && b.Len() > 0 {
			b.WriteByte('_')
			under = true
		}
		if b.Len() >= maxNameLen {
			break
		}
	}
	s := strings.TrimSuffix(b.String(), "_")
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return SchemaPrefix + s + "_" + hex.EncodeToString(rnd[:])
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
