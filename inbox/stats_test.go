package inbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestStats (real PostgreSQL): rows per handler with their ages, and the purge horizon from the
// database's clock; an unmigrated schema says so.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Retention: 48 * time.Hour})
	for _, c := range []struct{ handler, key string }{{"warehouse", "a"}, {"warehouse", "b"}, {"loyalty", "a"}} {
		if _, err := b.ib.Run(t.Context(), c.handler, c.key, b.record(nil)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := b.ib.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Handlers) != 2 || st.Handlers[0].Handler != "loyalty" || st.Handlers[0].Rows != 1 ||
		st.Handlers[1].Handler != "warehouse" || st.Handlers[1].Rows != 2 {
		t.Fatalf("handlers %+v, want loyalty 1, warehouse 2", st.Handlers)
	}
	if h := st.Handlers[1]; h.Oldest.After(h.Newest) || h.Newest.After(st.Now) {
		t.Errorf("warehouse oldest %v, newest %v, now %v", h.Oldest, h.Newest, st.Now)
	}
	if d := st.Now.Sub(st.PurgeHorizon); d != 48*time.Hour {
		t.Errorf("purge horizon %v before now, want the retention 48h", d)
	}
	bare, err := inbox.New(b.pool, &inbox.Config{Schema: "no_such_schema"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Stats(t.Context()); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("Stats on an unmigrated schema = %v, want ErrNotMigrated", err)
	}
}

// TestOldest (real PostgreSQL): the oldest row's time, zero for an empty inbox, in the table
// layout (its seen_at) and in the generations layout (the start of its oldest generation, which
// the purge drops whole).
func TestOldest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	if oldest, now, err := b.ib.Oldest(ctx); err != nil || !oldest.IsZero() || now.IsZero() {
		t.Fatalf("empty inbox: oldest %v, now %v, %v; want zero, the clock, nil", oldest, now, err)
	}
	if _, err := b.pool.Exec(ctx, "INSERT INTO "+b.schema+".processed_messages (handler, event_id, seen_at) VALUES "+
		"('h', 'old', now() - interval '3 days'), ('h', 'new', now())"); err != nil {
		t.Fatal(err)
	}
	oldest, now, err := b.ib.Oldest(ctx)
	if err != nil || now.Sub(oldest).Round(time.Hour) != 72*time.Hour {
		t.Fatalf("table layout: oldest %v, now %v, %v; want three days before now", oldest, now, err)
	}
	if _, err := b.pool.Exec(ctx, "DELETE FROM "+b.schema+".processed_messages"); err != nil {
		t.Fatal(err)
	}
	if err := inbox.SwitchToGenerations(ctx, b.pool, b.schema, time.Hour); err != nil {
		t.Fatal(err)
	}
	g := time.Now().Add(-5*24*time.Hour).Unix() / 3600
	if _, err := b.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %[1]s.processed_events_g%[2]d PARTITION OF %[1]s.processed_events FOR VALUES IN (%[2]d)", b.schema, g)); err != nil {
		t.Fatal(err)
	}
	oldest, _, err = b.ib.Oldest(ctx)
	if want := time.Unix(g*3600, 0); err != nil || !oldest.Equal(want) {
		t.Fatalf("generations layout: oldest %v, %v; want the oldest generation's start %v", oldest, err, want)
	}
}
