package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// These tests use a real PostgreSQL.

// TestClaimBlockedByUncommittedHolder: while another transaction holds an uncommitted claim of
// the same event (a consumer frozen mid-handler), a claim waits Config.LockTimeout, not the
// caller's whole deadline, and fails with ErrClaimBlocked; nothing runs.
func TestClaimBlockedByUncommittedHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{LockTimeout: 300 * time.Millisecond})
	holder, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(t.Context())) }()
	if out, err := b.ib.RunTx(t.Context(), holder, "h", "evt_frozen", b.record(nil)); err != nil || out != inbox.Processed {
		t.Fatalf("holder's claim: %v, %v", out, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ran := false
	_, err = b.ib.Run(ctx, "h", "evt_frozen", func(context.Context, pgx.Tx) error { ran = true; return nil })
	if !errors.Is(err, inbox.ErrClaimBlocked) {
		t.Fatalf("Run behind an uncommitted holder = %v, want ErrClaimBlocked", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the claim waited for the caller's deadline, not Config.LockTimeout")
	}
	if errors.Is(err, inbox.ErrConnectionLost) {
		t.Errorf("a blocked claim was taken for a lost connection: %v", err)
	}
	if ran {
		t.Error("the function ran behind an uncommitted claim")
	}
	// Once the holder rolls back, the event runs.
	if err := holder.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, err := b.ib.Run(t.Context(), "h", "evt_frozen", b.record(nil)); err != nil || out != inbox.Processed {
		t.Fatalf("after the holder rolled back: %v, %v; want processed", out, err)
	}
}

// TestFrozenHolderSessionIsEnded: a Run whose transaction sits idle longer than
// Config.IdleInTransactionTimeout (its process frozen between statements) has its session ended
// by the server, which frees the claim: another Run of the event then processes it once, and the
// frozen one fails without committing.
func TestFrozenHolderSessionIsEnded(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{IdleInTransactionTimeout: 500 * time.Millisecond, LockTimeout: 200 * time.Millisecond})
	claimed, thaw := make(chan struct{}), make(chan struct{})
	frozen := make(chan error, 1)
	go func() {
		_, err := b.ib.Run(context.WithoutCancel(t.Context()), "h", "evt_x", func(ctx context.Context, tx pgx.Tx) error {
			if err := b.record(nil)(ctx, tx); err != nil {
				return err
			}
			close(claimed)
			<-thaw // frozen: the transaction is idle, holding the claim
			return nil
		})
		frozen <- err
	}()
	<-claimed
	var out inbox.Outcome
	var err error
	waitFor(t, 30*time.Second, "the frozen holder's claim to be freed", func() bool {
		out, err = b.ib.Run(t.Context(), "h", "evt_x", b.record(nil))
		return !errors.Is(err, inbox.ErrClaimBlocked)
	})
	if err != nil || out != inbox.Processed {
		t.Fatalf("Run after the holder's session ended: %v, %v; want processed", out, err)
	}
	close(thaw)
	if err := <-frozen; err == nil {
		t.Error("the frozen holder committed after its session was ended")
	}
	if got := b.effects(t, "h", "evt_x"); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
}

// TestLockTimeoutIsTheClaimsOnly: the handler's own statements wait for locks as long as they
// need; Config.LockTimeout bounds only the claim.
func TestLockTimeoutIsTheClaimsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{LockTimeout: 100 * time.Millisecond})
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO `+b.schema+`.effects (event_id, handler) VALUES ('row', 'x')`); err != nil {
		t.Fatal(err)
	}
	other, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := other.Exec(t.Context(), `UPDATE `+b.schema+`.effects SET handler = 'y' WHERE event_id = 'row'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.ib.Run(context.WithoutCancel(t.Context()), "h", "evt_lock", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE `+b.schema+`.effects SET handler = 'z' WHERE event_id = 'row'`)
			return err
		})
		done <- err
	}()
	// Hold the row lock well past LockTimeout while the handler waits on it.
	waitFor(t, 30*time.Second, "the handler to wait on the row lock", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%SET handler = ''z''%'`) == 1
	})
	waitFor(t, 30*time.Second, "ten lock timeouts to pass", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%SET handler = ''z''%' AND now() - query_start > interval '1 second'`) == 1
	})
	if err := other.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the handler's own lock wait was cut short: %v", err)
	}
}
