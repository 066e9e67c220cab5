package inbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/inbox"
)

// TestLookupAndList (real PostgreSQL): Lookup finds every handler that processed a key, and
// none for a key never processed; List pages through one handler's rows, oldest first, within a
// time range, and refuses a cursor it did not make.
func TestLookupAndList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	for _, h := range []string{"warehouse", "loyalty", "billing"} {
		for i := range 25 {
			if h == "billing" && i > 0 {
				break
			}
			if _, err := b.ib.Run(ctx, h, fmt.Sprintf("evt_%02d", i), b.record(nil)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := b.ib.Lookup(ctx, "evt_00")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Handler != "billing" || got[1].Handler != "loyalty" || got[2].Handler != "warehouse" || got[0].EventID != "evt_00" || got[0].SeenAt.IsZero() {
		t.Errorf("Lookup(evt_00) = %+v; want billing, loyalty and warehouse", got)
	}
	if got, err := b.ib.Lookup(ctx, "evt_07"); err != nil || len(got) != 2 {
		t.Errorf("Lookup(evt_07) = %+v, %v; want loyalty and warehouse", got, err)
	}
	if got, err := b.ib.Lookup(ctx, "evt_never"); err != nil || len(got) != 0 {
		t.Errorf("Lookup of a key never processed = %+v, %v; want none", got, err)
	}
	if _, err := b.ib.Lookup(ctx, ""); err == nil {
		t.Error("Lookup of an empty key: no error")
	}

	var all []inbox.ProcessedEvent
	after, pages := "", 0
	for {
		page, next, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse", Limit: 10, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page...)
		if next == "" {
			break
		}
		after = next
	}
	if len(all) != 25 || pages != 3 {
		t.Fatalf("listed %d rows in %d pages; want 25 in 3", len(all), pages)
	}
	seen := map[string]bool{}
	for i, p := range all {
		if p.Handler != "warehouse" || seen[p.EventID] || (i > 0 && p.SeenAt.Before(all[i-1].SeenAt)) {
			t.Fatalf("row %d %+v: another handler's, repeated, or out of order", i, p)
		}
		seen[p.EventID] = true
	}
	future := all[24].SeenAt.Add(time.Hour)
	if page, _, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse", Since: future}); err != nil || len(page) != 0 {
		t.Errorf("List since an hour after the newest = %d rows, %v; want none", len(page), err)
	}
	if page, _, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse", Until: all[0].SeenAt}); err != nil || len(page) != 0 {
		t.Errorf("List until the oldest (exclusive) = %d rows, %v; want none", len(page), err)
	}
	if _, _, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse", After: "bm90LWEtY3Vyc29y"}); !errors.Is(err, inbox.ErrBadCursor) {
		t.Errorf("List with a made-up cursor = %v; want ErrBadCursor", err)
	}
	if _, _, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse", Limit: 10001}); err == nil {
		t.Error("List with Limit 10001: no error")
	}
	bare, err := inbox.New(b.pool, &inbox.Config{Schema: "no_such_schema"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Lookup(ctx, "evt_00"); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Errorf("Lookup on an unmigrated schema = %v, want ErrNotMigrated", err)
	}
}
