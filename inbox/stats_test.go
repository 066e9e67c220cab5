package inbox_test

import (
	"errors"
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
