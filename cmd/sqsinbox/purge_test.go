package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// keyAges are the ages in hours of the idempotency keys each purge test starts with: three under
// a day, three between one and two days, three over two days.
var keyAges = []int{1, 12, 23, 25, 30, 47, 49, 72, 100}

// setupPurge migrates a fresh schema and fills it: inbox rows 1 and 20 days old (two of each),
// and one idempotency key per entry of keyAges, all with explicit timestamps.
func setupPurge(t *testing.T) (*pgxpool.Pool, []string) {
	t.Helper()
	schema := "cli_purge_" + randSuffix()
	dbArgs := []string{"--database-url", db.URL, "--schema", schema}
	cli(t, "", append(append([]string{"migrate"}, dbArgs...), "up")...).mustOK(t)
	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `INSERT INTO `+schema+`.processed_messages (handler, event_id, seen_at)
		SELECT 'h', 'e' || d || '-' || i, now() - make_interval(days => d) FROM unnest(ARRAY[1, 20]) d, generate_series(1, 2) i`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(t.Context(), `INSERT INTO `+schema+`.idempotency_keys (key_hash, fingerprint, status, headers, body, created_at)
		SELECT sha256(convert_to('k' || h, 'UTF8')), sha256(convert_to('f' || h, 'UTF8')), 201, '{}', '\x7b7d',
			now() - make_interval(hours => h)
		FROM unnest($1::int[]) h`, keyAges)
	if err != nil {
		t.Fatal(err)
	}
	return pool, dbArgs
}

func TestPurgeDeletesExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     []string
		want     []string // the keys' summary line holds these
		keptFrom int      // the youngest key age in hours that is deleted; 0: none are
	}{
		// Batches of 2: 6 keys take 4 statements (the last deletes none), 3 take 2.
		{"default TTL", nil, []string{"deleted 6 keys older than", "in 4 batches"}, 25},
		{"two days", []string{"--keys-older-than", "48h"}, []string{"deleted 3 keys older than", "in 2 batches"}, 49},
		{"in days", []string{"--keys-older-than", "2d"}, []string{"deleted 3 keys older than"}, 49},
		{"skipped", []string{"--skip-keys"}, []string{"not purged (--skip-keys)"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, dbArgs := setupPurge(t)
			args := append(append([]string{"purge", "--older-than", "14d", "--batch-size", "2"}, tc.args...), dbArgs...)
			r := cli(t, "", args...).mustOK(t)
			if !strings.Contains(r.stdout, "inbox: deleted 2 rows older than") {
				t.Fatalf("purge %v:\n%s\nwant the inbox's 2 one-day-old rows deleted", tc.args, r.stdout)
			}
			keysLine := lastLine(r.stdout)
			for _, w := range tc.want {
				if !strings.HasPrefix(keysLine, "idempotency keys: ") || !strings.Contains(keysLine, w) {
					t.Fatalf("purge %v: last line %q; want the keys' line with %q", tc.args, keysLine, w)
				}
			}
			schema := dbArgs[len(dbArgs)-1]
			var rows int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.processed_messages`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 2 {
				t.Fatalf("inbox rows left = %d, want the 2 one-day-old ones", rows)
			}
			var left []int
			err := pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(round(extract(epoch FROM now() - created_at) / 3600)::int
				ORDER BY created_at DESC), '{}') FROM `+schema+`.idempotency_keys`).Scan(&left)
			if err != nil {
				t.Fatal(err)
			}
			want := keyAges
			for i, h := range keyAges {
				if tc.keptFrom != 0 && h >= tc.keptFrom {
					want = keyAges[:i]
					break
				}
			}
			if !slices.Equal(left, want) {
				t.Fatalf("keys left, by age in hours = %v, want %v", left, want)
			}
		})
	}
}

func TestPurgeWithoutTheKeysTableSaysSo(t *testing.T) {
	t.Parallel()
	_, dbArgs := setupPurge(t)
	cli(t, "", append(append([]string{"migrate", "--steps", "1"}, dbArgs...), "down")...).mustOK(t)
	r := cli(t, "", append([]string{"purge"}, dbArgs...)...)
	line := lastLine(r.stderr)
	if r.code != 1 || !strings.Contains(line, "idempotency_keys does not exist: run `sqsinbox migrate up`, or pass --skip-keys") {
		t.Fatalf("exit %d, %q; want 1 and the missing table named", r.code, line)
	}
	if !strings.Contains(r.stdout, "inbox: deleted 2 rows") {
		t.Fatalf("the inbox rows were not purged first:\n%s", r.stdout)
	}
	cli(t, "", append([]string{"purge", "--skip-keys"}, dbArgs...)...).mustOK(t)
}
