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

// TestDeliveryRecorded (real PostgreSQL): what Run, RunTx and RunBatch are told of each event's
// delivery is in its row, and Lookup and List return it with the inbox's instance: the SQS message
// id, the queue, the receive count and the trace. A message id that is not a UUID, or a trace id
// that is not 32 hex digits, is not recorded; an event claimed without a Delivery has only the
// instance; two inboxes with different instances record each their own.
func TestDeliveryRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-a"})
	ctx := t.Context()
	const id1, trace1 = "5b1c2e0a-8f3d-4c2b-9a7e-1d2c3b4a5f60", "4bf92f3577b34da6a3ce929d0e0e4736"
	d := inbox.Delivery{MessageID: id1, Queue: "orders", ReceiveCount: 3, TraceID: trace1}
	if _, err := b.ib.Run(inbox.WithDelivery(ctx, d), "warehouse", "evt_run", b.record(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ib.Run(ctx, "warehouse", "evt_bare", b.record(nil)); err != nil {
		t.Fatal(err)
	}
	bad := inbox.Delivery{MessageID: "not-a-uuid", Queue: "orders", ReceiveCount: 1, TraceID: "xyz"}
	if _, err := b.ib.Run(inbox.WithDelivery(ctx, bad), "warehouse", "evt_bad", b.record(nil)); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ib.RunTx(inbox.WithDelivery(ctx, d), tx, "loyalty", "evt_run", b.record(nil)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := inbox.New(b.pool, &inbox.Config{Schema: b.schema, Instance: "task-b"})
	if err != nil {
		t.Fatal(err)
	}
	const id2 = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	items := []inbox.Item{
		{Handler: "billing", Key: "evt_run", Fn: b.record(nil), Delivery: inbox.Delivery{MessageID: id2, Queue: "orders-fifo.fifo", ReceiveCount: 2}},
		{Handler: "billing", Key: "evt_batch", Fn: b.record(nil), Delivery: inbox.Delivery{MessageID: id1, Queue: "orders", ReceiveCount: 1, TraceID: trace1}},
	}
	for i, r := range must(other.RunBatch(ctx, items, nil)) {
		if r.Err != nil || r.Outcome != inbox.Processed {
			t.Fatalf("batch item %d: %v, %v", i, r.Outcome, r.Err)
		}
	}

	got, err := b.ib.Lookup(ctx, "evt_run")
	if err != nil {
		t.Fatal(err)
	}
	want := []inbox.ProcessedEvent{
		{Handler: "billing", EventID: "evt_run", MessageID: id2, Queue: "orders-fifo.fifo", Instance: "task-b", ReceiveCount: 2},
		{Handler: "loyalty", EventID: "evt_run", MessageID: id1, Queue: "orders", Instance: "task-a", ReceiveCount: 3, TraceID: trace1},
		{Handler: "warehouse", EventID: "evt_run", MessageID: id1, Queue: "orders", Instance: "task-a", ReceiveCount: 3, TraceID: trace1},
	}
	if len(got) != len(want) {
		t.Fatalf("Lookup(evt_run) = %+v; want %+v", got, want)
	}
	for i := range want {
		got[i].SeenAt = time.Time{}
		if got[i] != want[i] {
			t.Errorf("Lookup(evt_run)[%d] = %+v; want %+v", i, got[i], want[i])
		}
	}
	page, _, err := b.ib.List(ctx, inbox.ListOptions{Handler: "warehouse"})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]inbox.ProcessedEvent{}
	for _, p := range page {
		p.SeenAt = time.Time{}
		byKey[p.EventID] = p
	}
	if p := byKey["evt_bare"]; p != (inbox.ProcessedEvent{Handler: "warehouse", EventID: "evt_bare", Instance: "task-a"}) {
		t.Errorf("an event claimed without a Delivery lists as %+v; want the instance only", p)
	}
	if p := byKey["evt_bad"]; p != (inbox.ProcessedEvent{Handler: "warehouse", EventID: "evt_bad", Queue: "orders", Instance: "task-a", ReceiveCount: 1}) {
		t.Errorf("an event with a malformed message id and trace lists as %+v; want neither recorded", p)
	}
	if n := b.count(t, `SELECT count(*) FROM `+b.schema+`.inbox_sources`); n != 4 {
		t.Errorf("%d sources recorded; want 4: (orders, task-a), (\"\", task-a), (orders-fifo.fifo, task-b), (orders, task-b)", n)
	}
}

func must[T, S any](v T, _ S) T { return v }
