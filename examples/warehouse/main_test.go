package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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

func TestMain(m *testing.M) { exampletest.Main(m, "warehouse", &srv) }

// TestOnePickTaskPerOrder sends OrderPaid events, a fifth of them two to five times, and checks
// that every order got exactly one pick task and is PICKING.
func TestOnePickTaskPerOrder(t *testing.T) {
	srv.Migrate(t, spec)
	srv.Migrate(t, spec) // a second migrate applies nothing and succeeds
	pool := srv.Pool(t)
	q := srv.Queue(t, "warehouse")
	run := srv.Start(t, spec, q.URL, workerapp.Options{})

	events := exampletest.Events("wh", 300, 50)
	msgs := exampletest.Messages(events)
	srv.Send(t, q.URL, msgs)

	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.OrderID
	}
	srv.WaitDrained(t, q.URL, time.Minute)
	sqstest.WaitFor(t, 30*time.Second, "every order to have a pick task", func() (bool, string) {
		got, err := warehouse.PickTasks(t.Context(), pool, ids)
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d orders without one", missing)
	})
	run.Stop(t)

	got, err := warehouse.PickTasks(t.Context(), pool, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("order %s has %d pick tasks, want 1", id, got[id])
		}
	}
	var picking, tasks int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM warehouse.orders WHERE status = 'PICKING' AND id = ANY($1)),
		(SELECT count(*) FROM warehouse.pick_tasks WHERE order_id = ANY($1))`, ids).Scan(&picking, &tasks); err != nil {
		t.Fatal(err)
	}
	if picking != len(ids) || tasks != len(ids) {
		t.Errorf("%d orders PICKING and %d pick tasks, want %d of each", picking, tasks, len(ids))
	}
	if p := run.Metrics.Get(worker.Processed); p != len(events) {
		t.Errorf("the worker processed %d messages, want one per event (%d)", p, len(events))
	}
	if d, want := run.Metrics.Get(worker.Duplicates), len(msgs)-len(events); d < want {
		t.Errorf("the worker suppressed %d duplicates, want at least %d", d, want)
	}
}

// TestStory is the OrderPaid story: evt_9f3k arrives, is processed, and arrives again; the
// second delivery is deleted and the order still has one pick task.
func TestStory(t *testing.T) {
	srv.Migrate(t, spec)
	pool := srv.Pool(t)
	q := srv.Queue(t, "warehouse")
	metricsAddr := freeAddr(t)
	run := srv.Start(t, spec, q.URL, workerapp.Options{Getenv: srv.Getenv(q.URL, "METRICS_ADDR="+metricsAddr)})
	body := `{"id":"evt_9f3k","order_id":"ord_7731","customer_id":"cus_42","amount":4999,"currency":"EUR"}`

	for i, want := range []worker.Counter{worker.Processed, worker.Duplicates} {
		srv.Send(t, q.URL, []sqstest.Message{{Body: body}})
		sqstest.WaitFor(t, 30*time.Second, fmt.Sprintf("delivery %d to be %s", i+1, want), func() (bool, string) {
			return run.Metrics.Get(want) == 1, fmt.Sprintf("%s = %d", want, run.Metrics.Get(want))
		})
		got, err := warehouse.PickTasks(t.Context(), pool, []string{"ord_7731"})
		if err != nil {
			t.Fatal(err)
		}
		if got["ord_7731"] != 1 {
			t.Fatalf("after delivery %d: %d pick tasks, want 1", i+1, got["ord_7731"])
		}
	}
	srv.WaitDrained(t, q.URL, 30*time.Second)

	// METRICS_ADDR serves the worker's counters to Prometheus.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		fmt.Sprintf(`sqsinbox_worker_processed_total{queue=%q} 1`, q.Name),
		fmt.Sprintf(`sqsinbox_worker_duplicates_total{queue=%q} 1`, q.Name),
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// freeAddr returns a local address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestBadMessageGoesToDLQ checks that an OrderPaid without an order id is not dropped: it fails
// until the redrive policy moves it to the dead-letter queue.
func TestBadMessageGoesToDLQ(t *testing.T) {
	if !srv.SQS.GoAws {
		t.Log("a server other than GoAws: the DLQ move takes maxReceiveCount backoffs")
	}
	srv.Migrate(t, spec)
	q := srv.Queue(t, "warehouse")
	run := srv.Start(t, spec, q.URL, workerapp.Options{Worker: worker.Config{
		Backoff: func(int) time.Duration { return 0 },
	}})
	srv.Send(t, q.URL, []sqstest.Message{{Body: `{"id":"evt_bad"}`}})
	sqstest.WaitFor(t, 45*time.Second, "the message in the DLQ", func() (bool, string) {
		n, err := sqstest.Count(t.Context(), srv.SQS.Client(), q.DLQURL)
		if err != nil {
			return false, err.Error()
		}
		return n == 1, fmt.Sprintf("%d in the DLQ, %d failures", n, run.Metrics.Get(worker.Failed))
	})
	if p := run.Metrics.Get(worker.Processed); p != 0 {
		t.Errorf("processed %d, want 0", p)
	}
}

// TestUsage checks that an unknown subcommand is refused, and that a missing database setting
// is named.
func TestUsage(t *testing.T) {
	ctx := context.Background()
	if err := workerapp.Run(ctx, spec, workerapp.Options{Args: []string{"frobnicate"}}); err == nil {
		t.Error("an unknown subcommand was accepted")
	}
	err := workerapp.Run(ctx, spec, workerapp.Options{Getenv: func(string) string { return "" }})
	if !errors.Is(err, workerapp.ErrNoDatabase) || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("without DATABASE_URL: %v", err)
	}
}
