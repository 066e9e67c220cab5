package inboxhandler_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
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
