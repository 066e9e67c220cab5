package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
)

// The generations layout, on a real PostgreSQL. A fake clock moves the generations: the inbox
// numbers them by its clock, so a test switches generations by moving it, and rotates them (as
// the purge loop does) at each step.

const genLen = time.Minute

// clock is a clock that tests move; the inboxes of a test share one.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// genBundle is a test's inbox switched to generations of genLen, and its clock.
type genBundle struct {
	*bundle
	clock *clock
	cfg   inbox.Config
}

func genSetup(t *testing.T, cfg *inbox.Config) *genBundle {
	t.Helper()
	return layoutSetup(t, cfg, inbox.SwitchToGenerations)
}

// layoutSetup is genSetup with the switch to a layout of processed_events.
func layoutSetup(t *testing.T, cfg *inbox.Config, switchTo func(context.Context, *pgxpool.Pool, string, time.Duration) error) *genBundle {
	t.Helper()
	b := setup(t, cfg)
	if err := switchTo(t.Context(), b.pool, b.schema, genLen); err != nil {
		t.Fatalf("switch: %v", err)
	}
	g := &genBundle{bundle: b, clock: newClock()}
	if cfg != nil {
		g.cfg = *cfg
	}
	g.cfg.Schema = b.schema
	g.ib = g.newInbox(t)
	return g
}

// newInbox is another process's inbox on the same schema and clock, checked (which makes the
// generations around now).
func (g *genBundle) newInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	c := g.cfg
	ib, err := inbox.New(g.pool, &c)
	if err != nil {
		t.Fatal(err)
	}
	inbox.SetClock(ib, g.clock.now)
	if err := ib.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return ib
}

// step moves the clock one generation on and rotates, as the purge loop would.
func (g *genBundle) step(t *testing.T) inbox.Rotation {
	t.Helper()
	g.clock.advance(genLen)
	r, err := inbox.Rotate(g.ib, g.ib.Retention())
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	return r
}

// effect is the tests' work: one row in effects per run.
func (g *genBundle) effect(handler, key string) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+g.schema+`.effects (event_id, handler) VALUES ($1, $2)`, key, handler)
		return err
	}
}

// effects returns the number of effects of each key.
func (g *genBundle) effectsByKey(t *testing.T) map[string]int {
	t.Helper()
	rows, err := g.pool.Query(t.Context(), `SELECT event_id, count(*) FROM `+g.schema+`.effects GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

// TestSwitchToGenerations (PostgreSQL): the switch of an empty inbox refuses a bad generation
// length and a second switch; after it, claims, Lookup, Stats and Purge work in processed_events;
// a claim as a binary from before the layout makes it (an INSERT into processed_messages) fails
// with undefined_table, which such a binary takes for a broken deployment (it pauses, applying
// nothing); and an inbox that read the table layout before the switch claims in the new one at
// once.
func TestSwitchToGenerations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, nil)
	stale := b.ib // read the table layout at its Check
	for _, g := range []time.Duration{time.Second, 91 * 24 * time.Hour, 90*time.Second + time.Millisecond} {
		if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, g); err == nil || !strings.Contains(err.Error(), "want whole seconds from 1m0s to 2160h0m0s") {
			t.Errorf("switch with generation %v = %v; want refused", g, err)
		}
	}
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err == nil || !strings.Contains(err.Error(), "in the generations layout already") {
		t.Errorf("a second switch = %v; want refused", err)
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO `+b.schema+`.processed_messages (handler, event_id) VALUES ('warehouse', 'evt_old')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("an INSERT as a binary from before the layout = %v; want undefined_table", err)
	}
	out, err := stale.Run(ctx, "warehouse", "evt_2", b.genEffect("warehouse", "evt_2"))
	if err != nil || out != inbox.Processed {
		t.Fatalf("a claim by an inbox that read the table layout = %v, %v; want processed, in the new layout", out, err)
	}
	fresh, err := inbox.New(b.pool, &inbox.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	if kind, g, err := fresh.Layout(ctx); kind != inbox.LayoutGenerations || g != time.Hour || err != nil {
		t.Errorf("Layout = %s, %v, %v", kind, g, err)
	}
	if out, err := fresh.Run(ctx, "warehouse", "evt_2", b.genEffect("warehouse", "evt_2")); out != inbox.Duplicate || err != nil {
		t.Errorf("the same event again = %v, %v; want duplicate", out, err)
	}
	if _, err := fresh.RunTx(ctx, mustBegin(t, b), "warehouse", "evt_2", b.genEffect("warehouse", "evt_2")); err != nil {
		t.Errorf("RunTx: %v", err)
	}
	got, err := fresh.Lookup(ctx, "evt_2")
	if err != nil || len(got) != 1 || got[0].Handler != "warehouse" {
		t.Errorf("Lookup = %+v, %v; want one row, warehouse", got, err)
	}
	st, err := fresh.Stats(ctx)
	if err != nil || len(st.Handlers) != 1 || st.Handlers[0].Rows != 1 {
		t.Errorf("Stats = %+v, %v", st, err)
	}
	if res, err := fresh.Purge(ctx); err != nil || res.Deleted != 0 {
		t.Errorf("Purge = %+v, %v", res, err)
	}
	if _, err := fresh.PurgeOlderThan(ctx, time.Hour, nil); err == nil {
		t.Error("a purge under the retention was not refused")
	}
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.effects`); n != 1 {
		t.Errorf("%d effects; want 1", n)
	}
}

