package pgpurge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/pgbouncer"
)

// TestPurgeBehindPoolerSurvivesKill purges one table with several purgers at once through
// PgBouncer in transaction mode (PostgreSQL, PgBouncer), with other clients' short statements on
// the pooler, and SIGKILLs one purger (a child process) in the middle of a batch. The purge must
// go on: the others finish it, and afterwards a purger alone is never skipped and forgets every
// expired row, because no lock is left behind on a server connection.
func TestPurgeBehindPoolerSurvivesKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	b := pgbouncer.Busy(t, db, nil, 4)
	url := b.URL + "&default_query_exec_mode=exec"
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "purge_" + hex.EncodeToString(rb[:])
	// Rows deleted by the slow purger (application_name slowpurger) take 10 ms each: a batch
	// of 100 lasts a second, long enough to kill it in the middle.
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema+`;
CREATE TABLE `+schema+`.t (id serial PRIMARY KEY, at timestamptz NOT NULL);
CREATE INDEX ON `+schema+`.t (at);
CREATE FUNCTION `+schema+`.slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('application_name') = 'slowpurger' THEN PERFORM pg_sleep(0.01); END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER slow BEFORE DELETE ON `+schema+`.t FOR EACH ROW EXECUTE FUNCTION `+schema+`.slow();
INSERT INTO `+schema+`.t (at) SELECT now() - interval '2 hours' FROM generate_series(1, 2000);
INSERT INTO `+schema+`.t (at) SELECT now() FROM generate_series(1, 10)`)
	if err != nil {
		t.Fatal(err)
	}
	expired := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".t WHERE at < now() - interval '1 hour'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+url+"&application_name=slowpurger", envChildTable+"="+schema)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Wait until the child is deleting, then purge beside it, then kill it mid-batch.
	waitFor(t, ctx, "the child purger to be deleting", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'slowpurger'
AND state = 'active' AND query LIKE 'WITH d AS (DELETE%'`).Scan(&n)
		return err == nil && n > 0
	})
	var wg sync.WaitGroup
	runs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Run(ctx, pool, testTarget(schema))
			runs <- err
		}()
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wg.Wait()
	close(runs)
	for err := range runs {
		if err != nil {
			t.Fatalf("a purger beside the killed one: %v", err)
		}
	}
	// The purge goes on: runs after the kill finish it.
	waitFor(t, ctx, "the purge to forget every expired row after the kill", func() bool {
		if _, err := Run(ctx, pool, testTarget(schema)); err != nil {
			t.Fatal(err)
		}
		return expired() == 0
	})
	// A purger alone is never skipped: nothing holds the lock.
	for i := range 10 {
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".t (at) SELECT now() - interval '2 hours' FROM generate_series(1, 5)"); err != nil {
			t.Fatal(err)
		}
		res, err := Run(ctx, pool, testTarget(schema))
		if err != nil || res.Skipped || res.Deleted != 5 {
			t.Fatalf("purge %d alone after the race = %+v, %v; want 5 deleted, not skipped", i, res, err)
		}
	}
	var locks int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&locks); err != nil || locks != 0 {
		t.Fatalf("%d advisory locks held after every purge returned (%v), want 0", locks, err)
	}
}

// waitFor polls cond until it holds or ctx ends, which fails the test naming what.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
