package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/examples/loyalty/loyalty"
	"github.com/sqsinbox/sqsinbox/examples/warehouse/warehouse"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// The tests run the example as its main does, in this process, against real servers: PostgreSQL
// from pgtest (a throwaway cluster, or TEST_DATABASE_URL) and GoAws v0.5.4 from sqstest (or the
// server AWS_ENDPOINT_URL_SQS names).
var srv exampletest.Servers

func TestMain(m *testing.M) { exampletest.Main(m, "loyalty", &srv) }

// warehouseSpec is the warehouse example, consuming the same events.
var warehouseSpec = workerapp.Spec{
	Name:    warehouse.HandlerName,
	Migrate: warehouse.Migrate,
	Handler: func(_ context.Context, d *workerapp.Deps) (worker.Handler, error) { return warehouse.New(d.Inbox) },
}

// TestPointsOncePerEvent sends the same OrderPaid events, a fifth of them two to five times, to
// a loyalty queue and to a warehouse queue (as an SNS fan-out would), with both workers on one
// database and one inbox. Each customer must have 50 points per distinct event, and each order
// one pick task: each handler deduplicates for itself, and neither steals the other's events.
func TestPointsOncePerEvent(t *testing.T) {
	srv.Migrate(t, spec)
	srv.Migrate(t, warehouseSpec)
	pool := srv.Pool(t)
	lq, wq := srv.Queue(t, "loyalty"), srv.Queue(t, "warehouse")
	l := srv.Start(t, spec, lq.URL, workerapp.Options{})
	w := srv.Start(t, warehouseSpec, wq.URL, workerapp.Options{})

	events := exampletest.Events("loy", 300, 37)
	srv.Send(t, lq.URL, exampletest.Messages(events))
	srv.Send(t, wq.URL, exampletest.Messages(events))
	want := map[string]int64{}
	ids := make([]string, len(events))
	for i, e := range events {
		want[e.CustomerID] += loyalty.PointsPerOrder
		ids[i] = e.OrderID
	}

	// Two minutes: a receive whose response is lost on a loaded machine leaves its messages
	// invisible for the queue's 30 s visibility timeout, and they are handled when they return.
	srv.WaitDrained(t, lq.URL, 2*time.Minute)
	srv.WaitDrained(t, wq.URL, 2*time.Minute)
	sqstest.WaitFor(t, 30*time.Second, "every event handled by both", func() (bool, string) {
		lp, wp := l.Metrics.Get(worker.Processed), w.Metrics.Get(worker.Processed)
		return lp >= len(events) && wp >= len(events), fmt.Sprintf("loyalty processed %d, warehouse %d", lp, wp)
	})
	l.Stop(t)
	w.Stop(t)

	got, err := loyalty.Points(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	for c, p := range want {
		if got[c] != p {
			t.Errorf("customer %s has %d points, want %d (50 × its distinct events)", c, got[c], p)
		}
	}
	tasks, err := warehouse.PickTasks(t.Context(), pool, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if tasks[id] != 1 {
			t.Errorf("order %s has %d pick tasks, want 1", id, tasks[id])
		}
	}
	var rows map[string]int
	r, err := pool.Query(t.Context(), `SELECT handler, count(*)::int FROM sqsinbox.processed_messages WHERE event_id LIKE 'evt_loy_%' GROUP BY handler`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rows = map[string]int{}
	for r.Next() {
		var h string
		var n int
		if err := r.Scan(&h, &n); err != nil {
			t.Fatal(err)
		}
		rows[h] = n
	}
	if rows["loyalty"] != len(events) || rows["warehouse"] != len(events) {
		t.Errorf("inbox rows per handler: %v, want %d each", rows, len(events))
	}
	if p := l.Metrics.Get(worker.Processed); p != len(events) {
		t.Errorf("loyalty processed %d messages, want one per event (%d)", p, len(events))
	}
}
