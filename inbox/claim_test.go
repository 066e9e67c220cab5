package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// record is a Func that writes one business row, the effect the inbox must keep single.
func (b *bundle) record(calls *atomic.Int32) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) error {
		if calls != nil {
			calls.Add(1)
		}
		key, handler, ok := inbox.EventKey(ctx)
		if !ok {
			return errors.New("no event key in context")
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.effects (event_id, handler) VALUES ($1, $2)`, key, handler)
		return err
	}
}

func TestRunReplayFiveTimesOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var calls atomic.Int32
	for i := range 5 {
		out, err := b.ib.Run(t.Context(), "warehouse", "evt_9f3k", b.record(&calls))
		if err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
		want := inbox.Duplicate
		if i == 0 {
			want = inbox.Processed
		}
		if out != want {
			t.Fatalf("delivery %d: outcome %v, want %v", i+1, out, want)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("function ran %d times, want 1", got)
	}
	if got := b.effects(t, "warehouse", "evt_9f3k"); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	out, err := b.ib.Run(t.Context(), "warehouse", "evt_other", b.record(&calls))
	if err != nil || out != inbox.Processed {
		t.Fatalf("new id: %v, %v; want processed", out, err)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); got != 2 {
		t.Fatalf("effects after a new id = %d, want 2", got)
	}
}

func TestRunScopeIsPerHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, h := range []string{"warehouse", "loyalty", "warehouse", "loyalty"} {
		if _, err := b.ib.Run(t.Context(), h, "evt_1", b.record(nil)); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []string{"warehouse", "loyalty"} {
		if got := b.effects(t, h, "evt_1"); got != 1 {
			t.Fatalf("%s: effects = %d, want 1", h, got)
		}
	}
}

func TestRunFailureRollsBackEverything(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name  string
		fn    func(b *bundle) inbox.Func
		ctx   func(t *testing.T) context.Context
		check func(t *testing.T, err error)
	}{
		{
			name: "error",
			fn: func(b *bundle) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error {
					if err := b.record(nil)(ctx, tx); err != nil {
						return err
					}
					return boom
				}
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, boom) {
					t.Fatalf("err = %v, want boom", err)
				}
			},
		},
		{
			name: "panic",
			fn: func(b *bundle) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error {
					if err := b.record(nil)(ctx, tx); err != nil {
						return err
					}
					panic("kaboom")
				}
			},
			check: func(t *testing.T, err error) {
				var pe *inbox.PanicError
				if !errors.As(err, &pe) || pe.Value != "kaboom" {
					t.Fatalf("err = %v, want a PanicError with kaboom", err)
				}
				if !strings.Contains(string(pe.Stack), "claim_test.go") {
					t.Fatalf("stack does not show the panicking function:\n%s", pe.Stack)
				}
			},
		},
		{
			name: "panic with error",
			fn: func(b *bundle) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error { panic(boom) }
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, boom) {
					t.Fatalf("err = %v, want to unwrap to boom", err)
				}
			},
		},
		{
			name: "context cancelled after the writes",
			fn: func(b *bundle) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error {
					if err := b.record(nil)(ctx, tx); err != nil {
						return err
					}
					cancelFromCtx(ctx)
					return nil // the work "succeeded", but the lease is gone
				}
			},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancelCause(t.Context())
				return context.WithValue(ctx, cancelKey{}, func() { cancel(errLeaseLost) })
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errLeaseLost) {
					t.Fatalf("err = %v, want the cancellation cause", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := t.Context()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			out, err := b.ib.Run(ctx, "h", "evt_1", tc.fn(b))
			if err == nil || out != 0 {
				t.Fatalf("Run = %v, %v; want an error", out, err)
			}
			tc.check(t, err)
			if got := b.claims(t, "h", "evt_1"); got != 0 {
				t.Fatalf("claim rows = %d after a failure, want 0", got)
			}
			if got := b.effects(t, "h", "evt_1"); got != 0 {
				t.Fatalf("effects = %d after a failure, want 0", got)
			}
			// The redelivery runs the work cleanly.
			out, err = b.ib.Run(t.Context(), "h", "evt_1", b.record(nil))
			if err != nil || out != inbox.Processed {
				t.Fatalf("redelivery: %v, %v; want processed", out, err)
			}
			if got := b.effects(t, "h", "evt_1"); got != 1 {
				t.Fatalf("effects after redelivery = %d, want 1", got)
			}
		})
	}
}

type cancelKey struct{}

var errLeaseLost = errors.New("lease lost")

func cancelFromCtx(ctx context.Context) { ctx.Value(cancelKey{}).(func())() }

func TestRunRejectsBadKeysWithoutTouchingTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		handler, key string
		want         error
	}{
		{"h", "", inbox.ErrKeyEmpty},
		{"h", strings.Repeat("k", inbox.MaxKeyLen+1), inbox.ErrKeyTooLong},
		{"h", "bad\xff", inbox.ErrKeyInvalidUTF8},
		{"h", "nul\x00", inbox.ErrKeyNUL},
		{"", "evt", inbox.ErrKeyEmpty},
		{strings.Repeat("h", inbox.MaxHandlerLen+1), "evt", inbox.ErrKeyTooLong},
	} {
		var calls atomic.Int32
		_, err := b.ib.Run(t.Context(), tc.handler, tc.key, b.record(&calls))
		var ke *inbox.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, tc.want) {
			t.Errorf("Run(%q, %.20q) = %v, want a KeyError wrapping %v", tc.handler, tc.key, err, tc.want)
		}
		if calls.Load() != 0 {
			t.Errorf("Run(%q, %.20q) called the function", tc.handler, tc.key)
		}
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 0 {
		t.Fatalf("claims = %d, want 0", got)
	}
	// A maximal key is fine.
	if _, err := b.ib.Run(t.Context(), "h", strings.Repeat("k", inbox.MaxKeyLen), b.record(nil)); err != nil {
		t.Fatalf("a %d-byte key: %v", inbox.MaxKeyLen, err)
	}
}

// TestRunConcurrentClaims: N goroutines on separate connections claim one key at once. The
// first holds its uncommitted claim until every other one is blocked on the primary key.
func TestRunConcurrentClaims(t *testing.T) {
	t.Parallel()
	for _, winnerFails := range []bool{false, true} {
		name := map[bool]string{false: "winner commits", true: "winner fails"}[winnerFails]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			b := setup(t, nil)
			b.pool = newPool(t, n+2)
			ib, err := inbox.New(b.pool, &inbox.Config{Schema: b.schema})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			first := true
			var mu sync.Mutex
			fn := func(ctx context.Context, tx pgx.Tx) error {
				calls.Add(1)
				mu.Lock()
				isFirst := first
				first = false
				mu.Unlock()
				if err := b.record(nil)(ctx, tx); err != nil {
					return err
				}
				if isFirst {
					waitFor(t, 30*time.Second, "the other claimers to block on the lock", func() bool {
						return b.lockWaiters(t) == n-1
					})
					if winnerFails {
						return errors.New("winner fails")
					}
				}
				return nil
			}
			var wg sync.WaitGroup
			outs := make([]inbox.Outcome, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { outs[i], errs[i] = ib.Run(t.Context(), "h", "evt_hot", fn) })
			}
			wg.Wait()
			var processed, dups, failed int
			for i := range n {
				switch {
				case errs[i] != nil:
					failed++
				case outs[i] == inbox.Processed:
					processed++
				case outs[i] == inbox.Duplicate:
					dups++
				}
			}
			wantCalls, wantFailed := 1, 0
			if winnerFails {
				wantCalls, wantFailed = 2, 1
			}
			if int(calls.Load()) != wantCalls || processed != 1 || failed != wantFailed || dups != n-1-wantFailed {
				t.Fatalf("calls=%d processed=%d duplicates=%d failed=%d; want calls=%d processed=1 duplicates=%d failed=%d (errors %v)",
					calls.Load(), processed, dups, failed, wantCalls, n-1-wantFailed, wantFailed, errs)
			}
			if got := b.effects(t, "h", "evt_hot"); got != 1 {
				t.Fatalf("effects = %d, want 1", got)
			}
		})
	}
}

// lockWaiters counts the sessions of this test's database waiting on a lock on the schema's
// inbox table.
func (b *bundle) lockWaiters(t *testing.T) int {
	return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%processed_messages%'`, b.schema)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunTxLeavesTheTransactionToTheCaller(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	run := func() inbox.Outcome {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		out, err := b.ib.RunTx(ctx, tx, "h", "evt_tx", b.record(nil))
		if err != nil {
			t.Fatal(err)
		}
		if out == inbox.Processed {
			// Nothing is visible outside until the caller commits.
			if got := b.claims(t, "h", "evt_tx"); got != 0 {
				t.Fatalf("claim visible before the caller's commit")
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	if out := run(); out != inbox.Processed {
		t.Fatalf("first RunTx = %v, want processed", out)
	}
	if out := run(); out != inbox.Duplicate {
		t.Fatalf("second RunTx = %v, want duplicate", out)
	}
	if got := b.effects(t, "h", "evt_tx"); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	// A caller that rolls back leaves nothing behind.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := b.ib.RunTx(ctx, tx, "h", "evt_rb", b.record(nil)); err != nil || out != inbox.Processed {
		t.Fatalf("RunTx = %v, %v", out, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.claims(t, "h", "evt_rb"); got != 0 {
		t.Fatalf("claims after rollback = %d, want 0", got)
	}
}

func TestStepKeyIsStableAndScoped(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var got []string
	for range 2 {
		_, err := b.ib.Run(t.Context(), "payments", "evt_"+randHex(4), func(ctx context.Context, tx pgx.Tx) error {
			k, err := inbox.StepKey(ctx, "charge")
			got = append(got, k)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got[0] == got[1] {
		t.Fatalf("two events got the same step key")
	}
	if a, b := inbox.DeriveStepKey("payments", "evt_1", "charge"), inbox.DeriveStepKey("payments", "evt_1", "charge"); a != b {
		t.Fatal("DeriveStepKey is not deterministic")
	}
	for _, other := range [][3]string{{"loyalty", "evt_1", "charge"}, {"payments", "evt_2", "charge"},
		{"payments", "evt_1", "refund"}, {"payments", "evt_1c", "harge"}} {
		if inbox.DeriveStepKey(other[0], other[1], other[2]) == inbox.DeriveStepKey("payments", "evt_1", "charge") {
			t.Errorf("%v collides with (payments, evt_1, charge)", other)
		}
	}
	if _, err := inbox.StepKey(t.Context(), "charge"); !errors.Is(err, inbox.ErrNoEvent) {
		t.Fatalf("StepKey outside Run = %v, want ErrNoEvent", err)
	}
}

// TestRunReturnsItsConnection: whatever the outcome, the connection goes back to the pool.
func TestRunReturnsItsConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.pool = newPool(t, 2)
	ib, err := inbox.New(b.pool, &inbox.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for i, run := range []func() error{
		func() error { _, err := ib.Run(t.Context(), "h", "k1", b.record(nil)); return err },
		func() error { _, err := ib.Run(t.Context(), "h", "k1", b.record(nil)); return err }, // duplicate
		func() error {
			_, err := ib.Run(t.Context(), "h", "k2", func(context.Context, pgx.Tx) error { return errors.New("x") })
			return err
		},
		func() error {
			_, err := ib.Run(t.Context(), "h", "k3", func(context.Context, pgx.Tx) error { panic("p") })
			return err
		},
		func() error { _, err := ib.Run(cancelled, "h", "k4", b.record(nil)); return err },
		func() error {
			_, err := ib.Run(t.Context(), "h", "k5", func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "SELECT 1/0") // the transaction is now aborted; fn ignores it
				_ = err
				return nil
			})
			return err
		},
	} {
		err := run()
		if i < 2 && err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if i >= 2 && err == nil {
			t.Fatalf("run %d succeeded, want an error", i)
		}
		waitFor(t, 10*time.Second, "the connection to return to the pool", func() bool {
			return b.pool.Stat().AcquiredConns() == 0
		})
	}
	if got := b.claims(t, "h", "k5"); got != 0 {
		t.Fatalf("a function that swallowed an SQL error committed its claim")
	}
}