func (b *bundle) genEffect(handler, key string) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+b.schema+`.effects (event_id, handler) VALUES ($1, $2)`, key, handler)
		return err
	}
}

func mustBegin(t *testing.T, b *bundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// TestGenerationsOneEffectAcrossSwitches (PostgreSQL): 8 goroutines, each its own inbox (half
// claiming one event at a time, half in batches), claim the same 40 events over and over while
// the generation switches under them (up to 40 times, inside the retention). Each event is
// applied exactly once, and has one row.
func TestGenerationsOneEffectAcrossSwitches(t *testing.T) {
	t.Parallel()
	g := genSetup(t, &inbox.Config{Retention: time.Hour})
	const keys, rounds = 40, 6
	var processed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	switched := make(chan struct{})
	go func() { // the switches
		defer close(switched)
		// 40 minutes at most: well within the retention, so nothing is forgotten. Unbounded, the
		// switches outran the claims on a loaded machine, past the retention (an hour and two
		// clock margins): the rotation dropped the first generations, and their events ran
		// again, as they should once forgotten.
		for range 40 {
			select {
			case <-stop:
				return
			default:
			}
			g.step(t)
		}
	}()
	errs := make(chan error, 8)
	var names []string
	for k := range keys {
		names = append(names, fmt.Sprintf("evt_%02d", k))
	}
	for w := range 8 {
		ib := g.newInbox(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.claimRounds(t, ib, w, rounds, names, &processed, errs, nil)
		}()
	}
	wg.Wait()
	close(stop)
	<-switched
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fx := g.effectsByKey(t)
	for k := range keys {
		if n := fx[fmt.Sprintf("evt_%02d", k)]; n != 1 {
			t.Errorf("evt_%02d has %d effects; want 1", k, n)
		}
	}
	if p := processed.Load(); p != keys {
		t.Errorf("%d claims processed; want %d", p, keys)
	}
	if n := g.count(t, `SELECT count(*) FROM `+g.schema+`.processed_events`); n != keys {
		t.Errorf("%d rows; want %d", n, keys)
	}
	if n := g.count(t, `SELECT count(DISTINCT gen) FROM `+g.schema+`.processed_events`); n < 2 {
		t.Logf("the rows are in %d generation(s)", n)
	}
}

// claimRounds is process w's claims of keys, rounds times, with Run (w even) or RunBatch in
// batches of 10, each round in an order of its own. It counts the processed claims, and sends an
// error other than ErrClaimBlocked (or one tolerated) to errs and stops.
func (g *genBundle) claimRounds(t *testing.T, ib *inbox.Inbox, w, rounds int, keys []string, processed *atomic.Int64, errs chan<- error, tolerated func(error) bool) {
	ok := func(err error) bool {
		return err == nil || errors.Is(err, inbox.ErrClaimBlocked) || (tolerated != nil && tolerated(err))
	}
	for r := range rounds {
		if w%2 == 0 {
			for k := range keys {
				key := keys[(k+w*5+r)%len(keys)]
				out, err := ib.Run(t.Context(), "warehouse", key, g.effect("warehouse", key))
				if !ok(err) {
					errs <- fmt.Errorf("Run %s: %w", key, err)
					return
				}
				if out == inbox.Processed {
					processed.Add(1)
				}
			}
			continue
		}
		for k := 0; k < len(keys); k += 10 {
			var items []inbox.Item
			for j := range min(10, len(keys)-k) {
				key := keys[(k+j+w*3+r)%len(keys)]
				items = append(items, inbox.Item{Handler: "warehouse", Key: key, Fn: g.effect("warehouse", key)})
			}
			res, _ := ib.RunBatch(t.Context(), items, nil)
			for i, rr := range res {
				if !ok(rr.Err) {
					errs <- fmt.Errorf("RunBatch %s: %w", items[i].Key, rr.Err)
					return
				}
				if rr.Outcome == inbox.Processed {
					processed.Add(1)
				}
			}
		}
	}
}

// waitLockWaiter waits until a session of the pool waits for an advisory lock.
func (g *genBundle) waitLockWaiter(t *testing.T) {
	t.Helper()
	sqlWait(t, g.bundle, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`, 1)
}

func sqlWait(t *testing.T, b *bundle, q string, want int) {
	t.Helper()
	sqstest.WaitFor(t, 30*time.Second, q, func() (bool, string) {
		var n int
		if err := b.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n >= want, fmt.Sprint(n)
	})
}

// TestGenerationsHolderAcrossSwitch (PostgreSQL): a claim holder in one generation, its
// transaction open; the generation switches; a claim of the same event in the next one waits for
// the holder (it never skips it): a commit makes it a duplicate, a rollback makes it run. A batch
// spanning the switch finds the events of the earlier generation done.
func TestGenerationsHolderAcrossSwitch(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			g := genSetup(t, &inbox.Config{Retention: time.Hour})
			other := g.newInbox(t)
			tx := mustBegin(t, g.bundle)
			if out, err := g.ib.RunTx(t.Context(), tx, "warehouse", "evt_held", g.effect("warehouse", "evt_held")); out != inbox.Processed || err != nil {
				t.Fatalf("holder: %v, %v", out, err)
			}
			g.step(t)
			done := make(chan inbox.Outcome, 1)
			go func() {
				out, err := other.Run(context.Background(), "warehouse", "evt_held", g.effect("warehouse", "evt_held"))
				if err != nil {
					t.Error(err)
				}
				done <- out
			}()
			g.waitLockWaiter(t)
			end := tx.Rollback
			want := inbox.Processed
			if commit {
				end, want = tx.Commit, inbox.Duplicate
			}
			if err := end(t.Context()); err != nil {
				t.Fatal(err)
			}
			if out := <-done; out != want {
				t.Errorf("the claim after the switch = %v; want %v", out, want)
			}
			if fx := g.effectsByKey(t); fx["evt_held"] != 1 {
				t.Errorf("evt_held has %d effects; want 1", fx["evt_held"])
			}
		})
	}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		g := genSetup(t, &inbox.Config{Retention: time.Hour})
		items := func(n int) []inbox.Item {
			var out []inbox.Item
			for i := range n {
				k := fmt.Sprintf("evt_%d", i)
				out = append(out, inbox.Item{Handler: "warehouse", Key: k, Fn: g.effect("warehouse", k)})
			}
			return out
		}
		g.ib.RunBatch(t.Context(), items(5), nil)
		g.step(t)
		res, _ := g.newInbox(t).RunBatch(t.Context(), items(10), nil)
		for i, r := range res {
			want := inbox.Processed
			if i < 5 {
				want = inbox.Duplicate
			}
			if r.Err != nil || r.Outcome != want {
				t.Errorf("evt_%d: %v, %v; want %v", i, r.Outcome, r.Err, want)
			}
		}
	})
}

// TestGenerationsRotation (PostgreSQL): the rotation keeps the generations from the oldest a claim
// probes to two ahead, and drops those past the retention: an event is a duplicate while its
// generation lives and is forgotten after. A drop waits for a claim holding the generation
// without holding up other claims (it gives up its lock wait and tries again). A rotation finds
// another's lock held and skips; one after a crash attaches a generation made and not attached,
// and drops one detached and not dropped.
func TestGenerationsRotation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const retention = 10 * time.Minute
	g := genSetup(t, &inbox.Config{Retention: retention})
	if out, err := g.ib.Run(ctx, "warehouse", "evt_old", g.effect("warehouse", "evt_old")); out != inbox.Processed || err != nil {
		t.Fatal(out, err)
	}
	// Live: the probe window is retention + 5 min (clock margin); drops wait 10 min more.
	for range 15 {
		g.step(t)
		if out, _ := g.ib.Run(ctx, "warehouse", "evt_old", g.effect("warehouse", "evt_old")); out != inbox.Duplicate {
			t.Fatalf("evt_old within its horizon = %v; want duplicate", out)
		}
	}
	// A holder of a claim in the oldest generation keeps the drop waiting, not the claims.
	tx := mustBegin(t, g.bundle)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+g.schema+`.processed_events WHERE event_id = 'evt_old' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var dropped []int32
	for range 12 {
		g.clock.advance(genLen)
	}
	rotated := make(chan inbox.Rotation, 1)
	go func() {
		r, err := inbox.Rotate(g.ib, retention)
		if err != nil {
			t.Error(err)
		}
		rotated <- r
	}()
	for i := range 5 { // claims go on while the drop waits
		k := fmt.Sprintf("evt_during_%d", i)
		if out, err := g.newInbox(t).Run(ctx, "warehouse", k, g.effect("warehouse", k)); out != inbox.Processed || err != nil {
			t.Fatalf("a claim during the drop's wait: %v, %v", out, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-rotated
	dropped = r.Dropped
	if len(dropped) == 0 {
		t.Fatalf("rotation dropped nothing: %+v", r)
	}
	if out, err := g.ib.Run(ctx, "warehouse", "evt_old", g.effect("warehouse", "evt_old")); out != inbox.Processed || err != nil {
		t.Errorf("evt_old past its horizon = %v, %v; want processed again (forgotten)", out, err)
	}
	parts := g.partitions(t)
	cur := int32(g.clock.now().Unix() / int64(genLen/time.Second))
	for _, p := range []int32{cur - 1, cur, cur + 1, cur + 2} {
		if !slices.Contains(parts, p) {
			t.Errorf("generation %d is missing; have %v", p, parts)
		}
	}
	if oldest := slices.Min(parts); oldest < int32(g.clock.now().Add(-retention-10*time.Minute).Unix()/60)-1 {
		t.Errorf("generation %d kept past the retention (now %d)", oldest, cur)
	}
	t.Logf("rotation: %+v", r)

	// Another process's rotation holds the lock: this one skips.
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", "sqsinbox.purge."+g.schema+".processed_events"); err != nil {
		t.Fatal(err)
	}
	if r, err := inbox.Rotate(g.ib, retention); err != nil || !r.Skipped {
		t.Errorf("a rotation while another holds the lock = %+v, %v; want skipped", r, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", "sqsinbox.purge."+g.schema+".processed_events"); err != nil {
		t.Fatal(err)
	}

	// A crash left generation cur+3 made and not attached, and an old one detached and not dropped.
	stray := cur - 100
	for _, s := range []string{
		fmt.Sprintf(`CREATE TABLE %s.processed_events_g%d (LIKE %s.processed_events INCLUDING DEFAULTS)`, g.schema, cur+3, g.schema),
		fmt.Sprintf(`CREATE TABLE %s.processed_events_g%d (LIKE %s.processed_events INCLUDING DEFAULTS)`, g.schema, stray, g.schema),
	} {
		if _, err := g.pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	g.clock.advance(genLen)
	r, err = inbox.Rotate(g.ib, retention)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Created, cur+3) || !slices.Contains(r.Dropped, stray) {
		t.Errorf("after a crash: %+v; want %d attached and %d dropped", r, cur+3, stray)
	}
}

// partitions returns the generations attached to processed_events.
func (g *genBundle) partitions(t *testing.T) []int32 {
	t.Helper()
	rows, err := g.pool.Query(t.Context(), `SELECT substring(c.relname from 'processed_events_g(-?[0-9]+)')::int FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass ORDER BY 1`, g.schema+".processed_events")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSwitchMovesAnInbox (PostgreSQL): 6 processes (each its own inbox and pool, half claiming one
// event at a time, half in batches) claim 200 events over and over in the table layout, which
// already holds 100 of them, while the inbox switches to generations under them. Each event is
// applied exactly once: the rows from before the switch stay in processed_messages_legacy, which
// every claim probes; a process whose cached statement still names the old table fails that claim
// once (the table is gone, or closed to new rows) and claims in the new layout. Lookup finds the
// events of both tables. When the legacy rows pass the retention the rotation deletes them and
// drops the table, and the processes that still probed it claim without it.
func TestSwitchMovesAnInbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, nil)
	g := &genBundle{bundle: b, clock: newClock(), cfg: inbox.Config{Schema: b.schema}}
	const before, all = 100, 200
	for i := range before {
		k := fmt.Sprintf("evt_%03d", i)
		if out, err := b.ib.Run(ctx, "warehouse", k, g.effect("warehouse", k)); out != inbox.Processed || err != nil {
			t.Fatal(out, err)
		}
	}
	var processed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	started, switched := make(chan struct{}, 6), make(chan struct{})
	var inboxes []*inbox.Inbox
	for w := range 6 {
		ib, err := inbox.New(newPool(t, 4), &inbox.Config{Schema: b.schema})
		if err != nil {
			t.Fatal(err)
		}
		if err := ib.Check(ctx); err != nil {
			t.Fatal(err)
		}
		inboxes = append(inboxes, ib)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 4 {
				n := all * 3 / 4 // the first two rounds in the table layout; then the switch comes
				if r == 2 {
					started <- struct{}{}
					n = all * 7 / 8 // the last eighth is left to the processes that wait for the switch
					if w >= 3 {     // these wait for the switch; the others claim on through it
						<-switched
						n = all
					}
				}
				for k := 0; k < n; k += 10 {
					var items []inbox.Item
					for j := range 10 {
						idx := (k + j + w*37 + r*11) % n
						if w >= 3 && r >= 2 {
							idx = all - 1 - (k + j) // from the other end: new events, in the new layout
						}
						key := fmt.Sprintf("evt_%03d", idx)
						items = append(items, inbox.Item{Handler: "warehouse", Key: key, Fn: g.effect("warehouse", key)})
					}
					if w%2 == 0 {
						for _, it := range items {
							out, err := ib.Run(ctx, it.Handler, it.Key, it.Fn)
							if err != nil && !errors.Is(err, inbox.ErrClaimBlocked) {
								errs <- fmt.Errorf("Run %s: %w", it.Key, err)
								return
							}
							if out == inbox.Processed {
								processed.Add(1)
							}
						}
						continue
					}
					res, _ := ib.RunBatch(ctx, items, nil)
					for i, rr := range res {
						if rr.Err != nil && !errors.Is(rr.Err, inbox.ErrClaimBlocked) {
							errs <- fmt.Errorf("RunBatch %s: %w", items[i].Key, rr.Err)
							return
						}
						if rr.Outcome == inbox.Processed {
							processed.Add(1)
						}
					}
				}
			}
		}()
	}
	<-started // one process is past its first two rounds: claims go on while the switch comes
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatalf("switch: %v", err)
	}
	close(switched)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	fx := g.effectsByKey(t)
	for i := range all {
		if n := fx[fmt.Sprintf("evt_%03d", i)]; n != 1 {
			t.Errorf("evt_%03d has %d effects; want 1", i, n)
		}
	}
	if p := processed.Load(); p != all-before {
		t.Errorf("%d claims processed after the first %d; want %d", p, before, all-before)
	}
	legacy, events := b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_messages_legacy`), b.count(t, `SELECT count(*) FROM `+b.schema+`.processed_events`)
	if legacy < all*3/4 || events == 0 || legacy+events != all {
		t.Errorf("%d legacy rows and %d in processed_events; want at least %d legacy, some in processed_events, %d in all", legacy, events, all*3/4, all)
	}
	t.Logf("rows: %d legacy, %d in generations", legacy, events)
	for _, k := range []string{"evt_005", "evt_199"} {
		if got, err := inboxes[0].Lookup(ctx, k); err != nil || len(got) != 1 {
			t.Errorf("Lookup(%s) = %+v, %v; want one row", k, got, err)
		}
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO `+b.schema+`.processed_messages_legacy (handler, event_id) VALUES ('warehouse', 'evt_late')`); err == nil {
		t.Error("a new row went into the legacy table; it must be closed")
	}

	// The legacy rows pass the retention: deleted, the table dropped, the layout without it.
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.processed_messages_legacy SET seen_at = now() - interval '40 days'`); err != nil {
		t.Fatal(err)
	}
	r, err := inbox.Rotate(inboxes[1], inbox.DefaultRetention)
	if err != nil || int(r.LegacyDeleted) != legacy || !r.LegacyDropped {
		t.Fatalf("rotation = %+v, %v; want %d legacy rows deleted and the table dropped", r, err, legacy)
	}
	if _, err := inboxes[2].Lookup(ctx, "evt_199"); err != nil { // it read both tables through the view, now gone
		t.Errorf("Lookup by a process that knew the legacy table, after its drop: %v", err)
	}
	if r, err := inbox.Rotate(inboxes[3], inbox.DefaultRetention); err != nil || r.LegacyDropped {
		t.Errorf("a rotation by a process that knew the legacy table, after another dropped it = %+v, %v", r, err)
	}
	for _, ib := range inboxes { // each still probed the legacy table
		if out, err := ib.Run(ctx, "warehouse", "evt_199", g.effect("warehouse", "evt_199")); err != nil || (out != inbox.Duplicate && events > 0) {
			t.Errorf("a claim after the legacy table went = %v, %v", out, err)
		}
	}
	var stillLegacy bool
	if err := b.pool.QueryRow(ctx, `SELECT legacy FROM `+b.schema+`.inbox_layout`).Scan(&stillLegacy); err != nil || stillLegacy {
		t.Errorf("layout legacy = %v, %v; want false", stillLegacy, err)
	}
}

// TestReadersFollowTheSwitch (PostgreSQL): processes that read the table layout (Check) and made
// no claim since another process switched the schema to generations (with SwitchToGenerations, as
// `sqsinbox inbox layout generations` does) answer Lookup, List, Stats, Purge and Rotate in the
// new layout, each path in a process of its own; and one that knew the legacy table answers
// Lookup, List and Stats after another process's purge dropped it.
func TestReadersFollowTheSwitch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, &inbox.Config{Retention: time.Hour})
	for _, k := range []string{"evt_old", "evt_before"} {
		if out, err := b.ib.Run(ctx, "warehouse", k, b.genEffect("warehouse", k)); out != inbox.Processed || err != nil {
			t.Fatal(out, err)
		}
	}
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.processed_messages SET seen_at = now() - interval '2 hours' WHERE event_id = 'evt_old'`); err != nil {
		t.Fatal(err)
	}
	idle := map[string]*inbox.Inbox{}
	for _, path := range []string{"Lookup", "List", "Stats", "Purge", "Rotate"} {
		ib, err := inbox.New(newPool(t, 2), &inbox.Config{Schema: b.schema, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := ib.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if kind, _, _ := ib.Layout(ctx); kind != inbox.LayoutTable {
			t.Fatalf("%s's process reads the %s layout before the switch; want table", path, kind)
		}
		idle[path] = ib
	}
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatalf("switch: %v", err)
	}
	if out, err := b.ib.Run(ctx, "warehouse", "evt_after", b.genEffect("warehouse", "evt_after")); out != inbox.Processed || err != nil {
		t.Fatalf("a claim after the switch = %v, %v", out, err) // this process reads the layout at its claim
	}
	keys := func(evs []inbox.ProcessedEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.EventID)
		}
		slices.Sort(out)
		return out
	}
	all := []string{"evt_after", "evt_before", "evt_old"}
	readers := func(name string, ib *inbox.Inbox, want []string) {
		t.Helper()
		for _, k := range want {
			if got, err := ib.Lookup(ctx, k); err != nil || len(got) != 1 {
				t.Errorf("%s: Lookup(%s) = %+v, %v; want one row", name, k, got, err)
			}
		}
		if got, _, err := ib.List(ctx, inbox.ListOptions{Handler: "warehouse"}); err != nil || !slices.Equal(keys(got), want) {
			t.Errorf("%s: List = %v, %v; want %v", name, keys(got), err, want)
		}
		if st, err := ib.Stats(ctx); err != nil || len(st.Handlers) != 1 || st.Handlers[0].Rows != int64(len(want)) {
			t.Errorf("%s: Stats = %+v, %v; want warehouse with %d rows", name, st.Handlers, err, len(want))
		}
	}
	if got, err := idle["Lookup"].Lookup(ctx, "evt_after"); err != nil || len(got) != 1 {
		t.Errorf("Lookup of a key claimed after the switch, by a process idle at it = %+v, %v; want one row", got, err)
	}
	if got, _, err := idle["List"].List(ctx, inbox.ListOptions{Handler: "warehouse"}); err != nil || !slices.Equal(keys(got), all) {
		t.Errorf("List by a process idle at the switch = %v, %v; want %v", keys(got), err, all)
	}
	if st, err := idle["Stats"].Stats(ctx); err != nil || len(st.Handlers) != 1 || st.Handlers[0].Rows != 3 {
		t.Errorf("Stats by a process idle at the switch = %+v, %v; want warehouse with 3 rows", st.Handlers, err)
	}
	readers("a process that read the layout with its Lookup", idle["Lookup"], all)
	// The purge in the generations layout: a rotation, which deletes the legacy row past the
	// retention (the table layout's purge would find processed_messages gone).
	if res, err := idle["Purge"].Purge(ctx); err != nil || res.Deleted != 1 {
		t.Errorf("Purge by a process idle at the switch = %+v, %v; want the old legacy row deleted", res, err)
	}
	if r, err := idle["Rotate"].Rotate(ctx, time.Hour); err != nil || r.Horizon.IsZero() {
		t.Errorf("Rotate by a process idle at the switch = %+v, %v; want a rotation", r, err)
	}
	// The Lookup process knew the legacy table, and the view over both tables, which the purge
	// has not dropped (evt_before is in it, younger than the retention); now it goes.
	if _, err := b.pool.Exec(ctx, `UPDATE `+b.schema+`.processed_messages_legacy SET seen_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if r, err := idle["Rotate"].Rotate(ctx, time.Hour); err != nil || !r.LegacyDropped {
		t.Fatalf("Rotate = %+v, %v; want the legacy table dropped", r, err)
	}
	readers("a process that knew the legacy table, after its drop", idle["Lookup"], []string{"evt_after"})
}

// TestGenerationsHandlerSettings (PostgreSQL): the claim's settings (lock_timeout, and the planner
// settings of the generations' probe) are set back before the handler's statements, in Run,
// RunBatch and RunTx, as the table layout does.
func TestGenerationsHandlerSettings(t *testing.T) {
	t.Parallel()
	g := genSetup(t, &inbox.Config{Retention: time.Hour, LockTimeout: 1234 * time.Millisecond})
	ctx := t.Context()
	var want string
	if err := g.pool.QueryRow(ctx, "SELECT current_setting('lock_timeout') || ' ' || current_setting('enable_seqscan') || ' ' || current_setting('jit')").Scan(&want); err != nil {
		t.Fatal(err)
	}
	check := func(name string) inbox.Func {
		return func(ctx context.Context, tx pgx.Tx) error {
			var got string
			if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout') || ' ' || current_setting('enable_seqscan') || ' ' || current_setting('jit')").Scan(&got); err != nil {
				return err
			}
			if got != want {
				t.Errorf("%s: the handler runs with lock_timeout, enable_seqscan, jit = %s; want %s", name, got, want)
			}
			return nil
		}
	}
	if out, err := g.ib.Run(ctx, "warehouse", "evt_run", check("Run")); out != inbox.Processed || err != nil {
		t.Fatal(out, err)
	}
	res, _ := g.ib.RunBatch(ctx, []inbox.Item{{Handler: "warehouse", Key: "evt_b1", Fn: check("RunBatch")}, {Handler: "warehouse", Key: "evt_run", Fn: check("RunBatch")}}, nil)
	if res[0].Outcome != inbox.Processed || res[1].Outcome != inbox.Duplicate {
		t.Fatalf("RunBatch: %+v", res)
	}
	if out, err := g.ib.RunTx(ctx, mustBegin(t, g.bundle), "warehouse", "evt_tx", check("RunTx")); out != inbox.Processed || err != nil {
		t.Fatal(out, err)
	}
}

// TestRotateReports (PostgreSQL): Rotate refuses the table layout and an age under the retention,
// and in the generations layout reports the time it spent detaching and dropping a generation
// past the retention, which is gone after it.
func TestRotateReports(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, &inbox.Config{Retention: time.Hour})
	if _, err := b.ib.Rotate(ctx, time.Hour); err == nil || !strings.Contains(err.Error(), "table layout") {
		t.Errorf("Rotate in the table layout: %v; want a refusal naming the table layout", err)
	}
	g := genSetup(t, &inbox.Config{Retention: time.Hour})
	if _, err := g.ib.Rotate(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "shorter than the retention") {
		t.Errorf("Rotate under the retention: %v; want a refusal", err)
	}
	if out, err := g.ib.Run(ctx, "warehouse", "evt_old", g.effect("warehouse", "evt_old")); out != inbox.Processed || err != nil {
		t.Fatal(out, err)
	}
	g.clock.advance(2 * time.Hour)
	r, err := g.ib.Rotate(ctx, time.Hour)
	if err != nil || len(r.Dropped) == 0 || r.Detach <= 0 || r.Drop <= 0 {
		t.Fatalf("Rotate = %+v, %v; want generations dropped, with their detach and drop times", r, err)
	}
	if n := g.count(t, `SELECT count(*) FROM `+g.schema+`.processed_events WHERE event_id = 'evt_old'`); n != 0 {
		t.Errorf("the row past the retention is still there (%d)", n)
	}
}
