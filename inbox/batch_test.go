package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// Tests of Inbox.RunBatch, against a real PostgreSQL (harness/pgtest).

func items(b *bundle, fn inbox.Func, keys ...string) []inbox.Item {
	out := make([]inbox.Item, len(keys))
	for i, k := range keys {
		out[i] = inbox.Item{Key: k, Fn: fn}
		if fn == nil {
			out[i].Fn = b.record(nil)
		}
	}
	return out
}

// runBatch runs its with RunBatch, without an order; an item without a handler gets handler.
func runBatch(ctx context.Context, ib *inbox.Inbox, handler string, its []inbox.Item) ([]inbox.Result, inbox.BatchStats) {
	for i := range its {
		if its[i].Handler == "" {
			its[i].Handler = handler
		}
	}
	return ib.RunBatch(ctx, its, nil)
}

func outcomes(res []inbox.Result) string {
	var s []string
	for _, r := range res {
		switch {
		case r.Err != nil:
			s = append(s, "err")
		default:
			s = append(s, r.Outcome.String())
		}
	}
	return strings.Join(s, ",")
}

// TestRunBatchOneEffectPerKey: a batch with a fresh key, a twin of it, and a key processed
// before; then the same batch again: one effect per key, the twin and the replay duplicates.
func TestRunBatchOneEffectPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.ib.Run(t.Context(), "warehouse", "old", b.record(nil)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	for round, want := range []string{"processed,duplicate,duplicate,processed", "duplicate,duplicate,duplicate,duplicate"} {
		res, st := runBatch(t.Context(), b.ib, "warehouse", items(b, b.record(&calls), "k2", "k2", "old", "k1"))
		if got := outcomes(res); got != want {
			t.Fatalf("round %d: %s, want %s (%v)", round, got, want, res)
		}
		if st.RolledBack != 0 || st.Retries != 0 || st.Fallback {
			t.Fatalf("round %d: stats %+v", round, st)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("functions ran %d times, want 2", calls.Load())
	}
	for _, k := range []string{"k1", "k2", "old"} {
		if got := b.effects(t, "warehouse", k); got != 1 {
			t.Fatalf("%s: %d effects", k, got)
		}
	}
}

// TestRunBatchFailureIsolated: the second of three items fails after writing, another panics
// and a third rolls back its transaction itself: only those are undone (claim included), the
// others commit, and a later run processes the failed ones.
func TestRunBatchFailureIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	boom := errors.New("boom")
	rec := b.record(nil)
	fail := func(ctx context.Context, tx pgx.Tx) error {
		if err := rec(ctx, tx); err != nil {
			return err
		}
		return boom
	}
	commitThenFail := func(ctx context.Context, tx pgx.Tx) error {
		if err := rec(ctx, tx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil { // does nothing: the batch commits
			return err
		}
		return boom
	}
	rollback := func(ctx context.Context, tx pgx.Tx) error {
		if err := rec(ctx, tx); err != nil {
			return err
		}
		return tx.Rollback(ctx)
	}
	panicky := func(ctx context.Context, tx pgx.Tx) error {
		if err := rec(ctx, tx); err != nil {
			return err
		}
		panic("handler bug")
	}
	its := []inbox.Item{
		{Key: "a", Fn: rec}, {Key: "b", Fn: fail}, {Key: "c", Fn: rec}, {Key: "d", Fn: panicky},
		{Key: "e", Fn: rollback}, {Key: "f", Fn: commitThenFail}, {Key: "g", Fn: rec},
	}
	res, st := runBatch(t.Context(), b.ib, "h", its)
	if got := outcomes(res); got != "processed,err,processed,err,err,err,processed" {
		t.Fatalf("outcomes %s: %v", got, res)
	}
	if !errors.Is(res[1].Err, boom) || !errors.Is(res[5].Err, boom) {
		t.Fatalf("errors %v, %v; want boom", res[1].Err, res[5].Err)
	}
	var pe *inbox.PanicError
	if !errors.As(res[3].Err, &pe) {
		t.Fatalf("panic result %v, want a PanicError", res[3].Err)
	}
	if !errors.Is(res[4].Err, inbox.ErrItemRolledBack) {
		t.Fatalf("rollback result %v", res[4].Err)
	}
	if st.RolledBack != 4 {
		t.Fatalf("stats %+v, want 4 rolled back", st)
	}
	for k, want := range map[string]int{"a": 1, "b": 0, "c": 1, "d": 0, "e": 0, "f": 0, "g": 1} {
		if got, claims := b.effects(t, "h", k), b.claims(t, "h", k); got != want || claims != want {
			t.Errorf("%s: %d effects, %d claims; want %d", k, got, claims, want)
		}
	}
	res, _ = runBatch(t.Context(), b.ib, "h", items(b, nil, "a", "b", "d"))
	if got := outcomes(res); got != "duplicate,processed,processed" {
		t.Fatalf("second run %s: %v", got, res)
	}
}

// groupOrder is an inbox.Order for the tests: items of one group run in order and halt at the
// first one not processed (what the worker's FIFO groups do).
type groupOrder struct {
	groups []string
	halted map[string]bool
}

func (o *groupOrder) Runnable(i int) error {
	if g := o.groups[i]; g != "" && o.halted[g] {
		return errGroupHalted
	}
	return nil
}

func (o *groupOrder) Halt(i int) {
	if g := o.groups[i]; g != "" {
		if o.halted == nil {
			o.halted = map[string]bool{}
		}
		o.halted[g] = true
	}
}

var errGroupHalted = errors.New("group halted")

// TestRunBatchOrderAndTwins: with an Order, a failure halts the later items of its group only;
// the twin of a failed item is not run; an invalid key halts its group.
func TestRunBatchOrderAndTwins(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rec := b.record(nil)
	fail := func(context.Context, pgx.Tx) error { return errors.New("no") }
	its := []inbox.Item{
		{Key: "g1-1", Fn: rec},
		{Key: "g1-2", Fn: fail},
		{Key: "g2-1", Fn: rec},
		{Key: "g1-3", Fn: rec},
		{Key: "g1-2", Fn: rec}, // the failed one's twin, in another group
		{Key: "g3-2", Fn: rec},
		{Key: "", Fn: rec}, // an invalid key fails its item and halts its group
		{Key: "g2-2", Fn: rec},
	}
	for i := range its {
		its[i].Handler = "h"
	}
	order := &groupOrder{groups: []string{"g1", "g1", "g2", "g1", "g3", "g3", "g2", "g2"}}
	res, _ := b.ib.RunBatch(t.Context(), its, order)
	if got := outcomes(res); got != "processed,err,processed,err,err,err,err,err" {
		t.Fatalf("outcomes %s: %v", got, res)
	}
	for i, want := range map[int]error{3: errGroupHalted, 4: inbox.ErrTwinNotProcessed, 5: errGroupHalted, 7: errGroupHalted} {
		if !errors.Is(res[i].Err, want) {
			t.Errorf("item %d: %v, want %v", i, res[i].Err, want)
		}
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); got != 2 {
		t.Errorf("%d effects, want 2 (g1-1, g2-1)", got)
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 2 {
		t.Errorf("%d claims, want 2", got)
	}
}

// TestRunBatchSeveralHandlers: one batch serves two handlers; the same key under each is two
// events, each processed once, and a replay is two duplicates.
func TestRunBatchSeveralHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var calls atomic.Int32
	rec := b.record(&calls)
	its := []inbox.Item{{Handler: "warehouse", Key: "evt_1", Fn: rec}, {Handler: "loyalty", Key: "evt_1", Fn: rec},
		{Handler: "warehouse", Key: "evt_1", Fn: rec}}
	for round, want := range []string{"processed,processed,duplicate", "duplicate,duplicate,duplicate"} {
		res, _ := b.ib.RunBatch(t.Context(), its, nil)
		if got := outcomes(res); got != want {
			t.Fatalf("round %d: %s, want %s (%v)", round, got, want, res)
		}
	}
	if calls.Load() != 2 || b.claims(t, "warehouse", "evt_1") != 1 || b.claims(t, "loyalty", "evt_1") != 1 {
		t.Fatalf("%d calls, claims %d and %d; want 2, 1 and 1", calls.Load(), b.claims(t, "warehouse", "evt_1"), b.claims(t, "loyalty", "evt_1"))
	}
}

// TestRunBatchItemContextEnds: an item whose context ends during a statement (which closes the
// connection) fails alone; the batch runs again without it on another connection. An item whose
// context ended before its turn is not run.
func TestRunBatchItemContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var runs atomic.Int32
	rec := b.record(&runs)
	slow := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_sleep(30)")
		return err
	}
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	gone, cancelGone := context.WithCancelCause(t.Context())
	cancelGone(errors.New("lease lost"))
	its := []inbox.Item{{Key: "a", Fn: rec}, {Key: "slow", Ctx: short, Fn: slow}, {Key: "gone", Ctx: gone, Fn: rec}, {Key: "c", Fn: rec}}
	res, st := runBatch(t.Context(), b.ib, "h", its)
	if got := outcomes(res); got != "processed,err,err,processed" {
		t.Fatalf("outcomes %s: %v", got, res)
	}
	if st.Retries != 1 {
		t.Errorf("retries %d, want 1", st.Retries)
	}
	if !errors.Is(res[1].Err, context.DeadlineExceeded) || errors.Is(res[1].Err, inbox.ErrConnectionLost) {
		t.Errorf("slow item: %v; want its deadline, not a lost connection", res[1].Err)
	}
	if res[2].Err == nil || !strings.Contains(res[2].Err.Error(), "lease lost") {
		t.Errorf("gone item: %v", res[2].Err)
	}
	if runs.Load() != 3 { // a, then a and c again
		t.Errorf("%d runs of the recording function, want 3", runs.Load())
	}
	for k, want := range map[string]int{"a": 1, "slow": 0, "gone": 0, "c": 1} {
		if got := b.claims(t, "h", k); got != want {
			t.Errorf("%s: %d claims, want %d", k, got, want)
		}
	}
}

