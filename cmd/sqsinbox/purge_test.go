package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// storedKey is an idempotency key as a middleware stored it: created ageH hours ago with a TTL
// of ttlH hours.
type storedKey struct{ ageH, ttlH int }

// seededKeys are the keys each purge test starts with. Expired: 25/24, 49/24, 73/72, 100/24.
// Not yet: 1/24, 23/24, and 30/72, which a purge by a fixed 24 hours would wrongly delete.
var seededKeys = []storedKey{{1, 24}, {23, 24}, {25, 24}, {30, 72}, {49, 24}, {73, 72}, {100, 24}}

// setupPurge migrates a fresh schema and fills it: inbox rows 1 and 30 days old (two of each),
// and the keys of seededKeys, all with explicit timestamps.
func setupPurge(t *testing.T) (*pgxpool.Pool, []string) {
	t.Helper()
	pool, dbArgs := migratedSchema(t, "cli_purge")
	schema := dbArgs[len(dbArgs)-1]
	_, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id, seen_at)
		SELECT 'h', 'e' || d || '-' || i, now() - make_interval(days => d) FROM unnest(ARRAY[1, 30]) d, generate_series(1, 2) i`)
	if err != nil {
		t.Fatal(err)
	}
	var ages, ttls []int
	for _, k := range seededKeys {
		ages, ttls = append(ages, k.ageH), append(ttls, k.ttlH)
	}
	_, err = pool.Exec(t.Context(), `INSERT INTO `+schema+`.idempotency_keys (key_hash, fingerprint, status, headers, body, created_at, expires_at)
		SELECT sha256(convert_to('k' || a, 'UTF8')), sha256(convert_to('f' || a, 'UTF8')), 201, '{}', '\x7b7d',
			now() - make_interval(hours => a), now() - make_interval(hours => a) + make_interval(hours => l)
		FROM unnest($1::int[], $2::int[]) AS k(a, l)`, ages, ttls)
	if err != nil {
		t.Fatal(err)
	}
	return pool, dbArgs
}

// keysLeft lists the ages in hours of the keys left, youngest first.
func keysLeft(t *testing.T, pool *pgxpool.Pool, schema string) []int {
	t.Helper()
	var left []int
	err := pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(round(extract(epoch FROM now() - created_at) / 3600)::int
		ORDER BY created_at DESC), '{}') FROM `+schema+`.idempotency_keys`).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	return left
}

func TestPurgeDeletesExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string // the keys' summary line holds it
		left []int  // the ages in hours of the keys left
	}{
		// Batches of 2: 4 keys take 3 statements (the last deletes none), 3 take 2.
		{"by each key's expiry", nil, "deleted 4 keys that expired before", []int{1, 23, 30}},
		{"with a floor", []string{"--keys-older-than", "48h"}, "deleted 3 keys that expired before", []int{1, 23, 25, 30}},
		{"with a floor in days", []string{"--keys-older-than", "3d"}, "deleted 2 keys", []int{1, 23, 25, 30, 49}},
		{"skipped", []string{"--skip-keys"}, "not purged (--skip-keys)", []int{1, 23, 25, 30, 49, 73, 100}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, dbArgs := setupPurge(t)
			args := append(append([]string{"purge", "--older-than", "14d", "--skip-queue-check", "--batch-size", "2"}, tc.args...), dbArgs...)
			r := cli(t, "", args...).mustOK(t)
			if !strings.Contains(r.stdout, "inbox: deleted 2 rows older than") {
				t.Fatalf("purge %v:\n%s\nwant the inbox's 2 thirty-day-old rows deleted", tc.args, r.stdout)
			}
			// The keys' line follows the inbox's; the outbox's comes last.
			if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 ||
				!strings.HasPrefix(lines[1], "idempotency keys: ") || !strings.Contains(lines[1], tc.want) ||
				!strings.HasPrefix(lines[2], "outbox: deleted 0 rows sent before") {
				t.Fatalf("purge %v:\n%s\nwant the keys' line with %q, then the outbox's", tc.args, r.stdout, tc.want)
			}
			if left := keysLeft(t, pool, dbArgs[len(dbArgs)-1]); !slices.Equal(left, tc.left) {
				t.Fatalf("keys left, by age in hours = %v, want %v", left, tc.left)
			}
		})
	}
}

