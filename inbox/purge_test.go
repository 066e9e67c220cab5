package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// insertAged inserts n claim rows whose seen_at is age before the database's now().
func (b *bundle) insertAged(t *testing.T, prefix string, n int, age time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO `+b.schema+`.processed_messages (handler, event_id, seen_at)
		SELECT 'h', $1 || g, now() - make_interval(secs => $2) FROM generate_series(1, $3) g`, prefix, age.Seconds(), n)
	if err != nil {
		t.Fatal(err)
	}
}

func TestPurgeDeletesOnlyRowsPastTheRetentionInBatches(t *testing.T) {
	t.Parallel()
	const retention = 7 * 24 * time.Hour
	b := setup(t, &inbox.Config{Retention: retention, PurgeBatchSize: 100})
	b.insertAged(t, "old", 250, retention+time.Minute)
	b.insertAged(t, "edge", 10, retention-time.Minute) // just inside: kept
	b.insertAged(t, "new", 5, 0)
	var progress []int64
	res, err := b.ib.PurgeOlderThan(t.Context(), retention, func(n int64) { progress = append(progress, n) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 250 || res.Skipped {
		t.Fatalf("purge = %+v, want 250 deleted", res)
	}
	// 100 + 100 + 50: the last short batch ends the run.
	if res.Batches != 3 || len(progress) != 3 || progress[0] != 100 || progress[2] != 250 {
		t.Fatalf("batches = %d, progress = %v; want 3 batches of at most 100", res.Batches, progress)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages WHERE event_id LIKE 'old%'`); got != 0 {
		t.Fatalf("%d old rows left", got)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 15 {
		t.Fatalf("rows left = %d, want the 15 inside the retention", got)
	}
	// The horizon came from the database's clock: about now() - retention there.
	var dbNow time.Time
	if err := b.pool.QueryRow(t.Context(), "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if d := dbNow.Sub(res.Horizon) - retention; d < 0 || d > time.Minute {
		t.Fatalf("horizon %v is not now()-retention on the server (off by %v)", res.Horizon, d)
	}
}

func TestPurgeRefusesAnAgeShorterThanTheRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Retention: 8 * 24 * time.Hour})
	b.insertAged(t, "x", 3, 7*24*time.Hour+time.Hour)
	if _, err := b.ib.PurgeOlderThan(t.Context(), 7*24*time.Hour, nil); err == nil || !strings.Contains(err.Error(), "shorter than the retention") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 3 {
		t.Fatalf("rows = %d, want 3 untouched", got)
	}
}

func TestPurgeIsExclusiveAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Retention: 7 * 24 * time.Hour})
	b.insertAged(t, "old", 20, 8*24*time.Hour)
	// Another purger (a second inbox on its own pool, as another replica would be) is mid-run:
	// it holds the lock.
	other := newPool(t, 2)
	conn, err := other.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lockKey := "sqsinbox.purge." + b.schema + ".processed_messages"
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_lock(hashtextextended($1, 0))", lockKey); err != nil {
		t.Fatal(err)
	}
	res, err := b.ib.Purge(t.Context())
	if err != nil || !res.Skipped || res.Deleted != 0 {
		t.Fatalf("purge while locked = %+v, %v; want skipped", res, err)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 20 {
		t.Fatalf("rows = %d, want 20 while another purger runs", got)
	}
	if _, err := conn.Exec(t.Context(), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", lockKey); err != nil {
		t.Fatal(err)
	}
	res, err = b.ib.Purge(t.Context())
	if err != nil || res.Skipped || res.Deleted != 20 {
		t.Fatalf("purge after unlock = %+v, %v; want 20 deleted", res, err)
	}
}

func TestPurgeLoopRunsAndStopsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Retention: 7 * 24 * time.Hour, PurgeInterval: time.Hour})
	b.insertAged(t, "old", 5, 8*24*time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.ib.PurgeLoop(ctx) }()
	waitFor(t, 30*time.Second, "the first purge", func() bool {
		return b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`) == 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PurgeLoop = %v, want context.Canceled", err)
	}
}

func TestCheckRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Retention: 4 * 24 * time.Hour})
	if err := b.ib.CheckRetention(4 * 24 * time.Hour); err != nil {
		t.Fatalf("equal retention: %v", err)
	}
	err := b.ib.CheckRetention(14 * 24 * time.Hour)
	var re *inbox.RetentionError
	if err == nil || !asRetention(err, &re) || re.Horizon != 14*24*time.Hour {
		t.Fatalf("CheckRetention(14d) = %v, want a RetentionError", err)
	}
	def, err := inbox.New(b.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if def.Retention() < 7*24*time.Hour {
		t.Fatalf("default retention %v is shorter than 7 days", def.Retention())
	}
	if err := def.CheckRetention(14 * 24 * time.Hour); err != nil {
		t.Fatalf("the default retention must cover SQS's longest retention: %v", err)
	}
}
