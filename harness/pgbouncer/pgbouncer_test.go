package pgbouncer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

var db *pgtest.Server

func TestMain(m *testing.M) {
	pgtest.Main(m, "pgbouncer", &db, func() error {
		return goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	})
}

func start(t *testing.T, cfg *pgbouncer.Config) *pgbouncer.Bouncer {
	t.Helper()
	b, err := pgbouncer.Start(t.Context(), db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestTransactionMode checks, on PostgreSQL and PgBouncer, that the pooler runs in transaction
// mode: with other clients' statements on it, one client's successive statements run on more
// than one server connection, while a transaction's statements stay on one.
func TestTransactionMode(t *testing.T) {
	b := start(t, nil)
	ctx := t.Context()
	traffic, err := b.StartTraffic(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := traffic.Stop(); err != nil {
			t.Error(err)
		}
	}()
	conn, err := pgx.Connect(ctx, b.URL+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()

	pids := map[int32]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(pids) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("every statement ran on server connection(s) %v: the pooler is not in transaction mode", pids)
		}
		var pid int32
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids[pid] = true
	}

	for range 20 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var a, b int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&a); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&b); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("one transaction ran on server connections %d and %d", a, b)
		}
	}
	if traffic.Statements() == 0 {
		t.Error("the traffic ran no statement")
	}
}

// TestPools checks, on PostgreSQL and PgBouncer, that SHOW POOLS counts the server connections
// and that the pool size is kept.
func TestPools(t *testing.T) {
	b := start(t, &pgbouncer.Config{DefaultPoolSize: 2})
	ctx := t.Context()
	traffic, err := b.StartTraffic(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for traffic.Statements() < 100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	n, err := b.ServerConns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := traffic.Stop(); err != nil {
		t.Fatal(err)
	}
	if n < 1 || n > 2 {
		t.Fatalf("%d server connections for 6 clients with default_pool_size 2, want 1 or 2", n)
	}
}

// TestMissingBinary checks, without starting anything, that a missing pgbouncer is an error that
// names the package to install, never a skip.
func TestMissingBinary(t *testing.T) {
	_, err := pgbouncer.Start(t.Context(), db, &pgbouncer.Config{Binary: "/nonexistent/pgbouncer"})
	if !errors.Is(err, pgbouncer.ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install pgbouncer") {
		t.Fatalf("err = %v, want ErrNotInstalled naming apt-get install pgbouncer", err)
	}
	if _, err := pgbouncer.Start(t.Context(), db, &pgbouncer.Config{PoolMode: "sessions"}); err == nil ||
		!strings.Contains(err.Error(), "Config.PoolMode") {
		t.Fatalf("err = %v, want one naming Config.PoolMode", err)
	}
}

// TestClose checks, on PostgreSQL and PgBouncer, that Close stops the pooler.
func TestClose(t *testing.T) {
	b := start(t, nil)
	if !b.Alive() {
		t.Fatal("not alive after Start")
	}
	b.Close()
	if b.Alive() {
		t.Fatal("alive after Close")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, b.URL); err == nil {
		_ = conn.Close(ctx)
		t.Fatal("a connection through the pooler succeeded after Close")
	}
}
