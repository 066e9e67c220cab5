package pgpurge

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// The purge tests of this package run against a real PostgreSQL (pgtest) and PgBouncer in front
// of it (harness/pgbouncer). A purger that the tests SIGKILL is this test binary re-executed with
// envChild set: TestMain then purges instead of running the tests.
var db *pgtest.Server

// envChild names the variable that holds the URL a child purger connects to; envChildTable
// names the schema-qualified table it purges.
const (
	envChild      = "PGPURGE_TEST_CHILD_URL"
	envChildTable = "PGPURGE_TEST_CHILD_TABLE"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(envChild); url != "" {
		os.Exit(child(url, os.Getenv(envChildTable)))
	}
	pgtest.Main(m, "pgpurge", &db)
}

// child purges the test table once, for the tests to kill it in the middle.
func child(url, schema string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	if _, err := Run(ctx, pool, testTarget(schema)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// testTarget is the purge of the tests' table t of schema: rows whose at is older than an hour,
// in batches of 100.
func testTarget(schema string) Target {
	return Target{Schema: schema, Table: "t", Column: "at", Retention: time.Hour, BatchSize: 100,
		LockKey: "pgpurge.test." + schema}
}
