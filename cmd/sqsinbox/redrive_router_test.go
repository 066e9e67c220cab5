package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestRedriveAfterABodyTypedRouter (the pass's SQS server, PostgreSQL): end to end, with no flag
// but --from and --to (and the database). A worker whose Router reads the type from the body
// applies OrderPaid order-42 with orders-paid and fails OrderShipped order-42 (the same id, another
// event) with orders-shipped until SQS dead-letters it; a copy of the OrderPaid sits in the DLQ
// too, as one whose delete failed would. The redrive classifies by the routes the worker
// published when it started: the OrderPaid is deleted, the OrderShipped moved back, and once the
// handler is fixed the worker applies it.
func TestRedriveAfterABodyTypedRouter(t *testing.T) {
	t.Parallel()
	pool, dbArgs := migratedSchema(t, "cli_rdrouter")
	schema := dbArgs[len(dbArgs)-1]
	ib, err := inbox.New(pool, &inbox.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "cli-rdrouter", MaxReceiveCount: 3})
	var fixed atomic.Bool
	router := func() *inboxhandler.Router {
		r, err := inboxhandler.NewRouter(ib, &inboxhandler.RouterConfig{TypeField: "type"})
		if err != nil {
			t.Fatal(err)
		}
		for typ, name := range map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped"} {
			h, err := inboxhandler.New(ib, name, nil, func(context.Context, pgx.Tx, *worker.Message) error {
				if name == "orders-shipped" && !fixed.Load() {
					return errors.New("the carrier is down")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Route(typ, h); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	paid, shipped := `{"id":"order-42","type":"OrderPaid"}`, `{"id":"order-42","type":"OrderShipped"}`
	if err := sqstest.Send(t.Context(), srv.Client(), q.URL, []sqstest.Message{{Body: paid}, {Body: shipped}}); err != nil {
		t.Fatal(err)
	}
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Concurrency: 2, Handler: router(),
		Backoff: func(int) time.Duration { return 0 }})
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 1, 60*time.Second)
	sqstest.WaitCount(t, srv.Client(), q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)
	if err := sqstest.Send(t.Context(), srv.Client(), q.DLQURL, []sqstest.Message{{Body: paid}}); err != nil {
		t.Fatal(err)
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 2, 30*time.Second)

	r := cli(t, "", append([]string{"redrive", "--from", lastPart(q.DLQURL), "--to", q.Name}, dbArgs...)...).mustOK(t)
	for _, want := range []string{"(published by the worker, version ", "already applied: 1 (were deleted from the DLQ) [order-42]",
		"never applied: 1 (were moved to " + q.Name + ") [order-42]", "left in the DLQ: 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive lacks %q:\n%s", want, r.stdout)
		}
	}
	sqstest.WaitCount(t, srv.Client(), q.DLQURL, 0, 30*time.Second)

	fixed.Store(true)
	w = workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Concurrency: 2, Handler: router()})
	sqstest.WaitCount(t, srv.Client(), q.URL, 0, 60*time.Second)
	workertest.Stop(t, w)
	found, err := ib.Lookup(t.Context(), "order-42")
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, p := range found {
		hs = append(hs, p.Handler)
	}
	slices.Sort(hs)
	if !slices.Equal(hs, []string{"orders-paid", "orders-shipped"}) {
		t.Errorf("order-42 applied by %v; want orders-paid and orders-shipped, once each", hs)
	}
}
