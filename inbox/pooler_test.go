package inbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestGenerationsBehindPooler rotates the generations and runs start-up Checks (which make the
// generations around now) from several inboxes at once through PgBouncer in transaction mode
// (PostgreSQL, PgBouncer), with other clients' short statements on the pooler, while the clock
// moves a generation at a time. No Check or rotation may fail or take 30 s, and
// afterwards no idle session may hold an advisory lock: a rotation alone is not skipped and a
// new inbox's Check returns at once.
func TestGenerationsBehindPooler(t *testing.T) {
	const retention = 10 * time.Minute
	g := genSetup(t, &inbox.Config{Retention: retention})
	ctx := t.Context()
	b := pgbouncer.Busy(t, db, nil, 4)
	pooled, err := pgxpool.New(ctx, b.URL+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	newInbox := func() *inbox.Inbox {
		c := g.cfg
		ib, err := inbox.New(pooled, &c)
		if err != nil {
			t.Fatal(err)
		}
		inbox.SetClock(ib, g.clock.now)
		return ib
	}
	check := func(ib *inbox.Inbox) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return ib.Check(cctx)
	}
	rotators := []*inbox.Inbox{newInbox(), newInbox()}
	for round := range 12 {
		g.clock.advance(genLen)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for _, ib := range rotators {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if _, err := inbox.RotateCtx(rctx, ib, retention); err != nil {
					errs <- err
				}
			}()
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := check(newInbox()); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	var held int
	if err := g.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND a.state = 'idle' AND a.datname = current_database()`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d advisory locks held by idle sessions (%v), want 0", held, err)
	}
	g.clock.advance(20 * time.Minute)
	r, err := inbox.Rotate(rotators[0], retention)
	if err != nil || r.Skipped || len(r.Dropped) == 0 {
		t.Fatalf("a rotation alone after the race = %+v, %v; want generations dropped, not skipped", r, err)
	}
	start := time.Now()
	if err := check(newInbox()); err != nil {
		t.Fatalf("a Check alone after the race: %v (after %v)", err, time.Since(start))
	}
}
