package main

import (
	"fmt"
	"slices"
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

const allTables = "idempotency_keys,inbox_layout,inbox_routes,inbox_sources,outbox_messages,outbox_schema_migrations,processed_messages,schema_migrations"

// inboxVersions returns the versions of the inbox's migrations applied to the schema dbArgs
// name, newest first.
func inboxVersions(t *testing.T, dbArgs []string) []int {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := inbox.Migrations(t.Context(), pool, dbArgs[len(dbArgs)-1])
	if err != nil {
		t.Fatal(err)
	}
	var vs []int
	for _, m := range slices.Backward(ms) {
		if !m.AppliedAt.IsZero() {
			vs = append(vs, m.Version)
		}
	}
	return vs
}

// revertNewerThan reverts the inbox's migrations after version, those added after a test that
// counts migrations was written, so that the test goes on from version; their numbers are not
// written in the tests, since a migration added on another branch renumbers them.
func revertNewerThan(t *testing.T, dbArgs []string, version int) {
	t.Helper()
	n := 0
	for _, v := range inboxVersions(t, dbArgs) {
		if v > version {
			n++
		}
	}
	if n > 0 {
		cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", strconv.Itoa(n), "--yes"}, dbArgs...)...).mustOK(t)
	}
}

// revertedText is what `migrate down` says of reverting every inbox migration applied now.
func revertedText(t *testing.T, dbArgs []string) string {
	t.Helper()
	vs := inboxVersions(t, dbArgs)
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%04d", v)
	}
	return fmt.Sprintf("reverted %s (%d migrations)", strings.Join(s, ", "), len(vs))
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

	// 0006 drops no table; 0005 drops the layout's one row, which asks; 0004 drops only an empty
	// table (the sources of rows), and 0003 no table, so neither needs confirmation; --steps
	// follows the action. (The migrations after 0006 go first.)
	revertNewerThan(t, dbArgs, 6)
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
	if got, want := tablesOf(t, pool, schema), strings.Replace(allTables, "inbox_layout,inbox_routes,inbox_sources,", "", 1); got != want {
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