// TestRunBatchDeadlockRetried: two batches write the same two business rows in opposite orders
// (different events); whichever the server picks as the deadlock victim is rolled back and run
// again: both commit, each event once.
func TestRunBatchDeadlockRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.ib.Pool().Exec(t.Context(), `CREATE TABLE `+b.schema+`.hot (id int PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ib.Pool().Exec(t.Context(), `INSERT INTO `+b.schema+`.hot VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	// On their first attempt, both batches update their first row, then wait for each other, so
	// that their second updates cross.
	var barrier sync.WaitGroup
	barrier.Add(2)
	var wg sync.WaitGroup
	stats := make([]inbox.BatchStats, 2)
	results := make([][]inbox.Result, 2)
	for i := range 2 {
		wg.Go(func() {
			first, second := 1+i, 2-i
			var attempts atomic.Int32
			bump := func(id int, wait bool) inbox.Func {
				return func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE `+b.schema+`.hot SET n = n + 1 WHERE id = $1`, id); err != nil {
						return err
					}
					if wait && attempts.Add(1) == 1 {
						barrier.Done()
						barrier.Wait()
					}
					return nil
				}
			}
			results[i], stats[i] = runBatch(t.Context(), b.ib, "h", []inbox.Item{
				{Key: fmt.Sprintf("b%d-first", i), Fn: bump(first, true)},
				{Key: fmt.Sprintf("b%d-second", i), Fn: bump(second, false)},
			})
		})
	}
	wg.Wait()
	for i := range 2 {
		if got := outcomes(results[i]); got != "processed,processed" {
			t.Fatalf("batch %d: %s: %v", i, got, results[i])
		}
	}
	// One deadlock victim, retried; its retry can still meet the survivor once more (it need not
	// find the survivor committed), but never past the attempts.
	if r := stats[0].Retries + stats[1].Retries; r < 1 || r > 2 {
		t.Errorf("%d retries (%+v, %+v), want 1 or 2: a deadlock victim, retried", r, stats[0], stats[1])
	}
	if got := b.count(t, `SELECT sum(n)::int FROM `+b.schema+`.hot`); got != 4 {
		t.Errorf("hot rows bumped %d times, want 4 (each event once)", got)
	}
}

// TestRunBatchHotKeyAcrossBatches: 8 batches at once, each with the same 10 keys in a different
// order: one effect per key, no deadlock (the claims are taken in key order), no fallback.
func TestRunBatchHotKeyAcrossBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var calls atomic.Int32
	var wg sync.WaitGroup
	var retries, fallbacks atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			keys := make([]string, 10)
			for j := range keys {
				keys[j] = fmt.Sprintf("k%d", (j*(i+3))%10)
			}
			res, st := runBatch(t.Context(), b.ib, "h", items(b, b.record(&calls), keys...))
			for j, r := range res {
				if r.Err != nil {
					t.Errorf("batch %d item %d: %v", i, j, r.Err)
				}
			}
			retries.Add(int32(st.Retries))
			if st.Fallback {
				fallbacks.Add(1)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 10 || retries.Load() != 0 || fallbacks.Load() != 0 {
		t.Errorf("%d calls for 10 keys, %d retries, %d fallbacks; want 10, 0, 0", calls.Load(), retries.Load(), fallbacks.Load())
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); got != 10 {
		t.Errorf("%d effects, want 10", got)
	}
}

// TestRunBatchBlockedClaimFallsBack: another transaction holds one key's claim uncommitted past
// the lock timeout: the batch falls back to one transaction per item; that item is blocked, the
// others are processed.
func TestRunBatchBlockedClaimFallsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{LockTimeout: 200 * time.Millisecond})
	holder, err := b.ib.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := b.ib.RunTx(t.Context(), holder, "h", "held", func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	res, st := runBatch(t.Context(), b.ib, "h", items(b, nil, "a", "held", "b"))
	if got := outcomes(res); got != "processed,err,processed" || !errors.Is(res[1].Err, inbox.ErrClaimBlocked) {
		t.Fatalf("outcomes %s: %v", got, res)
	}
	if !st.Fallback {
		t.Errorf("stats %+v: want Fallback", st)
	}
}

// TestRunBatchRefusesBadInput: too many items, a bad handler name.
func TestRunBatchRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := make([]string, inbox.MaxBatch+1)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	res, _ := runBatch(t.Context(), b.ib, "h", items(b, nil, keys...))
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "MaxBatch") {
		t.Errorf("%d items: %v", len(keys), res[0].Err)
	}
	res, _ = runBatch(t.Context(), b.ib, "", items(b, nil, "a"))
	if res[0].Err == nil {
		t.Error("a bad handler name was accepted")
	}
	if got := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages`); got != 0 {
		t.Errorf("%d claims after refused batches", got)
	}
}

// TestRunBatchLockTimeoutOnlyOnTheClaim: the functions of a batch run with the session's own
// lock_timeout, not the claim's bound, and the idle-in-transaction bound is in force.
func TestRunBatchLockTimeoutOnlyOnTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{LockTimeout: 150 * time.Millisecond, IdleInTransactionTimeout: 7 * time.Second})
	var got []string
	show := func(ctx context.Context, tx pgx.Tx) error {
		var lt, idle string
		if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lt, &idle); err != nil {
			return err
		}
		got = append(got, lt+"/"+idle)
		return nil
	}
	res, _ := runBatch(t.Context(), b.ib, "h", items(b, show, "a", "b"))
	if outcomes(res) != "processed,processed" {
		t.Fatalf("%v", res)
	}
	if strings.Join(got, ",") != "0/7s,0/7s" {
		t.Fatalf("settings seen by the functions: %v; want lock_timeout 0 and idle 7s", got)
	}
}

