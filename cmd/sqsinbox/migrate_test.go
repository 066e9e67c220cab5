package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// migratedSchema migrates a fresh schema with the CLI, flags after the action word, and returns
// a pool and the database flags that name the schema.
func migratedSchema(t *testing.T, prefix string) (*pgxpool.Pool, []string) {
	t.Helper()
	dbArgs := []string{"--database-url", db.URL, "--schema", prefix + "_" + randSuffix()}
	cli(t, "", append([]string{"migrate", "up"}, dbArgs...)...).mustOK(t)
	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dbArgs
}

// tablesOf lists the tables of schema, by name.
func tablesOf(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var names string
	err := pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(tablename, ',' ORDER BY tablename), '')
		FROM pg_tables WHERE schemaname = $1`, schema).Scan(&names)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

const allTables = "dlq_discards,idempotency_keys,inbox_failures,inbox_layout,inbox_sources,outbox_messages,outbox_schema_migrations,processed_messages,schema_migrations"

// inboxVersions are the versions of the inbox's migrations, newest first, as `migrate` prints
// them ("0006"), read from the embedded list, so that a new migration needs no edit here.
func inboxVersions(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	st, err := inbox.Migrations(t.Context(), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	var vs []string
	for i := len(st) - 1; i >= 0; i-- {
		vs = append(vs, fmt.Sprintf("%04d", st[i].Version))
	}
	return vs
}

// allReverted is what `migrate down --all` says of the inbox's migrations.
func allReverted(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	vs := inboxVersions(t, pool, schema)
	return fmt.Sprintf("reverted %s (%d migrations)", strings.Join(vs, ", "), len(vs))
}

// revertInboxAbove reverts the inbox's migrations newer than version v, for a test written
// when v was the newest: the rest of the test then sees the schema it was written for. The
// newer migrations' tables must be empty (no confirmation is given).
func revertInboxAbove(t *testing.T, pool *pgxpool.Pool, dbArgs []string, v int) {
	t.Helper()
	schema := dbArgs[len(dbArgs)-1]
	n := 0
	for _, s := range inboxVersions(t, pool, schema) {
		if x, _ := strconv.Atoi(s); x > v {
			n++
		}
	}
	if n > 0 {
		cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", strconv.Itoa(n)}, dbArgs...)...).mustOK(t)
	}
}

func TestMigrateDownIsExplicit(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_down")
	schema := dbArgs[len(dbArgs)-1]
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id) VALUES ('h', 'e1'), ('h', 'e2')`); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string // in the last line of stderr
	}{
		{"no flags", []string{"migrate", "down"}, 2, "down needs --steps N or --all"},
		{"zero steps", []string{"migrate", "down", "--steps", "0"}, 2, "--steps must be at least 1"},
		{"both", []string{"migrate", "down", "--steps", "1", "--all"}, 2, "either --steps or --all"},
		{"rows without a terminal", []string{"migrate", "down", "--all"}, 2, "processed_messages (2 rows)"},
		{"steps for status", []string{"migrate", "status", "--steps", "1"}, 2, "--all and --yes are for down"},
	}
	for _, tc := range cases {
		r := cli(t, "", append(tc.args, dbArgs...)...)
		if line := lastLine(r.stderr); r.code != tc.code || !strings.Contains(line, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", tc.name, r.code, line, tc.code, tc.want)
		}
		if got := tablesOf(t, pool, schema); got != allTables {
			t.Fatalf("%s: tables left %q, want %q: a refused down dropped something", tc.name, got, allTables)
		}
	}
	if r := cli(t, "", append([]string{"migrate", "down", "--all"}, dbArgs...)...); !strings.Contains(r.stderr, "pass --yes") {
		t.Fatalf("the refusal does not say how to confirm: %s", r.stderr)
	}

	// The last migration drops no table; the one before it drops the layout's one row, which
	// asks; the one before that drops only an empty table (the sources of rows), and the one
	// before that no table, so neither needs confirmation; --steps follows the action.
	revertInboxAbove(t, pool, dbArgs, 6)
	r := cli(t, "", append([]string{"migrate", "down", "--steps", "1", "--only", "inbox"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted 0006 (1 migration)") {
		t.Fatalf("down --steps 1: %s", r.stdout)
	}
	r = cli(t, "", append([]string{"migrate", "down", "--steps", "1", "--only", "inbox", "--yes"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted 0005 (1 migration)") {
		t.Fatalf("down --steps 1: %s", r.stdout)
	}
	r = cli(t, "", append([]string{"migrate", "down", "--steps", "1", "--only", "inbox"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted 0004 (1 migration)") {
		t.Fatalf("down --steps 1: %s", r.stdout)
	}
	r = cli(t, "", append([]string{"migrate", "down", "--steps", "1", "--only", "inbox"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted 0003 (1 migration)") {
		t.Fatalf("down --steps 1: %s", r.stdout)
	}
	if got, want := tablesOf(t, pool, schema), "idempotency_keys,outbox_messages,outbox_schema_migrations,processed_messages,schema_migrations"; got != want {
		t.Fatalf("tables after two down --steps 1: %q, want %q", got, want)
	}
	// The keys' table is empty: it goes without a question.
	cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", "1"}, dbArgs...)...).mustOK(t)
	if got := tablesOf(t, pool, schema); got != "outbox_messages,outbox_schema_migrations,processed_messages,schema_migrations" {
		t.Fatalf("tables after the second down: %q", got)
	}
	r = cli(t, "", append([]string{"migrate", "down", "--all", "--yes"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "reverted 0001 (1 migration)") {
		t.Fatalf("down --all --yes: %s", r.stdout)
	}
	if got := tablesOf(t, pool, schema); got != "outbox_schema_migrations,schema_migrations" {
		t.Fatalf("tables after down --all --yes: %q", got)
	}
}

func TestFlagsBeforeAndAfterWords(t *testing.T) {
	t.Parallel()
	schema := "cli_flags_" + randSuffix()
	for _, args := range [][]string{
		{"migrate", "up", "--database-url", db.URL, "--schema", schema},
		{"migrate", "--database-url", db.URL, "status", "--schema", schema},
		{"migrate", "--database-url", db.URL, "--schema", schema, "status"},
	} {
		r := cli(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, schema) && !strings.Contains(r.stdout, "0001") {
			t.Errorf("%q: exit %d\nstdout %s\nstderr %s", args, r.code, r.stdout, r.stderr)
		}
	}
	// "--" ends the flags: what follows is a word even if it looks like a flag.
	r := cli(t, "", "migrate", "--database-url", db.URL, "--", "--schema")
	if line := lastLine(r.stderr); r.code != 2 || !strings.Contains(line, `unknown action "--schema"`) {
		t.Fatalf("after --: exit %d, %q", r.code, line)
	}
}
