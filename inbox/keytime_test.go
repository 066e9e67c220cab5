package inbox_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// The keytime layout, on a real PostgreSQL, with the generations tests' fake clock (genLen
// generations, rotated at each step).

// v7 is a UUIDv7 of time at, the n-th made in its millisecond.
func v7(at time.Time, n int) string {
	ms := uint64(at.UnixMilli())
	return fmt.Sprintf("%08x-%04x-7%03x-%04x-%012x", ms>>16, ms&0xffff, n&0xfff, 0x8000|(n>>12)&0x3fff, (uint64(n)*0x9e3779b97f4a7c15)&0xffffffffffff)
}

// ulid is a ULID of time at, with n for its random part.
func ulid(at time.Time, n int) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	b := make([]byte, 26)
	ms, r := uint64(at.UnixMilli()), uint64(n)*0x9e3779b97f4a7c15
	for i := 9; i >= 0; i-- {
		b[i], ms = alphabet[ms&31], ms>>5
	}
	for i := 25; i >= 10; i-- {
		b[i], r = alphabet[r&31], r>>5
	}
	return string(b)
}

// keyTimes are keys and the times they carry: RFC 9562's example UUIDv7 and the ULID spec's
// example, in either case.
var keyTimes = map[string]time.Time{
	"017F22E2-79B0-7CC3-98C4-DC0C0C07398F": time.Date(2022, 2, 22, 19, 22, 22, 0, time.UTC),
	"017f22e2-79b0-7cc3-98c4-dc0c0c07398f": time.Date(2022, 2, 22, 19, 22, 22, 0, time.UTC),
	"01ARZ3NDEKTSV4RRFFQ69G5FAV":           time.UnixMilli(1469922850259),
	"01arz3ndektsv4rrffq69g5fav":           time.UnixMilli(1469922850259),
}

// noKeyTimes are keys that carry no time.
var noKeyTimes = []string{
	"f47ac10b-58cc-4372-a567-0e02b2c3d479", // version 4
	"017f22e2-79b0-7cc3-c8c4-dc0c0c07398f", // variant
	"017f22e2-79b0-7cc3-98c4-dc0c0c07398g", // not hex
	"017f22e279b07cc398c4dc0c0c07398f",     // no dashes
	"017f22e2-79b0-7cc3-98c4_dc0c0c07398f", // a dash missing
	"01ARZ3NDEKTSV4RRFFQ69G5FAU",           // U is not Crockford's
	"01ARZ3NDEKTSV4RRFFQ69G5FAI",           // nor I
	"81ARZ3NDEKTSV4RRFFQ69G5FAV",           // more than 128 bits
	"01ARZ3NDEKTSV4RRFFQ69G5FA",            // 25 characters
	"evt_1", "", "order-9f3k/ship",
}

// TestKeyTime (no server): the time of a UUIDv7 (RFC 9562's example, and keys made here) and of
// a ULID (the spec's example), in either case; any other key carries none.
func TestKeyTime(t *testing.T) {
	t.Parallel()
	for key, want := range keyTimes {
		if got, ok := inbox.KeyTime(key); !ok || !got.Equal(want) {
			t.Errorf("KeyTime(%s) = %v, %v; want %v", key, got, ok, want)
		}
	}
	for _, at := range []time.Time{time.UnixMilli(0), time.Date(2026, 12, 1, 0, 0, 0, 123e6, time.UTC), time.UnixMilli(1<<48 - 1)} {
		for _, k := range []string{v7(at, 7), ulid(at, 7)} {
			if got, ok := inbox.KeyTime(k); !ok || !got.Equal(at) {
				t.Errorf("KeyTime(%s) = %v, %v; want %v", k, got, ok, at)
			}
		}
	}
	for _, key := range noKeyTimes {
		if got, ok := inbox.KeyTime(key); ok {
			t.Errorf("KeyTime(%q) = %v; want none", key, got)
		}
	}
}

