package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/examples/payments/provider"
	"github.com/sqsinbox/sqsinbox/harness/exampletest"
	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/workerapp"
)

// The tests run the example as its main does, in this process, with the local provider it
// starts, against real servers: PostgreSQL from pgtest (a throwaway cluster, or
// TEST_DATABASE_URL) and GoAws v0.5.4 from sqstest (or the server AWS_ENDPOINT_URL_SQS names).
var srv exampletest.Servers

func TestMain(m *testing.M) { exampletest.Main(m, "payments", &srv) }

// TestOneChargePerEvent sends OrderPaid events, a fifth of them two to five times, and checks
// one charge per order at the provider and one recorded locally, with the same charge id.
func TestOneChargePerEvent(t *testing.T) {
	srv.Migrate(t, newSpec(nil))
	q := srv.Queue(t, "payments")
	run := srv.Start(t, newSpec(nil), q.URL, workerapp.Options{})
	events := exampletest.Events("pay1", 200, 30)
	msgs := exampletest.Messages(events)
	srv.Send(t, q.URL, msgs)
	srv.WaitDrained(t, q.URL, time.Minute)
	waitProcessed(t, run, len(events))
	run.Stop(t)
	checkCharges(t, events)
	if d, want := run.Metrics.Get(worker.Duplicates), len(msgs)-len(events); d < want {
		t.Errorf("the worker suppressed %d duplicates, want at least %d", d, want)
	}
}

// TestCrashAfterCharge makes every event's first attempt fail after the provider charged and
// before the local commit: half of them by an error (the connection broke after the provider
// answered), half by a panic (the process crashing there). The inbox rolls back, SQS delivers
// again, the handler sends the same Idempotency-Key, the provider replays the charge: one
// charge per event in all.
func TestCrashAfterCharge(t *testing.T) {
	srv.Migrate(t, newSpec(nil))
	q := srv.Queue(t, "payments")
	crash := &crashAfterCharge{next: http.DefaultTransport, calls: map[string]int{}}
	// No Client.Timeout: with one, each request the transport's panic cuts off would leave
	// net/http's timeout goroutine behind until it fires (the handler's context bounds the call).
	spec := newSpec(&http.Client{Transport: crash})
	run := srv.Start(t, spec, q.URL, workerapp.Options{Worker: worker.Config{
		Backoff: func(int) time.Duration { return 0 }, // redeliver at once
	}})
	events := exampletest.Events("pay2", 100, 30)
	srv.Send(t, q.URL, exampletest.Messages(events))
	srv.WaitDrained(t, q.URL, time.Minute)
	waitProcessed(t, run, len(events))
	run.Stop(t)
	checkCharges(t, events)
	if f := run.Metrics.Get(worker.Failed); f < len(events) {
		t.Errorf("%d handler failures, want at least one per event (%d): the fault was not injected", f, len(events))
	}
	if r := crash.replays.Load(); r < int64(len(events)) {
		t.Errorf("the provider replayed %d responses, want at least one per event (%d)", r, len(events))
	}
}

func waitProcessed(t *testing.T, run *exampletest.Running, n int) {
	t.Helper()
	sqstest.WaitFor(t, 30*time.Second, "every event processed", func() (bool, string) {
		p := run.Metrics.Get(worker.Processed)
		return p >= n, fmt.Sprintf("%d processed", p)
	})
}

// checkCharges checks one provider charge and one local record per event's order, with the same
// charge id.
func checkCharges(t *testing.T, events []exampletest.Event) {
	t.Helper()
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.OrderID
	}
	checkOrders(t, ids)
}

// checkOrders checks one provider charge and one local record per order, with the same charge id.
func checkOrders(t *testing.T, ids []string) {
	t.Helper()
	pool := srv.Pool(t)
	rows, err := pool.Query(t.Context(), `SELECT o.id,
  (SELECT count(*) FROM provider.charges c WHERE c.order_id = o.id),
  (SELECT count(*) FROM payments.charges c WHERE c.order_id = o.id),
  (SELECT count(*) FROM payments.charges l JOIN provider.charges p ON p.id = l.charge_id WHERE l.order_id = o.id)
FROM unnest($1::text[]) AS o(id)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var atProvider, local, matched int
		if err := rows.Scan(&id, &atProvider, &local, &matched); err != nil {
			t.Fatal(err)
		}
		n++
		if atProvider != 1 || local != 1 || matched != 1 {
			t.Errorf("order %s: %d charges at the provider, %d recorded, %d matching; want 1 of each", id, atProvider, local, matched)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Fatalf("checked %d orders, want %d", n, len(ids))
	}
}

// crashAfterCharge passes each request to the provider, and fails the first call of each
// Idempotency-Key after the provider has answered: with an error or a panic, in turn.
type crashAfterCharge struct {
	next    http.RoundTripper
	mu      sync.Mutex
	calls   map[string]int
	replays atomic.Int64
}

func (c *crashAfterCharge) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.Header.Get(provider.ReplayedHeader) == "true" {
		c.replays.Add(1)
	}
	c.mu.Lock()
	key := r.Header.Get("Idempotency-Key")
	c.calls[key]++
	first, nth := c.calls[key] == 1, len(c.calls)
	c.mu.Unlock()
	if !first {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if nth%2 == 0 {
		panic("crash: the provider charged, the local commit never happens")
	}
	return nil, errors.New("connection lost after the provider charged")
}
