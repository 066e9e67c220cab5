package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/outbox"
)

// Every test here uses a real PostgreSQL (pgtest); the relay's tests also a real SQS and SNS
// server (sqstest). The only fake is a client wrapper that fails chosen entries.
var (
	db  *pgtest.Server
	srv *sqstest.Server
)

func TestMain(m *testing.M) { exampletest.MainWith(m, "outbox", &db, &srv) }

type bundle struct {
	pool   *pgxpool.Pool
	ob     *outbox.Outbox
	schema string
}

// tx begins a transaction that is rolled back when t ends.
func (b *bundle) tx(t testing.TB) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// setup gives the test a pool and an outbox in a freshly migrated schema of its own.
func setup(t testing.TB, cfg *outbox.Config) *bundle {
	t.Helper()
	ctx := t.Context()
	pool := newPool(t)
	schema := "t_" + randHex(6)
	if _, err := outbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var c outbox.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	ob, err := outbox.New(pool, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return &bundle{pool: pool, ob: ob, schema: schema}
}

func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
func (b *bundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.WithoutCancel(t.Context()), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