// FuzzKeyTime (no server): KeyTime never panics; a key it reads a time from is a UUIDv7 or a
// ULID, of a time within 48 bits of milliseconds, which the key spells (made again from the
// time, its leading characters are the key's), whatever the key's case.
func FuzzKeyTime(f *testing.F) {
	for k := range keyTimes {
		f.Add(k)
	}
	for _, k := range append(noKeyTimes, ordinaryID) {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		at, ok := inbox.KeyTime(key)
		if !ok {
			return
		}
		if ms := at.UnixMilli(); ms < 0 || ms >= 1<<48 {
			t.Fatalf("KeyTime(%q) = %v: outside 48 bits of milliseconds", key, at)
		}
		switch len(key) {
		case 36:
			if want := v7(at, 0)[:13]; !strings.EqualFold(key[:13], want) {
				t.Fatalf("KeyTime(%q) = %v, which a UUIDv7 spells %s", key, at, want)
			}
		case 26:
			if want := ulid(at, 0)[:10]; !strings.EqualFold(key[:10], want) {
				t.Fatalf("KeyTime(%q) = %v, which a ULID spells %s", key, at, want)
			}
		default:
			t.Fatalf("KeyTime(%q) = %v for a key of %d characters", key, at, len(key))
		}
		for _, k := range []string{strings.ToUpper(key), strings.ToLower(key)} {
			if again, ok := inbox.KeyTime(k); !ok || !again.Equal(at) {
				t.Fatalf("KeyTime(%q) = %v, %v; KeyTime(%q) = %v", k, again, ok, key, at)
			}
		}
	})
}

func ktSetup(t *testing.T, cfg *inbox.Config) *genBundle {
	t.Helper()
	return layoutSetup(t, cfg, inbox.SwitchToKeyTime)
}

// gensOf returns the generations that hold the row of handler warehouse and key.
func (g *genBundle) gensOf(t *testing.T, key string) []int32 {
	t.Helper()
	rows, err := g.pool.Query(t.Context(), `SELECT gen FROM `+g.schema+`.processed_events WHERE handler = 'warehouse' AND event_id = $1 ORDER BY gen`, key)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return gens
}

func genOf(at time.Time) int32 { return int32(at.Unix() / int64(genLen/time.Second)) }