// TestRunBatchFirstStatementSeesItsOwnResult (PostgreSQL): each item's savepoint rides with its
// function's first statement (at the head of a simple query for a statement without arguments,
// in a pgx batch for one with), yet the function sees its own statement's result: the rows its
// UPDATE affected and the rows its query returned, not the savepoint's. The items after the
// first are the ones that carry it.
func TestRunBatchFirstStatementSeesItsOwnResult(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.pool.Exec(t.Context(), `CREATE TABLE `+b.schema+`.stock (sku text, n int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), `INSERT INTO `+b.schema+`.stock SELECT 'a', g FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	var got [3]string
	fns := []inbox.Func{
		func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE `+b.schema+`.stock SET n = n + 1 WHERE sku = 'a'`)
			got[0] = tag.String()
			return err
		},
		func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE `+b.schema+`.stock SET n = n + 1 WHERE sku = $1`, "a")
			got[1] = tag.String()
			return err
		},
		func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT n FROM `+b.schema+`.stock WHERE sku = $1 ORDER BY n`, "a")
			if err != nil {
				return err
			}
			ns, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			got[2] = fmt.Sprint(ns)
			return err
		},
	}
	for round := range 2 { // the first item of a batch opens its savepoint with the claims
		items := []inbox.Item{{Handler: "h", Key: fmt.Sprint("first-", round), Fn: func(context.Context, pgx.Tx) error { return nil }}}
		for i, fn := range fns {
			items = append(items, inbox.Item{Handler: "h", Key: fmt.Sprint("k", round, "-", i), Fn: fn})
		}
		res, _ := b.ib.RunBatch(t.Context(), items, nil)
		for i, r := range res {
			if r.Err != nil || r.Outcome != inbox.Processed {
				t.Fatalf("round %d, item %d: %v, %v", round, i, r.Outcome, r.Err)
			}
		}
		base := 2 * round
		want := [3]string{"UPDATE 3", "UPDATE 3", fmt.Sprint([]int32{int32(base + 3), int32(base + 4), int32(base + 5)})}
		if got != want {
			t.Fatalf("round %d: the functions saw %q; want %q", round, got, want)
		}
	}
}
