package inbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// Every test in this package runs against a real PostgreSQL: a throwaway cluster started from
// the local binaries, or the server named by TEST_DATABASE_URL. Nothing is mocked.
var db *pgtest.Server

func TestMain(m *testing.M) {
	ignore := goleak.IgnoreCurrent()
	pgtest.Main(m, "inbox", &db, func() error {
		if os.Getenv("SQSINBOX_SKIP_GOLEAK") != "" {
			return nil
		}
		return goleak.Find(ignore)
	})
}

type bundle struct {
	pool   *pgxpool.Pool
	ib     *inbox.Inbox
	schema string
}

// setup gives the test a pool and an inbox in a freshly migrated schema of its own, with a
// business table "effects" beside it.
func setup(t *testing.T, cfg *inbox.Config) *bundle {
	t.Helper()
	ctx := t.Context()
	pool := newPool(t, 0)
	schema := "t_" + randHex(6)
	if _, err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.effects (id bigserial PRIMARY KEY, event_id text NOT NULL, handler text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var c inbox.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	ib, err := inbox.New(pool, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ib.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return &bundle{pool: pool, ib: ib, schema: schema}
}

func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.WithoutCancel(t.Context()), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (b *bundle) effects(t *testing.T, handler, key string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM `+b.schema+`.effects WHERE handler = $1 AND event_id = $2`, handler, key)
}

func (b *bundle) claims(t *testing.T, handler, key string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages WHERE handler = $1 AND event_id = $2`, handler, key)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