// waitClaimWaiter waits until a session waits for a lock in a statement that names the test's schema.
func (g *genBundle) waitClaimWaiter(t *testing.T) {
	t.Helper()
	sqlWait(t, g.bundle, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%`+g.schema+`%'`, 1)
}

// TestKeyTimeRouting (PostgreSQL): in the keytime layout a key that carries its time, claimed
// while its generation is current or ahead, is one row in that generation, claimed without the
// key's advisory lock (a session holding it does not hold the claim up), and a claim of it still
// waits for an uncommitted holder (commit: a duplicate; rollback: processed). A key claimed after
// its generation ended is recorded in its generation and in the current one, and the latter
// alone still makes it a duplicate. A key whose time is older than the generations routed to, or
// that carries none, goes to the current generation. A key more than 5 minutes ahead is refused
// with ErrKeyTimeAhead by Run, RunTx and (alone in its batch) RunBatch, and applies nothing.
func TestKeyTimeRouting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	g := ktSetup(t, &inbox.Config{Retention: time.Hour, LockTimeout: 2 * time.Second})
	if kind, gl, err := g.ib.Layout(ctx); kind != inbox.LayoutKeyTime || gl != genLen || err != nil {
		t.Fatalf("Layout = %s, %v, %v; want keytime of %v", kind, gl, err, genLen)
	}
	other := g.newInbox(t)
	now := g.clock.now()
	run := func(ib *inbox.Inbox, key string) (inbox.Outcome, error) {
		return ib.Run(ctx, "warehouse", key, g.effect("warehouse", key))
	}

	// Fast: one row in the key's generation, without the key's advisory lock.
	fast := v7(now.Add(10*time.Second), 1)
	lockConn, err := g.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Release()
	if _, err := lockConn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1 || E'\x01' || 'warehouse' || E'\x01' || $2, 0))`, g.schema, fast); err != nil {
		t.Fatal(err)
	}
	if out, err := run(g.ib, fast); out != inbox.Processed || err != nil {
		t.Fatalf("a fast key while its advisory lock is held elsewhere = %v, %v; want processed (no lock taken)", out, err)
	}
	if _, err := lockConn.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	ahead := ulid(now.Add(3*time.Minute), 2)
	for key, want := range map[string][]int32{fast: {genOf(now)}, ahead: {genOf(now.Add(3 * time.Minute))}} {
		if key == ahead {
			if out, err := run(other, key); out != inbox.Processed || err != nil {
				t.Fatalf("%s, 3 minutes ahead = %v, %v; want processed", key, out, err)
			}
		}
		if got := g.gensOf(t, key); !slices.Equal(got, want) {
			t.Errorf("%s is in generations %v; want %v", key, got, want)
		}
		if out, err := run(other, key); out != inbox.Duplicate || err != nil {
			t.Errorf("%s again = %v, %v; want a duplicate", key, out, err)
		}
	}

	// An uncommitted holder of a fast key holds up its other claims until it ends.
	for _, commit := range []bool{true, false} {
		key := v7(now.Add(20*time.Second), map[bool]int{true: 3, false: 4}[commit])
		tx := mustBegin(t, g.bundle)
		if out, err := g.ib.RunTx(ctx, tx, "warehouse", key, g.effect("warehouse", key)); out != inbox.Processed || err != nil {
			t.Fatalf("holder: %v, %v", out, err)
		}
		done := make(chan inbox.Outcome, 1)
		go func() {
			out, err := run(other, key)
			if err != nil {
				t.Error(err)
			}
			done <- out
		}()
		g.waitClaimWaiter(t)
		end, want := tx.Rollback, inbox.Processed
		if commit {
			end, want = tx.Commit, inbox.Duplicate
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		if out := <-done; out != want {
			t.Errorf("commit=%v: the claim that waited = %v; want %v", commit, out, want)
		}
		if n := g.effects(t, "warehouse", key); n != 1 {
			t.Errorf("commit=%v: %d effects; want 1", commit, n)
		}
	}

	// Late: its generation ended before the claim; recorded there and in the current one.
	g.step(t)
	now = g.clock.now()
	late := v7(now.Add(-30*time.Second), 5)
	if out, err := run(g.ib, late); out != inbox.Processed || err != nil {
		t.Fatalf("a late key = %v, %v", out, err)
	}
	if got, want := g.gensOf(t, late), []int32{genOf(now) - 1, genOf(now)}; !slices.Equal(got, want) {
		t.Errorf("the late key is in generations %v; want %v", got, want)
	}
	if got, err := other.Lookup(ctx, late); err != nil || len(got) != 1 {
		t.Errorf("Lookup of the late key = %+v, %v; want one row", got, err)
	}
	// Without the row in its own generation (as after that generation's drop), the current one's
	// makes it a duplicate: routed (it is in the current generation) and, 12 minutes on, not.
	if _, err := g.pool.Exec(ctx, `DELETE FROM `+g.schema+`.processed_events WHERE event_id = $1 AND gen = $2`, late, genOf(now)-1); err != nil {
		t.Fatal(err)
	}
	if out, err := run(other, late); out != inbox.Duplicate || err != nil {
		t.Errorf("the late key with only its copy = %v, %v; want a duplicate", out, err)
	}
	for range 12 {
		g.step(t)
	}
	if out, err := run(other, late); out != inbox.Duplicate || err != nil {
		t.Errorf("the late key, no longer routed = %v, %v; want a duplicate", out, err)
	}
	if got := g.gensOf(t, late); !slices.Equal(got, []int32{genOf(now)}) {
		t.Errorf("the late key is in generations %v after a claim not routed; want only %v", got, genOf(now))
	}

	// Not routed: older than the generations routed to, or no time.
	now = g.clock.now()
	for _, key := range []string{v7(now.Add(-3*time.Hour), 6), "evt_plain"} {
		if out, err := run(g.ib, key); out != inbox.Processed || err != nil {
			t.Fatalf("%s = %v, %v", key, out, err)
		}
		if got := g.gensOf(t, key); !slices.Equal(got, []int32{genOf(now)}) {
			t.Errorf("%s is in generations %v; want the current one, %d", key, got, genOf(now))
		}
	}

	// Too far ahead: refused, alone.
	far := v7(now.Add(6*time.Minute), 7)
	if _, err := run(g.ib, far); !errors.Is(err, inbox.ErrKeyTimeAhead) {
		t.Errorf("Run of a key 6 minutes ahead: %v; want ErrKeyTimeAhead", err)
	}
	tx := mustBegin(t, g.bundle)
	if _, err := g.ib.RunTx(ctx, tx, "warehouse", far, g.effect("warehouse", far)); !errors.Is(err, inbox.ErrKeyTimeAhead) {
		t.Errorf("RunTx of a key 6 minutes ahead: %v; want ErrKeyTimeAhead", err)
	}
	_ = tx.Rollback(ctx)
	batch := []string{v7(now, 8), far, ulid(now, 9), "evt_plain2"}
	var items []inbox.Item
	for _, k := range batch {
		items = append(items, inbox.Item{Handler: "warehouse", Key: k, Fn: g.effect("warehouse", k)})
	}
	res, _ := other.RunBatch(ctx, items, nil)
	for i, r := range res {
		if i == 1 {
			if !errors.Is(r.Err, inbox.ErrKeyTimeAhead) {
				t.Errorf("RunBatch's key 6 minutes ahead: %v, %v; want ErrKeyTimeAhead", r.Outcome, r.Err)
			}
			continue
		}
		if r.Outcome != inbox.Processed || r.Err != nil {
			t.Errorf("RunBatch's %s = %v, %v; want processed", batch[i], r.Outcome, r.Err)
		}
	}
	if n := g.effects(t, "warehouse", far) + len(g.gensOf(t, far)); n != 0 {
		t.Errorf("the refused key left %d effects and rows; want none", n)
	}
}

// TestKeyTimeOneEffect (PostgreSQL): 8 processes whose clocks disagree by up to 4.5 minutes (the
// bound is 5) claim the same keys, half with Run and half with RunBatch, while the generations switch
// under them (a step a rotation). The keys carry times from 3 hours before the start to 3
// minutes after it, or none, so that each passes from fast to late to not routed during the run,
// at different moments for different processes. Each key is applied exactly once.
func TestKeyTimeOneEffect(t *testing.T) {
	t.Parallel()
	g := ktSetup(t, &inbox.Config{Retention: 2 * time.Hour})
	t0 := g.clock.now()
	offsets := []time.Duration{0, 20 * time.Second, -50 * time.Second, -3 * time.Minute, 3 * time.Minute, -9 * time.Minute, -11 * time.Minute, -3 * time.Hour}
	var keys []string
	for i := range 40 {
		at := t0.Add(offsets[i%len(offsets)])
		switch i % 10 {
		case 9:
			keys = append(keys, fmt.Sprintf("evt_%02d", i))
		case 8:
			keys = append(keys, ulid(at, i))
		default:
			keys = append(keys, v7(at, i))
		}
	}
	var processed atomic.Int64
	stop, stepped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stepped)
		for range 30 { // 30 minutes: well within the retention, so nothing is forgotten
			select {
			case <-stop:
				return
			default:
			}
			g.step(t)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	skews := []time.Duration{0, 135 * time.Second, -135 * time.Second, 2 * time.Minute, -2 * time.Minute, time.Minute, -time.Minute, 90 * time.Second}
	for w := range 8 {
		ib := g.newInbox(t)
		inbox.SetClock(ib, func() time.Time { return g.clock.now().Add(skews[w]) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.claimRounds(t, ib, w, 6, keys, &processed, errs, func(err error) bool { return errors.Is(err, inbox.ErrKeyTimeAhead) })
		}()
	}
	wg.Wait()
	close(stop)
	<-stepped
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fx := g.effectsByKey(t)
	for _, k := range keys {
		if n := fx[k]; n != 1 {
			t.Errorf("%s has %d effects; want 1", k, n)
		}
		if n := len(g.gensOf(t, k)); n < 1 || n > 2 {
			t.Errorf("%s has %d rows; want 1 or 2", k, n)
		}
	}
	if p := processed.Load(); p != int64(len(keys)) {
		t.Errorf("%d claims processed; want %d", p, len(keys))
	}
	t.Logf("rows: %d for %d keys", g.count(t, `SELECT count(*) FROM `+g.schema+`.processed_events`), len(keys))
}

// ordinaryID is a 26-character lowercase id of the kind many systems make: it happens to spell a
// ULID (Crockford's characters, the first from 0 to 7) of a time in the year 6415.
const ordinaryID = "3zk8h2m9q4x7c1v5b6n0p2r8t4"

// TestKeyTimeFarAhead (PostgreSQL): in the keytime layout an ordinary id that spells a ULID of a
// far year is claimed as a key without a time (in the current generation) by Run, RunBatch and
// RunTx, once; a key whose time is a minute past the horizon (the retention and a day ahead) is
// too; one a minute inside it is refused with ErrKeyTimeAhead, with an error that says how far
// ahead it is in days or hours, not an overflowed duration.
func TestKeyTimeFarAhead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if at, ok := inbox.KeyTime(ordinaryID); !ok || at.Year() < 5000 {
		t.Fatalf("KeyTime(%s) = %v, %v; want a time in a far year (the test needs one)", ordinaryID, at, ok)
	}
	g := ktSetup(t, &inbox.Config{Retention: time.Hour})
	other := g.newInbox(t)
	now := g.clock.now()
	if out, err := g.ib.Run(ctx, "warehouse", ordinaryID, g.effect("warehouse", ordinaryID)); out != inbox.Processed || err != nil {
		t.Fatalf("Run of %s = %v, %v; want processed", ordinaryID, out, err)
	}
	if got := g.gensOf(t, ordinaryID); !slices.Equal(got, []int32{genOf(now)}) {
		t.Errorf("%s is in generations %v; want the current one, %d", ordinaryID, got, genOf(now))
	}
	if out, err := other.Run(ctx, "warehouse", ordinaryID, g.effect("warehouse", ordinaryID)); out != inbox.Duplicate || err != nil {
		t.Errorf("Run of %s again = %v, %v; want a duplicate", ordinaryID, out, err)
	}
	res, _ := other.RunBatch(ctx, []inbox.Item{{Handler: "warehouse", Key: ordinaryID, Fn: g.effect("warehouse", ordinaryID)}}, nil)
	if res[0].Outcome != inbox.Duplicate || res[0].Err != nil {
		t.Errorf("RunBatch of %s = %v, %v; want a duplicate", ordinaryID, res[0].Outcome, res[0].Err)
	}
	tx := mustBegin(t, g.bundle)
	if out, err := other.RunTx(ctx, tx, "warehouse", ordinaryID, g.effect("warehouse", ordinaryID)); out != inbox.Duplicate || err != nil {
		t.Errorf("RunTx of %s = %v, %v; want a duplicate", ordinaryID, out, err)
	}
	_ = tx.Rollback(ctx)
	if n := g.effects(t, "warehouse", ordinaryID); n != 1 {
		t.Errorf("%s has %d effects; want 1", ordinaryID, n)
	}

	horizon := time.Hour + 24*time.Hour
	past, inside := v7(now.Add(horizon+time.Minute), 1), v7(now.Add(horizon-time.Minute), 2)
	res, _ = g.ib.RunBatch(ctx, []inbox.Item{{Handler: "warehouse", Key: past, Fn: g.effect("warehouse", past)}}, nil)
	if res[0].Outcome != inbox.Processed || res[0].Err != nil {
		t.Errorf("RunBatch of a key a minute past the horizon = %v, %v; want processed", res[0].Outcome, res[0].Err)
	}
	if got := g.gensOf(t, past); !slices.Equal(got, []int32{genOf(now)}) {
		t.Errorf("the key past the horizon is in generations %v; want the current one, %d", got, genOf(now))
	}
	_, err := g.ib.Run(ctx, "warehouse", inside, g.effect("warehouse", inside))
	if !errors.Is(err, inbox.ErrKeyTimeAhead) {
		t.Fatalf("Run of a key a minute inside the horizon: %v; want ErrKeyTimeAhead", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "24h59m0s ahead") || !strings.Contains(msg, "up to 25h0m0s ahead") {
		t.Errorf("the refusal says %q; want how far ahead the key is (24h59m0s) and the horizon (25h0m0s)", msg)
	}
	if n := g.effects(t, "warehouse", inside) + len(g.gensOf(t, inside)); n != 0 {
		t.Errorf("the refused key left %d effects and rows; want none", n)
	}
}

// TestKeyTimeFarAheadOneEffect (PostgreSQL): a key whose time is a minute past the horizon is
// claimed by 3 processes whose clocks disagree by up to 4 minutes (Run, RunBatch and RunTx), at
// every 2 minutes of the clock for the retention (20 minutes; the generations rotated as they
// go). Each process takes it for a key without a time while it is past its horizon, then refuses
// it: it is applied once. The negative controls run the same claims with a horizon that breaks
// the bound (the clocks' margin, so that no key is refused: a process whose clock is 2 minutes
// ahead routes it while another takes it for one without a time; and 10 minutes, less than the
// retention: a process routes it 6 minutes after another took it for one without a time), and
// the key is applied twice: the test catches a wrong horizon.
func TestKeyTimeFarAheadOneEffect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		horizon time.Duration // 0: the inbox's own
		want    func(int) bool
	}{
		{"the inbox's horizon", 0, func(n int) bool { return n == 1 }},
		{"negative control: the clocks' margin", 5 * time.Minute, func(n int) bool { return n > 1 }},
		{"negative control: less than the retention", 10 * time.Minute, func(n int) bool { return n > 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if n := farAheadEffects(t, c.horizon); !c.want(n) {
				t.Errorf("the key was applied %d times", n)
			}
		})
	}
}

// farAheadEffects runs TestKeyTimeFarAheadOneEffect's claims with horizon (0: the inbox's own)
// and returns how many times the key was applied.
func farAheadEffects(t *testing.T, horizon time.Duration) int {
	t.Helper()
	ctx := t.Context()
	const retention = 20 * time.Minute
	g := ktSetup(t, &inbox.Config{Retention: retention})
	h := cmp.Or(horizon, retention+24*time.Hour)
	key := ulid(g.clock.now().Add(h+time.Minute), 1)
	skews := []time.Duration{0, 2 * time.Minute, -2 * time.Minute}
	var ibs []*inbox.Inbox
	for _, skew := range skews {
		ib := g.newInbox(t)
		inbox.SetClock(ib, func() time.Time { return g.clock.now().Add(skew) })
		if horizon != 0 {
			inbox.SetKeyTimeHorizon(ib, horizon)
		}
		ibs = append(ibs, ib)
	}
	tolerated := func(err error) bool {
		return err == nil || errors.Is(err, inbox.ErrKeyTimeAhead) || errors.Is(err, inbox.ErrClaimBlocked)
	}
	var keyless, refused int
	for at := time.Duration(0); at <= retention; at += 2 * time.Minute {
		for w, ib := range ibs {
			var err error
			switch w {
			case 0:
				_, err = ib.Run(ctx, "warehouse", key, g.effect("warehouse", key))
			case 1:
				res, _ := ib.RunBatch(ctx, []inbox.Item{{Handler: "warehouse", Key: key, Fn: g.effect("warehouse", key)}}, nil)
				err = res[0].Err
			case 2:
				tx := mustBegin(t, g.bundle)
				var out inbox.Outcome
				if out, err = ib.RunTx(ctx, tx, "warehouse", key, g.effect("warehouse", key)); out == inbox.Processed {
					err = tx.Commit(ctx)
				}
				_ = tx.Rollback(ctx)
			}
			if !tolerated(err) {
				t.Fatalf("at +%v, process %d: %v", at, w, err)
			}
			if errors.Is(err, inbox.ErrKeyTimeAhead) {
				refused++
			} else if err == nil && at+skews[w] < time.Minute {
				keyless++
			}
		}
		g.step(t)
		g.step(t)
	}
	if horizon == 0 && (keyless == 0 || refused == 0) {
		t.Errorf("%d claims took the key for one without a time and %d refused it; want some of each", keyless, refused)
	}
	return g.effects(t, "warehouse", key)
}