func TestPurgeWithoutTheKeysTableSaysSo(t *testing.T) {
	t.Parallel()
	pool, dbArgs := setupPurge(t)
	purge := append([]string{"purge", "--skip-queue-check"}, dbArgs...)
	revertInboxAbove(t, pool, dbArgs, 6)
	// 0006 and 0005 (the layouts) and 0004 (the inbox rows' delivery columns) first: the purge needs none.
	if r := cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", "3", "--yes"}, dbArgs...)...).mustOK(t); !strings.Contains(r.stdout, "reverted 0006, 0005, 0004") {
		t.Fatalf("down: %s", r.stdout)
	}
	for _, tc := range []struct{ down, want string }{
		{"0003", "idempotency_keys is not migrated to the latest version (column \"expires_at\" does not exist): run `sqsinbox migrate up`, or pass --skip-keys"},
		{"0002", "idempotency_keys does not exist (is the schema migrated?): run `sqsinbox migrate up`, or pass --skip-keys"},
	} {
		r := cli(t, "", append([]string{"migrate", "down", "--only", "inbox", "--steps", "1", "--yes"}, dbArgs...)...).mustOK(t)
		if !strings.Contains(r.stdout, "reverted "+tc.down) {
			t.Fatalf("down: %s", r.stdout)
		}
		r = cli(t, "", purge...)
		r.mustFail(t, 1, tc.want)
		if !strings.Contains(r.stdout, "inbox: deleted") {
			t.Fatalf("the inbox rows were not purged first:\n%s", r.stdout)
		}
	}
	cli(t, "", append(purge, "--skip-keys")...).mustOK(t)
}

func TestPurgeOnAnUnmigratedSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	line := cli(t, "", "purge", "--skip-queue-check", "--database-url", db.URL, "--schema", "cli_bare_"+randSuffix()).
		mustFail(t, 1, "processed_messages does not exist (is the schema migrated?): run `sqsinbox migrate up`")
	if strings.Contains(line, "SQLSTATE") {
		t.Fatalf("PostgreSQL's raw error leaks: %q", line)
	}
}

// TestPurgeChecksTheQueuesHorizon: an inbox row purged before its event's last possible
// redelivery lets that redelivery run twice, so the age is checked against the queues'.
func TestPurgeChecksTheQueuesHorizon(t *testing.T) {
	t.Parallel()
	// Standard, 4 days with a 14-day DLQ: 14 days. FIFO, 14 days with a 14-day DLQ: 28 days.
	std := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-purge-std", MaxReceiveCount: 3})
	fifo := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-purge-fifo", FIFO: true, Retention: 14 * 24 * time.Hour, MaxReceiveCount: 3})
	pool, dbArgs := setupPurge(t)
	schema := dbArgs[len(dbArgs)-1]
	cases := []struct {
		name string
		args []string
		want string // in the last line of stderr; exit 2
	}{
		{"no queue named", []string{"--older-than", "14d"}, "name the queues the inbox serves with --queue"},
		{"both", []string{"--queue", std.Name, "--skip-queue-check"}, "either --queue or --skip-queue-check"},
		{"under a standard queue's DLQ", []string{"--queue", std.Name, "--older-than", "10d"},
			"--older-than 10d is shorter than the redelivery horizon of queue " + std.Name + ", 14d (the longer of its retention 4d and its dead-letter queue's 14d)"},
		{"under a FIFO queue's sum", []string{"--queue", std.Name, "--queue", fifo.URL, "--older-than", "21d"},
			"horizon of queue " + fifo.Name + ", 28d (its retention 14d plus its dead-letter queue's 14d"},
		{"forced, under the floor", []string{"--skip-queue-check", "--older-than", "6d"}, "under 7 days"},
	}
	for _, tc := range cases {
		r := cli(t, "", append(append([]string{"purge"}, tc.args...), dbArgs...)...)
		if line := lastLine(r.stderr); r.code != 2 || !strings.Contains(line, tc.want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", tc.name, r.code, line, tc.want)
		}
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.processed_messages`).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("rows after refused purges = %d (%v), want all 4", rows, err)
	}
	// The default age is the inbox's default retention, 28 days: the FIFO queue's horizon.
	r := cli(t, "", append([]string{"purge", "--queue", fifo.Name, "--queue", std.URL}, dbArgs...)...).mustOK(t)
	if !strings.Contains(r.stdout, "redelivery horizon: 28d (queue "+fifo.Name) || !strings.Contains(r.stdout, "inbox: deleted 2 rows") {
		t.Fatalf("purge within the horizon:\n%s", r.stdout)
	}
}
