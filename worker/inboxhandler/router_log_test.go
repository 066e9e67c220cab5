package inboxhandler_test

import (
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/workertest"
)

// TestRouterStartLineNamesRoutes (the pass's SQS server, and PostgreSQL): a worker whose handler
// is a router logs, in its JSON start-up line, each routed type with its handler's name, where
// the type is read, and the inbox's schema and retention, as a plain inbox handler does, its
// durations as strings ("672h0m0s"), not nanoseconds.
func TestRouterStartLineNamesRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	r, err := inboxhandler.NewRouter(b.ib, &inboxhandler.RouterConfig{TypeField: "kind"})
	if err != nil {
		t.Fatal(err)
	}
	for typ, name := range map[string]string{"OrderPaid": "warehouse", "OrderCancelled": "warehouse-cancel"} {
		h, err := inboxhandler.New(b.ib, name, nil, b.effect)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Route(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "router-log", MaxReceiveCount: 5})
	logs := &lockedBuffer{}
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Handler: r})
	workertest.Stop(t, w)
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"worker: started"`) {
			line = l
		}
	}
	for _, want := range []string{
		`"routes":"OrderCancelled=warehouse-cancel,OrderPaid=warehouse"`,
		`"type_source":"attribute type, else field kind"`,
		`"unknown":"fail"`,
		`"inbox_schema":"` + b.schema + `"`,
		`"inbox_retention":"672h0m0s"`, // durations as strings, like the worker's own
		`"idle_in_transaction_timeout":"`,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the start line lacks %s:\n%s", want, line)
		}
	}
}

// TestRouterPublishesItsRoutes (the pass's SQS server, and PostgreSQL): a worker whose handler is
// a router publishes, when it starts, its queue's routes in the inbox: where the type is read,
// each type's handler, what an unrouted type gets, under the version its start line shows. A
// later start with another route publishes another version and keeps the first as Previous.
func TestRouterPublishesItsRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-a"})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "router-pub", MaxReceiveCount: 5})
	start := func(routes map[string]string) string {
		t.Helper()
		r, err := inboxhandler.NewRouter(b.ib, &inboxhandler.RouterConfig{TypeField: "type", Unknown: inboxhandler.UnknownDiscard})
		if err != nil {
			t.Fatal(err)
		}
		for typ, name := range routes {
			h, err := inboxhandler.New(b.ib, name, nil, b.effect)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Route(typ, h); err != nil {
				t.Fatal(err)
			}
		}
		logs := &lockedBuffer{}
		w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second,
			Logger: slog.New(slog.NewJSONHandler(logs, nil)), Handler: r})
		workertest.Stop(t, w)
		return logs.String()
	}
	first := map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped"}
	log := start(first)
	p, err := b.ib.PublishedRoutes(t.Context(), q.Name)
	if err != nil || p == nil {
		t.Fatalf("PublishedRoutes after the start: %v, %v", p, err)
	}
	if !maps.Equal(p.Routes.Routes, first) || p.TypeAttribute != "type" || p.TypeField != "type" || p.TypeFunc || p.Unknown != "discard" ||
		p.Instance != "task-a" || p.Previous != nil {
		t.Fatalf("published %+v; want the router's routes, type attribute and field, discard, by task-a", p)
	}
	if !strings.Contains(log, `"routes_version":"`+p.Version+`"`) {
		t.Errorf("the start line lacks routes_version %s:\n%s", p.Version, log)
	}

	second := map[string]string{"OrderPaid": "orders-paid", "OrderShipped": "orders-shipped", "OrderCancelled": "orders-cancel"}
	start(second)
	p2, err := b.ib.PublishedRoutes(t.Context(), q.Name)
	if err != nil || p2 == nil {
		t.Fatalf("PublishedRoutes after the second start: %v, %v", p2, err)
	}
	if p2.Version == p.Version || !maps.Equal(p2.Routes.Routes, second) || p2.Previous == nil || p2.Previous.Version != p.Version ||
		!maps.Equal(p2.Previous.Routes.Routes, first) {
		t.Errorf("after a start with another route: %+v (previous %+v); want a new version, the first kept as previous", p2, p2.Previous)
	}
}

// TestHandlerPublishesItsName (the pass's SQS server, and PostgreSQL): a worker whose handler is
// one inboxhandler.Handler publishes, when it starts, the handler's name as its queue's routes
// (Handler: every message goes to it; no type source, no routes), so that redrive needs no
// --handler. A Router's start on the same queue later replaces it, keeping it as Previous.
func TestHandlerPublishesItsName(t *testing.T) {
	t.Parallel()
	b := setup(t, &inbox.Config{Instance: "task-b"})
	q := srv.CreateQueue(t, sqstest.QueueOptions{Prefix: "handler-pub", MaxReceiveCount: 5})
	logs := &lockedBuffer{}
	w := workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: b.handler(t, nil),
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	workertest.Stop(t, w)
	p, err := b.ib.PublishedRoutes(t.Context(), q.Name)
	if err != nil || p == nil {
		t.Fatalf("PublishedRoutes after the start: %v, %v", p, err)
	}
	if p.Handler != "warehouse" || len(p.Routes.Routes) != 0 || p.TypeAttribute != "" || p.TypeField != "" || p.Instance != "task-b" {
		t.Fatalf("published %+v; want handler warehouse alone, by task-b", p)
	}
	if !strings.Contains(logs.String(), `"routes_version":"`+p.Version+`"`) {
		t.Errorf("the start line lacks routes_version %s:\n%s", p.Version, logs.String())
	}
	r, err := inboxhandler.NewRouter(b.ib, &inboxhandler.RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Route("OrderPaid", b.handler(t, nil)); err != nil {
		t.Fatal(err)
	}
	w = workertest.Start(t, srv.Client(), &worker.Config{QueueURL: q.URL, WaitTime: time.Second, Handler: r})
	workertest.Stop(t, w)
	p2, err := b.ib.PublishedRoutes(t.Context(), q.Name)
	if err != nil || p2 == nil || p2.Handler != "" || p2.Routes.Routes["OrderPaid"] != "warehouse" || p2.Previous == nil || p2.Previous.Handler != "warehouse" {
		t.Errorf("after a router's start: %+v (%v); want its routes, and the single handler as previous", p2, err)
	}
}
