package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/outbox"
)

// seedOutbox fills the outbox of schema: two unsent rows (one an hour old), three parked ones
// with their errors, and sent rows 10 days and 1 day old. It returns the parked rows' ids,
// oldest parked first.
func seedOutbox(t *testing.T, pool *pgxpool.Pool, schema string) []int64 {
	t.Helper()
	const q = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
	_, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.outbox_messages
		(event_id, kind, destination, fifo, body, created_at, sent_at, parked_at, attempts, last_error) VALUES
		('u1', 'sqs', $1, false, '{}', now() - interval '1 hour', NULL, NULL, 0, NULL),
		('u2', 'sqs', $1, false, '{}', now(), NULL, NULL, 2, 'throttled'),
		('s10', 'sqs', $1, false, '{}', now() - interval '10 days', now() - interval '10 days', NULL, 1, NULL),
		('s1', 'sqs', $1, false, '{}', now() - interval '1 day', now() - interval '1 day', NULL, 1, NULL)`, q)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, e := range []string{"AccessDenied: not authorized\non this queue", "InvalidParameterValue: body", "QueueDoesNotExist"} {
		var id int64
		err := pool.QueryRow(t.Context(), `INSERT INTO `+schema+`.outbox_messages
			(event_id, kind, destination, fifo, body, created_at, parked_at, attempts, last_error)
			VALUES ($1, 'sqs', $2, false, '{}', now() - interval '20 days', now() - make_interval(mins => $3), 8, $4) RETURNING id`,
			"p"+string(rune('1'+i)), q, 30-i, e).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestMigrateCoversTheOutbox(t *testing.T) {
	t.Parallel()
	schema := "cli_mob_" + randSuffix()
	dbArgs := []string{"--database-url", db.URL, "--schema", schema}
	mig := func(args ...string) result {
		return cli(t, "", append(append([]string{"migrate"}, args...), dbArgs...)...)
	}

	r := mig("status").mustOK(t)
	st := strings.Join(strings.Fields(r.stdout), " ")
	for _, want := range []string{"SET VERSION NAME APPLIED", "inbox 0001 processed_messages pending", "outbox 0001 outbox_messages pending"} {
		if !strings.Contains(st, want) {
			t.Fatalf("status before up lacks %q:\n%s", want, r.stdout)
		}
	}
	// --only inbox leaves the outbox out.
	r = mig("up", "--only", "inbox").mustOK(t)
	if !strings.Contains(r.stdout, "schema "+schema+": inbox: applied 0001") || strings.Contains(r.stdout, "outbox") {
		t.Fatalf("up --only inbox: %s", r.stdout)
	}
	// One command brings the whole schema up.
	r = mig("up").mustOK(t)
	if !strings.Contains(r.stdout, "inbox is up to date") || !strings.Contains(r.stdout, "outbox: applied 0001, 0002, 0003 (3 migrations)") {
		t.Fatalf("up: %s", r.stdout)
	}
	r = mig("status").mustOK(t)
	if strings.Contains(r.stdout, "pending") || !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "outbox 0001 outbox_messages 20") {
		t.Fatalf("status after up: %s", r.stdout)
	}
	r = mig("status", "--only", "outbox").mustOK(t)
	if strings.Contains(r.stdout, "inbox") {
		t.Fatalf("status --only outbox lists the inbox: %s", r.stdout)
	}

	mig("down", "--steps", "1").mustFail(t, 2, "--steps counts the migrations of one set: add --only inbox or --only outbox")
	mig("up", "--only", "both").mustFail(t, 2, `--only "both": want inbox or outbox`)

	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	seedOutbox(t, pool, schema)
	mig("down", "--only", "outbox", "--all").mustFail(t, 2, "reverting outbox 0003, 0002, 0001 (3 migrations) drops "+schema+".outbox_messages (7 rows)", "pass --yes")
	mig("down", "--all").mustFail(t, 2, "outbox_messages (7 rows)")
	if got := tablesOf(t, pool, schema); got != allTables {
		t.Fatalf("a refused down dropped something: %q", got)
	}
	r = mig("down", "--only", "outbox", "--steps", "3", "--yes").mustOK(t)
	if !strings.Contains(r.stdout, "outbox: reverted 0003, 0002, 0001 (3 migrations)") {
		t.Fatalf("down --only outbox: %s", r.stdout)
	}
	if got := tablesOf(t, pool, schema); got != "dlq_discards,idempotency_keys,inbox_failures,inbox_layout,inbox_sources,outbox_schema_migrations,processed_messages,schema_migrations" {
		t.Fatalf("tables after the outbox's down: %q", got)
	}
	// --all with the outbox already down reverts only the inbox (its layout's one row asks first).
	mig("down", "--all").mustFail(t, 2, "inbox_layout (1 row)")
	r = mig("down", "--all", "--yes").mustOK(t)
	if !strings.Contains(r.stdout, "outbox: reverted nothing") || !strings.Contains(r.stdout, "inbox: "+allReverted(t, pool, schema)) {
		t.Fatalf("down --all: %s", r.stdout)
	}
}

// TestOutboxMigrationsAreKnown checks that the CLI's outbox set is the outbox package's own:
// after the CLI's up, outbox.Migrate has nothing left to apply, and the set lists exactly the
// versions that the outbox's version table records, applied, with their names, the first one
// dropping the outbox's table; migrate status prints each of them.
func TestOutboxMigrationsAreKnown(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_obknown")
	schema := dbArgs[len(dbArgs)-1]
	v, err := outbox.Migrate(t.Context(), pool, schema)
	if err != nil || len(v) != 0 {
		t.Fatalf("outbox.Migrate after the CLI's up: %v, %v; want nothing left to apply", v, err)
	}
	st, err := outboxSet.status(t.Context(), pool, schema)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(t.Context(), "SELECT version, name FROM "+schema+"."+outbox.VersionTable+" ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, strconv.Itoa(v)+" "+name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, s := range st {
		if s.AppliedAt.IsZero() {
			t.Errorf("outbox migration %d %s listed as pending after up", s.Version, s.Name)
		}
		listed = append(listed, strconv.Itoa(s.Version)+" "+s.Name)
	}
	if len(listed) == 0 || !slices.Equal(listed, recorded) {
		t.Fatalf("the CLI lists the outbox migrations %q; the version table records %q", listed, recorded)
	}
	if !slices.Contains(st[0].Drops, "outbox_messages") {
		t.Fatalf("outbox migration %d drops %q; want outbox_messages among them", st[0].Version, st[0].Drops)
	}
	r := cli(t, "", append(append([]string{"migrate"}, dbArgs...), "status")...).mustOK(t)
	var printed []string
	for line := range strings.Lines(r.stdout) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "outbox" && f[3] != "pending" {
			printed = append(printed, strings.TrimLeft(f[1], "0")+" "+f[2])
		}
	}
	if !slices.Equal(printed, recorded) {
		t.Fatalf("migrate status prints the applied outbox migrations %q; want %q:\n%s", printed, recorded, r.stdout)
	}
}

func TestStatsShowsTheOutbox(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_obstats")
	schema := dbArgs[len(dbArgs)-1]
	r := cli(t, "", append([]string{"stats"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "outbox: 0 messages unsent (oldest none), 0 parked messages") {
		t.Fatalf("stats of an empty outbox:\n%s", r.stdout)
	}
	seedOutbox(t, pool, schema)
	r = cli(t, "", append([]string{"stats", "--parked", "2"}, dbArgs...)...).mustOK(t)
	for _, want := range []string{
		"HANDLER",
		"outbox: 2 messages unsent (oldest 1h0m0s), 3 parked messages",
		"LAST ERROR",
		"QueueDoesNotExist",
		"InvalidParameterValue: body",
		"the last 2 of 3 parked",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stats lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "AccessDenied") {
		t.Fatalf("stats --parked 2 lists the oldest parked of three:\n%s", r.stdout)
	}
	r = cli(t, "", append([]string{"stats", "--parked", "0"}, dbArgs...)...).mustOK(t)
	if strings.Contains(r.stdout, "LAST ERROR") || !strings.Contains(r.stdout, "3 parked messages") {
		t.Fatalf("stats --parked 0:\n%s", r.stdout)
	}
	cli(t, "", append([]string{"stats", "--parked", "-1"}, dbArgs...)...).mustFail(t, 2, "--parked must not be negative")

	// A schema with the inbox only: one line for the outbox, and the inbox's part as before.
	inboxOnly := []string{"--database-url", db.URL, "--schema", "cli_obnone_" + randSuffix()}
	cli(t, "", append([]string{"migrate", "up", "--only", "inbox"}, inboxOnly...)...).mustOK(t)
	r = cli(t, "", append([]string{"stats"}, inboxOnly...)...).mustOK(t)
	if !strings.Contains(r.stdout, "HANDLER") || !strings.Contains(r.stdout, "outbox: not migrated in schema "+inboxOnly[3]) {
		t.Fatalf("stats without the outbox:\n%s", r.stdout)
	}
}

func TestOutboxListParkedAndRetry(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_obretry")
	schema := dbArgs[len(dbArgs)-1]
	ob := func(args ...string) result {
		return cli(t, "", append(append([]string{"outbox"}, args...), dbArgs...)...)
	}
	r := ob("list-parked").mustOK(t)
	if !strings.Contains(r.stdout, "no parked outbox messages") {
		t.Fatalf("list-parked of an empty outbox: %s", r.stdout)
	}
	ids := seedOutbox(t, pool, schema)
	r = ob("list-parked").mustOK(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[3], "AccessDenied: not authorized on this queue") || !strings.Contains(lines[1], "QueueDoesNotExist") {
		t.Fatalf("list-parked, newest parked first, errors on one line:\n%s", r.stdout)
	}
	r = ob("list-parked", "--limit", "1").mustOK(t)
	if !strings.Contains(r.stdout, "(1 of 3 parked messages shown: raise --limit for more)") {
		t.Fatalf("list-parked --limit 1: %s", r.stdout)
	}

	ob("retry").mustFail(t, 2, "retry needs the ids")
	ob("retry", "--all", "5").mustFail(t, 2, "either --all or message ids")
	ob("retry", "abc").mustFail(t, 2, `"abc" is not a message id`)
	ob("retry", "--limit", "3", "1").mustFail(t, 2, "--limit is for list-parked")
	ob("list-parked", "--all").mustFail(t, 2, "--all is for retry")
	ob("frob").mustFail(t, 2, `unknown action "frob"`)

	// One parked id and one that is not: the parked one is re-queued, the other named.
	first := ids[0]
	r = ob("retry", itoa(first), "999999", itoa(first))
	r.mustFail(t, 1, "not re-queued: 999999 is not parked in "+schema+".outbox_messages")
	if !strings.Contains(r.stdout, "outbox: re-queued 1 parked message\n") {
		t.Fatalf("retry one: %s", r.stdout)
	}
	var attempts int
	var parked bool
	if err := pool.QueryRow(t.Context(), `SELECT attempts, parked_at IS NOT NULL FROM `+schema+`.outbox_messages WHERE id = $1`, first).
		Scan(&attempts, &parked); err != nil || attempts != 0 || parked {
		t.Fatalf("the re-queued row: attempts %d, parked %v, %v", attempts, parked, err)
	}
	// Flags after the words.
	r = cli(t, "", append([]string{"outbox", "retry"}, append(dbArgs, "--all")...)...).mustOK(t)
	if !strings.Contains(r.stdout, "re-queued 2 parked messages") {
		t.Fatalf("retry --all: %s", r.stdout)
	}
	r = cli(t, "", append([]string{"stats"}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "outbox: 5 messages unsent (oldest 20d), 0 parked messages") {
		t.Fatalf("stats after retry --all:\n%s", r.stdout)
	}

	// A schema without the outbox: the fix, named.
	bare := []string{"--database-url", db.URL, "--schema", "cli_obbare_" + randSuffix()}
	cli(t, "", append([]string{"outbox", "list-parked"}, bare...)...).
		mustFail(t, 1, "the outbox is not migrated in schema "+bare[3], "run `sqsinbox migrate up`")
}

func TestPurgeCoversTheOutbox(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
		left []string // event ids left, sorted
	}{
		{"default retention", nil, "outbox: deleted 1 row sent before", []string{"p1", "p2", "p3", "s1", "u1", "u2"}},
		{"shorter", []string{"--outbox-older-than", "12h"}, "outbox: deleted 2 rows sent before", []string{"p1", "p2", "p3", "u1", "u2"}},
		{"skipped", []string{"--skip-outbox"}, "outbox: not purged (--skip-outbox)", []string{"p1", "p2", "p3", "s1", "s10", "u1", "u2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, dbArgs := setupPurge(t)
			schema := dbArgs[len(dbArgs)-1]
			seedOutbox(t, pool, schema)
			args := append(append([]string{"purge", "--skip-queue-check", "--older-than", "14d"}, tc.args...), dbArgs...)
			r := cli(t, "", args...).mustOK(t)
			if !strings.Contains(r.stdout, tc.want) || !strings.Contains(r.stdout, "inbox: deleted 2 rows") {
				t.Fatalf("purge %v:\n%s", tc.args, r.stdout)
			}
			var left []string
			if err := pool.QueryRow(t.Context(), `SELECT array_agg(event_id ORDER BY event_id) FROM `+schema+`.outbox_messages`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(left, tc.left) {
				t.Fatalf("outbox rows left %v, want %v", left, tc.left)
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		cli(t, "", "purge", "--skip-queue-check", "--outbox-older-than", "soon", "--database-url", db.URL).
			mustFail(t, 2, `--outbox-older-than "soon" is not a duration`)
		inboxOnly := []string{"--database-url", db.URL, "--schema", "cli_obpnone_" + randSuffix()}
		cli(t, "", append([]string{"migrate", "up", "--only", "inbox"}, inboxOnly...)...).mustOK(t)
		r := cli(t, "", append([]string{"purge", "--skip-queue-check"}, inboxOnly...)...).mustOK(t)
		if !strings.Contains(r.stdout, "outbox: not purged: not migrated in schema "+inboxOnly[3]) {
			t.Fatalf("purge without the outbox:\n%s", r.stdout)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestOutboxShow (PostgreSQL): show gives an event's row per destination, with its state
// (published, parked or unsent), attempts and last error, or says the event is not there.
func TestOutboxShow(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_obshow")
	schema := dbArgs[len(dbArgs)-1]
	seedOutbox(t, pool, schema)
	// The same event to a second destination, unsent.
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.outbox_messages (event_id, kind, destination, fifo, body)
		VALUES ('s1', 'sns', 'arn:aws:sns:eu-west-1:123456789012:orders', false, '{}')`); err != nil {
		t.Fatal(err)
	}
	ob := func(args ...string) result {
		return cli(t, "", append(append([]string{"outbox"}, args...), dbArgs...)...)
	}
	r := ob("show", "s1").mustOK(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "/orders") || !strings.Contains(lines[1], "published ") ||
		!strings.Contains(lines[2], "arn:aws:sns:eu-west-1:123456789012:orders") || !strings.Contains(lines[2], "unsent") {
		t.Errorf("show s1 (two destinations, in the order added):\n%s", r.stdout)
	}
	r = ob("show", "p1").mustOK(t)
	if !strings.Contains(r.stdout, "parked ") || !strings.Contains(r.stdout, "AccessDenied: not authorized on this queue") || !strings.Contains(r.stdout, " 8 ") {
		t.Errorf("show p1 (parked):\n%s", r.stdout)
	}
	r = ob("show", "nope").mustOK(t)
	if !strings.Contains(r.stdout, "event nope: not in "+schema+".outbox_messages") {
		t.Errorf("show of an event not there:\n%s", r.stdout)
	}
	ob("show").mustFail(t, 2, "show takes one event id")
	ob("show", "s1", "--all").mustFail(t, 2, "show takes one event id")
}
