package migrate_test

import (
	"testing"

	"github.com/sqsinbox/sqsinbox/harness/pgtest"
)

// The tests of this file's package run against a real PostgreSQL (pgtest), and some through a
// real PgBouncer in front of it (harness/pgbouncer).
var db *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, "migrate", &db) }
