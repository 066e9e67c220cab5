package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/internal/core/pooler"
)

// TestCLIBehindPgBouncer (PostgreSQL behind Debian's PgBouncer in transaction mode with other
// clients' statements on it, harness/pgbouncer; the pass's SQS server): the commands that use
// the database succeed through the pooler at their defaults, the URL naming no query mode and
// --timeout left at its default: migrate up and status, purge, stats, events show, and a
// redrive dry run that classifies against the inbox. Before the CLI knew about poolers each
// failed at connecting (PgBouncer refuses statement_timeout as a start-up parameter), and past
// that on pgx's default query mode (42P05/26000).
func TestCLIBehindPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgbouncer.Busy(t, db, nil, 4)
	schema := "cli_pool_" + randSuffix()
	dbArgs := []string{"--database-url", b.URL, "--schema", schema}
	run := func(args ...string) result {
		t.Helper()
		return cli(t, "", append(args, dbArgs...)...)
	}
	if r := run("migrate", "up").mustOK(t); !strings.Contains(r.stdout, "applied") {
		t.Fatalf("migrate up: %s", r.stdout)
	}
	r := run("migrate", "status").mustOK(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "Z") { // applied at a time
			t.Fatalf("migrate status: not applied: %q\n%s", l, r.stdout)
		}
	}
	if len(lines) < 8 {
		t.Fatalf("migrate status:\n%s", r.stdout)
	}
	direct, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	processEvent(t, direct, schema, "warehouse", "evt_pooled")
	for range 3 { // again and again, so that statements land on server connections others used
		if r := run("events", "show", "evt_pooled").mustOK(t); !strings.Contains(r.stdout, "warehouse") {
			t.Fatalf("events show: %s", r.stdout)
		}
		if r := run("stats").mustOK(t); !strings.Contains(r.stdout, "warehouse") {
			t.Fatalf("stats: %s", r.stdout)
		}
		run("purge", "--skip-queue-check").mustOK(t)
	}

	q, directArgs := routedDLQ(t, "cli-pooled")
	directArgs[1] = b.URL // migrated and the event processed directly by routedDLQ
	r = cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name,
		"--handler", "orders-paid", "--dry-run"}, directArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "never applied: 3") {
		t.Fatalf("redrive --dry-run through the pooler:\n%s", r.stdout)
	}
}

// TestConnectBoundsStatementsBehindPgBouncer (PostgreSQL, directly and behind Debian's PgBouncer
// in transaction mode with other clients' statements on it): --timeout bounds each statement on
// both paths. Directly the session's statement_timeout cancels a long statement (57014); through
// the pooler, where no session setting can be made, the statement's deadline ends the wait. The
// pool goes on either way, and the pooler stays up. The pool is in pgx's default query mode
// directly and in the pooler-safe one behind the pooler.
func TestConnectBoundsStatementsBehindPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgbouncer.Busy(t, db, nil, 4)
	const timeout = 2 * time.Second
	for _, path := range []struct {
		name, url string
		mode      pgx.QueryExecMode
	}{{"direct", db.URL, pgx.QueryExecModeCacheStatement}, {"pgbouncer", b.URL, pooler.SafeMode}} {
		t.Run(path.name, func(t *testing.T) {
			d := &dbFlags{url: path.url}
			pool, err := d.connect(t.Context(), timeout)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if got := pool.Config().ConnConfig.DefaultQueryExecMode; got != path.mode {
				t.Fatalf("query mode %v, want %v", got, path.mode)
			}
			_, startParam := pool.Config().ConnConfig.RuntimeParams["statement_timeout"]
			if startParam != (path.name == "direct") {
				t.Fatalf("statement_timeout as a start-up parameter: %v", startParam)
			}
			start := time.Now()
			_, err = pool.Exec(t.Context(), "SELECT pg_sleep(30)")
			took := time.Since(start)
			var pgErr *pgconn.PgError
			switch {
			case path.name == "direct" && (!errors.As(err, &pgErr) || pgErr.Code != "57014"):
				t.Fatalf("a statement longer than --timeout: %v after %v, want SQLSTATE 57014", err, took)
			case path.name == "pgbouncer" && !pgconn.Timeout(err):
				t.Fatalf("a statement longer than --timeout: %v after %v, want a timeout", err, took)
			case took < timeout || took > 60*time.Second:
				t.Fatalf("a statement bounded by --timeout %v ended after %v", timeout, took)
			}
			t.Logf("ended after %v: %v", took, err)
			var one int
			if err := pool.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after the timeout: %d, %v", one, err)
			}
			if !b.Alive() {
				t.Fatalf("the pooler died:\n%s", b.Output())
			}
		})
	}
}
