package inboxtest_test

import (
	"context"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/sqsinbox/sqsinbox/inbox/inboxtest"
	"github.com/sqsinbox/sqsinbox/worker"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler"
	"github.com/sqsinbox/sqsinbox/worker/inboxhandler/handlertest"
)

// migrations stand for the service's own, numbered as the migrate package reads them (a service
// embeds its migrations directory).
var migrations = fstest.MapFS{
	"migrations/0001_pick_tasks.up.sql":   {Data: []byte(`CREATE TABLE {{schema}}.pick_tasks (order_id text NOT NULL)`)},
	"migrations/0001_pick_tasks.down.sql": {Data: []byte(`DROP TABLE {{schema}}.pick_tasks`)},
}

type orderPaid struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
}

// pick is the service's handler: one pick task per OrderPaid.
var pick = inboxhandler.JSON(func(ctx context.Context, tx pgx.Tx, _ *worker.Message, e orderPaid) error {
	_, err := tx.Exec(ctx, `INSERT INTO pick_tasks (order_id) VALUES ($1)`, e.OrderID)
	return err
})

// testPickTaskOnce is the service's handler test: in its own _test.go file it is
// func TestPickTaskOnce(t *testing.T).
func testPickTaskOnce(t *testing.T) {
	db := inboxtest.New(t, inboxtest.WithMigrations(migrations, "migrations"))
	h, err := inboxhandler.New(db.Inbox, "warehouse", nil, pick)
	if err != nil {
		t.Fatal(err)
	}
	m := handlertest.Message(`{"id":"evt_9f3k","order_id":"o-1"}`)
	outs := handlertest.Deliver(t, h, m, 2)                      // a redelivery
	outs = append(outs, handlertest.DeliverBatch(t, h, m, m)...) // the same event twice in a batch
	var tasks int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pick_tasks`).Scan(&tasks); err != nil {
		t.Fatal(err)
	}
	want := []handlertest.Outcome{"processed", "duplicate", "duplicate", "duplicate"}
	if got := handlertest.Outcomes(outs); !slices.Equal(got, want) || tasks != 1 {
		t.Fatalf("outcomes %v and %d pick tasks, want %v and 1", got, tasks, want)
	}
}

// A service's handler test: its own tables from its migrations, beside the inbox's, in a schema
// of the test's own. It runs with `go test` where TEST_DATABASE_URL names a database, or where
// the PostgreSQL server binaries are installed (Linux).
func Example() {
	// go test runs testPickTaskOnce as TestPickTaskOnce in the service's own test file.
	_ = testPickTaskOnce
}
